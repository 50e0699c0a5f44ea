"""The Transformer recipes' models under mixed_bfloat16 (what users train with
on an accelerator) give the float32 model's loss on one batch: same weights,
same inputs, teacher forcing without dropout, the recipe's label-smoothed
cross-entropy. bfloat16 keeps 8 bits of mantissa (relative rounding 2^-9 per
operation), so the mean loss must agree to 2e-2 relative and each
position's loss to 0.1 absolute (a wrong cast, a mask or softmax computed in
a dtype that overflows, or a layer left in float32 that is fed bfloat16,
fails one of the two or raises)."""

import keras
import numpy as np
import pytest

# The tiny configs, shrunk to a few paragraphs and tokens (seconds on CPU).
SMALL = {
    "pht": {"max_paragraphs": 3, "max_paragraph_tokens": 8, "max_target_length": 9},
    "ht": {"max_paragraphs": 3, "max_test_paragraphs": 3, "paragraph_length": 8,
           "max_target_length": 9},
    "flat": {"max_source_length": 24, "max_target_length": 9},
}


def one_batch(name, config, batch=2, seed=0):
    """(x, labels, target mask) with one padded paragraph/tail and one
    padded target tail, random token ids."""
    rng = np.random.default_rng(seed)
    V, S = config.vocabulary_size, config.max_target_length
    if name == "flat":
        tokens = rng.integers(4, V, (batch, config.max_source_length)).astype("int32")
        tokens[1, -5:] = 0
        x = {"tokens": tokens, "token_mask": tokens != 0}
    else:
        T = config.paragraph_length if name == "ht" else config.max_paragraph_tokens
        tokens = rng.integers(4, V, (batch, config.max_paragraphs, T)).astype("int32")
        tokens[1, -1] = 0
        tokens[0, 0, -3:] = 0
        x = {"tokens": tokens, "token_mask": tokens != 0,
             "paragraph_mask": (tokens != 0).any(-1)}
    target = rng.integers(4, V, (batch, S)).astype("int32")
    target[:, 0] = 2
    target[1, -3:] = 0
    labels = target[:, 1:]
    x["decoder_tokens"] = target[:, :-1]
    x["target_mask"] = labels != 0
    return x, labels, (labels != 0).astype("float32")


def build(recipe, config, x, policy):
    previous = keras.config.dtype_policy().name
    keras.config.set_dtype_policy(policy)
    try:
        model = recipe.build_model(config, config.vocabulary_size)
        model(x, training=False)
    finally:
        keras.config.set_dtype_policy(previous)
    return model


@pytest.mark.jax_slow  # TF: 82 s for the three on the loaded machine (24 s CPU); JAX: 563 s
@pytest.mark.parametrize("name", ["pht", "ht", "flat"])
def test_mixed_bfloat16_loss_equals_float32_loss(name):
    from keras_hsum import recipes
    from keras_hsum.models.losses import LabelSmoothedCrossEntropy

    recipe = recipes.get(name)
    config = recipe.CONFIGS["tiny"].replace(**SMALL[name])
    x, labels, weights = one_batch(name, config)
    full = build(recipe, config, x, "float32")
    mixed = build(recipe, config, x, "mixed_bfloat16")
    mixed.set_weights(full.get_weights())
    assert {v.dtype for v in mixed.weights if "float" in v.dtype} == {"float32"}
    assert mixed.layers[-1].compute_dtype == "bfloat16"

    loss = LabelSmoothedCrossEntropy(config.label_smoothing, reduction=None)
    per_position = {}
    for key, model in (("float32", full), ("mixed", mixed)):
        logits = model(x, training=False)
        per_position[key] = keras.ops.convert_to_numpy(loss(labels, logits)) * weights
    f32, bf16 = per_position["float32"], per_position["mixed"]
    assert np.isfinite(bf16).all()
    np.testing.assert_allclose(bf16.sum() / weights.sum(), f32.sum() / weights.sum(),
                               rtol=2e-2)
    np.testing.assert_allclose(bf16, f32, atol=0.1)
