"""FlatTransformer: decoding contract, save/reload, memorisation on real data."""

import keras
import numpy as np
import pytest

from keras_hsum.models import FlatTransformer
from model_test_case import assert_beam_cache_shares_the_memory
from model_test_case import assert_copy_limits
from model_test_case import assert_save_reload
from model_test_case import assert_step_matches_call
from model_test_case import assert_step_matches_call_in_graph
from model_test_case import assert_token_shift_contract
from model_test_case import held_out_accuracy
from model_test_case import memorize
from model_test_case import random_flat_inputs
from model_test_case import real_batch
from model_test_case import seeded
from model_test_case import set_token_shift_kernel
from model_test_case import span_accuracy_by_shift
from model_test_case import to_numpy


def small_model(**overrides):
    options = dict(vocabulary_size=60, hidden_dim=16, num_heads=2, intermediate_dim=32,
                   num_encoder_layers=1, num_decoder_layers=2, dropout=0.0)
    options.update(overrides)
    return FlatTransformer(**options)


def random_inputs(seed=0, batch=2, source=9, target=6, vocabulary=60):
    return random_flat_inputs(seed, batch, source, target, vocabulary)


def test_step_equals_teacher_forcing():
    model = small_model()
    inputs = random_inputs()
    assert_step_matches_call(model, inputs)
    assert_step_matches_call_in_graph(model, inputs)


def test_beam_cache_shares_the_memory():
    """K = 3 hypotheses per example read one copy of the memory and of its
    keys/values; steps equal teacher forcing (eager, jit) and the repeated
    memory's steps. The cross-attention cache is one (key, value) pair of
    separate [B,M,H,Dh] arrays per decoder layer (a stacked [B,L,2,M,H,Dh]
    cache makes XLA copy each layer's keys and values out at every step)."""
    static = assert_beam_cache_shares_the_memory(small_model(), random_inputs(seed=5))
    caches = static["cross_caches"]
    assert isinstance(caches, tuple) and len(caches) == 2  # L = 2
    for cache in caches:
        assert isinstance(cache, tuple) and len(cache) == 2
        assert [tuple(a.shape) for a in cache] == [(2, 9, 2, 8)] * 2  # B, M, H, Dh


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_copy_beam_cache_shares_the_memory():
    assert_beam_cache_shares_the_memory(
        small_model(pointer_generator=True), random_inputs(seed=6),
        shared_keys=("memory", "cross_caches", "copy_keys"),
    )


def test_hierarchical_input_is_read_flat():
    model = small_model()
    inputs = random_inputs(source=12)
    nested = dict(inputs)
    nested["tokens"] = inputs["tokens"].reshape(2, 3, 4)
    nested["token_mask"] = inputs["token_mask"].reshape(2, 3, 4)
    np.testing.assert_allclose(np.asarray(model(nested)), np.asarray(model(inputs)), atol=1e-6)


def test_source_padding_does_not_change_outputs():
    model = small_model()
    inputs = random_inputs()
    padded = dict(inputs)
    padded["tokens"] = np.pad(inputs["tokens"], ((0, 0), (0, 5)))
    padded["token_mask"] = np.pad(inputs["token_mask"], ((0, 0), (0, 5)))
    np.testing.assert_allclose(np.asarray(model(padded)), np.asarray(model(inputs)), atol=1e-5)


def test_missing_decoder_tokens_is_a_clear_error():
    """Raised before Keras' automatic build, so no "unbuilt state"
    warnings precede it (unbuilt and built models alike)."""
    import warnings

    model = small_model()
    inputs = random_inputs()
    missing = {k: v for k, v in inputs.items() if k != "decoder_tokens"}
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(ValueError, match="needs `decoder_tokens` .* received keys"):
                model(missing)
        assert not caught, [str(w.message)[:200] for w in caught]
        model(inputs)  # builds it for the second round


def test_save_reload(tmp_path):
    model = small_model()
    inputs = random_inputs()
    model(inputs)
    assert_save_reload(model, inputs, tmp_path)


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_seeding_before_construction_fixes_the_initial_weights():
    """Keras draws each initializer's seed from Python's `random` when a layer
    is constructed, so `memorize` seeds before `build()`: the same seed gives
    the same weights whatever the random state left by earlier tests, and
    seeding after construction does not."""
    import random

    inputs = random_inputs()

    def weights(model):
        model(inputs)
        return [to_numpy(w) for w in model.weights]

    def seeded_after(state):
        random.seed(state)
        model = small_model()
        keras.utils.set_random_seed(0)
        return weights(model)

    def seeded_before(state):
        random.seed(state)
        return weights(seeded(small_model, 0))

    for a, b in zip(seeded_before(1), seeded_before(2)):
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, b) for a, b in zip(seeded_after(1), seeded_after(2)))
    assert any(not np.array_equal(a, b)
               for a, b in zip(seeded_before(1), weights(seeded(small_model, 1))))


@pytest.mark.slow  # 40 s under TensorFlow on CI's 2 cores: the slow set
@pytest.mark.tensorflow_only
def test_memorizes_eight_real_examples(vocabulary, real_examples):
    from keras_hsum.recipes import flat as recipe

    config = recipe.CONFIGS["tiny"].replace(max_source_length=128, max_target_length=32)
    inputs, labels, weights = real_batch(
        recipe, config, vocabulary, real_examples("qmsum_goldspan", "train"), 8)
    config = config.replace(dropout=0.0)
    accuracy = memorize(lambda: recipe.build_model(config, vocabulary.vocabulary_size),
                        inputs, labels, weights, epochs=150, batch_size=8)
    assert accuracy >= 0.95, accuracy


# ------------------------------------------------ pointer-generator copying


def _masked_ids_inputs():
    """Unique source ids; the last two positions of example 0 are masked out
    (ids kept), so copying them would be a masking bug."""
    inputs = random_inputs(seed=5)
    tokens = inputs["tokens"]
    tokens[0] = np.arange(10, 10 + tokens.shape[1])
    tokens[1, : tokens.shape[1] // 2] = np.arange(30, 30 + tokens.shape[1] // 2)
    inputs["token_mask"] = tokens != 0
    inputs["token_mask"][0, -2:] = False
    return inputs


def test_copy_step_equals_teacher_forcing():
    model = small_model(pointer_generator=True)
    inputs = _masked_ids_inputs()
    assert_step_matches_call(model, inputs)
    assert_step_matches_call_in_graph(model, inputs)


def test_copy_outputs_are_a_distribution_between_its_two_limits():
    inputs = _masked_ids_inputs()
    probs = assert_copy_limits(
        small_model(pointer_generator=True), small_model(), inputs, 60
    )
    assert probs[0][:, inputs["tokens"][0, -2:]].max() < 1e-9


def test_copy_save_reload(tmp_path):
    model = small_model(pointer_generator=True)
    inputs = random_inputs()
    model(inputs)
    restored = assert_save_reload(model, inputs, tmp_path)
    assert restored.get_config()["pointer_generator"] is True


def _held_out_accuracy(train, held_out, epochs, vocabulary, **options):
    """`held_out_accuracy` of a D=64 model built with `options`."""
    return held_out_accuracy(
        lambda: small_model(vocabulary_size=vocabulary, hidden_dim=64, num_heads=4,
                            intermediate_dim=128, **options),
        train, held_out, epochs)


@pytest.mark.slow  # 58 s under TensorFlow on CI's 2 cores: the slow set
def test_copy_learns_to_copy_unseen_sequences_and_the_plain_model_does_not():
    """The pointer-generator's purpose, as a learning property: trained 250
    steps to repeat random token sequences, the copy model repeats sequences
    it never saw almost perfectly, while the same model without copying
    (which must learn every id's output embedding) is far behind."""
    vocabulary, length = 500, 24

    def copy_task(count, seed):
        tokens = np.random.default_rng(seed).integers(4, vocabulary, (count, length))
        tokens = tokens.astype("int32")
        decoder = np.concatenate([np.full((count, 1), 2, "int32"), tokens[:, :-1]], axis=1)
        inputs = {"tokens": tokens, "token_mask": tokens != 0, "decoder_tokens": decoder}
        return inputs, tokens, np.ones(tokens.shape, "float32")

    train, held_out = copy_task(4000, seed=0), copy_task(128, seed=1)
    accuracy = {
        copy: _held_out_accuracy(train, held_out, 2, vocabulary, pointer_generator=copy)
        for copy in (True, False)
    }
    assert accuracy[True] >= 0.9, accuracy
    assert accuracy[False] <= accuracy[True] - 0.3, accuracy


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_token_shift_step_equals_teacher_forcing_and_save_reload(tmp_path):
    model = small_model(pointer_generator=True, token_shift=True)
    assert_token_shift_contract(model, _masked_ids_inputs(), tmp_path)


def test_token_shift_reads_the_previous_real_token():
    """The encoder input at position t is Emb(x_t)·√D + W Emb(x_(t-1))·√D
    + sinusoid(t), with a padded predecessor contributing nothing (numpy)."""
    model = small_model(pointer_generator=True, token_shift=True)
    inputs = _masked_ids_inputs()
    model(inputs)
    set_token_shift_kernel(model, seed=1)
    tokens, mask = inputs["tokens"], inputs["token_mask"]
    table = np.asarray(model.decoder.token_embedding.embeddings) * np.sqrt(model.hidden_dim)
    kernel = np.asarray(model.source_token_shift.kernel)
    embedded = table[tokens] * mask[..., None]
    expected = table[tokens].copy()
    expected[:, 1:] += embedded[:, :-1] @ kernel
    sinusoid = np.asarray(model.source_position_encoding(table[tokens].astype("float32")))
    actual = np.asarray(model._embed_source(tokens, mask))
    np.testing.assert_allclose(actual, expected + sinusoid, atol=1e-5)


@pytest.mark.slow  # 47 s under TensorFlow on CI's 2 cores: the slow set
def test_token_shift_lets_the_copy_model_follow_a_span_and_the_plain_copy_model_does_not():
    """What the shift is for, as a learning property: the target is a span
    cut from the source at a random offset, so after its first token the
    model must find where the token it just wrote sits in the source and copy
    the next one. With the shift the copy model learns this within 250 steps;
    without it, it stays near chance (it can only copy by position)."""
    accuracy = span_accuracy_by_shift(small_model, shape=(48,), span=12)
    assert accuracy[True] >= 0.9, accuracy
    assert accuracy[False] <= 0.3, accuracy
