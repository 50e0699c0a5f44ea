"""Fields every recipe config shares: data, vocabulary and optimisation.

A recipe is a module `recipes/<name>.py` with:

- `DEFAULT_DATASET`: the folder name under ../shared/data it trains on;
- `Config`: a frozen dataclass subclassing `RecipeConfig`;
- `CONFIGS`: `{"tiny": Config(...), "paper": Config(...), ...}`;
- `build_model(config, vocabulary_size) -> keras.Model` (not compiled);
- `make_dataset(config, source, vocabulary, *, training, seed=0, cache=None,
  max_examples=None) -> tf.data.Dataset` of `(inputs, labels, sample_weight)`
  batches of `config.batch_size` (`training=True`: shuffled and repeated;
  False: one pass, in order), built with `batches` below so that every
  recipe batches the same way;
- optionally `loss(config)` (default: label-smoothed token cross-entropy) and
  `metrics(config)` (default: masked token accuracy);
- optionally `DECODING`: `{"paper": {setting: value}}`, how the paper
  decodes, as `keras_hsum.export.cli.DECODING_DEFAULTS` settings (applied by
  `keras-hsum export --preset paper`; see docs/serving.md).

Library code never imports recipes; `keras_hsum.training.train` and the CLI
take a recipe module and a config.

A recipe module imports without TensorFlow (or sentencepiece): its configs
and `build_model` need only Keras and keras_hsum's layers and models, so a
machine with JAX alone can build and train the paper models. Whatever reads
or structures data (`keras_hsum.data`, TensorFlow) is imported inside the
functions that use it (`make_dataset`, `structure_options`, ...); see
tests/test_no_tensorflow.py.
"""

import dataclasses
import hashlib
import os


@dataclasses.dataclass(frozen=True)
class RecipeConfig:
    """Data, vocabulary and optimisation fields shared by every recipe.

    Attributes:
        dataset: default corpus folder (../shared/data/<dataset>).
        vocabulary_size: SentencePiece pieces trained on the corpus.
        batch_size: global batch size (split across replicas).
        epochs: training epochs.
        steps_per_epoch: optimizer steps per epoch (the train set repeats).
        validation_steps: validation batches per epoch (None: the whole split).
        optimizer: "adam" (Noam schedule) or "adagrad" (constant rate).
        learning_rate: Noam: peak factor (lr = learning_rate · D^-0.5 ·
            min(step^-0.5, step·warmup^-1.5)); adagrad: the rate.
        warmup_steps: Noam warm-up steps.
        label_smoothing: ε of the token cross-entropy.
        clipnorm: global gradient-norm clipping (None: off).
        ema_momentum: when set (e.g. 0.999), the optimizer keeps an
            exponential moving average of the weights (Polyak averaging,
            Keras' `use_ema`): validation, `model.keras` and `best.keras`
            use the averaged weights, training goes on from its own.
            None: off.
        backup_every_steps: BackupAndRestore saves every this many steps.
        max_train_examples, max_val_examples: use only the first examples
            (with `train_references="all"`, the first training pairs).
        train_references: "primary" (train on each example's primary
            reference), "all" (one training pair per reference, for data
            with several references per input such as FewSum) or
            "leave_one_out" (self-supervised: each document of a
            multi-document input as the summary of the others) or
            "principal_sentence" (self-supervised: each passage of at most
            250 words with its principal sentence as the summary, left in
            the input) or "gap_sentence" (the same, the sentence removed
            from the input as PEGASUS does), the last three for pretraining
            before `--init-from`. Validation always uses the primary
            reference.
        validation_holdout: when above 0, this fraction of the training
            examples (the last ones in file order, at least one) validates
            and picks the best checkpoint instead of the data's validation
            split, which training then never reads: it stays unseen for
            evaluation. 0: the data's validation split (a folder without
            one, or a single file, holds out its last 10%).
        checkpoint_monitor: what picks `best.keras` among the epochs:
            "val_loss" (the lowest validation loss) or "val_accuracy" (the
            highest validation token accuracy; a recipe whose metrics
            include "accuracy") or "val_reward"
            (with `reinforce_weight` > 0: the highest mean reward of the
            samples drawn on the validation examples, the same draws at
            every epoch).
        keep_epoch_checkpoints: also keep every epoch's weights, as
            `epochs/epoch-NNN.keras` in the run folder, for a choice made
            after training (`keras-hsum export --checkpoint epoch-N`, or
            `epochs-A-B` for the mean of epochs A to B); each file is the
            size of `model.keras`.
        reinforce_weight: λ of sequence-level training on a ROUGE reward
            (`keras_hsum.decoding.ReinforceObjective`): the loss becomes
            (1 - λ) · cross-entropy + λ · REINFORCE with a leave-one-out
            baseline over `reinforce_samples` samples per example, drawn
            in-graph at every step. 0: off (teacher forcing only). Usually
            a fine-tuning stage after `--init-from`; under a distributed
            strategy each replica draws its rows' samples of the global
            batch, as one device does.
        reinforce_samples: K >= 2 samples per example.
        resplit_sentences: no longer changes anything, kept so that run
            folders written before it read back. Training now structures
            the text with the SavedModel's own `TextStructurer`, which
            always splits sentences with `split_sentences` (what True
            did); the rows of the README's tables were trained with the
            corpus' own sentences (False), which differ from ours in 51 of
            the 101 bundled scisummnet validation paragraphs.
        seed: shuffling and initialisation seed.
    """

    dataset: str = "qmsum_goldspan"
    vocabulary_size: int = 8000
    batch_size: int = 8
    epochs: int = 10
    steps_per_epoch: int = 100
    validation_steps: int | None = None
    optimizer: str = "adam"
    learning_rate: float = 2.0
    warmup_steps: int = 4000
    label_smoothing: float = 0.1
    clipnorm: float | None = 2.0
    ema_momentum: float | None = None
    backup_every_steps: int = 50
    max_train_examples: int | None = None
    max_val_examples: int | None = None
    train_references: str = "primary"
    validation_holdout: float = 0.0
    checkpoint_monitor: str = "val_loss"
    keep_epoch_checkpoints: bool = False
    reinforce_weight: float = 0.0
    reinforce_samples: int = 4
    resplit_sentences: bool = False
    seed: int = 0

    def replace(self, **changes):
        """A copy with `changes` (frozen dataclasses are immutable)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self):
        return dataclasses.asdict(self)


def batches(
    config,
    source,
    vocabulary,
    family,
    *,
    training,
    seed=0,
    cache=None,
    max_examples=None,
    shuffle_buffer=256,
    **structure,
):
    """`keras_hsum.data.make_dataset` batched the way every recipe trains.

    Batches of `config.batch_size` with static shapes (every [B,P,T] and S
    padded to the config's maxima: one trace, XLA friendly); `training=True`
    shuffles (`shuffle_buffer`), repeats and drops the last partial batch,
    `training=False` is one pass in file order. `structure` holds the
    family's sizes and options (`max_units`, `max_tokens`,
    `max_target_length`, `family_options`, `extras`).

    `source` may also be a shard folder written by `keras-hsum preprocess`
    (or a `keras_hsum.data.shards.ShardSource`): its examples are read with
    `read_shards` and batched the same way, after checking that they were
    structured as this call asks (family, sizes, options, extras) with this
    vocabulary.

    Returns:
        tf.data of feature dicts, before `training_pairs`.
    """
    from keras_hsum.data import DatasetOptions
    from keras_hsum.data import make_dataset
    from keras_hsum.data import shards
    from keras_hsum.data.example_features import ExampleStructure

    if isinstance(source, _StructureProbe):
        raise _Probed(ExampleStructure(family, **_structure_arguments(structure)))

    options = DatasetOptions(
        batch_size=config.batch_size,
        shuffle_buffer=shuffle_buffer if training else 0,
        seed=seed,
        pad_to_max=True,
        repeat=training,
        drop_remainder=training,
        cache=cache,
        max_examples=max_examples,
    )
    if isinstance(source, (str, os.PathLike)) and shards.is_shard_folder(source):
        source = shards.ShardSource(os.fspath(source))
    if isinstance(source, shards.ShardSource):
        return shards.read_shards(
            source.folder,
            batch_size=options.batch_size,
            shuffle_buffer=options.shuffle_buffer,
            seed=options.seed,
            pad_to_max=options.pad_to_max,
            repeat=options.repeat,
            drop_remainder=options.drop_remainder,
            max_examples=options.max_examples,
            # One shard after the other when not training: for a corpus file
            # split into contiguous shards, corpus order.
            cycle_length=None if training else 1,
            input_context=source.input_context,
            data_service=source.data_service,
            expect=dict(
                structure=ExampleStructure(family, **_structure_arguments(structure)),
                recipe=source.recipe,
                vocabulary_sha256=hashlib.sha256(vocabulary.proto).hexdigest(),
            ),
        )
    return make_dataset(source, vocabulary, family, options=options, **structure)


def _structure_arguments(structure):
    arguments = dict(structure)
    arguments["extras"] = tuple(arguments.get("extras") or ())
    arguments["family_options"] = dict(arguments.get("family_options") or {})
    return arguments


class _StructureProbe:
    """A source that makes `batches` report its structure instead of
    building a dataset (see `example_structure`)."""


class _Probed(Exception):
    def __init__(self, structure):
        super().__init__("structure probed")
        self.structure = structure


def example_structure(recipe, config, vocabulary, *, training):
    """How `recipe.make_dataset` structures one example under `config`.

    Runs the recipe's `make_dataset` with a probe as its source, which
    `batches` answers with the family, sizes, options and extras it was
    given; nothing is read or built.

    Args:
        recipe: a recipe module.
        config: its config.
        vocabulary: the `Vocabulary` (extras such as SEAL's segment labels
            use it).
        training: the structure of the training split (True) or of
            validation (False); HT, for one, keeps more paragraphs at test
            time.

    Returns:
        A `keras_hsum.data.example_features.ExampleStructure`.

    Raises:
        ValueError: for a recipe whose examples are not a function of one
            source example (SHTE draws new negative pairs every epoch), so
            its structure cannot be written once.
    """
    try:
        recipe.make_dataset(config, _StructureProbe(), vocabulary, training=training)
    except _Probed as probed:
        return probed.structure
    name = getattr(recipe, "__name__", repr(recipe)).rsplit(".", 1)[-1]
    raise ValueError(
        f"Recipe {name!r} does not pass its source straight to "
        "keras_hsum.recipes.base.batches (it builds its examples from the "
        "source itself, e.g. SHTE's negative pairs drawn anew every epoch), so "
        "its structured examples cannot be written to shards once; train it "
        "from JSONL."
    )


RANKS = ("tfidf", "order", "learned")


def check_ranking(config):
    """Raises a ValueError for a "paragraphs" config whose `rank` is not one
    of `RANKS`, or whose `ranker_run` is given without `rank="learned"` (or
    missing with it); makes `ranker_run` absolute, so that the run's
    config.json names the ranker wherever export runs. Call it from
    `__post_init__`."""
    if config.rank not in RANKS:
        raise ValueError(
            f"`rank` must be one of {RANKS}, received {config.rank!r}."
        )
    if (config.rank == "learned") != (config.ranker_run is not None):
        raise ValueError(
            "rank='learned' ranks the paragraphs with a trained ranker: it needs "
            "`ranker_run`, the folder of a `keras-hsum train --recipe ranker` run "
            "(--set rank=learned --set ranker_run=runs/ranker), and `ranker_run` "
            f"needs rank='learned'; received rank={config.rank!r}, "
            f"ranker_run={config.ranker_run!r}."
        )
    if config.ranker_run is not None:
        object.__setattr__(config, "ranker_run", os.path.abspath(config.ranker_run))


def ranking_options(config):
    """The "paragraphs" family options that rank as `config` says:
    `{"rank": ...}`, plus `ranker_run` for `rank="learned"`."""
    options = {"rank": config.rank}
    if config.rank == "learned":
        options["ranker_run"] = config.ranker_run
    return options


@dataclasses.dataclass(frozen=True)
class BackboneOptions:
    """Fields of the recipes that can start from a pretrained keras-hub
    backbone (flat, ht, pht; `--set backbone=PRESET_OR_PATH`).

    Attributes:
        backbone: None (train from scratch), or a keras-hub preset: a hub
            name such as "bart_base_en" or "t5_small_multi" (where the hub
            is reachable), a `kaggle://` / `hf://` handle, or a local preset
            folder (`save_to_preset` writes one). The run then uses the
            preset's weights and its own tokenizer (`vocabulary_size` and
            the model sizes `hidden_dim`, `num_heads`, ... of the config are
            not used; the new hierarchical layers take the backbone's width
            and heads, `intermediate_dim` its FFN width, `dropout` the
            config's): flat → `BackboneSummarizer`; ht →
            `HierarchicalBackboneSummarizer` with one gated global layer per
            "G" of `layer_schedule` (the backbone's encoder stands for the
            "L" layers); pht → the same with PHT's gated parallel cross
            attention in every decoder layer and `num_paragraph_layers`.
            Recorded as an absolute path when it is a local folder.
        backbone_learning_rate_scale: the pretrained weights' learning rate
            as a fraction of the run's (the new layers take the run's rate);
            e.g. 0.1. Adam only.
        backbone_freeze_steps: the backbone's encoder (its own layers, not
            the embedding it shares with the decoder) is not updated for the
            first this many steps, while the new layers settle.
    """

    backbone: str | None = None
    backbone_learning_rate_scale: float = 1.0
    backbone_freeze_steps: int = 0

    def check_backbone(self):
        """Validates the fields; makes a local preset folder absolute. Call
        from `__post_init__`."""
        if self.backbone is not None:
            if not isinstance(self.backbone, str) or not self.backbone:
                raise ValueError(
                    "`backbone` must be a keras-hub preset name, handle or folder "
                    f"(str), received {self.backbone!r}."
                )
            if os.path.isdir(self.backbone):
                object.__setattr__(self, "backbone", os.path.abspath(self.backbone))
        scale = self.backbone_learning_rate_scale
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale < 0:
            raise ValueError(
                "`backbone_learning_rate_scale` must be a number >= 0 (e.g. 0.1), "
                f"received {scale!r}."
            )
        freeze = self.backbone_freeze_steps
        if isinstance(freeze, bool) or not isinstance(freeze, int) or freeze < 0:
            raise ValueError(
                f"`backbone_freeze_steps` must be an int >= 0, received {freeze!r}."
            )
        if self.backbone is None and (scale != 1.0 or freeze):
            raise ValueError(
                "`backbone_learning_rate_scale` and `backbone_freeze_steps` apply to a "
                "run on a pretrained backbone: set `backbone` too (received "
                f"backbone=None, scale {scale}, freeze steps {freeze})."
            )
        if self.backbone is not None and (scale != 1.0 or freeze) and getattr(
            self, "optimizer", "adam"
        ) != "adam":
            raise ValueError(
                "Per-group learning rates need optimizer='adam' (GroupedAdam); "
                f"received optimizer={self.optimizer!r}."
            )


def backbone_model(config, vocabulary_size, name, **hierarchy):
    """The model of a `BackboneOptions` config with `backbone` set: a
    `BackboneSummarizer` (no `hierarchy` arguments) or a
    `HierarchicalBackboneSummarizer(**hierarchy)`, on the preset's weights,
    with the special ids of the preset's tokenizer.

    Raises:
        ValueError: when the run's vocabulary (the preset tokenizer's,
            `vocabulary_size`) has ids beyond the backbone's embedding.
    """
    from keras_hsum.data.preset_vocabulary import PresetVocabulary
    from keras_hsum.models import BackboneSummarizer
    from keras_hsum.models import HierarchicalBackboneSummarizer

    vocabulary = PresetVocabulary.from_preset(config.backbone)
    ids = dict(pad_id=vocabulary.pad_id, bos_id=vocabulary.bos_id, eos_id=vocabulary.eos_id)
    if hierarchy:
        model = HierarchicalBackboneSummarizer.from_preset(
            config.backbone, dropout=config.dropout, name=name, **hierarchy, **ids
        )
    else:
        model = BackboneSummarizer.from_preset(config.backbone, name=name, **ids)
    if vocabulary_size > model.vocabulary_size:
        raise ValueError(
            f"The run's vocabulary has {vocabulary_size} ids but the backbone "
            f"{config.backbone!r} embeds {model.vocabulary_size}: its tokenizer and "
            "weights do not belong together."
        )
    return model
