import keras
import numpy as np
import pytest
from layer_test_case import input_gradients, run_layer_test, to_numpy

from keras_hsum.layers.snippet_gate import SnippetGate


def reference_gate(snippets, scores, token_mask, paragraph_mask, max_length, cut):
    """Brute-force SEAL gate: Python sort, then concatenate token by token.

    Returns memory [B,L,D], memory_mask [B,L], selected ids [B,P] (-1 padded)
    and source [B,L,2] = (snippet, token) of every memory row (-1 if empty).
    """
    batch, paragraphs, tokens, dim = snippets.shape
    memory = np.zeros((batch, max_length, dim), "float32")
    memory_mask = np.zeros((batch, max_length), bool)
    selected = -np.ones((batch, paragraphs), "int32")
    source = -np.ones((batch, max_length, 2), "int64")
    for b in range(batch):
        real = [
            [t for t in range(tokens) if token_mask[b, p, t] and paragraph_mask[b, p]]
            for p in range(paragraphs)
        ]
        candidates = [p for p in range(paragraphs) if real[p]]
        order = sorted(candidates, key=lambda p: (-float(scores[b, p]), p))
        used, count = 0, 0
        for p in order:
            take = real[p]
            if used + len(take) > max_length:
                if not cut:
                    break
                take = take[: max_length - used]
                if not take:
                    break
            for t in take:
                memory[b, used] = snippets[b, p, t]
                memory_mask[b, used] = True
                source[b, used] = (p, t)
                used += 1
            selected[b, count] = p
            count += 1
            if used >= max_length:
                break
    return memory, memory_mask, selected, source


def random_case(seed, batch=8, paragraphs=4, tokens=5, dim=3):
    rng = np.random.default_rng(seed)
    snippets = rng.normal(size=(batch, paragraphs, tokens, dim)).astype("float32")
    # Few distinct values: many ties.
    scores = rng.integers(0, 3, size=(batch, paragraphs)).astype("float32")
    # Holes anywhere in a snippet, some empty snippets.
    token_mask = rng.random((batch, paragraphs, tokens)) < 0.7
    token_mask[:, 0, :] = rng.random((batch, tokens)) < 0.9
    token_mask[0, 2, :] = False  # a fully padded snippet (token level)
    paragraph_mask = rng.random((batch, paragraphs)) < 0.8
    paragraph_mask[1, :] = False  # a fully padded batch row
    return {
        "snippets": snippets,
        "scores": scores,
        "token_mask": token_mask,
        "paragraph_mask": paragraph_mask.astype("int32"),
    }


def test_shared_layer_checks():
    # Shapes shared with the other tests, so JAX reuses its compiled ops.
    data = random_case(0)
    data["paragraph_mask"][1] = 1
    run_layer_test(
        SnippetGate,
        {"max_length": 7},
        data,
        expected_output_shape=((8, 7, 3), (8, 7), (8, 4)),
        expected_num_trainable_weights=0,
        # The gate has no weights, so there is nothing for `fit` to change;
        # test_gradients_reach_selected_tokens_only covers gradient flow.
        run_training_check=False,
        # Weightless: it selects snippets of whatever width D it is given.
        run_width_check=False,
    )


@pytest.mark.parametrize("cut", [False, True])
@pytest.mark.parametrize(
    "max_length",
    [
        1,  # smaller than every snippet
        3,  # smaller than the best snippet in many rows
        7,
        4 * 5 + 3,  # larger than everything
    ],
)
def test_selection_matches_brute_force(max_length, cut):
    for seed in range(3):
        data = random_case(seed)
        gate = SnippetGate(max_length=max_length, cut_last_snippet=cut)
        memory, memory_mask, selected = to_numpy(gate(**data))
        ref_memory, ref_mask, ref_selected, _ = reference_gate(
            data["snippets"],
            data["scores"],
            data["token_mask"],
            data["paragraph_mask"],
            max_length,
            cut,
        )
        np.testing.assert_array_equal(selected, ref_selected)
        np.testing.assert_array_equal(memory_mask, ref_mask)
        np.testing.assert_allclose(memory, ref_memory, atol=1e-6, rtol=0)
        assert memory_mask.sum(-1).max() <= max_length


def test_hand_worked_example():
    # Scores 0.5, 0.9, 0.5, 0.1 with lengths 2, 3, 1, 2 and L_ext = 6:
    # order 1, 0 (tie with 2 goes to the lower index), 2, 3 -> snippets
    # 1 (3 tokens) + 0 (2) + 2 (1) = 6 tokens; snippet 3 does not fit.
    snippets = np.arange(4 * 3 * 1, dtype="float32").reshape(1, 4, 3, 1) + 1
    token_mask = np.array([[[1, 0, 1], [1, 1, 1], [0, 1, 0], [1, 1, 0]]])
    scores = np.array([[0.5, 0.9, 0.5, 0.1]], "float32")
    memory, memory_mask, selected = to_numpy(
        SnippetGate(max_length=6)(snippets, scores, token_mask=token_mask)
    )
    np.testing.assert_array_equal(selected, [[1, 0, 2, -1]])
    np.testing.assert_array_equal(memory[0, :, 0], [4, 5, 6, 1, 3, 8])
    assert memory_mask.all()
    # L_ext = 5: snippet 2 (1 token) would fit but comes after snippet 0,
    # which fits too; L_ext = 4: snippet 0 (2 tokens) does not fit, the gate
    # stops there and does not skip ahead to snippet 2.
    memory, memory_mask, selected = to_numpy(
        SnippetGate(max_length=4)(snippets, scores, token_mask=token_mask)
    )
    np.testing.assert_array_equal(selected, [[1, -1, -1, -1]])
    np.testing.assert_array_equal(memory_mask, [[True, True, True, False]])
    np.testing.assert_array_equal(memory[0, :, 0], [4, 5, 6, 0])
    memory, memory_mask, selected = to_numpy(
        SnippetGate(max_length=4, cut_last_snippet=True)(
            snippets, scores, token_mask=token_mask
        )
    )
    np.testing.assert_array_equal(selected, [[1, 0, -1, -1]])
    np.testing.assert_array_equal(memory[0, :, 0], [4, 5, 6, 1])


@pytest.mark.parametrize("cut", [False, True])
def test_gradients_reach_selected_tokens_only(cut):
    data = random_case(5)
    max_length = 7
    gate = SnippetGate(max_length=max_length, cut_last_snippet=cut)
    grads = input_gradients(gate, data, ["snippets", "scores"])
    _, _, _, source = reference_gate(
        data["snippets"],
        data["scores"],
        data["token_mask"],
        data["paragraph_mask"],
        max_length,
        cut,
    )
    batch, _, _, dim = data["snippets"].shape
    # default loss = mean(memory²) -> d/dx = 2x / (B·L·D) on gathered tokens.
    expected = np.zeros_like(data["snippets"])
    for b in range(batch):
        for l in range(max_length):
            p, t = source[b, l]
            if p >= 0:
                expected[b, p, t] = 2 * data["snippets"][b, p, t] / (batch * max_length * dim)
    assert np.all(np.isfinite(grads["snippets"]))
    np.testing.assert_allclose(grads["snippets"], expected, atol=1e-7, rtol=1e-5)
    selected_tokens = np.any(expected != 0, axis=-1)
    assert selected_tokens.any() and not selected_tokens.all()
    assert np.all(np.any(grads["snippets"] != 0, axis=-1) == selected_tokens)
    # Sorting passes no gradient to the scores (SEAL trains them with L_ext).
    np.testing.assert_array_equal(grads["scores"], 0.0)


def test_padding_does_not_change_valid_outputs():
    data = random_case(7, paragraphs=3, tokens=4)
    gate = SnippetGate(max_length=7)
    expected = to_numpy(gate(**data))
    rng = np.random.default_rng(8)
    # One padded token per snippet and one padded snippet with the highest
    # score, all filled with garbage.
    snippets = np.concatenate(
        [data["snippets"], 1e3 * rng.normal(size=(8, 3, 1, 3))], axis=2
    )
    snippets = np.concatenate([snippets, 1e3 * np.ones((8, 1, 5, 3))], axis=1)
    token_mask = np.concatenate([data["token_mask"], np.zeros((8, 3, 1), bool)], 2)
    token_mask = np.concatenate([token_mask, np.ones((8, 1, 5), bool)], axis=1)
    padded = {
        "snippets": snippets.astype("float32"),
        "scores": np.concatenate([data["scores"], np.full((8, 1), 1e6, "float32")], 1),
        "token_mask": token_mask,
        "paragraph_mask": np.concatenate(
            [data["paragraph_mask"], np.zeros((8, 1), "int32")], axis=1
        ),
    }
    memory, memory_mask, selected = to_numpy(gate(**padded))
    np.testing.assert_array_equal(memory, expected[0])
    np.testing.assert_array_equal(memory_mask, expected[1])
    np.testing.assert_array_equal(selected[:, :3], expected[2])
    np.testing.assert_array_equal(selected[:, 3], -1)


def test_fully_padded_rows_give_empty_memory_and_no_nan():
    data = random_case(9)
    data["paragraph_mask"][:] = 0
    gate = SnippetGate(max_length=7)
    memory, memory_mask, selected = to_numpy(gate(**data))
    np.testing.assert_array_equal(memory, 0.0)
    assert not memory_mask.any()
    np.testing.assert_array_equal(selected, -1)
    grads = input_gradients(gate, data, ["snippets"])
    np.testing.assert_array_equal(grads["snippets"], 0.0)


def test_jit_compiled_model_matches_reference():
    data = random_case(11)
    inputs = {
        name: keras.Input(shape=value.shape[1:], dtype=str(value.dtype), name=name)
        for name, value in data.items()
    }
    model = keras.Model(inputs, SnippetGate(max_length=7)(**inputs))
    model.compile(jit_compile=True)
    memory, memory_mask, selected = to_numpy(model.predict_on_batch(data))
    ref = reference_gate(
        data["snippets"], data["scores"], data["token_mask"], data["paragraph_mask"], 7, False
    )
    np.testing.assert_array_equal(selected, ref[2])
    np.testing.assert_array_equal(memory_mask, ref[1])
    np.testing.assert_allclose(memory, ref[0], atol=1e-6, rtol=0)


def test_wrong_inputs_raise():
    gate = SnippetGate(max_length=4)
    snippets = np.zeros((2, 3, 4, 5), "float32")
    scores = np.zeros((2, 3), "float32")
    with pytest.raises(ValueError, match=r"snippets.*rank 4.*\[B,P,T,D\].*\(2, 3, 4\)"):
        gate(np.zeros((2, 3, 4), "float32"), scores)
    with pytest.raises(ValueError, match=r"scores.*\[B,P\].*\(2, 3\).*\(2, 4\)"):
        gate(snippets, np.zeros((2, 4), "float32"))
    with pytest.raises(ValueError, match=r"token_mask.*\[B,P,T\].*\(2, 3, 4\).*\(2, 3, 5\)"):
        gate(snippets, scores, token_mask=np.ones((2, 3, 5), bool))
    with pytest.raises(ValueError, match=r"paragraph_mask.*\[B,P\].*\(2, 3\).*\(2, 2\)"):
        gate(snippets, scores, paragraph_mask=np.ones((2, 2), bool))
    with pytest.raises(ValueError, match=r"paragraph_mask.*rank 2.*\(2, 3, 1\)"):
        gate(snippets, scores, paragraph_mask=np.ones((2, 3, 1), bool))
    with pytest.raises(ValueError,
                       match=r"SnippetGate: `max_length` must be an int >= 1 \(L_ext\), "
                             r"received 0"):
        SnippetGate(max_length=0)
