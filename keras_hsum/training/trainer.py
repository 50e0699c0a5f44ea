"""Train a recipe with `model.fit` under a tf.distribute strategy.

`train(recipe, config, out=...)` does everything `keras-hsum train` does:

1. resolves the data (a folder with train/val splits, one JSONL file, or
   the recipe's default corpus) and writes the resolved config to
   `out/config.json` (a second run with the same folder must use the same
   config: it resumes);
2. trains (or reloads) the SentencePiece vocabulary → `out/vocabulary.model`;
3. builds the recipe's datasets, and model + optimizer + loss inside
   `strategy.scope()`;
4. restores the last backup (`out/backup/`) and fits the remaining steps
   with a progress bar, TensorBoard logs (`out/logs/`), `out/history.json`,
   `out/model.keras` (last epoch) and `out/best.keras` (lowest val_loss, or
   the config's `checkpoint_monitor`).

Under the JAX backend (`KERAS_BACKEND=jax`, `keras-hsum train --backend
jax`) the same steps run with `model.fit` under a `keras.distribution`
(DataParallel over every device by default, or ModelParallel with the
summarizers' layout map) instead of a tf.distribute strategy: see
`keras_hsum.training.jax_training`.

Strategies: "default" (one device, `model.fit`), "mirrored"
(`MirroredStrategy` over the local GPUs, or over the logical CPU devices
when there are several) and "multi_worker" (`MultiWorkerMirroredStrategy`
from `TF_CONFIG`). Both distributed strategies train with
`keras_hsum.training.distributed.custom_fit`, a `strategy.run` loop over
the same compiled model and callbacks: Keras 3's `model.fit` does not run
under MultiWorkerMirroredStrategy (keras-team/keras#20585), and under
MirroredStrategy it fails on boolean features, skips the first batch of
every `fit` call and clips each replica's partial gradient (see `train`).

The steps live in modules named for them: `data_sources` (resolving
`--data`, hold-outs, shards), `vocabularies`, `model_setup` (strategy,
compiled model, warm start) and `run_folder` (`config.json`,
`TrainResult`); this module runs them in order.
"""

import contextlib
import dataclasses
import os

import keras
import tensorflow as tf

from keras_hsum import run_folder
from keras_hsum.checks import check_int
from keras_hsum.training.callbacks import AveragedWeightsForValidation
from keras_hsum.training.callbacks import EpochCheckpoint
from keras_hsum.training.callbacks import HistoryWriter
from keras_hsum.training.callbacks import NonFiniteLossGuard
from keras_hsum.training.callbacks import TimeBudget
from keras_hsum.training.callbacks import TrainingBackup
from keras_hsum.training.callbacks import check_checkpoint_monitor
from keras_hsum.training.callbacks import finalize_averaged_weights
from keras_hsum.training.checkpoints import check_checkpoint_name
from keras_hsum.training.data_sources import check_trainable
from keras_hsum.training.data_sources import describe_source
from keras_hsum.training.data_sources import naming_corrupt_shards
from keras_hsum.training.data_sources import resolve_data
from keras_hsum.training.data_sources import shard_sources
from keras_hsum.training.data_sources import shard_splits
from keras_hsum.training.data_sources import training_source
from keras_hsum.training import jax_training
from keras_hsum.training.distributed import custom_fit
from keras_hsum.training.model_setup import STRATEGIES
from keras_hsum.training.model_setup import build_compiled_model
from keras_hsum.training.model_setup import check_init_from
from keras_hsum.training.model_setup import make_strategy
from keras_hsum.training.model_setup import recipe_callbacks
from keras_hsum.training.model_setup import recipe_declaration
from keras_hsum.training.model_setup import recipe_metrics
from keras_hsum.training.model_setup import seed_model_building
from keras_hsum.training.model_setup import sequence_objective
from keras_hsum.training.model_setup import warm_start
from keras_hsum.training.run_folder import TrainResult
from keras_hsum.training.run_folder import check_or_write_config
from keras_hsum.training.run_folder import epoch_history
from keras_hsum.training.run_folder import resolved_config
from keras_hsum.training.vocabularies import load_or_train_vocabulary
from keras_hsum.training.vocabularies import shard_vocabulary


def train(
    recipe,
    config,
    *,
    out,
    data=None,
    strategy="default",
    recipe_name=None,
    config_name=None,
    max_minutes=None,
    verbose=1,
    extra_callbacks=(),
    init_from=None,
    init_checkpoint="last",
    data_service=None,
    distribution=None,
    model_parallel=None,
):
    """Trains `recipe` with `config`; resumes when `out` holds a backup.

    Args:
        recipe: the recipe's declaration (`keras_hsum.recipes.base.Recipe`,
            which the entry points read: `keras_hsum.recipes.declaration(name)`)
            or its module (whose `RECIPE` is read).
        config: its frozen config (already with any overrides).
        out: the run folder (created).
        data: see `resolve_data`.
        strategy: "default", "mirrored" or "multi_worker".
        recipe_name, config_name: recorded in `out/config.json` (default
            recipe name: the declaration's `name`, which export looks up).
        max_minutes: stop after this much training time (the run is complete:
            a later run with the same folder continues).
        verbose: Keras verbosity (1: a progress bar).
        extra_callbacks: more Keras callbacks (after the built-in ones).
        init_from: a run folder to warm-start from (fine-tuning): its
            vocabulary and weights replace the new run's vocabulary and
            initialisation; the optimizer starts afresh. A resumed run
            continues from its own backup instead.
        init_checkpoint: which weights of `init_from`: "last" (model.keras),
            "best" (best.keras, its lowest validation loss or
            checkpoint_monitor), "epoch-N" or "epochs-A-B" (see `warm_start`).
        data_service: the address of a tf.data service dispatcher (e.g.
            "grpc://localhost:5000"): its workers read and parse the
            training shards (`processing_mode="distributed_epoch"`); needs
            `data` to be a folder of shard folders (see `shard_splits`).
        distribution: under the JAX backend only: "data_parallel" (the
            default) or "model_parallel" (see `jax_training.make_distribution`).
        model_parallel: with "model_parallel", the size of the "model" mesh
            axis (None: every device).

    Returns:
        A `TrainResult`.

    Raises:
        NonFiniteLossError: when the loss becomes NaN/inf (the last good
            backup is kept).
        ValueError: for bad data, strategy or init checkpoint, or a folder
            holding another run.
    """
    recipe = recipe_declaration(recipe)
    recipe_name = recipe_name or recipe.name
    _check_arguments(recipe, config, recipe_name, strategy, max_minutes, init_from,
                     init_checkpoint)
    under_jax = jax_training.is_jax_backend()
    if under_jax:
        jax_distribution = _jax_distribution(
            config, strategy, distribution, model_parallel, max_minutes
        )
    elif distribution is not None or model_parallel is not None:
        jax_training.check_jax_backend(f"--distribution {distribution or 'model_parallel'}")
    resolved = resolved_config(recipe_name, config_name, config, data, strategy, init_from,
                               init_checkpoint)
    if under_jax:
        # Recorded, not compared: a run may resume under the other backend
        # (its backup and checkpoints are backend-neutral Keras files).
        resolved.update(backend="jax", distribution=distribution or "data_parallel")
    os.makedirs(out, exist_ok=True)
    check_or_write_config(
        out,
        resolved,
        defaults={field.name: field.default for field in dataclasses.fields(config)},
        replace_untrained=True,
    )
    if under_jax:
        with jax_distribution.scope(), jax_training.chief_folder(out) as write_dir:
            return _fit_path(
                recipe, config, out, data, recipe_name, max_minutes, verbose,
                extra_callbacks, init_from, init_checkpoint, data_service,
                tf_strategy=None, write_dir=write_dir,
                batch_filter=lambda dataset: jax_training.whole_batches(
                    dataset, jax_distribution, config.batch_size),
            )
    # MultiWorkerMirroredStrategy must be created before TensorFlow runs
    # anything (it configures the collective ops of the eager context).
    return _fit_path(
        recipe, config, out, data, recipe_name, max_minutes, verbose, extra_callbacks,
        init_from, init_checkpoint, data_service, strategy=strategy,
        tf_strategy=make_strategy(strategy),
    )


def _jax_distribution(config, strategy, distribution, model_parallel, max_minutes):
    """The `keras.distribution` of a run under the JAX backend (see
    `jax_training`), after refusing what JAX cannot run."""
    if strategy != "default":
        raise ValueError(
            f"--strategy {strategy} is a tf.distribute strategy, which the JAX backend "
            "does not use; under JAX choose --distribution data_parallel (every "
            "device, the default) or model_parallel, and --coordinator/--num-processes/"
            "--process-id for several hosts."
        )
    if max_minutes is not None and jax_training.process_count() > 1:
        raise ValueError(
            "--max-minutes stops each process on its own clock, and a JAX process that "
            "stops alone leaves the others waiting in the next step's collective; with "
            "several processes, bound the run with --epochs / --steps-per-epoch instead."
        )
    made = jax_training.make_distribution(distribution or "data_parallel", model_parallel)
    jax_training.check_batch_split(made, config.batch_size)
    return made


def _fit_path(recipe, config, out, data, recipe_name, max_minutes, verbose, extra_callbacks,
              init_from, init_checkpoint, data_service, *, tf_strategy, strategy="default",
              write_dir=None, batch_filter=None):
    """Everything after the run folder's config: data, vocabulary, model,
    restore, fit. `tf_strategy` is the tf.distribute strategy whose scope
    builds the model (None under JAX, whose keras.distribution is already
    set); `write_dir` the folder the callbacks write (`out`, or a
    temporary one in a JAX process other than 0); `batch_filter` drops
    the validation batches the JAX distribution cannot split."""
    write_dir = write_dir or out
    batch_filter = batch_filter or (lambda dataset: dataset)
    # The global seed is set before the datasets are built: their shuffle
    # seeds derive from it, so every dataset built by this run (and by a
    # resumed run) yields the same batches in the same order.
    keras.utils.set_random_seed(config.seed)
    sharded = shard_splits(data)
    train_source, val_source, vocabulary = _sources_and_vocabulary(
        data, sharded, out, recipe_name, config, init_from, data_service
    )
    make_train_data, make_val_data = _dataset_makers(
        recipe, config, train_source, val_source, vocabulary
    )
    val_data = batch_filter(make_val_data())
    fit_val_data = _counted(val_data, config.validation_steps)
    if not fit_val_data.cardinality():
        raise ValueError(
            f"The validation data yielded no example: {describe_source(val_source)}. "
            "Give a validation split with readable examples that have reference "
            "summaries, or set "
            "validation_holdout to validate on part of the training data."
        )
    if strategy in ("mirrored", "multi_worker"):
        # Keras 3.15's `fit` under a MirroredStrategy reduces the first
        # batch with MEAN to build the model symbolically, which fails on
        # boolean features (AddN on the masks) and drops that batch from
        # training; its optimizer also clips each replica's part of the
        # gradient instead of their sum. The strategy.run loop has none of
        # these problems (and is the only way under MultiWorkerMirrored:
        # keras-team/keras#20585).
        with naming_corrupt_shards(sharded):
            return custom_fit(
                recipe, config, out=out, vocabulary=vocabulary,
                train_data=make_train_data, val_data=make_val_data, verbose=verbose,
                strategy=tf_strategy, max_minutes=max_minutes,
                # Each worker reads its own shard files (a tf.data service
                # already hands every consumer different examples).
                per_worker_data=(
                    strategy == "multi_worker" and sharded is not None
                    and data_service is None
                ),
                extra_callbacks=extra_callbacks, init_from=init_from,
                init_checkpoint=init_checkpoint,
            )

    # The model is built on a validation batch: an iterator over
    # `train_data` here would shift the shuffle order of the one `fit` uses.
    with naming_corrupt_shards(sharded):
        sample_batch = next(iter(val_data))
    train_data = make_train_data()
    # The model's weights are drawn from the seed again (Python's, NumPy's
    # and Keras's generators), but TensorFlow's global seed stays set:
    # setting it would clear TensorFlow's eager kernel cache, and with it
    # the SentencePiece resource of the datasets just built, which would
    # then have to be built (traced) again. Every shuffle has its own seed.
    seed_model_building(config.seed)
    with _model_scope(tf_strategy):
        model = build_compiled_model(
            recipe, config, vocabulary.vocabulary_size, sample_batch[0]
        )
    if tf_strategy is None:
        # JAX's fit would otherwise open an iterator of its own on the
        # training data to build the loss and metrics (see the function).
        jax_training.build_loss_and_metrics(model, sample_batch)
    backup_dir = run_folder.path(out, run_folder.BACKUP)
    done = TrainingBackup.restore(model, backup_dir)
    if init_from is not None and not done:
        warm_start(model, init_from, init_checkpoint)
        if verbose:
            print(f"Warm-started from {init_from} ({init_checkpoint} checkpoint).")
    budget = TimeBudget(max_minutes) if max_minutes else None
    callbacks = _fit_callbacks(recipe, config, write_dir, budget, extra_callbacks)
    if verbose and done:
        print(f"Resuming {out} from step {done} of {config.epochs * config.steps_per_epoch}.")
    with naming_corrupt_shards(sharded):
        _fit_remaining_steps(
            model, config, done, train_data=train_data, make_train_data=make_train_data,
            val_data=fit_val_data, callbacks=callbacks, verbose=verbose,
        )
    # The returned model holds what model.keras holds: with ema_momentum,
    # the averaged weights (the backup keeps the training weights).
    finalize_averaged_weights(model)
    return TrainResult(
        out=out,
        steps=int(model.optimizer.iterations.numpy()),
        history=epoch_history(out),
        model=model,
        vocabulary=vocabulary,
        stopped_early=bool(budget and budget.stopped_at_step is not None),
    )


def _model_scope(tf_strategy):
    """`tf_strategy.scope()`, or a null context for None (under JAX)."""
    return contextlib.nullcontext() if tf_strategy is None else tf_strategy.scope()


def _check_arguments(recipe, config, recipe_name, strategy, max_minutes, init_from,
                     init_checkpoint):
    """Raises a ValueError for a setting of `train` that cannot run, before
    anything is written."""
    if strategy not in STRATEGIES:
        raise ValueError(f"Unknown strategy {strategy!r}; expected one of {list(STRATEGIES)}.")
    for name in ("epochs", "steps_per_epoch"):
        check_int(name, getattr(config, name))
    if max_minutes is not None and not max_minutes > 0:
        raise ValueError(f"`max_minutes` must be None or > 0, received {max_minutes!r}.")
    monitor = config.checkpoint_monitor
    check_checkpoint_monitor(monitor)
    if monitor == "val_reward" and sequence_objective(config) is None:
        raise ValueError(
            "checkpoint_monitor='val_reward' is the held-out reward of "
            "sequence-level training; set reinforce_weight > 0, or monitor "
            "val_loss or val_accuracy."
        )
    if monitor == "val_accuracy":
        names = sorted(metric.name for metric in recipe_metrics(recipe, config))
        if "accuracy" not in names:
            raise ValueError(
                "checkpoint_monitor='val_accuracy' needs the recipe's token "
                f"accuracy, and recipe {recipe_name!r} "
                f"reports {names or 'no metric'}; monitor val_loss."
            )
    check_checkpoint_name(init_checkpoint, "--init-checkpoint")
    if init_from is None and init_checkpoint != "last":
        raise ValueError(
            f"--init-checkpoint {init_checkpoint} chooses the weights of --init-from, "
            "which was not given."
        )
    if init_from is not None:
        check_init_from(init_from, recipe_name, config)


def _sources_and_vocabulary(data, sharded, out, recipe_name, config, init_from,
                            data_service):
    """`(train source, validation source, Vocabulary)` of a run: shard
    sources and the shards' vocabulary, or resolved JSONL sources (expanded
    for `train_references`) and a trained or copied vocabulary."""
    if data_service is not None and sharded is None:
        raise ValueError(
            f"--data-service {data_service} runs the input pipeline on tf.data "
            "service workers, which cannot run the Python that reads and "
            "structures JSONL; give --data a folder of shards written by "
            "keras-hsum preprocess (DIR/train and DIR/val)."
        )
    if sharded is not None:
        train_source, val_source = shard_sources(
            sharded, out, recipe_name, config, data_service
        )
        vocabulary = shard_vocabulary(
            sharded[0], out, init_from, backbone=getattr(config, "backbone", None)
        )
        return train_source, val_source, vocabulary
    train_source, val_source = resolve_data(
        data, config.dataset, holdout=config.validation_holdout
    )
    vocabulary = load_or_train_vocabulary(
        out, train_source, config.vocabulary_size, init_from=init_from,
        ranker_run=getattr(config, "ranker_run", None),
        backbone=getattr(config, "backbone", None),
    )
    train_source = training_source(train_source, config.train_references)
    check_trainable(train_source)
    return train_source, val_source, vocabulary


def _dataset_makers(recipe, config, train_source, val_source, vocabulary):
    """`(make_train_data(input_context=None), make_val_data())`: each call
    builds a fresh dataset.

    A shuffled dataset reshuffles for every new iterator over the same
    object, so only the first iterator of a fresh dataset reproduces an
    uninterrupted run's batches. With an input context (multi_worker on
    shards), the training data is this worker's shard files in per-replica
    batches.
    """

    def make_train_data(input_context=None):
        source = train_source
        if input_context is not None:
            source = dataclasses.replace(train_source, input_context=input_context)
        return recipe.make_dataset(
            config, source, vocabulary, training=True, seed=config.seed,
            cache=True, max_examples=config.max_train_examples,
        )

    def make_val_data():
        return recipe.make_dataset(
            config, val_source, vocabulary, training=False, seed=config.seed,
            cache=True, max_examples=config.max_val_examples,
        )

    return make_train_data, make_val_data


def _fit_callbacks(recipe, config, out, budget, extra_callbacks):
    """The callbacks of the `fit` path, in the order they must run."""
    backup_dir = run_folder.path(out, run_folder.BACKUP)
    callbacks = [
        NonFiniteLossGuard(),
        AveragedWeightsForValidation(),
        EpochCheckpoint(out, monitor=config.checkpoint_monitor,
                        keep_epochs=config.keep_epoch_checkpoints),
        HistoryWriter(out),
        # After the checkpoint and history: the epoch-end backup commits
        # the epoch only once they are written.
        TrainingBackup(backup_dir, config.backup_every_steps,
                       config.steps_per_epoch),
        keras.callbacks.TensorBoard(run_folder.path(out, run_folder.LOGS), update_freq=10),
    ]
    callbacks += recipe_callbacks(recipe, config)
    if budget:
        callbacks.append(budget)
    return callbacks + list(extra_callbacks)


def _fit_remaining_steps(model, config, done, *, train_data, make_train_data, val_data,
                         callbacks, verbose):
    """Fits `model` from optimizer step `done` to the config's last step.

    At most two fit calls: the rest of an interrupted epoch, then the
    remaining epochs (one iterator, so the in-memory cache is reused). The
    pipeline is deterministic, so skipping the batches already consumed
    continues exactly where the interrupted run stopped.
    """
    total = config.epochs * config.steps_per_epoch
    first = True
    while done < total and not model.stop_training:
        epoch = done // config.steps_per_epoch
        partial = done % config.steps_per_epoch
        model.fit(
            (train_data if first else make_train_data()).skip(done),
            initial_epoch=epoch,
            epochs=epoch + 1 if partial else config.epochs,
            steps_per_epoch=config.steps_per_epoch - partial,
            validation_data=val_data,
            callbacks=callbacks,
            verbose=verbose,
            # The pipeline shuffles itself (seeded, reproducible on
            # resume); fit's default shuffle=True would only warn.
            shuffle=False,
        )
        first = False
        now = int(model.optimizer.iterations.numpy())
        if now == done:
            break
        done = now


def _counted(val_data, steps):
    """At most `steps` batches of `val_data`, with their number declared.

    Keras's `fit` warns "Your input ran out of data" whenever a dataset of
    unknown length ends, with or without `validation_steps` (12 FewSum
    amazon products fill 2 of the tiny configs' 4 validation batches); a
    known cardinality ends the pass quietly. Counting is one pass over the
    (cached) validation pipeline.
    """
    if steps:
        val_data = val_data.take(steps)
    count = int(val_data.reduce(tf.constant(0, tf.int64), lambda count, _: count + 1))
    return val_data.apply(tf.data.experimental.assert_cardinality(count))
