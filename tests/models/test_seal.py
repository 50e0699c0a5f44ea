"""SEAL-paper models: ExtractiveAbstractive, SEAL, CompressiveAbstractive.

References used here, independent of the code under test: a brute-force
Python gate (sort, then take whole snippets while they fit), a numpy
transcription of the binary cross-entropy L_ext, and structural properties
(padding snippets, group locality of the compression).
"""

import numpy as np
import pytest
from keras import ops

from keras_hsum.models.compressive_abstractive import CompressiveAbstractive
from keras_hsum.models.seal import SEAL
from keras_hsum.models.seal import ExtractiveAbstractive
from model_test_case import assert_beam_cache_shares_the_memory
from model_test_case import assert_save_reload
from model_test_case import assert_beam_cache_step_matches_call
from model_test_case import assert_step_matches_call
from model_test_case import assert_step_matches_call_in_graph
from model_test_case import cache_rows
from model_test_case import memorize
from model_test_case import real_batch
from model_test_case import to_numpy

V = 50
SIZES = dict(vocabulary_size=V, hidden_dim=16, num_heads=2, intermediate_dim=32,
             num_encoder_layers=1, num_decoder_layers=1, dropout=0.0)


def ea(**overrides):
    options = dict(SIZES, num_scorer_layers=1, extract_length=9)
    options.update(overrides)
    return ExtractiveAbstractive(**options)


def seal(**overrides):
    options = dict(SIZES, num_scorer_layers=1, extract_length=4, segment_length=3)
    options.update(overrides)
    return SEAL(**options)


def ca(**overrides):
    options = dict(SIZES, snippets_per_group=2, compressed_length=3)
    options.update(overrides)
    return CompressiveAbstractive(**options)


def random_inputs(seed=0, batch=2, snippets=5, tokens=4, target=11):
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, V, (batch, snippets, tokens)).astype("int32")
    ids[1, 3:] = 0  # two padded snippets
    ids[0, 2, 2:] = 0  # a short snippet
    decoder = rng.integers(4, V, (batch, target)).astype("int32")
    decoder[:, 0] = 2
    decoder[1, target - 3:] = 0
    return {"tokens": ids, "token_mask": ids != 0,
            "paragraph_mask": (ids != 0).any(-1), "decoder_tokens": decoder}


def brute_force_gate(scores, lengths, limit):
    """Selected snippet ids: sort by (−score, index) over real snippets, keep
    whole snippets until the first one that does not fit."""
    order = sorted((i for i in range(len(scores)) if lengths[i] > 0),
                   key=lambda i: (-scores[i], i))
    selected, total = [], 0
    for i in order:
        if total + lengths[i] > limit:
            break
        selected.append(i)
        total += lengths[i]
    return selected


def numpy_bce(scores, labels, mask):
    """Mean of −[y log σ(s) + (1−y) log(1−σ(s))] over the masked entries."""
    mask = np.asarray(mask, bool)
    s, y = scores[mask].astype(np.float64), np.asarray(labels)[mask]
    p = 1.0 / (1.0 + np.exp(-s))
    return float(np.mean(-(y * np.log(p) + (1 - y) * np.log(1 - p))))


def check_selection(snippets, token_mask, scores, ids, memory, memory_mask, limit):
    """ids / memory of one row agree with the brute-force gate."""
    lengths = token_mask.sum(-1)
    expected = brute_force_gate(scores, lengths, limit)
    got = [int(i) for i in ids if i >= 0]
    assert got == expected, (got, expected, scores)
    rows = np.concatenate([snippets[i][token_mask[i]] for i in expected] or
                          [np.zeros((0, snippets.shape[-1]))])
    assert memory_mask.sum() == len(rows)
    np.testing.assert_allclose(memory[: len(rows)], rows, atol=1e-6)
    np.testing.assert_allclose(memory[len(rows):], 0.0)


# -- EA ----------------------------------------------------------------------


def test_ea_gate_selection_matches_brute_force():
    model = ea()
    memory = model.encode(random_inputs())
    memory = {k: to_numpy(v) for k, v in memory.items()}
    for b in range(2):
        check_selection(memory["snippets"][b], memory["token_mask"][b],
                        memory["scores"][b], memory["selected_ids"][b],
                        memory["memory"][b], memory["memory_mask"][b], 9)


def test_ea_extractive_loss_is_bce_on_real_snippets():
    model = ea(extractive_loss_weight=0.5)
    inputs = random_inputs()
    rng = np.random.default_rng(1)
    inputs["proxy_labels"] = rng.uniform(size=(2, 5)).astype("float32")
    model(inputs)
    scores = to_numpy(model.encode(inputs)["scores"])
    expected = 0.5 * numpy_bce(scores, inputs["proxy_labels"], inputs["paragraph_mask"])
    assert len(model.losses) == 1
    np.testing.assert_allclose(to_numpy(model.losses[0]), expected, rtol=1e-5)
    del inputs["proxy_labels"]
    model(inputs)
    assert not model.losses


def test_ea_step_equals_teacher_forcing():
    model = ea()
    inputs = random_inputs()
    _, _, auxes = assert_step_matches_call(model, inputs)
    selected = to_numpy(model.encode(inputs)["selected_ids"])
    np.testing.assert_array_equal(auxes[0]["selected_ids"], selected)
    indicator = np.zeros((2, 5))
    for b in range(2):
        indicator[b, selected[b][selected[b] >= 0]] = 1.0
    np.testing.assert_array_equal(auxes[0]["paragraph_attention"], indicator)
    assert_step_matches_call_in_graph(model, inputs)


# -- SEAL --------------------------------------------------------------------


def changing_seal():
    """A SEAL model whose selection changes across segments on random_inputs
    (so that step == teacher forcing covers real re-selection)."""
    inputs = random_inputs()
    for seed in range(10):
        import keras

        keras.utils.set_random_seed(seed)
        model = seal()
        memory = model.encode(inputs)
        _, _, _, ids = model.segment_selection(inputs["decoder_tokens"], memory)
        ids = to_numpy(ids)
        if any(len({tuple(ids[b, m]) for m in range(ids.shape[1])}) > 1 for b in range(2)):
            return model, inputs
    pytest.fail("no seed gives a selection that changes across segments")


def test_seal_segment_selection_matches_brute_force():
    model, inputs = changing_seal()
    memory = model.encode(inputs)
    scores, selected, selected_mask, ids = model.segment_selection(
        inputs["decoder_tokens"], memory)
    scores, ids = to_numpy(scores), to_numpy(ids)
    segments = scores.shape[1]
    assert segments == 4  # ceil(11 / 3)
    selected = to_numpy(selected).reshape(2, segments, 4, -1)
    selected_mask = to_numpy(selected_mask).reshape(2, segments, 4)
    snippets, token_mask = to_numpy(memory["snippets"]), to_numpy(memory["token_mask"])
    for b in range(2):
        for m in range(segments):
            check_selection(snippets[b], token_mask[b], scores[b, m], ids[b, m],
                            selected[b, m], selected_mask[b, m], 4)
    # Segment 0 sees no decoded segment: its scores equal EA-style scoring.
    plain = to_numpy(model.scorer(memory["snippets"], memory["token_mask"],
                                  memory["paragraph_mask"]))
    np.testing.assert_allclose(scores[:, 0], plain, atol=1e-5)


def test_seal_segment_m_is_scored_on_exactly_the_m_segments_before_it():
    """SEAL §3.2: the selection for decode segment m scores the snippets
    against the summary decoded so far, segments 0..m-1 (y[:m·L_seg]),
    each encoded on its own. Rebuilt here per m from the scorer and the
    encoder, so a selection that skips segment m-1 or reads segment m
    fails (the step == teacher-forcing tests share the model's convention)."""
    model, inputs = changing_seal()
    memory = model.encode(inputs)
    scores = to_numpy(model.segment_selection(inputs["decoder_tokens"], memory)[0])
    length = model.segment_length
    summary = inputs["decoder_tokens"][:, 1:]  # y: the decoder input after BOS
    assert scores.shape[1] == 4
    for m in range(scores.shape[1]):
        if m == 0:
            expected = model.scorer(memory["snippets"], memory["token_mask"],
                                    memory["paragraph_mask"])
        else:
            prefix = np.zeros((2, m * length), "int32")
            width = min(m * length, summary.shape[1])
            prefix[:, :width] = summary[:, :width]
            segments = prefix.reshape(2 * m, length)
            encoded = ops.reshape(model.encode_sequences(segments, segments != 0),
                                  (2, m, length, -1))
            expected = model.scorer(memory["snippets"], memory["token_mask"],
                                    memory["paragraph_mask"], decoded_segments=encoded,
                                    decoded_mask=(segments != 0).reshape(2, m, length))
        np.testing.assert_allclose(scores[:, m], to_numpy(expected), atol=1e-5,
                                   err_msg=f"segment {m}")


def test_seal_extractive_loss_uses_real_segments_only():
    model = seal()
    inputs = random_inputs()
    rng = np.random.default_rng(2)
    # 5 label rows: the model keeps the first M = 4.
    inputs["segment_labels"] = rng.uniform(size=(2, 5, 5)).astype("float32")
    model(inputs)
    scores = to_numpy(model.segment_selection(
        inputs["decoder_tokens"], model.encode(inputs))[0])
    # Row 1 has real decoder positions 0..7: segments starting at 0, 3, 6.
    real = np.array([[1, 1, 1, 1], [1, 1, 1, 0]], bool)
    mask = real[:, :, None] & inputs["paragraph_mask"][:, None, :]
    expected = numpy_bce(scores, inputs["segment_labels"][:, :4], mask)
    np.testing.assert_allclose(to_numpy(model.losses[0]), expected, rtol=1e-5)


def test_seal_extractive_loss_skips_a_last_segment_of_eos_only():
    """Labels are cut from the summary's tokens: a summary of exactly 2·L_seg
    tokens has 2 label rows, and the third segment, whose only target is
    EOS, must not be trained toward the zero-padded row."""
    model = seal()
    inputs = random_inputs()
    # Example 1: BOS + 6 summary tokens; its targets are y1..y6 and EOS.
    inputs["decoder_tokens"][1, 7:] = 0
    target_mask = np.zeros((2, 11), bool)
    target_mask[0] = True
    target_mask[1, :7] = True
    inputs["target_mask"] = target_mask
    rng = np.random.default_rng(3)
    inputs["segment_labels"] = rng.uniform(size=(2, 4, 5)).astype("float32")
    inputs["segment_labels"][1, 2:] = 0  # 6 tokens: 2 segments of 3 labelled
    model(inputs)
    scores = to_numpy(model.segment_selection(
        inputs["decoder_tokens"], model.encode(inputs))[0])
    labelled = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], bool)
    mask = labelled[:, :, None] & inputs["paragraph_mask"][:, None, :]
    expected = numpy_bce(scores, inputs["segment_labels"], mask)
    np.testing.assert_allclose(to_numpy(model.losses[0]), expected, rtol=1e-5)


def test_seal_step_equals_teacher_forcing_across_segments():
    model, inputs = changing_seal()
    _, _, auxes = assert_step_matches_call(model, inputs)
    _, _, _, ids = model.segment_selection(inputs["decoder_tokens"], model.encode(inputs))
    ids = to_numpy(ids)
    for index, aux in enumerate(auxes):  # the step's selection is segment index // 3
        np.testing.assert_array_equal(aux["selected_ids"], ids[:, index // 3])
    assert_step_matches_call_in_graph(model, inputs)


@pytest.mark.jax_slow  # 161 s under JAX (jax.jit of the unrolled step loop) on a loaded 2-core machine: the slow set's JAX pass
@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_seal_beam_steps_equal_teacher_forcing_across_segments_under_jit():
    """K = 2 different targets per example (so each hypothesis re-selects on
    its own summary at the boundaries 3, 6, 9), the selected snippets' cross
    keys/values carried in the state and recomputed at the boundaries by
    `ops.cond`: equal to teacher forcing on the repeated source, eager and
    jit-compiled (TF XLA / jax.jit)."""
    model, inputs = changing_seal()
    assert_beam_cache_step_matches_call(model, inputs, beams=2, atol=1e-5)


def test_seal_step_with_tensor_index_uses_cond():
    """`index` as a tensor (as inside a search loop) on both backends."""
    model, inputs = changing_seal()
    full = to_numpy(model(inputs))
    cache = model.initial_cache(model.encode(inputs), 11)
    tokens = ops.convert_to_tensor(inputs["decoder_tokens"])
    for index in range(7):  # causal: crosses the boundaries at 3 and 6
        logits, cache, _ = model.step(tokens[:, index],
                                      ops.convert_to_tensor(index, "int32"), cache)
        real = inputs["decoder_tokens"][:, index] != 0
        real[:] = real | (index == 0)
        np.testing.assert_allclose(to_numpy(logits)[real], full[real, index],
                                   atol=1e-4, rtol=1e-4)


# -- CA ----------------------------------------------------------------------


def test_ca_step_equals_teacher_forcing():
    model = ca()
    inputs = random_inputs()
    assert_step_matches_call(model, inputs)


@pytest.mark.parametrize("make", [ea, ca], ids=["ea", "ca"])
def test_beam_cache_shares_the_memory(make):
    """EA's selected snippets and CA's compressed memory: one copy per
    example for K = 3 hypotheses; steps (logits, aux) equal the repeated
    memory's and teacher forcing (eager, jit)."""
    assert_beam_cache_shares_the_memory(make(), random_inputs(seed=9, target=6))


def test_seal_beam_cache_repeats_the_memory():
    """SEAL's hypotheses re-select their own snippets: its beam cache keeps
    the per-hypothesis selection (B·K rows)."""
    model, inputs = changing_seal()
    model(inputs)
    memory = model.encode({k: v for k, v in inputs.items() if k != "decoder_tokens"})
    static, state = model.beam_cache(memory, 11, 2)
    assert cache_rows(state["cross_caches"]) == {4}
    assert tuple(static["snippets"].shape)[0] == 4


def test_ca_compressed_vectors_only_see_their_group():
    model = ca()
    inputs = random_inputs()
    memory = to_numpy(model.encode(inputs)["memory"])
    assert memory.shape == (2, 3 * 3, 16)  # ceil(5 / 2) groups × 3 vectors
    changed = dict(inputs)
    changed["tokens"] = inputs["tokens"].copy()
    changed["tokens"][0, 4, 0] = 5 if changed["tokens"][0, 4, 0] != 5 else 6  # group 2
    other = to_numpy(model.encode(changed)["memory"])
    np.testing.assert_allclose(other[:, :6], memory[:, :6], atol=1e-6)
    assert not np.allclose(other[0, 6:], memory[0, 6:])


def numpy_document_groups(tokens, paragraph_mask, document_ids, k, max_documents):
    """The paper's MDS grouping, by loops: each document's real snippets in
    order, in blocks of k; documents one after another; ids clipped to the
    last document. Returns tokens [B,G·k,T] (pad 0) and G."""
    batch, paragraphs, length = tokens.shape
    groups = min(paragraphs, -(-paragraphs // k) + max_documents - 1)
    out = np.zeros((batch, groups * k, length), tokens.dtype)
    for b in range(batch):
        documents = np.clip(document_ids[b], 0, max_documents - 1)
        first_group = 0
        for document in range(max_documents):
            members = [p for p in range(paragraphs)
                       if paragraph_mask[b, p] and documents[p] == document]
            for j, p in enumerate(members):
                out[b, (first_group + j // k) * k + j % k] = tokens[b, p]
            first_group += -(-len(members) // k)
    return out, groups


def document_inputs(seed):
    """random_inputs with 7 snippets of 3 documents (padding snippets
    anywhere, ids of padding rows arbitrary). Row 0's ids are sorted; row
    1's interleave and hold ids past the last document (3, 4) on real
    snippets, which a model with max_documents < 5 clips."""
    rng = np.random.default_rng(seed)
    inputs = random_inputs(seed=seed, snippets=7)
    inputs["tokens"][0, 1] = 0  # a padding snippet inside a document
    inputs["token_mask"] = inputs["tokens"] != 0
    inputs["paragraph_mask"] = inputs["token_mask"].any(-1)
    inputs["document_ids"] = np.stack([
        np.sort(rng.integers(0, 3, 7)),
        np.concatenate([rng.permutation([0, 1, 0, 3, 4]), [7, 7]]),  # 5, 6: padding
    ]).astype("int32")
    return inputs


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k,documents", [(2, 3), (3, 3), (2, 2), (1, 3)])
def test_ca_groups_by_document_as_the_paper_does(seed, k, documents):
    """With max_documents, the memory equals that of the same weights
    without it (plain blocks of k) fed the loop-built document groups."""
    grouped = ca(snippets_per_group=k, max_documents=documents)
    plain = ca(snippets_per_group=k)
    inputs = document_inputs(seed)
    grouped(inputs)
    plain(inputs)
    plain.set_weights(grouped.get_weights())
    memory = grouped.encode(inputs)
    tokens, groups = numpy_document_groups(
        inputs["tokens"], inputs["paragraph_mask"], inputs["document_ids"], k, documents)
    expected = plain.encode({"tokens": tokens})
    assert to_numpy(memory["memory"]).shape == (2, groups * 3, 16)
    np.testing.assert_array_equal(to_numpy(memory["memory_mask"]),
                                  to_numpy(expected["memory_mask"]))
    real = to_numpy(expected["memory_mask"])
    np.testing.assert_allclose(to_numpy(memory["memory"])[real],
                               to_numpy(expected["memory"])[real], atol=1e-5)
    np.testing.assert_array_equal(to_numpy(memory["paragraph_mask"]), inputs["paragraph_mask"])


def test_ca_groups_do_not_straddle_documents():
    """Snippets 0-2 are document 0 and 3-4 document 1, k = 2: the groups are
    {0,1}, {2}, {3,4} (and an empty fourth slot). A change in snippet 3
    reaches only the group {3,4}; in blocks of positions ({0,1}, {2,3},
    {4}) it would reach snippet 2's group instead."""
    model = ca(max_documents=2)
    inputs = random_inputs()
    inputs["document_ids"] = np.array([[0, 0, 0, 1, 1], [0, 0, 0, 1, 1]], "int32")
    encoded = model.encode(inputs)
    memory = to_numpy(encoded["memory"])
    vectors = 3
    assert memory.shape == (2, 4 * vectors, 16)  # min(5, ceil(5 / 2) + 2 - 1) groups
    np.testing.assert_array_equal(to_numpy(encoded["memory_mask"])[0],
                                  np.repeat([True, True, True, False], vectors))
    changed = dict(inputs, tokens=inputs["tokens"].copy())
    changed["tokens"][0, 3, 0] = 5 if changed["tokens"][0, 3, 0] != 5 else 6
    other = to_numpy(model.encode(changed)["memory"])
    np.testing.assert_allclose(other[0, :2 * vectors], memory[0, :2 * vectors], atol=1e-6)
    assert not np.allclose(other[0, 2 * vectors:3 * vectors], memory[0, 2 * vectors:3 * vectors])
    np.testing.assert_allclose(other[1], memory[1], atol=1e-6)


def test_ca_without_document_ids_groups_the_real_snippets_as_one_document():
    """max_documents set but no `document_ids`: one document, whose real
    snippets are grouped in order; with no padding snippet between real
    ones this is the plain grouping."""
    grouped, plain = ca(max_documents=3), ca()
    inputs = random_inputs()  # padding snippets only at the end
    expected = plain(inputs)
    grouped(inputs)
    grouped.set_weights(plain.get_weights())
    np.testing.assert_allclose(to_numpy(grouped(inputs)), to_numpy(expected), atol=1e-5)


def test_ca_with_documents_steps_as_teacher_forcing():
    model = ca(max_documents=3)
    inputs = document_inputs(0)
    assert_step_matches_call(model, inputs)
    assert_step_matches_call_in_graph(model, inputs)


@pytest.mark.tensorflow_only
def test_ca_groups_real_reviews_by_product_review(vocabulary, real_examples):
    """fewsum_amazon: 8 reviews per product, 24 snippets of 16 tokens (the
    first 4 or 5 reviews). The recipe's batches carry `document_ids`; the
    model's groups equal the loop-built ones, and differ from blocks of
    positions (reviews do not end on multiples of k)."""
    from keras_hsum.recipes import compressive_abstractive as recipe

    config = small_config(recipe, snippets_per_group=2, compressed_length=2,
                          max_documents=8, max_snippets=24)
    inputs, _, _ = real_batch(recipe, config, vocabulary,
                              real_examples("fewsum_amazon", "train"), 4)
    assert inputs["document_ids"].max(axis=1).min() >= 3  # several reviews each
    model = recipe.build_model(config, vocabulary.vocabulary_size)
    plain = recipe.build_model(config.replace(max_documents=None), vocabulary.vocabulary_size)
    model(inputs)
    plain(inputs)
    plain.set_weights(model.get_weights())
    tokens, groups = numpy_document_groups(
        inputs["tokens"], inputs["paragraph_mask"], inputs["document_ids"], 2, 8)
    positions = np.pad(inputs["tokens"], ((0, 0), (0, groups * 2 - 24), (0, 0)))
    assert not np.array_equal(tokens, positions)
    expected = plain.encode({"tokens": tokens})
    memory = model.encode(inputs)
    real = to_numpy(expected["memory_mask"])
    np.testing.assert_array_equal(to_numpy(memory["memory_mask"]), real)
    np.testing.assert_allclose(to_numpy(memory["memory"])[real],
                               to_numpy(expected["memory"])[real], atol=1e-4)


def test_ca_recipe_passes_max_documents():
    from keras_hsum.recipes import compressive_abstractive as recipe

    config = recipe.CONFIGS["tiny"].replace(max_documents=4)
    model = recipe.build_model(config, 50)
    assert model.max_documents == 4
    assert recipe.build_model(recipe.CONFIGS["tiny"], 50).max_documents is None


# -- shared ------------------------------------------------------------------


def ca_documents():
    return ca(max_documents=3)


MAKERS = pytest.mark.parametrize(
    "make", [ea, seal, ca, ca_documents], ids=["ea", "seal", "ca", "ca documents"])


@MAKERS
def test_padding_snippets_do_not_change_outputs(make):
    model = make()
    inputs = document_inputs(1) if make is ca_documents else random_inputs()
    padded = dict(inputs)
    for name in ("tokens", "token_mask"):
        padded[name] = np.pad(inputs[name], ((0, 0), (0, 2), (0, 0)))
    for name in ("paragraph_mask", "document_ids"):
        if name in inputs:
            padded[name] = np.pad(inputs[name], ((0, 0), (0, 2)))
    np.testing.assert_allclose(to_numpy(model(padded)), to_numpy(model(inputs)), atol=1e-5)


@MAKERS
def test_save_reload(make, tmp_path):
    model = make()
    inputs = document_inputs(1) if make is ca_documents else random_inputs()
    model(inputs)
    restored = assert_save_reload(model, inputs, tmp_path)
    assert restored.get_config() == model.get_config()


def test_clear_errors():
    inputs = random_inputs()
    for model in (ea(), seal(), ca()):
        missing = dict(inputs)
        del missing["decoder_tokens"]
        with pytest.raises(ValueError, match="decoder_tokens"):
            model(missing)
        flat = dict(inputs, tokens=inputs["tokens"].reshape(2, -1))
        del flat["token_mask"], flat["paragraph_mask"]
        with pytest.raises(ValueError, match=r"\[B,P,T\]"):
            model(flat)
    with pytest.raises(ValueError, match="segment_labels"):
        seal()(dict(inputs, segment_labels=np.zeros((2, 5), "float32")))
    with pytest.raises(ValueError, match="proxy_labels"):
        ea()(dict(inputs, proxy_labels=np.zeros((2, 7), "float32")))
    with pytest.raises(ValueError, match="extract_length"):
        ea(extract_length=0)
    with pytest.raises(ValueError, match="segment_length"):
        seal(segment_length=0)
    with pytest.raises(ValueError, match="compressed_length"):
        ca(compressed_length=0)


# -- memorisation on real data (qmsum_general, shrunk) -------------------------


def small_config(recipe, **changes):
    sizes = dict(hidden_dim=32, num_heads=2, intermediate_dim=64, num_encoder_layers=1,
                 num_decoder_layers=1, dropout=0.0, snippet_length=16, max_snippets=8,
                 max_target_length=17)
    sizes.update(changes)
    return recipe.CONFIGS["tiny"].replace(**sizes)


@pytest.mark.slow  # 76 s under TensorFlow on CI's 2 cores: the slow set
@pytest.mark.tensorflow_only
@pytest.mark.parametrize("name", ["seal", "extractive_abstractive", "compressive_abstractive"])
def test_memorizes_eight_real_examples(name, vocabulary, real_examples):
    import importlib

    recipe = importlib.import_module(f"keras_hsum.recipes.{name}")
    changes = {}
    if name != "compressive_abstractive":
        changes = dict(num_scorer_layers=1, extract_length=48)
    if name == "seal":
        changes["segment_length"] = 8
    if name == "compressive_abstractive":
        changes = dict(snippets_per_group=4, compressed_length=8)
    config = small_config(recipe, **changes)
    inputs, labels, weights = real_batch(
        recipe, config, vocabulary, real_examples("qmsum_general", "train"), 8)
    if name == "seal":
        assert inputs["segment_labels"].shape == (8, 2, 8)
    elif name == "extractive_abstractive":
        assert inputs["proxy_labels"].shape == (8, 8)
    accuracy = memorize(lambda: recipe.build_model(config, vocabulary.vocabulary_size),
                        inputs, labels, weights, epochs=100, batch_size=8)
    assert accuracy >= 0.95, accuracy
