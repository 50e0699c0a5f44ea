"""A run folder's file names, and reading and writing its JSON files
(backend-free: no TensorFlow, no Keras).

`keras-hsum train --out DIR` writes a run folder, which `keras-hsum export`,
`--init-from`, a `rank="learned"` structurer (a ranker run), the PHT
predictor recipe (a teacher run), the demo and the benchmarks read:

    DIR/config.json              CONFIG: the resolved configuration (recipe,
                                 config_name, config, data, strategy, ...)
    DIR/vocabulary.model         VOCABULARY: the SentencePiece vocabulary
    DIR/tokenizer/               TOKENIZER: a backbone run's preset tokenizer
                                 (instead of vocabulary.model)
    DIR/model.keras              LAST_CHECKPOINT: the last epoch's weights
    DIR/best.keras               BEST_CHECKPOINT: the best validation epoch's
    DIR/best.json                BEST_STATE: what picked best.keras
    DIR/epochs/epoch-NNN.keras   `epoch_checkpoint(N)`, with
                                 keep_epoch_checkpoints=True
    DIR/history.json             HISTORY: one entry per epoch
    DIR/logs/                    LOGS: TensorBoard
    DIR/backup/                  BACKUP: the crash-safe backup a resumed run
                                 restores

A shard folder of `keras-hsum preprocess` holds its vocabulary under the
same name (`VOCABULARY`).

This module is the one place that spells these names. It sits at the
package's top level, beneath data/, training/, export/ and the recipes,
because each of them reads run folders (training alone is TensorFlow-only);
what training decides about a folder (resuming, the resolved config's
comparison) stays in `keras_hsum.training.run_folder`.

Example:
>>> from keras_hsum import run_folder
>>> run_folder.path("runs/pht", run_folder.LAST_CHECKPOINT)
'runs/pht/model.keras'
"""

import json
import os

CONFIG = "config.json"
VOCABULARY = "vocabulary.model"
TOKENIZER = "tokenizer"
TOKENIZER_FILE = "tokenizer.json"  # in TOKENIZER/ (PresetVocabulary.save)
LAST_CHECKPOINT = "model.keras"
BEST_CHECKPOINT = "best.keras"
BEST_STATE = "best.json"
EPOCHS = "epochs"
HISTORY = "history.json"
LOGS = "logs"
BACKUP = "backup"

CHECKPOINTS = {"last": LAST_CHECKPOINT, "best": BEST_CHECKPOINT}
"""The single-file checkpoints of every run folder, by the name
`--checkpoint` and `--init-checkpoint` give them."""

TRAINING_OUTPUTS = (LAST_CHECKPOINT, BEST_CHECKPOINT, HISTORY)
"""Files a training step writes (with a non-empty BACKUP/): a folder with
none of them never trained."""


def path(run, *names):
    """`run/names...` (`run` a str or path-like)."""
    return os.path.join(os.fspath(run), *names)


def epoch_checkpoint(epoch):
    """The file, relative to a run folder, holding the weights of the
    1-based `epoch` when the run keeps every epoch: `epochs/epoch-007.keras`."""
    return os.path.join(EPOCHS, f"epoch-{int(epoch):03d}.keras")


def vocabulary_file(run):
    """The file, relative to `run`, that holds its vocabulary:
    `tokenizer/tokenizer.json` for a run on a backbone preset (a
    `tokenizer/` folder), else `vocabulary.model` (whether it exists or not)."""
    if os.path.isdir(path(run, TOKENIZER)):
        return os.path.join(TOKENIZER, TOKENIZER_FILE)
    return VOCABULARY


def read_config(run, flag="--run"):
    """The resolved configuration `keras-hsum train` wrote to `run/config.json`.

    Args:
        run: a run folder.
        flag: the option that named `run`, for the messages.

    Returns:
        The dict (with at least "recipe" and "config").

    Raises:
        ValueError: the file is missing, is not JSON, or names no recipe.
    """
    file = path(run, CONFIG)
    try:
        with open(file) as handle:
            resolved = json.load(handle)
    except FileNotFoundError:
        raise ValueError(
            f"{flag} {os.fspath(run)!r} has no {CONFIG}; expected a folder written "
            "by `keras-hsum train`."
        ) from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{flag} {os.fspath(run)!r}: {file} is not valid JSON ({error}).") from None
    if not isinstance(resolved, dict) or resolved.get("recipe") is None:
        raise ValueError(
            f"{flag} {os.fspath(run)!r}: {file} names no recipe; expected the "
            f"{CONFIG} that `keras-hsum train` writes."
        )
    return resolved


def write_json(file, value, **dump_options):
    """Writes `value` as JSON to `file` atomically (a temporary file named
    after the process, then a rename): a reader, or another worker of a
    multi-worker run writing the same file, never sees half of it."""
    temporary = f"{file}.{os.getpid()}.tmp"
    with open(temporary, "w") as handle:
        json.dump(value, handle, **dump_options)
    os.replace(temporary, file)


def write_config(run, resolved):
    """Writes `run/config.json` (atomically, sorted keys)."""
    write_json(path(run, CONFIG), resolved, indent=2, sort_keys=True)


def read_history(run):
    """`run/history.json` (`{"epochs": [one dict per epoch]}`), or no epochs
    when the run has not finished one."""
    file = path(run, HISTORY)
    if os.path.exists(file):
        with open(file) as handle:
            return json.load(handle)
    return {"epochs": []}


def trained_anything(run):
    """Whether `run` holds anything a training step wrote: a checkpoint, a
    history or a backup."""
    if any(os.path.exists(path(run, name)) for name in TRAINING_OUTPUTS):
        return True
    backup = path(run, BACKUP)
    return os.path.isdir(backup) and bool(os.listdir(backup))
