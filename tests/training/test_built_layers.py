"""Every recipe's model is fully built by one call on a batch, so that
Keras' JAX `fit` reads no batch of its own before training
(`jax_training.build_loss_and_metrics`, issue 60): a sublayer that the
forward pass never calls, like the token embedding HT's position encoding
made before it took the decoder's, would stay unbuilt and make `fit` open
a second iterator over the reshuffling training data."""

import os
import sys

import keras
import pytest

from keras_hsum import recipes
from keras_hsum.layers.hierarchical_position_encoding import HierarchicalPositionEncoding
from keras_hsum.training.jax_training import build_loss_and_metrics
from keras_hsum.training.model_setup import make_optimizer
from keras_hsum.training.model_setup import recipe_loss
from keras_hsum.training.model_setup import recipe_metrics

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import recipe_steps  # noqa: E402

# Small sizes: only whether every layer is built matters here.
SMALL = dict(vocabulary_size=300)


@pytest.mark.slow  # default-suite budget (docs/testing.md): 15-75 s a recipe on 2 loaded cores
@pytest.mark.parametrize("name", recipe_steps.RECIPES)
def test_one_call_builds_every_layer_and_the_compiled_loss(name):
    recipe = recipes.declaration(name)
    config = recipe.config("tiny").replace(**SMALL)
    # Built as the trainer builds it (`build_compiled_model`), but on the
    # batch's shapes (symbolically: nothing computed).
    model = recipe_steps.build(recipe, name, config)
    model.compile(optimizer=make_optimizer(config, model),
                  loss=recipe_loss(recipe, config),
                  weighted_metrics=recipe_metrics(recipe, config))
    x, y, w = recipe_steps.synthetic_batch(name, config, 2)
    assert build_loss_and_metrics(model, (x, y, w)) == []
    assert all(layer.built for layer in model._flatten_layers())


def test_a_given_token_embedding_is_used_and_its_shape_checked():
    shared = keras.layers.ReversibleEmbedding(50, 8, name="shared")
    layer = HierarchicalPositionEncoding(vocabulary_size=50, hidden_dim=8,
                                         token_embedding=shared)
    assert layer.token_embedding is shared
    assert [sub for sub in layer._flatten_layers(include_self=False)
            if isinstance(sub, keras.layers.Embedding)] == [shared]
    with pytest.raises(ValueError, match=r"vocabulary_size=60 .* hidden_dim=8.*50 x 8"):
        HierarchicalPositionEncoding(vocabulary_size=60, hidden_dim=8, token_embedding=shared)
