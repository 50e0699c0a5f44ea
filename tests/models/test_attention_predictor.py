"""AttentionPredictor and attention_labels (Ma & Zong §4.2.1): η against a
numpy transcription of Eq. 15, η̂ is a distribution over real paragraphs,
save/reload, the pht_predictor recipe's teacher loading, and fitting the η
of 8 real qmsum_goldspan examples."""

import os
import shutil

import keras
import numpy as np
import pytest

from keras_hsum.models.attention_predictor import AttentionPredictor
from keras_hsum.models.attention_predictor import ParagraphAttentionMSE
from keras_hsum.models.attention_predictor import attention_labels
from keras_hsum.models.parallel_hierarchical_transformer import (
    ParallelHierarchicalTransformer,
)
from model_test_case import assert_save_reload
from model_test_case import to_numpy

VOCABULARY = 40


def small_pht():
    return ParallelHierarchicalTransformer(
        vocabulary_size=VOCABULARY, hidden_dim=16, num_heads=2, intermediate_dim=32,
        num_encoder_layers=1, num_decoder_layers=3, dropout=0.0)


def pht_inputs(seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(4, VOCABULARY, (2, 4, 5)).astype("int32")
    tokens[1, 2:] = 0
    decoder = rng.integers(4, VOCABULARY, (2, 7)).astype("int32")
    decoder[:, 0] = 2
    decoder[1, 4:] = 0
    labels = np.concatenate([decoder[:, 1:], np.zeros((2, 1), "int32")], axis=1)
    labels[0, -1] = 3
    return {
        "tokens": tokens,
        "token_mask": tokens != 0,
        "paragraph_mask": (tokens != 0).any(-1),
        "decoder_tokens": decoder,
        "target_mask": labels != 0,
    }


def numpy_eta(per_layer, target_mask):
    """Eq. 15 with footnote 3: Σ_l Σ_t α over real t, normalised over p."""
    batch, layers, steps, paragraphs = per_layer.shape
    eta = np.zeros((batch, paragraphs))
    for b in range(batch):
        for p in range(paragraphs):
            eta[b, p] = sum(per_layer[b, l, t, p] for l in range(layers)
                            for t in range(steps) if target_mask[b, t])
        eta[b] /= eta[b].sum()
    return eta


def predictor_inputs(seed=0, batch=2, paragraphs=5, width=16):
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, paragraphs), bool)
    mask[1, 3:] = False
    phi = rng.normal(size=(batch, paragraphs, width)).astype("float32")
    return {"paragraph_embeddings": phi, "paragraph_mask": mask}


def test_attention_labels_match_numpy_eq_15():
    model = small_pht()
    inputs = pht_inputs()
    per_layer = to_numpy(model.paragraph_attention(inputs))
    eta = to_numpy(attention_labels(model, inputs))
    expected = numpy_eta(per_layer, inputs["target_mask"])
    np.testing.assert_allclose(eta, expected, atol=1e-6)
    np.testing.assert_allclose(eta.sum(-1), 1.0, atol=1e-6)
    assert np.all(eta[1, 2:] == 0.0)
    # Without `target_mask`: the non-padding decoder positions count.
    no_mask = {k: v for k, v in inputs.items() if k != "target_mask"}
    default = inputs["decoder_tokens"] != 0
    np.testing.assert_allclose(to_numpy(attention_labels(model, no_mask)),
                               numpy_eta(per_layer, default), atol=1e-6)


def test_predictor_is_a_distribution_over_real_paragraphs():
    model = AttentionPredictor(num_heads=2, intermediate_dim=32, dropout=0.0)
    inputs = predictor_inputs()
    eta_hat = to_numpy(model(inputs))
    assert eta_hat.shape == (2, 5) and eta_hat.dtype == np.float32
    np.testing.assert_allclose(eta_hat.sum(-1), 1.0, atol=1e-6)
    assert np.all(eta_hat[1, 3:] == 0.0)
    assert np.all(eta_hat[inputs["paragraph_mask"]] > 0.0)
    # Padded paragraphs (whatever their embeddings) change nothing.
    padded = dict(inputs)
    padded["paragraph_embeddings"] = np.concatenate(
        [inputs["paragraph_embeddings"], np.full((2, 2, 16), 7.0, "float32")], axis=1)
    padded["paragraph_mask"] = np.pad(inputs["paragraph_mask"], ((0, 0), (0, 2)))
    padded["paragraph_embeddings"][1, 3:5] = -3.0
    np.testing.assert_allclose(to_numpy(model(padded))[:, :5], eta_hat, atol=1e-6)


def test_paragraph_mse_ignores_padded_paragraphs():
    eta = np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]], "float32")
    eta_hat = np.array([[0.4, 0.6, 0.9], [0.2, 0.1, 0.7]], "float32")
    weights = np.array([[1, 1, 0], [1, 1, 1]], "float32")
    expected = np.sum(weights * (eta_hat - eta) ** 2) / eta.size
    value = to_numpy(ParagraphAttentionMSE()(eta, eta_hat, sample_weight=weights))
    np.testing.assert_allclose(value, expected, rtol=1e-6)


def test_clear_errors():
    model = AttentionPredictor(num_heads=3, intermediate_dim=8)
    with pytest.raises(ValueError, match="paragraph_embeddings"):
        model({"paragraph_mask": np.ones((1, 2), bool)})
    with pytest.raises(ValueError, match="divisible"):
        model(predictor_inputs())


def test_save_reload(tmp_path):
    model = AttentionPredictor(num_heads=2, intermediate_dim=32, dropout=0.0)
    inputs = predictor_inputs()
    model(inputs)
    assert_save_reload(model, inputs, tmp_path, atol=1e-6)


@pytest.mark.tensorflow_only
def test_recipe_needs_a_teacher_run(tmp_path):
    from keras_hsum.recipes import pht_predictor as recipe

    config = recipe.CONFIGS["tiny"]
    with pytest.raises(ValueError, match="teacher_run"):
        recipe.make_dataset(config, [], None, training=False)
    with pytest.raises(ValueError, match="model.keras"):
        recipe.make_dataset(config.replace(teacher_run=str(tmp_path)), [], None,
                            training=False)
    with pytest.raises(ValueError, match="best.keras"):
        recipe.make_dataset(config.replace(teacher_run=str(tmp_path),
                                           teacher_checkpoint="best"), [], None,
                            training=False)
    with pytest.raises(ValueError, match="teacher_checkpoint.*'middle'"):
        recipe.make_dataset(config.replace(teacher_run=str(tmp_path),
                                           teacher_checkpoint="middle"), [], None,
                            training=False)


@pytest.mark.slow  # 19 s under TensorFlow on CI's 2 cores: the slow set
@pytest.mark.tensorflow_only
def test_fits_eta_of_eight_real_examples(tmp_path, vocabulary, real_examples):
    from keras_hsum.recipes import pht as pht_recipe
    from keras_hsum.recipes import pht_predictor as recipe

    shape = dict(max_paragraphs=6, max_paragraph_tokens=24, max_target_length=32)
    # A teacher run folder as the trainer writes it (an untrained tiny PHT:
    # its attention is already example-specific).
    teacher_config = pht_recipe.CONFIGS["tiny"].replace(dropout=0.0, **shape)
    teacher = pht_recipe.build_model(teacher_config, vocabulary.vocabulary_size)
    examples = list(real_examples("qmsum_goldspan", "train"))[:8]
    batch = next(iter(pht_recipe.make_dataset(
        teacher_config.replace(batch_size=8), examples, vocabulary, training=False)))
    teacher(batch[0])
    teacher.save(os.path.join(tmp_path, "model.keras"))
    vocabulary.save(os.path.join(tmp_path, "vocabulary.model"))

    config = recipe.CONFIGS["tiny"].replace(
        teacher_run=str(tmp_path), batch_size=8, dropout=0.0, **shape)
    inputs, eta, weights = next(iter(recipe.make_dataset(
        config, examples, vocabulary, training=False)))
    inputs = {k: v.numpy() for k, v in inputs.items()}
    eta, weights = eta.numpy(), weights.numpy()
    assert inputs["paragraph_embeddings"].shape == (8, 6, 64)
    np.testing.assert_allclose(weights, inputs["paragraph_mask"])
    # The labels are the saved teacher's η of these batches.
    np.testing.assert_allclose(
        eta, to_numpy(attention_labels(teacher, {
            **{k: v.numpy() for k, v in batch[0].items()}})), atol=1e-5)
    # teacher_checkpoint="best": the labels come from best.keras (here the
    # same teacher with other weights), not from model.keras.
    for weight in teacher.weights:
        weight.assign(weight.numpy() * 1.5)
    teacher.save(os.path.join(tmp_path, "best.keras"))
    _, best_eta, _ = next(iter(recipe.make_dataset(
        config.replace(teacher_checkpoint="best"), examples, vocabulary, training=False)))
    np.testing.assert_allclose(
        best_eta.numpy(), to_numpy(attention_labels(teacher, {
            **{k: v.numpy() for k, v in batch[0].items()}})), atol=1e-5)
    assert np.abs(best_eta.numpy() - eta).max() > 1e-4
    # teacher_checkpoint="epochs-1-2": the mean of two kept epochs' weights
    # (model.keras's and best.keras's: 1.25 x the first).
    os.makedirs(os.path.join(tmp_path, "epochs"))
    shutil.copyfile(os.path.join(tmp_path, "model.keras"),
                    os.path.join(tmp_path, "epochs", "epoch-001.keras"))
    shutil.copyfile(os.path.join(tmp_path, "best.keras"),
                    os.path.join(tmp_path, "epochs", "epoch-002.keras"))
    _, mean_eta, _ = next(iter(recipe.make_dataset(
        config.replace(teacher_checkpoint="epochs-1-2"), examples, vocabulary, training=False)))
    for weight in teacher.weights:
        weight.assign(weight.numpy() / 1.5 * 1.25)
    np.testing.assert_allclose(
        mean_eta.numpy(), to_numpy(attention_labels(teacher, {
            **{k: v.numpy() for k, v in batch[0].items()}})), atol=1e-5)
    real = weights > 0
    uniform = np.where(real, 1.0 / real.sum(-1, keepdims=True), 0.0)
    baseline = np.mean((uniform - eta)[real] ** 2)
    assert baseline > 1e-5, "η should not be uniform"

    model = recipe.build_model(config, vocabulary.vocabulary_size)
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss=recipe.loss(config))
    model.fit(inputs, eta, sample_weight=weights, epochs=150, batch_size=8, verbose=0)
    fitted = model.predict(inputs, verbose=0)
    mse = np.mean((fitted - eta)[real] ** 2)
    np.testing.assert_allclose(fitted.sum(-1), 1.0, atol=1e-5)
    assert mse < 1e-6 and mse < 0.01 * baseline, (mse, baseline)
