"""Crash safety of `keras-hsum train`: kill -9 and resume, NaN losses, and a
run folder that refuses another configuration.

Runs the real command line in subprocesses on 64 real qmsum_goldspan
examples (tiny config, dropout 0 unless a test says otherwise, a backup
after every step).
"""

import json
import os
import re
import shutil
import signal

import numpy as np
import pytest

from training_runs import history
from training_runs import max_difference
from training_runs import new_run_folder
from training_runs import optimizer_iterations
from training_runs import REPO_ROOT
from training_runs import backup_step
from training_runs import kill_inside_an_epoch
from training_runs import run
from training_runs import saved_weights
from training_runs import train_command
from training_runs import train_vocabulary
from training_runs import write_corpus

pytestmark = pytest.mark.tensorflow_only

RECIPE = "flat"
EPOCHS, STEPS_PER_EPOCH = 2, 4
BACKUP_EVERY_STEP = ("backup_every_steps=1",)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fault_tolerance")
    data = write_corpus(folder / "data")
    return data, train_vocabulary(data, folder / "vocabulary.model")


def _check_complete(out, epochs):
    total = epochs * STEPS_PER_EPOCH
    assert optimizer_iterations(os.path.join(out, "backup", "backup.weights.h5")) == total
    assert backup_step(out) == total
    entries = history(out)
    assert [e["epoch"] for e in entries] == list(range(1, epochs + 1))
    assert [e["step"] for e in entries] == [STEPS_PER_EPOCH * (i + 1) for i in range(epochs)]
    assert all(np.isfinite(e["loss"]) and np.isfinite(e["val_loss"]) for e in entries)
    # best.json names the epoch (and its optimizer step) of the lowest
    # validation loss in the history, across the resumed runs.
    with open(os.path.join(out, "best.json")) as file:
        best = json.load(file)
    lowest = min(entries, key=lambda e: e["val_loss"])
    assert (best["epoch"], best["step"]) == (lowest["epoch"], lowest["step"])
    assert best["value"] == pytest.approx(lowest["val_loss"], rel=1e-6)


@pytest.mark.slow  # three runs of the command line: minutes on 2 CPUs
def test_kill_in_mid_epoch_resumes_to_the_same_weights(corpus, tmp_path):
    """With dropout on: the backup carries the dropout layers' seed states,
    so the resumed steps draw the masks the uninterrupted run draws."""
    data, vocabulary = corpus
    killed = new_run_folder(tmp_path / "killed", vocabulary)
    overrides = BACKUP_EVERY_STEP + ("dropout=0.3",)
    command = train_command(
        RECIPE, data, killed, epochs=EPOCHS, steps_per_epoch=STEPS_PER_EPOCH,
        overrides=overrides,
    )
    step = kill_inside_an_epoch(command, killed, STEPS_PER_EPOCH)
    assert 0 < step < EPOCHS * STEPS_PER_EPOCH and step % STEPS_PER_EPOCH
    # The same command again resumes from the backup and finishes the run.
    result = run(command)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"for {EPOCHS * STEPS_PER_EPOCH} steps" in result.stdout
    _check_complete(killed, EPOCHS)

    # An uninterrupted run of the same command ends with the same weights:
    # the pipeline is deterministic and the resumed run skips the batches
    # the killed one consumed.
    whole = new_run_folder(tmp_path / "uninterrupted", vocabulary)
    result = run(train_command(
        RECIPE, data, whole, epochs=EPOCHS, steps_per_epoch=STEPS_PER_EPOCH,
        overrides=overrides,
    ))
    assert result.returncode == 0, result.stderr[-3000:]
    difference = max_difference(
        saved_weights(os.path.join(killed, "model.keras")),
        saved_weights(os.path.join(whole, "model.keras")),
    )
    print(f"killed at step {step}; max |resumed - uninterrupted| = {difference:.3g}")
    assert difference < 1e-5
    np.testing.assert_allclose(
        [e["val_loss"] for e in history(killed)],
        [e["val_loss"] for e in history(whole)], rtol=1e-5,
    )


# The command line in a process that SIGKILLs itself when the first
# validation of the run begins: after the epoch's last training step,
# before its checkpoint and history entry are written.
_KILLED_IN_VALIDATION = """
import os, signal, sys
import keras
from keras_hsum import cli

class _Kill(keras.callbacks.Callback):
    def on_test_begin(self, logs=None):
        os.kill(os.getpid(), signal.SIGKILL)

import keras_hsum.training as training
train = training.train  # what the command line calls
training.train = lambda *a, **k: train(*a, **dict(k, extra_callbacks=[_Kill()]))
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.slow  # 36 s under TensorFlow on CI's 2 cores: the slow set
def test_kill_during_validation_resumes_and_validates_that_epoch(corpus, tmp_path):
    data, vocabulary = corpus
    out = new_run_folder(tmp_path / "run", vocabulary)
    command = train_command(
        RECIPE, data, out, epochs=EPOCHS, steps_per_epoch=STEPS_PER_EPOCH,
        overrides=BACKUP_EVERY_STEP,
    )
    killed = run([command[0], "-c", _KILLED_IN_VALIDATION] + command[3:])
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert not os.path.exists(os.path.join(out, "history.json"))
    # The epoch's last step is not backed up before its validation: a
    # resumed run retrains it and validates epoch 1 instead of starting
    # epoch 2 with no history entry or checkpoint for epoch 1.
    assert backup_step(out) == STEPS_PER_EPOCH - 1
    result = run(command)
    assert result.returncode == 0, result.stderr[-3000:]
    _check_complete(out, EPOCHS)


@pytest.mark.slow  # 37 s under TensorFlow on CI's 2 cores: the slow set
def test_resume_refuses_another_config_but_trains_more_epochs(corpus, tmp_path):
    data, vocabulary = corpus
    out = new_run_folder(tmp_path / "run", vocabulary)
    command = train_command(RECIPE, data, out, epochs=1, steps_per_epoch=STEPS_PER_EPOCH)
    result = run(command)
    assert result.returncode == 0, result.stderr[-3000:]
    _check_complete(out, 1)
    # fit is told the dataset is shuffled already: no Keras warning per run
    assert "`shuffle=True` was passed" not in result.stderr

    other = train_command(
        RECIPE, data, out, epochs=1, steps_per_epoch=STEPS_PER_EPOCH,
        overrides=("hidden_dim=32",),
    )
    result = run(other)
    assert result.returncode == 1
    assert "already holds a run with another configuration" in result.stderr
    assert "'config.hidden_dim': (64, 32)" in result.stderr
    _check_complete(out, 1)  # untouched
    # best.keras was chosen on 1 validation batch: more would compare the
    # next epochs on other examples.
    other = train_command(
        RECIPE, data, out, epochs=2, steps_per_epoch=STEPS_PER_EPOCH,
        overrides=("validation_steps=2",),
    )
    result = run(other)
    assert result.returncode == 1
    assert "best.keras was chosen on validation_steps=1 and this command sets 2" \
        in result.stderr, result.stderr[-2000:]
    _check_complete(out, 1)

    first_seconds = history(out)[0]["seconds"]
    # the same data folder named by a relative path is the same run
    relative = os.path.relpath(data, REPO_ROOT)  # the commands run in REPO_ROOT
    assert relative != data
    # Keeping epoch checkpoints from now on does not change what was
    # trained either: only the epochs trained with it are kept.
    more = train_command(RECIPE, relative, out, epochs=2, steps_per_epoch=STEPS_PER_EPOCH,
                         overrides=("keep_epoch_checkpoints=true",))
    result = run(more)
    assert result.returncode == 0, result.stderr[-3000:]
    _check_complete(out, 2)
    assert os.listdir(os.path.join(out, "epochs")) == ["epoch-002.keras"]
    # training time adds up over the resumed process
    seconds = [e["seconds"] for e in history(out)]
    assert seconds[0] == first_seconds and seconds[1] > first_seconds


@pytest.mark.slow  # 37 s under TensorFlow on CI's 2 cores: the slow set
def test_time_budget_stops_inside_an_epoch_and_a_resumed_run_completes_it(corpus, tmp_path):
    data, vocabulary = corpus
    out = new_run_folder(tmp_path / "budget", vocabulary)
    # A budget of 0.06 s ends training after its first batch (TimeBudget
    # checks after every batch); steps 1 of the 4 of epoch 1 are trained.
    command = train_command(RECIPE, data, out, epochs=1, steps_per_epoch=STEPS_PER_EPOCH)
    result = run(command + ["--max-minutes", "0.001"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "time budget reached" in result.stdout + result.stderr
    [cut] = history(out)
    assert cut["epoch"] == 1 and 1 <= cut["step"] < STEPS_PER_EPOCH
    assert backup_step(out) == cut["step"]

    result = run(command)  # the same run, no budget: finishes epoch 1
    assert result.returncode == 0, result.stderr[-3000:]
    entries = history(out)
    # The cut-short epoch keeps its entry beside the completed one, in
    # step order, and the time adds up over both processes.
    assert [(e["epoch"], e["step"]) for e in entries] == [
        (1, cut["step"]), (1, STEPS_PER_EPOCH)]
    assert entries[0] == cut and entries[1]["seconds"] > cut["seconds"]
    with open(os.path.join(out, "best.json")) as file:
        best = json.load(file)
    lowest = min(entries, key=lambda e: e["val_loss"])
    assert (best["epoch"], best["step"]) == (lowest["epoch"], lowest["step"])
    assert optimizer_iterations(os.path.join(out, "backup", "backup.weights.h5")) == STEPS_PER_EPOCH


@pytest.mark.slow  # 17 s under TensorFlow on CI's 2 cores: the slow set
def test_nan_loss_stops_with_the_step_and_keeps_the_last_good_backup(corpus, tmp_path):
    data, vocabulary = corpus
    out = new_run_folder(tmp_path / "nan", vocabulary)
    # A learning rate of 1e30 (Noam factor) blows the weights up with the
    # first update (finite, ~1e25); the loss of step 2 is NaN. One step per
    # epoch, so epoch 1 ends (model.keras, a backup) before the NaN.
    result = run(train_command(
        RECIPE, data, out, epochs=3, steps_per_epoch=1,
        overrides=BACKUP_EVERY_STEP + ("learning_rate=1e30", "clipnorm=none"),
    ))
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    message = re.search(
        r"keras-hsum train: error: The (training loss became (nan|inf|-inf)|weight .* "
        r"became NaN/inf) at step (\d+)", result.stderr,
    )
    assert message, result.stderr[-3000:]
    nan_step = int(message.group(3))
    print(f"NaN stop: {message.group(0)!r}")
    assert "run the same command again to resume from the backup" in result.stderr
    backup = os.path.join(out, "backup", "backup.weights.h5")
    good_step = optimizer_iterations(backup)
    assert good_step == backup_step(out) < nan_step
    weights = saved_weights(backup)
    assert all(np.all(np.isfinite(w)) for w in weights.values())
    checkpoint = os.path.join(out, "model.keras")
    assert nan_step == 2
    if nan_step > 1:
        assert all(np.all(np.isfinite(w)) for w in saved_weights(checkpoint).values())
        assert [e["epoch"] for e in history(out)] == [1]
    else:
        assert not os.path.exists(checkpoint)


@pytest.fixture(scope="module")
def source_and_fresh(corpus, tmp_path_factory):
    """A finished source run (4 steps) and a fresh run of the same seed
    trained one step at learning rate 0 (its initial weights)."""
    data, vocabulary = corpus
    folder = tmp_path_factory.mktemp("init_from")
    source = new_run_folder(folder / "source", vocabulary)
    result = run(train_command(RECIPE, data, source, epochs=1, steps_per_epoch=STEPS_PER_EPOCH))
    assert result.returncode == 0, result.stderr[-3000:]
    fresh = new_run_folder(folder / "fresh", vocabulary)
    result = run(train_command(
        RECIPE, data, fresh, epochs=1, steps_per_epoch=1, overrides=("learning_rate=0.0",)
    ))
    assert result.returncode == 0, result.stderr[-3000:]
    return source, fresh


@pytest.mark.slow  # 73 s under TensorFlow on CI's 2 cores: the slow set
def test_init_from_warm_starts_from_another_runs_vocabulary_and_weights(
    corpus, source_and_fresh, tmp_path
):
    """`--init-from`: the new run copies the source run's vocabulary and
    starts from its last weights (with a learning rate of 0 it ends exactly
    there, while the seed's fresh initialisation is far from them); weights
    of another size are refused with a clear error."""
    data, _ = corpus
    source, fresh = source_and_fresh
    tuned = str(tmp_path / "tuned")  # no vocabulary: --init-from brings it
    command = train_command(
        RECIPE, data, tuned, epochs=1, steps_per_epoch=1, overrides=("learning_rate=0.0",)
    ) + ["--init-from", source]
    result = run(command)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(os.path.join(source, "vocabulary.model"), "rb") as a, open(
        os.path.join(tuned, "vocabulary.model"), "rb"
    ) as b:
        assert a.read() == b.read()
    with open(os.path.join(tuned, "config.json")) as file:
        assert json.load(file)["init_from"] == os.path.realpath(source)
    # The optimizer starts afresh (the source's .keras also stores its
    # step count): one step trained, not 4 + 1.
    assert [e["step"] for e in history(tuned)] == [1]
    assert optimizer_iterations(os.path.join(tuned, "backup", "backup.weights.h5")) == 1
    source_weights = saved_weights(os.path.join(source, "model.keras"))
    assert max_difference(saved_weights(os.path.join(tuned, "model.keras")), source_weights) == 0.0
    fresh_weights = saved_weights(os.path.join(fresh, "model.keras"))
    assert max_difference(fresh_weights, source_weights) > 1e-3

    wider = str(tmp_path / "wider")
    result = run(train_command(
        RECIPE, data, wider, epochs=1, steps_per_epoch=1, overrides=("intermediate_dim=48",)
    ) + ["--init-from", source])
    assert result.returncode == 1
    # Refused from the two config.json files, before any weight is read.
    assert "has other model sizes than this run" in result.stderr, result.stderr[-2000:]
    assert "'intermediate_dim': (" in result.stderr and ", 48)}" in result.stderr


@pytest.mark.slow  # four more runs of the command line (about 45 s on 2 CPUs)
def test_init_checkpoint_starts_from_best_or_the_mean_of_kept_epochs(
    corpus, source_and_fresh, tmp_path
):
    """`--init-checkpoint best` starts from the source's best.keras, and
    `--init-checkpoint epochs-A-B` from the mean of its kept epochs; a
    missing checkpoint is refused with a clear error."""
    data, _ = corpus
    # A copy of the source run, whose best.keras and epochs/ this test writes.
    source = str(tmp_path / "source")
    shutil.copytree(source_and_fresh[0], source)
    fresh = source_and_fresh[1]
    source_weights = saved_weights(os.path.join(source, "model.keras"))
    fresh_weights = saved_weights(os.path.join(fresh, "model.keras"))

    # `--init-checkpoint best` starts from best.keras, not model.keras. The
    # two are made distinguishable by putting the fresh run's weights in the
    # source's best.keras; with a learning rate of 0 the new run ends on them.
    shutil.copyfile(os.path.join(fresh, "model.keras"), os.path.join(source, "best.keras"))
    from_best = str(tmp_path / "from_best")
    result = run(train_command(
        RECIPE, data, from_best, epochs=1, steps_per_epoch=1, overrides=("learning_rate=0.0",)
    ) + ["--init-from", source, "--init-checkpoint", "best"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert max_difference(saved_weights(os.path.join(from_best, "model.keras")), fresh_weights) == 0.0
    with open(os.path.join(from_best, "config.json")) as file:
        assert json.load(file)["init_checkpoint"] == "best"
    os.remove(os.path.join(source, "best.keras"))
    result = run(train_command(
        RECIPE, data, str(tmp_path / "no_best"), epochs=1, steps_per_epoch=1,
    ) + ["--init-from", source, "--init-checkpoint", "best"])
    assert result.returncode == 1
    assert "has no best.keras (--init-checkpoint best)" in result.stderr, result.stderr[-2000:]

    # `--init-checkpoint epochs-1-2` starts from the mean of two kept
    # epochs' weights (here the source's and the fresh run's), computed in
    # numpy here; a range with an epoch the run did not keep is refused.
    os.makedirs(os.path.join(source, "epochs"))
    shutil.copyfile(os.path.join(source, "model.keras"),
                    os.path.join(source, "epochs", "epoch-001.keras"))
    shutil.copyfile(os.path.join(fresh, "model.keras"),
                    os.path.join(source, "epochs", "epoch-002.keras"))
    averaged = str(tmp_path / "averaged")
    result = run(train_command(
        RECIPE, data, averaged, epochs=1, steps_per_epoch=1, overrides=("learning_rate=0.0",)
    ) + ["--init-from", source, "--init-checkpoint", "epochs-1-2"])
    assert result.returncode == 0, result.stderr[-3000:]
    mean = {key: (source_weights[key] + fresh_weights[key]) / 2 for key in source_weights}
    assert max_difference(saved_weights(os.path.join(averaged, "model.keras")), mean) < 1e-6
    result = run(train_command(
        RECIPE, data, str(tmp_path / "no_third"), epochs=1, steps_per_epoch=1,
    ) + ["--init-from", source, "--init-checkpoint", "epochs-2-3"])
    assert result.returncode == 1
    assert "no epochs/epoch-003.keras for --init-checkpoint epochs-2-3; it kept epochs [1, 2]" \
        in result.stderr, result.stderr[-2000:]
