"""One in-graph beam search (keras.ops) with alive/finished pools and score terms.

`search` runs over any step function; `beam_search` and `greedy_search`
drive a `Summarizer` through its decoding contract
(`keras_hsum.models.summarizer`). The whole search is one `ops.while_loop`
over fixed-shape buffers, so it compiles under `tf.function(jit_compile=True)`
and `jax.jit`: an outer loop that checks whether the search can stop, once
every N = `stop_check_every` positions (default 8), around an inner
`ops.fori_loop` of N positions whose trip count is static (or, with
`stop_check_every=None`, one static loop over all positions). On a GPU the
condition of a loop without a static trip count is read back to the host
at every iteration: once per N tokens instead of once per token.

Algorithm (the tensor2tensor / tf-models beam search, generalised to terms):
at position i every alive beam (log-prob s_k) proposes s_k + log p(v) for
every token v, after the terms have blocked tokens (`NEG_INF`). The best
2·K of the K·V' candidates are kept (the best 2·K of each beam by a top-k,
then ranked among themselves by counting: `ranked_candidates`, the same
candidates in the same order as one top-k over K·V'); those ending in EOS
(or reaching `max_length`) are scored, `score = s / Π length_penalty(|y|) + Σ bonus(y)`,
and merged into the *finished* pool (best K by score); the best K others
become the new *alive* pool (ranked by log-prob). The loop stops at
`max_length`, or once, for every example, the finished pool is full and its
worst score is >= an upper bound on what any alive beam could still reach:
`max_k s_k / max Π length_penalty(|y|) + Σ score_bound`, the largest penalty
taken over the lengths still reachable (log-probs only decrease and are
<= 0; a penalty may shrink with |y|, as GNMT's with alpha < 0 does). A term
without a bound turns this off.

Checking the stop only every N positions (or never) returns what checking
it at every position returns. Once an example is done, its alive pool is
empty or its finished pool is full with a worst score >= the bound, and
the bound is an upper bound of the score of every hypothesis that could
still finish: a later candidate scores <= the worst finished score, and in
the merge (a top-k over the finished scores followed by the new ones) a tie
keeps the old entry, which comes first; so the finished pool no longer
changes, however many positions run. (Checking at every position already
relied on this: the loop runs until every example of the batch is done.)
Positions past L - 1 in the last chunk run position L - 1 again, where
every alive beam has ended and no candidate may finish.

What the loop carries (issue 57: few kernels per token on an accelerator):
no hypothesis is copied whole. Each position writes one column of a
history: each candidate's and each new alive beam's (parent beam, token),
each candidate's rank, score (`NEG_INF` unless it finished) and log-prob,
and the step's aux of each alive beam; only the alive log-probs, the
terms' states and the model's state are reordered, and the alive tokens as
a [B,K,L] buffer only for terms that read them (`ScoreTerm.reads_sequences`,
e.g. n-gram blocking). After the loop the finished pool is the best K, by
score, of the K empty slots it starts with followed by every finished
candidate in the order they arrived (position, then rank): one top-k, where
equal scores keep the earlier, which is what merging each position's
candidates into a pool of K keeps. Its tokens and aux are read back through
the parent pointers (`backtrack`, pointer doubling: ⌈log2 L⌉ rounds of
gathers). The condition finds the pool's worst score by a top-k over the
finished scores so far.

Sampling (`search(..., sampling=Sampling(...))`, `sample_search`) reuses
the same loop and pools with K independent samples in place of the beam:
all K start alive, each extends itself by one token drawn from its own
blocked (tempered, truncated) distribution (`keras_hsum.decoding.sampling`),
and the loop runs until every sample has ended.

Blocked and empty slots hold the finite `NEG_INF` (-1e9), never inf; a slot
whose score is <= NEG_INF / 2 is empty (only when the candidate space is
exhausted, e.g. every token blocked).
"""

import numbers

import keras
import numpy as np
from keras import ops

from keras_hsum.checks import check_int
from keras_hsum.decoding.sampling import Sampling
from keras_hsum.decoding.terms import DEAD
from keras_hsum.decoding.terms import NEG_INF
from keras_hsum.decoding.terms import MinLength
from keras_hsum.decoding.terms import ScoreTerm
from keras_hsum.decoding.terms import StepContext
from keras_hsum.decoding.terms import term_reads_sequences
from keras_hsum.decoding.top_k import blocked_top_k
from keras_hsum.layers.input_checks import check_model_features


def _term_list(terms, caller):
    """`terms` as a list of `ScoreTerm`s, or a ValueError naming the odd one."""
    if isinstance(terms, ScoreTerm):
        raise ValueError(
            f"{caller}: `terms` must be a list of ScoreTerms; received one "
            f"{type(terms).__name__}: pass [{type(terms).__name__}(...)]."
        )
    try:
        terms = list(terms)
    except TypeError:
        raise ValueError(
            f"{caller}: `terms` must be a list of ScoreTerms; received "
            f"{type(terms).__name__}."
        ) from None
    for index, term in enumerate(terms):
        if not isinstance(term, ScoreTerm):
            raise ValueError(
                f"{caller}: `terms` must be a list of ScoreTerms "
                f"(keras_hsum.decoding.terms); item {index} is a {type(term).__name__}."
            )
    return terms


STOP_CHECK_EVERY = 8
"""`search`'s default N: check whether to stop once every 8 positions."""


def check_stop_check_every(value, caller):
    """`value` as a Python int >= 1 or None, or a ValueError naming it."""
    return check_int("stop_check_every", value, 1, owner=caller, allow_none=True,
                     hint=" (None: never stop early, a static trip count)")


def _flatten_aux(aux):
    """dict → (sorted names, tuple of tensors)."""
    names = tuple(sorted(aux))
    return names, tuple(aux[name] for name in names)


def _split_beams(x, beam_size):
    """[B·K,...] → [B,K,...]."""
    return ops.reshape(x, (-1, beam_size) + tuple(ops.shape(x)[1:]))


def gather_beams(x, parents):
    """x [B,N,...], parents int32 [B,M] → [B,M,...]: x[b, parents[b, m]]."""
    batch = ops.shape(x)[0]
    width = ops.shape(x)[1]
    flat = ops.reshape(x, (-1,) + tuple(ops.shape(x)[2:]))
    offsets = ops.arange(batch, dtype="int32")[:, None] * width
    picked = ops.take(flat, ops.reshape(parents + offsets, (-1,)), axis=0)
    return ops.reshape(picked, (batch, -1) + tuple(ops.shape(x)[2:]))


def ranked_candidates(totals, count, beam_size=None):
    """Each beam's best `count` candidates, and the rank of each among all
    of them in the order of one `top_k` over the flattened [B, K·V'] scores.

    A top-k over K·V' elements in one row is the slowest kernel of a decode
    step on a GPU, so this takes the best C' = min(`count`, V') of each beam
    ([B,K,V'] → [B,K,C'], `blocked_top_k` of rows of V') and ranks those K·C' by
    counting, for each, the candidates ahead of it: a higher score, or an
    equal score and a lower index in the order k·C' + j. The best `count`
    of all K·V' are among them (one of them has fewer than `count`
    candidates ahead of it, so fewer in its own beam), and their ranks are
    their places in the flat top-k's order: `top_k` puts the lower index
    first among equals in every backend, which within a beam is the lower
    token id and across beams the lower beam, as in the flat order k·V' + v.

    Args:
        totals: float32 [B,K,V'], the candidates' summed log-probabilities.
        count: C (a Python int); V' must be >= C where it is not static.
        beam_size: K (a Python int) where the static shape of `totals`
            may not hold it (a graph traced with unknown dimensions, e.g.
            an exported model's search); None reads it from `totals`.

    Returns:
        `(values float32 [B,K·C'], tokens int32 [B,K·C'], ranks int32
        [B,K·C'], C')`: candidate k·C' + j is beam k's j-th best (its
        parent is its index // C'); ranks are a permutation of 0..K·C' - 1.
    """
    beams = totals.shape[1] if beam_size is None else beam_size
    vocabulary = totals.shape[-1]
    width = count if vocabulary is None else min(count, int(vocabulary))
    values, tokens = blocked_top_k(totals, width)  # [B,K,C'], best first in each beam
    values = ops.reshape(values, (-1, beams * width))
    tokens = ops.reshape(tokens, (-1, beams * width))
    order = np.arange(beams * width)
    earlier = ops.convert_to_tensor(order[:, None] < order[None, :])  # a constant
    ahead = ops.logical_or(  # [B, other, candidate]: other is ahead of candidate
        values[:, :, None] > values[:, None, :],
        ops.logical_and(values[:, :, None] == values[:, None, :], earlier))
    ranks = ops.cast(ops.sum(ops.cast(ahead, "float32"), axis=1), "int32")
    return values, tokens, ranks, width


def _holding_rank(ranks, slots):
    """int32 [B,...,S]: the index of the candidate whose rank is each of
    `slots` (ranks [B,...,N], a permutation of 0..N-1; slots int32 [S])."""
    match = ops.equal(ranks[..., None, :], slots[:, None])  # [B,...,S,N]
    order = ops.arange(ops.shape(ranks)[-1], dtype="int32")
    return ops.sum(ops.where(match, order, 0), axis=-1)


def top_candidates(totals, count, beam_size=None):
    """The `count` best of the K·V' candidates of each example, in the order
    of one `top_k` over the flattened [B, K·V'] scores (`ranked_candidates`
    placed by rank).

    Args:
        totals: float32 [B,K,V'].
        count: C (a Python int).
        beam_size: K, as in `ranked_candidates`.

    Returns:
        `(values float32 [B,C], parents int32 [B,C], tokens int32 [B,C])`:
        best first, `parents` the beam k and `tokens` the id v of each.
    """
    values, tokens, ranks, width = ranked_candidates(totals, count, beam_size)
    picked = _holding_rank(ranks, ops.arange(count, dtype="int32"))  # [B,C]
    return (ops.take_along_axis(values, picked, axis=1), picked // width,
            ops.take_along_axis(tokens, picked, axis=1))

def _write(buffer, index, values):
    """buffer [B,N,L,...] with position `index` set to values [B,N,...]."""
    length = buffer.shape[2]
    at = ops.equal(ops.arange(length, dtype="int32"), index)
    at = ops.reshape(at, (1, 1, length) + (1,) * (len(buffer.shape) - 3))
    return ops.where(at, ops.expand_dims(ops.cast(values, buffer.dtype), 2), buffer)


def _history_at(buffer, positions, rows):
    """buffer [B,P,R,...], positions and rows int32 [B,...] → [B,...,...]:
    buffer[b, positions[b,...], rows[b,...]] (positions broadcast to rows)."""
    width, height = buffer.shape[1], buffer.shape[2]
    trailing = tuple(ops.shape(buffer)[3:])
    flat = ops.reshape(buffer, (-1,) + trailing)
    examples = ops.reshape(ops.arange(ops.shape(buffer)[0], dtype="int32"),
                           (-1,) + (1,) * (len(rows.shape) - 1))
    index = (examples * width + positions) * height + rows
    picked = ops.take(flat, ops.reshape(index, (-1,)), axis=0)
    return ops.reshape(picked, tuple(ops.shape(index)) + trailing)


def backtrack(paths, ends, rows, filled, num_candidates, pad_id):
    """The tokens of hypotheses read back through the search's parent pointers.

    Row r of position i of `paths` holds (parent beam at i - 1, token): rows
    r < C are the C candidates of position i, rows C + k its alive beams
    after it, so the row of a hypothesis at i - 1 is C + its parent. The
    chain is followed by pointer doubling: `jump` m gives the row 2^m
    positions back, and a hypothesis reaches position u in ⌈log2 L⌉ hops
    (the set bits of its distance to u), for all positions at once.

    Args:
        paths: int32 [B,L',R,2] (L' >= L positions).
        ends: int32 [B,N], the position each hypothesis ends at (its EOS).
        rows: int32 [B,N], its row (a candidate, < C) at that position.
        filled: bool [B,N]; False rows give pad tokens and beam -1.
        num_candidates: C.
        pad_id: the id after the end.

    Returns:
        `(tokens int32 [B,N,L], beams int32 [B,N,L])`: the hypothesis'
        tokens (pad after `ends`) and, for each token, the alive beam of
        the position before that it extended (whose step aux scored it;
        -1 after the end). L is `ends`' bound, `paths.shape[1]` - 1.
    """
    length = paths.shape[1] - 1
    parents, tokens = paths[:, :length, :, 0], paths[:, :length, :, 1]  # [B,L,R]
    positions = ops.arange(length, dtype="int32")
    distance = ends[:, :, None] - positions[None, None, :]  # [B,N,L]
    inside = ops.logical_and(filled[:, :, None], distance >= 0)
    distance = ops.where(inside, distance, 0)
    row = rows[:, :, None] + ops.zeros_like(distance)
    at = ends[:, :, None] + ops.zeros_like(distance)
    jump = parents + num_candidates  # the row one position back
    table_positions = positions[None, :, None] + ops.zeros_like(jump)
    for bit in range(max(1, (length - 1).bit_length())):
        if bit:  # 2^bit back = 2^(bit-1) back, twice
            jump = _history_at(jump, ops.maximum(table_positions - 2 ** (bit - 1), 0), jump)
        hop = ops.equal(ops.mod(ops.floor_divide(distance, 2 ** bit), 2), 1)
        row = ops.where(hop, _history_at(jump, at, row), row)
        at = ops.where(hop, at - 2 ** bit, at)
    at = positions[None, None, :] + ops.zeros_like(row)
    sequences = ops.where(inside, _history_at(tokens, at, row), pad_id)
    beams = ops.where(inside, _history_at(parents, at, row), -1)
    return sequences, beams


def _combined_penalty(terms, lengths):
    penalty = None
    for term in terms:
        value = term.length_penalty(lengths)
        if value is not None:
            penalty = value if penalty is None else penalty * value
    return penalty


def _finished_scores(terms, log_probs, lengths, term_states):
    """float32 [B,N]: log_probs / Π penalties + Σ bonuses."""
    scores = log_probs
    penalty = _combined_penalty(terms, lengths)
    if penalty is not None:
        scores = scores / penalty
    for term, state in zip(terms, term_states):
        bonus = term.score(state, lengths)
        if bonus is not None:
            scores = scores + bonus
    return scores


def search(
    step_fn,
    initial_state,
    batch_size,
    *,
    beam_size=5,
    max_length=100,
    bos_id=2,
    eos_id=3,
    pad_id=0,
    terms=(),
    greedy=False,
    sampling=None,
    sampling_stream=None,
    sampling_first_row=None,
    sampling_rows_alike=False,
    stop_check_every=STOP_CHECK_EVERY,
):
    """Beam search (or sampling) over a plain step function.

    Args:
        step_fn: `(ids int32 [B·K], index int32 scalar, state) → (logits
            float [B·K,V'], state, aux)`: scores the token at `index + 1`
            given the token `ids` at `index` (BOS at 0); `index` <= L - 1,
            and near the end of a search that checks whether to stop every
            N positions, position L - 1 may be run again (its results are
            discarded). `state` is a nest of
            tensors with B·K rows (row b·K + k = beam k of example b) that
            the search gathers when it reorders beams; `aux` a dict of
            [B·K,...] tensors (may be empty), recorded per generated token.
            `logits` may be log-probabilities (log-softmax is idempotent).
        initial_state: the state nest for index 0, B·K rows.
        batch_size: B (int or scalar tensor).
        beam_size: K.
        max_length: L, the most tokens generated (EOS included); a
            hypothesis still alive at L ends there without EOS.
        bos_id, eos_id, pad_id: special ids.
        terms: list of `keras_hsum.decoding.terms.ScoreTerm`.
        greedy: keep K candidates per step instead of 2·K, so a beam that
            emits EOS ends without an alternative (with K = 1: greedy
            decoding, where every step takes the best unblocked token).
        sampling: a `keras_hsum.decoding.Sampling`: instead of a beam, K
            independent samples, each drawing its next token from the
            blocked (tempered, truncated) distribution until EOS or L;
            they end ranked by score like beam hypotheses. No early
            termination: every sample runs to its end.
        sampling_stream: with `sampling`, an optional integer scalar (may
            be a tensor) mixed into its seed (`hashed_uniforms`): training
            passes its step so that every step draws new samples.
        sampling_first_row: with `sampling`, an optional integer scalar:
            the row of a larger batch that this batch's first example is
            (`hashed_uniforms`' `first_row`): a replica of a distributed
            training step draws what one device draws for the same rows.
        sampling_rows_alike: with `sampling`, every example draws from the
            uniforms of row 0, so its samples do not depend on its row in
            the batch (exported models: a request's summary is the same
            alone or batched with others). Not with `sampling_first_row`.
        stop_check_every: N, an int >= 1: whether the search can stop
            (module docstring) is checked once every N positions, which run
            in an inner loop of static trip count; or None: never, all L - 1
            positions after the first run in one loop of static trip count.
            The results do not depend on it (module docstring); on a GPU an
            outer loop's condition goes back to the host once per
            iteration, so N = 1 costs one round trip per token, and a larger
            N may compute up to N - 1 positions past the stopping point.

    Returns:
        dict with
        `sequences` int32 [B,K,L]: generated tokens (no BOS), EOS included,
            then `pad_id`; best first.
        `scores` float32 [B,K]: final scores with the terms (`NEG_INF` for
            an empty slot).
        `log_probs` float32 [B,K]: Σ token log-probs (after blocking).
        `lengths` int32 [B,K]: |y| (EOS included).
        `aux` dict name → [B,K,L,...]: the aux of the step that generated
            each token, zeros after the end.
    """
    terms = _term_list(terms, "search")
    if isinstance(batch_size, numbers.Integral):
        # A known B (Python or numpy int) is checked and made a Python int,
        # which the score terms' `check` compares with their arguments.
        batch_size = check_int("batch_size", batch_size, 1, owner="search")
    K = check_int("beam_size", beam_size, 1, owner="search")
    L = check_int("max_length", max_length, 1, owner="search")
    stop_check_every = check_stop_check_every(stop_check_every, "search")
    if sampling is not None and greedy:
        raise ValueError("search: `greedy` and `sampling` exclude each other.")
    num_candidates = K if (greedy or sampling is not None) else 2 * K
    index0 = ops.convert_to_tensor(0, "int32")

    state_leaves = keras.tree.flatten(initial_state)

    def call_step(ids, index, leaves):
        state = keras.tree.pack_sequence_as(initial_state, list(leaves))
        logits, state, aux = step_fn(ids, index, state)
        return logits, tuple(keras.tree.flatten(state)), aux

    # index 0 runs before the loop: it fixes V' and the aux shapes.
    first_ids = ops.full((batch_size * K,), bos_id, "int32")
    logits, leaves, aux = call_step(first_ids, index0, state_leaves)
    vocabulary = logits.shape[-1]
    if vocabulary is not None and isinstance(eos_id, int) and not 0 <= eos_id < vocabulary:
        raise ValueError(
            f"search: `eos_id` {eos_id} is not one of the model's {vocabulary} "
            "token ids, so no hypothesis could end."
        )
    for term in terms:
        term.check(batch_size if isinstance(batch_size, int) else None,
                   None if vocabulary is None else int(vocabulary))
    aux_names, aux_values = _flatten_aux(aux)

    def history_buffer(value, rows):
        # [B, L + 1, rows, ...]: one column per position, column L a scratch
        # column for the positions past L - 1 of the last chunk.
        # ops.shape: static sizes where known, tensors where not (e.g. the
        # number of sections of an exported model's input).
        shape = (batch_size, L + 1, rows) + tuple(ops.shape(value)[1:])
        return ops.zeros(shape, value.dtype)

    C = num_candidates
    # W: each beam's candidates (`ranked_candidates`; 1 when sampling)
    width = 1 if sampling is not None else (
        C if vocabulary is None else min(C, int(vocabulary)))
    N = K * width  # candidates per position
    R = N + K  # rows of a paths column: the N candidates, then the K alive beams
    # The alive beams' tokens are kept as a [B,K,L] buffer, reordered every
    # step, only for terms that read `StepContext.sequences`.
    # (A tuple of it or of nothing: loops carry no None.)
    keep_sequences = any(term_reads_sequences(term) for term in terms)
    alive_seq = (ops.full((batch_size, K, L), pad_id, "int32"),) if keep_sequences else ()
    # A beam starts from one hypothesis (the others would duplicate it);
    # the K samples all start alive.
    first_log_probs = ops.where(
        ops.logical_or(ops.arange(K) == 0, sampling is not None), 0.0, NEG_INF
    )
    if sampling is None:
        uniforms = None
    elif sampling_rows_alike:
        if sampling_first_row is not None:
            raise ValueError(
                "search: `sampling_rows_alike` draws every row from row 0's "
                "uniforms; it takes no `sampling_first_row`."
            )
        uniforms = ops.broadcast_to(
            sampling.uniforms((1, K, L), sampling_stream), (batch_size, K, L))
    else:
        uniforms = sampling.uniforms((batch_size, K, L), sampling_stream, sampling_first_row)
    alive_log_probs = ops.broadcast_to(
        ops.cast(first_log_probs, "float32")[None, :], (batch_size, K)
    )
    term_states = tuple(tuple(t.initial_state(batch_size, K)) for t in terms)
    # The history (written one column per position, never reordered):
    # paths[b, i, r] = (parent beam at i - 1, token, rank) of candidate
    # r < N of position i and (parent, token, 0) of alive beam r - N after
    # it; outcomes[b, i, r] = (score if candidate r finished there else
    # NEG_INF, its log-prob); aux_history[b, i, k] = the step aux of the
    # beam k that position i extended.
    history = (
        ops.zeros((batch_size, L + 1, R, 3), "int32"),
        ops.full((batch_size, L + 1, N, 2), NEG_INF, "float32"),  # none finished yet
        tuple(history_buffer(v, K) for v in aux_values),
    )

    def advance(index, alive, history, logits, leaves, aux_values):
        """One position: choose the candidates of `index`, update the alive
        pool and write the position's column of the history.

        `index` may pass L - 1 (see `one_position`): the candidates are then
        those of position L - 1 again, none may finish, and the column
        written is the scratch column L."""
        alive_seq, alive_log_probs, term_states = alive
        paths, outcomes, aux_history = history
        may_finish = ops.less(index, L)
        column = ops.minimum(index, L)
        index = ops.minimum(index, L - 1)
        context = StepContext(alive_seq[0] if alive_seq else None, index, eos_id, L)
        log_probs = ops.log_softmax(ops.cast(_split_beams(logits, K), "float32"), axis=-1)
        step_aux = {n: _split_beams(v, K) for n, v in zip(aux_names, aux_values)}
        for term, state in zip(terms, term_states):
            log_probs = term.mask_log_probs(log_probs, state, context)
        new_term_states = tuple(
            tuple(term.update_state(state, step_aux, context))
            for term, state in zip(terms, term_states)
        )
        totals = alive_log_probs[:, :, None] + log_probs  # [B,K,V']
        dead = ops.logical_or(
            log_probs <= DEAD, (alive_log_probs <= DEAD)[:, :, None]
        )
        totals = ops.where(dead, NEG_INF, totals)
        if sampling is None:  # each beam's best W = min(C, V'), ranked: [B,K·W]
            values, tokens, ranks, _ = ranked_candidates(totals, num_candidates, K)
        else:  # each sample k extends itself: C = K, parent k, in the order k
            step_uniforms = ops.take(uniforms, index, axis=2)  # [B,K]
            tokens = sampling.draw(log_probs, step_uniforms)
            values = ops.take_along_axis(totals, tokens[:, :, None], axis=-1)[:, :, 0]
            ranks = ops.zeros_like(tokens) + ops.arange(K, dtype="int32")[None, :]
        parents = ops.convert_to_tensor(np.arange(N, dtype="int32") // width)  # [N], a constant
        valid = ops.logical_and(values > DEAD, ranks < num_candidates)  # among the best C
        ends = ops.logical_or(ops.equal(tokens, eos_id), ops.equal(index, L - 1))
        finishing = ops.logical_and(ops.logical_and(valid, ends), may_finish)

        # alive pool: the best K candidates that did not end, by log-prob
        alive_values = ops.where(ops.logical_and(valid, ops.logical_not(ends)), values, NEG_INF)
        new_alive_log_probs, chosen = ops.top_k(alive_values, K)
        chosen = ops.cast(chosen, "int32")
        beam_rows = chosen // width  # [B,K] parent beam
        alive_tokens = gather_beams(tokens, chosen)
        alive_seq = tuple(_write(gather_beams(seq, beam_rows), index, alive_tokens)
                          for seq in alive_seq)
        new_alive = (
            alive_seq,
            new_alive_log_probs,
            tuple(tuple(gather_beams(s, beam_rows) for s in st) for st in new_term_states),
        )
        rows = ops.reshape(
            beam_rows + ops.arange(ops.shape(beam_rows)[0], dtype="int32")[:, None] * K,
            (-1,),
        )
        new_leaves = tuple(ops.take(leaf, rows, axis=0) for leaf in leaves)

        # finished candidates: their scores, kept in the history's column
        cand_terms = tuple(
            tuple(ops.repeat(s, width, axis=1) for s in states) for states in new_term_states
        )
        lengths = ops.full(ops.shape(values), index + 1, "int32")
        scores = _finished_scores(terms, values, lengths, cand_terms)
        scores = ops.where(finishing, scores, NEG_INF)
        path_column = ops.concatenate([
            ops.stack([parents + ops.zeros_like(tokens), tokens, ranks], axis=-1),
            ops.stack([beam_rows, alive_tokens, ops.zeros_like(beam_rows)], axis=-1),
        ], axis=1)  # [B,R,3]
        new_history = (
            ops.slice_update(paths, (0, column, 0, 0), path_column[:, None]),
            ops.slice_update(outcomes, (0, column, 0, 0),
                             ops.stack([scores, values], axis=-1)[:, None]),
            tuple(ops.slice_update(buf, (0, column) + (0,) * (len(buf.shape) - 2),
                                   ops.cast(step_aux[n], buf.dtype)[:, None])
                  for n, buf in zip(aux_names, aux_history)),
        )
        return new_alive, new_history, new_leaves

    alive = (alive_seq, alive_log_probs, term_states)
    alive, history, leaves = advance(index0, alive, history, logits, leaves, aux_values)

    # A hypothesis that finishes at step i has |y| = i + 1; the penalty
    # need not grow with |y| (GNMT's alpha < 0), so the bound divides by its
    # largest value over the lengths still reachable.
    all_lengths = ops.arange(1, L + 1, dtype="int32")
    penalties = _combined_penalty(terms, all_lengths)  # [L] or None
    bounds = [t.score_bound(batch_size, L) for t in terms]
    early_stop = sampling is None and all(b is not None for b in bounds)

    def finished_scores(outcomes):
        """float32 [B, L·C]: every candidate's score (NEG_INF: not finished),
        in the order they arrived (position, then candidate)."""
        return ops.reshape(outcomes[:, :L, :, 0], (-1, L * N))

    def keep_going(index, alive, history, leaves):
        more = ops.less(index, L)
        alive_log_probs = alive[1]
        best_alive = ops.max(alive_log_probs, axis=1)  # [B]
        no_alive = best_alive <= DEAD
        if not early_stop:
            return ops.logical_and(more, ops.logical_not(ops.all(no_alive)))
        bound = best_alive
        if penalties is not None:
            reachable = all_lengths >= index + 1
            largest = ops.max(ops.where(reachable, penalties, 0.0))
            bound = best_alive / largest
        for b in bounds:
            b = ops.convert_to_tensor(b, "float32")
            bound = bound + (ops.reshape(b, (-1,)) if len(b.shape) else b)
        # the best K finished so far (the pool of the module docstring)
        fin_scores, _ = blocked_top_k(finished_scores(history[1]), K)
        full = ops.all(fin_scores > DEAD, axis=1)
        settled = ops.logical_and(full, ops.min(fin_scores, axis=1) >= bound)
        done = ops.logical_or(settled, no_alive)
        return ops.logical_and(more, ops.logical_not(ops.all(done)))

    def one_position(index, carry):
        """Positions past L - 1 (the last chunk of a search that checks
        whether to stop every N positions) run position L - 1 again, where
        no candidate may finish: nothing they compute is kept."""
        alive, history, leaves = carry
        position = ops.minimum(index, L - 1)
        # the tokens the alive beams took at position - 1
        ids = ops.reshape(ops.take(history[0], position - 1, axis=1)[:, N:, 1], (-1,))
        logits, leaves, aux = call_step(ids, position, leaves)
        _, values = _flatten_aux(aux)
        return advance(index, alive, history, logits, leaves, values)

    carry = (alive, history, leaves)
    if stop_check_every is None:  # one loop of L - 1 positions, a static trip count
        if L > 1:
            carry = ops.fori_loop(1, L, one_position, carry)
    else:
        def chunk(index, *carry):
            """`stop_check_every` positions from `index` (a static trip count)."""
            if stop_check_every == 1:
                carry = one_position(index, carry)
            else:
                carry = ops.fori_loop(
                    0, stop_check_every, lambda j, c: one_position(index + j, c), carry)
            return (index + stop_check_every,) + tuple(carry)

        index1 = ops.convert_to_tensor(1, "int32")
        carry = ops.while_loop(keep_going, chunk, (index1,) + carry)[1:]
    _, (paths, outcomes, aux_history), _ = carry

    # The finished pool: the best K of the K empty slots it starts with and
    # every finished candidate in the order they arrived (position, then
    # rank); among equal scores the earlier comes first, as merging the
    # candidates of each position into a pool of K (a top-k over the pool,
    # then them) keeps it. Slot s of a position holds its candidate of rank s.
    ranks = paths[:, :L, :N, 2]  # [B,L,N]
    slots = ops.arange(C, dtype="int32")
    by_rank = ops.max(ops.where(
        ops.equal(ranks[:, :, None, :], slots[:, None]),
        outcomes[:, :L, None, :, 0], NEG_INF), axis=-1)  # [B,L,C]
    empty = ops.full((batch_size, K), NEG_INF, "float32")
    fin_scores, picked = blocked_top_k(
        ops.concatenate([empty, ops.reshape(by_rank, (-1, L * C))], axis=1), K)
    picked = picked - K
    filled = picked >= 0
    picked = ops.maximum(picked, 0)
    ends = picked // C  # [B,K] position
    rank_rows = _history_at(  # [B,K,N]: the ranks of the candidates of those positions
        ranks, ends[:, :, None] + ops.zeros((1, 1, N), "int32"),
        ops.arange(N, dtype="int32") + ops.zeros_like(ends)[:, :, None])
    candidates = ops.sum(ops.where(ops.equal(rank_rows, (picked % C)[:, :, None]),
                                   ops.arange(N, dtype="int32"), 0), axis=-1)  # [B,K]
    fin_log_probs = ops.where(filled, _history_at(outcomes, ends, candidates)[..., 1], NEG_INF)
    fin_lengths = ops.where(filled, ends + 1, 0)
    fin_seq, fin_parents = backtrack(paths[..., :2], ends, candidates, filled, N, pad_id)
    fin_aux = tuple(
        ops.where(
            ops.reshape(fin_parents >= 0, ops.shape(fin_parents) + (1,) * (len(buf.shape) - 3)),
            _history_at(buf[:, :L], ops.arange(L, dtype="int32")[None, None, :],
                        ops.maximum(fin_parents, 0)),
            ops.zeros((), buf.dtype))
        for buf in aux_history)
    return {
        "sequences": fin_seq,
        "scores": fin_scores,
        "log_probs": fin_log_probs,
        "lengths": fin_lengths,
        "aux": dict(zip(aux_names, fin_aux)),
    }


def model_search(model, inputs, beam_size, max_length, terms, eos_id, pad_id, greedy,
                  sampling=None, sampling_stream=None, sampling_first_row=None,
                  sampling_rows_alike=False, stop_check_every=STOP_CHECK_EVERY):
    """`search` over a `Summarizer`'s encode → cache → step contract.

    What `beam_search`, `greedy_search` and `sample_search` run after
    checking their arguments, and what a caller that has checked its own
    (`keras_hsum.decoding.reinforce`) runs directly.

    Args:
        model: a `keras_hsum.models.Summarizer`.
        inputs: the model family's feature dict, batch B.
        beam_size: K (hypotheses or samples per example).
        max_length: L, the most generated tokens.
        terms: a list of `ScoreTerm`s.
        eos_id, pad_id: None takes the model's.
        greedy: True for `greedy_search`'s K = 1 argmax.
        sampling, sampling_stream, sampling_first_row, sampling_rows_alike,
        stop_check_every: as in `search`.

    Returns:
        The dict of `search`.
    """
    eos_id = model.eos_id if eos_id is None else eos_id
    pad_id = model.pad_id if pad_id is None else pad_id
    K = int(beam_size)
    if not getattr(model, "ready_to_decode", True):
        unbuilt = [m.name for m in getattr(model, "members", ()) if not m.ready_to_decode]
        raise ValueError(
            f"{model.name}"
            + (f" (its members {unbuilt})" if unbuilt else "")
            + " is not built, so it cannot decode: call it once teacher-forced "
            "(`model(batch)` with `decoder_tokens`), train it, or load a saved "
            "model first."
        )
    check_model_features(model, inputs)
    memory = model.encode(inputs)
    if hasattr(model, "beam_cache"):
        static, state = model.beam_cache(memory, max_length, K)
    else:  # a model that only has the three methods of the contract
        tiled = keras.tree.map_structure(
            lambda x: None if x is None else ops.repeat(x, K, axis=0), memory
        )
        static, state = model.initial_cache(tiled, max_length)
    batch_size = ops.shape(keras.tree.flatten(memory)[0])[0]

    def step_fn(ids, index, state):
        logits, (_, new_state), aux = model.step(ids, index, (static, state))
        return logits, new_state, aux

    return search(
        step_fn,
        state,
        batch_size,
        beam_size=K,
        max_length=max_length,
        bos_id=model.bos_id,
        eos_id=eos_id,
        pad_id=pad_id,
        terms=terms,
        greedy=greedy,
        sampling=sampling,
        sampling_stream=sampling_stream,
        sampling_first_row=sampling_first_row,
        sampling_rows_alike=sampling_rows_alike,
        stop_check_every=stop_check_every,
    )


def beam_search(
    model,
    inputs,
    *,
    beam_size=5,
    max_length=100,
    terms=(),
    min_length=0,
    eos_id=None,
    pad_id=None,
    stop_check_every=STOP_CHECK_EVERY,
):
    """Beam search decoding of a `Summarizer` (encode → initial_cache → step).

    The cache comes from `model.beam_cache(memory, max_length, K)`: by
    default the memory of `model.encode(inputs)` repeated K times along
    axis 0 (row b·K + k) and `model.initial_cache(memory, max_length)`;
    models that share one memory row among the K hypotheses of an example
    (PHT; FT, HT, EA and CA on `TransformerSummaryDecoder`; BART backbones) keep it
    [B,...]. The static part of the cache is never reordered, every leaf of the state
    dict is gathered when beams are reordered (SEAL's segment re-selection
    inside `step` therefore follows its beam).

    Args:
        model: a `keras_hsum.models.Summarizer`.
        inputs: the model family's feature dict, batch B.
        beam_size: K.
        max_length: L, the most generated tokens (EOS included).
        terms: list of `keras_hsum.decoding.terms.ScoreTerm` (length
            normalisation, blocking, attention alignment, ...). Without a
            `LengthNormalization`, finished hypotheses rank by log P(y|x).
        min_length: if > 0, adds `MinLength(min_length)` (no EOS before
            position `min_length`).
        eos_id, pad_id: default the model's.
        stop_check_every: N >= 1: check whether the search can stop once
            every N positions; None: never (all L positions, a loop of
            static trip count). Does not change the results (see `search`).

    Returns:
        dict: `sequences` int32 [B,K,L] (best first, no BOS, pad after
        EOS), `scores` float32 [B,K], `log_probs` float32 [B,K], `lengths`
        int32 [B,K], `aux` dict name → [B,K,L,...] (e.g.
        `paragraph_attention` [B,K,L,P]; zeros after EOS). See `search`.

    Example (a small random model; a trained one decodes the same way):
        >>> from keras_hsum.decoding import beam_search, LengthNormalization, NgramBlocking
        >>> from keras_hsum.models import FlatTransformer
        >>> model = FlatTransformer(vocabulary_size=20, hidden_dim=8, num_heads=2,
        ...                         intermediate_dim=16, num_encoder_layers=1,
        ...                         num_decoder_layers=1)
        >>> tokens = np.random.default_rng(0).integers(4, 20, (2, 12))  # [B,N]
        >>> _ = model({"tokens": tokens, "decoder_tokens": np.full((2, 2), 2)})  # builds it
        >>> out = beam_search(model, {"tokens": tokens}, beam_size=3, max_length=6,
        ...                   terms=[LengthNormalization(), NgramBlocking(3)])
        >>> {name: tuple(value.shape) for name, value in out.items() if name != "aux"}
        {'sequences': (2, 3, 6), 'scores': (2, 3), 'log_probs': (2, 3), 'lengths': (2, 3)}
        >>> scores = ops.convert_to_numpy(out["scores"])
        >>> bool((scores[:, :-1] >= scores[:, 1:]).all())  # best first
        True
        >>> best = out["sequences"][:, 0]  # [B,L]
    """
    terms = _term_list(terms, "beam_search")
    beam_size = check_int("beam_size", beam_size, 1, owner="beam_search")
    max_length = check_int("max_length", max_length, 1, owner="beam_search")
    stop_check_every = check_stop_check_every(stop_check_every, "beam_search")
    if min_length and min_length > 0:
        terms.append(MinLength(min_length))
    return model_search(model, inputs, beam_size, max_length, terms, eos_id, pad_id, False,
                        stop_check_every=stop_check_every)


def greedy_search(model, inputs, *, max_length=100, terms=(), min_length=0,
                  eos_id=None, pad_id=None, stop_check_every=STOP_CHECK_EVERY):
    """Greedy decoding: at each step the best unblocked token (K = 1).

    Same arguments (no `beam_size`; `stop_check_every` as there) and the same output dict as
    `beam_search`, with K = 1: `sequences` int32 [B,1,L], `scores`,
    `log_probs`, `lengths` [B,1], `aux` name → [B,1,L,...].
    """
    terms = _term_list(terms, "greedy_search")
    max_length = check_int("max_length", max_length, 1, owner="greedy_search")
    stop_check_every = check_stop_check_every(stop_check_every, "greedy_search")
    if min_length and min_length > 0:
        terms.append(MinLength(min_length))
    return model_search(model, inputs, 1, max_length, terms, eos_id, pad_id, True,
                        stop_check_every=stop_check_every)


def sample_search(model, inputs, *, num_samples=8, max_length=100, terms=(),
                  min_length=0, temperature=1.0, top_k=0, top_p=1.0, epsilon=0.0,
                  seed=0, eos_id=None, pad_id=None, rows_alike=False,
                  stop_check_every=STOP_CHECK_EVERY):
    """Ancestral sampling of a `Summarizer`: `num_samples` independent
    samples per example (`keras_hsum.decoding.sampling`).

    Every sample draws its next token from the model's distribution after
    the score terms' blocking, tempered by `temperature` and truncated by
    `top_k`, `top_p` and `epsilon` (see `Sampling`); `seed` fixes the
    draws, so a call is reproducible. Pair it with `mbr_rerank` for
    sampling-based minimum Bayes risk decoding. Each row of the batch draws
    its own uniforms; `rows_alike=True` gives every row row 0's, so an
    example's samples do not depend on its place in the batch (what
    exported models do). Sampling never stops early: it runs until every
    sample has ended, checked once every `stop_check_every` positions
    (None: never checked, all L positions run), as in `beam_search`.

    Returns:
        The dict of `beam_search` with K = `num_samples`: `sequences`
        int32 [B,K,L], `scores` float32 [B,K] (log P(y|x) under the blocked,
        untempered model plus the terms, best first), `log_probs`,
        `lengths` [B,K], `aux` name → [B,K,L,...].

    Example (a small random model; a trained one samples the same way):
        >>> from keras_hsum.decoding import mbr_rerank, sample_search
        >>> from keras_hsum.models import FlatTransformer
        >>> model = FlatTransformer(vocabulary_size=20, hidden_dim=8, num_heads=2,
        ...                         intermediate_dim=16, num_encoder_layers=1,
        ...                         num_decoder_layers=1)
        >>> batch = {"tokens": np.random.default_rng(0).integers(4, 20, (2, 12))}
        >>> _ = model(dict(batch, decoder_tokens=np.full((2, 2), 2)))  # builds it
        >>> out = sample_search(model, batch, num_samples=4, epsilon=0.02,
        ...                     max_length=6, seed=1)
        >>> tuple(out["sequences"].shape)  # [B,K,L]
        (2, 4, 6)
        >>> again = sample_search(model, batch, num_samples=4, epsilon=0.02,
        ...                       max_length=6, seed=1)
        >>> np.array_equal(out["sequences"], again["sequences"])  # the seed fixes the draws
        True
        >>> best = mbr_rerank(out, eos_id=model.eos_id)["sequences"][:, 0]  # [B,L]
    """
    sampling = Sampling(temperature=temperature, top_k=top_k, top_p=top_p,
                        epsilon=epsilon, seed=seed)
    terms = _term_list(terms, "sample_search")
    num_samples = check_int("num_samples", num_samples, 1, owner="sample_search")
    max_length = check_int("max_length", max_length, 1, owner="sample_search")
    stop_check_every = check_stop_check_every(stop_check_every, "sample_search")
    if min_length and min_length > 0:
        terms.append(MinLength(min_length))
    return model_search(model, inputs, num_samples, max_length, terms, eos_id, pad_id,
                         False, sampling, sampling_rows_alike=rows_alike,
                         stop_check_every=stop_check_every)
