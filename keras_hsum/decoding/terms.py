"""Pluggable score terms of `keras_hsum.decoding.search`.

A beam search ranks *alive* hypotheses by their summed token log-probability
and *finished* ones by a score. A `ScoreTerm` can take part in four places,
each a method with a do-nothing default, so a term overrides only what it
needs:

1. `mask_log_probs`: block next tokens (add the large finite negative
   `NEG_INF`) before the 2·K candidates are chosen: min/max length, n-gram
   and recent-token blocking.
2. `initial_state` / `update_state`: a tuple of per-hypothesis tensors
   [B,K,...] carried through the loop and gathered with the beams (e.g. the
   accumulated paragraph attention), updated from the step's `aux`.
3. `length_penalty` (a divisor of the summed log-probability) and `score`
   (an additive bonus) give a finished hypothesis its score:
   `score(y) = log P(y|x) / Π penalties(|y|) + Σ bonuses(y)`.
4. `score_bound`: an upper bound of the term's bonus over *every* hypothesis
   the search could still finish, so early termination stays exact; a term
   that cannot bound its bonus returns `None`, which turns early
   termination off (the search then always runs `max_length` steps).
5. `check`: called once before the first step with B and V', to refuse a
   term built for another batch (a [1,P] η̂ would be broadcast) or ids
   outside the vocabulary.
6. `reads_sequences`: whether `mask_log_probs` or `update_state` read
   `StepContext.sequences`; only then does the search keep the alive
   hypotheses' tokens as a [B,K,L] buffer reordered every step (else
   `sequences` is None). True unless a term says otherwise; a class that
   overrides either method says it again itself, or is taken to read them
   (`term_reads_sequences`: a user's subclass of `MinLength` that reads
   the sequences gets them).

|y| counts the generated tokens including the EOS (BOS is not generated);
a hypothesis forced to end at `max_length` without EOS has |y| = max_length.
The length penalty must not decrease with |y| (true of |y| and GNMT's), which
early termination relies on.

Terms compose: pass a list, e.g. PHT's attention-aligned search is
`[LengthNormalization(), AttentionAlignment(eta_hat, beta=0.8),
NgramBlocking(3), RecentTokenBlocking(2, exceptions=[comma_id])]`. Terms
that take per-example tensors ([B,P]) must be built where those tensors
live (inside the same `tf.function` as the search, when tracing).
"""

import numbers
from typing import NamedTuple

from keras import ops

from keras_hsum.checks import check_int
from keras_hsum.features import PARAGRAPH_ATTENTION
from keras_hsum.features import PARAGRAPH_MASK

NEG_INF = -1e9
"""The finite "minus infinity" of blocked tokens and empty pool slots."""

DEAD = NEG_INF / 2
"""A score or log-probability at or below this is blocked (or an empty slot)."""

_EPSILON = 1e-6


class StepContext(NamedTuple):
    """What a term sees at one decoding step.

    Attributes:
        sequences: int32 [B,K,L], the alive hypotheses' tokens so far
            (positions >= `index` hold the pad id); None when no term of
            the search `reads_sequences`.
        index: int32 scalar, the position being generated (= number of
            tokens each alive hypothesis already has).
        eos_id: int, the end-of-sequence id.
        max_length: int L, the search's buffer length.
    """

    sequences: object
    index: object
    eos_id: int
    max_length: int


class ScoreTerm:
    """Base class of score terms (see the module docstring for the protocol).

    Every method has a neutral default: no state, no masking, no length
    penalty, no bonus, bound 0.
    """

    reads_sequences = True
    """Whether `mask_log_probs` / `update_state` read `context.sequences`
    (the search keeps the alive tokens as [B,K,L] only for such terms)."""

    def check(self, batch_size, vocabulary_size):
        """Raises a ValueError when the term does not fit this search: called
        once before the first step with B and V' (ints, or None where a size
        is unknown while tracing). Terms holding per-example tensors check
        their batch here: a [1,...] tensor would otherwise be broadcast over
        the batch, every example decoded with the first one's setting."""
        # A body beyond the docstring: AutoGraph cannot convert a function
        # whose only statement is a docstring and warns on every export.
        return None

    def initial_state(self, batch_size, beam_size):
        """A tuple of tensors [B,K,...]: the state of the K initial beams."""
        return ()

    def update_state(self, state, aux, context):
        """The state of each alive beam's children after this step.

        Args:
            state: this term's tuple of [B,K,...] tensors.
            aux: dict name → [B,K,...] of this step's model aux (the step
                that scores the token at `context.index`).
            context: `StepContext`.

        Returns:
            The new tuple, same shapes (all K·V children of beam k share it).
        """
        return state

    def mask_log_probs(self, log_probs, state, context):
        """float32 [B,K,V'] next-token log-probs → the same with blocks applied."""
        return log_probs

    def length_penalty(self, lengths):
        """float32 divisor of log P(y|x) for lengths [...] (None: no penalty)."""
        return None

    def score(self, state, lengths):
        """float32 [B,N] additive bonus of hypotheses with `state` [B,N,...]
        and `lengths` int32 [B,N] (None: no bonus)."""
        return None

    def score_bound(self, batch_size, max_length):
        """Upper bound of `score` over all hypotheses: float32 [B,1] or a
        Python float; None if there is none (disables early termination)."""
        return 0.0


def term_reads_sequences(term):
    """Whether the search must give `term` the alive sequences: the
    `reads_sequences` of the most derived class that sets it, unless a class
    below that one overrides `mask_log_probs` or `update_state` without
    setting it again (a subclass of a term that does not read them, whose
    new method may): such a term is taken to read them."""
    if "reads_sequences" in vars(term):  # set on the instance
        return bool(term.reads_sequences)
    for cls in type(term).__mro__:
        if "reads_sequences" in vars(cls):
            return bool(cls.reads_sequences)
        if "mask_log_probs" in vars(cls) or "update_state" in vars(cls):
            return True
    return True


def _block(log_probs, blocked):
    """`log_probs` with `NEG_INF` where `blocked` (bool, broadcastable)."""
    return ops.where(blocked, ops.cast(NEG_INF, log_probs.dtype), log_probs)


def _check_batch(term, name, value, batch_size, symbols):
    """Raises unless the per-example `value`'s axis 0 is B (when both are known)."""
    shape = getattr(value, "shape", None)
    if value is None or batch_size is None or shape is None or len(shape) == 0:
        return
    if shape[0] is not None and int(shape[0]) != int(batch_size):
        raise ValueError(
            f"{term}: `{name}` must be {symbols} for the search's B={int(batch_size)} "
            f"examples, received shape {tuple(shape)}: build the term from this "
            "batch's features."
        )


def _vocab_ids(log_probs):
    return ops.arange(ops.shape(log_probs)[-1], dtype="int32")


class LengthNormalization(ScoreTerm):
    """Divides a finished hypothesis' log P(y|x) by a length penalty.

    `alpha=None` divides by |y| (PHT's Eq. 17); a float `alpha` uses GNMT's
    lp(y) = ((5 + |y|) / 6)^alpha (Wu et al. 2016, Eq. 14; tf-models'
    `sequence_beam_search` `alpha`). |y| includes the EOS.

    Args:
        alpha: None, or the GNMT exponent (0 = no normalisation).
    """

    reads_sequences = False

    def __init__(self, alpha=None):
        if alpha is not None and (isinstance(alpha, bool) or not isinstance(alpha, numbers.Real)):
            raise ValueError(
                f"LengthNormalization: alpha must be None or a number, received {alpha!r}."
            )
        self.alpha = alpha

    def length_penalty(self, lengths):
        lengths = ops.cast(lengths, "float32")
        if self.alpha is None:
            return ops.maximum(lengths, 1.0)
        return ops.power((5.0 + lengths) / 6.0, float(self.alpha))


class MinLength(ScoreTerm):
    """Blocks EOS at positions < `min_length`: every finished hypothesis has
    at least `min_length` tokens before its EOS (|y| >= min_length + 1).

    Args:
        min_length: int.
    """

    reads_sequences = False

    def __init__(self, min_length):
        self.min_length = check_int("min_length", min_length, 0, owner="MinLength")

    def mask_log_probs(self, log_probs, state, context):
        early = ops.less(context.index, self.min_length)
        is_eos = ops.equal(_vocab_ids(log_probs), context.eos_id)
        return _block(log_probs, ops.logical_and(early, is_eos))


class MaxLength(ScoreTerm):
    """Hypotheses end with EOS after at most `max_length` tokens (EOS
    included): at position `max_length - 1` every token but EOS is blocked.
    Shorter than the search's own `max_length` (the buffer length L, where a
    hypothesis is cut without EOS).

    Args:
        max_length: int, or int [B] for a length per example.
    """

    reads_sequences = False

    def __init__(self, max_length):
        self.max_length = max_length

    def check(self, batch_size, vocabulary_size):
        limit = ops.convert_to_tensor(self.max_length, "int32")
        if len(limit.shape) > 1:
            raise ValueError(
                f"MaxLength: `max_length` must be an int or int [B], received shape "
                f"{tuple(limit.shape)}."
            )
        _check_batch("MaxLength", "max_length", limit, batch_size, "an int or int [B]")

    def mask_log_probs(self, log_probs, state, context):
        limit = ops.convert_to_tensor(self.max_length, "int32")
        if len(limit.shape) == 1:
            limit = limit[:, None, None]  # [B,1,1]
        at_limit = ops.greater_equal(context.index, limit - 1)
        not_eos = ops.not_equal(_vocab_ids(log_probs), context.eos_id)
        return _block(log_probs, ops.logical_and(at_limit, not_eos))


class TokenBlocking(ScoreTerm):
    """Never generates the given token ids (e.g. SentencePiece's unknown
    piece, which detokenizes to " ⁇ ").

    Args:
        ids: a sequence of int token ids.
    """

    reads_sequences = False

    def __init__(self, ids):
        self.ids = tuple(int(i) for i in ids)
        if any(i < 0 for i in self.ids):
            raise ValueError(f"TokenBlocking: ids must be >= 0, received {self.ids}.")

    def check(self, batch_size, vocabulary_size):
        outside = [i for i in self.ids if vocabulary_size is not None and i >= vocabulary_size]
        if outside:
            raise ValueError(
                f"TokenBlocking: ids {outside} are not among the model's "
                f"{vocabulary_size} token ids, so blocking them would do nothing."
            )

    def mask_log_probs(self, log_probs, state, context):
        if not self.ids:
            return log_probs
        vocab = _vocab_ids(log_probs)
        blocked = ops.any(
            ops.equal(vocab[:, None], ops.convert_to_tensor(self.ids, "int32")[None, :]),
            axis=-1,
        )
        return _block(log_probs, blocked)


class NgramBlocking(ScoreTerm):
    """No n-gram appears twice in a hypothesis: a candidate token that would
    complete an n-gram already present gets `NEG_INF` (Paulus et al. 2018;
    PHT §5.2 blocks trigrams).

    For the candidate at position i, the (n−1)-gram y[i−n+1:i] is compared
    with every earlier window y[j:j+n−1] (j + n − 1 < i); the token y[j+n−1]
    that followed each match is blocked. Costs O(B·K·L·n) per step.

    Args:
        n: int >= 1, the n-gram size (3 = trigram).
    """

    def __init__(self, n=3):
        self.n = check_int("n", n, 1, owner="NgramBlocking")

    def mask_log_probs(self, log_probs, state, context):
        n = self.n
        seqs = context.sequences  # [B,K,L]
        length = context.max_length
        if length < n:
            return log_probs
        index = ops.cast(context.index, "int32")
        batch, beams = ops.shape(seqs)[0], ops.shape(seqs)[1]
        starts = ops.arange(length - n + 1, dtype="int32")  # j
        # earlier full n-grams only: they end (j + n - 1) before position i
        match = ops.less(starts + n - 1, index)[None, None, :]  # [1,1,J]
        for m in range(n - 1):
            window = seqs[:, :, m : m + length - n + 1]  # y[j+m], [B,K,J]
            # y[i-n+1+m]: the m-th token of the current (n-1)-gram
            position = ops.clip(index - n + 1 + m, 0, length - 1)
            current = ops.take(seqs, position, axis=2)[:, :, None]  # [B,K,1]
            match = ops.logical_and(match, ops.equal(window, current))
        followers = seqs[:, :, n - 1 :]  # y[j+n-1], [B,K,J]
        match = ops.logical_and(match, ops.ones_like(followers, dtype="bool"))
        vocab = ops.shape(log_probs)[-1]
        rows = ops.arange(batch * beams, dtype="int32")[:, None]  # [BK,1]
        flat = ops.reshape(rows * vocab + ops.reshape(followers, (batch * beams, -1)), (-1, 1))
        counts = ops.scatter(
            flat,
            ops.reshape(ops.cast(match, "float32"), (-1,)),
            (batch * beams * vocab,),
        )
        blocked = ops.reshape(counts > 0, ops.shape(log_probs))
        return _block(log_probs, blocked)


class RecentTokenBlocking(ScoreTerm):
    """Blocks a repeat of any of the last `window` generated tokens, except
    `exceptions` (PHT §5.2: "block two tokens (except commas) before the
    current step to prevent degeneration").

    Args:
        window: int, how many previous tokens are blocked (PHT: 2).
        exceptions: iterable of token ids that may repeat (e.g. the comma).
    """

    def __init__(self, window=2, exceptions=()):
        self.window = check_int("window", window, 1, owner="RecentTokenBlocking")
        self.exceptions = tuple(
            check_int("exceptions", i, 0, owner="RecentTokenBlocking") for i in exceptions
        )

    def mask_log_probs(self, log_probs, state, context):
        index = ops.cast(context.index, "int32")
        ids = _vocab_ids(log_probs)
        blocked = ops.zeros(ops.shape(log_probs), "bool")
        length = context.max_length
        for back in range(1, self.window + 1):
            position = index - back
            token = ops.take(context.sequences, ops.clip(position, 0, length - 1), axis=2)
            hit = ops.logical_and(
                ops.equal(ids[None, None, :], token[:, :, None]), position >= 0
            )
            blocked = ops.logical_or(blocked, hit)
        for exception in self.exceptions:
            blocked = ops.logical_and(blocked, ops.not_equal(ids, exception))
        return _block(log_probs, blocked)


def _paragraph_valid(mask, like):
    """bool [B,1,P] real-paragraph mask (all True when `mask` is None)."""
    if mask is None:
        return ops.ones_like(like, dtype="bool")[:, :1]
    return ops.cast(mask, "bool")[:, None, :]


class _AccumulatedAttention(ScoreTerm):
    """Shared state of the attention terms: Σ_t aux[aux_key] [B,K,P]."""

    reads_sequences = False

    def __init__(self, num_paragraphs, aux_key=PARAGRAPH_ATTENTION, paragraph_mask=None):
        self.num_paragraphs = num_paragraphs
        self.aux_key = aux_key
        self.paragraph_mask = paragraph_mask

    def check(self, batch_size, vocabulary_size):
        _check_batch(type(self).__name__, PARAGRAPH_MASK, self.paragraph_mask, batch_size,
                     "bool [B,P]")

    def _step_attention(self, aux):
        if self.aux_key not in aux:
            raise ValueError(
                f"{type(self).__name__}: the model's step aux has no "
                f"`{self.aux_key}`; received keys {sorted(aux)}. Pass "
                "aux_key= naming a float [B,P] per-step attention entry."
            )
        attention = ops.cast(aux[self.aux_key], "float32")
        width = attention.shape[-1]
        if (isinstance(self.num_paragraphs, int) and width is not None
                and int(width) != self.num_paragraphs):
            raise ValueError(
                f"{type(self).__name__} is set for P={self.num_paragraphs} paragraphs, "
                f"but the model's step aux `{self.aux_key}` has P={int(width)} (its last "
                "axis): build the term from this batch's features (e.g. η̂ [B,P] of "
                "the same inputs)."
            )
        return attention

    def initial_state(self, batch_size, beam_size):
        return (ops.zeros((batch_size, beam_size, self.num_paragraphs), "float32"),)

    def update_state(self, state, aux, context):
        return (state[0] + self._step_attention(aux),)


class CoveragePenalty(_AccumulatedAttention):
    """GNMT's coverage penalty on paragraphs: β·Σ_p log min(Σ_t a_{t,p}, 1)
    (Wu et al. 2016, Eq. 14; PHT Eq. 11).

    a_{t,p} is the step's aux `aux_key` (default `"paragraph_attention"`
    [B,P]; a model-specific per-step attention such as DiscourseSummarizer's
    word-level `"attention"` [B,P·T] works the same with its own
    `num_paragraphs`). With `normalize_steps` each step's row is first
    divided by its sum over real positions, so that Σ_p a_{t,p} = 1 as GNMT
    assumes (PHT's aux sums to the number of decoder layers). Padded
    paragraphs (`paragraph_mask` False) contribute 0; log is floored at
    log(1e-6). The bonus is <= 0, so its bound is 0 (β >= 0; a β < 0 turns
    early termination off).

    Args:
        num_paragraphs: int P (the aux entry's last dimension).
        beta: float >= 0.
        paragraph_mask: optional bool [B,P].
        aux_key: the aux entry to accumulate.
        normalize_steps: bool.
    """

    reads_sequences = False

    def __init__(self, num_paragraphs, beta=0.2, paragraph_mask=None,
                 aux_key=PARAGRAPH_ATTENTION, normalize_steps=True):
        super().__init__(num_paragraphs, aux_key, paragraph_mask)
        self.beta = float(beta)
        self.normalize_steps = normalize_steps

    def score_bound(self, batch_size, max_length):
        # The bonus β·Σ log min(·, 1) is <= 0 for β >= 0; for β < 0 it is a
        # reward without a bound here, so early termination turns off.
        return None if self.beta < 0 else 0.0

    def update_state(self, state, aux, context):
        attention = self._step_attention(aux)
        if self.normalize_steps:
            valid = ops.cast(_paragraph_valid(self.paragraph_mask, attention), "float32")
            attention = attention * valid
            total = ops.sum(attention, axis=-1, keepdims=True)
            attention = attention / ops.maximum(total, _EPSILON)
        return (state[0] + attention,)

    def score(self, state, lengths):
        coverage = ops.minimum(state[0], 1.0)
        logs = ops.log(ops.maximum(coverage, _EPSILON))
        valid = _paragraph_valid(self.paragraph_mask, state[0])
        return self.beta * ops.sum(ops.where(valid, logs, 0.0), axis=-1)


class AttentionAlignment(_AccumulatedAttention):
    """PHT's attention-alignment bonus (Ma et al., Eqs. 15, 17, 18):
    β·Σ_p log min(η_p(y), η̂_p).

    η(y) is the hypothesis' paragraph attention summed over its steps and
    normalised over the real paragraphs (Eq. 15 applied to the generated
    summary); η̂ [B,P] is the predicted optimal distribution
    (`AttentionPredictor`). Combine with `LengthNormalization()` for Eq. 17.
    Padded paragraphs contribute 0; min(·) is floored at 1e-6 before the log.
    Bound: min(η, η̂) <= η̂, so the bonus is <= β·Σ_p log η̂_p (β >= 0).

    Args:
        eta_hat: float [B,P], η̂ (a distribution over the real paragraphs).
        beta: float >= 0 (PHT: 0.8). β = 0 leaves the ranking unchanged.
        paragraph_mask: optional bool [B,P]; default: the paragraphs with
            η̂ > 0 are real.
        aux_key: the per-step attention in the model's aux.
    """

    def __init__(self, eta_hat, beta=0.8, paragraph_mask=None,
                 aux_key=PARAGRAPH_ATTENTION):
        eta_hat = ops.cast(eta_hat, "float32")
        if len(eta_hat.shape) != 2:
            raise ValueError(
                f"{type(self).__name__}: η̂ must be float [B,P], received shape "
                f"{tuple(eta_hat.shape)}."
            )
        if paragraph_mask is None:
            paragraph_mask = ops.greater(eta_hat, 0.0)
        super().__init__(eta_hat.shape[-1], aux_key, paragraph_mask)
        self.eta_hat = eta_hat
        self.beta = float(beta)

    def check(self, batch_size, vocabulary_size):
        _check_batch(type(self).__name__, "eta_hat", self.eta_hat, batch_size, "float [B,P]")
        super().check(batch_size, vocabulary_size)

    def _alignment(self, eta):
        valid = _paragraph_valid(self.paragraph_mask, eta)
        floor = ops.log(ops.maximum(ops.minimum(eta, self.eta_hat[:, None, :]), _EPSILON))
        return ops.sum(ops.where(valid, floor, 0.0), axis=-1)

    def score(self, state, lengths):
        accumulated = state[0]
        valid = _paragraph_valid(self.paragraph_mask, accumulated)
        accumulated = ops.where(valid, accumulated, 0.0)
        total = ops.sum(accumulated, axis=-1, keepdims=True)
        eta = accumulated / ops.maximum(total, _EPSILON)
        return self.beta * self._alignment(eta)

    def score_bound(self, batch_size, max_length):
        if self.beta < 0:
            return None
        return self.beta * self._alignment(self.eta_hat[:, None, :])  # [B,1]


class ExtractiveAlignment(AttentionAlignment):
    """PHT's extProb baseline (§6): attention alignment whose η̂ is the
    extractive probabilities of the paragraphs normalised over the real
    paragraphs, η̂_p = s_p / Σ_q s_q (s: `ParagraphRanker` scores in (0,1),
    0 on padded paragraphs).

    Args:
        ranker_scores: float [B,P] >= 0.
        beta, paragraph_mask, aux_key: as `AttentionAlignment`.
    """

    def __init__(self, ranker_scores, beta=0.8, paragraph_mask=None,
                 aux_key=PARAGRAPH_ATTENTION):
        scores = ops.maximum(ops.cast(ranker_scores, "float32"), 0.0)
        if paragraph_mask is not None:
            scores = ops.where(ops.cast(paragraph_mask, "bool"), scores, 0.0)
        eta_hat = scores / ops.maximum(ops.sum(scores, axis=-1, keepdims=True), _EPSILON)
        super().__init__(eta_hat, beta=beta, paragraph_mask=paragraph_mask, aux_key=aux_key)


class StructuralCoverage(_AccumulatedAttention):
    """PHT's strCov baseline (§6, Eq. 13, after Li et al. 2018): β times the
    mean over the generated tokens of strCov(α_t) = 1 − Σ_p min(α_{t,p},
    Σ_{t'<t} α_{t',p}).

    Our reading of PHT's word-by-word adaptation: α_t is the paragraph
    attention of the step that generated token t, normalised over the real
    paragraphs; strCov(α_t) ∈ [0,1] rewards a token that attends to
    paragraphs not yet attended. The per-token values are averaged over |y|
    (the same scale as the length-normalised log-probability; PHT does not
    say how it aggregates). Bound: the bonus is <= β (β >= 0).

    Args:
        num_paragraphs: int P.
        beta: float >= 0.
        paragraph_mask: optional bool [B,P].
        aux_key: the per-step attention in the model's aux.
    """

    reads_sequences = False

    def __init__(self, num_paragraphs, beta=1.0, paragraph_mask=None,
                 aux_key=PARAGRAPH_ATTENTION):
        super().__init__(num_paragraphs, aux_key, paragraph_mask)
        self.beta = float(beta)

    def initial_state(self, batch_size, beam_size):
        return (
            ops.zeros((batch_size, beam_size, self.num_paragraphs), "float32"),
            ops.zeros((batch_size, beam_size), "float32"),
        )

    def update_state(self, state, aux, context):
        coverage, total = state
        attention = self._step_attention(aux)
        valid = ops.cast(_paragraph_valid(self.paragraph_mask, attention), "float32")
        attention = attention * valid
        attention = attention / ops.maximum(
            ops.sum(attention, axis=-1, keepdims=True), _EPSILON
        )
        step = 1.0 - ops.sum(ops.minimum(attention, coverage), axis=-1)
        return (coverage + attention, total + step)

    def score(self, state, lengths):
        lengths = ops.maximum(ops.cast(lengths, "float32"), 1.0)
        return self.beta * state[1] / lengths

    def score_bound(self, batch_size, max_length):
        return None if self.beta < 0 else self.beta


__all__ = [
    "NEG_INF",
    "AttentionAlignment",
    "CoveragePenalty",
    "ExtractiveAlignment",
    "LengthNormalization",
    "MaxLength",
    "MinLength",
    "NgramBlocking",
    "RecentTokenBlocking",
    "ScoreTerm",
    "StepContext",
    "StructuralCoverage",
    "TokenBlocking",
]
