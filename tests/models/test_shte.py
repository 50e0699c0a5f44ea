"""SHTE: siamese weight sharing, padding, extraction, positions, save/reload, memorisation."""

import keras
import numpy as np
import pytest

from keras_hsum.layers.hierarchical_encoder import HierarchicalEncoder
from keras_hsum.models.shte import SHTE
from model_test_case import assert_save_reload
from model_test_case import to_numpy

VOCABULARY = 40


def small_model(**overrides):
    options = dict(vocabulary_size=VOCABULARY, hidden_dim=8, num_heads=2,
                   intermediate_dim=16, num_word_layers=1, num_sentence_layers=1,
                   classifier_hidden_dim=8, position_encoding="sentence")
    options.update(overrides)
    return SHTE(**options)


def random_inputs(seed=0, sentences=(5, 3, 1), summary_sentences=(2, 1, 2),
                  pages=5, summary_pages=2, tokens=6):
    """Documents of `sentences[b]` real sentences (each with 2..tokens real
    tokens), padded to `pages` sentences; summaries likewise."""
    rng = np.random.default_rng(seed)

    def side(counts, rows):
        ids = np.zeros((len(counts), rows, tokens), "int32")
        for b, count in enumerate(counts):
            for p in range(count):
                length = int(rng.integers(2, tokens + 1))
                ids[b, p, :length] = rng.integers(1, VOCABULARY, length)
        mask = ids != 0
        return ids, mask, mask.any(-1)

    tokens_, token_mask, paragraph_mask = side(sentences, pages)
    summary, summary_mask, summary_paragraphs = side(summary_sentences, summary_pages)
    return {"tokens": tokens_, "token_mask": token_mask, "paragraph_mask": paragraph_mask,
            "summary_tokens": summary, "summary_token_mask": summary_mask,
            "summary_paragraph_mask": summary_paragraphs}


def numpy_sentence_scores(attention, mask):
    """Eq. 21-23: H = mean over heads; α_j = mean over valid rows i of H_ij."""
    attention = np.asarray(attention, "float64")
    mask = np.asarray(mask, bool)
    averaged = attention.mean(axis=1)
    scores = np.zeros(mask.shape)
    for b in range(mask.shape[0]):
        rows = np.flatnonzero(mask[b])
        if len(rows):
            scores[b] = averaged[b, rows].mean(axis=0) * mask[b]
    return scores


def test_siamese_branches_share_one_encoder():
    model = small_model()
    inputs = random_inputs()
    logits = to_numpy(model(inputs))
    layers = list(model._flatten_layers(include_self=False, recursive=True))
    assert sum(isinstance(layer, HierarchicalEncoder) for layer in layers) == 1
    assert sum(isinstance(layer, keras.layers.Embedding) for layer in layers) == 1
    weights = model.trainable_weights
    assert len({id(w) for w in weights}) == len(weights)
    expected = (model.token_embedding.count_params() + model.encoder.count_params()
                + model.classifier.count_params())
    assert model.count_params() == expected
    # Eq. 20 in numpy on r and p from the ONE encoder:
    # softmax-free logits W2 relu(W1 [r; p; |r-p|] + b1) + b2.
    r = to_numpy(model.encode(inputs["tokens"], inputs["token_mask"])[0])
    p = to_numpy(model.encode(inputs["summary_tokens"], inputs["summary_token_mask"])[0])
    w1, b1 = (to_numpy(v) for v in model.classifier.hidden_dense.weights)
    w2, b2 = (to_numpy(v) for v in model.classifier.output_dense.weights)
    hidden = np.maximum(np.concatenate([r, p, np.abs(r - p)], -1) @ w1 + b1, 0.0)
    np.testing.assert_allclose(logits, hidden @ w2 + b2, atol=1e-5)
    # The same text gives the same representation on either side.
    same = dict(inputs, summary_tokens=inputs["tokens"],
                summary_token_mask=inputs["token_mask"],
                summary_paragraph_mask=inputs["paragraph_mask"])
    hidden = np.maximum(np.concatenate([r, r, 0 * r], -1) @ w1 + b1, 0.0)
    np.testing.assert_allclose(to_numpy(model(same)), hidden @ w2 + b2, atol=1e-5)


@pytest.mark.jax_slow  # 22 s under JAX (compiles whole searches): the slow set's JAX pass
def test_padding_does_not_change_logits_or_scores():
    model = small_model(position_encoding="sentence_and_word")
    inputs = random_inputs(seed=1)
    logits = to_numpy(model(inputs))
    _, _, scores = (to_numpy(x) for x in model.extract(inputs, k=2))

    padded = {}
    for key, value in inputs.items():
        pad = [(0, 0), (0, 2)] + [(0, 3)] * (value.ndim - 2)  # 2 sentences, 3 tokens
        padded[key] = np.pad(value, pad)
    # Garbage in two masked sentences of the first document, then swapped.
    padded["tokens"][0, 5] = 7
    padded["tokens"][0, 6] = 9
    padded["token_mask"][0, 5:] = True
    swapped = dict(padded, tokens=padded["tokens"][:, [0, 1, 2, 3, 4, 6, 5]])
    for variant in (padded, swapped):
        np.testing.assert_allclose(to_numpy(model(variant)), logits, atol=1e-5)
        _, _, variant_scores = (to_numpy(x) for x in model.extract(variant, k=2))
        np.testing.assert_allclose(variant_scores[:, :5], scores, atol=1e-6)
        np.testing.assert_array_equal(variant_scores[:, 5:], 0.0)


def test_extract_is_a_brute_force_top_k_in_document_order():
    model = small_model(hidden_dim=8, num_heads=2)
    inputs = random_inputs(seed=2)
    mask = inputs["paragraph_mask"]
    _, attention, _ = model.encode(inputs["tokens"], inputs["token_mask"])
    for k in (3, 7):  # 7 > P = 5: slots past the sentences are -1
        indices, top_scores, scores = (to_numpy(x) for x in model.extract(inputs, k=k))
        assert indices.dtype == np.int32 and indices.shape == (3, k)
        assert top_scores.shape == (3, k) and scores.shape == (3, 5)
        np.testing.assert_allclose(scores, numpy_sentence_scores(to_numpy(attention), mask),
                                   atol=1e-6)
        for b in range(3):
            real = np.flatnonzero(mask[b])
            best = real[np.argsort(-scores[b, real], kind="stable")[:k]]
            expected = np.full(k, -1)
            expected[:len(best)] = np.sort(best)
            np.testing.assert_array_equal(indices[b], expected)
            kept = expected >= 0
            np.testing.assert_allclose(top_scores[b, kept], scores[b, expected[kept]])
            np.testing.assert_array_equal(top_scores[b, ~kept], 0.0)


def test_mean_of_heads_scores_are_the_mean_of_single_head_scores():
    mean_model = small_model(num_heads=2)
    inputs = random_inputs(seed=3)
    mean_model(inputs)
    per_head = []
    for head in range(2):
        model = small_model(num_heads=2, score_head=head)
        model(inputs)
        model.set_weights(mean_model.get_weights())
        per_head.append(to_numpy(model.extract(inputs, k=1)[2]))
    scores = to_numpy(mean_model.extract(inputs, k=1)[2])
    np.testing.assert_allclose(scores, np.mean(per_head, axis=0), atol=1e-6)
    assert not np.allclose(per_head[0], per_head[1])


@pytest.mark.jax_slow  # 54 s under JAX (compiles whole searches): the slow set's JAX pass
@pytest.mark.parametrize("position_encoding", ["none", "sentence", "sentence_and_word"])
def test_each_position_encoding_builds_and_trains_a_step(position_encoding):
    model = small_model(position_encoding=position_encoding)
    inputs = random_inputs(seed=4)
    # Sentence order: without positions the model is permutation-equivariant.
    order = [2, 0, 1, 3, 4]
    permuted = dict(inputs, tokens=inputs["tokens"][:, order],
                    token_mask=inputs["token_mask"][:, order],
                    paragraph_mask=inputs["paragraph_mask"][:, order])
    logits, permuted_logits = to_numpy(model(inputs)), to_numpy(model(permuted))
    scores = to_numpy(model.extract(inputs, k=1)[2])
    permuted_scores = to_numpy(model.extract(permuted, k=1)[2])
    if position_encoding == "none":
        np.testing.assert_allclose(permuted_logits, logits, atol=1e-5)
        np.testing.assert_allclose(permuted_scores, scores[:, order], atol=1e-6)
    else:
        assert not np.allclose(permuted_scores[0], scores[0, order], atol=1e-4)

    labels = np.array([1, 0, 1], "int32")
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  run_eagerly=True)  # one step: tracing would cost more than it saves
    before = [to_numpy(w) for w in model.encoder.trainable_weights]
    loss = float(model.train_on_batch(inputs, labels))
    assert np.isfinite(loss)
    after = [to_numpy(w) for w in model.encoder.trainable_weights]
    assert any(not np.allclose(a, b) for a, b in zip(after, before))


def test_save_reload(tmp_path):
    model = small_model(position_encoding="sentence_and_word", score_head=1)
    inputs = random_inputs(seed=5)
    model(inputs)
    assert SHTE.from_config(model.get_config()).get_config() == model.get_config()
    restored = assert_save_reload(model, inputs, tmp_path)
    for expected, actual in zip(model.extract(inputs, k=2), restored.extract(inputs, k=2)):
        np.testing.assert_allclose(to_numpy(actual), to_numpy(expected), atol=1e-6)


def test_clear_errors():
    model = small_model()
    inputs = random_inputs()
    model(inputs)
    without_summary = {k: v for k, v in inputs.items() if not k.startswith("summary")}
    with pytest.raises(ValueError, match="summary_tokens.*extract"):
        model(without_summary)
    with pytest.raises(ValueError, match="`k` must be an int >= 1 \\(sentences to extract\\)"):
        model.extract(inputs, k=0)
    with pytest.raises(ValueError, match=r"\[B,P,T\]"):
        model.extract({"tokens": inputs["tokens"][:, 0]}, k=1)
    with pytest.raises(ValueError, match="position_encoding"):
        small_model(position_encoding="word")
    with pytest.raises(ValueError, match="score_head"):
        small_model(score_head=2)


@pytest.mark.slow  # 16 s under TensorFlow on CI's 2 cores: the slow set
@pytest.mark.tensorflow_only
def test_memorizes_eight_real_examples_pairs(vocabulary, real_examples):
    from keras_hsum.recipes import shte as recipe

    config = recipe.CONFIGS["tiny"].replace(
        hidden_dim=32, num_heads=2, intermediate_dim=64, sentence_intermediate_dim=64,
        num_word_layers=1, num_sentence_layers=1, classifier_hidden_dim=64,
        max_sentences=8, max_sentence_tokens=24, max_summary_sentences=2)
    # 8 examples (max_examples counts source examples) give 16 pairs: one batch.
    dataset = recipe.make_dataset(config.replace(batch_size=16),
                                  list(real_examples("scitldr_a", "train")), vocabulary,
                                  training=False, max_examples=8)
    batches = list(dataset)
    assert len(batches) == 1
    inputs, labels, weights = batches[0]
    inputs = {k: v.numpy() for k, v in inputs.items()}
    labels, weights = labels.numpy(), weights.numpy()
    # 8 examples → 8 positive + 8 negative pairs, positive first.
    np.testing.assert_array_equal(labels, [1, 0] * 8)
    np.testing.assert_array_equal(weights, np.ones(16))
    assert inputs["summary_tokens"].shape == (16, 2, 24)
    np.testing.assert_array_equal(inputs["tokens"][0::2], inputs["tokens"][1::2])
    assert all((inputs["summary_tokens"][2 * i] != inputs["summary_tokens"][2 * i + 1]).any()
               for i in range(8))

    model = recipe.build_model(config, vocabulary.vocabulary_size)
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss=recipe.loss(config),
                  weighted_metrics=recipe.metrics(config))
    model.fit(inputs, labels, sample_weight=weights, epochs=40, batch_size=16,
              verbose=0, shuffle=False)
    logits = model.predict(inputs, batch_size=16, verbose=0)
    accuracy = float(np.mean(np.argmax(logits, -1) == labels))
    assert accuracy == 1.0, accuracy


@pytest.mark.tensorflow_only
def test_summary_side_is_structured_as_the_python_builder_does(vocabulary, real_examples):
    """The candidate summary's rows (graph structurer) equal the Python
    builder's on the summary as one paragraph of its sentences, padded to
    Q rows, on 40 real scitldr summaries; the label marks the own summary."""
    import dataclasses

    from keras_hsum.recipes import shte as recipe
    from reference_structure import build_sentences

    config = recipe.CONFIGS["tiny"].replace(max_summary_sentences=3, max_sentence_tokens=12)
    extra = recipe.summary_features(config, vocabulary)
    examples = list(real_examples("scitldr_a", "val"))[:40]
    for example, other in zip(examples, examples[1:] + examples[:1]):
        for summary, label in ((example.summary, 1), (other.summary, 0)):
            pair = dataclasses.replace(example, summary=summary,
                                       references=(example.summary,))
            got = extra(pair, None)
            built = build_sentences(
                recipe._summary_example(pair, summary), vocabulary, 3, 12
            ).features
            rows = len(built["tokens"])
            np.testing.assert_array_equal(got["summary_tokens"][:rows], built["tokens"])
            np.testing.assert_array_equal(got["summary_token_mask"][:rows], built["token_mask"])
            assert got["summary_paragraph_mask"].tolist() == [True] * rows + [False] * (3 - rows)
            assert (got["summary_tokens"][rows:] == vocabulary.pad_id).all()
            assert int(got["label"]) == label
