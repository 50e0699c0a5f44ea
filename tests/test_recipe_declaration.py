"""A recipe is one declaration (issue 59, item 1): docs/recipes.md, "Add a recipe".

The toy recipe below is added by exactly the steps of that section, as a
recipe outside keras_hsum (a module on the path, named by its module path):
written to a temporary folder, read back by `keras_hsum.recipes`, trained
with `keras-hsum train`, exported with `keras-hsum export` in a fresh
process (which finds the recipe by the name config.json records) and served
from the SavedModel in a process without Keras or keras_hsum
(tests/export/run_saved_model.py). The references: the declaration itself
for what the SavedModel's structurer must do (`structure_options` of its
`features`), and a Python beam search of the trained Keras model with the
export's own search settings for the served summaries.

The fast tests check the declaration: the toy is accepted, its config
reaches the model's constructor without hand-copying (one renamed field),
and bad declarations fail with errors naming what was expected.
"""

import dataclasses
import json
import os
import subprocess
import sys
import textwrap

import pytest

from keras_hsum import recipes
from keras_hsum.recipes.base import Recipe
from keras_hsum.recipes.base import RecipeConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "toy_recipes"
NAME = f"{PACKAGE}.toy_flat"

# Step 1 of "Add a recipe": the module, with its config, configs, model,
# features and declaration.
TOY_RECIPE = textwrap.dedent('''
    """A toy recipe: a small flat Transformer with its own config."""

    import dataclasses

    from keras_hsum.models import FlatTransformer
    from keras_hsum.recipes.base import Recipe
    from keras_hsum.recipes.base import RecipeConfig
    from keras_hsum.recipes.base import model_arguments
    from keras_hsum.recipes.base import text_features


    @dataclasses.dataclass(frozen=True)
    class Config(RecipeConfig):
        dataset: str = "qmsum_goldspan"
        hidden_dim: int = 16
        num_heads: int = 2
        intermediate_dim: int = 32
        num_layers: int = 1  # encoder and decoder layers alike
        dropout: float = 0.0
        max_source_length: int = 48
        max_target_length: int = 12


    CONFIGS = {
        "tiny": Config(
            vocabulary_size=300, batch_size=4, epochs=1, steps_per_epoch=2,
            validation_steps=1, max_train_examples=16, max_val_examples=4,
            warmup_steps=10,
        ),
    }


    def build_model(config, vocabulary_size):
        return FlatTransformer(**model_arguments(
            FlatTransformer, config, vocabulary_size=vocabulary_size,
            num_encoder_layers=config.num_layers, num_decoder_layers=config.num_layers,
            name="toy_flat",
        ))


    def features(config, *, training):
        return text_features(
            "flat",
            max_tokens=config.max_source_length,
            max_target_length=config.max_target_length,
        )


    RECIPE = Recipe(
        name="toy_recipes.toy_flat",
        config_class=Config,
        configs=CONFIGS,
        build_model=build_model,
        features=features,
        decoding={"paper": {"beam_size": 2}},
    )
''')


def write_toy(folder, source=TOY_RECIPE, module="toy_flat"):
    """Writes the toy package into `folder`; returns `folder`."""
    package = folder / PACKAGE
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / f"{module}.py").write_text(source)
    return folder


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The toy recipe module, importable as `toy_recipes.toy_flat` (step 2:
    a recipe outside keras_hsum is a module on the path)."""
    monkeypatch.syspath_prepend(str(write_toy(tmp_path)))
    for name in [m for m in sys.modules if m.split(".")[0] == PACKAGE]:
        monkeypatch.delitem(sys.modules, name)
    yield recipes.get(NAME)
    for name in [m for m in sys.modules if m.split(".")[0] == PACKAGE]:
        del sys.modules[name]


def test_the_toy_declaration_is_read_by_its_module_path(toy):
    recipe = recipes.declaration(NAME)
    assert recipe is toy.RECIPE and recipe.name == NAME
    config = recipe.config("tiny")
    # The export's structurer options derive from `features` (serving time).
    assert recipe.structure_options(config) == {
        "family": "flat", "max_units": None, "max_tokens": 48,
    }
    structure = recipe.example_structure(config, None, training=True)
    assert (structure.family, structure.max_tokens, structure.max_target_length) == (
        "flat", 48, 12)
    assert structure.extras == ()
    # The fields the constructor names pass as they are; `num_layers` is
    # renamed by hand; the data and optimisation fields never reach it.
    from keras_hsum.recipes.base import model_arguments

    class Model:
        def __init__(self, vocabulary_size, hidden_dim, num_heads, dropout,
                     num_encoder_layers, batch_size=None, **kwargs):
            pass

    arguments = model_arguments(Model, config, vocabulary_size=7,
                                num_encoder_layers=config.num_layers)
    assert arguments == {"vocabulary_size": 7, "hidden_dim": 16, "num_heads": 2,
                         "dropout": 0.0, "num_encoder_layers": 1}
    with pytest.raises(TypeError, match=r"takes no arguments \['num_layers'\].*"
                                        r"Rename them in the recipe's build_model"):
        model_arguments(Model, config, num_layers=1)
    with pytest.raises(ValueError, match=r"has no config 'paper'; expected one of \['tiny'\]"):
        recipe.config("paper")


@pytest.mark.parametrize("name", recipes.RECIPES)
def test_every_recipe_declares_itself_under_its_name(name):
    recipe = recipes.declaration(name)
    assert recipe.name == name
    assert set(recipe.configs) >= {"tiny", "paper"}
    assert all(type(c) is recipe.config_class for c in recipe.configs.values())


def _declaration(**changes):
    @dataclasses.dataclass(frozen=True)
    class Config(RecipeConfig):
        hidden_dim: int = 8

    fields = dict(
        name="toy", config_class=Config, configs={"tiny": Config()},
        build_model=lambda config, vocabulary_size: None,
        features=lambda config, *, training: None,
    )
    fields.update(changes)
    return Recipe(**fields)


@dataclasses.dataclass(frozen=True)
class NotARecipeConfig:
    hidden_dim: int = 8


@pytest.mark.parametrize("changes, error, message", [
    (dict(name=""), ValueError, r"`name` must be the recipe's name"),
    (dict(config_class=NotARecipeConfig), TypeError,
     r"`config_class` must be a frozen dataclass subclassing "
     r"keras_hsum.recipes.base.RecipeConfig.*NotARecipeConfig"),
    (dict(configs={}), TypeError, r"`configs` must be a non-empty dict of named configs"),
    (dict(configs={"tiny": RecipeConfig()}), TypeError,
     r"`configs` maps names \(str\) to Config instances; received 'tiny': RecipeConfig"),
    (dict(build_model=None), TypeError,
     r"`build_model` must be a function \(config, vocabulary_size\) -> keras.Model, "
     r"received None"),
    (dict(features="flat"), TypeError,
     r"`features` must be a function \(config, \*, training\) -> text_features"),
    (dict(labels=["ranker_targets"]), TypeError,
     r"`labels` must be a function \(config, vocabulary\) -> \[extra, ...\] or None"),
    (dict(decoding={"paper": 5}), TypeError,
     r'`decoding` must map preset names to settings, e.g. \{"paper": \{"beam_size": 5\}\}'),
    (dict(shuffle_buffer=0), ValueError, r"`shuffle_buffer` must be an int >= 1"),
])
def test_a_bad_declaration_says_what_was_expected(changes, error, message):
    with pytest.raises(error, match=message):
        _declaration(**changes)


def test_features_must_be_text_features_and_servable():
    recipe = _declaration(features=lambda config, *, training: {"family": "flat"})
    with pytest.raises(TypeError, match=r"`features` must return "
                                        r"keras_hsum.recipes.base.text_features\(family"):
        recipe.structure_options(recipe.config("tiny"))

    from keras_hsum.data import declare_features
    from keras_hsum.recipes.base import text_features

    @declare_features(score=("float32", ("P",)))
    def score(example, structured):
        return {}

    recipe = _declaration(features=lambda config, *, training: text_features(
        "sections", max_units=2, max_tokens=4, extras=[score]))
    with pytest.raises(ValueError, match=r"feature extra 'score' is not computed by the "
                                         r"structurer.*Give the labels that only training "
                                         r"needs in the declaration's `labels`"):
        recipe.structure_options(recipe.config("tiny"))


def test_the_registry_refuses_a_module_that_is_not_the_recipe_it_names(tmp_path, monkeypatch):
    write_toy(tmp_path)
    write_toy(tmp_path, "X = 1\n", module="no_recipe")
    write_toy(tmp_path, TOY_RECIPE.replace('name="toy_recipes.toy_flat"', 'name="toy"'),
              module="misnamed")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m.split(".")[0] == PACKAGE]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ValueError, match=r"declares no recipe: it needs RECIPE = "
                                         r"keras_hsum.recipes.base.Recipe"):
        recipes.get(f"{PACKAGE}.no_recipe")
    with pytest.raises(ValueError, match=r"declares RECIPE.name='toy'.*set "
                                         r"Recipe\(name='toy_recipes.misnamed', ...\)"):
        recipes.get(f"{PACKAGE}.misnamed")
    with pytest.raises(ValueError, match=r"Recipe 'toy_recipes.absent' is not available"):
        recipes.get(f"{PACKAGE}.absent")
    with pytest.raises(ValueError, match=r"Unknown recipe 'toy'; expected one of .*"
                                         r"or the module path of a recipe outside keras_hsum"):
        recipes.get("toy")
    for name in [m for m in sys.modules if m.split(".")[0] == PACKAGE]:
        del sys.modules[name]


@pytest.mark.slow  # trains, exports in a subprocess and serves in another
@pytest.mark.tensorflow_only
def test_a_toy_recipe_trains_exports_and_serves(toy, tmp_path, real_examples):
    import numpy as np
    import tensorflow as tf

    from keras_hsum import cli
    from keras_hsum.data import corpora
    from keras_hsum.data.structurer import TextStructurer
    from keras_hsum.decoding.search_options import SearchOptions
    from keras_hsum.export.cli import load_run
    from keras_hsum.export.serving import read_metadata
    from tests.export.test_serving import documents_of
    from tests.export.test_serving import padded
    from tests.export.test_serving import run_saved_model

    # Step 4: train.
    data = os.path.dirname(corpora.sample_path("qmsum_goldspan", "train"))
    run = tmp_path / "runs" / "toy"
    assert cli.main(["train", "--recipe", NAME, "--config", "tiny", "--data", data,
                     "--out", str(run), "--quiet"]) == 0
    recorded = json.loads((run / "config.json").read_text())
    assert recorded["recipe"] == NAME and recorded["config"]["num_layers"] == 1

    # Step 5: export, in a fresh process that finds the recipe by the name
    # config.json records (the toy package on its PYTHONPATH).
    out = tmp_path / "saved_models" / "toy"
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
                       PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT]))
    exported = subprocess.run(
        [sys.executable, "-m", "keras_hsum.cli", "export", "--run", str(run), "--out",
         str(out), "--preset", "paper", "--max-length", "8"],
        capture_output=True, text=True, timeout=600, env=environment, cwd=str(tmp_path),
    )
    assert exported.returncode == 0, exported.stderr[-3000:]
    version = out / "1"
    metadata = read_metadata(str(version))
    config = toy.RECIPE.config("tiny")
    assert metadata["recipe"] == NAME
    assert metadata["structure_options"] == toy.RECIPE.structure_options(config)
    assert metadata["search"]["beam_size"] == 2  # the declaration's "paper" preset

    # Step 6: serve, where neither Keras nor keras_hsum can be imported.
    examples = real_examples("qmsum_goldspan", "val")[:3]
    documents = padded([documents_of(example) for example in examples])
    served, modules = run_saved_model(
        version, [{"signature": "serving_default", "inputs": {"documents": documents}}],
        tmp_path)
    assert not any(m.split(".")[0] in ("keras", "keras_hsum") for m in modules)
    (served,) = served
    assert "__error__" not in served, served.get("__error__")

    # The reference: the run's Keras model searched in Python with the
    # export's settings, on features structured as the declaration says.
    _, _, _, model, vocabulary = load_run(str(run))
    structurer = TextStructurer(vocabulary.proto, **toy.RECIPE.structure_options(config))
    features = structurer(tf.constant(documents))
    assert features["tokens"].shape[1] <= 48  # N = max_source_length
    inputs = {k: v for k, v in features.items() if v.dtype != tf.string}
    settings = {k: tuple(v) if isinstance(v, list) else v
                for k, v in metadata["search"].items()}
    result = SearchOptions(**settings)(model, inputs)
    expected = structurer.detokenize(result["sequences"][:, 0]).numpy()
    assert [s.decode() for s in served["summary"]] == [s.decode() for s in expected]
    assert all(np.asarray(served["summary"]) != b"")
