import keras
import numpy as np
import pytest
from keras import ops
from layer_test_case import compute_gradients
from layer_test_case import run_layer_test
from layer_test_case import to_numpy

from keras_hsum.layers.siamese_classifier_head import SiameseClassifierHead
from keras_hsum.layers.siamese_classifier_head import sentence_scores


def numpy_classifier(r, p, w1, b1, w2, b2):
    """Eq. 20 before the softmax: W2 max(0, W1 [r; p; |r-p|] + b1) + b2."""
    interaction = np.concatenate([r, p, np.abs(r - p)], axis=-1)
    hidden = np.maximum(0.0, interaction @ w1 + b1)
    return hidden @ w2 + b2


def numpy_sentence_scores(attention, mask, head=None):
    """Eq. 22-23 with an explicit loop: H = mean of heads (or one head),
    alpha_j = average over the valid rows i of H[i, j]; padded j -> 0."""
    batch, _, length, _ = attention.shape
    scores = np.zeros((batch, length))
    for b in range(batch):
        matrix = attention[b].mean(0) if head is None else attention[b, head]
        rows = [i for i in range(length) if mask[b, i]]
        for j in range(length):
            if mask[b, j] and rows:
                scores[b, j] = sum(matrix[i, j] for i in rows) / len(rows)
    return scores


def random_attention(rng, shape, mask):
    """Row-stochastic attention over the valid keys (rows of padded queries random)."""
    logits = rng.normal(size=shape)
    logits = np.where(mask[:, None, None, :], logits, -np.inf)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    return (weights / weights.sum(-1, keepdims=True)).astype("float32")


def test_shared_layer_checks():
    rng = np.random.default_rng(0)
    run_layer_test(
        SiameseClassifierHead,
        {"hidden_dim": 16},
        {
            "document": rng.normal(size=(2, 8)).astype("float32"),
            "summary": rng.normal(size=(2, 8)).astype("float32"),
        },
        expected_output_shape=(2, 2),
        expected_num_trainable_weights=4,
    )


def test_matches_numpy_transcription_of_eq_20():
    rng = np.random.default_rng(1)
    layer = SiameseClassifierHead(hidden_dim=12, bias_initializer="random_normal")
    r = rng.normal(size=(3, 8)).astype("float32")
    p = rng.normal(size=(3, 8)).astype("float32")
    logits = to_numpy(layer(r, p))
    w1, b1 = (ops.convert_to_numpy(v) for v in layer.hidden_dense.weights)
    w2, b2 = (ops.convert_to_numpy(v) for v in layer.output_dense.weights)
    assert w1.shape == (24, 12) and w2.shape == (12, 2)
    np.testing.assert_allclose(
        logits, numpy_classifier(r, p, w1, b1, w2, b2), atol=1e-5, rtol=0
    )
    # The feature is symmetric in r and p only through |r - p|: swapping the
    # inputs changes the logits (the first 2D rows of W1 are not symmetric).
    assert not np.allclose(to_numpy(layer(p, r)), logits)


def test_gradients_reach_all_weights():
    rng = np.random.default_rng(2)
    layer = SiameseClassifierHead(hidden_dim=8)
    inputs = {
        "document": rng.normal(size=(2, 6)).astype("float32"),
        "summary": rng.normal(size=(2, 6)).astype("float32"),
    }
    layer(**inputs)
    grads = compute_gradients(layer, inputs)
    assert len(grads) == 4
    for variable, grad in zip(layer.trainable_variables, grads):
        assert np.all(np.isfinite(grad)) and np.any(grad != 0), variable.path


def test_dropout_only_in_training():
    rng = np.random.default_rng(3)
    layer = SiameseClassifierHead(hidden_dim=64, dropout=0.5)
    r = rng.normal(size=(2, 8)).astype("float32")
    p = rng.normal(size=(2, 8)).astype("float32")
    np.testing.assert_allclose(to_numpy(layer(r, p)), to_numpy(layer(r, p, training=False)))
    assert not np.allclose(to_numpy(layer(r, p, training=True)), to_numpy(layer(r, p)))


def test_sentence_scores_match_numpy_transcription():
    rng = np.random.default_rng(4)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    attention = random_attention(rng, (2, 3, 5, 5), mask)
    for head in (None, 0, 2):
        got = to_numpy(sentence_scores(attention, mask.astype("int32"), head=head))
        assert got.dtype == np.float32
        np.testing.assert_allclose(
            got, numpy_sentence_scores(attention, mask, head), atol=1e-6, rtol=0
        )
    # The class exposes the same function.
    np.testing.assert_allclose(
        to_numpy(SiameseClassifierHead.sentence_scores(attention, mask)),
        numpy_sentence_scores(attention, mask),
        atol=1e-6,
    )


def test_sentence_scores_are_a_distribution_over_valid_sentences():
    rng = np.random.default_rng(5)
    mask = np.array([[1, 1, 0, 0], [1, 1, 1, 1]], bool)
    attention = random_attention(rng, (2, 2, 4, 4), mask)
    scores = to_numpy(sentence_scores(attention, mask))
    # Means of rows that each sum to 1 over the valid keys sum to 1 too.
    np.testing.assert_allclose(scores.sum(-1), [1.0, 1.0], atol=1e-6)
    assert np.all(scores[0, 2:] == 0.0)


def test_sentence_scores_ignore_padded_rows_and_default_mask():
    rng = np.random.default_rng(6)
    mask = np.array([[1, 1, 0]], bool)
    attention = random_attention(rng, (1, 2, 3, 3), mask)
    changed = attention.copy()
    changed[:, :, 2, :] = rng.uniform(size=(1, 2, 3))  # a padded query row
    np.testing.assert_allclose(
        to_numpy(sentence_scores(attention, mask)),
        to_numpy(sentence_scores(changed, mask)),
        atol=1e-7,
    )
    # No mask: the plain mean over all P rows (Eq. 23 as printed).
    np.testing.assert_allclose(
        to_numpy(sentence_scores(attention)), attention.mean(1).mean(1), atol=1e-6
    )


def test_sentence_scores_of_an_empty_document_are_zero():
    attention = np.full((1, 2, 3, 3), 1.0 / 3.0, "float32")
    scores = to_numpy(sentence_scores(attention, np.zeros((1, 3), "int32")))
    np.testing.assert_array_equal(scores, np.zeros((1, 3), "float32"))


def test_sentence_scores_run_under_jit():
    rng = np.random.default_rng(7)
    mask = np.array([[1, 1, 1, 0]], bool)
    attention = random_attention(rng, (1, 2, 4, 4), mask)
    attention_in = keras.Input(shape=(2, 4, 4), batch_size=1)
    mask_in = keras.Input(shape=(4,), batch_size=1, dtype="bool")
    model = keras.Model(
        [attention_in, mask_in], ScoresLayer()(attention_in, mask_in)
    )
    model.compile(jit_compile=True)
    got = model.predict_on_batch([attention, mask])
    np.testing.assert_allclose(
        got, numpy_sentence_scores(attention, mask), atol=1e-6, rtol=0
    )


class ScoresLayer(keras.layers.Layer):
    def call(self, attention, paragraph_mask):
        return sentence_scores(attention, paragraph_mask)


def test_wrong_inputs_raise():
    layer = SiameseClassifierHead(hidden_dim=4)
    with pytest.raises(ValueError, match=r"`document`.*rank 2.*\[B,D\].*\(2, 3, 8\)"):
        layer(np.ones((2, 3, 8), "float32"), np.ones((2, 8), "float32"))
    with pytest.raises(ValueError, match=r"`summary`.*\(2, 8\).*\(2, 6\)"):
        layer(np.ones((2, 8), "float32"), np.ones((2, 6), "float32"))
    attention = np.full((2, 2, 3, 3), 1.0 / 3.0, "float32")
    with pytest.raises(ValueError, match=r"`attention`.*\[B,H,P,P\].*\(2, 3, 3\)"):
        sentence_scores(attention[0], np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"`attention`.*\[B,H,P,P\].*\(2, 2, 3, 4\)"):
        sentence_scores(np.ones((2, 2, 3, 4), "float32"))
    with pytest.raises(ValueError, match=r"`paragraph_mask`.*\(2, 3\).*\(2, 4\)"):
        sentence_scores(attention, np.ones((2, 4)))
    with pytest.raises(ValueError, match=r"`head`.*\[0, 2\).*head=2"):
        sentence_scores(attention, np.ones((2, 3)), head=2)
