"""fused_attention_inputs: full masks and even lengths for cuDNN's fused
attention, with the attention unchanged at the real positions (outputs and
gradients), in keras_hsum's TransformerEncoder / TransformerDecoder,
PHTDecoderLayer and ParallelCrossAttention."""

import copy
import os
import sys

import keras
import numpy as np
import pytest
from keras import ops
from layer_test_case import compute_gradients
from layer_test_case import to_numpy

from keras_hsum.layers import ParallelCrossAttention
from keras_hsum.layers import PHTDecoderLayer
from keras_hsum.layers.fused_attention_inputs import fused_attention_inputs
from keras_hsum.layers.transformer_decoder import TransformerDecoder
from keras_hsum.layers.transformer_encoder import TransformerEncoder

B, T, S, N, HD, D, F = 3, 5, 7, 2, 4, 8, 16

# Under JAX the layer tests compile every eager op and their gradients
# (6-9 s each): jax_slow, as the other attention-layer files (the JAX-only
# cuDNN-check test too: 7 s); the default TensorFlow pass runs the others
# (< 0.6 s each).


def reference_attention(query, key, value, mask):
    """numpy: softmax(q·kᵀ/√H) over the keys the mask keeps; a query that
    keeps no key averages every value (what `dot_product_attention` gives
    it). query [B,T,N,H], key/value [B,S,N,H], mask bool [B,T,S]."""
    scores = np.einsum("btnh,bsnh->bnts", query, key) / np.sqrt(query.shape[-1])
    keep = np.broadcast_to(mask[:, None], scores.shape)
    scores = np.where(keep, scores, -1e30)
    scores = np.where(keep.any(-1, keepdims=True), scores, 0.0)  # empty rows: uniform
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights = np.where(keep | ~keep.any(-1, keepdims=True), weights, 0.0)
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("bnts,bsnh->btnh", weights, value)


def masked_rows():
    """[B,T] query padding and [B,S] key padding: example 0 padded at the
    end, example 2 with no real key at all (every query row empty)."""
    queries = np.ones((B, T), bool)
    queries[0, 3:] = False
    keys = np.ones((B, S), bool)
    keys[0, 4:] = False
    keys[1, ::2] = False
    keys[2] = False
    return queries, keys


@pytest.mark.parametrize("mask_rank", [3, 4])
def test_padded_inputs_compute_the_reference_attention(mask_rank):
    rng = np.random.default_rng(0)
    query = rng.normal(size=(B, T, N, HD)).astype("float32")
    key = rng.normal(size=(B, S, N, HD)).astype("float32")
    value = rng.normal(size=(B, S, N, HD)).astype("float32")
    _, keys = masked_rows()
    mask = keys[:, None, :] if mask_rank == 3 else keys[:, None, None, :]
    q, k, v, full, length = fused_attention_inputs(query, key, value, mask)
    assert length == T
    assert tuple(q.shape) == (B, T + 1, N, HD)
    assert tuple(k.shape) == tuple(v.shape) == (B, S + 1, N, HD)
    assert tuple(full.shape) == (B, 1, T + 1, S + 1)
    full = to_numpy(full)
    assert not full[:, :, :, S].any() and not full[:, :, T].any()  # the added key/query
    np.testing.assert_array_equal(full[:, 0, :T, :S], np.broadcast_to(keys[:, None], (B, T, S)))
    outputs = to_numpy(ops.dot_product_attention(q, k, v, mask=full))[:, :T]
    expected = reference_attention(query, key, value, np.broadcast_to(keys[:, None], (B, T, S)))
    np.testing.assert_allclose(outputs, expected, atol=1e-5, rtol=0)
    # Without padding: the full mask only.
    q, k, v, full, _ = fused_attention_inputs(query, key, value, mask, pad_to_even=False)
    assert tuple(q.shape) == query.shape and tuple(full.shape) == (B, 1, T, S)


def keras_path(*attentions):
    """Removes the layers' `use_fused_attention_inputs` (Keras' own
    `_compute_attention` again): the unpadded computation."""
    for attention in attentions:
        del attention.__dict__["_compute_attention"]


def assert_same_outputs_and_gradients(make, inputs, unpatch):
    keras.utils.set_random_seed(3)
    fused = make()
    keras.utils.set_random_seed(3)
    plain = make()
    to_numpy(fused(**inputs))
    to_numpy(plain(**inputs))
    plain.set_weights(fused.get_weights())
    unpatch(plain)
    np.testing.assert_allclose(to_numpy(fused(**inputs)), to_numpy(plain(**inputs)),
                               atol=2e-6, rtol=0)
    for got, want in zip(compute_gradients(fused, inputs), compute_gradients(plain, inputs)):
        np.testing.assert_allclose(got, want, atol=2e-6, rtol=1e-5)


@pytest.mark.jax_slow
def test_encoder_with_odd_length_padding_and_empty_rows_equals_keras_path():
    rng = np.random.default_rng(1)
    _, keys = masked_rows()  # T = S = 7 tokens
    inputs = {"inputs": rng.normal(size=(B, S, D)).astype("float32"),
              "padding_mask": keys, "training": True}
    assert_same_outputs_and_gradients(
        lambda: TransformerEncoder(F, N, attention_dropout=0.0), inputs,
        lambda layer: keras_path(layer._self_attention_layer))


@pytest.mark.jax_slow
def test_decoder_with_odd_lengths_padding_and_empty_memory_equals_keras_path():
    rng = np.random.default_rng(2)
    queries, keys = masked_rows()
    inputs = {"decoder_sequence": rng.normal(size=(B, T, D)).astype("float32"),
              "encoder_sequence": rng.normal(size=(B, S, D)).astype("float32"),
              "decoder_padding_mask": queries, "encoder_padding_mask": keys,
              "training": True}
    assert_same_outputs_and_gradients(
        lambda: TransformerDecoder(F, N, attention_dropout=0.0), inputs,
        lambda layer: keras_path(layer._self_attention_layer, layer._cross_attention_layer))


@pytest.mark.jax_slow
def test_pre_norm_encoder_with_an_empty_row_equals_keras_path():
    rng = np.random.default_rng(4)
    keys = np.ones((2, S), bool)
    keys[1] = False
    inputs = {"inputs": rng.normal(size=(2, S, D)).astype("float32"),
              "padding_mask": keys, "training": True}
    assert_same_outputs_and_gradients(
        lambda: TransformerEncoder(F, N, attention_dropout=0.0, normalize_first=True),
        inputs, lambda layer: keras_path(layer._self_attention_layer))


@pytest.mark.jax_slow
def test_pht_decoder_layer_and_cross_attention_with_odd_lengths_equal_their_unpadded_paths(
        monkeypatch):
    """PHT's self-attention (causal, odd S) against Keras' path, and the
    word attention of ParallelCrossAttention (odd S and T, a paragraph
    without tokens) against the same layer with `fused_attention_inputs`
    giving the broadcast mask unpadded."""
    from keras_hsum.layers import parallel_cross_attention

    rng = np.random.default_rng(5)
    P = 3
    token_mask = rng.random((2, P, T)) < 0.7
    token_mask[:, :, 0] = True
    token_mask[0, 1] = False
    inputs = {"decoder_sequence": rng.normal(size=(2, S, D)).astype("float32"),
              "word_memory": rng.normal(size=(2, P, T, D)).astype("float32"),
              "paragraph_memory": rng.normal(size=(2, P, D)).astype("float32"),
              "token_mask": token_mask, "training": True}
    make = lambda: PHTDecoderLayer(  # noqa: E731
        hidden_dim=D, intermediate_dim=F, num_heads=N, attention_dropout=0.0)
    keras.utils.set_random_seed(6)
    fused = make()
    keras.utils.set_random_seed(6)
    plain = make()
    fused_outputs = to_numpy(fused(**inputs))
    plain(**inputs)
    plain.set_weights(fused.get_weights())
    keras_path(plain.self_attention)
    fused_grads = compute_gradients(fused, inputs)
    original = parallel_cross_attention.fused_attention_inputs
    monkeypatch.setattr(parallel_cross_attention, "fused_attention_inputs",
                        lambda *args, **kwargs: original(*args, **dict(kwargs, pad_to_even=False)))
    for got, want in zip(fused_outputs, to_numpy(plain(**inputs))):
        np.testing.assert_allclose(got, want, atol=2e-6, rtol=0)
    for got, want in zip(fused_grads, compute_gradients(plain, inputs)):
        np.testing.assert_allclose(got, want, atol=2e-6, rtol=1e-5)


@pytest.mark.jax_slow
def test_padding_only_in_training_and_nothing_with_attention_dropout(monkeypatch):
    """The queries and mask Keras' `_compute_attention` receives: padded and
    full in training, full only in inference, Keras' own with dropout."""
    calls = []
    original = keras.layers.MultiHeadAttention._compute_attention

    def recorded(self, query, key, value, attention_mask=None, *args, **kwargs):
        calls.append((tuple(query.shape), tuple(attention_mask.shape)))
        return original(self, query, key, value, attention_mask, *args, **kwargs)

    monkeypatch.setattr(keras.layers.MultiHeadAttention, "_compute_attention", recorded)
    x = np.random.default_rng(7).normal(size=(B, S, D)).astype("float32")
    _, keys = masked_rows()
    layer = TransformerEncoder(F, N, attention_dropout=0.0)
    layer(x, padding_mask=keys)
    # (dropout > 0: a Dropout made with rate 0 has no seed generator)
    dropping = TransformerEncoder(F, N, dropout=0.1, attention_dropout=0.1)
    dropping(x, padding_mask=keys)
    calls.clear()
    layer(x, padding_mask=keys, training=True)
    layer(x, padding_mask=keys)
    dropping(x, padding_mask=keys, training=True)
    assert calls == [((B, S + 1, N, D // N), (B, 1, S + 1, S + 1)),
                     ((B, S, N, D // N), (B, 1, S, S)),
                     ((B, S, N, D // N), (B, 1, S))]


@pytest.mark.jax_slow
def test_config_and_weights_unchanged(tmp_path):
    rng = np.random.default_rng(8)
    x = rng.normal(size=(B, S, D)).astype("float32")
    _, keys = masked_rows()
    inputs = keras.Input((S, D))
    mask = keras.Input((S,), dtype="bool")
    layer = TransformerEncoder(F, N, attention_dropout=0.0)
    model = keras.Model([inputs, mask], layer(inputs, padding_mask=mask))
    names = [v.path for v in layer.weights]
    assert "_compute_attention" in vars(layer._self_attention_layer)
    path = str(tmp_path / "encoder.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    restored = [lay for lay in loaded.layers if isinstance(lay, TransformerEncoder)][0]
    assert [v.path for v in restored.weights] == names
    assert "_compute_attention" in vars(restored._self_attention_layer)
    copied = copy.deepcopy(layer)  # the bound method follows the copy
    assert copied._self_attention_layer._compute_attention.__self__ is (
        copied._self_attention_layer)
    np.testing.assert_allclose(to_numpy(loaded([x, keys])), to_numpy(model([x, keys])), atol=1e-6)


@pytest.mark.jax_slow
@pytest.mark.skipif(keras.backend.backend() != "jax", reason="JAX's cuDNN checks")
def test_recorded_calls_pass_jax_cudnn_checks_in_training():
    """benchmarks/cudnn_attention_eligibility.py's recorder and checker on a
    train step's gradient of a small decoder (odd lengths, padding masks),
    mixed_bfloat16: every call refused before (Keras' path), accepted after."""
    import jax

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
    import cudnn_attention_eligibility as eligibility

    rng = np.random.default_rng(9)
    queries, keys = masked_rows()
    width = 16  # head dim 8: cuDNN wants a multiple of 8
    inputs = {"decoder_sequence": rng.normal(size=(B, T, width)).astype("float32"),
              "encoder_sequence": rng.normal(size=(B, S, width)).astype("float32"),
              "decoder_padding_mask": queries, "encoder_padding_mask": keys}
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        layer = TransformerDecoder(F, N, attention_dropout=0.0)
        layer(**inputs)

        def refusals():
            trainable = [v.value for v in layer.trainable_variables]
            non_trainable = [v.value for v in layer.non_trainable_variables]

            def loss(values):
                outputs, _ = layer.stateless_call(values, non_trainable, **inputs,
                                                  training=True)
                return ops.sum(ops.cast(outputs, "float32"))

            recorder = eligibility.AttentionRecorder()
            with recorder.installed():
                recorder.active = True
                jax.eval_shape(jax.grad(loss), trainable)
            return [(c["site"].split("/")[-1], c["refusal"]) for c in recorder.calls]

        after = refusals()
        keras_path(layer._self_attention_layer, layer._cross_attention_layer)
        before = refusals()
    finally:
        keras.config.set_dtype_policy(previous)
    assert [r for _, r in after] == [None, None]
    assert before[0][0].endswith("self_attention")
    assert "Unsupported sequence length Q 5, KV 5" in before[0][1]
    assert "Bias must have same seq length as QKV, got 1 and 7" in before[1][1]
