"""SHTE's pair features in the graph equal the Python extra's.

`recipes.shte.summary_features` runs in `make_dataset` as a graph extra
(`graph_features`: the chunk's summaries written as one paragraph and
structured as a batch, the label by comparing stripped strings). The
reference is the Python extra it replaced on the training path: the
summary split by the Python `split_sentences`, rendered by
`reader.render_documents`, structured, and the label by Python `str.strip`
and set membership (`reference_features` below).
"""

import numpy as np
import pytest

from keras_hsum import recipes
from keras_hsum.features import PARAGRAPH_MASK
from keras_hsum.features import SUMMARY_PARAGRAPH_MASK
from keras_hsum.features import SUMMARY_TOKENS
from keras_hsum.features import SUMMARY_TOKEN_MASK
from keras_hsum.features import TOKENS
from keras_hsum.features import TOKEN_MASK

NAMES = (SUMMARY_TOKENS, SUMMARY_TOKEN_MASK, SUMMARY_PARAGRAPH_MASK, "label")


def reference_features(pairs, structurer):
    """The Python extra on every pair: a dict name -> [N, ...] array.

    The structurer runs once on all rendered summaries (it structures each
    example on its own); `test_reference_is_the_python_extra` checks this
    against the extra called one pair at a time.
    """
    import tensorflow as tf

    from keras_hsum.data import reader
    from keras_hsum.data.sentences import split_sentences

    texts = []
    for pair in pairs:
        sentences = tuple(split_sentences(pair.summary))
        section = reader.Section(heading=None, paragraphs=(sentences,))
        document = reader.Document(title=None, sections=(section,))
        texts.append(reader.render_documents(
            reader.Example(id="", dataset=None, title=None, query=None,
                           documents=(document,), summary="", references=())
        ))
    built = structurer(tf.constant(texts))
    labels = [
        int(pair.summary.strip() in {r.strip() for r in pair.references}) for pair in pairs
    ]
    return {
        SUMMARY_TOKENS: built[TOKENS].numpy(),
        SUMMARY_TOKEN_MASK: built[TOKEN_MASK].numpy(),
        SUMMARY_PARAGRAPH_MASK: built[PARAGRAPH_MASK].numpy(),
        "label": np.asarray(labels, np.int32),
    }


def graph_features(extra, pairs):
    """`extra.graph_features` on `pairs` as one chunk (numpy, batch axis)."""
    import tensorflow as tf

    features = {
        "summary": tf.constant([pair.summary for pair in pairs]),
        "references": tf.ragged.constant([list(pair.references) for pair in pairs],
                                         dtype=tf.string),
    }
    out = tf.function(lambda f: extra.graph_features(f, None))(features)
    return {name: value.numpy() for name, value in out.items()}


def _assert_equal(got, expected, pairs):
    assert set(got) == set(NAMES)
    for name in NAMES:
        assert got[name].dtype == expected[name].dtype, name
        assert got[name].shape == expected[name].shape, name
        for i in np.flatnonzero(
            (got[name] != expected[name]).reshape(len(pairs), -1).any(axis=1)
        ):
            raise AssertionError(
                f"{name} differs on pair {i}: summary {pairs[i].summary!r}"
            )


@pytest.fixture(scope="module")
def shte(vocabulary):
    """(recipe module, tiny config, the extra, a structurer like the extra's)."""
    from keras_hsum.data.structurer import TextStructurer

    module = recipes.get("shte")
    config = recipes.config("shte", "tiny")
    extra = module.summary_features(config, vocabulary)
    structurer = TextStructurer(
        vocabulary.proto, "sentences", config.max_summary_sentences,
        config.max_sentence_tokens,
    )
    return module, config, extra, structurer


def _pairs(module, config, examples):
    return list(module.examples(
        config, examples, training=False, seed=0, max_examples=None
    ))


@pytest.mark.parametrize("split", [pytest.param("train", marks=pytest.mark.slow), "val"])
def test_graph_features_equal_the_python_extra_on_the_sample(shte, real_examples, split):
    """Every pair of the bundled scitldr_a split (SHTE's default corpus):
    600 train pairs (slow) and 200 val pairs, one negative each."""
    module, config, extra, structurer = shte
    pairs = _pairs(module, config, real_examples("scitldr_a", split))
    assert len(pairs) == 2 * len(real_examples("scitldr_a", split))
    expected = reference_features(pairs, structurer)
    assert expected["label"].sum() == len(pairs) // 2  # one positive per example
    _assert_equal(graph_features(extra, pairs), expected, pairs)


def test_graph_features_equal_the_python_extra_on_edge_cases(shte, real_examples):
    """Line breaks, blank lines (inside a sentence too), markers (a whole
    summary, or a line of one), Unicode whitespace and references that
    differ from the summary only by surrounding whitespace."""
    import dataclasses

    module, config, extra, structurer = shte
    base = real_examples("scitldr_a", "val")[0]
    summaries = [
        "One sentence.\nTwo sentences here.",
        "  Leading and trailing.  \n\n  Blank line. Then more.\n",
        "Line\u2028separated.\u00a0\n\u3000Next One. e.g. Paris.\tTab. Dr. Smith.",
        "===",
        "---",
        "\\===",
        "\\\\---",
        "=== and more",
        "  \n",
        "A. B. Jones wrote it. 3.5 dollars! \"Quoted.\" (Bracket.) Yes?!  No.",
        "First.\r\nSecond.\r\n\r\nThird.",
        "A sentence broken\n\nby a blank line.",
        "Text on a line\n===\nthen a marker line. \\---\n\n---\nEnd.",
    ]
    pairs = [
        dataclasses.replace(
            base, summary=summary,
            references=(summary.strip() + "\n", "other") if i % 2 else ("other",),
        )
        for i, summary in enumerate(summaries)
    ]
    expected = reference_features(pairs, structurer)
    assert expected["label"].tolist() == [i % 2 for i in range(len(pairs))]
    _assert_equal(graph_features(extra, pairs), expected, pairs)


def test_reference_is_the_python_extra(shte, real_examples):
    """The batched reference equals the recipe's Python extra called on one
    pair at a time (its eager per-example path)."""
    module, config, extra, structurer = shte
    pairs = _pairs(module, config, real_examples("scitldr_a", "val")[:3])
    expected = reference_features(pairs, structurer)
    for i, pair in enumerate(pairs):
        one = extra(pair, None)
        for name in NAMES:
            np.testing.assert_array_equal(one[name], expected[name][i], err_msg=name)


@pytest.mark.slow  # traces the whole pipeline: ~10 s
def test_make_dataset_runs_the_extra_in_the_graph(shte, vocabulary, real_examples):
    """The recipe's batches carry the reference's features, and the extra
    takes the graph route (no `tf.py_function`)."""
    from keras_hsum.data.extras import runs_in_graph

    module, config, extra, structurer = shte
    assert runs_in_graph(extra, "sentences")
    examples = real_examples("scitldr_a", "val")[:8]
    pairs = _pairs(module, config, examples)
    expected = reference_features(pairs, structurer)
    batches = module.make_dataset(config, examples, vocabulary, training=False)
    got = {name: [] for name in NAMES}
    for inputs, labels, _ in batches.as_numpy_iterator():
        for name in NAMES[:3]:
            got[name].append(inputs[name])
        got["label"].append(labels)
    got = {name: np.concatenate(values) for name, values in got.items()}
    _assert_equal(got, expected, pairs)
