"""A training run's vocabulary: `out/vocabulary.model` or `out/tokenizer/`.

A run's SentencePiece vocabulary, `out/vocabulary.model`, is trained on the
run's training split, or copied: from the run it warm-starts from, from its
ranker run, or from the shards it reads (their token ids only mean
something with their pieces).

A run on a pretrained backbone (config `backbone`: a keras-hub preset name
or folder) trains none: the preset's own tokenizer (a `PresetVocabulary`)
is saved to `out/tokenizer/` (`tokenizer.json` and its assets) and read
from there by later commands (resume, export), so a run folder serves
without the preset. `run_vocabulary(out)` loads whichever the folder holds.
"""

import filecmp
import os
import shutil

from keras_hsum import run_folder
from keras_hsum.data.reader import read_examples
from keras_hsum.data.vocabulary import Vocabulary
from keras_hsum.data.vocabulary import corpus_sentences


RUN_VOCABULARY = run_folder.VOCABULARY
RUN_TOKENIZER = run_folder.TOKENIZER


def run_vocabulary(out):
    """The vocabulary of the run folder `out`: a `PresetVocabulary` from
    `out/tokenizer/` (a backbone run), else the `Vocabulary` of
    `out/vocabulary.model`.

    Raises:
        ValueError: `out` holds neither.
    """
    tokenizer = os.path.join(out, RUN_TOKENIZER)
    if os.path.isdir(tokenizer):
        from keras_hsum.data.preset_vocabulary import PresetVocabulary

        return PresetVocabulary.load(tokenizer)
    path = os.path.join(out, RUN_VOCABULARY)
    if os.path.exists(path):
        return Vocabulary.load(path)
    raise ValueError(
        f"{out!r} is not a run folder: it holds neither {RUN_VOCABULARY} nor "
        f"{RUN_TOKENIZER}/ (expected a folder written by keras-hsum train)."
    )


def load_or_train_vocabulary(out, train_source, vocabulary_size, init_from=None,
                             ranker_run=None, backbone=None):
    """`out/vocabulary.model`, trained on the training split when missing;
    with `backbone`, the preset's tokenizer in `out/tokenizer/` instead.

    With `init_from` (a run folder to warm-start from), that run's
    vocabulary is copied instead: its weights only mean something with its
    pieces. Else with `ranker_run` (a config with rank="learned": the
    ranker reads this run's token ids), the ranker run's vocabulary is
    copied. A run folder that already holds another vocabulary is refused.

    Args:
        backbone: None, or the run's backbone preset (a keras-hub preset
            name, handle or folder): see `preset_run_vocabulary`;
            `train_source` and `vocabulary_size` are then not read.

    Returns:
        A `Vocabulary`, or a `PresetVocabulary` with `backbone`.
    """
    if backbone is not None:
        return preset_run_vocabulary(
            out, backbone, init_from=init_from, ranker_run=ranker_run
        )
    if os.path.isdir(os.path.join(out, RUN_TOKENIZER)):
        raise ValueError(
            f"{out!r} holds a backbone preset's tokenizer ({RUN_TOKENIZER}/), "
            "and this run trains a SentencePiece vocabulary (no `backbone`); "
            "choose a new --out, or set the run's backbone."
        )
    path = os.path.join(out, RUN_VOCABULARY)
    flag = "--init-from" if init_from is not None else "ranker_run"
    init_from = init_from if init_from is not None else ranker_run
    if init_from is not None:
        source = os.path.join(init_from, RUN_VOCABULARY)
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


def _same_tree(first, second):
    """Whether two folders hold the same files with the same bytes."""
    def files(root):
        return sorted(
            os.path.relpath(os.path.join(folder, name), root)
            for folder, _, names in os.walk(root) for name in names
        )

    names = files(first)
    return names == files(second) and all(
        filecmp.cmp(os.path.join(first, n), os.path.join(second, n), shallow=False)
        for n in names
    )


def _install_tree(source, path):
    """Copies or writes the folder `path` through a temporary one and a
    rename (workers of a multi-worker run may do it at once; a reader never
    sees half a folder). `source`: a folder to copy, or a callable writing
    one into the path it receives."""
    temporary = f"{path}.{os.getpid()}.tmp"
    shutil.rmtree(temporary, ignore_errors=True)
    if callable(source):
        source(temporary)
    else:
        shutil.copytree(source, temporary)
    try:
        os.rename(temporary, path)
    except OSError:
        if not os.path.isdir(path):
            raise
        shutil.rmtree(temporary, ignore_errors=True)  # another worker won


def preset_run_vocabulary(out, backbone, init_from=None, ranker_run=None):
    """The tokenizer of a backbone run, `out/tokenizer/`.

    When `out/tokenizer/` is missing, it is copied from the run `init_from`
    warm-starts from (which must be a run on a preset too), else the
    preset's tokenizer is loaded (`keras_hub.tokenizers.Tokenizer.
    from_preset(backbone)`) and saved there. Later commands (resume,
    export) read `out/tokenizer/` and need not reach the preset.

    Args:
        out: the run folder.
        backbone: a keras-hub preset name (`"bart_base_en"`), a `kaggle://`
            / `hf://` handle, or a local preset folder (its `config.json`
            names the backbone class; `Backbone.save_to_preset` and
            `Tokenizer.save_to_preset` write one).
        init_from: optional run folder to warm-start from.
        ranker_run: must be None (a learned ranker reads a SentencePiece
            vocabulary of this library).

    Returns:
        A `PresetVocabulary`.

    Raises:
        ValueError: `out` (or `init_from`) holds a SentencePiece
            `vocabulary.model`, or another tokenizer than `init_from`'s, or
            `ranker_run` is set.
    """
    from keras_hsum.data.preset_vocabulary import PresetVocabulary

    if ranker_run is not None:
        raise ValueError(
            f"ranker_run {ranker_run!r} (rank='learned') reads a keras_hsum "
            f"SentencePiece vocabulary; a run on the backbone {backbone!r} "
            "tokenizes with the preset's tokenizer. Rank with 'tfidf' or 'order'."
        )
    path = os.path.join(out, RUN_TOKENIZER)
    for folder, flag in ((out, "--out"), (init_from, "--init-from")):
        if folder is not None and os.path.exists(os.path.join(folder, RUN_VOCABULARY)):
            raise ValueError(
                f"{flag} {folder!r} holds a SentencePiece {RUN_VOCABULARY}; a "
                f"run on the backbone {backbone!r} tokenizes with the preset's "
                f"own tokenizer ({RUN_TOKENIZER}/). Choose "
                + ("a new --out." if flag == "--out" else
                   "a run on the same backbone to warm-start from.")
            )
    if init_from is not None:
        source = os.path.join(init_from, RUN_TOKENIZER)
        if not os.path.isdir(source):
            raise ValueError(
                f"--init-from {init_from!r} is not a backbone run folder: it has "
                f"no {RUN_TOKENIZER}/ (expected a folder written by keras-hsum "
                "train with a backbone)."
            )
        if os.path.isdir(path):
            if not _same_tree(source, path):
                raise ValueError(
                    f"{out!r} holds another tokenizer than --init-from "
                    f"{init_from!r}; choose a new --out."
                )
        else:
            _install_tree(source, path)
        return PresetVocabulary.load(path)
    if not os.path.isdir(path):
        os.makedirs(out, exist_ok=True)
        vocabulary = PresetVocabulary.from_preset(backbone)
        _install_tree(vocabulary.save, path)
    return PresetVocabulary.load(path)


def shard_vocabulary(train, out, init_from=None, backbone=None):
    """The vocabulary the shards in `train` (a shard folder) were tokenized
    with, copied to `out/vocabulary.model` when missing.

    Raises:
        ValueError: when `out` or `init_from` already holds another
            vocabulary, or with `backbone` (shards record a SentencePiece
            vocabulary; a backbone run reads JSONL).
    """
    from keras_hsum.data import shards

    if backbone is not None:
        raise ValueError(
            f"The shards in {os.path.dirname(train)!r} were tokenized with a "
            f"SentencePiece {shards.VOCABULARY_FILE}; a run on the backbone "
            f"{backbone!r} tokenizes with the preset's own tokenizer, which "
            "shards do not record. Give --data the JSONL files (or folder) "
            "instead of shards."
        )

    expected = shards.read_spec(train)["vocabulary"]["sha256"]
    source = os.path.join(train, shards.VOCABULARY_FILE)
    for other in filter(None, (
        os.path.join(out, RUN_VOCABULARY),
        init_from and os.path.join(init_from, RUN_VOCABULARY),
    )):
        if os.path.exists(other) and shards.file_sha256(other) != expected:
            raise ValueError(
                f"{other!r} is another vocabulary than the one the shards in "
                f"{os.path.dirname(train)!r} were tokenized with ({source}); "
                "choose a new --out, or preprocess with --vocab "
                f"{other}."
            )
    path = os.path.join(out, RUN_VOCABULARY)
    if not os.path.exists(path):
        temporary = f"{path}.{os.getpid()}.tmp"
        shutil.copyfile(source, temporary)
        os.replace(temporary, path)
    return Vocabulary.load(path)
