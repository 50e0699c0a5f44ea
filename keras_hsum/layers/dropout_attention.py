"""Attention with dropout on its weights, fused into one flash-style kernel.

softmax(q·kᵀ·scale, masked) is computed in float32, each weight is kept
with probability κ (scaled by 1/κ) or dropped, and the weights multiply v:

    out[b,i,n] = Σ_j z[b,n,i,j] · p[b,n,i,j] · v[b,j,n],   z ∈ {0, 1/κ}.

Under XLA with attention dropout the [B,H,T,S] scores, weights and mask are
all written to memory (flat's paper step: 294 GB a step, 35 GB without
dropout). `flash_dropout_attention` is a Pallas GPU kernel (Triton
backend) that keeps a running max and sum per block of queries, draws the
dropout mask inside the kernel from a counter-based hash, and never writes
anything of size T·S: its backward pass recomputes the weights and the same
mask block by block (a `jax.custom_vjp`). `reference_dropout_attention` is
the same function written out in `jax.numpy`, with the same mask;
`dropout_attention` picks one.

The dropout mask (`dropout_mask_bits`): each weight (batch b, head n,
query i, key j) gets a 16-bit value from the seed's two uint32 words, and
is kept where that value is below `keep_threshold(rate)` = t, i.e. with
probability κ = t / 2¹⁶ (within 2⁻¹⁷ of 1 - rate, 2⁻¹⁶ for rates under
2⁻¹⁷); kept weights are scaled by 2¹⁶ / t, so the expectation of every
output is the undropped output exactly. The hash is `mix32`, a 32-bit
finalizer (xorshift 16, multiply
0x7FEB352D, xorshift 15, multiply 0x846CA68B, xorshift 16: Wellons'
"lowbias32", a bijection of uint32; flipping any one input bit flips each
output bit with probability 0.5 ± 0.0018 at worst over the 32 × 32 pairs,
measured over 2²⁰ random inputs, where sampling alone gives ± 0.0005),
applied as

    key   = mix32(mix32(seed[0] ^ 0x243F6A88) ^ seed[1])
    head  = mix32(key  ^ (b·N + n) · 0x85EBCA6B)       per (b, n)
    row   = mix32(head ^ i · 0xC2B2AE35)                per (b, n, i)
    pair  = mix32(row  ^ ⌊j/2⌋ · 0x9E3779B9)            per two keys
    value = pair's low 16 bits for even j, its high 16 bits for odd j

(uint32 arithmetic, wrapping). Row keys, B·N·T words, are computed outside
the kernel; inside it each pair of neighbouring keys costs one
multiply-free xor with the pair's code and one `mix32` (two multiplies,
three shifts, three xors), shared by the two weights (one hash for two:
the hash was the kernels' largest arithmetic cost, more than the
softmax's), against 20 rounds of Threefry-2x32 per element for
`jax.random`. For a fixed seed, (b, n) → head is a bijection, and so is
i → row for each head, and ⌊j/2⌋ → pair for each row: no two pairs of a
row, and no two rows of a head, share a hash by construction. Its
statistics are tested over 10⁶ draws (tests/layers/test_dropout_attention.py):
kept fraction, each of the 16 bits, per-key, per-query and per-head
rates, pairs of neighbours along
each axis, and masks of consecutive seeds, all within 5 σ of independent
uniform draws. It is a statistical hash, not a cryptographic one (like
dropout masks elsewhere, nothing relies on it being unpredictable).

Query rows with no visible key (a padded query, a fully masked mask row)
give zeros, forward and backward (no NaN): their softmax denominator is 0
and is replaced by 1 over zero weights.

Layout (Keras' `dot_product_attention`): query [B,T,N,Dh], key and value
[B,S,N,Dh], mask broadcastable to [B,1,T,S] (True = attend), output
[B,T,N,Dh] in the query's dtype. Shape symbols: B batch, T queries, S keys,
N heads, Dh head width.

In the layers: keras_hsum's Transformer encoder and decoder attentions
(`fused_attention_inputs.use_fused_attention_inputs`) and PHT's word-level
cross attention (`ParallelCrossAttention`) call `layer_dropout_attention`
in training with attention dropout where `layer_implementation` names an
implementation: the kernel under JAX on a GPU, Keras' own dropout elsewhere
(`use_layer_implementation` overrides it: tests, benchmarks).

The kernel imports JAX lazily; this module imports under any backend and
without a GPU. The kernel runs in Pallas' interpret mode (`interpret=True`)
on a CPU, which the tests use.
"""

import dataclasses
import functools
import math

import numpy as np

# A finite "-inf" for masked logits (base 2 in the kernel, natural in the
# reference): exp of it is 0 and differences of two of them are 0, not NaN.
MASKED_LOGIT = -1e30
LOG2_E = math.log2(math.e)

# mix32's multipliers (Wellons' lowbias32) and the odd constants that spread
# the counters over 32 bits before each mix (π's first word, murmur3's two
# finalizer multipliers, 2³²/φ).
_MIX_1 = 0x7FEB352D
_MIX_2 = 0x846CA68B
_SEED_SALT = 0x243F6A88
_HEAD_STEP = 0x85EBCA6B
_ROW_STEP = 0xC2B2AE35
_KEY_STEP = 0x9E3779B9

BITS = 16  # bits of a weight's value: two values per hash
VALUES = 2**BITS

# Head widths the kernel takes (Triton's dots want powers of two >= 16).
KERNEL_HEAD_DIMS = (16, 32, 64, 128)


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Tiles of the kernel: queries × keys per step of each pass.

    The defaults are for an H100 (sm_90: 64 K registers and 228 KB of shared
    memory per SM) at head widths 32 and 64, chosen without a GPU to time
    them (not autotuned): FlashAttention-2's Triton tiles for Dh <= 64
    (forward 128 queries × 64 keys; backward 64 × 64 in both kernels), and
    warps by what `ptxas -v` gives for sm_90a (benchmarks/
    dropout_attention_hlo.py; flat's encoder attention, bf16, dropout 0.1,
    no spills in any): at Dh 32 (the paper configs') the forward at 8 warps
    needs 121 registers a thread, the dK/dV kernel at 4 warps 187, dQ at 4
    warps 127; at Dh 64, 123, 237 and 128 (with one hash per
    weight, before the hash was shared by two keys: the forward at 4 warps
    246, 8 resident warps per SM instead of 16; dK/dV at 8 warps 206 × 256
    threads, one program per SM; Dh 32, 4-warp backward 202 (dK/dV) and
    125 (dQ)). Two pipeline stages: the next K/V (or Q/dO)
    tiles load while this step computes (8 KB a tile at 64 × 64 bf16). A
    sequence shorter than a block takes the next power of two >= 16 instead.

    Attributes:
        block_q, block_k: forward pass, queries per program, keys per step.
        block_q_backward, block_k_backward: both backward kernels (dK/dV:
            a program per `block_k_backward` keys over steps of
            `block_q_backward` queries; dQ the other way round).
        num_warps, num_warps_backward: Triton's warps per program, forward
            and backward kernels.
        num_stages: Triton's software pipelining depth, every kernel.
    """

    block_q: int = 128
    block_k: int = 64
    block_q_backward: int = 64
    block_k_backward: int = 64
    num_warps: int = 8
    num_warps_backward: int = 4
    num_stages: int = 2


def keep_threshold(rate):
    """t: a weight is kept where its 16-bit value is < t, i.e. with
    probability t / 2¹⁶, the nearest to `1 - rate` (1 <= t < 2¹⁶)."""
    rate = float(rate)
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"`rate` must be in [0, 1); received rate={rate}.")
    return int(min(max(round((1.0 - rate) * VALUES), 1), VALUES - 1))


def mix32(x):
    """The 32-bit finalizer of the module docstring, on uint32 values (numpy,
    jax.numpy, or values inside a Pallas kernel): a bijection of uint32."""
    x = x ^ (x >> np.uint32(16))
    x = x * np.uint32(_MIX_1)
    x = x ^ (x >> np.uint32(15))
    x = x * np.uint32(_MIX_2)
    return x ^ (x >> np.uint32(16))


def _backend_numpy(seed):
    """numpy for a host seed (int, sequence, numpy array), else jax.numpy."""
    if isinstance(seed, (int, np.integer, list, tuple, np.ndarray)):
        return np
    import jax.numpy as jnp

    return jnp


def seed_words(seed):
    """uint32 [2] from an int (low and high 32 bits), a pair, or a uint32 [2]
    array (a Keras `SeedGenerator`'s draw under JAX)."""
    xp = _backend_numpy(seed)
    if isinstance(seed, (int, np.integer)):
        seed = int(seed)
        if seed < 0 or seed >= 2**64:
            raise ValueError(f"An integer seed must be in [0, 2**64); received {seed}.")
        return np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint32)
    words = xp.asarray(seed)
    if tuple(words.shape) != (2,):
        raise ValueError("`seed` must be an int or two uint32 words (shape [2]); "
                         f"received shape {tuple(words.shape)}. Pass a SeedGenerator's "
                         "`next()` (under JAX) or an int.")
    return words.astype(xp.uint32)


def row_keys(seed, batch_size, num_heads, query_length):
    """uint32 [B, N, T]: the `row` words of the module docstring.

    Args:
        seed: an int or uint32 [2] (see `seed_words`); numpy in, numpy out,
            else jax.numpy.
        batch_size, num_heads, query_length: B, N, T.
    """
    xp = _backend_numpy(seed)
    words = seed_words(seed)
    with np.errstate(over="ignore"):
        key = mix32(mix32(words[0] ^ np.uint32(_SEED_SALT)) ^ words[1])
        heads = xp.arange(batch_size * num_heads, dtype=xp.uint32)
        head = mix32(key ^ heads * np.uint32(_HEAD_STEP))
        rows = xp.arange(query_length, dtype=xp.uint32) * np.uint32(_ROW_STEP)
        keys = mix32(head[:, None] ^ rows[None, :])
    return keys.reshape(batch_size, num_heads, query_length)


def key_codes(pairs):
    """uint32: p · 0x9E3779B9 of key pairs p = ⌊j/2⌋ (uint32 or int32)."""
    return pairs.astype(np.uint32) * np.uint32(_KEY_STEP)


def split_pairs(hashes):
    """[..., 2P] values of [..., P] pair hashes: each hash's low 16 bits,
    then its high 16 bits (keys 2p and 2p + 1)."""
    low = hashes & np.uint32(VALUES - 1)
    high = hashes >> np.uint32(BITS)
    shape = tuple(hashes.shape[:-1]) + (2 * hashes.shape[-1],)
    if isinstance(hashes, np.ndarray):
        return np.stack([low, high], axis=-1).reshape(shape)
    import jax.numpy as jnp

    return jnp.stack([low, high], axis=-1).reshape(shape)


def dropout_mask_bits(seed, batch_size, num_heads, query_length, key_length):
    """uint32 [B, N, T, S]: each attention weight's 16-bit value (the module
    docstring's `value`, 0 <= value < 2¹⁶): weight (b, n, i, j) is kept
    where it is below `keep_threshold(rate)`.

    Args:
        seed: an int or uint32 [2]; numpy in, numpy out, else jax.numpy.
        batch_size, num_heads, query_length, key_length: B, N, T, S.
    """
    xp = _backend_numpy(seed)
    keys = row_keys(seed, batch_size, num_heads, query_length)
    with np.errstate(over="ignore"):
        codes = key_codes(xp.arange(-(-key_length // 2), dtype=xp.uint32))
        return split_pairs(mix32(keys[..., None] ^ codes))[..., :key_length]


def _check_inputs(query, key, value, mask, rate):
    if len(query.shape) != 4 or len(key.shape) != 4 or len(value.shape) != 4:
        raise ValueError("query, key and value must be [B,T,N,Dh], [B,S,N,Dh], [B,S,N,Dh]; "
                         f"received {tuple(query.shape)}, {tuple(key.shape)}, "
                         f"{tuple(value.shape)}.")
    b, t, n, h = query.shape
    if (tuple(key.shape) != tuple(value.shape) or key.shape[0] != b or key.shape[2] != n
            or key.shape[3] != h):
        raise ValueError("key and value must both be [B,S,N,Dh] with query's B, N and Dh "
                         f"(query {tuple(query.shape)}); received key {tuple(key.shape)}, "
                         f"value {tuple(value.shape)}.")
    if mask is not None:
        shape = tuple(mask.shape)
        s = key.shape[1]
        padded = (1,) * (4 - len(shape)) + shape
        if len(shape) > 4 or any(d not in (1, want) for d, want in zip(padded, (b, 1, t, s))):
            raise ValueError(f"`mask` must broadcast to [B,1,T,S] = {[b, 1, t, s]}; received "
                             f"shape {list(shape)}. Pass the key padding mask as "
                             "[B,1,1,S] and per-query masks as [B,1,T,S].")
    keep_threshold(rate)


def _mask_3d(mask, batch_size, query_length, key_length):
    """bool [Bm, Tm, S] (Bm ∈ {1, B}, Tm ∈ {1, T}) of a mask broadcastable to
    [B,1,T,S], or None."""
    import jax.numpy as jnp

    if mask is None:
        return None
    mask = jnp.asarray(mask).astype(bool)
    mask = mask.reshape((1,) * (4 - mask.ndim) + tuple(mask.shape))[:, 0]
    return jnp.broadcast_to(mask, mask.shape[:2] + (key_length,))


def reference_dropout_attention(query, key, value, mask=None, rate=0.0, seed=0, scale=None):
    """Attention with dropout on its weights, written out in jax.numpy.

    softmax(q·kᵀ·scale) over the visible keys in float32, weights dropped
    with the mask of `dropout_mask_bits(seed, B, N, T, S)` below
    `keep_threshold(rate)` and kept ones scaled by 2¹⁶/t, times v (float32),
    cast to the query's dtype. Rows with no visible key give zeros.

    Args:
        query: [B,T,N,Dh].
        key, value: [B,S,N,Dh].
        mask: bool broadcastable to [B,1,T,S] (True = attend), or None.
        rate: dropout rate in [0, 1).
        seed: an int or uint32 [2] (a SeedGenerator's `next()` under JAX).
        scale: logit scale; default 1/√Dh.

    Returns:
        [B,T,N,Dh] in the query's dtype.
    """
    import jax
    import jax.numpy as jnp

    _check_inputs(query, key, value, mask, rate)
    b, t, n, h = query.shape
    s = key.shape[1]
    scale = 1.0 / math.sqrt(h) if scale is None else float(scale)
    logits = jnp.einsum("btnh,bsnh->bnts", query, key,
                        preferred_element_type=jnp.float32) * scale
    visible = jnp.ones((1, 1, 1, 1), bool) if mask is None else _mask_3d(mask, b, t, s)[:, None]
    logits = jnp.where(visible, logits, MASKED_LOGIT)
    peak = jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
    exponentials = jnp.where(visible, jnp.exp(logits - peak), 0.0)
    total = jnp.sum(exponentials, axis=-1, keepdims=True)
    weights = exponentials / jnp.where(total > 0, total, 1.0)
    if rate > 0:
        threshold = keep_threshold(rate)
        bits = dropout_mask_bits(jnp.asarray(seed_words(seed)), b, n, t, s)
        weights = jnp.where(bits < np.uint32(threshold), weights * (VALUES / threshold), 0.0)
    out = jnp.einsum("bnts,bsnh->btnh", weights, value.astype(jnp.float32))
    return out.astype(query.dtype)


def _block(preferred, length):
    """The block along an axis of `length`: `preferred`, or the next power of
    two >= 16 where the axis is shorter."""
    return max(16, min(preferred, 1 << max(0, (length - 1).bit_length())))


@dataclasses.dataclass(frozen=True)
class _Static:
    """What the kernels are specialised on (hashable: custom_vjp's static)."""

    scale: float
    threshold: int  # 0: no dropout
    mask_kind: str  # "none", "keys" ([Bm,1,S]) or "full" ([Bm,T,S])
    mask_batched: bool
    blocks: BlockSizes
    interpret: bool


def _dot(a, b, trans_a=False, trans_b=False):
    """a·b of two 2-D tiles (either transposed), accumulated in float32:
    `lax.dot_general`, which Pallas lowers to Triton's dot (not Pallas'
    own `dot` helper, whose home has moved between JAX versions)."""
    import jax
    import jax.numpy as jnp

    return jax.lax.dot_general(
        a, b, (((0 if trans_a else 1,), (1 if trans_b else 0,)), ((), ())),
        preferred_element_type=jnp.float32)


@functools.cache
def kernel_available():
    """Whether this JAX has the Pallas Triton API the kernel is written
    against (`pallas_call`, `BlockSpec`, `ds`, `program_id`, `cdiv`; Triton's
    `load`, `store`, `CompilerParams`): where not, `layer_implementation`
    keeps Keras' attention (Pallas is experimental and changes between JAX
    versions)."""
    try:
        from jax.experimental import pallas as pl
        from jax.experimental.pallas import triton as plgpu
    except ImportError:
        return False
    return (all(hasattr(pl, name) for name in ("pallas_call", "BlockSpec", "ds", "program_id",
                                                "cdiv"))
            and all(hasattr(plgpu, name) for name in ("load", "store", "CompilerParams")))


def _visible(static, mask_ref, row_start, col_start, row_ok, col_ok):
    """bool [bq, bk]: keys in range, and the user's mask (its ref spans
    every query row and key: `row_start`, `col_start` index it)."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    visible = col_ok[None, :]
    if static.mask_kind == "keys":
        m = plgpu.load(mask_ref.at[pl.ds(0, 1), pl.ds(col_start, col_ok.shape[0])],
                       mask=col_ok[None, :], other=0)
        visible = visible & (m != 0)
    elif static.mask_kind == "full":
        m = plgpu.load(mask_ref.at[pl.ds(row_start, row_ok.shape[0]),
                                   pl.ds(col_start, col_ok.shape[0])],
                       mask=row_ok[:, None] & col_ok[None, :], other=0)
        visible = visible & (m != 0)
    return visible


def _kept(static, keys, start, block):
    """bool [bq, block]: the dropout mask of rows with `keys` at the keys
    `start` .. `start + block - 1` (`start` and `block` even): one hash per
    pair of keys (the module docstring's hash)."""
    import jax.numpy as jnp

    pairs = start // 2 + jnp.arange(block // 2)
    return split_pairs(mix32(keys[:, None] ^ key_codes(pairs)[None, :])) < np.uint32(
        static.threshold)


def _forward_kernel(q_ref, k_ref, v_ref, keys_ref, mask_ref, o_ref, lse_ref, *, static,
                    query_length, key_length, block_q, block_k):
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    start = pl.program_id(0) * block_q
    rows = start + jnp.arange(block_q)
    row_ok = rows < query_length
    q = plgpu.load(q_ref, mask=row_ok[:, None], other=0.0)
    keys = plgpu.load(keys_ref, mask=row_ok, other=0) if static.threshold else None
    head_dim = q.shape[-1]
    logit_scale = static.scale * LOG2_E

    def step(index, carry):
        acc, peak, total = carry
        cols = index * block_k + jnp.arange(block_k)
        col_ok = cols < key_length
        k = plgpu.load(k_ref.at[pl.ds(index * block_k, block_k), :],
                       mask=col_ok[:, None], other=0.0)
        v = plgpu.load(v_ref.at[pl.ds(index * block_k, block_k), :],
                       mask=col_ok[:, None], other=0.0)
        logits = _dot(q, k, trans_b=True) * logit_scale
        visible = _visible(static, mask_ref, start, index * block_k, row_ok, col_ok)
        logits = jnp.where(visible, logits, MASKED_LOGIT)
        new_peak = jnp.maximum(peak, jnp.max(logits, axis=1))
        correction = jnp.exp2(peak - new_peak)
        weights = jnp.where(visible, jnp.exp2(logits - new_peak[:, None]), 0.0)
        total = total * correction + jnp.sum(weights, axis=1)
        if static.threshold:
            weights = jnp.where(_kept(static, keys, index * block_k, block_k), weights, 0.0)
        acc = acc * correction[:, None] + _dot(weights.astype(v.dtype), v)
        return acc, new_peak, total

    init = (jnp.zeros((block_q, head_dim), jnp.float32),
            jnp.full((block_q,), MASKED_LOGIT, jnp.float32),
            jnp.zeros((block_q,), jnp.float32))
    acc, peak, total = jax.lax.fori_loop(0, pl.cdiv(key_length, block_k), step, init)
    seen = total > 0
    inverse_keep = VALUES / static.threshold if static.threshold else 1.0
    out = acc * (inverse_keep / jnp.where(seen, total, 1.0))[:, None]
    plgpu.store(o_ref, out.astype(o_ref.dtype), mask=row_ok[:, None])
    # Base-2 log-sum-exp; rows with nothing visible get a huge one (weights 0).
    lse = jnp.where(seen, peak + jnp.log2(jnp.where(seen, total, 1.0)), -MASKED_LOGIT)
    plgpu.store(lse_ref, lse, mask=row_ok)


def _backward_weights(static, q, k, lse, mask_ref, row_start, col_start, row_ok, col_ok):
    """float32 [bq, bk]: the softmax weights p, recomputed."""
    import jax.numpy as jnp
    from jax.experimental.pallas import triton as plgpu

    logits = _dot(q, k, trans_b=True) * (static.scale * LOG2_E)
    visible = _visible(static, mask_ref, row_start, col_start, row_ok, col_ok)
    return jnp.where(visible, jnp.exp2(logits - lse[:, None]), 0.0)


def _score_gradient(static, weights, d_weights, delta, kept):
    """dL/dlogits (without the scale) from p, dL/d(dropped p), Σ p·dp and
    the dropout mask (`_kept`, or None without dropout)."""
    import jax.numpy as jnp

    if static.threshold:
        d_weights = jnp.where(kept, d_weights * (VALUES / static.threshold), 0.0)
    return weights * (d_weights - delta[:, None])


def _key_value_gradient_kernel(q_ref, k_ref, v_ref, keys_ref, mask_ref, do_ref, lse_ref,
                               delta_ref, dk_ref, dv_ref, *, static, query_length, key_length,
                               block_q, block_k):
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    start = pl.program_id(0) * block_k
    cols = start + jnp.arange(block_k)
    col_ok = cols < key_length
    k = plgpu.load(k_ref, mask=col_ok[:, None], other=0.0)
    v = plgpu.load(v_ref, mask=col_ok[:, None], other=0.0)
    head_dim = k.shape[-1]

    def step(index, carry):
        dk, dv = carry
        rows = index * block_q + jnp.arange(block_q)
        row_ok = rows < query_length
        here = pl.ds(index * block_q, block_q)
        q = plgpu.load(q_ref.at[here, :], mask=row_ok[:, None], other=0.0)
        do = plgpu.load(do_ref.at[here, :], mask=row_ok[:, None], other=0.0)
        lse = plgpu.load(lse_ref.at[here], mask=row_ok, other=-MASKED_LOGIT)
        delta = plgpu.load(delta_ref.at[here], mask=row_ok, other=0.0)
        keys = plgpu.load(keys_ref.at[here], mask=row_ok, other=0) if static.threshold else None
        weights = _backward_weights(static, q, k, lse, mask_ref, index * block_q, start,
                                     row_ok, col_ok)
        dropped, kept = weights, None
        if static.threshold:  # one mask for dV and dK
            kept = _kept(static, keys, start, block_k)
            dropped = jnp.where(kept, weights, 0.0)
        dv = dv + _dot(dropped.astype(do.dtype), do, trans_a=True)
        d_weights = _dot(do, v, trans_b=True)
        scores = _score_gradient(static, weights, d_weights, delta, kept)
        dk = dk + _dot(scores.astype(q.dtype), q, trans_a=True)
        return dk, dv

    init = (jnp.zeros((block_k, head_dim), jnp.float32),
            jnp.zeros((block_k, head_dim), jnp.float32))
    dk, dv = jax.lax.fori_loop(0, pl.cdiv(query_length, block_q), step, init)
    inverse_keep = VALUES / static.threshold if static.threshold else 1.0
    plgpu.store(dk_ref, (dk * static.scale).astype(dk_ref.dtype), mask=col_ok[:, None])
    plgpu.store(dv_ref, (dv * inverse_keep).astype(dv_ref.dtype), mask=col_ok[:, None])


def _query_gradient_kernel(q_ref, k_ref, v_ref, keys_ref, mask_ref, do_ref, lse_ref, delta_ref,
                           dq_ref, *, static, query_length, key_length, block_q, block_k):
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    start = pl.program_id(0) * block_q
    rows = start + jnp.arange(block_q)
    row_ok = rows < query_length
    q = plgpu.load(q_ref, mask=row_ok[:, None], other=0.0)
    do = plgpu.load(do_ref, mask=row_ok[:, None], other=0.0)
    lse = plgpu.load(lse_ref, mask=row_ok, other=-MASKED_LOGIT)
    delta = plgpu.load(delta_ref, mask=row_ok, other=0.0)
    keys = plgpu.load(keys_ref, mask=row_ok, other=0) if static.threshold else None
    head_dim = q.shape[-1]

    def step(index, dq):
        cols = index * block_k + jnp.arange(block_k)
        col_ok = cols < key_length
        here = pl.ds(index * block_k, block_k)
        k = plgpu.load(k_ref.at[here, :], mask=col_ok[:, None], other=0.0)
        v = plgpu.load(v_ref.at[here, :], mask=col_ok[:, None], other=0.0)
        weights = _backward_weights(static, q, k, lse, mask_ref, start, index * block_k,
                                     row_ok, col_ok)
        d_weights = _dot(do, v, trans_b=True)
        kept = _kept(static, keys, index * block_k, block_k) if static.threshold else None
        scores = _score_gradient(static, weights, d_weights, delta, kept)
        return dq + _dot(scores.astype(k.dtype), k)

    dq = jax.lax.fori_loop(0, pl.cdiv(key_length, block_k),
                           step, jnp.zeros((block_q, head_dim), jnp.float32))
    plgpu.store(dq_ref, (dq * static.scale).astype(dq_ref.dtype), mask=row_ok[:, None])


def _mask_spec(static, mask, index_of_b):
    """(BlockSpec, array) of the kernel's mask input: int8 [Bm, 1 or T, S],
    one block per example spanning every query row and key (the kernels
    index it with absolute positions); (None, None) without a mask."""
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    if mask is None:
        return None, None
    batched = static.mask_batched
    rows, cols = mask.shape[1], mask.shape[2]
    spec = pl.BlockSpec((None, rows, cols),
                        lambda *ids: (index_of_b(*ids) if batched else 0, 0, 0))
    return spec, mask.astype(jnp.int8)


def _compiler_params(static, backward=False):
    from jax.experimental.pallas import triton as plgpu

    blocks = static.blocks
    return plgpu.CompilerParams(
        num_warps=blocks.num_warps_backward if backward else blocks.num_warps,
        num_stages=blocks.num_stages)


def _forward(static, q, k, v, keys, mask):
    """(out [B,T,N,Dh], lse [B,N,T] float32, base 2)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    b, t, n, h = q.shape
    s = k.shape[1]
    block_q = _block(static.blocks.block_q, t)
    block_k = _block(static.blocks.block_k, s)
    grid = (pl.cdiv(t, block_q), b, n)
    mask_spec, mask = _mask_spec(static, mask, lambda i, j, m: j)
    kernel = functools.partial(_forward_kernel, static=static, query_length=t, key_length=s,
                               block_q=block_q, block_k=block_k)
    in_specs = [
        pl.BlockSpec((None, block_q, None, h), lambda i, j, m: (j, i, m, 0)),
        pl.BlockSpec((None, s, None, h), lambda i, j, m: (j, 0, m, 0)),
        pl.BlockSpec((None, s, None, h), lambda i, j, m: (j, 0, m, 0)),
        pl.BlockSpec((None, None, block_q), lambda i, j, m: (j, m, i)),
        mask_spec,
    ]
    return pl.pallas_call(
        kernel,
        grid=grid,
        in_specs=in_specs,
        out_specs=[pl.BlockSpec((None, block_q, None, h), lambda i, j, m: (j, i, m, 0)),
                   pl.BlockSpec((None, None, block_q), lambda i, j, m: (j, m, i))],
        out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype),
                   jax.ShapeDtypeStruct((b, n, t), jnp.float32)],
        compiler_params=_compiler_params(static),
        interpret=static.interpret,
        name="dropout_attention_forward",
    )(q, k, v, keys, mask)


def _backward(static, q, k, v, keys, mask, out, lse, d_out):
    """(dq, dk, dv): two kernels, dK/dV by key blocks and dQ by query blocks,
    each recomputing the weights and the dropout mask."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    b, t, n, h = q.shape
    s = k.shape[1]
    block_q = _block(static.blocks.block_q_backward, t)
    block_k = _block(static.blocks.block_k_backward, s)
    # Σ_j p_j·dp_j = Σ_j w_j·(do·v_j) = do·out (w: the dropped, scaled weights).
    delta = jnp.einsum("btnh,btnh->bnt", out.astype(jnp.float32), d_out.astype(jnp.float32))

    def full_rows(i, j, m):
        return (j, 0, m, 0)

    def rows_block(i, j, m):
        return (j, i, m, 0)

    mask_spec, mask_array = _mask_spec(static, mask, lambda i, j, m: j)
    common = dict(static=static, query_length=t, key_length=s, block_q=block_q,
                  block_k=block_k)
    dk, dv = pl.pallas_call(
        functools.partial(_key_value_gradient_kernel, **common),
        grid=(pl.cdiv(s, block_k), b, n),
        in_specs=[
            pl.BlockSpec((None, t, None, h), full_rows),
            pl.BlockSpec((None, block_k, None, h), rows_block),
            pl.BlockSpec((None, block_k, None, h), rows_block),
            pl.BlockSpec((None, None, t), lambda i, j, m: (j, m, 0)),
            mask_spec,
            pl.BlockSpec((None, t, None, h), full_rows),
            pl.BlockSpec((None, None, t), lambda i, j, m: (j, m, 0)),
            pl.BlockSpec((None, None, t), lambda i, j, m: (j, m, 0)),
        ],
        out_specs=[pl.BlockSpec((None, block_k, None, h), rows_block),
                   pl.BlockSpec((None, block_k, None, h), rows_block)],
        out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype),
                   jax.ShapeDtypeStruct(v.shape, v.dtype)],
        compiler_params=_compiler_params(static, backward=True),
        interpret=static.interpret,
        name="dropout_attention_backward_dkdv",
    )(q, k, v, keys, mask_array, d_out, lse, delta)
    dq = pl.pallas_call(
        functools.partial(_query_gradient_kernel, **common),
        grid=(pl.cdiv(t, block_q), b, n),
        in_specs=[
            pl.BlockSpec((None, block_q, None, h), rows_block),
            pl.BlockSpec((None, s, None, h), full_rows),
            pl.BlockSpec((None, s, None, h), full_rows),
            pl.BlockSpec((None, None, block_q), lambda i, j, m: (j, m, i)),
            mask_spec,
            pl.BlockSpec((None, block_q, None, h), rows_block),
            pl.BlockSpec((None, None, block_q), lambda i, j, m: (j, m, i)),
            pl.BlockSpec((None, None, block_q), lambda i, j, m: (j, m, i)),
        ],
        out_specs=pl.BlockSpec((None, block_q, None, h), rows_block),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        compiler_params=_compiler_params(static, backward=True),
        interpret=static.interpret,
        name="dropout_attention_backward_dq",
    )(q, k, v, keys, mask_array, d_out, lse, delta)
    return dq, dk, dv


@functools.cache
def _flash():
    """The kernel as a `jax.custom_vjp` of (static, q, k, v, keys, mask)."""
    import jax

    @functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
    def flash(static, q, k, v, keys, mask):
        return _forward(static, q, k, v, keys, mask)[0]

    def flash_forward(static, q, k, v, keys, mask):
        out, lse = _forward(static, q, k, v, keys, mask)
        return out, (q, k, v, keys, mask, out, lse)

    def flash_backward(static, residuals, d_out):
        q, k, v, keys, mask, out, lse = residuals
        dq, dk, dv = _backward(static, q, k, v, keys, mask, out, lse, d_out)
        return dq, dk, dv, None, None

    flash.defvjp(flash_forward, flash_backward)
    return flash


def flash_dropout_attention(query, key, value, mask=None, rate=0.0, seed=0, scale=None,
                            block_sizes=None, interpret=False):
    """`reference_dropout_attention` as a fused Pallas GPU kernel (Triton).

    Forward: a program per (block of queries, batch, head) walks the keys in
    blocks, keeping a running max and sum per query (FlashAttention-2),
    dropping weights by the hash of `dropout_mask_bits`; it writes the
    output and a log-sum-exp per query, nothing of size T·S. Backward
    (`jax.custom_vjp`): Σ_j p·dp = dO·O per query in XLA, then a dK/dV
    kernel (a program per block of keys, over all queries) and a dQ kernel
    (a program per block of queries, over all keys) recompute the weights
    and the same mask. bf16 (or float32) inputs, float32 accumulation; the
    weights are cast to the input dtype before multiplying v (as
    FlashAttention does), the only difference from the reference besides
    summation order. T and S need not be multiples of the blocks: tails are
    masked. The mask is read as int8 [B or 1, 1 or T, S] blocks; key and
    value are cast to the query's dtype.

    Args:
        query: [B,T,N,Dh], Dh in `KERNEL_HEAD_DIMS`.
        key, value: [B,S,N,Dh].
        mask: bool broadcastable to [B,1,T,S] (True = attend), or None.
        rate: dropout rate in [0, 1).
        seed: an int or uint32 [2] (a SeedGenerator's `next()` under JAX).
        scale: logit scale; default 1/√Dh.
        block_sizes: a `BlockSizes`; default `BlockSizes()` (H100).
        interpret: run in Pallas' interpret mode (any device, e.g. a CPU).

    Returns:
        [B,T,N,Dh] in the query's dtype.
    """
    import jax.numpy as jnp

    _check_inputs(query, key, value, mask, rate)
    b, t, n, h = query.shape
    s = key.shape[1]
    if h not in KERNEL_HEAD_DIMS:
        raise ValueError(f"The kernel takes head widths {KERNEL_HEAD_DIMS}; received Dh={h}. "
                         "Use `reference_dropout_attention` (or `dropout_attention`, which "
                         "falls back to it).")
    scale = 1.0 / math.sqrt(h) if scale is None else float(scale)
    threshold = keep_threshold(rate) if rate > 0 else 0
    mask3 = _mask_3d(mask, b, t, s)
    kind = "none" if mask3 is None else ("keys" if mask3.shape[1] == 1 else "full")
    static = _Static(scale=scale, threshold=threshold, mask_kind=kind,
                     mask_batched=mask3 is not None and mask3.shape[0] == b,
                     blocks=block_sizes or BlockSizes(), interpret=bool(interpret))
    if threshold:
        keys = row_keys(jnp.asarray(seed_words(seed)), b, n, t)
    else:
        keys = jnp.zeros((b, n, t), jnp.uint32)
    value = value.astype(query.dtype)
    key = key.astype(query.dtype)
    return _flash()(static, query, key, value, keys, mask3)


# In-layer use (`layer_implementation`): None = automatic, else one of
# LAYER_IMPLEMENTATIONS, set by `use_layer_implementation`.
LAYER_IMPLEMENTATIONS = ("flash", "interpret", "reference", "keras")
_layer_implementation = None


def layer_implementation(head_dim):
    """How keras_hsum's attention layers drop their attention weights in a
    training step: "flash" (`flash_dropout_attention` on the GPU),
    "interpret" (the kernel in Pallas' interpret mode: tests on a CPU),
    "reference" (`reference_dropout_attention`: the same mask, written
    out) or None (Keras' own: `MultiHeadAttention`'s `Dropout` on its
    written-out weights).

    Automatic (the default): "flash" under the JAX backend where JAX's
    default backend is a GPU, `head_dim` is in `KERNEL_HEAD_DIMS` and
    `kernel_available()`, else None: on a CPU, and under TensorFlow, nothing changes.
    `use_layer_implementation` overrides it (every backend but JAX keeps
    None; "flash" and "interpret" give "reference" for head widths the
    kernel does not take)."""
    import keras

    if keras.backend.backend() != "jax":
        return None
    if _layer_implementation is not None:
        if _layer_implementation in ("flash", "interpret") and head_dim not in KERNEL_HEAD_DIMS:
            return "reference"  # the kernel's widths only; the same mask
        return None if _layer_implementation == "keras" else _layer_implementation
    import jax

    return ("flash" if jax.default_backend() == "gpu" and head_dim in KERNEL_HEAD_DIMS
            and kernel_available() else None)


def use_layer_implementation(name):
    """Sets `layer_implementation` for the steps traced from now on: one of
    `LAYER_IMPLEMENTATIONS`, or None for automatic. Returns the previous
    setting (to restore it). Read when a step is traced: a jitted step keeps
    what it was traced with."""
    global _layer_implementation
    if name is not None and name not in LAYER_IMPLEMENTATIONS:
        raise ValueError(f"The attention-dropout implementation must be one of "
                         f"{LAYER_IMPLEMENTATIONS} or None (automatic); received {name!r}.")
    previous, _layer_implementation = _layer_implementation, name
    return previous


def layer_dropout_attention(query, key, value, mask, rate, seed_generator, scale,
                            implementation):
    """`dropout_attention` as keras_hsum's layers call it in training, with
    `implementation` from `layer_implementation` (not None).

    Args:
        query, key, value, mask, rate, scale: as `reference_dropout_attention`
            (mask bool broadcastable to [B,1,T,S] or None).
        seed_generator: the layer's `keras.random.SeedGenerator` (its
            attention `Dropout`'s): advanced by one draw, as Keras' dropout
            advances it.
        implementation: "flash", "interpret" or "reference".
    """
    from keras.src.backend.jax.random import jax_draw_seed

    interpret = implementation == "interpret"
    return dropout_attention(query, key, value, mask, rate, jax_draw_seed(seed_generator),
                             scale, implementation="flash" if interpret else implementation,
                             interpret=interpret)


def dropout_attention(query, key, value, mask=None, rate=0.0, seed=0, scale=None,
                      implementation=None, interpret=False):
    """Attention with dropout on its weights: the kernel or the reference.

    Args:
        query, key, value, mask, rate, seed, scale: as
            `reference_dropout_attention`.
        implementation: "flash" (`flash_dropout_attention`), "reference",
            or None: the kernel where JAX's default backend is a GPU and
            Dh is in `KERNEL_HEAD_DIMS`, else the reference. Both give the
            same dropout mask.
        interpret: with "flash", run the kernel in Pallas' interpret mode.

    Returns:
        [B,T,N,Dh] in the query's dtype.
    """
    if implementation is None:
        import jax

        implementation = ("flash" if jax.default_backend() == "gpu"
                          and query.shape[-1] in KERNEL_HEAD_DIMS else "reference")
    if implementation == "flash":
        return flash_dropout_attention(query, key, value, mask, rate, seed, scale,
                                       interpret=interpret)
    if implementation == "reference":
        return reference_dropout_attention(query, key, value, mask, rate, seed, scale)
    raise ValueError("`implementation` must be 'flash', 'reference' or None; received "
                     f"{implementation!r}.")
