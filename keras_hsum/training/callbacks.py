"""Training callbacks: NaN guard, crash-safe backups, time budget, weight
averaging."""

import contextlib
import json
import math
import os
import time

import keras
import numpy as np

from keras_hsum import run_folder
from keras_hsum.run_folder import read_history
from keras_hsum.training.checkpoints import epoch_checkpoint_name


class NonFiniteLossError(RuntimeError):
    """Raised when the training loss becomes NaN or infinite."""


def _atomic_write_json(path, value):
    temporary = f"{path}.tmp"
    with open(temporary, "w") as file:
        json.dump(value, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


def check_finite_weights(model, what):
    """Raises `NonFiniteLossError` when a weight of `model` holds NaN/inf.

    Called before a backup or checkpoint is written, so that broken weights
    (a finite loss whose update overflowed) never replace good ones.
    """
    for variable in model.weights:
        if not np.all(np.isfinite(keras.ops.convert_to_numpy(variable))):
            step = int(np.asarray(model.optimizer.iterations))
            raise NonFiniteLossError(
                f"The weight {variable.path!r} became NaN/inf at step {step}; "
                f"the {what} was not written, so the last good one is kept. "
                "Lower the learning rate, enable clipping (clipnorm) or check "
                "the data, then run the same command again to resume from "
                "the backup."
            )


def uses_weight_averaging(model):
    """Whether `model`'s optimizer keeps a moving average of the weights
    (`ema_momentum` in a recipe config: Keras' `use_ema`)."""
    optimizer = getattr(model, "optimizer", None)
    return bool(optimizer is not None and getattr(optimizer, "use_ema", False))


def swap_averaged_weights(model):
    """Exchanges `model`'s trainable weights with the optimizer's moving
    averages of them, in place: calling it twice restores both.

    Each pair goes through a copy of the weight (one variable's memory at a
    time). The pairing is the optimizer's own (`_trainable_variables` with
    `_model_variables_moving_average`, as `keras.callbacks.SwapEMAWeights`
    pairs them).
    """
    optimizer = model.optimizer
    for variable, average in zip(
        optimizer._trainable_variables, optimizer._model_variables_moving_average
    ):
        if average is None:
            continue
        training_value = keras.ops.copy(variable.value)
        variable.assign(average.value)
        average.assign(training_value)


@contextlib.contextmanager
def averaged_weights(model):
    """Within the block, `model` holds the optimizer's moving average of its
    weights (nothing changes for an optimizer without `use_ema`); the
    training weights come back on exit, also after an exception."""
    if not uses_weight_averaging(model):
        yield
        return
    swap_averaged_weights(model)
    try:
        yield
    finally:
        swap_averaged_weights(model)


def keep_training_weights_after_fit(optimizer):
    """Stops `fit` from overwriting the weights with their averages.

    At the end of every `fit` call Keras' optimizer replaces the model's
    weights with their moving averages (`finalize_variable_values`). The
    trainer may call `fit` twice (the rest of an interrupted epoch, then
    the remaining epochs) and trains on from the training weights, so this
    optimizer's override does nothing; the trainer finalises once, when
    training ends. No effect without `use_ema`.
    """
    if getattr(optimizer, "use_ema", False):
        optimizer.finalize_variable_values = lambda var_list: None


def finalize_averaged_weights(model):
    """Copies the moving averages into `model`'s weights (Keras'
    finalisation, which `keep_training_weights_after_fit` defers to the end
    of training). No effect without `use_ema`."""
    if uses_weight_averaging(model):
        type(model.optimizer).finalize_variable_values(
            model.optimizer, model.trainable_variables
        )


class AveragedWeightsForValidation(keras.callbacks.Callback):
    """Validates the moving average of the weights (`ema_momentum`).

    `fit` calls `on_test_begin`/`on_test_end` of its callbacks around the
    validation pass: the averaged weights are swapped in for it and the
    training weights back after it, so `val_loss` (and the best checkpoint
    it picks) measures the weights that `EpochCheckpoint` saves. No effect
    without `use_ema`.

    `keras.callbacks.SwapEMAWeights` does the same swap, but under
    TensorFlow by additions and subtractions (a+b, a−b), which round: the
    training weights came back up to 7e-4 off after two epochs of the
    tests' runs. `swap_averaged_weights` copies, so they come back exactly.
    """

    def __init__(self):
        super().__init__()
        self._swapped = False

    def on_test_begin(self, logs=None):
        if uses_weight_averaging(self.model) and not self._swapped:
            swap_averaged_weights(self.model)
            self._swapped = True

    def on_test_end(self, logs=None):
        if self._swapped:
            swap_averaged_weights(self.model)
            self._swapped = False


class NonFiniteLossGuard(keras.callbacks.Callback):
    """Stops training with `NonFiniteLossError` at the first NaN/inf loss.

    Put it first in the callback list: it raises before any later callback
    (backups, checkpoints) can write the broken weights, so the last good
    backup survives. The message names the global step (optimizer
    iterations) and the epoch.
    """

    def __init__(self):
        super().__init__()
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is None:
            return
        loss = float(np.asarray(loss))
        if not math.isfinite(loss):
            step = int(np.asarray(self.model.optimizer.iterations))
            raise NonFiniteLossError(
                f"The training loss became {loss} at step {step} (epoch "
                f"{self._epoch + 1}, batch {batch + 1}). Training stopped; the "
                "last backup and checkpoints were not overwritten. Lower the "
                "learning rate, enable clipping (clipnorm) or check the data, "
                "then run the same command again to resume from the backup."
            )


def _seed_states(model):
    """The model's random-seed variables (each dropout layer's
    `SeedGenerator` state; in `model.variables`, not in its weights), in
    the model's fixed variable order."""
    return [v for v in model.variables if v.name == "seed_generator_state"]


def _save_seed_states(model, path, step):
    temporary = f"{path}.incomplete.npz"
    states = [np.asarray(v) for v in _seed_states(model)]
    np.savez(temporary, step=np.int64(step), *states)
    os.replace(temporary, path)


def _restore_seed_states(model, path, step):
    """Restores the seed states saved with the weights of `step`; a file
    of another step (a kill between the two renames) or another model is
    left alone: the run then resumes with the seeds of a fresh start."""
    if not os.path.exists(path):
        return
    with np.load(path) as saved:
        states = _seed_states(model)
        if int(saved["step"]) != step or len(saved.files) - 1 != len(states):
            return
        for index, variable in enumerate(states):
            variable.assign(saved[f"arr_{index}"])


class TrainingBackup(keras.callbacks.Callback):
    """Crash-safe backups that resume in the middle of an epoch.

    Every `save_every_steps` optimizer steps and at every epoch end it writes
    the model and optimizer weights and `{"step": ..., "epoch": ...}` to
    `backup_dir`, each through a temporary file and an atomic rename, so a
    `kill -9` at any moment leaves the previous complete backup in place.
    Given `steps_per_epoch`, an epoch's last step is backed up only at the
    epoch end (put this callback after the ones writing the epoch's
    checkpoint and history): a run killed during the epoch's validation
    resumes a few steps earlier and validates that epoch, rather than
    resuming at the next epoch with no history entry or checkpoint for it.
    `restore(model)` loads it and returns the step to resume from; the
    trainer then skips the batches already consumed (its data pipeline is
    deterministic) and trains the rest of the epoch, so an interrupted run
    ends at the same total step count as an uninterrupted one.

    Unlike `keras.callbacks.BackupAndRestore` (which restarts the
    interrupted epoch from its first batch), nothing is trained twice.

    The layers' random-seed states (dropout's streams, not among the
    weights) are saved beside the weights with their step and restored with
    them, so a resumed run draws the dropout masks the uninterrupted run
    draws.
    """

    WEIGHTS = "backup.weights.h5"
    STATE = "backup.json"
    SEEDS = "backup.seeds.npz"

    def __init__(self, backup_dir, save_every_steps=50, steps_per_epoch=None):
        super().__init__()
        self.backup_dir = backup_dir
        self.save_every_steps = save_every_steps
        self.steps_per_epoch = steps_per_epoch
        self._epoch = 0

    @classmethod
    def saved_state(cls, backup_dir):
        """`{"step", "epoch"}` of the last complete backup, or None."""
        state_path = os.path.join(backup_dir, cls.STATE)
        weights_path = os.path.join(backup_dir, cls.WEIGHTS)
        if not (os.path.exists(state_path) and os.path.exists(weights_path)):
            return None
        with open(state_path) as file:
            return json.load(file)

    @classmethod
    def restore(cls, model, backup_dir):
        """Loads the last backup into a built, compiled `model`.

        Returns:
            The global step of the backup (0 when there is none): the
            restored optimizer's iteration count. The weights file (which
            holds the optimizer state) is the commit point: a kill between
            its rename and the rename of `backup.json` leaves a state file
            one backup behind, and its step would be wrong.
        """
        state = cls.saved_state(backup_dir)
        if state is None:
            return 0
        if model.optimizer is not None and not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
        model.load_weights(os.path.join(backup_dir, cls.WEIGHTS))
        step = (
            int(np.asarray(model.optimizer.iterations))
            if model.optimizer is not None
            else int(state["step"])
        )
        _restore_seed_states(model, os.path.join(backup_dir, cls.SEEDS), step)
        return step

    def save(self):
        check_finite_weights(self.model, "backup")
        os.makedirs(self.backup_dir, exist_ok=True)
        step = int(np.asarray(self.model.optimizer.iterations))
        weights = os.path.join(self.backup_dir, self.WEIGHTS)
        # Before the weights (the commit point), tagged with their step.
        _save_seed_states(self.model, os.path.join(self.backup_dir, self.SEEDS), step)
        # Keras decides the format from the suffix: keep ".weights.h5".
        temporary = os.path.join(self.backup_dir, "incomplete.weights.h5")
        self.model.save_weights(temporary, overwrite=True)
        os.replace(temporary, weights)
        _atomic_write_json(
            os.path.join(self.backup_dir, self.STATE),
            {"step": step, "epoch": self._epoch},
        )

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        step = int(np.asarray(self.model.optimizer.iterations))
        if self.steps_per_epoch and step % self.steps_per_epoch == 0:
            return  # the epoch end backs it up, after validation
        if self.save_every_steps and step % self.save_every_steps == 0:
            self.save()

    def on_epoch_end(self, epoch, logs=None):
        self._epoch = epoch + 1
        self.save()


class TimeBudget(keras.callbacks.Callback):
    """Stops training (cleanly, after the current batch) after `minutes`."""

    def __init__(self, minutes):
        super().__init__()
        self.minutes = minutes
        self.stopped_at_step = None
        self._start = None

    def on_train_begin(self, logs=None):
        if self._start is None:
            self._start = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        if time.monotonic() - self._start > 60.0 * self.minutes:
            self.model.stop_training = True
            self.stopped_at_step = int(np.asarray(self.model.optimizer.iterations))


# What may pick `best.keras`, and which way is better.
CHECKPOINT_MONITORS = {"val_loss": "min", "val_accuracy": "max", "val_reward": "max"}


def check_checkpoint_monitor(monitor):
    """Raises ValueError unless `monitor` is one of CHECKPOINT_MONITORS."""
    if monitor not in CHECKPOINT_MONITORS:
        raise ValueError(
            f"`checkpoint_monitor` must be one of {list(CHECKPOINT_MONITORS)}, "
            f"received {monitor!r}."
        )


class EpochCheckpoint(keras.callbacks.Callback):
    """Writes `model.keras` (the last epoch) and `best.keras` (the best
    `monitor`: the lowest `val_loss`, the highest `val_accuracy` or, with
    sequence-level training, the highest `val_reward`) in
    `directory`, atomically, at every epoch end.

    `best.json` records the monitor, its best value and that epoch's epoch
    and optimizer step; a resumed run continues from it and refuses a
    folder whose best checkpoint another monitor picked. With weight
    averaging (an optimizer with `use_ema`) every file holds the averaged
    weights; the model trains on from its own weights.

    With `keep_epochs=True` every epoch's weights are also kept, as
    `epochs/epoch-NNN.keras` (`epoch_checkpoint_name`), so that a choice
    the monitor cannot make (e.g. by the ROUGE of the decoded summaries on
    held-out examples) can be made after training; `keras-hsum export
    --checkpoint epoch-N` exports one of them.
    """

    def __init__(self, directory, monitor="val_loss", keep_epochs=False):
        super().__init__()
        check_checkpoint_monitor(monitor)
        self.directory = directory
        self.monitor = monitor
        self.keep_epochs = bool(keep_epochs)
        # Values are compared as sign · value, lower is better.
        self._sign = 1.0 if CHECKPOINT_MONITORS[monitor] == "min" else -1.0
        self.best = math.inf
        state = run_folder.path(directory, run_folder.BEST_STATE)
        if os.path.exists(state):
            with open(state) as file:
                saved = json.load(file)
            # Folders written before the monitor was recorded used val_loss.
            previous = saved.get("monitor", "val_loss")
            if previous != monitor:
                raise ValueError(
                    f"{directory!r} picked its best.keras by {previous}; this "
                    f"run asks for {monitor}. Resume with the same checkpoint_monitor or "
                    "choose a new --out."
                )
            self.best = self._sign * saved["value"]

    def _save(self, name):
        path = os.path.join(self.directory, name)
        folder, base = os.path.split(path)
        os.makedirs(folder, exist_ok=True)
        temporary = os.path.join(folder, f"incomplete-{base}")
        with averaged_weights(self.model):
            check_finite_weights(self.model, name)
            self.model.save(temporary)
        os.replace(temporary, path)

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        self._save(run_folder.LAST_CHECKPOINT)
        if self.keep_epochs:
            self._save(epoch_checkpoint_name(epoch + 1))
        value = logs.get(self.monitor)
        if value is None:
            validated = sorted(key for key in logs if key.startswith("val_"))
            if validated:
                raise ValueError(
                    f"The checkpoint monitor {self.monitor!r} is not among this "
                    f"epoch's validation results {validated}: the recipe does "
                    "not compute it (or this training loop does not report it)."
                )
            return  # no validation this epoch
        if self._sign * float(value) < self.best:
            self.best = self._sign * float(value)
            self._save(run_folder.BEST_CHECKPOINT)
            _atomic_write_json(
                run_folder.path(self.directory, run_folder.BEST_STATE),
                {"value": float(value), "epoch": epoch + 1, "monitor": self.monitor,
                 "step": int(np.asarray(self.model.optimizer.iterations))},
            )


class HistoryWriter(keras.callbacks.Callback):
    """Writes `history.json` in `out` at every epoch end: the epoch, its
    optimizer step, the training seconds summed over resumed runs and the
    logs, one entry per step (atomically, through a `.tmp` file)."""

    def __init__(self, out):
        super().__init__()
        self.out = out
        self.history = read_history(out)
        # "seconds" is training time summed over resumed runs (time lost to
        # a crash after the last epoch end is not counted).
        epochs = self.history["epochs"]
        self._offset = epochs[-1]["seconds"] if epochs else 0.0
        self._start = time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        seconds = self._offset + time.monotonic() - self._start
        entry = {"epoch": epoch + 1, "seconds": seconds}
        entry["step"] = int(self.model.optimizer.iterations.numpy())
        entry.update({key: float(value) for key, value in (logs or {}).items()})
        # Entries are keyed by step: an epoch a time budget cut short keeps
        # its entry (`best.json` may point at it) when a resumed run
        # completes that epoch under the same number.
        self.history["epochs"] = sorted(
            [e for e in self.history["epochs"] if e["step"] != entry["step"]] + [entry],
            key=lambda e: e["step"],
        )
        run_folder.write_json(
            run_folder.path(self.out, run_folder.HISTORY), self.history, indent=1
        )
