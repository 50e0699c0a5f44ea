"""beam_search / greedy_search on real (small, random) summarizers.

References: tf-models' `sequence_beam_search` driven by the same step (TF
only), an eager argmax loop over `model.step`, and structural properties of
the outputs (shapes, EOS, padding, aux).
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_hsum.decoding import AttentionAlignment
from keras_hsum.decoding import LengthNormalization
from keras_hsum.decoding import MaxLength
from keras_hsum.decoding import NgramBlocking
from keras_hsum.decoding import beam_search
from keras_hsum.decoding import greedy_search
from keras_hsum.decoding import search
from keras_hsum.models import DiscourseSummarizer
from keras_hsum.models import FlatTransformer
from keras_hsum.models import HierarchicalTransformer
from keras_hsum.models import ParallelHierarchicalTransformer
from keras_hsum.models.seal import SEAL

V = 40
EOS = 3


def numpy(x):
    return np.asarray(ops.convert_to_numpy(x))


def paragraph_inputs(seed=0, batch=2, paragraphs=4, length=5):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(4, V, (batch, paragraphs, length)).astype("int32")
    tokens[1, -1] = 0  # a padded paragraph
    tokens[0, 1, 3:] = 0
    return {"tokens": tokens, "token_mask": tokens != 0,
            "paragraph_mask": (tokens != 0).any(-1)}


def built(model, inputs):
    """Models are built by a teacher-forced call (as after training)."""
    model(dict(inputs, decoder_tokens=np.full((len(inputs["tokens"]), 3), 2, "int32")))
    return model


def flat_model(seed=0):
    keras.utils.set_random_seed(seed)
    return FlatTransformer(vocabulary_size=V, hidden_dim=16, num_heads=2, intermediate_dim=32,
                           num_encoder_layers=1, num_decoder_layers=2, dropout=0.0)


def flat_inputs(seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(4, V, (2, 9)).astype("int32")
    tokens[1, 5:] = 0
    return {"tokens": tokens, "token_mask": tokens != 0}


def pht_model():
    keras.utils.set_random_seed(1)
    return ParallelHierarchicalTransformer(
        vocabulary_size=V, hidden_dim=16, num_heads=2, intermediate_dim=32,
        num_encoder_layers=1, num_decoder_layers=2, dropout=0.0)


def assert_well_formed(out, batch, beams, length, max_tokens=None):
    seqs, lengths = numpy(out["sequences"]), numpy(out["lengths"])
    scores = numpy(out["scores"])
    assert seqs.shape == (batch, beams, length) and seqs.dtype == np.int32
    assert lengths.shape == scores.shape == numpy(out["log_probs"]).shape == (batch, beams)
    assert scores.dtype == np.float32
    assert (np.diff(scores, axis=1) <= 1e-6).all()  # best first
    for b in range(batch):
        for k in range(beams):
            n = int(lengths[b, k])
            assert 1 <= n <= (max_tokens or length)
            assert (seqs[b, k, n:] == 0).all()
            assert EOS not in seqs[b, k, : n - 1]
            if n < length:
                assert seqs[b, k, n - 1] == EOS
            for name, value in out["aux"].items():
                value = numpy(value)
                assert value.shape[:3] == (batch, beams, length), name
                assert (value[b, k, n:] == 0).all(), name


def tiled_step(model, memory, beam_size, max_length, eos_bias=0.0):
    """(step_fn, state) for `search`, with an optional EOS bias growing by
    `eos_bias` per position (to make hypotheses end)."""
    tiled = keras.tree.map_structure(lambda x: ops.repeat(x, beam_size, axis=0), memory)
    static, state = model.initial_cache(tiled, max_length)

    def step_fn(ids, index, state):
        logits, (_, state), aux = model.step(ids, index, (static, state))
        bonus = ops.cast(index, "float32") * eos_bias
        logits = logits + ops.one_hot(EOS, ops.shape(logits)[-1]) * bonus
        return logits, state, aux

    return step_fn, state


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_greedy_is_the_stepwise_argmax():
    model, inputs = flat_model(), flat_inputs()
    built(model, inputs)
    L = 7
    out = greedy_search(model, inputs, max_length=L)
    assert_well_formed(out, 2, 1, L)
    cache = model.initial_cache(model.encode(inputs), L)
    ids = np.full((2,), model.bos_id, "int32")
    expected, done = np.zeros((2, L), "int32"), np.zeros(2, bool)
    log_probs = np.zeros(2)
    for index in range(L):
        logits, cache, _ = model.step(ops.convert_to_tensor(ids), index, cache)
        logits = numpy(logits).astype("float64")
        step_log_probs = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) - logits.max(-1, keepdims=True)
        ids = logits.argmax(-1).astype("int32")
        log_probs += np.where(done, 0.0, step_log_probs[np.arange(2), ids])
        expected[:, index] = np.where(done, 0, ids)
        done |= ids == EOS
    np.testing.assert_array_equal(numpy(out["sequences"])[:, 0], expected)
    np.testing.assert_allclose(numpy(out["log_probs"])[:, 0], log_probs, rtol=1e-4, atol=1e-4)


@pytest.mark.tensorflow_only
# default-suite budget (docs/testing.md): alphas 0 and 1 run in the slow set
@pytest.mark.parametrize("alpha", [
    pytest.param(0.0, marks=pytest.mark.slow), 0.6, pytest.param(1.0, marks=pytest.mark.slow)])
def test_matches_tf_models_sequence_beam_search(alpha):
    import tensorflow as tf
    from official.nlp.modeling.ops import beam_search as tfm_beam_search

    model, inputs = flat_model(seed=3), flat_inputs(seed=3)
    built(model, inputs)
    K, L, bias = 4, 8, 0.8
    memory = model.encode(inputs)
    step_fn, state = tiled_step(model, memory, K, L, eos_bias=bias)
    ours = search(step_fn, state, 2, beam_size=K, max_length=L, bos_id=2, eos_id=EOS,
                  pad_id=0, terms=[LengthNormalization(alpha)])

    # tf-models tiles its (float) cache itself; the static memory, tiled
    # like ours, stays in the closure
    tiled = keras.tree.map_structure(lambda x: ops.repeat(x, K, axis=0), memory)
    static, _ = model.initial_cache(tiled, L)
    _, cache = model.initial_cache(memory, L)

    def symbols_to_logits(ids, index, cache):
        logits, (_, cache), _ = model.step(ids[:, -1], index, (static, cache))
        logits = logits + tf.one_hot(EOS, V) * tf.cast(index, tf.float32) * bias
        return logits, cache

    seqs, scores = tfm_beam_search.sequence_beam_search(
        symbols_to_logits, tf.fill([2], 2), cache, vocab_size=V, beam_size=K,
        alpha=alpha, max_decode_length=L, eos_id=EOS, padded_decode=False)
    theirs = numpy(seqs)[:, :, 1:]  # no BOS; shorter when it stopped early
    theirs = np.pad(theirs, ((0, 0), (0, 0), (0, L - theirs.shape[-1])))
    assert (theirs == EOS).any(-1).all()  # every tf-models beam finished: comparable
    np.testing.assert_array_equal(numpy(ours["sequences"]), theirs)
    np.testing.assert_allclose(numpy(ours["scores"]), numpy(scores), atol=1e-4)


@pytest.mark.tensorflow_only
@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_runs_under_tf_jit_compile():
    import tensorflow as tf

    model, inputs = pht_model(), paragraph_inputs()
    built(model, inputs)
    eta_hat = np.array([[0.4, 0.3, 0.2, 0.1], [0.5, 0.3, 0.2, 0.0]], "float32")

    def decode(inputs, eta_hat):
        terms = [LengthNormalization(), NgramBlocking(3), MaxLength(5),
                 AttentionAlignment(eta_hat, beta=0.8)]
        return beam_search(model, inputs, beam_size=3, max_length=6, terms=terms)

    eager = decode(inputs, eta_hat)
    compiled = tf.function(decode, jit_compile=True)(
        {k: tf.constant(v) for k, v in inputs.items()}, tf.constant(eta_hat))
    np.testing.assert_array_equal(numpy(compiled["sequences"]), numpy(eager["sequences"]))
    np.testing.assert_allclose(numpy(compiled["scores"]), numpy(eager["scores"]), atol=1e-4)
    assert_well_formed(compiled, 2, 3, 6, max_tokens=5)


def test_runs_under_jax_jit():
    if keras.backend.backend() != "jax":
        pytest.skip("the JAX pass runs this")
    import jax

    model, inputs = flat_model(), flat_inputs()
    built(model, inputs)
    decode = lambda inputs: beam_search(model, inputs, beam_size=3, max_length=6,
                                        terms=[LengthNormalization(), NgramBlocking(2)])
    eager = decode(inputs)
    compiled = jax.jit(decode)(inputs)
    np.testing.assert_array_equal(numpy(compiled["sequences"]), numpy(eager["sequences"]))


@pytest.mark.jax_slow  # default-suite budget (docs/testing.md): the TF pass runs it, the slow set's JAX pass too
def test_pht_decodes_with_alignment():
    model, inputs = pht_model(), paragraph_inputs()
    built(model, inputs)
    eta_hat = np.array([[0.4, 0.3, 0.2, 0.1], [0.5, 0.3, 0.2, 0.0]], "float32")
    out = beam_search(model, inputs, beam_size=3, max_length=6, min_length=1,
                      terms=[LengthNormalization(), MaxLength(4),
                             AttentionAlignment(eta_hat, beta=0.8)])
    assert_well_formed(out, 2, 3, 6, max_tokens=4)
    attention = numpy(out["aux"]["paragraph_attention"])
    assert attention.shape == (2, 3, 6, 4)
    lengths = numpy(out["lengths"])
    # summed over 2 decoder layers, each a distribution over real paragraphs
    np.testing.assert_allclose(attention[0, 0, : lengths[0, 0]].sum(-1), 2.0, atol=1e-4)
    assert (attention[1, :, :, 3] == 0).all()  # the padded paragraph


def test_hierarchical_transformer_decodes():
    keras.utils.set_random_seed(2)
    model = HierarchicalTransformer(vocabulary_size=V, hidden_dim=16, num_heads=2,
                                    intermediate_dim=32, layer_schedule="LG",
                                    num_decoder_layers=1, dropout=0.0)
    out = beam_search(built(model, paragraph_inputs()), paragraph_inputs(), beam_size=2, max_length=5,
                      terms=[MaxLength(np.array([3, 5], "int32"))])
    assert_well_formed(out, 2, 2, 5)
    assert (numpy(out["lengths"])[0] <= 3).all()


@pytest.mark.parametrize("family", ["flat", "ht"])
@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_beams_sharing_the_memory_search_as_beams_repeating_it(family):
    """`beam_search` on `beam_cache` (the K beams share one copy of each
    example's memory) returns the ids, lengths and aux of the search on the
    memory repeated K times (`Summarizer.beam_cache`, the reference), and
    scores equal to 1e-5, with trigram blocking and length normalisation."""
    from keras_hsum.models.summarizer import Summarizer

    if family == "flat":
        model, inputs = flat_model(seed=3), flat_inputs(seed=3)
    else:
        keras.utils.set_random_seed(3)
        model = HierarchicalTransformer(vocabulary_size=V, hidden_dim=16, num_heads=2,
                                        intermediate_dim=32, layer_schedule="LG",
                                        num_decoder_layers=2, dropout=0.0)
        inputs = paragraph_inputs(seed=3)
    built(model, inputs)
    terms = [LengthNormalization(0.6), NgramBlocking(3)]
    shared = beam_search(model, inputs, beam_size=4, max_length=8, terms=terms)
    model.beam_cache = lambda memory, length, beams: Summarizer.beam_cache(
        model, memory, length, beams)
    repeated = beam_search(model, inputs, beam_size=4, max_length=8, terms=terms)
    for key in ("sequences", "lengths"):
        np.testing.assert_array_equal(numpy(shared[key]), numpy(repeated[key]))
    for key in ("scores", "log_probs"):
        np.testing.assert_allclose(numpy(shared[key]), numpy(repeated[key]), atol=1e-5)
    np.testing.assert_allclose(numpy(shared["aux"]["paragraph_attention"]),
                               numpy(repeated["aux"]["paragraph_attention"]), atol=1e-5)


@pytest.mark.jax_slow  # 43 s under JAX (compiles whole searches): the slow set's JAX pass
@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_discourse_summarizer_decodes_over_extended_vocabulary():
    keras.utils.set_random_seed(3)
    model = DiscourseSummarizer(vocabulary_size=V, hidden_dim=8, embedding_dim=6, num_oov=3)
    out = beam_search(built(model, paragraph_inputs()), paragraph_inputs(), beam_size=3, max_length=5,
                      terms=[LengthNormalization(), MaxLength(4)])
    assert_well_formed(out, 2, 3, 5, max_tokens=4)
    assert numpy(out["sequences"]).max() < V + 3
    assert numpy(out["aux"]["paragraph_attention"]).shape == (2, 3, 5, 4)
    assert numpy(out["aux"]["p_gen"]).shape == (2, 3, 5)
    # Copying OOV words and the scores: the test below.


@pytest.mark.jax_slow  # 38 s under JAX (compiles whole searches): the slow set's JAX pass
def test_discourse_summarizer_copies_source_oovs_and_scores_them_as_teacher_forcing():
    """With `source_extended_ids`, a copy-leaning model decodes ids >= V (the
    source's OOV words), and every finished hypothesis' log-probability is
    what a teacher-forced call gives its tokens (extended ids included)."""
    keras.utils.set_random_seed(3)
    model = DiscourseSummarizer(vocabulary_size=V, hidden_dim=8, embedding_dim=6, num_oov=3)
    inputs = paragraph_inputs()
    extended = inputs["tokens"].copy()
    # OOV words (ids >= V) at many positions, so that copying them wins.
    extended[0, 0] = V
    extended[0, 2, :3] = V + 1
    extended[1, :2] = V + 2
    inputs["source_extended_ids"] = extended
    built(model, inputs)
    # p_gen ≈ 0: the final distribution is the copy distribution.
    gate = model.pointer_generator.context_gate
    gate.bias.assign(np.full(gate.bias.shape, -20.0, "float32"))
    out = beam_search(model, inputs, beam_size=3, max_length=5, terms=[MaxLength(4)])
    sequences, lengths = numpy(out["sequences"]), numpy(out["lengths"])
    log_probs = numpy(out["log_probs"])
    assert (sequences[0] >= V).any() and (sequences[1] >= V).any()
    for b in range(2):
        for k in range(3):
            n = lengths[b, k]
            targets = sequences[b, k, :n]
            decoder = np.concatenate([[2], targets[:-1]])[None].astype("int32")
            example = {name: value[b:b + 1] for name, value in inputs.items()}
            logits = numpy(model(dict(example, decoder_tokens=decoder)))[0].astype("float64")
            expected = (logits - np.log(np.exp(logits).sum(-1, keepdims=True)))[
                np.arange(n), targets].sum()
            np.testing.assert_allclose(log_probs[b, k], expected, atol=1e-4)


@pytest.mark.jax_slow  # 57 s under JAX (compiles whole searches): the slow set's JAX pass
def test_seal_reselects_inside_the_loop():
    keras.utils.set_random_seed(4)
    model = SEAL(vocabulary_size=V, hidden_dim=16, num_heads=2, intermediate_dim=32,
                 num_encoder_layers=1, num_decoder_layers=1, dropout=0.0,
                 num_scorer_layers=1, extract_length=4, segment_length=3)
    inputs = paragraph_inputs(paragraphs=5, length=4)
    built(model, inputs)
    L = 7
    out = beam_search(model, inputs, beam_size=2, max_length=L, min_length=L)
    assert_well_formed(out, 2, 2, L)
    selected = numpy(out["aux"]["selected_ids"])
    assert selected.shape[:3] == (2, 2, L)
    # within a segment (positions 0-2, 3-5, 6) the selection is constant
    for start, stop in [(0, 3), (3, 6)]:
        assert (selected[:, :, start:stop] == selected[:, :, start:start + 1]).all()
    # greedy == beam 0 of the eager step loop is covered for FlatTransformer;
    # here check the segment selection equals an eager re-run of `step`
    greedy = greedy_search(model, inputs, max_length=L, min_length=L)
    tokens = numpy(greedy["sequences"])[:, 0]
    cache = model.initial_cache(model.encode(inputs), L)
    ids = np.full((2,), model.bos_id, "int32")
    for index in range(L):
        _, cache, aux = model.step(ops.convert_to_tensor(ids), index, cache)
        np.testing.assert_array_equal(numpy(aux["selected_ids"]),
                                      numpy(greedy["aux"]["selected_ids"])[:, 0, index])
        ids = tokens[:, index]


@pytest.mark.jax_slow  # 87 s under JAX (compiles whole searches): the slow set's JAX pass
@pytest.mark.parametrize("family", ["pht", "discourse", "seal"])
@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_ensemble_of_copies_decodes_as_the_model(family):
    """A `SummarizerEnsemble` of one model three times carries each member's
    cache through the search (PHT's paragraph memory, the discourse model's
    LSTM state and extended vocabulary, SEAL's in-loop re-selection) and
    decodes exactly what the model alone decodes, aux included."""
    from keras_hsum.models import SummarizerEnsemble

    inputs = paragraph_inputs(paragraphs=5, length=4)
    if family == "pht":
        model = pht_model()
    elif family == "discourse":
        keras.utils.set_random_seed(3)
        model = DiscourseSummarizer(vocabulary_size=V, hidden_dim=8, embedding_dim=6, num_oov=3)
    else:
        keras.utils.set_random_seed(4)
        model = SEAL(vocabulary_size=V, hidden_dim=16, num_heads=2, intermediate_dim=32,
                     num_encoder_layers=1, num_decoder_layers=1, dropout=0.0,
                     num_scorer_layers=1, extract_length=4, segment_length=3)
    built(model, inputs)
    alone = beam_search(model, inputs, beam_size=2, max_length=6, min_length=6)
    out = beam_search(SummarizerEnsemble([model] * 3), inputs, beam_size=2, max_length=6,
                      min_length=6)
    np.testing.assert_array_equal(numpy(out["sequences"]), numpy(alone["sequences"]))
    np.testing.assert_allclose(numpy(out["scores"]), numpy(alone["scores"]), atol=1e-4)
    assert sorted(out["aux"]) == sorted(alone["aux"])
    for name in alone["aux"]:
        np.testing.assert_allclose(numpy(out["aux"][name]), numpy(alone["aux"][name]),
                                   atol=1e-5, err_msg=name)


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_bad_search_arguments_are_clear_errors():
    """Sizes must be positive ints (a float beam size is not rounded down),
    terms a list of ScoreTerms, and the model built; each mistake is a
    ValueError naming the argument before any tensor work."""
    from keras_hsum.decoding import sample_search

    features = flat_inputs()
    model = flat_model()
    with pytest.raises(ValueError, match="flat_transformer.* is not built.*teacher-forced"):
        beam_search(model, features, beam_size=2, max_length=3)
    model = built(model, features)
    cases = [
        (beam_search, dict(beam_size=0), "search: `beam_size` must be an int >= 1, received 0"),
        (beam_search, dict(beam_size=-1), "`beam_size`.*received -1"),
        (beam_search, dict(beam_size=2.7), "`beam_size`.*received 2.7"),
        (beam_search, dict(beam_size=True), "`beam_size`.*received True"),
        (beam_search, dict(max_length=0), "beam_search: `max_length`.*received 0"),
        (greedy_search, dict(max_length=-3), "greedy_search: `max_length`.*received -3"),
        (sample_search, dict(num_samples=0), "sample_search: `num_samples`.*received 0"),
        (beam_search, dict(terms=LengthNormalization()),
         r"received one LengthNormalization: pass \[LengthNormalization\(...\)\]"),
        (beam_search, dict(terms=[LengthNormalization(), "ngram"]), "item 1 is a str"),
        (greedy_search, dict(terms=3), "received int"),
    ]
    for function, arguments, message in cases:
        with pytest.raises(ValueError, match=message):
            function(model, features, **arguments)
    with pytest.raises(ValueError, match="search: `max_length`.*received 0"):
        search(lambda ids, index, state: (None, state, {}), {}, 2, max_length=0)
    # numpy ints are sizes too.
    out = beam_search(model, features, beam_size=np.int64(2), max_length=np.int32(3))
    assert_well_formed(out, 2, 2, 3)


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_terms_name_bad_settings_and_a_paragraph_count_of_another_batch():
    from keras_hsum.decoding import CoveragePenalty
    from keras_hsum.decoding import MinLength
    from keras_hsum.decoding import RecentTokenBlocking

    for make, message in [
        (lambda: RecentTokenBlocking(-1), "RecentTokenBlocking: `window` must be an int >= 1"),
        (lambda: RecentTokenBlocking(2, exceptions=[-3]), "`exceptions` must be an int >= 0"),
        (lambda: NgramBlocking(2.5), "NgramBlocking: `n` must be an int >= 1, received 2.5"),
        (lambda: MinLength(-1), "MinLength: `min_length` must be an int >= 0"),
        (lambda: LengthNormalization("x"), "alpha must be None or a number"),
        (lambda: AttentionAlignment(np.ones(4, "float32")), r"η̂ must be float \[B,P\]"),
    ]:
        with pytest.raises(ValueError, match=message):
            make()
    model, inputs = pht_model(), paragraph_inputs()
    built(model, inputs)
    eta_hat = np.full((2, 3), 1 / 3, "float32")  # P=3; the batch has P=4
    for term in (AttentionAlignment(eta_hat), CoveragePenalty(3)):
        with pytest.raises(ValueError, match=f"{type(term).__name__} is set for P=3 "
                                             "paragraphs, but the model's step aux "
                                             "`paragraph_attention` has P=4"):
            beam_search(model, inputs, beam_size=2, max_length=4, terms=[term])


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_terms_built_for_another_batch_or_vocabulary_are_refused():
    """A per-example term tensor of batch 1 would be broadcast over B=2 (every
    example decoded with the first one's η̂, mask or length), and blocking an
    id outside V would do nothing: the search names both before step 1."""
    from keras_hsum.decoding import CoveragePenalty
    from keras_hsum.decoding import TokenBlocking

    model, inputs = pht_model(), paragraph_inputs()
    built(model, inputs)
    eta_hat = np.full((2, 4), 0.25, "float32")
    mask = np.ones((2, 4), bool)
    for term, message in [
        (AttentionAlignment(eta_hat[:1]),
         r"AttentionAlignment: `eta_hat` must be float \[B,P\] for the search's B=2 examples, "
         r"received shape \(1, 4\)"),
        (AttentionAlignment(eta_hat, paragraph_mask=mask[:1]), "`paragraph_mask` must be bool"),
        (CoveragePenalty(4, paragraph_mask=mask[:1]),
         r"CoveragePenalty: `paragraph_mask`.*\(1, 4\)"),
        (MaxLength(np.array([3], "int32")), r"MaxLength: `max_length` must be an int or int \[B\]"),
        (MaxLength(np.full((2, 1), 3, "int32")), r"received shape \(2, 1\)"),
        (TokenBlocking([5, 999]), rf"ids \[999\] are not among the model's {V} token ids"),
    ]:
        with pytest.raises(ValueError, match=message):
            beam_search(model, inputs, beam_size=2, max_length=4, terms=[term])
    # The same terms built for this batch decode.
    out = beam_search(model, inputs, beam_size=2, max_length=4, terms=[
        AttentionAlignment(eta_hat, paragraph_mask=mask), CoveragePenalty(4, paragraph_mask=mask),
        MaxLength(np.array([3, 4], "int32")), TokenBlocking([5])])
    assert_well_formed(out, 2, 2, 4)
    assert not np.any(numpy(out["sequences"]) == 5)


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_an_eos_outside_the_vocabulary_and_a_result_without_lengths_are_named():
    from keras_hsum.decoding import mbr_rerank

    features = flat_inputs()
    model = built(flat_model(), features)
    with pytest.raises(ValueError, match=f"`eos_id` 999 is not one of the model's {V} token"):
        greedy_search(model, features, max_length=3, eos_id=999)
    out = beam_search(model, features, beam_size=2, max_length=3)
    with pytest.raises(ValueError, match=r"missing \['lengths'\]"):
        mbr_rerank({k: v for k, v in out.items() if k != "lengths"}, eos_id=model.eos_id)
