"""The model side of a training run: its tf.distribute strategy, the
recipe's model compiled with its optimizer, loss and metrics, and the warm
start from another run's weights. Both training loops (`model.fit` in
`keras_hsum.training.trainer`, the `strategy.run` loop in
`keras_hsum.training.distributed`) build their model here.
"""

import dataclasses
import json
import os
import random

import keras
import numpy as np

from keras_hsum import run_folder
from keras_hsum.decoding.reinforce import ReinforceObjective
from keras_hsum.decoding.sampling import Sampling
from keras_hsum.models.losses import LabelSmoothedCrossEntropy
from keras_hsum.training.callbacks import keep_training_weights_after_fit
from keras_hsum.training.checkpoints import checkpoint_files
from keras_hsum.training.checkpoints import load_checkpoint_weights
from keras_hsum.training.learning_rate_groups import GroupedAdam
from keras_hsum.training.schedules import NoamSchedule

STRATEGIES = ("default", "mirrored", "multi_worker")


def make_strategy(kind):
    """A `tf.distribute.Strategy` for "default", "mirrored" or "multi_worker"."""
    import tensorflow as tf  # here, so that the loss and optimizer set-up imports without it

    if kind == "default":
        return tf.distribute.get_strategy()
    if kind == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        cpus = tf.config.list_logical_devices("CPU")
        if gpus:
            return tf.distribute.MirroredStrategy()
        return tf.distribute.MirroredStrategy([device.name for device in cpus])
    if kind == "multi_worker":
        if "TF_CONFIG" not in os.environ:
            raise ValueError(
                "--strategy multi_worker needs the TF_CONFIG environment "
                'variable, e.g. {"cluster": {"worker": ["127.0.0.1:12345", '
                '"127.0.0.1:12346"]}, "task": {"type": "worker", "index": 0}}.'
            )
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise ValueError(f"Unknown strategy {kind!r}; expected one of {list(STRATEGIES)}.")


def make_optimizer(config, model=None):
    """Adam with the Noam schedule, or Adagrad, with global-norm clipping and,
    given `config.ema_momentum`, a moving average of the weights.

    A config on a pretrained backbone (`recipes.base.BackboneOptions`) with a
    `backbone_learning_rate_scale` other than 1 or `backbone_freeze_steps`
    gets a `GroupedAdam` whose groups are `model.variable_groups()`: the
    pretrained weights at that fraction of the rate, the encoder's own
    layers also frozen for the first steps."""
    clip = {"global_clipnorm": config.clipnorm} if config.clipnorm else {}
    momentum = getattr(config, "ema_momentum", None)
    if momentum is not None:
        if not 0.0 < momentum < 1.0:
            raise ValueError(
                f"ema_momentum must lie strictly between 0 and 1 (e.g. 0.999), "
                f"or be None for no weight averaging; received {momentum!r}."
            )
        clip.update(use_ema=True, ema_momentum=momentum)
    if config.optimizer == "adam":
        schedule = NoamSchedule(
            hidden_dim=getattr(config, "hidden_dim", 256),
            warmup_steps=config.warmup_steps,
            factor=config.learning_rate,
        )
        adam = dict(learning_rate=schedule, beta_1=0.9, beta_2=0.998, epsilon=1e-9, **clip)
        groups = backbone_groups(config)
        if not groups:
            return keras.optimizers.Adam(**adam)
        if model is None or not hasattr(model, "variable_groups"):
            raise ValueError(
                "Per-group learning rates (backbone_learning_rate_scale, "
                "backbone_freeze_steps) need the model on the backbone, with "
                "`variable_groups()`; pass `model` to make_optimizer."
            )
        optimizer = GroupedAdam(groups=groups, **adam)
        optimizer.assign_group_variables(model.variable_groups())
        return optimizer
    if config.optimizer == "adagrad":
        return keras.optimizers.Adagrad(
            learning_rate=config.learning_rate, initial_accumulator_value=0.1, **clip
        )
    raise ValueError(
        f"Unknown optimizer {config.optimizer!r}; expected 'adam' or 'adagrad'."
    )


def backbone_groups(config):
    """`GroupedAdam` groups of a `BackboneOptions` config: the pretrained
    weights at `backbone_learning_rate_scale`, and the encoder's own layers
    also frozen for `backbone_freeze_steps`; [] when both are defaults (or
    the config has no backbone)."""
    if getattr(config, "backbone", None) is None:
        return []
    scale = float(config.backbone_learning_rate_scale)
    freeze = int(config.backbone_freeze_steps)
    if scale == 1.0 and not freeze:
        return []
    return [
        {"name": "pretrained", "scale": scale, "freeze_steps": 0},
        {"name": "pretrained_encoder", "scale": scale, "freeze_steps": freeze},
    ]


def recipe_declaration(recipe):
    """The declaration of `recipe`: a `keras_hsum.recipes.base.Recipe` as it
    is, a recipe module's `RECIPE`. (The library never imports the recipes:
    the entry points hand it one; see `keras_hsum.recipes.base`.)"""
    return getattr(recipe, "RECIPE", recipe)


def recipe_loss(recipe, config):
    """The recipe's `loss(config)`, or the label-smoothed token
    cross-entropy where it declares none."""
    loss = getattr(recipe_declaration(recipe), "loss", None)
    if loss is not None:
        return loss(config)
    return LabelSmoothedCrossEntropy(config.label_smoothing)


def recipe_metrics(recipe, config):
    """The recipe's `metrics(config)`, or the token accuracy where it
    declares none."""
    metrics = getattr(recipe_declaration(recipe), "metrics", None)
    if metrics is not None:
        return metrics(config)
    return [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]


def recipe_callbacks(recipe, config):
    """The recipe's `callbacks(config)` as a list (none where it declares
    none)."""
    callbacks = getattr(recipe_declaration(recipe), "callbacks", None)
    return list(callbacks(config)) if callbacks is not None else []


def sequence_objective(config):
    """The config's `ReinforceObjective`, or None when `reinforce_weight` is 0
    (or the recipe's config has no such field)."""
    weight = getattr(config, "reinforce_weight", 0.0) or 0.0
    if not weight:
        return None
    return ReinforceObjective(
        weight=weight, num_samples=getattr(config, "reinforce_samples", 4),
        sampling=Sampling(seed=config.seed),
    )


def replica_placement():
    """`(replica id, replicas in sync)` of the tf.distribute replica context
    this runs in: `(0, 1)` on one device or in a cross-replica context.
    `build_compiled_model` gives it to models with a sequence objective
    (`Summarizer.replica_placement`)."""
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    if context is None:  # cross-replica: the whole batch
        return 0, 1
    return context.replica_id_in_sync_group, context.num_replicas_in_sync


def seed_model_building(seed):
    """`keras.utils.set_random_seed(seed)` without `tf.random.set_seed`.

    Python's, NumPy's and Keras's global generators (which every weight
    initializer and dropout seed draws from) restart at `seed`, so a model
    built next has the weights it would have after `set_random_seed`.
    TensorFlow's global seed is left as the run set it before building its
    datasets: setting it clears TensorFlow's eager kernel cache, and with
    it the SentencePiece resource of every dataset built before, which
    would then have to be built (traced) again.
    """
    from keras.src.backend.common import global_state
    from keras.src.random import seed_generator
    from keras.src.utils import rng_utils

    global_state.set_global_attribute(rng_utils.GLOBAL_RANDOM_SEED, seed)
    global_state.set_global_attribute(seed_generator.GLOBAL_SEED_GENERATOR, None)
    random.seed(seed)
    np.random.seed(seed)


def build_compiled_model(recipe, config, vocabulary_size, sample_inputs):
    """Builds the recipe's model (with the config's `sequence_objective`),
    runs it once on `sample_inputs` (so that every weight exists before a
    backup is restored) and compiles it."""
    model = recipe_declaration(recipe).build_model(config, vocabulary_size)
    model.sequence_objective = sequence_objective(config)
    if model.sequence_objective is not None:
        # Places the draws and scales the term per tf.distribute replica.
        model.replica_placement = replica_placement
        # The samples' mean reward, beside the loss in the progress bar, the
        # history and TensorBoard (a metric must exist before the build).
        model.reward_tracker = keras.metrics.Mean(name="reward")
    model(sample_inputs, training=False)
    model.compile(
        optimizer=make_optimizer(config, model),
        loss=recipe_loss(recipe, config),
        weighted_metrics=recipe_metrics(recipe, config),
    )
    model.optimizer.build(model.trainable_variables)
    keep_training_weights_after_fit(model.optimizer)
    return model

# Settings that shape a model's weights: a warm start needs them equal.
_WEIGHT_SHAPING = ("pointer_generator", "token_shift", "tie_embeddings", "layer_schedule",
                   "use_coverage")


def check_init_from(init_from, recipe_name, config):
    """Raises a ValueError naming what differs when the run in `init_from`
    cannot warm-start a `recipe_name` run with `config`: another recipe, or
    other sizes (`*_dim`, `num_*` layers and heads) or structure
    (pointer_generator, token_shift, ...). Runs without a readable
    config.json are left to the weight loading's own check."""
    path = run_folder.path(init_from, run_folder.CONFIG)
    try:
        with open(path) as file:
            source = json.load(file)
    except (OSError, ValueError):
        return
    if source.get("recipe") and recipe_name and source["recipe"] != recipe_name:
        raise ValueError(
            f"--init-from {init_from!r} is a {source['recipe']!r} run; this is a "
            f"{recipe_name!r} run. Warm-starting needs the same recipe."
        )
    theirs = source.get("config", {})
    mine = dataclasses.asdict(config)
    differences = {
        name: (theirs[name], mine[name]) for name in sorted(mine)
        if name in theirs and theirs[name] != mine[name] and name != "num_oov" and (
            name.endswith("_dim") or name.startswith("num_") or name in _WEIGHT_SHAPING)
    }
    if differences:
        raise ValueError(
            f"--init-from {init_from!r} has other model sizes than this run "
            f"(setting: (theirs, this run's)) {differences}; warm-starting needs "
            "the same sizes: drop those --set overrides or choose another run."
        )


def warm_start(model, init_from, checkpoint="last"):
    """Loads the weights of the run in `init_from` into `model`.

    Args:
        model: the built, compiled model of the new run.
        init_from: a run folder written by `train`.
        checkpoint: "last" (its `model.keras`, the last epoch's weights),
            "best" (its `best.keras`, those of its lowest validation loss or
            checkpoint_monitor), "epoch-N" or "epochs-A-B" (a kept epoch's
            weights, or the mean of kept epochs A to B's; see
            `keras_hsum.training.checkpoints`).

    Raises:
        ValueError: for an unknown `checkpoint`, when the run has no such
            file, or when its weights do not fit `model` (another recipe or
            other sizes).
    """
    names = checkpoint_files(init_from, checkpoint, "--init-checkpoint")
    path = os.path.join(init_from, names[-1])
    if not os.path.exists(path):
        raise ValueError(
            f"--init-from {init_from!r} has no {names[-1]} "
            f"(--init-checkpoint {checkpoint}): it must be a run folder that "
            "finished at least one epoch"
            + (" with a validation loss." if checkpoint == "best" else ".")
        )
    # A .keras file also holds the source run's optimizer (its step count
    # and moments): the new run keeps its own fresh optimizer state, so the
    # learning-rate schedule starts from step 0.
    optimizer = getattr(model, "optimizer", None)
    fresh = [v.numpy() for v in optimizer.variables] if optimizer is not None else []
    try:
        load_checkpoint_weights(model, init_from, checkpoint, "--init-checkpoint")
    except (ValueError, KeyError) as error:
        raise ValueError(
            f"The weights of {path!r} do not fit this model: warm-starting "
            "needs the same recipe and the same sizes (hidden_dim, layers, "
            f"vocabulary, pointer_generator, ...). Keras said: {error}"
        ) from error
    if optimizer is not None:
        for variable, value in zip(optimizer.variables, fresh):
            variable.assign(value)
