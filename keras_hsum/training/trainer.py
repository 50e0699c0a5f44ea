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

Strategies: "default" (one device, `model.fit`), "mirrored"
(`MirroredStrategy` over the local GPUs, or over the logical CPU devices
when there are several) and "multi_worker" (`MultiWorkerMirroredStrategy`
from `TF_CONFIG`). Both distributed strategies train with
`keras_hsum.training.distributed.custom_fit`, a `strategy.run` loop over
the same compiled model and callbacks: Keras 3's `model.fit` does not run
under MultiWorkerMirroredStrategy (keras-team/keras#20585), and under
MirroredStrategy it fails on boolean features, skips the first batch of
every `fit` call and clips each replica's partial gradient (see `train`).
"""

import contextlib
import dataclasses
import filecmp
import functools
import glob
import json
import os
import shutil
import warnings

import keras
import tensorflow as tf

from keras_hsum.checks import check_int
from keras_hsum.data import corpora
from keras_hsum.data.reader import ReadReport
from keras_hsum.data.labels import principal_sentence_examples
from keras_hsum.data.reader import leave_one_out_examples
from keras_hsum.data.reader import one_example_per_reference
from keras_hsum.data.reader import read_examples
from keras_hsum.data.vocabulary import Vocabulary
from keras_hsum.data.vocabulary import corpus_sentences
from keras_hsum.decoding.reinforce import ReinforceObjective
from keras_hsum.decoding.sampling import Sampling
from keras_hsum.models.losses import LabelSmoothedCrossEntropy
from keras_hsum.training.callbacks import AveragedWeightsForValidation
from keras_hsum.training.callbacks import EpochCheckpoint
from keras_hsum.training.callbacks import HistoryWriter as _HistoryWriter
from keras_hsum.training.callbacks import NonFiniteLossGuard
from keras_hsum.training.callbacks import TimeBudget
from keras_hsum.training.callbacks import TrainingBackup
from keras_hsum.training.callbacks import check_checkpoint_monitor
from keras_hsum.training.callbacks import finalize_averaged_weights
from keras_hsum.training.callbacks import keep_training_weights_after_fit
from keras_hsum.training.callbacks import read_history as _history
from keras_hsum.training.checkpoints import check_checkpoint_name
from keras_hsum.training.checkpoints import checkpoint_files
from keras_hsum.training.checkpoints import load_checkpoint_weights
from keras_hsum.training.schedules import NoamSchedule

STRATEGIES = ("default", "mirrored", "multi_worker")


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
            f"{os.path.join(train, 'vocabulary.model')}."
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


def load_or_train_vocabulary(out, train_source, vocabulary_size, init_from=None,
                             ranker_run=None):
    """`out/vocabulary.model`, trained on the training split when missing.

    With `init_from` (a run folder to warm-start from), that run's
    vocabulary is copied instead: its weights only mean something with its
    pieces. Else with `ranker_run` (a config with rank="learned": the
    ranker reads this run's token ids), the ranker run's vocabulary is
    copied. A run folder that already holds another vocabulary is refused.
    """
    path = os.path.join(out, "vocabulary.model")
    flag = "--init-from" if init_from is not None else "ranker_run"
    init_from = init_from if init_from is not None else ranker_run
    if init_from is not None:
        source = os.path.join(init_from, "vocabulary.model")
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


def make_strategy(kind):
    """A `tf.distribute.Strategy` for "default", "mirrored" or "multi_worker"."""
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


def make_optimizer(config):
    """Adam with the Noam schedule, or Adagrad, with global-norm clipping and,
    given `config.ema_momentum`, a moving average of the weights."""
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
        return keras.optimizers.Adam(
            learning_rate=schedule, beta_1=0.9, beta_2=0.998, epsilon=1e-9, **clip
        )
    if config.optimizer == "adagrad":
        return keras.optimizers.Adagrad(
            learning_rate=config.learning_rate, initial_accumulator_value=0.1, **clip
        )
    raise ValueError(
        f"Unknown optimizer {config.optimizer!r}; expected 'adam' or 'adagrad'."
    )


def recipe_loss(recipe, config):
    if hasattr(recipe, "loss"):
        return recipe.loss(config)
    return LabelSmoothedCrossEntropy(config.label_smoothing)


def recipe_metrics(recipe, config):
    if hasattr(recipe, "metrics"):
        return recipe.metrics(config)
    return [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]


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
    context = tf.distribute.get_replica_context()
    if context is None:  # cross-replica: the whole batch
        return 0, 1
    return context.replica_id_in_sync_group, context.num_replicas_in_sync


def build_compiled_model(recipe, config, vocabulary_size, sample_inputs):
    """Builds the recipe's model (with the config's `sequence_objective`),
    runs it once on `sample_inputs` (so that every weight exists before a
    backup is restored) and compiles it."""
    model = recipe.build_model(config, vocabulary_size)
    model.sequence_objective = sequence_objective(config)
    if model.sequence_objective is not None:
        # Places the draws and scales the term per tf.distribute replica.
        model.replica_placement = replica_placement
        # The samples' mean reward, beside the loss in the progress bar, the
        # history and TensorBoard (a metric must exist before the build).
        model.reward_tracker = keras.metrics.Mean(name="reward")
    model(sample_inputs, training=False)
    model.compile(
        optimizer=make_optimizer(config),
        loss=recipe_loss(recipe, config),
        weighted_metrics=recipe_metrics(recipe, config),
    )
    model.optimizer.build(model.trainable_variables)
    keep_training_weights_after_fit(model.optimizer)
    return model


def resolved_config(recipe_name, config_name, config, data, strategy, init_from=None,
                    init_checkpoint="last"):
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


# Settings that shape a model's weights: a warm start needs them equal.
_WEIGHT_SHAPING = ("pointer_generator", "token_shift", "tie_embeddings", "layer_schedule",
                   "use_coverage")


def check_init_from(init_from, recipe_name, config):
    """Raises a ValueError naming what differs when the run in `init_from`
    cannot warm-start a `recipe_name` run with `config`: another recipe, or
    other sizes (`*_dim`, `num_*` layers and heads) or structure
    (pointer_generator, token_shift, ...). Runs without a readable
    config.json are left to the weight loading's own check."""
    path = os.path.join(init_from, "config.json")
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


def _check_or_write_config(out, resolved, defaults=None, replace_untrained=False):
    """Writes `out/config.json`, or refuses a folder holding another run.

    `defaults` maps config field names to their defaults: a field that the
    stored config lacks (a run started before the field existed) and that
    keeps its default is not a difference. With `replace_untrained`, a
    folder whose run never wrote a training step (a command that failed on
    a setting, the data or --init-from) takes the new configuration, and its
    vocabulary is removed to be made again.
    """
    defaults = defaults or {}
    path = os.path.join(out, "config.json")
    # Compared as it is stored: JSON has no tuples (a tuple field such as
    # HT's graph_heads reads back as a list).
    resolved = json.loads(json.dumps(resolved))
    if os.path.exists(path):
        with open(path) as file:
            previous = json.load(file)
        ignore = ("strategy",)
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
            if os.path.exists(os.path.join(out, "best.json")):
                raise ValueError(
                    f"{out!r}: best.keras was chosen on validation_steps={old} "
                    f"and this command sets {new}; a resumed run would compare "
                    "its validation results with ones measured on other "
                    "examples. Keep validation_steps, or choose a new --out."
                )
        if differences and replace_untrained and not _trained_anything(out):
            # An earlier command failed before its first step (a bad
            # setting, data or --init-from): nothing to resume, so the
            # corrected command takes the folder; its vocabulary is trained
            # (or copied) again for the new configuration.
            print(f"{out!r} holds a configuration that never trained a step; "
                  f"replacing it ({sorted(differences)} changed).")
            vocabulary = os.path.join(out, "vocabulary.model")
            if os.path.exists(vocabulary):
                os.remove(vocabulary)
        elif differences:
            raise ValueError(
                f"{out!r} already holds a run with another configuration "
                f"(field: (old, new)) {differences}. Run the same command to "
                "resume it, or choose a new --out."
            )
    # Atomically: every worker of a multi-worker run writes (and may read)
    # the same file.
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w") as file:
        json.dump(resolved, file, indent=2, sort_keys=True)
    os.replace(temporary, path)


def _check_trainable(source):
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


def _trained_anything(out):
    """Whether the run folder holds anything a training step wrote: a
    checkpoint, a history or a backup."""
    if any(os.path.exists(os.path.join(out, name))
           for name in ("model.keras", "best.keras", "history.json")):
        return True
    backup = os.path.join(out, "backup")
    return os.path.isdir(backup) and bool(os.listdir(backup))


@contextlib.contextmanager
def _naming_corrupt_shards(sharded):
    """Turns TensorFlow's DataLossError on a corrupt shard record (which
    names no file) into `verify_shards`' ShardError naming the shard file
    and record; other errors, and data that is not sharded, pass as they
    are."""
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
):
    """Trains `recipe` with `config`; resumes when `out` holds a backup.

    Args:
        recipe: a recipe module (see `recipes.base`).
        config: its frozen config (already with any overrides).
        out: the run folder (created).
        data: see `resolve_data`.
        strategy: "default", "mirrored" or "multi_worker".
        recipe_name, config_name: recorded in `out/config.json`.
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

    Returns:
        A `TrainResult`.

    Raises:
        NonFiniteLossError: when the loss becomes NaN/inf (the last good
            backup is kept).
        ValueError: for bad data, strategy or init checkpoint, or a folder
            holding another run.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"Unknown strategy {strategy!r}; expected one of {list(STRATEGIES)}.")
    for name in ("epochs", "steps_per_epoch"):
        check_int(name, getattr(config, name))
    if max_minutes is not None and not max_minutes > 0:
        raise ValueError(f"`max_minutes` must be None or > 0, received {max_minutes!r}.")
    monitor = config.checkpoint_monitor
    check_checkpoint_monitor(monitor)
    reinforce = sequence_objective(config)
    if monitor == "val_reward" and reinforce is None:
        raise ValueError(
            "checkpoint_monitor='val_reward' is the held-out reward of "
            "sequence-level training; set reinforce_weight > 0, or monitor "
            "val_loss or val_accuracy."
        )
    recipe_name = recipe_name or recipe.__name__.rsplit(".", 1)[-1]
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
    os.makedirs(out, exist_ok=True)
    _check_or_write_config(
        out,
        resolved_config(recipe_name, config_name, config, data, strategy, init_from,
                        init_checkpoint),
        defaults={field.name: field.default for field in dataclasses.fields(config)},
        replace_untrained=True,
    )
    # MultiWorkerMirroredStrategy must be created before TensorFlow runs
    # anything (it configures the collective ops of the eager context).
    distribution = make_strategy(strategy)
    # The global seed is set before the datasets are built: their shuffle
    # seeds derive from it, so every dataset built by this run (and by a
    # resumed run) yields the same batches in the same order.
    keras.utils.set_random_seed(config.seed)
    sharded = shard_splits(data)
    if data_service is not None and sharded is None:
        raise ValueError(
            f"--data-service {data_service} runs the input pipeline on tf.data "
            "service workers, which cannot run the Python that reads and "
            "structures JSONL; give --data a folder of shards written by "
            "keras-hsum preprocess (DIR/train and DIR/val)."
        )
    if sharded is not None:
        train_source, val_source = _shard_sources(
            sharded, out, recipe_name, config, init_from, data_service
        )
        vocabulary = Vocabulary.load(os.path.join(out, "vocabulary.model"))
    else:
        train_source, val_source = resolve_data(
            data, config.dataset, holdout=config.validation_holdout
        )
        vocabulary = load_or_train_vocabulary(
            out, train_source, config.vocabulary_size, init_from=init_from,
            ranker_run=getattr(config, "ranker_run", None),
        )
        train_source = training_source(train_source, config.train_references)
        _check_trainable(train_source)

    def make_train_data(input_context=None):
        # A fresh dataset per use: a shuffled dataset reshuffles for every
        # new iterator over the same object, so only the first iterator of
        # a fresh dataset reproduces an uninterrupted run's batches. With an
        # input context (multi_worker on shards), this worker's shard files
        # in per-replica batches.
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

    train_data = make_train_data()
    val_data = make_val_data()
    fit_val_data = _counted(val_data, config.validation_steps)
    if not fit_val_data.cardinality():
        raise ValueError(
            f"The validation data yielded no example: {_describe(val_source)}. "
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
        from keras_hsum.training.distributed import custom_fit

        with _naming_corrupt_shards(sharded):
            return custom_fit(
                recipe, config, out=out, vocabulary=vocabulary,
                train_data=make_train_data, val_data=make_val_data, verbose=verbose,
                strategy=distribution, max_minutes=max_minutes,
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
    with _naming_corrupt_shards(sharded):
        sample_inputs = next(iter(val_data))[0]
    keras.utils.set_random_seed(config.seed)
    with distribution.scope():
        model = build_compiled_model(
            recipe, config, vocabulary.vocabulary_size, sample_inputs
        )
    # set_random_seed cleared TensorFlow's eager kernel cache, and with it
    # the SentencePiece resource of the datasets built above: build them
    # again (the same seeds give the same batches).
    train_data = make_train_data()
    fit_val_data = _counted(make_val_data(), config.validation_steps)
    backup_dir = os.path.join(out, "backup")
    done = TrainingBackup.restore(model, backup_dir)
    if init_from is not None and not done:
        warm_start(model, init_from, init_checkpoint)
        if verbose:
            print(f"Warm-started from {init_from} ({init_checkpoint} checkpoint).")
    total = config.epochs * config.steps_per_epoch
    budget = TimeBudget(max_minutes) if max_minutes else None
    callbacks = [
        NonFiniteLossGuard(),
        AveragedWeightsForValidation(),
        EpochCheckpoint(out, monitor=monitor,
                        keep_epochs=config.keep_epoch_checkpoints),
        _HistoryWriter(out),
        # After the checkpoint and history: the epoch-end backup commits
        # the epoch only once they are written.
        TrainingBackup(backup_dir, config.backup_every_steps,
                       config.steps_per_epoch),
        keras.callbacks.TensorBoard(os.path.join(out, "logs"), update_freq=10),
    ]
    if hasattr(recipe, "callbacks"):
        callbacks += list(recipe.callbacks(config))
    if budget:
        callbacks.append(budget)
    callbacks += list(extra_callbacks)
    if verbose and done:
        print(f"Resuming {out} from step {done} of {total}.")
    # At most two fit calls: the rest of an interrupted epoch, then the
    # remaining epochs (one iterator, so the in-memory cache is reused).
    # The pipeline is deterministic, so skipping the batches already
    # consumed continues exactly where the interrupted run stopped.
    first = True
    while done < total and not model.stop_training:
        epoch = done // config.steps_per_epoch
        partial = done % config.steps_per_epoch
        with _naming_corrupt_shards(sharded):
            model.fit(
                (train_data if first else make_train_data()).skip(done),
                initial_epoch=epoch,
                epochs=epoch + 1 if partial else config.epochs,
                steps_per_epoch=config.steps_per_epoch - partial,
                validation_data=fit_val_data,
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
    # The returned model holds what model.keras holds: with ema_momentum,
    # the averaged weights (the backup keeps the training weights).
    finalize_averaged_weights(model)
    history = {}
    for entry in _history(out)["epochs"]:
        for key, value in entry.items():
            history.setdefault(key, []).append(value)
    return TrainResult(
        out=out,
        steps=int(model.optimizer.iterations.numpy()),
        history=history,
        model=model,
        vocabulary=vocabulary,
        stopped_early=bool(budget and budget.stopped_at_step is not None),
    )


def _shard_sources(sharded, out, recipe_name, config, init_from, data_service):
    """The `ShardSource`s of a sharded run; puts the shards' vocabulary in
    `out` (refusing another one there or in `init_from`)."""
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
    source = os.path.join(train, shards.VOCABULARY_FILE)
    for other in filter(None, (
        os.path.join(out, "vocabulary.model"),
        init_from and os.path.join(init_from, "vocabulary.model"),
    )):
        if os.path.exists(other) and shards.file_sha256(other) != vocabularies["train"]:
            raise ValueError(
                f"{other!r} is another vocabulary than the one the shards in "
                f"{os.path.dirname(train)!r} were tokenized with ({source}); "
                "choose a new --out, or preprocess with --vocab "
                f"{other}."
            )
    path = os.path.join(out, "vocabulary.model")
    if not os.path.exists(path):
        temporary = f"{path}.{os.getpid()}.tmp"
        shutil.copyfile(source, temporary)
        os.replace(temporary, path)
    service = None
    if data_service is not None:
        service = (data_service, f"keras_hsum_{recipe_name}_{os.path.basename(os.path.abspath(out))}")
    return (
        shards.ShardSource(train, data_service=service, recipe=recipe_name),
        shards.ShardSource(val, recipe=recipe_name),
    )


def _describe(source):
    if isinstance(source, list):
        return f"{len(source)} example(s) held out from the training data"
    if hasattr(source, "folder"):
        return f"shard folder {source.folder!r}"
    return repr(os.fspath(source))


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


def run_folders(root):
    """Run folders (those with a config.json) under `root`."""
    return sorted(os.path.dirname(p) for p in glob.glob(os.path.join(root, "*", "config.json")))
