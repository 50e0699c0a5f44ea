"""Dropout whose JAX masks take a quarter of Keras' random-number work.

Keras' `Dropout` under JAX draws its mask with `jax.random.bernoulli`:
one Threefry-2x32 hash (20 rounds of 32-bit adds, rotations and xors) per
element, of which it keeps 32 bits out of 64 (JAX's partitionable
Threefry xors the two words). On attention probabilities that is the
largest non-matmul cost of a train step: on an H200 the PHT paper step
spent 3.0 of its 15.6 ms in two elementwise fusions, and the same step with
`attention_dropout=0` took 12.6 ms (benchmarks/results/accelerator.md).

`packed_dropout` keeps every element with probability t / 2¹⁶ (t =
round(keep · 2¹⁶), within 2⁻¹⁷ of `1 - rate`) and scales the kept ones by
2¹⁶ / t, so the expectation of each output element is its input exactly.
It compares four 16-bit fields of each hash's 64 bits: one hash per four
elements. The hashes are materialised before the fields are read
(`jax.lax.optimization_barrier`), so that no fusion recomputes a hash for
each field it reads. The random stream is Threefry's, keyed by the layer's
own `SeedGenerator` as Keras' is; the masks differ from Keras' (other bits
of other counters) but are as reproducible: the same seed gives the same
mask on every backend JAX runs on.

Other backends, a `noise_shape`, a rate of 0 or 1, more than 2³⁴
elements, or a JAX without `jax.extend.random.threefry2x32_p`: Keras' own
dropout, unchanged.
"""

import functools
import types

import keras
import numpy as np

BITS = 16
FIELDS = 64 // BITS  # fields of one hash
MAX_HASHES = 2**32  # counters are one 32-bit word


def keep_threshold(rate):
    """t: an element is kept where its 16 random bits are < t, i.e. with
    probability t / 2¹⁶ (the nearest to `1 - rate`, at least 1)."""
    return max(1, int(round((1.0 - float(rate)) * 2**BITS)))


def _hash_counters(shape):
    """uint32 [*shape]: each position's index in row-major order."""
    import jax
    import jax.numpy as jnp

    index = jnp.zeros(shape, jnp.uint32)
    stride = 1
    for axis in reversed(range(len(shape))):
        index = index + jax.lax.broadcasted_iota(jnp.uint32, shape, axis) * np.uint32(stride)
        stride *= shape[axis]
    return index


def packed_bits(seed, shape):
    """uint16 [*shape] random bits from Threefry-2x32 keyed by `seed`.

    The last axis of W elements takes its bits from Q = ⌈W / 4⌉ hashes per
    row: hash q of a row (counter: its row-major index among all [..., Q]
    hashes, high word 0) gives the row's elements 4q .. 4q + 3, in the order
    low and high 16 bits of its first word, then of its second.

    Args:
        seed: uint32 [2], a Threefry key (what a Keras `SeedGenerator` draws
            under JAX).
        shape: a static shape with at least one axis.

    Returns:
        uint16 [*shape].
    """
    import jax
    import jax.numpy as jnp
    from jax.extend.random import threefry2x32_p

    width = shape[-1]
    hashes = -(-width // FIELDS)
    counters = _hash_counters(tuple(shape[:-1]) + (hashes,))
    seed = jnp.asarray(seed).astype(jnp.uint32)
    first, second = threefry2x32_p.bind(seed[0], seed[1], jnp.zeros_like(counters), counters)
    first, second = jax.lax.optimization_barrier((first, second))
    mask = np.uint32(2**BITS - 1)
    fields = jnp.stack([first & mask, first >> BITS, second & mask, second >> BITS], axis=-1)
    fields = fields.astype(jnp.uint16).reshape(tuple(shape[:-1]) + (hashes * FIELDS,))
    return fields[..., :width]


def packed_dropout(inputs, rate, seed):
    """Dropout of `inputs` at `rate` (see the module docstring).

    Args:
        inputs: a float tensor of static shape.
        rate: the dropout rate, 0 <= rate <= 1.
        seed: a `keras.random.SeedGenerator` (advanced by one draw), an int,
            or under JAX a uint32 [2] key.

    Returns:
        A tensor like `inputs`: each element kept with probability
        `keep_threshold(rate) / 2**16` and scaled by the inverse, else 0.
        Under other backends, `keras.random.dropout(inputs, rate, seed=seed)`.
    """
    shape = tuple(inputs.shape)
    if (keras.backend.backend() != "jax" or not _jax_has_threefry_primitive()
            or rate <= 0 or rate >= 1 or not shape or any(d is None for d in shape)
            or int(np.prod(shape[:-1])) * -(-shape[-1] // FIELDS) > MAX_HASHES):
        return keras.random.dropout(inputs, rate, seed=seed)
    from keras.src.backend.jax.random import jax_draw_seed

    return _jitted_mask_and_scale()(inputs, jax_draw_seed(seed), keep_threshold(rate))


@functools.cache
def _jax_has_threefry_primitive():
    """Whether this JAX exports `jax.extend.random.threefry2x32_p` (public
    since JAX 0.4.2x); without it, Keras' own dropout."""
    try:
        from jax.extend.random import threefry2x32_p  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def _jitted_mask_and_scale():
    """`(inputs, seed, threshold) -> masked and scaled inputs`, one `jax.jit`
    (threshold static): an eager call compiles once per shape instead of
    once per op; inside a traced step it is inlined."""
    import jax
    import jax.numpy as jnp

    def mask_and_scale(inputs, seed, threshold):
        kept = packed_bits(seed, inputs.shape) < np.uint16(threshold)
        scale = jnp.asarray(2**BITS / threshold, inputs.dtype)
        return jnp.where(kept, inputs * scale, jnp.zeros_like(inputs))

    return jax.jit(mask_and_scale, static_argnums=2)


def _packed_call(self, inputs, training=False):
    """`keras.layers.Dropout.call` with the mask of `packed_dropout`."""
    if (training and 0 < self.rate < 1 and self.noise_shape is None
            and getattr(self, "seed_generator", None) is not None):
        return packed_dropout(inputs, self.rate, self.seed_generator)
    return type(self).call(self, inputs, training=training)


def use_packed_dropout(layer):
    """Makes `layer`'s dropouts draw their masks by `packed_dropout`.

    Binds to every `keras.layers.Dropout` among `layer` and its sublayers
    (those built so far: Keras' `MultiHeadAttention` makes its attention
    dropout in `build`) a `call` that, in training, under JAX, at a rate
    strictly between 0 and 1 and without a `noise_shape`, returns
    `packed_dropout(inputs, rate, self.seed_generator)`, and otherwise the
    class's `call`. Rates may change after this (`set_attention_dropout`).
    No weight, sublayer or config changes: saved models load as before,
    and under TensorFlow nothing changes at all. A bound method, so a copy
    of the layer (`copy.deepcopy`) binds it to the copy.

    Args:
        layer: a Keras layer or model.

    Returns:
        `layer`.
    """
    for sublayer in layer._flatten_layers(include_self=True, recursive=True):
        if isinstance(sublayer, keras.layers.Dropout) and "call" not in vars(sublayer):
            sublayer.call = types.MethodType(_packed_call, sublayer)
    return layer


def dropout_layer(rate, **kwargs):
    """`keras.layers.Dropout(rate, **kwargs)` with `use_packed_dropout`: the
    dropout every keras_hsum layer and model makes."""
    return use_packed_dropout(keras.layers.Dropout(rate, **kwargs))
