"""Distributed training: a `strategy.run` loop over the recipe's model.

Keras 3's `model.fit` does not run under `MultiWorkerMirroredStrategy`
(keras-team/keras#20585), and under `MirroredStrategy` it fails on boolean
features and drops a batch (see `keras_hsum.training.trainer`), so
`keras-hsum train --strategy multi_worker` (and `mirrored`) trains with
`custom_fit`: the same compiled model, loss, optimizer and
callbacks as the `fit` path, driven by a `tf.function` step run with
`strategy.run` on every replica of every worker.

Data. The recipe's dataset yields global batches of `config.batch_size`.
It is read by `strategy.experimental_distribute_dataset` with the DATA
auto-shard policy: every worker runs the whole (deterministic) pipeline,
each global batch is split into one slice per replica, and each worker
keeps its own slices. Sharding examples before batching would give every
worker different *global* batches from the single-process run; with DATA
sharding the replicas together see exactly the single-process batch.
Training from shard folders (`keras-hsum train --data DIR`) under
`multi_worker` is the exception: `strategy.distribute_datasets_from_function`
gives each worker its own shard files (`read_shards`' input context) in
per-replica batches, so no worker reads or parses another's examples. The
global batches then differ from a one-process run's (the same examples
over an epoch, grouped differently).

Loss scaling. Inside a replica, Keras' `compute_loss` divides the
replica's loss (mean over its B/N·S positions) by the number of replicas N
(`add_loss` terms too), so the replicas' losses, and their gradients, sum
to the loss and gradient of the whole global batch. The optimizer sums the
replica gradients (all-reduce) before its update.

Clipping. `compile`'s optimizer clips in the replica, before that sum, so
under a strategy it would clip each replica's partial gradient. The loop
instead clips the summed gradient by its global norm (one extra all-reduce
when clipping is on) and gives the optimizer the clipped replica parts.

Files. Only the chief (worker 0, or the "chief" task) writes `out/`:
backups (`out/backup/`, `TrainingBackup`'s layout), `model.keras`,
`best.keras`, `history.json`. Other workers run the same callbacks into a
temporary folder that is removed at the end, as the TensorFlow multi-worker
guide recommends. Every worker restores from `out/backup/`, so `--out`
must be a folder every worker can read (a shared file system).
"""

import contextlib
import shutil
import tempfile

import keras
import numpy as np
import tensorflow as tf

from keras_hsum import run_folder
from keras_hsum.training.callbacks import EpochCheckpoint
from keras_hsum.training.callbacks import HistoryWriter
from keras_hsum.training.callbacks import NonFiniteLossGuard
from keras_hsum.training.callbacks import TimeBudget
from keras_hsum.training.callbacks import TrainingBackup
from keras_hsum.training.callbacks import averaged_weights
from keras_hsum.training.callbacks import finalize_averaged_weights
from keras_hsum.training.model_setup import build_compiled_model
from keras_hsum.training.model_setup import make_strategy
from keras_hsum.training.model_setup import recipe_callbacks
from keras_hsum.training.model_setup import seed_model_building
from keras_hsum.training.model_setup import warm_start
from keras_hsum.training.run_folder import TrainResult
from keras_hsum.training.run_folder import epoch_history


def is_chief(strategy):
    """True for the task that writes the run folder.

    The "chief" task when the cluster has one, else worker 0; a strategy
    without a cluster (one process) is its own chief.
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    if resolver.task_type == "chief":
        return True
    cluster = resolver.cluster_spec().as_dict()
    return (
        resolver.task_type == "worker"
        and "chief" not in cluster
        and int(resolver.task_id or 0) == 0
    )


def _num_workers(strategy):
    """The processes of the strategy's cluster (chief and workers); 1 without one."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return 1
    cluster = resolver.cluster_spec().as_dict()
    return sum(len(cluster.get(kind, ())) for kind in ("chief", "worker"))


def make_stop_agreement(strategy):
    """`agree(stop) -> bool`: whether any worker wants to stop.

    A callback may stop training after a batch (the time budget, which
    starts each worker's clock on its own, or a user's callback). Under
    `MultiWorkerMirroredStrategy` every step is a collective, so the
    workers must break after the same step: a worker that stops alone would
    start validation (more collectives) while the others wait in the next
    step's gradient all-reduce. `agree` sums the workers' flags (one tiny
    all-reduce per step; only with several workers) so that all stop once
    any does.
    """
    if _num_workers(strategy) <= 1:
        return bool

    @tf.function
    def stops(flag):
        per_replica = strategy.run(lambda value: value, args=(flag,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    return lambda stop: float(stops(tf.constant(1.0 if stop else 0.0))) > 0.0


def _unpack(batch):
    """`(x, y, sample_weight)` from a dataset element (a 2- or 3-tuple)."""
    if isinstance(batch, (tuple, list)):
        if len(batch) == 3:
            return tuple(batch)
        if len(batch) == 2:
            return batch[0], batch[1], None
    raise ValueError(
        "custom_fit expects dataset elements (inputs, labels) or (inputs, "
        f"labels, sample_weight), as recipes make; received {type(batch)}."
    )


@contextlib.contextmanager
def _clipping_done_by_the_loop(optimizer):
    """Turns the optimizer's own (per-replica) clipping off while tracing."""
    saved = optimizer.global_clipnorm
    optimizer.global_clipnorm = None
    try:
        yield
    finally:
        optimizer.global_clipnorm = saved


def make_train_step(model, strategy):
    """A `tf.function(iterator) -> loss` that takes one optimizer step.

    Each replica computes `model.compute_loss` on its slice of the global
    batch (already divided by the replica count by Keras), the gradients
    are clipped by the global norm of their sum across replicas (like
    `compile`'s `global_clipnorm` on one device) and applied with the
    model's optimizer, which sums them across replicas. Returns the loss of
    the global batch (the sum of the replicas' scaled losses).

    Raises:
        ValueError: for an optimizer with per-variable `clipnorm` or
            `clipvalue` (only `global_clipnorm` is supported).
    """
    optimizer = model.optimizer
    if optimizer.clipnorm or optimizer.clipvalue:
        raise ValueError(
            "custom_fit clips the summed gradient by its global norm and "
            "supports only `global_clipnorm`; the optimizer has "
            f"clipnorm={optimizer.clipnorm!r}, clipvalue={optimizer.clipvalue!r}."
        )
    clipnorm = optimizer.global_clipnorm

    def replica_step(x, y, sample_weight):
        variables = model.trainable_variables
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss = model.compute_loss(
                x=x, y=y, y_pred=y_pred, sample_weight=sample_weight
            )
            scaled_loss = optimizer.scale_loss(loss)
        # The compiled metrics (e.g. token accuracy), as `fit` updates them;
        # their variables sum over the replicas when read.
        model.compute_metrics(x, y, y_pred, sample_weight)
        gradients = tape.gradient(scaled_loss, variables)
        pairs = [(g, v) for g, v in zip(gradients, variables) if g is not None]
        gradients = [g for g, _ in pairs]
        if clipnorm:
            context = tf.distribute.get_replica_context()
            summed = context.all_reduce(tf.distribute.ReduceOp.SUM, gradients)
            norm = tf.linalg.global_norm(summed)
            if optimizer.loss_scale_factor is not None:
                norm = norm / optimizer.loss_scale_factor
            # Keras' clip_by_global_norm: a NaN/inf norm makes the factor
            # NaN (the NaN guard then stops training).
            factor = clipnorm * tf.minimum(1.0 / norm, 1.0 / clipnorm)
            factor = factor + (norm - norm)
            gradients = [g * tf.cast(factor, g.dtype) for g in gradients]
        with _clipping_done_by_the_loop(optimizer):
            optimizer.apply(gradients, [v for _, v in pairs])
        return loss

    @tf.function
    def train_step(iterator):
        x, y, sample_weight = _unpack(next(iterator))
        losses = strategy.run(replica_step, args=(x, y, sample_weight))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    return train_step


def make_validation_step(model, strategy):
    """A `tf.function(x, y, sample_weight) -> loss` for one validation batch.

    Runs on the whole batch in the cross-replica context of every worker
    (validation is small; each worker computes the same number), and undoes
    the 1/replicas scaling that `compute_loss` applies under a strategy.
    """

    @tf.function
    def validation_step(x, y, sample_weight):
        y_pred = model(x, training=False)
        # training=False: no sequence-level term (its reward, with
        # sequence-level training, goes to the model's reward_tracker).
        loss = model.compute_loss(
            x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=False
        )
        model.compute_metrics(x, y, y_pred, sample_weight)
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        return loss * tf.cast(replicas, loss.dtype)

    return validation_step


def _validation_loss(validation_step, val_data, steps, strategy):
    """Mean validation loss, batches weighted by their size (like `fit`)."""
    total, count = 0.0, 0
    dataset = val_data.take(steps) if steps else val_data
    with strategy.scope():
        for batch in dataset:
            x, y, sample_weight = _unpack(batch)
            size = int(tf.shape(tf.nest.flatten(x)[0])[0])
            total += float(validation_step(x, y, sample_weight)) * size
            count += size
    return total / count if count else None


def _metric_logs(model):
    """The model's metrics as `fit` logs them (compiled metrics such as
    `accuracy`; `reward` with sequence-level training), read in the
    cross-replica context, where their variables sum over the replicas.
    The loop reports its own loss."""
    return {name: float(value) for name, value in model.get_metrics_result().items()
            if name != "loss"}


def _check_even_split(strategy, batch_size):
    replicas = strategy.num_replicas_in_sync
    if batch_size % replicas:
        raise ValueError(
            f"The global batch_size {batch_size} does not split evenly over "
            f"{replicas} replicas; choose a multiple of {replicas} "
            "(e.g. --set batch_size=...)."
        )


def distribute_training_data(strategy, train_data, skip, batch_size):
    """The distributed dataset of global batches `skip, skip+1, ...`.

    DATA auto-sharding: every worker reads the whole pipeline and keeps its
    replicas' slices of each global batch (see the module docstring).

    Raises:
        ValueError: when the global batch does not split evenly across the
            replicas (the loss scaling assumes equal slices).
    """
    _check_even_split(strategy, batch_size)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA
    )
    dataset = train_data.skip(skip).with_options(options)
    return strategy.experimental_distribute_dataset(dataset)


def distribute_worker_data(strategy, make_data, skip, batch_size):
    """The distributed dataset of per-worker input pipelines, past the first
    `skip` steps: `make_data(input_context)` returns one worker's dataset of
    per-replica batches (each worker its own shard files; see the module
    docstring). A step takes one batch per replica, so a worker whose
    pipeline feeds R replicas skips `skip · R` batches.

    Raises:
        ValueError: when the global batch does not split evenly across the
            replicas.
    """
    _check_even_split(strategy, batch_size)

    def worker_dataset(context):
        per_pipeline = context.num_replicas_in_sync // context.num_input_pipelines
        return make_data(context).skip(skip * per_pipeline)

    return strategy.distribute_datasets_from_function(worker_dataset)


def custom_fit(
    recipe,
    config,
    *,
    out,
    vocabulary,
    train_data,
    val_data,
    verbose=1,
    strategy=None,
    max_minutes=None,
    extra_callbacks=(),
    init_from=None,
    init_checkpoint="last",
    per_worker_data=False,
):
    """Trains like `keras_hsum.training.train` under `MultiWorkerMirroredStrategy`.

    Every worker runs this with its own `TF_CONFIG`; they end with the same
    weights. Resumes from `out/backup/` (written by the chief) and skips the
    global batches already consumed, so the run ends at
    `epochs · steps_per_epoch` steps.

    Args:
        recipe, config: the recipe module and its config.
        out: the run folder (written by the chief only).
        vocabulary: the run's `Vocabulary`.
        train_data: a function returning the recipe's training dataset of
            global batches
            `(inputs [B,...], labels [B,S], sample_weight [B,S])`, repeated.
        val_data: a function returning the validation dataset (one pass).
        verbose: 1: a progress bar on the chief.
        strategy: a `tf.distribute.Strategy` (None: a
            `MultiWorkerMirroredStrategy` from `TF_CONFIG`; it must be made
            before TensorFlow runs anything, so `train` passes it).
        max_minutes: stop cleanly after this much training time.
        extra_callbacks: more Keras callbacks, called like `fit` calls them
            (epoch/batch begin and end, train begin and end).
        init_from: a run folder whose weights initialise a fresh run
            (see `keras_hsum.training.train`).
        init_checkpoint: which of its weights (see `warm_start`).
        per_worker_data: True: `train_data` takes a
            `tf.distribute.InputContext` and returns that worker's dataset
            of per-replica batches (`distribute_worker_data`); False: it
            takes nothing and returns global batches, which every worker
            reads whole (`distribute_training_data`).

    Returns:
        A `TrainResult`.

    Raises:
        NonFiniteLossError: at the first NaN/inf loss (no backup or
            checkpoint is written from the broken weights).
    """
    strategy = strategy or make_strategy("multi_worker")
    chief = is_chief(strategy)
    write_dir = out if chief else tempfile.mkdtemp(prefix="keras_hsum_worker_")
    try:
        val_data = val_data()
        x, y, sample_weight = _unpack(next(iter(val_data)))
        # Each dataset is built once (per-worker datasets later, by
        # distribute_worker_data); the weights are drawn from the seed
        # without clearing the datasets' SentencePiece resources.
        global_train_data = None if per_worker_data else train_data()
        seed_model_building(config.seed)
        with strategy.scope():
            model = build_compiled_model(
                recipe, config, vocabulary.vocabulary_size, x
            )
            # Builds the compiled loss (and any variables it owns) outside
            # the traced step.
            model.compute_loss(
                x=x, y=y, y_pred=model(x, training=False),
                sample_weight=sample_weight,
            )
            train_step = make_train_step(model, strategy)
            validation_step = make_validation_step(model, strategy)
        done = TrainingBackup.restore(model, run_folder.path(out, run_folder.BACKUP))
        if init_from is not None and not done:
            with strategy.scope():
                warm_start(model, init_from, init_checkpoint)
        steps_per_epoch = config.steps_per_epoch
        total = config.epochs * steps_per_epoch
        budget = TimeBudget(max_minutes) if max_minutes else None
        callbacks = [
            NonFiniteLossGuard(),
            EpochCheckpoint(write_dir, monitor=config.checkpoint_monitor,
                            keep_epochs=config.keep_epoch_checkpoints),
            HistoryWriter(write_dir),
            # Last: the epoch-end backup commits the epoch (see the trainer).
            TrainingBackup(
                run_folder.path(write_dir, run_folder.BACKUP), config.backup_every_steps,
                steps_per_epoch,
            ),
        ]
        callbacks += recipe_callbacks(recipe, config)
        if budget:
            callbacks.append(budget)
        callbacks += list(extra_callbacks)
        callbacks = keras.callbacks.CallbackList(
            callbacks,
            add_progbar=bool(verbose and chief),
            model=model,
            verbose=verbose if chief else 0,
            epochs=config.epochs,
            steps=steps_per_epoch,
        )
        if verbose and chief and done:
            print(f"Resuming {out} from step {done} of {total}.")

        model.stop_training = False
        agree_to_stop = make_stop_agreement(strategy)
        if per_worker_data:
            distributed = distribute_worker_data(
                strategy, train_data, done, config.batch_size
            )
        else:
            distributed = distribute_training_data(
                strategy, global_train_data, done, config.batch_size
            )
        iterator = iter(distributed)
        callbacks.on_train_begin()
        step = done
        while step < total and not model.stop_training:
            epoch = step // steps_per_epoch
            callbacks.on_epoch_begin(epoch)
            model.reset_metrics()
            losses = []
            for batch in range(step % steps_per_epoch, steps_per_epoch):
                callbacks.on_train_batch_begin(batch)
                losses.append(float(train_step(iterator)))
                step += 1
                callbacks.on_train_batch_end(batch, {"loss": np.mean(losses)})
                model.stop_training = agree_to_stop(model.stop_training)
                if model.stop_training:
                    if budget and budget.stopped_at_step is None:
                        budget.stopped_at_step = step  # another worker's budget
                    break
            logs = {"loss": float(np.mean(losses)), **_metric_logs(model)}
            model.reset_metrics()
            with averaged_weights(model):
                val_loss = _validation_loss(
                    validation_step, val_data, config.validation_steps, strategy
                )
            if val_loss is not None:
                logs["val_loss"] = val_loss
                logs.update({f"val_{name}": value
                             for name, value in _metric_logs(model).items()})
            callbacks.on_epoch_end(epoch, logs)
        callbacks.on_train_end()
        finalize_averaged_weights(model)

        return TrainResult(
            out=out,
            steps=int(np.asarray(model.optimizer.iterations)),
            history=epoch_history(write_dir),
            model=model,
            vocabulary=vocabulary,
            stopped_early=bool(budget and budget.stopped_at_step is not None),
        )
    finally:
        if not chief:
            shutil.rmtree(write_dir, ignore_errors=True)
