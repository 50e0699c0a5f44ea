"""The learned paragraph ranker of a `ranker` run, for the structuring graph.

HT's first stage (Liu & Lapata 2019, §3): a trained `ParagraphRanker`
scores the candidate paragraphs and the top L go to the summarizer.
`TextStructurer(..., rank="learned", ranker_run=RUN)` runs it inside its
graph (so in `make_dataset`'s `tf.data` map and in the exported
SavedModel alike); this module reads the run folder it needs.

What `TextStructurer` does with it, per example: every one of the
summarizer's own rows (its T, its packing, its vocabulary), with the
title/query cut to the ranker run's `context_length` tokens, goes through
the ranker, as HT's ranker scores every input paragraph; the rows are
sorted by score, best first, ties in reading order, and the first P
(`max_units`) are kept; `rank_score` holds their ranker scores. The ranker
scores each row on its own, so the number of rows it reads is not bound to
the `max_paragraphs` the ranker run trained with.

The ranker reads token ids, so it must share the summarizer's SentencePiece
vocabulary: a ranker run with another `vocabulary.model` is refused
(`keras-hsum train` gives a `rank=learned` run the ranker run's vocabulary).
"""

import hashlib
import os

from keras_hsum import run_folder

RANKER_RECIPE = "ranker"
RANKER_CLASS = "keras_hsum>ParagraphRanker"
RUN_FILES = (run_folder.CONFIG, run_folder.LAST_CHECKPOINT, run_folder.VOCABULARY)


def _sha256(data):
    return hashlib.sha256(data).hexdigest()


def load_ranker_run(run, vocabulary_proto=None):
    """The ranker of a `keras-hsum train --recipe ranker` run folder.

    Args:
        run: the ranker run folder (config.json, model.keras,
            vocabulary.model).
        vocabulary_proto: the serialized SentencePiece model the ranker's
            inputs are tokenised with; None skips the check.

    Returns:
        `(model, context_length)`: the `ParagraphRanker` (its last weights,
        model.keras) and C_r = the run's `context_length`.

    Raises:
        ValueError: the folder lacks a file, is not a `ranker` run, or its
            vocabulary is another than `vocabulary_proto`.
    """
    import keras

    # The data layer does not import the models: loading needs the
    # ParagraphRanker class registered, which importing keras_hsum.models
    # (or the recipes, the trainer, the export) does.
    ranker_class = keras.saving.get_registered_object(RANKER_CLASS)
    if ranker_class is None:
        raise ValueError(
            f"Loading ranker_run {os.fspath(run)!r} needs the {RANKER_CLASS!r} "
            "class registered with Keras: import keras_hsum.models (the recipes, "
            "`keras-hsum train` and `keras-hsum export` do) before structuring "
            "with rank='learned'."
        )
    run = os.fspath(run)
    missing = [name for name in RUN_FILES if not os.path.isfile(run_folder.path(run, name))]
    if missing:
        raise ValueError(
            f"ranker_run {run!r} must be a folder written by `keras-hsum train "
            f"--recipe ranker` holding {', '.join(RUN_FILES)}; missing {missing}. "
            "Train the ranker first (or point ranker_run / --ranker-run at its folder)."
        )
    resolved = run_folder.read_config(run, flag="ranker_run")
    recipe = resolved["recipe"]
    if recipe != RANKER_RECIPE:
        raise ValueError(
            f"ranker_run {run!r} must be a {RANKER_RECIPE!r} run; its config.json "
            f"names recipe {recipe!r}. Point it at a `keras-hsum train --recipe "
            "ranker` folder."
        )
    with open(run_folder.path(run, run_folder.VOCABULARY), "rb") as handle:
        ranker_proto = handle.read()
    if vocabulary_proto is not None and ranker_proto != bytes(vocabulary_proto):
        raise ValueError(
            f"ranker_run {run!r} was trained on another SentencePiece vocabulary "
            f"(vocabulary.model sha256 {_sha256(ranker_proto)[:12]}...) than the "
            f"summarizer's (sha256 {_sha256(bytes(vocabulary_proto))[:12]}...); the "
            "ranker reads the summarizer's token ids, so both must use one "
            "vocabulary. Train the summarizer with `--set rank=learned --set "
            "ranker_run=...` in a new run folder (it then takes the ranker's "
            "vocabulary.model), or train the ranker on the summarizer's vocabulary."
        )
    model = keras.saving.load_model(run_folder.path(run, run_folder.LAST_CHECKPOINT),
                                    compile=False)
    if not isinstance(model, ranker_class):
        raise ValueError(
            f"ranker_run {run!r}: model.keras holds a {type(model).__name__}, "
            "expected a ParagraphRanker."
        )
    context_length = int(resolved.get("config", {}).get("context_length", 32))
    return model, context_length
