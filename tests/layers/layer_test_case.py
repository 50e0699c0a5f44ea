"""The shared test case every keras_hsum layer goes through.

Modelled on keras-hub's `TestCase.run_layer_test`, written for pytest and for
both backends (nothing here imports TensorFlow unless the TensorFlow backend
is active). `run_layer_test` checks, in order:

1. `get_config` round trip (every init kwarg stored under its own name,
   `from_config` rebuilds an identical config) and registration under the
   `keras_hsum>` package;
2. `build` from shapes (`<name>_shape` keyword arguments), weight counts and
   `compute_output_shape`;
3. a symbolic call on `keras.KerasTensor`s;
4. an eager call: shapes, float32 outputs, everything finite;
5. gradients: finite, and non-zero for every trainable weight (unless told
   which weights may get none), then one `fit` step that changes the weights;
6. `.keras` save and reload in a functional model: identical outputs;
7. `jit_compile=True` prediction equal to the eager call;
8. mixed precision (`dtype="mixed_float16"`): float32 variables, finite
   outputs and gradients.

Helpers `compute_gradients` and `input_gradients` give gradients on either
backend for tests that check a specific path (e.g. through a gate).
"""

import os
import re
import tempfile

import keras
import numpy as np
import pytest
from keras import ops
from keras import tree

BACKEND = keras.backend.backend()


def to_numpy(x):
    return tree.map_structure(
        lambda t: None if t is None else ops.convert_to_numpy(t), x
    )


def _float_leaves(outputs):
    return [
        o
        for o in tree.flatten(outputs)
        if o is not None and "float" in keras.backend.standardize_dtype(o.dtype)
    ]


def default_loss(outputs):
    """Sum over float outputs of mean(output²): touches every output value."""
    return sum(ops.mean(ops.square(ops.cast(o, "float32"))) for o in _float_leaves(outputs))


def _maybe_jit(layer, fn):
    """jax.jit for float32 layers: one compiled graph instead of op-by-op
    dispatch (much faster). Not for float16 compute: XLA:CPU has no
    float16 x float16 -> float32 dot, which eager dispatch avoids."""
    import jax

    if layer.compute_dtype == "float32":
        return jax.jit(fn)
    return fn


def compute_gradients(layer, inputs, loss_fn=default_loss):
    """Gradients of `loss_fn(layer(**inputs))` w.r.t. the trainable variables.

    Returns:
        A list of numpy arrays aligned with `layer.trainable_variables`
        (zeros where the backend returns no gradient).
    """
    variables = layer.trainable_variables
    if BACKEND == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss = loss_fn(layer(**inputs))
        grads = tape.gradient(loss, [v.value for v in variables])
    elif BACKEND == "jax":
        import jax

        trainable = [v.value for v in variables]
        non_trainable = [v.value for v in layer.non_trainable_variables]

        def fn(values):
            outputs, _ = layer.stateless_call(values, non_trainable, **inputs)
            return loss_fn(outputs)

        grads = _maybe_jit(layer, jax.grad(fn))(trainable)
    else:
        raise NotImplementedError(f"No gradient helper for backend {BACKEND!r}.")
    return [
        np.zeros(v.shape, "float32") if g is None else ops.convert_to_numpy(g)
        for v, g in zip(variables, grads)
    ]


def input_gradients(layer, inputs, names, loss_fn=default_loss):
    """Gradients of the loss w.r.t. the float inputs named in `names`.

    Returns:
        dict name -> numpy gradient (zeros when no gradient flows).
    """
    names = list(names)
    if BACKEND == "tensorflow":
        import tensorflow as tf

        tensors = {k: tf.convert_to_tensor(v) for k, v in inputs.items()}
        with tf.GradientTape() as tape:
            for name in names:
                tape.watch(tensors[name])
            loss = loss_fn(layer(**tensors))
        grads = tape.gradient(loss, [tensors[n] for n in names])
    elif BACKEND == "jax":
        import jax

        if not layer.built:
            layer(**inputs)
        trainable = [v.value for v in layer.trainable_variables]
        non_trainable = [v.value for v in layer.non_trainable_variables]

        def fn(values):
            call_inputs = dict(inputs)
            call_inputs.update(dict(zip(names, values)))
            outputs, _ = layer.stateless_call(trainable, non_trainable, **call_inputs)
            return loss_fn(outputs)

        grads = _maybe_jit(layer, jax.grad(fn))([inputs[n] for n in names])
    else:
        raise NotImplementedError(f"No gradient helper for backend {BACKEND!r}.")
    return {
        n: np.zeros(np.shape(inputs[n]), "float32") if g is None else ops.convert_to_numpy(g)
        for n, g in zip(names, grads)
    }


def assert_all_finite(values, what):
    for i, value in enumerate(tree.flatten(values)):
        if value is None:
            continue
        value = np.asarray(ops.convert_to_numpy(value))
        if value.dtype.kind == "f":
            assert np.all(np.isfinite(value)), f"{what}[{i}] has non-finite values"


def _shapes(outputs):
    """Shape structure of outputs (tensors) or of a compute_output_shape result."""
    if outputs is None:
        return None
    if isinstance(outputs, dict):
        return {k: _shapes(v) for k, v in outputs.items()}
    if isinstance(outputs, (tuple, list)):
        if all(d is None or isinstance(d, (int, np.integer)) for d in outputs):
            return tuple(None if d is None else int(d) for d in outputs)
        return tuple(_shapes(o) for o in outputs)
    return tuple(None if d is None else int(d) for d in outputs.shape)


def _functional_model(layer, input_data):
    inputs = {
        name: keras.Input(
            shape=value.shape[1:], batch_size=value.shape[0], dtype=str(value.dtype), name=name
        )
        for name, value in input_data.items()
    }
    outputs = _float_leaves(layer(**inputs))
    return keras.Model(inputs, outputs)


def run_layer_test(
    cls,
    init_kwargs,
    input_data,
    expected_output_shape,
    expected_num_trainable_weights=None,
    weights_without_gradient=(),
    run_training_check=True,
    run_saving_check=True,
    run_jit_check=True,
    run_mixed_precision_check=True,
    run_width_check=True,
    tolerance=1e-5,
):
    """Runs the shared checks on a layer.

    Args:
        cls: the layer class.
        init_kwargs: dict of constructor arguments.
        input_data: dict of call-argument name -> numpy array (batch first).
        expected_output_shape: the output shape structure (tuple, or a
            tuple/dict of tuples matching the output structure).
        expected_num_trainable_weights: optional exact count.
        weights_without_gradient: substrings of variable paths allowed to
            get a zero gradient on `input_data` (e.g. a graph-replaced head).
        run_*: switch individual checks off (say why in the calling test).
        tolerance: absolute tolerance of output comparisons.
    """
    # 1. Config round trip and registration.
    layer = cls(**init_kwargs)
    config = layer.get_config()
    for key, value in init_kwargs.items():
        assert key in config, f"get_config() lacks init argument {key!r}"
        if not isinstance(value, (keras.layers.Layer, keras.initializers.Initializer)):
            assert config[key] == value, f"config[{key!r}]={config[key]!r} != {value!r}"
    revived = cls.from_config(config)
    assert revived.get_config() == config
    registered = keras.saving.get_registered_name(cls)
    assert registered == f"keras_hsum>{cls.__name__}", registered
    serialized = keras.saving.serialize_keras_object(layer)
    assert type(keras.saving.deserialize_keras_object(serialized)) is cls

    # 2. Build from shapes.
    shapes = {f"{name}_shape": tuple(value.shape) for name, value in input_data.items()}
    layer = cls(**init_kwargs)
    layer.build(**shapes)
    assert layer.built
    if expected_num_trainable_weights is not None:
        assert len(layer.trainable_weights) == expected_num_trainable_weights, [
            w.path for w in layer.trainable_weights
        ]
    assert _shapes(layer.compute_output_shape(**shapes)) == expected_output_shape

    # 3. Symbolic call.
    layer = cls(**init_kwargs)
    symbolic = {
        name: keras.KerasTensor(value.shape, dtype=str(value.dtype))
        for name, value in input_data.items()
    }
    assert _shapes(layer(**symbolic)) == expected_output_shape

    # 4. Eager call.
    layer = cls(**init_kwargs)
    outputs = layer(**input_data)
    assert _shapes(outputs) == expected_output_shape
    for output in _float_leaves(outputs):
        assert keras.backend.standardize_dtype(output.dtype) == "float32"
    assert_all_finite(outputs, "eager outputs")
    reference = to_numpy(outputs)

    # 5. Gradients and one fit step.
    if run_training_check:
        grads = compute_gradients(layer, input_data)
        assert_all_finite(grads, "gradients")
        for variable, grad in zip(layer.trainable_variables, grads):
            if any(s in variable.path for s in weights_without_gradient):
                continue
            assert np.any(grad != 0), f"no gradient reaches {variable.path}"
        train_layer = cls(**init_kwargs)
        model = _functional_model(train_layer, input_data)
        targets = [np.zeros(o.shape, "float32") for o in model.outputs]
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss=["mse"] * len(targets))
        before = [np.array(ops.convert_to_numpy(w)) for w in model.trainable_weights]
        model.fit(input_data, targets, batch_size=len(next(iter(input_data.values()))), epochs=1, verbose=0)
        after = [np.array(ops.convert_to_numpy(w)) for w in model.trainable_weights]
        assert_all_finite(after, "weights after fit")
        assert any(not np.array_equal(b, a) for b, a in zip(before, after)), "fit changed no weight"

    # 6. Save and reload.
    model = _functional_model(layer, input_data)
    expected = to_numpy(model(input_data))
    if run_saving_check:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model.keras")
            model.save(path)
            loaded = keras.saving.load_model(path)
        restored = to_numpy(loaded(input_data))
        for e, r in zip(tree.flatten(expected), tree.flatten(restored)):
            np.testing.assert_allclose(r, e, atol=tolerance, rtol=0)

    # 7. jit_compile=True.
    if run_jit_check:
        model.compile(jit_compile=True)
        compiled = model.predict_on_batch(input_data)
        for e, c in zip(tree.flatten(expected), tree.flatten(to_numpy(compiled))):
            np.testing.assert_allclose(c, e, atol=tolerance, rtol=0)

    # 8. Reused at another width: the built layer refuses a first input
    #    whose last axis differs from the one its weights were built for.
    if run_width_check:
        name, first = next(iter(input_data.items()))
        wider = np.concatenate([first, first[..., :1]], axis=-1)
        # Keras' InputSpec message (`expect_width`) or the layer's own
        # shape check: both name the input, its width and what was received.
        with pytest.raises(ValueError, match=(
            rf"{name}.* {first.shape[-1]}\b.*received .*shape {re.escape(str(wider.shape))}"
        )):
            layer(**dict(input_data, **{name: wider}))
        again = to_numpy(layer(**input_data))
        for r, a in zip(tree.flatten(reference), tree.flatten(again)):
            np.testing.assert_allclose(a, r, atol=tolerance, rtol=0)

    # 9. Mixed precision.
    if run_mixed_precision_check:
        mixed = cls(**init_kwargs, dtype="mixed_float16")
        outputs = mixed(**input_data)
        assert_all_finite(outputs, "mixed_float16 outputs")
        for variable in mixed.weights:
            assert keras.backend.standardize_dtype(variable.dtype) == "float32", variable.path
        if run_training_check:
            assert_all_finite(compute_gradients(mixed, input_data), "mixed_float16 gradients")
    return reference
