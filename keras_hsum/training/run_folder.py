"""A training run's folder: the resolved configuration it was started with
(`out/config.json`, which a resumed run must match) and what a finished run
hands back (`TrainResult`).
"""

import dataclasses
import json
import os
import shutil

from keras_hsum import run_folder as folder_names
from keras_hsum.run_folder import read_history
from keras_hsum.run_folder import trained_anything


@dataclasses.dataclass
class TrainResult:
    """What a training run produced.

    Attributes:
        out: the run folder.
        steps: optimizer steps taken in total (resumed runs included).
        history: `{metric: [value per epoch]}` over all epochs of the run.
        model: the trained model (with `ema_momentum`, its averaged
            weights, as `model.keras` holds them).
        vocabulary: the run's `Vocabulary`.
        stopped_early: True when the time budget stopped training.
    """

    out: str
    steps: int
    history: dict
    model: object
    vocabulary: object
    stopped_early: bool = False


def resolved_config(recipe_name, config_name, config, data, strategy, init_from=None,
                    init_checkpoint="last"):
    """What `out/config.json` records of a run: the recipe, the config
    (every field), the data, the strategy and the run it warm-starts from."""
    resolved = {
        "recipe": recipe_name,
        "config_name": config_name,
        "config": dataclasses.asdict(config),
        "data": data if data is None or isinstance(data, str) else str(data),
        "strategy": strategy,
        "init_from": None if init_from is None else os.path.realpath(init_from),
    }
    # Recorded only when it is not the default, so that run folders written
    # before the option existed resume unchanged.
    if init_from is not None and init_checkpoint != "last":
        resolved["init_checkpoint"] = init_checkpoint
    return resolved


def check_or_write_config(out, resolved, defaults=None, replace_untrained=False):
    """Writes `out/config.json`, or refuses a folder holding another run.

    `defaults` maps config field names to their defaults: a field that the
    stored config lacks (a run started before the field existed) and that
    keeps its default is not a difference. With `replace_untrained`, a
    folder whose run never wrote a training step (a command that failed on
    a setting, the data or --init-from) takes the new configuration, and its
    vocabulary is removed to be made again.
    """
    defaults = defaults or {}
    path = folder_names.path(out, folder_names.CONFIG)
    # Compared as it is stored: JSON has no tuples (a tuple field such as
    # HT's graph_heads reads back as a list).
    resolved = json.loads(json.dumps(resolved))
    if os.path.exists(path):
        with open(path) as file:
            previous = json.load(file)
        # How a run is placed (a tf.distribute strategy, or the JAX backend
        # and its keras.distribution) does not change what it trains.
        ignore = ("strategy", "backend", "distribution")
        differences = {
            key: (previous.get(key), resolved[key])
            for key in resolved
            if key not in ignore and previous.get(key) != resolved[key]
        }
        # The same folder named relatively or absolutely is the same data.
        data = differences.get("data")
        if data and all(isinstance(d, str) for d in data):
            if os.path.realpath(data[0]) == os.path.realpath(data[1]):
                differences.pop("data")
        if differences.get("config"):
            old, new = differences.pop("config")
            differences.update(
                {
                    f"config.{name}": (old.get(name), new.get(name))
                    for name in new
                    if old.get(name) != new.get(name)
                    and not (name not in old and name in defaults
                             and new.get(name) == defaults[name])
                }
            )
        # Extending a run (more epochs) or changing how often it backs up
        # or keeps epoch checkpoints does not change what was trained so
        # far. Nor does the number of validation batches, until best.keras
        # holds a value measured on them: later epochs would be compared on
        # other examples.
        for name in ("config.epochs", "config.backup_every_steps",
                     "config.keep_epoch_checkpoints"):
            differences.pop(name, None)
        if "config.validation_steps" in differences:
            old, new = differences.pop("config.validation_steps")
            if os.path.exists(folder_names.path(out, folder_names.BEST_STATE)):
                raise ValueError(
                    f"{out!r}: best.keras was chosen on validation_steps={old} "
                    f"and this command sets {new}; a resumed run would compare "
                    "its validation results with ones measured on other "
                    "examples. Keep validation_steps, or choose a new --out."
                )
        if differences and replace_untrained and not trained_anything(out):
            # An earlier command failed before its first step (a bad
            # setting, data or --init-from): nothing to resume, so the
            # corrected command takes the folder; its vocabulary is trained
            # (or copied) again for the new configuration.
            print(f"{out!r} holds a configuration that never trained a step; "
                  f"replacing it ({sorted(differences)} changed).")
            vocabulary = folder_names.path(out, folder_names.VOCABULARY)
            if os.path.exists(vocabulary):
                os.remove(vocabulary)
            # A backbone run's preset tokenizer (vocabularies.RUN_TOKENIZER).
            shutil.rmtree(folder_names.path(out, folder_names.TOKENIZER), ignore_errors=True)
        elif differences:
            raise ValueError(
                f"{out!r} already holds a run with another configuration "
                f"(field: (old, new)) {differences}. Run the same command to "
                "resume it, or choose a new --out."
            )
    # Atomically: every worker of a multi-worker run writes (and may read)
    # the same file.
    folder_names.write_config(out, resolved)


def epoch_history(folder):
    """`{metric: [value per epoch]}` from the `history.json` in `folder`."""
    history = {}
    for entry in read_history(folder)["epochs"]:
        for key, value in entry.items():
            history.setdefault(key, []).append(value)
    return history
