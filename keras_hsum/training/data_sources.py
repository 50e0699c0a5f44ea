"""Where a training run's examples come from.

`resolve_data` turns `--data` (a folder of train/val splits, one JSONL file,
or nothing: the recipe's default corpus) into the run's (train, validation)
sources, holding out part of the training examples when asked;
`training_source` expands the training examples for `train_references`;
`shard_splits` and `shard_sources` do the same for a folder of shards
written by `keras-hsum preprocess`. `keras_hsum.training.trainer.train`
reads them in that order.
"""

import contextlib
import functools
import os
import warnings

import tensorflow as tf

from keras_hsum.data import corpora
from keras_hsum.data.labels import principal_sentence_examples
from keras_hsum.data.reader import ReadReport
from keras_hsum.data.reader import leave_one_out_examples
from keras_hsum.data.reader import one_example_per_reference
from keras_hsum.data.reader import read_examples


def _split_file(folder, split):
    for name in corpora.SPLIT_FILE_STEMS[split]:
        for suffix in (".jsonl.gz", ".jsonl", ".json.gz"):  # what read_examples reads
            path = os.path.join(folder, name + suffix)
            if os.path.exists(path):
                return path
    return None


def shard_splits(data):
    """`(train, val)` shard folders of a `--data` folder written by
    `keras-hsum preprocess` (`data/train`, `data/val`), or None when `data`
    is not such a folder.

    Raises:
        ValueError: for a shard folder without the train/val layout.
    """
    from keras_hsum.data import shards

    if data is None or not os.path.isdir(data):
        return None
    train, val = os.path.join(data, "train"), os.path.join(data, "val")
    if shards.is_shard_folder(data):
        raise ValueError(
            f"--data {data!r} is one shard folder; training reads a folder holding "
            "two: train/ (keras-hsum preprocess --split train --out "
            f"{os.path.join(data, 'train')}) and val/ (--split val --vocab "
            "train/vocabulary.model). Move the shards into train/ and preprocess "
            "a validation split."
        )
    if not shards.is_shard_folder(train):
        return None
    if not shards.is_shard_folder(val):
        raise ValueError(
            f"--data {data!r} has train shards but no val/ shard folder; write it with "
            f"keras-hsum preprocess --split val --out {val} --vocab "
            f"{os.path.join(train, shards.VOCABULARY_FILE)}."
        )
    return train, val


def resolve_data(data, dataset, validation_fraction=0.1, holdout=0.0):
    """The (train, validation) sources of a run.

    Args:
        data: None (the recipe's default corpus `dataset`, found by
            `keras_hsum.data.corpora.corpus_path`), a folder holding
            `train.jsonl[.gz]` and `val.jsonl[.gz]`, or one JSONL/text file
            (its last `validation_fraction` of examples validate).
        dataset: the recipe's default corpus name.
        holdout: when above 0, the last `holdout` fraction of the training
            examples validate whatever `data` holds: a validation split is
            then not read (`RecipeConfig.validation_holdout`).

    Returns:
        `(train, validation)`: paths, or lists of `Example` for a split file
        or a hold-out.
    """
    if not 0.0 <= holdout < 1.0:
        raise ValueError(
            f"`validation_holdout` must be a fraction in [0, 1), received {holdout!r}."
        )
    if data is None:
        train, val = corpora.corpus_path(dataset, "train"), corpora.corpus_path(dataset, "val")
    elif os.path.isdir(data):
        train = _split_file(data, "train")
        val = _split_file(data, "val")
        if train is None:
            raise ValueError(
                f"--data folder {data!r} has no train split: expected "
                f"train.jsonl or train.jsonl.gz, found {sorted(os.listdir(data))}."
            )
    elif os.path.isfile(data):
        train, val = data, None
    else:
        raise ValueError(
            f"--data {data!r} is neither a folder nor a file. Give a folder with "
            "train/val JSONL splits, one JSONL file, or omit it to use the "
            f"recipe's default corpus ({dataset})."
        )
    if holdout > 0:
        return _split_examples(train, holdout)
    if val is None:
        return _split_examples(train, validation_fraction)
    return train, val


def _split_examples(path, validation_fraction):
    examples = list(read_examples(path))
    if len(examples) < 2:
        raise ValueError(
            f"{path!r} holds {len(examples)} example(s); training needs at least "
            "2 (one to train, one to validate)."
        )
    held_out = max(1, int(round(len(examples) * validation_fraction)))
    return examples[:-held_out], examples[-held_out:]


TRAIN_REFERENCES = ("primary", "all", "leave_one_out", "principal_sentence", "gap_sentence")


def training_source(source, train_references):
    """The training examples for `config.train_references`.

    Args:
        source: a path or a list of `Example` (see `resolve_data`).
        train_references: "primary" (`source` unchanged), "all" (a list
            with one example per reference, `one_example_per_reference`),
            "leave_one_out" (each document of a multi-document example as
            the summary of the others, `leave_one_out_examples`) or
            "principal_sentence" (each passage of at most 250 words with its
            principal sentence as the summary,
            `principal_sentence_examples`) or "gap_sentence" (the same pairs
            with that sentence removed from the input, as PEGASUS does); the
            last three use no human reference. Unreadable lines are skipped and counted in
            a warning, as the pipeline would.

    Returns:
        A path or a list of `Example`.
    """
    if train_references not in TRAIN_REFERENCES:
        raise ValueError(
            f"`train_references` must be one of {list(TRAIN_REFERENCES)}, "
            f"received {train_references!r}."
        )
    if train_references == "primary":
        return source
    report = ReadReport()
    examples = (
        read_examples(source, skip_invalid=True, report=report)
        if isinstance(source, (str, os.PathLike))
        else source
    )
    expand = {
        "all": one_example_per_reference,
        "leave_one_out": leave_one_out_examples,
        "principal_sentence": principal_sentence_examples,
        "gap_sentence": functools.partial(principal_sentence_examples, remove=True),
    }[train_references]
    pairs = list(expand(examples))
    if not pairs:
        passages = f"{train_references} needs sections with passages of at least 3 sentences."
        raise ValueError(
            f"train_references={train_references!r} left no training example: "
            + {
                "leave_one_out": "leave_one_out needs examples with at least 3 documents.",
                "principal_sentence": passages,
                "gap_sentence": passages,
            }.get(train_references, "the training split is empty.")
        )
    if report.skipped:
        warnings.warn(
            f"train_references={train_references!r}: skipped {report.skipped} unreadable "
            f"line(s) of {os.fspath(source)!r}; the first: {report.errors[0]}",
            stacklevel=2,
        )
    return pairs



def check_trainable(source):
    """Raises a ValueError unless `source` (a path or a list of `Example`)
    holds an example with source text and a reference summary: without one
    the pipeline yields no batch and `fit` would "train" on nothing. Reads
    only up to the first such example."""
    examples = (read_examples(source, skip_invalid=True)
                if isinstance(source, (str, os.PathLike)) else source)
    read = without_summary = 0
    for example in examples:
        read += 1
        if not example.summary.strip():
            without_summary += 1
        elif example.sentences():
            return
    raise ValueError(
        f"The training data has no example with both source text and a reference "
        f"summary ({read} read from "
        + (f"{len(source)} training examples" if isinstance(source, list)
           else repr(os.fspath(source)))
        + f", {without_summary} without a summary); training needs (document, "
        "summary) pairs."
    )


def shard_sources(sharded, out, recipe_name, config, data_service=None):
    """The `(train, val)` `ShardSource`s of a run on shard folders.

    Args:
        sharded: the `(train, val)` shard folders (`shard_splits`).
        out: the run folder (it names the tf.data service job).
        recipe_name: the recipe the shards must have been written for.
        config: the recipe config (its `train_references` and
            `validation_holdout` must keep their defaults).
        data_service: a tf.data service dispatcher address, or None.

    Raises:
        ValueError: for settings that build examples from text, shards
            tokenized with two vocabularies, or training shards without
            an example.
    """
    from keras_hsum.data import shards

    train, val = sharded
    if config.train_references != "primary" or config.validation_holdout:
        raise ValueError(
            "Shards hold structured examples, so train_references="
            f"{config.train_references!r} and validation_holdout="
            f"{config.validation_holdout} (which build examples from the text) "
            "cannot apply; train from JSONL or keep the defaults."
        )
    specs = {split: shards.read_spec(folder) for split, folder in (("train", train), ("val", val))}
    vocabularies = {split: spec["vocabulary"]["sha256"] for split, spec in specs.items()}
    if vocabularies["train"] != vocabularies["val"]:
        raise ValueError(
            f"The train and val shards of {os.path.dirname(train)!r} were tokenized "
            f"with different vocabularies (sha256 {vocabularies['train']} and "
            f"{vocabularies['val']}); preprocess val with --vocab "
            f"{os.path.join(train, shards.VOCABULARY_FILE)}."
        )
    if specs["train"]["examples"] == 0:
        raise ValueError(
            f"The training shards {train!r} hold no example "
            f"(skipped: {specs['train'].get('skipped')}); training needs examples."
        )
    service = None
    if data_service is not None:
        service = (data_service, f"keras_hsum_{recipe_name}_{os.path.basename(os.path.abspath(out))}")
    return (
        shards.ShardSource(train, data_service=service, recipe=recipe_name),
        shards.ShardSource(val, recipe=recipe_name),
    )


@contextlib.contextmanager
def naming_corrupt_shards(sharded):
    """Turns TensorFlow's DataLossError on a corrupt shard record (which
    names no file) into `verify_shards`' ShardError naming the shard file
    and record; other errors, and data that is not sharded (`sharded` is
    None), pass as they are."""
    try:
        yield
    except tf.errors.DataLossError as error:
        if sharded is None:
            raise
        from keras_hsum.data import shards

        for folder in sharded:
            try:
                shards.verify_shards(folder)
            except shards.ShardError as named:
                raise named from error
        raise


def describe_source(source):
    """A source (`resolve_data`'s or `shard_sources`') in words, for errors."""
    if isinstance(source, list):
        return f"{len(source)} example(s) held out from the training data"
    if hasattr(source, "folder"):
        return f"shard folder {source.folder!r}"
    return repr(os.fspath(source))
