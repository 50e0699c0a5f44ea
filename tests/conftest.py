"""Shared fixtures: real examples from the bundled sample and a vocabulary.

Everything heavy is session-scoped and built lazily, so test folders that do
not ask for it (e.g. the backend-agnostic layer tests run under JAX) pay
nothing: this module imports neither TensorFlow nor sentencepiece.
"""

import functools
import os
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    # `pytest` (not `python -m pytest`) does not put the checkout on the path.
    sys.path.insert(0, REPO_ROOT)

# The bundled sample splits: (dataset, split).
SAMPLE_SPLITS = (
    ("scisummnet", "train"),
    ("scisummnet", "val"),
    ("qmsum_general", "train"),
    ("qmsum_general", "val"),
    ("qmsum_goldspan", "train"),
    ("qmsum_goldspan", "val"),
    ("fewsum_amazon", "train"),
    ("fewsum_amazon", "val"),
    ("fewsum_yelp", "train"),
    ("fewsum_yelp", "val"),
    ("scitldr_a", "train"),
    ("scitldr_a", "val"),
    ("cnndm", "summeval100"),
)


@functools.lru_cache(maxsize=None)
def _load(name, split):
    from keras_hsum.data import corpora
    from keras_hsum.data import reader

    return tuple(reader.read_jsonl(corpora.sample_path(name, split)))


@pytest.fixture(scope="session")
def real_examples():
    """`real_examples(name, split)`: the bundled sample as a tuple of Examples."""
    return _load


@pytest.fixture(scope="session")
def vocabulary():
    """A `Vocabulary` (V = 4000) trained once on scisummnet + qmsum_general."""
    from keras_hsum.data.vocabulary import Vocabulary
    from keras_hsum.data.vocabulary import corpus_sentences

    examples = _load("scisummnet", "train") + _load("qmsum_general", "train")
    return Vocabulary.train(corpus_sentences(examples), vocabulary_size=4000)


@pytest.fixture(scope="session")
def foreign_vocabulary():
    """The bundled foreign SentencePiece model (32k pieces, no separators)."""
    from keras_hsum.data import corpora
    from keras_hsum.data.vocabulary import Vocabulary

    return Vocabulary.load(corpora.sample_tokenizer_path())


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Marks the cases `tests/suite_budget.py` leaves to the slow set.

    Runs before `-m` deselects. When pytest was given folders only (as
    `scripts/test.sh` does), an id listed there whose file was collected but
    which no collected test has is an error: a renamed test would otherwise
    slip back into the default suite unnoticed.
    """
    from tests import suite_budget

    ids = {item.nodeid for item in items}
    for item in items:
        if item.nodeid in suite_budget.SLOW:
            item.add_marker(pytest.mark.slow)
        if item.nodeid in suite_budget.JAX_SLOW:
            item.add_marker(pytest.mark.jax_slow)
    if all(os.path.isdir(arg) for arg in config.args):
        files = {nodeid.split("::")[0] for nodeid in ids}
        stale = sorted(
            nodeid
            for nodeid in suite_budget.SLOW | suite_budget.JAX_SLOW
            if nodeid.split("::")[0] in files and nodeid not in ids
        )
        if stale:
            raise pytest.UsageError(
                "tests/suite_budget.py lists tests that no longer exist (renamed "
                "or removed?); update the list: " + ", ".join(stale)
            )
