"""The recipe declaration (`Recipe`) and what every recipe config shares.

A recipe is a module `recipes/<name>.py` (installed as
`keras_hsum.recipes.<name>`) that declares itself once, as `RECIPE =
Recipe(...)`:

- `config_class`, `configs`: a frozen dataclass subclassing `RecipeConfig`
  (its `dataset` default is the folder under ../shared/data it trains on)
  and `{"tiny": Config(...), "paper": Config(...), ...}`;
- `build_model(config, vocabulary_size) -> keras.Model` (not compiled);
  `model_arguments` passes the config fields the model's constructor
  accepts, so only renamed or derived arguments are written out;
- `features(config, *, training)`: how text becomes the model's features,
  one `text_features(family, max_units=..., max_tokens=...,
  max_target_length=..., family_options=..., extras=...)`. Everything that
  reads text derives from it: `Recipe.make_dataset` (training batches),
  `Recipe.structure_options` (the exported SavedModel's `TextStructurer`,
  with `training=False`) and `Recipe.example_structure` (the shards of
  `keras-hsum preprocess`);
- optionally `labels(config, vocabulary)`: extras that only training adds
  (labels computed from the summary, e.g. SEAL's proxy labels); `pairs`,
  `examples`, `vocabulary`: the few recipes whose batches are not
  teacher-forced pairs of one source example (see `Recipe`);
- optionally `decoding`: `{"paper": {setting: value}}`, how the paper
  decodes (`keras-hsum export --preset paper`; the settings of
  `keras_hsum.export.exporter.DECODING_DEFAULTS`, see docs/serving.md);
- optionally `loss(config)`, `metrics(config)` (default: label-smoothed
  token cross-entropy and masked token accuracy) and `callbacks(config)`.

The module keeps the names the declaration is made of (`Config`,
`CONFIGS`, `build_model`, `DECODING`, ...) and exposes
`make_dataset = RECIPE.make_dataset` and `structure_options =
RECIPE.structure_options` for callers that hold the module; there is no
other route. docs/recipes.md, "Add a recipe", gives the steps.

Where the recipes are read. The recipes sit above the library in the
import layers (tests/test_imports.py): `keras_hsum.training`,
`keras_hsum.export.exporter` and `keras_hsum.data` never import them. The
entry points do: `keras_hsum/cli.py` (`train`, `preprocess`: the
`--recipe` name), `keras_hsum/export/cli.py` (`export`: the recipe that a
run's config.json names, through the registry `keras_hsum.recipes`) and
`keras_hsum/demo.py`. They hand the library the declaration (or its
module, whose `RECIPE` the library reads): `keras_hsum.training.train`,
`keras_hsum.export.exporter.export_run(recipes=...)`.

A recipe module imports without TensorFlow (or sentencepiece): its configs
and `build_model` need only Keras and keras_hsum's layers and models, so a
machine with JAX alone can build and train the paper models. Whatever reads
or structures data (`keras_hsum.data`, TensorFlow) is imported inside the
functions that use it (`features`, `labels`, `Recipe.make_dataset`, ...);
see tests/test_no_tensorflow.py.
"""

import dataclasses
import hashlib
import inspect
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


def text_features(
    family,
    *,
    max_tokens,
    max_units=None,
    max_target_length=None,
    family_options=None,
    extras=(),
):
    """How a recipe structures one example: the value of its `features`.

    Args:
        family: `"paragraphs"`, `"sections"`, `"snippets"`, `"sentences"`
            or `"flat"` (`keras_hsum.features.FAMILIES`).
        max_tokens: T, tokens per row (N, the most tokens, for `"flat"`).
        max_units: P, the most rows (None for `"flat"`).
        max_target_length: S, the target's tokens with BOS and EOS (None:
            no target).
        family_options: the `TextStructurer`'s family options (e.g.
            `{"rank": "tfidf", "pack": "section"}`).
        extras: extras the structurer computes into the model's inputs,
            served too (the paragraph graph: `paragraph_graph(kind)`, whose
            `structurer_options` the export gives its structurer). Labels
            that only training computes go to the recipe's `labels`.

    Returns:
        A `keras_hsum.data.example_features.ExampleStructure` (imported
        here: the recipes import without TensorFlow).
    """
    from keras_hsum.data.example_features import ExampleStructure

    return ExampleStructure(
        family,
        max_units=max_units,
        max_tokens=max_tokens,
        max_target_length=max_target_length,
        family_options=dict(family_options or {}),
        extras=tuple(extras or ()),
    )


def batches(
    config,
    source,
    vocabulary,
    structure,
    *,
    training,
    seed=0,
    cache=None,
    max_examples=None,
    shuffle_buffer=256,
):
    """`keras_hsum.data.make_dataset` batched the way every recipe trains.

    Batches of `config.batch_size` with static shapes (every [B,P,T] and S
    padded to the config's maxima: one trace, XLA friendly); `training=True`
    shuffles (`shuffle_buffer`), repeats and drops the last partial batch,
    `training=False` is one pass in file order. `structure` is the
    `ExampleStructure` of the recipe's `features` (and `labels`): family,
    sizes, options and extras.

    `source` may also be a shard folder written by `keras-hsum preprocess`
    (or a `keras_hsum.data.shards.ShardSource`): its examples are read with
    `read_shards` and batched the same way, after checking that they were
    structured as `structure` says with this vocabulary.

    Returns:
        tf.data of feature dicts, before `training_pairs`.
    """
    from keras_hsum.data import DatasetOptions
    from keras_hsum.data import make_dataset
    from keras_hsum.data import shards

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
                structure=structure,
                recipe=source.recipe,
                vocabulary_sha256=hashlib.sha256(vocabulary.proto).hexdigest(),
            ),
        )
    return make_dataset(
        source,
        vocabulary,
        structure.family,
        max_units=structure.max_units,
        max_tokens=structure.max_tokens,
        max_target_length=structure.max_target_length,
        family_options=dict(structure.family_options),
        extras=list(structure.extras),
        options=options,
    )


# The fields of `RecipeConfig` and `BackboneOptions`: data, vocabulary,
# optimisation and the pretrained start, never a model constructor's.
def _shared_fields():
    return {
        field.name
        for base in (RecipeConfig, BackboneOptions)
        for field in dataclasses.fields(base)
    }


def _constructor_parameters(model_class):
    """The keyword names `model_class(...)` accepts: its `__init__`'s, and
    those of the bases its `**kwargs` reach (SEAL's reach
    ExtractiveAbstractive's), up to Keras' own classes."""
    names = set()
    for klass in model_class.__mro__:
        if klass.__module__.split(".")[0] != "keras_hsum" and klass is not model_class:
            break
        if "__init__" not in vars(klass):
            continue
        parameters = inspect.signature(klass.__init__).parameters.values()
        names.update(
            p.name for p in parameters
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"
        )
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
    return names


def model_arguments(model_class, config, **explicit):
    """The keyword arguments of `model_class` from `config`.

    Every field of the recipe's own config (not `RecipeConfig`'s or
    `BackboneOptions`' data and optimisation fields) whose name is a
    parameter of `model_class`'s constructor is passed as it is; `explicit`
    adds what the config does not hold under the constructor's name (the
    vocabulary size, the layer name, a renamed or derived value) and wins
    over a field of the same name.

    Example:

    ```python
    FlatTransformer(**model_arguments(
        FlatTransformer, config, vocabulary_size=V, name="flat_transformer"))
    ```

    Raises:
        TypeError: `explicit` names an argument the constructor does not
            take.
    """
    accepted = _constructor_parameters(model_class)
    unknown = sorted(set(explicit) - accepted - {"name", "dtype"})
    if unknown:
        raise TypeError(
            f"{model_class.__name__} takes no arguments {unknown}; it accepts "
            f"{sorted(accepted)}. Rename them in the recipe's build_model."
        )
    shared = _shared_fields()
    arguments = {
        field.name: getattr(config, field.name)
        for field in dataclasses.fields(config)
        if field.name in accepted and field.name not in shared
    }
    arguments.update(explicit)
    return arguments


def _check_callable(owner, name, value, signature, optional=True):
    if value is None and optional:
        return
    if not callable(value):
        raise TypeError(
            f"{owner}: `{name}` must be a function {signature}"
            + (" or None" if optional else "")
            + f", received {value!r}."
        )


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A recipe, declared once: `RECIPE = Recipe(...)` in `recipes/<name>.py`.

    `keras-hsum train` (`keras_hsum.training.train`), `preprocess`,
    `export` and the demo read this object and nothing else of the module.

    Attributes:
        name: the name `keras_hsum.recipes.get` finds the module under: the
            module's name in `recipes/` (e.g. "pht"), or for a recipe
            outside keras_hsum its module path (e.g. "my_recipes.toy").
            Recorded in a run's config.json, which export reads back.
        config_class: the config, a frozen dataclass subclassing
            `RecipeConfig`; export rebuilds it from config.json.
        configs: `{"tiny": Config(...), "paper": Config(...), ...}`.
        build_model: `(config, vocabulary_size) -> keras.Model`, not
            compiled.
        features: `(config, *, training) -> text_features(...)`: how text
            becomes the model's features (family, limits, family options,
            in-graph extras). `training=False` is what the export serves.
        labels: None, or `(config, vocabulary) -> [extra, ...]`: extras
            only training computes (from the summary), added after the
            features' own.
        pairs: None (teacher forcing: `training_pairs`), or `(config,
            batches, vocabulary) -> tf.data of (inputs, labels, weights)`
            from the padded feature batches.
        examples: None, or `(config, source, *, training, seed,
            max_examples) -> source`: builds the examples from the source
            (SHTE's document/summary pairs, drawn anew every epoch). Such a
            recipe's examples are not a function of one source example, so
            `keras-hsum preprocess` cannot write them to shards.
        vocabulary: None, or `(config, vocabulary) -> vocabulary`: the
            vocabulary that tokenizes the data instead of the run's (the
            attention predictor reads its teacher's).
        decoding: `{preset: {setting: value}}`, e.g. `{"paper":
            {"beam_size": 5}}`; `keras-hsum export --preset paper`.
        loss, metrics, callbacks: None (the trainer's defaults: token
            cross-entropy with the config's label smoothing, token accuracy,
            no callbacks), or functions of the config.
        shuffle_buffer: training batches are shuffled over this many
            examples.
    """

    name: str
    config_class: type
    configs: dict
    build_model: object
    features: object
    labels: object = None
    pairs: object = None
    examples: object = None
    vocabulary: object = None
    decoding: dict = dataclasses.field(default_factory=dict)
    loss: object = None
    metrics: object = None
    callbacks: object = None
    shuffle_buffer: int = 256

    def __post_init__(self):
        owner = f"Recipe({self.name!r})"
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(
                "Recipe: `name` must be the recipe's name (a non-empty str, e.g. "
                f"'pht' or 'my_recipes.toy'), received {self.name!r}."
            )
        config_class = self.config_class
        if not (
            isinstance(config_class, type)
            and issubclass(config_class, RecipeConfig)
            and dataclasses.is_dataclass(config_class)
            and config_class.__dataclass_params__.frozen
        ):
            raise TypeError(
                f"{owner}: `config_class` must be a frozen dataclass subclassing "
                "keras_hsum.recipes.base.RecipeConfig (@dataclasses.dataclass("
                f"frozen=True) class Config(RecipeConfig): ...), received {config_class!r}."
            )
        if not isinstance(self.configs, dict) or not self.configs:
            raise TypeError(
                f"{owner}: `configs` must be a non-empty dict of named configs, e.g. "
                f'{{"tiny": Config(...), "paper": Config(...)}}, received {self.configs!r}.'
            )
        for key, config in self.configs.items():
            if not isinstance(key, str) or type(config) is not config_class:
                raise TypeError(
                    f"{owner}: `configs` maps names (str) to {config_class.__name__} "
                    f"instances; received {key!r}: {type(config).__name__}."
                )
        _check_callable(owner, "build_model", self.build_model,
                        "(config, vocabulary_size) -> keras.Model", optional=False)
        _check_callable(owner, "features", self.features,
                        "(config, *, training) -> text_features(...)", optional=False)
        _check_callable(owner, "labels", self.labels, "(config, vocabulary) -> [extra, ...]")
        _check_callable(owner, "pairs", self.pairs,
                        "(config, batches, vocabulary) -> tf.data of (inputs, labels, weights)")
        _check_callable(owner, "examples", self.examples,
                        "(config, source, *, training, seed, max_examples) -> source")
        _check_callable(owner, "vocabulary", self.vocabulary, "(config, vocabulary) -> vocabulary")
        for name in ("loss", "metrics", "callbacks"):
            _check_callable(owner, name, getattr(self, name), "(config) -> ...")
        if not isinstance(self.decoding, dict) or not all(
            isinstance(preset, str) and isinstance(settings, dict)
            for preset, settings in self.decoding.items()
        ):
            raise TypeError(
                f"{owner}: `decoding` must map preset names to settings, e.g. "
                f'{{"paper": {{"beam_size": 5}}}}, received {self.decoding!r}.'
            )
        if isinstance(self.shuffle_buffer, bool) or not isinstance(
            self.shuffle_buffer, int
        ) or self.shuffle_buffer < 1:
            raise ValueError(
                f"{owner}: `shuffle_buffer` must be an int >= 1, received "
                f"{self.shuffle_buffer!r}."
            )

    def config(self, name):
        """The config `configs[name]`."""
        if name not in self.configs:
            raise ValueError(
                f"Recipe {self.name!r} has no config {name!r}; expected one of "
                f"{sorted(self.configs)}."
            )
        return self.configs[name]

    def structure(self, config, *, training):
        """`features(config, training=training)`, checked."""
        from keras_hsum.data.example_features import ExampleStructure

        structure = self.features(config, training=training)
        if not isinstance(structure, ExampleStructure):
            raise TypeError(
                f"Recipe {self.name!r}: `features` must return "
                "keras_hsum.recipes.base.text_features(family, max_tokens=..., ...), "
                f"received {type(structure).__name__}."
            )
        return structure

    def example_structure(self, config, vocabulary, *, training):
        """How `make_dataset` structures one example: the features and the
        labels, as `keras-hsum preprocess` writes them to shards.

        Args:
            config: a config of this recipe.
            vocabulary: the run's `Vocabulary` (labels such as SEAL's
                segments read it).
            training: the training split (True) or validation (False); HT,
                for one, keeps more paragraphs at test time.

        Returns:
            A `keras_hsum.data.example_features.ExampleStructure`.

        Raises:
            ValueError: for a recipe that builds its examples from the source
                (`examples`, e.g. SHTE's negative pairs drawn anew every
                epoch): they cannot be written once.
        """
        if self.examples is not None:
            raise ValueError(
                f"Recipe {self.name!r} builds its examples from the source itself "
                "(its declaration's `examples`, e.g. SHTE's negative pairs drawn "
                "anew every epoch), so its structured examples cannot be written "
                "to shards once; train it from JSONL."
            )
        structure = self.structure(config, training=training)
        labels = tuple(self.labels(config, vocabulary)) if self.labels else ()
        if labels:
            structure = dataclasses.replace(structure, extras=structure.extras + labels)
        return structure

    def make_dataset(
        self, config, source, vocabulary, *, training, seed=0, cache=None,
        max_examples=None,
    ):
        """The training or validation batches of `config`.

        `features` and `labels` structure each example, `batches` batches
        them (static shapes, shuffled and repeated when `training`), and
        `pairs` (default: teacher forcing) gives `(inputs, labels,
        sample_weight)`.

        Args:
            config: a config of this recipe.
            source: a corpus path (file or folder), a shard folder written by
                `keras-hsum preprocess`, or a list of `Example`.
            vocabulary: the run's `Vocabulary`.
            training: True: shuffled, repeated, the training structure;
                False: one pass in order, the evaluation structure.
            seed: shuffling seed.
            cache: tf.data cache (True: in memory; a path; None: off).
            max_examples: use only the first examples of the source.

        Returns:
            tf.data of `(inputs, labels, sample_weight)` batches of
            `config.batch_size`.
        """
        if self.vocabulary is not None:
            vocabulary = self.vocabulary(config, vocabulary)
        structure = self.structure(config, training=training)
        labels = tuple(self.labels(config, vocabulary)) if self.labels else ()
        if labels:
            structure = dataclasses.replace(structure, extras=structure.extras + labels)
        if self.examples is not None:
            source = self.examples(
                config, source, training=training, seed=seed, max_examples=max_examples
            )
            max_examples = None
        dataset = batches(
            config, source, vocabulary, structure, training=training, seed=seed,
            cache=cache, max_examples=max_examples, shuffle_buffer=self.shuffle_buffer,
        )
        if self.pairs is not None:
            return self.pairs(config, dataset, vocabulary)
        from keras_hsum.data import training_pairs

        return training_pairs(dataset, pad_id=vocabulary.pad_id)

    def structure_options(self, config):
        """How the exported SavedModel structures raw text: the
        `TextStructurer` keyword arguments of `features(config,
        training=False)` (family, P, T, family options, and the options of
        the in-graph extras, e.g. HT's paragraph graph).

        Raises:
            ValueError: a feature extra that the structurer cannot compute
                (a Python extra: the SavedModel could not serve it; a label
                belongs in `labels`).
        """
        structure = self.structure(config, training=False)
        options = dict(
            family=structure.family,
            max_units=structure.max_units,
            max_tokens=structure.max_tokens,
            **structure.family_options,
        )
        for extra in structure.extras:
            in_graph = getattr(extra, "structurer_options", None)
            if structure.family != "paragraphs" or not in_graph:
                raise ValueError(
                    f"Recipe {self.name!r}: the feature extra "
                    f"{getattr(extra, '__name__', extra)!r} is not computed by the "
                    "structurer (only the paragraphs family's paragraph_graph is), so "
                    "an exported model could not serve it. Give the labels that only "
                    "training needs in the declaration's `labels`."
                )
            options.update(in_graph)
        return options


def declaration(recipe):
    """The `Recipe` of `recipe`: a `Recipe`, or a recipe module (its `RECIPE`).

    Raises:
        TypeError: for anything else.
    """
    if isinstance(recipe, Recipe):
        return recipe
    found = getattr(recipe, "RECIPE", None)
    if isinstance(found, Recipe):
        return found
    raise TypeError(
        "Expected a keras_hsum.recipes.base.Recipe or a recipe module that "
        f"declares one as RECIPE = Recipe(...); received {recipe!r}"
        + (" (its RECIPE is not a Recipe)" if found is not None else "")
        + ". See docs/recipes.md, 'Add a recipe'."
    )


def example_structure(recipe, config, vocabulary, *, training):
    """`Recipe.example_structure` of a recipe or recipe module."""
    return declaration(recipe).example_structure(config, vocabulary, training=training)


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
        if self.backbone is not None and getattr(self, "attention_dropout", None) is not None:
            raise ValueError(
                "`attention_dropout` applies to the models trained from scratch; the "
                "pretrained backbone keeps its own attention dropout. Leave it None "
                f"with `backbone` (received backbone={self.backbone!r}, "
                f"attention_dropout={self.attention_dropout!r})."
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
