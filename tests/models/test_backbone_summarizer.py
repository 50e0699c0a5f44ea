"""BackboneSummarizer on small random BART and T5 backbones saved as
keras-hub presets: the real `from_preset` path, the unchanged pretrained
computation (against the bare backbone and a numpy LM head), the decoding
contract, save/reload."""

import keras
import keras_hub
import numpy as np
import pytest

from keras_hsum.decoding import beam_search
from keras_hsum.decoding import greedy_search
from keras_hsum.models import BackboneSummarizer
from keras_hsum.models import FlatTransformer
from model_test_case import assert_beam_cache_step_matches_call
from model_test_case import assert_save_reload
from model_test_case import assert_step_matches_call
from model_test_case import assert_step_matches_call_in_graph
from model_test_case import random_flat_inputs
from model_test_case import real_positions
from model_test_case import to_numpy

VOCABULARY = 1000
MAX_LENGTH = 64

# keras-hub's T5TransformerLayer hands its attention mask to
# T5MultiHeadAttention as `mask=`, which Keras reads as a propagated mask the
# layer does not support (the backbone's own constructor warns the same).
pytestmark = pytest.mark.filterwarnings(
    "ignore:Layer '.*' \\(of type T5MultiHeadAttention\\) was passed an input with a mask"
)


def small_backbone(kind="bart", seed=0, dtype=None):
    """A random backbone: V 1000, 2 layers, D 32, 2 heads (BART: 64 learned
    positions; "t5_untied": T5 with an untied LM head and Dh 8 != D/H)."""
    keras.utils.set_random_seed(seed)
    sizes = dict(vocabulary_size=VOCABULARY, num_layers=2, num_heads=2, hidden_dim=32,
                 intermediate_dim=64, dtype=dtype)
    if kind == "bart":
        return keras_hub.models.BartBackbone(max_sequence_length=MAX_LENGTH, **sizes)
    if kind == "t5":
        return keras_hub.models.T5Backbone(**sizes)
    return keras_hub.models.T5Backbone(key_value_dim=8, tie_embedding_weights=False, **sizes)


def numpy_head(backbone, hidden):
    """numpy [B,S,V]: the LM head of keras-hub's Seq2SeqLM for `backbone`
    (BART: h E^T; T5 tied: D^-0.5 h E^T; T5 untied: h W_out)."""
    embedding = backbone.token_embedding
    if getattr(backbone, "tie_embedding_weights", True) is False:
        return hidden @ to_numpy(embedding.reverse_embeddings)
    if type(backbone).__name__ == "T5Backbone":
        hidden = hidden * backbone.hidden_dim ** -0.5
    return hidden @ to_numpy(embedding.embeddings).T


def random_inputs(seed=0, batch=2, source=9, target=6):
    return random_flat_inputs(seed, batch, source, target, VOCABULARY)


@pytest.fixture(scope="module")
def model(preset):
    """A BackboneSummarizer loaded from the preset through `from_preset`."""
    return BackboneSummarizer.from_preset(preset[1])


def backbone_outputs(backbone, inputs):
    """The bare backbone's functional call on the same features."""
    return backbone({
        "encoder_token_ids": inputs["tokens"],
        "encoder_padding_mask": inputs["token_mask"].astype("int32"),
        "decoder_token_ids": inputs["decoder_tokens"],
        "decoder_padding_mask": real_positions(inputs).astype("int32"),
    })


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_from_preset_loads_the_saved_weights(preset, model):
    saved, path = preset
    assert type(keras_hub.models.Backbone.from_preset(path)) is type(saved)
    inputs = random_inputs()
    expected = to_numpy(backbone_outputs(saved, inputs)["encoder_sequence_output"])
    memory = model.encode(inputs)
    np.testing.assert_array_equal(to_numpy(memory["memory"]), expected)
    np.testing.assert_array_equal(to_numpy(memory["memory_mask"]), inputs["token_mask"])
    # A random backbone of the same shape encodes differently: the equality
    # above is the preset's weights, not the architecture.
    fresh = BackboneSummarizer.from_preset(path, load_weights=False)
    assert np.abs(to_numpy(fresh.encode(inputs)["memory"]) - expected).max() > 1e-2


def test_outputs_are_the_bare_backbone_and_its_head(preset, model):
    """Teacher-forced logits == the saved backbone's decoder output through
    its LM head (BART's tied embedding, T5's scaled one), in numpy."""
    saved, _ = preset
    inputs = random_inputs(seed=1)
    hidden = to_numpy(backbone_outputs(saved, inputs)["decoder_sequence_output"])
    expected = numpy_head(saved, hidden)
    actual = to_numpy(model(inputs, training=False))
    assert actual.shape == (2, 6, VOCABULARY) and actual.dtype == np.float32
    real = real_positions(inputs)
    np.testing.assert_allclose(actual[real], expected[real], atol=1e-5, rtol=1e-5)


def compiled(function):
    """`function` jit-compiled by the backend (tf.function(jit_compile=True)
    on TensorFlow, jax.jit on JAX)."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.function(function, jit_compile=True)
    import jax

    return jax.jit(function)


def test_step_equals_teacher_forcing(model):
    inputs = random_inputs(seed=2)
    assert_step_matches_call(model, inputs, atol=1e-5)
    assert_step_matches_call_in_graph(model, inputs, atol=1e-5)  # XLA: below


def test_compiled_step_equals_teacher_forcing(model):
    """One jit-compiled `step` (the index a traced int32, so it compiles
    once) called position by position == teacher forcing, both backends."""
    inputs = random_inputs(seed=6)
    full = to_numpy(model(inputs, training=False))
    step = compiled(model.step)
    cache = model.initial_cache(model.encode(inputs), full.shape[1])
    tokens = keras.ops.convert_to_tensor(inputs["decoder_tokens"])
    stepped = []
    for index in range(full.shape[1]):
        logits, cache, aux = step(tokens[:, index], keras.ops.convert_to_tensor(index, "int32"),
                                  cache)
        stepped.append(to_numpy(logits))
    real = real_positions(inputs)
    np.testing.assert_allclose(np.stack(stepped, 1)[real], full[real], atol=1e-5, rtol=1e-5)
    # The flat source is one row: it holds all of the cross-attention.
    np.testing.assert_array_equal(to_numpy(aux["paragraph_attention"]), np.ones((2, 1)))


@pytest.mark.jax_slow  # 15-32 s under JAX (jax.jit of the unrolled step loop), loaded 2 cores
def test_beam_cache_step_equals_teacher_forcing(model):
    """K different targets per example, eager and jit-compiled (both backends)."""
    static = assert_beam_cache_step_matches_call(model, random_inputs(seed=3), beams=2)
    # One item per decoder layer (L = 2), projected once per example (B = 2
    # rows); BART's K hypotheses share that copy, T5's read it repeated
    # (B·K = 4). BART: a (key, value) pair of separate [B,N,H,Dh] arrays;
    # T5: one [B·K,2,N,H,Dh] array, as keras-hub's T5 attention reads it.
    caches = static["cross_caches"]
    assert isinstance(caches, tuple) and len(caches) == 2
    for cache in caches:
        if model.computation.shares_memory:
            assert isinstance(cache, tuple) and len(cache) == 2
            assert [tuple(a.shape) for a in cache] == [(2, 9, 2, 16)] * 2
        else:
            assert tuple(cache.shape) == (4, 2, 9, 2, 16)


def test_untied_t5_head_and_key_value_dim():
    """T5 with `tie_embedding_weights=False` and Dh = key_value_dim 8 != D/H:
    the untied head, and a step that equals teacher forcing."""
    backbone = small_backbone("t5_untied")
    model = BackboneSummarizer(backbone=backbone)
    inputs = random_inputs(seed=7)
    hidden = to_numpy(backbone_outputs(backbone, inputs)["decoder_sequence_output"])
    real = real_positions(inputs)
    np.testing.assert_allclose(to_numpy(model(inputs))[real],
                               numpy_head(backbone, hidden)[real], atol=1e-5, rtol=1e-5)
    assert model.head_dim == 8
    assert_step_matches_call(model, inputs, atol=1e-5)


def _sequence_log_probs(model, inputs, result):
    """numpy [B,K]: log P(y|x) of each returned hypothesis, by teacher forcing."""
    sequences = to_numpy(result["sequences"])
    lengths = to_numpy(result["lengths"])
    batch, beams, length = sequences.shape
    targets = sequences.reshape(batch * beams, length)
    decoder = np.concatenate(
        [np.full((batch * beams, 1), model.bos_id, "int32"), targets[:, :-1]], axis=1
    )
    tiled = {key: np.repeat(inputs[key], beams, axis=0) for key in ("tokens", "token_mask")}
    tiled["decoder_tokens"] = decoder
    logits = to_numpy(model(tiled, training=False)).astype("float64")
    log_probs = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(
        -1, keepdims=True)) - logits.max(-1, keepdims=True)
    picked = np.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
    valid = np.arange(length)[None, :] < lengths.reshape(-1)[:, None]
    return (picked * valid).sum(-1).reshape(batch, beams)


@pytest.mark.jax_slow  # 19 s under JAX (compiles whole searches) on a loaded 2-core machine
def test_beam_search_runs_the_backbone(model):
    """beam_search drives it unchanged: [B,K,L] sequences of vocabulary ids,
    best first, whose scores (no score terms) are their log-probabilities
    under the teacher-forced model; greedy's first token is the argmax."""
    inputs = random_inputs(seed=4)
    source = {key: inputs[key] for key in ("tokens", "token_mask")}
    result = beam_search(model, source, beam_size=3, max_length=5)
    sequences, scores = to_numpy(result["sequences"]), to_numpy(result["scores"])
    assert sequences.shape == (2, 3, 5) and scores.shape == (2, 3)
    assert sequences.min() >= 0 and sequences.max() < VOCABULARY
    assert np.all(np.isfinite(scores)) and np.all(np.diff(scores, axis=1) <= 1e-6)
    assert to_numpy(result["aux"]["paragraph_attention"]).shape == (2, 3, 5, 1)
    np.testing.assert_allclose(
        scores, _sequence_log_probs(model, inputs, result), atol=1e-3, rtol=1e-5
    )
    greedy = greedy_search(model, source, max_length=3)
    # Two decoder positions (BOS, any): one alone makes Keras warn about a
    # softmax over a single key; position 0 does not see the second.
    start = np.array([[model.bos_id, 4]] * 2, "int32")
    first = to_numpy(model(dict(source, decoder_tokens=start)))
    np.testing.assert_array_equal(to_numpy(greedy["sequences"])[:, 0, 0], first[:, 0].argmax(-1))


def test_save_reload_and_config_round_trip(model, tmp_path):
    inputs = random_inputs(seed=5)
    restored = assert_save_reload(model, inputs, tmp_path, atol=0.0)
    assert type(restored.backbone) is type(model.backbone)
    assert (restored.pad_id, restored.bos_id, restored.eos_id) == (0, 2, 3)
    config = model.get_config()
    rebuilt = BackboneSummarizer.from_config(config)
    assert rebuilt.get_config() == config
    rebuilt.set_weights(model.get_weights())
    np.testing.assert_array_equal(to_numpy(rebuilt(inputs)), to_numpy(model(inputs)))


def test_special_ids_and_backbone_object(preset):
    model = BackboneSummarizer(backbone=preset[0], pad_id=1, bos_id=2, eos_id=2, name="bart")
    config = model.get_config()
    assert (config["pad_id"], config["bos_id"], config["eos_id"]) == (1, 2, 2)
    assert config["backbone"]["class_name"] == type(preset[0]).__name__
    assert model.built and model.vocabulary_size == VOCABULARY


def test_clear_errors(model):
    with pytest.raises(ValueError, match="must be one of keras_hub.models.BartBackbone or T5"):
        BackboneSummarizer(backbone=FlatTransformer(vocabulary_size=10, hidden_dim=8,
                                                    num_heads=2, intermediate_dim=8))
    too_long = random_inputs(source=MAX_LENGTH + 1)
    if model.backbone_class != "BartBackbone":  # T5: relative positions, no limit
        assert model.max_sequence_length is None
        return
    with pytest.raises(ValueError, match="more than the backbone's max_sequence_length 64"):
        model(too_long)


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_fit_updates_the_pretrained_weights():
    """One `fit` step with keras_hsum's loss trains the backbone's weights
    (the model holds no weights of its own)."""
    from keras_hsum.models import LabelSmoothedCrossEntropy

    model = BackboneSummarizer(backbone=small_backbone("bart", seed=1))
    assert len(model.trainable_weights) == len(model.backbone.trainable_weights) > 0
    inputs = random_inputs(seed=8)
    labels = np.concatenate([inputs["decoder_tokens"][:, 1:], np.zeros((2, 1), "int32")], 1)
    before = to_numpy(model.backbone.token_embedding.embeddings)
    # TensorFlow: a plain tf.function (XLA's compile time is most of the
    # test; the compiled step is tested above); JAX: jax.jit, its default.
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=LabelSmoothedCrossEntropy(0.1),
                  jit_compile=keras.backend.backend() == "jax")
    history = model.fit(inputs, labels, sample_weight=labels != 0, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    assert np.abs(to_numpy(model.backbone.token_embedding.embeddings) - before).max() > 0


@pytest.mark.jax_slow  # 11 s each under JAX (the eager bfloat16 step loop) on the loaded machine
@pytest.mark.parametrize("kind", ["bart", "t5"])
def test_mixed_precision(kind):
    """A mixed_bfloat16 backbone: bfloat16 states and caches, float32 logits,
    and a step that equals teacher forcing within bfloat16's precision."""
    model = BackboneSummarizer(backbone=small_backbone(kind, dtype="mixed_bfloat16"))
    inputs = random_inputs(seed=9)
    assert keras.backend.standardize_dtype(model.encode(inputs)["memory"].dtype) == "bfloat16"
    assert keras.backend.standardize_dtype(model(inputs).dtype) == "float32"
    assert_step_matches_call(model, inputs, atol=5e-2)


def test_source_padding(model):
    """Padding columns appended to the source change no output, and an
    example whose source is all padding gives finite logits (no NaN)."""
    inputs = random_inputs(seed=10)
    padded = dict(inputs)
    padded["tokens"] = np.pad(inputs["tokens"], ((0, 0), (0, 5)))
    padded["token_mask"] = np.pad(inputs["token_mask"], ((0, 0), (0, 5)))
    np.testing.assert_allclose(to_numpy(model(padded)), to_numpy(model(inputs)), atol=1e-5)
    empty = dict(inputs)
    empty["tokens"] = inputs["tokens"].copy()
    empty["tokens"][1] = 0
    empty["token_mask"] = empty["tokens"] != 0
    logits = to_numpy(model(empty))
    assert np.all(np.isfinite(logits))
    np.testing.assert_allclose(logits[0], to_numpy(model(inputs))[0], atol=1e-5)
