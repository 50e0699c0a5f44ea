"""ParagraphRanker: the scoring head against a numpy transcription, padding
invariance, reranking against brute force, the loss against numpy,
save/reload, errors, memorising real examples' ranker-target ordering."""

import numpy as np
import pytest

from keras_hsum.models.paragraph_ranker import ParagraphBinaryCrossEntropy
from keras_hsum.models.paragraph_ranker import ParagraphRanker
from keras_hsum.models.paragraph_ranker import rerank_paragraphs
from keras_hsum.models.paragraph_ranker import take_paragraphs
from model_test_case import assert_save_reload
from model_test_case import to_numpy


def small_model(**overrides):
    options = dict(vocabulary_size=50, embedding_dim=8, hidden_dim=6, feature_dim=5,
                   dropout=0.0)
    options.update(overrides)
    return ParagraphRanker(**options)


def random_inputs(seed=0, batch=2, paragraphs=4, length=6, context=5, vocabulary=50):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(4, vocabulary, (batch, paragraphs, length)).astype("int32")
    tokens[0, 1, 3:] = 0
    tokens[1, paragraphs - 1] = 0
    context_tokens = rng.integers(4, vocabulary, (batch, context)).astype("int32")
    context_tokens[1, 2:] = 0
    return {"tokens": tokens, "token_mask": tokens != 0,
            "paragraph_mask": (tokens != 0).any(-1), "context_tokens": context_tokens}


def test_scoring_head_matches_numpy():
    """s_i = sigmoid(w2 · max_j tanh(W1 [u_pj; u_t] + b1) + b2) over valid j."""
    model = small_model()
    inputs = random_inputs()
    model(inputs)
    rng = np.random.default_rng(1)
    states = rng.normal(size=(2, 4, 6, 6)).astype("float32")
    title = rng.normal(size=(2, 6)).astype("float32")
    token_mask = inputs["token_mask"]
    actual = to_numpy(model.score(states, token_mask, title, inputs["paragraph_mask"]))
    w1, b1 = (to_numpy(w) for w in model.matching.weights)
    w2, b2 = (to_numpy(w) for w in model.scorer.weights)
    expected = np.zeros((2, 4), "float32")
    for b in range(2):
        for p in range(4):
            rows = [np.tanh(np.concatenate([states[b, p, j], title[b]]) @ w1 + b1)
                    for j in range(6) if token_mask[b, p, j]]
            if not rows:
                continue  # padded paragraph: 0
            pooled = np.max(rows, axis=0)
            expected[b, p] = 1.0 / (1.0 + np.exp(-(pooled @ w2[:, 0] + b2[0])))
    np.testing.assert_allclose(actual, expected, atol=1e-6)


def test_title_vector_is_max_pooled_lstm_states():
    model = small_model()
    inputs = random_inputs()
    model(inputs)
    context = inputs["context_tokens"]
    states = to_numpy(model.title_lstm(model.token_embedding(context)))
    expected = np.stack([states[b][context[b] != 0].max(0) for b in range(2)])
    np.testing.assert_allclose(to_numpy(model.title_vector(context)), expected, atol=1e-6)


def test_scores_in_unit_interval_and_invariant_to_padding():
    model = small_model()
    inputs = random_inputs()
    scores = to_numpy(model(inputs))
    real = inputs["paragraph_mask"]
    assert np.all((scores[real] > 0) & (scores[real] < 1))
    assert np.all(scores[~real] == 0)
    padded = {
        "tokens": np.pad(inputs["tokens"], ((0, 0), (0, 3), (0, 4))),
        "context_tokens": np.pad(inputs["context_tokens"], ((0, 0), (0, 3))),
    }
    padded["token_mask"] = padded["tokens"] != 0
    padded["paragraph_mask"] = np.pad(inputs["paragraph_mask"], ((0, 0), (0, 3)))
    padded_scores = to_numpy(model(padded))
    np.testing.assert_allclose(padded_scores[:, :4], scores, atol=1e-6)
    assert np.all(padded_scores[:, 4:] == 0)


def test_rerank_matches_brute_force_sort():
    rng = np.random.default_rng(2)
    scores = rng.choice([0.1, 0.5, 0.7, 0.9], size=(5, 7)).astype("float32")  # ties
    mask = rng.uniform(size=(5, 7)) > 0.3
    actual = to_numpy(rerank_paragraphs(scores, mask))
    for b in range(5):
        real = sorted((i for i in range(7) if mask[b, i]), key=lambda i: (-scores[b, i], i))
        padding = [i for i in range(7) if not mask[b, i]]
        assert actual[b].tolist() == real + padding


def test_take_paragraphs_reorders_paragraph_features_and_graph():
    inputs = random_inputs()
    graph = np.arange(32, dtype="float32").reshape(2, 4, 4)
    indices = np.array([[2, 0, 3, 1], [1, 2, 0, 3]], "int32")
    out = take_paragraphs(dict(inputs, graph=graph), indices)
    for b in range(2):
        np.testing.assert_array_equal(to_numpy(out["tokens"])[b], inputs["tokens"][b, indices[b]])
        np.testing.assert_array_equal(
            to_numpy(out["graph"])[b], graph[b][np.ix_(indices[b], indices[b])])
    np.testing.assert_array_equal(to_numpy(out["context_tokens"]), inputs["context_tokens"])


def test_loss_is_masked_binary_cross_entropy():
    rng = np.random.default_rng(3)
    targets = rng.uniform(size=(3, 5)).astype("float32")
    scores = rng.uniform(0.05, 0.95, size=(3, 5)).astype("float32")
    mask = (rng.uniform(size=(3, 5)) > 0.4).astype("float32")
    loss = float(to_numpy(ParagraphBinaryCrossEntropy()(targets, scores, sample_weight=mask)))
    elementwise = -(targets * np.log(scores) + (1 - targets) * np.log(1 - scores))
    np.testing.assert_allclose(loss, (elementwise * mask).sum() / mask.size, rtol=1e-5)


def test_clear_errors():
    model = small_model()
    inputs = random_inputs()
    model(inputs)
    with pytest.raises(ValueError, match="context_tokens"):
        model({k: v for k, v in inputs.items() if k != "context_tokens"})
    with pytest.raises(ValueError, match=r"\[B,P,T\]"):
        model(dict(inputs, tokens=inputs["tokens"][:, 0], token_mask=None))
    with pytest.raises(ValueError, match=r"\[B,P\]"):
        rerank_paragraphs(np.zeros((2, 3)), np.ones((2, 4), bool))
    # take_paragraphs: indices of batch 1 or of another P would be broadcast.
    indices = np.array([[2, 0, 3, 1], [1, 2, 0, 3]], "int32")
    for bad in (indices[:1], indices[:, :3]):
        with pytest.raises(ValueError, match=r"take_paragraphs: `indices` must have shape "
                                             r"\[B,P\] of `tokens` = \(2, 4\)"):
            take_paragraphs(inputs, bad)
    with pytest.raises(ValueError, match=r"`indices` must have rank 2"):
        take_paragraphs(inputs, indices[0])


def test_save_reload(tmp_path):
    model = small_model()
    inputs = random_inputs()
    model(inputs)
    assert_save_reload(model, inputs, tmp_path)


def pairwise_order_accuracy(scores, targets, mask, margin):
    """Fraction of same-example paragraph pairs with targets differing by
    more than `margin` that the scores order the same way."""
    agree = total = 0
    for b in range(len(scores)):
        real = np.flatnonzero(mask[b])
        for i in real:
            for j in real:
                if targets[b, i] > targets[b, j] + margin:
                    total += 1
                    agree += scores[b, i] > scores[b, j]
    return agree / max(total, 1), total


@pytest.mark.slow  # 22 s under TensorFlow on CI's 2 cores: the slow set
@pytest.mark.tensorflow_only
def test_memorizes_ranker_target_ordering_of_eight_real_examples(vocabulary, real_examples):
    import keras

    from keras_hsum.recipes import ranker as recipe
    from model_test_case import real_batch
    from model_test_case import seeded

    config = recipe.CONFIGS["tiny"].replace(max_paragraphs=8, paragraph_length=32,
                                            dropout=0.0)
    inputs, labels, weights = real_batch(
        recipe, config, vocabulary, real_examples("qmsum_goldspan", "train"), 8)
    # Seeded before the model is made (as `memorize`): unseeded, its initial
    # weights came from whatever drew random numbers before, and the same
    # code gave 0.918 to 0.967 from run to run.
    model = seeded(lambda: recipe.build_model(config, vocabulary.vocabulary_size), 0)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=recipe.loss(config))
    model.fit(inputs, labels, sample_weight=weights, epochs=150, batch_size=8, verbose=0,
              shuffle=False)
    scores = model.predict(inputs, batch_size=8, verbose=0)
    accuracy, pairs = pairwise_order_accuracy(scores, labels, weights > 0, margin=0.02)
    print(f"pairwise order accuracy {accuracy:.3f} on {pairs} pairs")
    assert pairs >= 30, pairs
    assert accuracy >= 0.95, accuracy
