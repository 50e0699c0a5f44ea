"""Sequence-level training on a ROUGE reward (`keras_hsum.decoding.ReinforceObjective`).

References: ROUGE-N F1 counted with `collections.Counter` (rouge-score's
clipped n-gram overlap, on ids), the leave-one-out baseline written as a
loop, the search's own log P(y|x) of each sample (an incremental, cached
path) against the teacher-forced log-probability, the REINFORCE loss
recomputed in numpy from its parts, and the property the objective exists
for: gradient steps on it alone raise the expected reward.
"""

import collections

import keras
import numpy as np
import pytest
from keras import ops

from keras_hsum.decoding import ReinforceObjective
from keras_hsum.decoding import Sampling
from keras_hsum.decoding import TokenBlocking
from keras_hsum.decoding import sample_search
from keras_hsum.decoding.reinforce import leave_one_out_advantages
from keras_hsum.decoding.reinforce import rouge_rewards
from keras_hsum.decoding.reinforce import sequence_log_probs
from keras_hsum.models import FlatTransformer
from keras_hsum.models import LabelSmoothedCrossEntropy
from keras_hsum.models import ParallelHierarchicalTransformer
from keras_hsum.models.summarizer import _draw_stream

V = 40
EOS = 3


def numpy(x):
    return np.asarray(ops.convert_to_numpy(x))


def counter_f1(candidate, reference, n):
    grams = [collections.Counter(tuple(s[i:i + n]) for i in range(len(s) - n + 1))
             for s in (candidate, reference)]
    total = sum(grams[0].values()) + sum(grams[1].values())
    return 0.0 if total == 0 else 2.0 * sum((grams[0] & grams[1]).values()) / total


def content(ids):
    return [int(t) for t in ids if t not in (0, EOS)]


@pytest.mark.parametrize("orders", [(1,), (1, 2), (2, 3)])
def test_rewards_are_rouge_n_f1_against_the_reference(orders):
    rng = np.random.default_rng(len(orders) + orders[0])
    B, K, L, S = 3, 5, 9, 7
    # A small alphabet, so that n-grams repeat and the clipping matters.
    samples = rng.integers(4, 8, (B, K, L)).astype("int32")
    lengths = rng.integers(0, L + 1, (B, K)).astype("int32")
    for b, k in np.ndindex(B, K):
        samples[b, k, lengths[b, k]:] = 0
        if lengths[b, k] and rng.random() < 0.5:
            samples[b, k, lengths[b, k] - 1] = EOS
    reference = rng.integers(4, 8, (B, S)).astype("int32")
    reference[0, 4], reference[0, 5:] = EOS, 0  # EOS then padding
    reference[2, :] = 0  # no reference tokens: every F1 is 0
    got = numpy(rouge_rewards(samples, lengths, reference, eos_id=EOS, orders=orders))
    assert got.shape == (B, K) and got.dtype == np.float32
    for b, k in np.ndindex(B, K):
        candidate = content(samples[b, k, :lengths[b, k]])
        expected = np.mean([counter_f1(candidate, content(reference[b]), n) for n in orders])
        np.testing.assert_allclose(got[b, k], expected, atol=1e-6)
    assert (got[2] == 0).all()


@pytest.mark.jax_slow  # default-suite budget (docs/testing.md): the TF pass runs it, the slow set's JAX pass too
def test_rewards_of_samples_longer_than_the_reference_and_errors():
    samples = np.array([[[5, 6, 7, 5, 6, 7, 3, 0, 0, 0]]], "int32")
    got = numpy(rouge_rewards(samples, [[7]], np.array([[5, 6, 3]], "int32"), eos_id=EOS))
    # ROUGE-1: 2 · 2 / (6 + 2); ROUGE-2: 2 · 1 / (5 + 1).
    np.testing.assert_allclose(got, [[(0.5 + 1 / 3) / 2]], atol=1e-6)
    with pytest.raises(ValueError, match="at least one n-gram order"):
        rouge_rewards(samples, [[7]], np.array([[5, 6, 3]], "int32"), eos_id=EOS, orders=())


def test_leave_one_out_baseline():
    rng = np.random.default_rng(3)
    rewards = rng.uniform(size=(4, 6)).astype("float32")
    got = numpy(leave_one_out_advantages(rewards))
    for b, k in np.ndindex(rewards.shape):
        others = [rewards[b, j] for j in range(6) if j != k]
        np.testing.assert_allclose(got[b, k], rewards[b, k] - np.mean(others), atol=1e-6)
    # The advantages of one example sum to 0; equal rewards give none.
    np.testing.assert_allclose(got.sum(-1), 0.0, atol=1e-5)
    np.testing.assert_allclose(
        numpy(leave_one_out_advantages(np.full((2, 3), 0.4, "float32"))), 0.0, atol=1e-7)
    with pytest.raises(ValueError, match="at least 2 samples"):
        leave_one_out_advantages(np.ones((2, 1), "float32"))


def flat_inputs(seed=0, batch=2):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(4, V, (batch, 9)).astype("int32")
    tokens[1, 5:] = 0
    return {"tokens": tokens, "token_mask": tokens != 0}


def paragraph_inputs(seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(4, V, (2, 3, 5)).astype("int32")
    tokens[1, -1] = 0
    return {"tokens": tokens, "token_mask": tokens != 0,
            "paragraph_mask": (tokens != 0).any(-1)}


def built(model, inputs, length=3):
    batch = len(inputs["tokens"])
    model(dict(inputs, decoder_tokens=np.full((batch, length), 2, "int32")))
    return model


def flat_model(seed=0, **options):
    keras.utils.set_random_seed(seed)
    return FlatTransformer(vocabulary_size=V, hidden_dim=16, num_heads=2, intermediate_dim=32,
                           num_encoder_layers=1, num_decoder_layers=2, dropout=0.0, **options)


@pytest.mark.jax_slow  # 72 s under JAX (compiles whole searches): the slow set's JAX pass
@pytest.mark.parametrize("kind", ["flat", "flat_copy", "pht"])
@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_teacher_forced_log_probs_equal_the_search_log_probs(kind):
    """The cached, step-by-step path of the search and one teacher-forced
    pass must give every sample the same log P(y|x)."""
    if kind == "pht":
        keras.utils.set_random_seed(1)
        model = ParallelHierarchicalTransformer(
            vocabulary_size=V, hidden_dim=16, num_heads=2, intermediate_dim=32,
            num_encoder_layers=1, num_decoder_layers=2, dropout=0.0)
        inputs = paragraph_inputs()
    else:
        model = flat_model(pointer_generator=kind == "flat_copy")
        inputs = flat_inputs()
    built(model, inputs)
    # As the objective draws: padding and BOS blocked (a pad id inside a
    # sample would be masked as padding by teacher forcing). The first seed
    # whose samples include both ended and full-length ones (the weights,
    # and so the draws, differ between backends).
    for seed in range(16):
        out = sample_search(model, inputs, num_samples=4, max_length=7, seed=seed,
                            terms=[TokenBlocking([0, 2])])
        lengths = numpy(out["lengths"])
        if lengths.min() < 7 and lengths.max() == 7:
            break
    assert lengths.min() < 7 and lengths.max() == 7, lengths
    got = numpy(sequence_log_probs(model, inputs, out["sequences"], lengths, training=False))
    np.testing.assert_allclose(got, numpy(out["log_probs"]), rtol=1e-4, atol=1e-4)


@pytest.mark.jax_slow  # 45 s under JAX (compiles whole searches): the slow set's JAX pass
def test_the_loss_is_the_reinforce_estimate_from_its_parts():
    model = built(flat_model(), flat_inputs(batch=3))
    inputs = flat_inputs(batch=3)
    labels = np.array([[5, 6, 7, 8, EOS, 0], [9, 9, 10, EOS, 0, 0], [0] * 6], "int32")
    objective = ReinforceObjective(weight=0.7, num_samples=3, sampling=Sampling(seed=4))
    terms = objective.terms(model, inputs, labels, step=2, training=False)
    samples, lengths = numpy(terms["samples"]), numpy(terms["lengths"])
    assert samples.shape == (3, 3, 6)
    for b, k in np.ndindex(3, 3):  # no padding or BOS drawn (a random model would)
        assert not {0, 2} & set(samples[b, k, :lengths[b, k]].tolist())
    rewards = np.array([[np.mean([counter_f1(content(samples[b, k, :lengths[b, k]]),
                                             content(labels[b]), n) for n in (1, 2)])
                         for k in range(3)] for b in range(3)])
    np.testing.assert_allclose(numpy(terms["rewards"]), rewards, atol=1e-6)
    advantages = rewards - (rewards.sum(-1, keepdims=True) - rewards) / 2
    log_probs = numpy(sequence_log_probs(model, inputs, samples, lengths, training=False))
    weights = np.array([1.0, 1.0, 0.0])[:, None]  # the third has no reference
    expected = -(weights * advantages * log_probs).sum() / (3 * 3 * 6)
    np.testing.assert_allclose(numpy(terms["loss"]), expected, rtol=1e-5, atol=1e-7)
    # The step is mixed into the seed: the same step draws the same samples,
    # another step others.
    again = objective.sample_rewards(model, inputs, labels, step=2)[0]
    other = objective.sample_rewards(model, inputs, labels, step=3)[0]
    np.testing.assert_array_equal(numpy(again), samples)
    assert not np.array_equal(numpy(other), samples)


@pytest.mark.jax_slow  # 20 s under JAX (compiles whole searches): the slow set's JAX pass
@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_compute_loss_mixes_the_terms_while_training_only():
    inputs = flat_inputs()
    labels = np.array([[5, 6, 7, EOS, 0], [8, 9, EOS, 0, 0]], "int32")
    x = dict(inputs, decoder_tokens=np.concatenate([np.full((2, 1), 2), labels[:, :-1]], 1)
             .astype("int32"))
    weight = (labels != 0).astype("float32")
    model = built(flat_model(), inputs)
    model.compile(optimizer="adam", loss=LabelSmoothedCrossEntropy(0.1))
    y_pred = model(x)
    plain = numpy(model.compute_loss(x, labels, y_pred, weight, training=False))
    objective = ReinforceObjective(weight=0.25, num_samples=2)
    model.sequence_objective = objective
    # Evaluation keeps the cross-entropy (val_loss stays comparable).
    np.testing.assert_allclose(
        numpy(model.compute_loss(x, labels, y_pred, weight, training=False)), plain, rtol=1e-6)
    mixed = numpy(model.compute_loss(x, labels, y_pred, weight, training=True))
    # The draws of the first step: the optimizer's step 0 (under JAX, the
    # draw counter's first count, 0; the call above advanced it to 1).
    if keras.backend.backend() == "jax":
        assert int(numpy(_draw_stream(model))) == 1
    else:
        assert int(numpy(_draw_stream(model))) == 0
    rl = numpy(objective.terms(model, x, labels, weight, step=0)["loss"])
    np.testing.assert_allclose(mixed, 0.75 * plain + 0.25 * rl, rtol=1e-5, atol=1e-7)
    assert not np.isclose(mixed, plain)


@pytest.mark.jax_slow  # 44 s under JAX (compiles whole searches): the slow set's JAX pass
@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_each_training_step_draws_new_samples(tmp_path):
    """`fit` mixes a step count into the draws' seed, on either backend
    (JAX traces the step without the optimizer's variables, so there the
    model counts its own steps): two steps on the same batch with the
    weights frozen (learning rate 0) reward different samples, and a
    second model object repeats the first one's draws. The model then
    saves and reloads as a plain Summarizer (the counter is not a weight)."""
    inputs = flat_inputs(seed=4)
    labels = np.array([[5, 6, 7, 8, EOS, 0], [9, 10, 11, EOS, 0, 0]], "int32")
    x = dict(inputs, decoder_tokens=np.concatenate([np.full((2, 1), 2), labels[:, :-1]], 1)
             .astype("int32"))
    weight = (labels != 0).astype("float32")

    def rewards_of_two_steps():
        model = flat_model(seed=5)
        # The reward metric must exist before the build (as keras-hsum
        # train attaches it); the objective may come after.
        model.reward_tracker = keras.metrics.Mean(name="reward")
        built(model, inputs)
        model.sequence_objective = ReinforceObjective(weight=1.0, num_samples=8)
        model.compile(optimizer=keras.optimizers.SGD(0.0), loss=LabelSmoothedCrossEntropy(0.0))
        rewards = [model.train_on_batch(x, labels, sample_weight=weight,
                                        return_dict=True)["reward"] for _ in range(2)]
        return model, rewards

    model, (first, second) = rewards_of_two_steps()
    # 16 samples of up to 6 tokens from a random model over 40 ids: equal
    # mean rewards from different draws would be a coincidence.
    assert first != second, (first, second)
    np.testing.assert_allclose(rewards_of_two_steps()[1], [first, second], rtol=1e-6)
    path = str(tmp_path / "model.keras")
    model.save(path)
    reloaded = keras.models.load_model(path, compile=False)
    assert reloaded.sequence_objective is None
    assert len(reloaded.weights) == len(model.weights)
    for saved, loaded in zip(model.weights, reloaded.weights):
        np.testing.assert_array_equal(numpy(saved), numpy(loaded))


@pytest.mark.slow  # 20 s under TensorFlow on CI's 2 cores: the slow set
def test_training_on_the_reward_alone_raises_the_expected_reward():
    """REINFORCE is a gradient estimate of the expected reward: steps on the
    objective alone (weight 1, no cross-entropy) must raise the mean reward
    of fresh samples, here from a random model's near 0 to well above."""
    inputs = flat_inputs(seed=2)
    labels = np.array([[5, 6, 7, 8, EOS, 0], [9, 10, 11, EOS, 0, 0]], "int32")
    x = dict(inputs, decoder_tokens=np.concatenate([np.full((2, 1), 2), labels[:, :-1]], 1)
             .astype("int32"))
    model = built(flat_model(seed=3), inputs)
    model.sequence_objective = ReinforceObjective(weight=1.0, num_samples=8,
                                                  sampling=Sampling(seed=1))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=LabelSmoothedCrossEntropy(0.0))
    evaluation = ReinforceObjective(num_samples=64, sampling=Sampling(seed=99))

    def mean_reward():
        return float(numpy(evaluation.sample_rewards(model, x, labels)[2]).mean())

    before = mean_reward()
    model.fit(x, labels, sample_weight=(labels != 0).astype("float32"), epochs=60,
              batch_size=2, verbose=0)
    after = mean_reward()
    assert before < 0.15, before
    assert after > before + 0.3, (before, after)


def test_objective_settings_are_checked():
    with pytest.raises(ValueError, match=r"weight in \(0, 1\] \(received 0\)"):
        ReinforceObjective(weight=0)
    with pytest.raises(ValueError, match=r"num_samples an integer >= 2 \(received 1\)"):
        ReinforceObjective(num_samples=1)
    with pytest.raises(ValueError, match="orders a non-empty tuple"):
        ReinforceObjective(orders=())
    with pytest.raises(ValueError, match=r"temperature > 0"):
        ReinforceObjective(sampling={"temperature": 0.0})
    with pytest.raises(ValueError, match="`sampling` a keras_hsum.decoding.Sampling"):
        ReinforceObjective(sampling=0.5)
    objective = ReinforceObjective(weight=0.5, orders=[1, 3], sampling=Sampling(top_k=5, seed=2))
    assert objective.orders == (1, 3)
    config = objective.get_config()
    assert config["sampling"] == {"temperature": 1.0, "top_k": 5, "top_p": 1.0,
                                  "epsilon": 0.0, "seed": 2}
    assert ReinforceObjective.from_config(config) == objective
