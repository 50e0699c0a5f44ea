"""The checkpoints of a run folder, by name, and checkpoint averaging.

A run folder written by `keras-hsum train` holds the weights of the last
epoch (`model.keras`), those of the best validation loss or
`checkpoint_monitor` (`best.keras`) and, with `keep_epoch_checkpoints=True`,
every epoch's (`epochs/epoch-NNN.keras`). `keras-hsum export --checkpoint`
and `keras-hsum train --init-checkpoint` name them the same way:

- "last", "best";
- "epoch-N": epoch N's weights (1-based);
- "epochs-A-B": the element-wise mean of the weights of the kept epochs A
  to B (both included): checkpoint averaging (Vaswani et al. 2017, §6.1,
  averaged the last 5 or 20 checkpoints of a run). Every epoch in the range
  must have been kept. Weights that are not floating point (none in the
  library's models; e.g. a seed state) keep epoch B's values;
- "A+B+...": an ensemble of the checkpoints A, B, ... (each one of the
  names above), decoded as one `keras_hsum.models.SummarizerEnsemble` (the
  mean of their next-token distributions), e.g. the snapshot ensemble
  "epoch-9+epoch-13+epoch-15". For export only (`ensemble=True`): an
  ensemble is not one set of weights to warm-start from.
"""

import os
import re

import keras
import numpy as np

from keras_hsum import run_folder

# The single-file checkpoints of every run folder.
RUN_CHECKPOINTS = run_folder.CHECKPOINTS

_EPOCH = re.compile(r"epoch-([0-9]+)")
_EPOCHS = re.compile(r"epochs-([0-9]+)-([0-9]+)")
ENSEMBLE_SEPARATOR = "+"


def epoch_checkpoint_name(epoch):
    """The file, under a run folder, that `EpochCheckpoint(keep_epochs=True)`
    writes for the 1-based `epoch`: `epochs/epoch-007.keras`."""
    return run_folder.epoch_checkpoint(epoch)


def kept_epochs(run):
    """The sorted 1-based epochs whose weights the run folder `run` kept
    (`epoch_checkpoint_name` files; [] when it kept none)."""
    folder = os.path.join(os.fspath(run), os.path.dirname(epoch_checkpoint_name(1)))
    names = os.listdir(folder) if os.path.isdir(folder) else []
    return sorted(int(name[len("epoch-"):-len(".keras")]) for name in names
                  if name.startswith("epoch-") and name.endswith(".keras")
                  and name[len("epoch-"):-len(".keras")].isdigit())


def ensemble_members(checkpoint):
    """The checkpoint names of the ensemble "A+B+..." (["A", "B", ...]);
    `[checkpoint]` for a single name."""
    return str(checkpoint).split(ENSEMBLE_SEPARATOR)


def check_checkpoint_name(checkpoint, flag="--checkpoint", ensemble=False):
    """Raises ValueError unless `checkpoint` is "last", "best", "epoch-N"
    (N >= 1) or "epochs-A-B" (1 <= A <= B), or, with `ensemble=True`, such
    names joined by "+" (an ensemble); `flag` names the option in the
    message. Reads no folder."""
    members = ensemble_members(checkpoint)
    if len(members) > 1 and not ensemble:
        raise ValueError(
            f"{flag} names one set of weights; {checkpoint!r} is an ensemble of "
            f"{len(members)} checkpoints, which only `keras-hsum export --checkpoint` "
            "serves. Pick one of them, or their mean ('epochs-A-B')."
        )
    for name in members:
        epoch = _EPOCH.fullmatch(name)
        epochs = _EPOCHS.fullmatch(name)
        if not (name in RUN_CHECKPOINTS or (epoch and int(epoch.group(1)) >= 1) or (
            epochs and 1 <= int(epochs.group(1)) <= int(epochs.group(2))
        )):
            raise ValueError(
                f"{flag} must be one of {sorted(RUN_CHECKPOINTS)}, 'epoch-N' (N >= 1: "
                "epoch N's weights) or 'epochs-A-B' (1 <= A <= B: the mean of the weights "
                "of epochs A to B), where epochs are kept by keep_epoch_checkpoints=True"
                + ("; or such names joined by '+' (an ensemble, e.g. "
                   "'epoch-9+epoch-13')" if ensemble else "")
                + f"; received {checkpoint!r}"
                + (f" (its part {name!r})" if len(members) > 1 else "") + "."
            )


def checkpoint_files(run, checkpoint, flag="--checkpoint", ensemble=False):
    """The weights files, relative to the run folder `run`, that
    `checkpoint` names (see the module docstring): one file, the kept
    epochs A to B's for "epochs-A-B", and every member's, in order, for an
    ensemble (`ensemble=True`).

    Raises:
        ValueError: for another name (`check_checkpoint_name`), or an epoch
            the run did not keep (the message lists the epochs it kept).
            "last" and "best" are not checked for existence here.
    """
    check_checkpoint_name(checkpoint, flag, ensemble=ensemble)
    files = []
    for name in ensemble_members(checkpoint):
        if name in RUN_CHECKPOINTS:
            files.append(RUN_CHECKPOINTS[name])
            continue
        epochs = _EPOCHS.fullmatch(name)
        if epochs:
            wanted = range(int(epochs.group(1)), int(epochs.group(2)) + 1)
        else:
            wanted = [int(_EPOCH.fullmatch(name).group(1))]
        files += [epoch_checkpoint_name(epoch) for epoch in wanted]
    missing = [f for f in files if f not in RUN_CHECKPOINTS.values()
               and not os.path.isfile(os.path.join(os.fspath(run), f))]
    if missing:
        kept = kept_epochs(run)
        raise ValueError(
            f"The run {os.fspath(run)!r} has no {', '.join(missing)} for {flag} "
            f"{checkpoint}; "
            + (f"it kept epochs {kept}." if kept else
               "it kept no epoch's weights (train with --set keep_epoch_checkpoints=true).")
        )
    return files


def load_averaged_weights(model, paths):
    """Loads into `model` the element-wise mean of the weights stored in the
    weights files `paths` (`.keras` or `.weights.h5` files of models of the
    same architecture). Floating-point weights are averaged in float64 and
    cast back; others keep the last file's values. Two copies of the
    weights are held at a time, whatever the number of files.

    Raises:
        ValueError: `paths` is empty.
    """
    paths = list(paths)
    if not paths:
        raise ValueError("load_averaged_weights needs at least one weights file; received none.")
    sums = None
    for path in paths:
        model.load_weights(path)
        values = [keras.ops.convert_to_numpy(weight) for weight in model.weights]
        if sums is None:
            sums = [value.astype(np.float64) for value in values]
        else:
            for total, value in zip(sums, values):
                total += value
    for weight, total in zip(model.weights, sums):
        if np.issubdtype(np.dtype(weight.dtype), np.floating):
            weight.assign((total / len(paths)).astype(weight.dtype))


def _checkpoint_paths(run, checkpoint, flag):
    """The full paths of `checkpoint_files`, each checked to exist."""
    files = checkpoint_files(run, checkpoint, flag)
    paths = [os.path.join(os.fspath(run), name) for name in files]
    missing = [name for name, path in zip(files, paths) if not os.path.isfile(path)]
    if missing:
        raise ValueError(f"The run {os.fspath(run)!r} has no {missing[0]} ({flag} {checkpoint}).")
    return paths


def load_checkpoint_weights(model, run, checkpoint, flag="--checkpoint"):
    """Loads the weights that `checkpoint` names in the run folder `run`
    into `model` (averaged for "epochs-A-B").

    Raises:
        ValueError: see `checkpoint_files`; also when a named file is
            missing.
    """
    paths = _checkpoint_paths(run, checkpoint, flag)
    if len(paths) == 1:
        model.load_weights(paths[0])
    else:
        load_averaged_weights(model, paths)


def load_checkpoint_model(run, checkpoint, flag="--checkpoint", compile=False,
                          ensemble=False):
    """The Keras model saved in the run folder `run`, with the weights that
    `checkpoint` names (averaged for "epochs-A-B"; the architecture, and
    any non-float weight, from the last file). With `ensemble=True`, an
    ensemble name "A+B+..." gives a `keras_hsum.models.SummarizerEnsemble`
    of those checkpoints' models (uniform weights).

    Raises:
        ValueError: see `checkpoint_files`; also when a named file is
            missing.
    """
    members = ensemble_members(checkpoint)
    if len(members) > 1:
        check_checkpoint_name(checkpoint, flag, ensemble=ensemble)
        from keras_hsum.models.ensemble import SummarizerEnsemble

        return SummarizerEnsemble(
            [load_checkpoint_model(run, name, flag, compile=compile) for name in members],
            name="summarizer_ensemble",
        )
    paths = _checkpoint_paths(run, checkpoint, flag)
    model = keras.models.load_model(paths[-1], compile=compile)
    if len(paths) > 1:
        load_averaged_weights(model, paths)
    return model
