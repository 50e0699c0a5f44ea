"""Ancestral sampling for `keras_hsum.decoding.search`: K independent samples.

With `search(..., sampling=Sampling(...))` each of the K slots of an example
is one sample: at every position each alive sample draws its next token
from the model's distribution after the score terms' blocking, tempered and
truncated by the `Sampling` settings (in this order, as Hugging Face's
logits warpers apply them):

1. temperature T: p_T(v) ∝ p(v)^(1/T);
2. top-k: keep the k most probable tokens of p_T (ties at the k-th stay);
3. top-p (nucleus, Holtzman et al. 2020): keep the most probable tokens
   whose cumulative mass, counted before each, is below p;
4. epsilon (Hewitt et al. 2022; Freitag et al. 2023 use it for MBR): keep
   the tokens of probability >= ε (the most probable token always stays);

each filter reading the distribution the filters before it left,
renormalised (so after top-k, top-p counts the mass of the k tokens only);
then renormalise the kept tokens and draw one by inverse transform
sampling: with u ~ U(0, 1) and F the cumulative distribution in vocabulary
order, the token is the number of ids v with F(v) < u · F(V - 1).

The uniforms u [B, K, L] are made once, before the loop, by a counter-based
generator: element i of the flattened buffer is
fmix32(i · 0x9E3779B9 XOR fmix32(seed + 0x9E3779B9)), with fmix32
MurmurHash3's 32-bit finalizer (a bijection with full avalanche), its top
23 bits x giving u = (x + 1/2) / 2^23 in (0, 1), exact in float32. Unlike
the backends' own random ops (TensorFlow's stateless kernels draw other
numbers under XLA than eagerly), these integer operations give the same
bits in TensorFlow eager, XLA, JAX and numpy, so the same inputs in the
same batch give the same samples everywhere, and a SavedModel holds no
random state.

A sample's `log_probs` is Σ log p(y_t) under the blocked but *untempered*
model distribution, its score that plus the terms (length normalisation,
...), as for beam hypotheses, so samples rank by the model; `mbr_rerank`
instead picks the sample that agrees most with the others (sampling-based
MBR, Eikema & Aziz 2020).
"""

import dataclasses

from keras import ops

from keras_hsum.decoding.terms import DEAD  # a blocked id's log-prob bound
from keras_hsum.decoding.terms import NEG_INF
from keras_hsum.decoding.top_k import blocked_top_k

_GOLDEN = 0x9E3779B9


def _uint32(value):
    return ops.cast(value, "uint32")


def _fmix32(x):
    """MurmurHash3's finalizer on uint32 (multiplications wrap mod 2^32)."""
    x = ops.bitwise_xor(x, ops.right_shift(x, _uint32(16)))
    x = ops.multiply(x, _uint32(0x85EBCA6B))
    x = ops.bitwise_xor(x, ops.right_shift(x, _uint32(13)))
    x = ops.multiply(x, _uint32(0xC2B2AE35))
    return ops.bitwise_xor(x, ops.right_shift(x, _uint32(16)))


def hashed_uniforms(shape, seed, stream=None, first_row=None):
    """float32 `shape` uniforms in (0, 1) from the counter-based generator of
    the module docstring (sizes may be scalar tensors).

    `stream`, an optional integer scalar (a tensor: e.g. the optimizer's
    step), is mixed into the key, fmix32(key XOR fmix32(stream · 0x9E3779B9
    XOR 0x85EBCA77)), so that one seed gives a new, still reproducible
    buffer for every stream value (training draws new samples each step).

    `first_row`, an optional integer scalar, starts the counter at row
    `first_row` of the leading axis: the result is rows `first_row, ...` of
    the buffer of a larger leading size, so that a replica holding rows
    r..r+b of a global batch draws what one device draws for them."""
    count = 1
    for size in shape:
        count = count * size
    index = _uint32(ops.arange(count, dtype="int32"))
    if first_row is not None:
        row_size = 1
        for size in shape[1:]:
            row_size = row_size * size
        index = index + _uint32(first_row) * _uint32(row_size)
    key = _fmix32(_uint32((int(seed) + _GOLDEN) & 0xFFFFFFFF))
    if stream is not None:
        mixed = ops.bitwise_xor(
            ops.multiply(_uint32(stream), _uint32(_GOLDEN)), _uint32(0x85EBCA77)
        )
        key = _fmix32(ops.bitwise_xor(key, _fmix32(mixed)))
    bits = _fmix32(ops.bitwise_xor(ops.multiply(index, _uint32(_GOLDEN)), key))
    top = ops.cast(ops.right_shift(bits, _uint32(9)), "float32")
    return ops.reshape((top + 0.5) * (1.0 / 8388608.0), shape)


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How `search` samples (see the module docstring).

    Attributes:
        temperature: T > 0 (1: the model's distribution).
        top_k: keep the k most probable tokens (0: off).
        top_p: nucleus mass in (0, 1] (1: off).
        epsilon: drop tokens below this probability, in [0, 1) (0: off).
        seed: integer seed of the uniforms.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    epsilon: float = 0.0
    seed: int = 0

    def __post_init__(self):
        problems = []
        if not self.temperature > 0:
            problems.append(f"temperature > 0 (received {self.temperature})")
        if int(self.top_k) != self.top_k or self.top_k < 0:
            problems.append(f"top_k an integer >= 0 (received {self.top_k})")
        if not 0 < self.top_p <= 1:
            problems.append(f"top_p in (0, 1] (received {self.top_p})")
        if not 0 <= self.epsilon < 1:
            problems.append(f"epsilon in [0, 1) (received {self.epsilon})")
        if int(self.seed) != self.seed:
            problems.append(f"an integer seed (received {self.seed!r})")
        if problems:
            raise ValueError("Sampling expects " + "; ".join(problems) + ".")

    def truncate(self, log_probs):
        """float [..., V] log-probabilities (blocked ids at `NEG_INF`) →
        the log-probabilities of the tempered, truncated and renormalised
        sampling distribution (dropped ids at `NEG_INF`)."""
        log_probs = ops.cast(log_probs, "float32")
        blocked = log_probs <= DEAD
        # Blocking leaves the allowed ids' mass below 1: renormalise first.
        log_probs = ops.where(
            blocked, NEG_INF, ops.log_softmax(log_probs / float(self.temperature), axis=-1)
        )
        probs = ops.exp(log_probs)  # exactly 0 where blocked
        keep = ops.logical_not(blocked)

        def renormalised(probs, keep):
            # What the next filter reads: the kept tokens' distribution.
            kept = ops.where(keep, probs, 0.0)
            return kept / ops.maximum(ops.sum(kept, axis=-1, keepdims=True), 1e-30)

        if self.top_k:
            k = int(self.top_k)
            if probs.shape[-1] is not None:
                k = min(k, probs.shape[-1])  # k beyond the vocabulary keeps all
            # In blocks where a GPU is visible, as the search's rows (the
            # same values); one top_k elsewhere.
            kth = blocked_top_k(probs, k)[0][..., -1:]
            keep = ops.logical_and(keep, probs >= kth)  # ties at the k-th stay
            probs = renormalised(probs, keep)
        if self.top_p < 1:
            ordered = ops.flip(ops.sort(probs, axis=-1), axis=-1)  # descending
            before = ops.cumsum(ordered, axis=-1) - ordered
            # The smallest probability still inside the nucleus.
            inside = before < float(self.top_p)
            threshold = ops.min(ops.where(inside, ordered, 2.0), axis=-1, keepdims=True)
            keep = ops.logical_and(keep, probs >= threshold)
            probs = renormalised(probs, keep)
        if self.epsilon > 0:
            best = ops.max(probs, axis=-1, keepdims=True)
            keep = ops.logical_and(
                keep, ops.logical_or(probs >= float(self.epsilon), probs >= best)
            )
        kept = ops.where(keep, log_probs, NEG_INF)
        return ops.where(keep, ops.log_softmax(kept, axis=-1), NEG_INF)

    def uniforms(self, shape, stream=None, first_row=None):
        """The uniforms in (0, 1) of a whole search (`hashed_uniforms`)."""
        return hashed_uniforms(shape, self.seed, stream, first_row)

    def draw(self, log_probs, uniforms):
        """Inverse transform sampling.

        Args:
            log_probs: float [..., V], the model's log-probabilities after
                blocking (`NEG_INF`).
            uniforms: float [...] in (0, 1).

        Returns:
            int32 [...]: the drawn ids (never a blocked or truncated id
            while any id is allowed).
        """
        cdf = ops.cumsum(ops.exp(self.truncate(log_probs)), axis=-1)  # 0-steps where dropped
        target = ops.cast(uniforms, "float32")[..., None] * cdf[..., -1:]
        token = ops.sum(ops.cast(cdf < target, "int32"), axis=-1)
        return ops.minimum(token, ops.shape(cdf)[-1] - 1)
