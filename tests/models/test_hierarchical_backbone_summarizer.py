"""HierarchicalBackboneSummarizer on small random BART and T5 backbones saved
as keras-hub presets: closed gates leave the pretrained computation exactly
(against keras-hub's own backbone), open gates change it, and the decoding
contract, jit and save/reload hold with the new layers active."""

import keras
import numpy as np
import pytest

from keras_hsum.decoding import beam_search
from keras_hsum.layers import ResidualGate
from keras_hsum.models import BackboneSummarizer
from keras_hsum.models import HierarchicalBackboneSummarizer
from model_test_case import assert_beam_cache_shares_the_memory
from model_test_case import assert_beam_cache_step_matches_call
from model_test_case import assert_save_reload
from model_test_case import assert_step_matches_call
from model_test_case import assert_step_matches_call_in_graph
from model_test_case import cache_rows
from model_test_case import to_numpy
from test_backbone_summarizer import VOCABULARY
from test_backbone_summarizer import numpy_head

pytestmark = [
    pytest.mark.filterwarnings(
        "ignore:Layer '.*' \\(of type T5MultiHeadAttention\\) was passed an input with a mask"
    ),
    # One paragraph: pooling and paragraph attention softmax over P = 1.
    pytest.mark.filterwarnings("ignore:You are using a softmax over axis"),
]


def paragraph_inputs(seed=0, batch=2, paragraphs=3, length=7, target=6):
    """Random paragraphs-family features: row 1's last paragraph is padding,
    row 0's second paragraph ends in padding (one paragraph: row 1's ends in
    padding); decoder_tokens [B,S] with row 1
    padded at its last 2 positions."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(4, VOCABULARY, size=(batch, paragraphs, length)).astype("int32")
    if paragraphs > 1:
        tokens[1, -1] = 0
        tokens[0, 1, length - 3:] = 0
    else:
        tokens[1, 0, length - 3:] = 0
    decoder = rng.integers(4, VOCABULARY, size=(batch, target)).astype("int32")
    decoder[:, 0] = 2
    decoder[1, -2:] = 0
    return {"tokens": tokens, "token_mask": tokens != 0, "decoder_tokens": decoder}


def hierarchical(path, **kwargs):
    keras.utils.set_random_seed(1)
    options = dict(num_global_layers=1, parallel_cross_attention=True, num_paragraph_layers=1)
    options.update(kwargs)
    return HierarchicalBackboneSummarizer.from_preset(path, **options)


@pytest.fixture(scope="module")
def opened(preset):
    """A model whose gates are open (tanh(α) ≈ 0.46 to 0.76): every new
    layer acts."""
    model = hierarchical(preset[1])
    for i, gate in enumerate(model.global_gates + model.paragraph_gates):
        gate.alpha.assign(0.5 + 0.25 * i)
    return model


def bare_encoder(backbone, tokens, mask):
    """keras-hub's functional backbone on each paragraph alone: its
    encoder_sequence_output [B,P,T,D]."""
    batch, paragraphs, length = tokens.shape
    out = backbone({
        "encoder_token_ids": tokens.reshape(-1, length),
        "encoder_padding_mask": mask.reshape(-1, length).astype("int32"),
        "decoder_token_ids": np.full((batch * paragraphs, 1), 2, "int32"),
        "decoder_padding_mask": np.ones((batch * paragraphs, 1), "int32"),
    })
    return to_numpy(out["encoder_sequence_output"]).reshape(batch, paragraphs, length, -1)


@pytest.mark.jax_slow  # default-suite budget (docs/testing.md): the TF pass runs it, the slow set's JAX pass too
def test_closed_gates_are_the_pretrained_model(preset):
    """At initialisation the global layers and the parallel cross attention
    change nothing: the encoder states are keras-hub's backbone on each
    paragraph, the logits BackboneSummarizer's (tested against the bare
    backbone) on their concatenation; with one paragraph, the bare backbone
    and its head on the same tokens."""
    saved, path = preset
    model = hierarchical(path)
    inputs = paragraph_inputs()
    memory = model.encode(inputs)
    expected_words = bare_encoder(saved, inputs["tokens"], inputs["token_mask"])
    real = inputs["token_mask"]
    np.testing.assert_allclose(to_numpy(memory["word_memory"])[real], expected_words[real],
                               atol=1e-5, rtol=1e-5)
    flat = BackboneSummarizer(saved)
    expected = to_numpy(flat.decode(inputs["decoder_tokens"], {
        "memory": expected_words.reshape(2, -1, saved.hidden_dim),
        "memory_mask": real.reshape(2, -1)}))
    np.testing.assert_allclose(to_numpy(model(inputs)), expected, atol=1e-5, rtol=1e-5)

    one = paragraph_inputs(seed=3, paragraphs=1)
    hidden = to_numpy(saved({
        "encoder_token_ids": one["tokens"][:, 0],
        "encoder_padding_mask": one["token_mask"][:, 0].astype("int32"),
        "decoder_token_ids": one["decoder_tokens"],
        "decoder_padding_mask": (one["decoder_tokens"] != 0).astype("int32"),
    })["decoder_sequence_output"])
    decoded = one["decoder_tokens"] != 0
    np.testing.assert_allclose(to_numpy(model(one))[decoded],
                               numpy_head(saved, hidden)[decoded], atol=1e-5, rtol=1e-5)


def test_open_gates_change_the_output(preset, opened):
    """Each gate matters: with every gate open the logits move away from the
    closed model's; closing the global gates alone brings the encoder
    states back to the backbone's."""
    closed = hierarchical(preset[1])
    inputs = paragraph_inputs(seed=1)
    gap = np.abs(to_numpy(opened(inputs)) - to_numpy(closed(inputs))).max()
    assert gap > 1e-3
    real = inputs["token_mask"]
    moved = to_numpy(opened.encode(inputs)["word_memory"])[real]
    kept = to_numpy(closed.encode(inputs)["word_memory"])[real]
    assert np.abs(moved - kept).max() > 1e-3


def test_residual_gate_is_the_interpolation():
    """numpy: x + tanh(α)(f − x) for a few α, and x exactly at α = 0."""
    rng = np.random.default_rng(0)
    x, f = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 3, 4))
    gate = ResidualGate()
    np.testing.assert_array_equal(to_numpy(gate(x.astype("float32"), f.astype("float32"))),
                                  x.astype("float32"))
    for alpha in (0.3, -1.2, 4.0):
        gate.alpha.assign(alpha)
        np.testing.assert_allclose(to_numpy(gate(x, f)), x + np.tanh(alpha) * (f - x),
                                   atol=1e-6)
    with pytest.raises(ValueError, match="`update` must have shape"):
        gate(x, f[:, :2])


def test_step_equals_teacher_forcing(opened):
    inputs = paragraph_inputs(seed=2)
    assert_step_matches_call(opened, inputs, atol=1e-5)
    assert_step_matches_call_in_graph(opened, inputs, atol=1e-5)


def test_bart_beams_share_the_memory_and_t5_beams_repeat_it(preset, opened):
    """With BART the K hypotheses read one copy of the memory and of the
    keys/values of its decoder's cross attention and of the parallel cross
    attention; keras-hub's T5 attention needs them repeated K times. Either
    way each eager step's logits and paragraph attention equal those on the
    memory repeated K times (teacher forcing under jit: the slow test below
    and test_backbone_summarizer)."""
    inputs = paragraph_inputs(seed=8)
    bart = type(preset[0]).__name__ == "BartBackbone"
    static = assert_beam_cache_shares_the_memory(
        opened, inputs, beams=3, teacher_forcing=False,
        shared_keys=("memory", "cross_caches", "word_memory") if bart else ())
    expected = 2 if bart else 6
    assert cache_rows(static["cross_caches"]) == {expected}
    assert tuple(static["paragraph_caches"][0]["word_key"].shape)[0] == expected


@pytest.mark.slow
def test_beam_cache_and_search(opened):
    assert_beam_cache_step_matches_call(opened, paragraph_inputs(seed=4), beams=2)
    result = beam_search(opened, {"tokens": paragraph_inputs(seed=5)["tokens"]},
                         beam_size=3, max_length=5)
    attention = to_numpy(result["aux"]["paragraph_attention"])
    # Summed over the 2 decoder layers: 2 per step over the real paragraphs,
    # nothing on row 1's padded paragraph.
    assert attention.shape[:2] == (2, 3) and attention.shape[-1] == 3
    np.testing.assert_allclose(attention[1, ..., 2], 0.0, atol=1e-6)


def test_paragraph_attention_sums_to_one(opened):
    inputs = paragraph_inputs(seed=6)
    attention = to_numpy(opened.paragraph_attention(inputs))
    assert attention.shape == (2, 2, 6, 3)
    np.testing.assert_allclose(attention.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(attention[1, ..., 2], 0.0, atol=1e-6)


def test_save_reload_keeps_the_new_layers(opened, tmp_path):
    restored = assert_save_reload(opened, paragraph_inputs(seed=7), tmp_path, atol=0.0)
    assert restored.num_global_layers == 1 and restored.parallel_cross_attention
    assert float(to_numpy(restored.paragraph_gates[1].alpha)) == pytest.approx(1.0)


def test_ht_only_and_clear_errors(preset):
    model = hierarchical(preset[1], parallel_cross_attention=False, num_paragraph_layers=0)
    inputs = paragraph_inputs(seed=8)
    assert_step_matches_call(model, inputs, atol=1e-5)
    assert model.pooling is None and not model.paragraph_cross_attentions
    with pytest.raises(ValueError, match="nothing hierarchical"):
        hierarchical(preset[1], num_global_layers=0, parallel_cross_attention=False,
                     num_paragraph_layers=0)
    with pytest.raises(ValueError, match="must be int \\[B,P,T\\]"):
        model({"tokens": inputs["tokens"][:, 0], "decoder_tokens": inputs["decoder_tokens"]})


def test_ht_only_steps_give_the_last_layers_cross_attention_per_paragraph(
    preset, monkeypatch
):
    """Without the parallel cross attention, a step's aux paragraph
    attention is the last pretrained decoder layer's cross-attention over
    the P·T word states, averaged over heads and summed per paragraph: it
    sums to 1 over the real paragraphs, is 0 on a padded one, and (BART)
    equals, position by position, the probabilities that keras-hub's own
    attention layer computes in a teacher-forced call."""
    model = hierarchical(preset[1], parallel_cross_attention=False, num_paragraph_layers=0)
    inputs = paragraph_inputs(seed=9)
    decoder_tokens = inputs["decoder_tokens"]
    cache = model.initial_cache(model.encode(inputs), max_length=decoder_tokens.shape[1])
    steps = []
    for t in range(decoder_tokens.shape[1]):
        _, cache, aux = model.step(decoder_tokens[:, t], t, cache)
        steps.append(to_numpy(aux["paragraph_attention"]))
    attention = np.stack(steps, axis=1)  # [B,S,P]
    np.testing.assert_allclose(attention.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(attention[1, :, 2], 0.0, atol=1e-6)  # row 1's padded paragraph
    assert attention[0].std() > 1e-4  # not uniform
    if type(preset[0]).__name__ != "BartBackbone":
        return
    layer = model.backbone.decoder_transformer_layers[-1]._cross_attention_layer
    original = layer._compute_attention
    recorded = []

    def recording(*args, **kwargs):
        kwargs["return_attention_scores"] = True
        output, scores = original(*args, **kwargs)
        recorded.append(to_numpy(scores))
        return output, scores

    monkeypatch.setattr(layer, "_compute_attention", recording)
    model(inputs)
    batch, paragraphs, length = inputs["tokens"].shape
    reference = recorded[-1].mean(axis=1)  # [B,S,P·T], heads averaged
    reference = reference.reshape(batch, -1, paragraphs, length).sum(-1)
    np.testing.assert_allclose(attention, reference, atol=1e-5)
