"""A training run's SentencePiece vocabulary, `out/vocabulary.model`.

Trained on the run's training split, or copied: from the run it
warm-starts from, from its ranker run, or from the shards it reads (their
token ids only mean something with their pieces).
"""

import filecmp
import os
import shutil

from keras_hsum.data.reader import read_examples
from keras_hsum.data.vocabulary import Vocabulary
from keras_hsum.data.vocabulary import corpus_sentences


def load_or_train_vocabulary(out, train_source, vocabulary_size, init_from=None,
                             ranker_run=None):
    """`out/vocabulary.model`, trained on the training split when missing.

    With `init_from` (a run folder to warm-start from), that run's
    vocabulary is copied instead: its weights only mean something with its
    pieces. Else with `ranker_run` (a config with rank="learned": the
    ranker reads this run's token ids), the ranker run's vocabulary is
    copied. A run folder that already holds another vocabulary is refused.
    """
    path = os.path.join(out, "vocabulary.model")
    flag = "--init-from" if init_from is not None else "ranker_run"
    init_from = init_from if init_from is not None else ranker_run
    if init_from is not None:
        source = os.path.join(init_from, "vocabulary.model")
        if not os.path.exists(source):
            raise ValueError(
                f"{flag} {init_from!r} is not a run folder: it has no "
                "vocabulary.model (expected a folder written by keras-hsum train)."
            )
        if os.path.exists(path):
            if not filecmp.cmp(source, path, shallow=False):
                raise ValueError(
                    f"{out!r} holds another vocabulary than {flag} "
                    f"{init_from!r}; choose a new --out."
                )
        else:
            temporary = f"{path}.{os.getpid()}.tmp"
            shutil.copyfile(source, temporary)
            os.replace(temporary, path)
        return Vocabulary.load(path)
    if os.path.exists(path):
        return Vocabulary.load(path)
    examples = (
        train_source if isinstance(train_source, list) else read_examples(train_source)
    )
    vocabulary = Vocabulary.train(
        corpus_sentences(examples), vocabulary_size=vocabulary_size
    )
    # Through a temporary file and a rename: workers of a multi-worker run
    # may train and write it at the same time, and a reader must never see
    # half a file.
    temporary = f"{path}.{os.getpid()}.tmp"
    vocabulary.save(temporary)
    os.replace(temporary, path)
    return vocabulary


def shard_vocabulary(train, out, init_from=None):
    """The vocabulary the shards in `train` (a shard folder) were tokenized
    with, copied to `out/vocabulary.model` when missing.

    Raises:
        ValueError: when `out` or `init_from` already holds another
            vocabulary.
    """
    from keras_hsum.data import shards

    expected = shards.read_spec(train)["vocabulary"]["sha256"]
    source = os.path.join(train, shards.VOCABULARY_FILE)
    for other in filter(None, (
        os.path.join(out, "vocabulary.model"),
        init_from and os.path.join(init_from, "vocabulary.model"),
    )):
        if os.path.exists(other) and shards.file_sha256(other) != expected:
            raise ValueError(
                f"{other!r} is another vocabulary than the one the shards in "
                f"{os.path.dirname(train)!r} were tokenized with ({source}); "
                "choose a new --out, or preprocess with --vocab "
                f"{other}."
            )
    path = os.path.join(out, "vocabulary.model")
    if not os.path.exists(path):
        temporary = f"{path}.{os.getpid()}.tmp"
        shutil.copyfile(source, temporary)
        os.replace(temporary, path)
    return Vocabulary.load(path)
