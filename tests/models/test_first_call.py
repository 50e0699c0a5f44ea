"""The first call of an unbuilt model with wrong inputs raises the model's own
error, without Keras' two "unbuilt state" warnings in front of it; a first
call that succeeds builds every child and re-issues the warnings it raised.

Reference: Keras' own behaviour, which the first test shows on a bare
`keras.Model` with the same failing check (both warnings, then the error).
"""

import re
import warnings

import keras
import numpy as np
import pytest

import test_attention_predictor as predictor_tests
import test_discourse_summarizer as discourse_tests
import test_hierarchical_transformer as ht_tests
import test_paragraph_ranker as ranker_tests
import test_parallel_hierarchical_transformer as pht_tests
import test_seal as seal_tests
import test_shte as shte_tests
from keras_hsum.models.first_call import call_without_unbuilt_warnings
from keras_hsum.models.summarizer import Summarizer

UNBUILT = ("unbuilt state", "`build()` was called")


def _flat_source(inputs):
    """Hierarchical inputs with `tokens` flattened to [B,P*T] and the
    paragraph-level masks removed: a wrong-rank source."""
    tokens = np.asarray(inputs["tokens"])
    wrong = dict(inputs, tokens=tokens.reshape(tokens.shape[0], -1))
    for name in ("token_mask", "paragraph_mask"):
        wrong.pop(name, None)
    return wrong


def _cases():
    def summarizer(module, factory):
        inputs = module.random_inputs()
        return factory, _flat_source(inputs), inputs

    yield "pht", (*summarizer(pht_tests, pht_tests.small_model), r"\[B,P,T\]")
    yield "ht", (*summarizer(ht_tests, ht_tests.small_model), r"\[B,P,T\]")
    yield "discourse", (*summarizer(discourse_tests, discourse_tests.small_model),
                        r"\[B,P,T\]")
    for name in ("ea", "seal", "ca"):
        yield name, (*summarizer(seal_tests, getattr(seal_tests, name)), r"\[B,P,T\]")
    seal_inputs = seal_tests.random_inputs()
    yield "seal labels", (seal_tests.seal, dict(
        seal_inputs, segment_labels=np.zeros((2, 5), "float32")), seal_inputs,
        "segment_labels")
    ranker_inputs = ranker_tests.random_inputs()
    yield "ranker", (ranker_tests.small_model,
                     dict(ranker_inputs, tokens=ranker_inputs["tokens"][:, 0], token_mask=None),
                     ranker_inputs, r"\[B,P,T\]")
    shte_inputs = shte_tests.random_inputs()
    yield "shte", (shte_tests.small_model,
                   {k: v for k, v in shte_inputs.items() if not k.startswith("summary")},
                   shte_inputs, "summary_tokens")
    predictor_inputs = predictor_tests.predictor_inputs()
    yield "predictor", (
        lambda: predictor_tests.AttentionPredictor(num_heads=2, intermediate_dim=8),
        dict(predictor_inputs,
             paragraph_embeddings=predictor_inputs["paragraph_embeddings"][:, 0]),
        predictor_inputs, r"\[B,P,D\]")


CASES = dict(_cases())
# One model of each class that wraps its first call (Summarizer,
# ParagraphRanker, SHTE, AttentionPredictor) is also built after the failed
# call and compared with a fresh one; the other summarizers share
# Summarizer's wrapper (two builds each would add a minute under JAX).
REBUILT = ("pht", "ranker", "shte", "predictor")


def _call_recording(model, inputs):
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        error = None
        try:
            model(inputs)
        except ValueError as e:
            error = e
    return error, [str(r.message) for r in records]


def _unbuilt_warnings(messages):
    return [m[:120] for m in messages if any(marker in m for marker in UNBUILT)]


def _unbuilt_layers(model):
    return sorted(layer.name for layer in model._flatten_layers() if not layer.built)


def _weight_shapes(model):
    return sorted((w.path.split("/", 1)[-1], tuple(w.shape)) for w in model.weights)


class _Checked(keras.Model):
    """A bare Keras model with a layer built on the first call and an input
    check in `call`: what keras_hsum's models looked like to Keras."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(3)

    def call(self, inputs):
        x = inputs["x"]
        if len(x.shape) != 3:
            raise ValueError(f"{self.name}: `x` must be [B,P,D], received {x.shape}.")
        return self.dense(x)


class _Quiet(_Checked):
    def __call__(self, *args, **kwargs):
        return call_without_unbuilt_warnings(self, super().__call__, *args, **kwargs)


def test_keras_warns_twice_before_the_error_and_the_helper_does_not():
    wrong = {"x": np.zeros((2, 4), "float32")}
    error, messages = _call_recording(_Checked(), wrong)
    assert error is not None and "[B,P,D]" in str(error)
    assert len(_unbuilt_warnings(messages)) == 2, messages  # Keras' behaviour
    error, messages = _call_recording(_Quiet(), wrong)
    assert error is not None and "[B,P,D]" in str(error)
    assert not _unbuilt_warnings(messages), messages


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.jax_slow  # default-suite budget (docs/testing.md): the TF pass runs it, the slow set's JAX pass too
def test_first_call_with_wrong_inputs_raises_without_unbuilt_warnings(name):
    factory, wrong, right, match = CASES[name]
    model = factory()
    assert not model.built
    error, messages = _call_recording(model, wrong)
    assert error is not None, f"{name}: no error on wrong inputs"
    assert re.search(match, str(error)), str(error)
    assert not _unbuilt_warnings(messages), messages
    # The failed call left the model unbuilt; right inputs build it as they
    # build a fresh model: the same layers built, the same weights.
    assert not model.built
    if name not in REBUILT:
        return
    error, messages = _call_recording(model, right)
    assert error is None, error
    assert not _unbuilt_warnings(messages), messages
    fresh = factory()
    fresh(right)
    assert model.built
    assert _unbuilt_layers(model) == _unbuilt_layers(fresh)
    assert _weight_shapes(model) == _weight_shapes(fresh)
    # Built now: the same error again, still without warnings.
    error, messages = _call_recording(model, wrong)
    assert error is not None and not _unbuilt_warnings(messages)


class _Warning(Summarizer):
    """A Summarizer whose `call` warns, then fails on `fail` in the inputs."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(4)

    def call(self, inputs, training=False):
        warnings.warn("a warning of the model's own", UserWarning)
        if "fail" in inputs:
            raise ValueError("model's own error")
        return self.dense(keras.ops.cast(inputs["decoder_tokens"][..., None], "float32"))


def test_other_warnings_of_a_first_call_are_reissued():
    inputs = {"decoder_tokens": np.ones((2, 3), "int32")}
    error, messages = _call_recording(_Warning(), dict(inputs, fail=np.zeros(2)))
    assert "model's own error" in str(error)
    assert "a warning of the model's own" in messages
    assert not _unbuilt_warnings(messages), messages
    error, messages = _call_recording(_Warning(), inputs)
    assert error is None and "a warning of the model's own" in messages


def test_warning_filters_stay_in_force():
    inputs = {"decoder_tokens": np.ones((2, 3), "int32")}
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("ignore")
        _Warning()(inputs)
    assert not records
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="own"):
            _Warning()(inputs)
