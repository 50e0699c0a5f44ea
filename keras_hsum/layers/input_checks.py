"""Shape checks that turn wrong inputs into ValueErrors naming the argument.

Every check works on static shapes (tuples with `None` for unknown sizes), so
it runs at build or trace time on every backend and costs nothing per step.
The one value check, token ids against the vocabulary, reads numpy features
only (what a user passes to a model or a search), never a tensor.
"""

import numbers

import keras
import numpy as np

from keras_hsum import features
from keras_hsum.checks import check_int
from keras_hsum.features import CONTEXT_TOKENS
from keras_hsum.features import SOURCE_EXTENDED_IDS
from keras_hsum.features import SUMMARY_TOKENS
from keras_hsum.features import TOKENS


def _shape(value):
    shape = getattr(value, "shape", value)
    return tuple(None if d is None else int(d) for d in shape)


def check_rank(layer, name, value, rank, symbols):
    """Raises unless `value` has `rank` axes; `symbols` names them, e.g. "[B,P,T,D]"."""
    shape = _shape(value)
    if len(shape) != rank:
        raise ValueError(
            f"{layer}: `{name}` must have rank {rank} with shape {symbols}, "
            f"received shape {shape}."
        )
    return shape


def check_cache_keys(layer, name, cache, expected, producer):
    """`cache` must be a dict with exactly the keys `expected`, as the call
    `producer` (e.g. "project_memory(word_memory, paragraph_memory)") returns."""
    expected = tuple(sorted(expected))
    if not isinstance(cache, dict) or tuple(sorted(cache)) != expected:
        received = sorted(cache) if isinstance(cache, dict) else type(cache).__name__
        raise ValueError(
            f"{layer.name}: `{name}` must be the dict that `{producer}` returns, "
            f"with keys {list(expected)}; received {received}."
        )


def check_dims(layer, name, shape, expected, symbols):
    """Raises when known dims of `shape` differ from `expected` (None = any)."""
    shape = _shape(shape)
    expected = tuple(expected)
    ok = len(shape) == len(expected) and all(
        e is None or s is None or s == e for s, e in zip(shape, expected)
    )
    if not ok:
        raise ValueError(
            f"{layer}: `{name}` must have shape {symbols} = {expected} "
            f"(None: any size), received shape {shape}."
        )
    return shape


def expect_width(layer, name, shape):
    """Called at the end of `layer.build(shape, ...)`: the built layer then
    refuses a first input (the argument `name`) whose last axis is not the
    width its weights were built for, with Keras' own message (as
    `keras.layers.Dense` does): "Input 0 with name '<name>' of layer ... is
    incompatible with the layer: expected axis -1 of input shape to have
    value D, but received input with shape ...".
    Without it a layer reused at another width fails inside an einsum or a
    matmul, in backend words."""
    shape = tuple(shape)
    if shape and shape[-1] is not None:
        layer.input_spec = keras.InputSpec(axes={-1: int(shape[-1])}, name=name)


# (mask, the feature it masks, how many leading axes they share), as
# keras_hsum.features declares them: a mask with other sizes than its tokens
# would be broadcast, not refused, by the ops that apply it (a [1,N]
# `token_mask` masks every example like the first).
_MASKED_FEATURES = features.masks()


def _static_shape(value):
    shape = getattr(value, "shape", None)
    if shape is None:
        return None
    try:
        return tuple(None if d is None else int(d) for d in shape)
    except TypeError:  # a dynamic size
        return None


def check_feature_shapes(name, inputs, vocabulary_size=None, num_oov=0):
    """Raises a ValueError when a model's features disagree where their
    static shapes are known:

    - every array feature has the batch size B of the others (a batch of 1
      would otherwise broadcast over the batch);
    - `token_mask` has the shape of `tokens`, `paragraph_mask` its first two
      axes [B,P] when `tokens` is [B,P,T] (likewise `summary_*`);
    - with `vocabulary_size` V, a numpy id feature (`tokens`,
      `summary_tokens`, `context_tokens`, `decoder_tokens`) holds ids in
      [0, V), or [0, V + `num_oov`) for `decoder_tokens` and
      `source_extended_ids` (a copy model's extended ids; a source OOV
      past `num_oov` would get no copy mass). An id outside would wrap
      around (a negative one) or give NaN logits (JAX) or a backend error
      deep in the model; the usual cause is a batch encoded with another
      vocabulary. Tensors are not read.

    Dtypes are not checked: Keras traces a saved model's default signature
    with float placeholders for every input.

    Sizes unknown while tracing (None) are not compared. `name` names the
    model in the message.
    """
    if not isinstance(inputs, dict):
        return
    if vocabulary_size is not None:
        _check_token_ids(name, inputs, int(vocabulary_size), int(num_oov or 0))
    shapes = {key: _static_shape(value) for key, value in inputs.items()}
    batch = {key: shape[0] for key, shape in shapes.items()
             if shape and shape[0] is not None}
    if len(set(batch.values())) > 1:
        raise ValueError(
            f"{name}: every feature must have the same batch size B (axis 0); "
            f"received {dict(sorted(batch.items()))}."
        )
    for mask, feature, axes in _MASKED_FEATURES:
        mask_shape, feature_shape = shapes.get(mask), shapes.get(feature)
        if mask_shape is None or feature_shape is None or inputs.get(mask) is None:
            continue
        if axes is None:
            expected = feature_shape
        elif len(feature_shape) == 3 and len(mask_shape) == 2:
            expected = feature_shape[:axes]
        else:
            continue
        if len(mask_shape) != len(expected) or any(
            m is not None and e is not None and m != e for m, e in zip(mask_shape, expected)
        ):
            raise ValueError(
                f"{name}: `{mask}` must have shape {expected} (from `{feature}` "
                f"{feature_shape}), received {mask_shape}."
            )


def check_model_features(model, inputs):
    """`check_feature_shapes` for `model`'s features, ids included: its name,
    `vocabulary_size` and `num_oov` (None and 0 where it has none)."""
    check_feature_shapes(
        getattr(model, "name", "model"), inputs,
        getattr(model, "vocabulary_size", None), getattr(model, "num_oov", 0) or 0,
    )


# Features that hold token ids, and whether they may hold a copy model's
# extended ids (V .. V + num_oov - 1: the example's source OOVs).
_ID_FEATURES = (
    (TOKENS, False),
    (SUMMARY_TOKENS, False),
    (CONTEXT_TOKENS, False),
    ("decoder_tokens", True),
    (SOURCE_EXTENDED_IDS, True),
)


def _check_token_ids(name, inputs, vocabulary_size, num_oov):
    for key, extended in _ID_FEATURES:
        value = inputs.get(key)
        if not isinstance(value, np.ndarray) or not value.size:
            continue
        if not np.issubdtype(value.dtype, np.number):  # bool is not a number
            continue
        limit = vocabulary_size + (num_oov if extended else 0)
        low, high = value.min(), value.max()
        if low < 0 or high >= limit:
            bound = "vocabulary_size" + (f" {vocabulary_size} + num_oov {num_oov}"
                                         if extended and num_oov else "")
            raise ValueError(
                f"{name}: `{key}` must hold token ids in [0, {limit}) (the model's "
                f"{bound}), received ids from {low} to {high}. Encode the batch "
                "with the vocabulary the model was built for."
            )


def _minimum(name):
    """The least value of the hyper-parameter `name` (None: not a size)."""
    if name == "num_decoder_layers":
        return 1
    if name.startswith("num_") and name.endswith("layers"):
        return 0
    if name == "num_oov":
        return 0
    if (name.endswith("_dim") or name in ("num_heads", "vocabulary_size", "max_documents")
            or name.endswith("_length") or name.endswith("_per_group")):
        return 1
    return None


def check_hyperparameters(owner, optional=(), **values):
    """Raises a ValueError naming the first bad constructor argument:

    - sizes (`*_dim`, `num_heads`, `vocabulary_size`, `*_length`,
      `*_per_group`, `max_documents`) are ints >= 1; layer counts (`num_*_layers`) ints >= 0, `num_decoder_layers`
      >= 1 (a summarizer without decoder layers never reads its source);
    - `dropout` is a number in [0, 1).

    None passes only for the names in `optional` (a size left to a default
    derived from others, e.g. SHTE's `sentence_intermediate_dim`). Without
    the check a zero, negative or None size fails later, in Keras or the
    backend, with a message that names neither the argument nor the model
    (e.g. "integer modulo by zero", or a `rate` for `dropout`), or runs
    silently wrong.
    """
    for name, value in values.items():
        if value is None and name in optional:
            continue
        if name == "dropout" or name.endswith("_dropout"):
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (
                0 <= value < 1
            ):
                raise ValueError(
                    f"{owner}: `{name}` must be a number in [0, 1), received {value!r}."
                )
            continue
        least = _minimum(name)
        if least is not None:
            check_int(name, value, least, owner=owner)
