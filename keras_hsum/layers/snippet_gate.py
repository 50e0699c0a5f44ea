"""SEAL's gating function G (Zhao, Saleh & Liu, 2020, §3.3)."""

import keras
from keras import ops

from keras_hsum.checks import check_int
from keras_hsum.layers.input_checks import check_dims, check_rank
from keras_hsum.layers.masking import as_bool_mask, merge_masks


@keras.saving.register_keras_serializable(package="keras_hsum")
class SnippetGate(keras.layers.Layer):
    """Selects the best-scored snippets and concatenates them into a memory.

    SEAL's gate G "sorts the snippets by their predicted scores and
    concatenates the snippet representations until their total length
    reaches the limit" L_ext (`max_length`); the decoder then attends only to
    that memory. Concretely, for every batch row:

    1. snippets are put in selection order: descending score; padded
       snippets (`paragraph_mask` False, or no valid token) last; ties go to
       the lower snippet index (a NaN score counts as the lowest score);
    2. snippets are taken in that order while the running total of their
       non-pad tokens stays within `max_length`. With
       `cut_last_snippet=False` (default) only whole snippets are kept: the
       gate stops at the first snippet that does not fit, and it and every
       lower-scored snippet are left out, so the selection is always the
       top-k of the score order (a shorter, lower-scored snippet is never
       taken in its place). With `cut_last_snippet=True` the first snippet
       that does not fit is cut so that the memory is filled to exactly
       `max_length` tokens;
    3. the non-pad tokens of the kept snippets are concatenated in selection
       order (pad tokens inside a snippet are squeezed out) and the memory is
       padded with zero rows up to `max_length`.

    As in the paper, the concatenation is a differentiable gather (the
    paper's "matrix multiplication with a one-hot matrix mapping input
    positions to sorted, concatenated positions"), so the abstractive loss
    reaches the snippet encoder through the memory rows. The scores get no
    gradient through sorting: SEAL trains the scorer with the extractive
    loss L_ext on proxy labels, not through G.

    Everything is batched (pairwise ranks, cumulative sums of lengths,
    `take_along_axis`): no loop over B or P, and it runs under
    `jit_compile=True` on every backend. If `max_length` is smaller than the
    best snippet and `cut_last_snippet=False`, nothing is selected and the
    memory is fully masked; keep `max_length` >= the snippet length L_snpt
    (T), as SEAL's configurations do.

    Args:
        max_length: int, L_ext, the number of memory positions.
        cut_last_snippet: bool. False (default): whole snippets only.
            True: the first snippet that does not fit is truncated to fill
            the memory.

    Call arguments:
        snippets: float [B, P, T, D], the encoded snippets.
        scores: float [B, P], the scorer's logits (higher = better).
        token_mask: optional bool/int [B, P, T], True for real tokens.
        paragraph_mask: optional bool/int [B, P], True for real snippets.

    Returns:
        A tuple `(memory, memory_mask, selected_ids)`:
        memory: float [B, L_ext, D], the concatenated token encodings of the
            selected snippets followed by zero rows;
        memory_mask: bool [B, L_ext], True on filled positions (a prefix);
        selected_ids: int32 [B, P], the indices of the selected snippets in
            selection order (a cut last snippet counts as selected), padded
            with -1.

    Example:
    >>> gate = SnippetGate(max_length=6)
    >>> snippets = np.random.rand(2, 3, 4, 8).astype("float32")
    >>> scores = np.array([[0.1, 0.9, 0.5], [1.0, 0.0, 0.2]], "float32")
    >>> memory, memory_mask, selected_ids = gate(snippets, scores)
    >>> tuple(memory.shape), tuple(memory_mask.shape), tuple(selected_ids.shape)
    ((2, 6, 8), (2, 6), (2, 3))

    References:
        Zhao, Saleh & Liu (2020), SEAL: Segment-wise Extractive-Abstractive
        Long-form Text Summarization, arXiv:2006.10213.
    """

    def __init__(self, max_length, cut_last_snippet=False, **kwargs):
        super().__init__(**kwargs)
        self.max_length = check_int("max_length", max_length, owner="SnippetGate",
                                    hint=" (L_ext)")
        self.cut_last_snippet = bool(cut_last_snippet)

    def _check_shapes(
        self, snippets_shape, scores_shape, token_mask_shape, paragraph_mask_shape
    ):
        batch, paragraphs, tokens, _ = check_rank(
            self.name, "snippets", snippets_shape, 4, "[B,P,T,D]"
        )
        check_rank(self.name, "scores", scores_shape, 2, "[B,P]")
        check_dims(self.name, "scores", scores_shape, (batch, paragraphs), "[B,P]")
        if token_mask_shape is not None:
            check_rank(self.name, "token_mask", token_mask_shape, 3, "[B,P,T]")
            check_dims(
                self.name,
                "token_mask",
                token_mask_shape,
                (batch, paragraphs, tokens),
                "[B,P,T]",
            )
        if paragraph_mask_shape is not None:
            check_rank(self.name, "paragraph_mask", paragraph_mask_shape, 2, "[B,P]")
            check_dims(
                self.name,
                "paragraph_mask",
                paragraph_mask_shape,
                (batch, paragraphs),
                "[B,P]",
            )

    def build(
        self,
        snippets_shape,
        scores_shape,
        token_mask_shape=None,
        paragraph_mask_shape=None,
    ):
        self._check_shapes(
            snippets_shape, scores_shape, token_mask_shape, paragraph_mask_shape
        )
        self.built = True

    def call(self, snippets, scores, token_mask=None, paragraph_mask=None):
        self._check_shapes(
            snippets.shape,
            scores.shape,
            None if token_mask is None else token_mask.shape,
            None if paragraph_mask is None else paragraph_mask.shape,
        )
        shape = ops.shape(snippets)
        batch, paragraphs, tokens, dim = shape[0], shape[1], shape[2], shape[3]
        length_limit = self.max_length

        # Valid tokens [B,P,T] and snippet lengths [B,P].
        if token_mask is None:
            token_mask = ops.ones((batch, paragraphs, tokens), "bool")
        if paragraph_mask is not None:
            paragraph_mask = as_bool_mask(paragraph_mask)[:, :, None]
        valid_tokens = ops.cast(merge_masks(token_mask, paragraph_mask), "int32")
        lengths = ops.sum(valid_tokens, axis=-1)
        valid = lengths > 0

        # Rank of every snippet in selection order, from pairwise comparisons
        # (deterministic, no reliance on a stable sort): q goes ahead of p if
        # q is valid and p is not, or both are valid and q scores higher, or
        # they tie (same score, or both padded) and q has the lower index.
        scores = ops.cast(scores, "float32")
        # A NaN score ranks below every number (ranks stay a permutation).
        scores = ops.where(
            ops.isnan(scores), ops.full_like(scores, -3.0e38), scores
        )
        score_p, score_q = scores[:, :, None], scores[:, None, :]
        valid_p, valid_q = valid[:, :, None], valid[:, None, :]
        index = ops.arange(paragraphs, dtype="int32")
        lower_index = (index[None, :] < index[:, None])[None, :, :]
        both_valid = ops.logical_and(valid_p, valid_q)
        same_validity = ops.equal(valid_p, valid_q)
        tie = ops.logical_or(
            ops.logical_and(both_valid, ops.equal(score_q, score_p)),
            ops.logical_and(same_validity, ops.logical_not(valid_p)),
        )
        ahead = ops.logical_or(
            ops.logical_and(valid_q, ops.logical_not(valid_p)),
            ops.logical_or(
                ops.logical_and(both_valid, ops.greater(score_q, score_p)),
                ops.logical_and(tie, lower_index),
            ),
        )
        rank = ops.sum(ops.cast(ahead, "int32"), axis=-1)  # [B,P]
        # order[b, k] = the snippet at rank k (inverse permutation).
        at_rank = ops.cast(
            ops.equal(rank[:, :, None], index[None, None, :]), "int32"
        )  # [B,P(snippet),P(rank)]
        order = ops.sum(at_rank * index[None, :, None], axis=1)  # [B,P]

        # Lengths in selection order and how many tokens of each are kept.
        sorted_lengths = ops.take_along_axis(lengths, order, axis=1)
        sorted_valid = ops.take_along_axis(valid, order, axis=1)
        ends = ops.cumsum(sorted_lengths, axis=1)
        starts = ends - sorted_lengths
        if self.cut_last_snippet:
            selected = ops.logical_and(sorted_valid, starts < length_limit)
            kept = ops.minimum(sorted_lengths, length_limit - starts)
        else:
            selected = ops.logical_and(sorted_valid, ends <= length_limit)
            kept = sorted_lengths
        kept = ops.where(selected, kept, ops.zeros_like(kept))
        selected_ids = ops.where(selected, order, -ops.ones_like(order))
        kept_ends = ops.cumsum(kept, axis=1)  # [B,P]
        kept_starts = kept_ends - kept
        total = kept_ends[:, -1]  # [B]

        # For every memory position l: its rank k, snippet, token.
        positions = ops.arange(length_limit, dtype="int32")  # [L]
        memory_mask = positions[None, :] < total[:, None]  # [B,L]
        position_rank = ops.sum(
            ops.cast(kept_ends[:, None, :] <= positions[None, :, None], "int32"),
            axis=-1,
        )  # [B,L]
        position_rank = ops.minimum(position_rank, paragraphs - 1)
        offset = positions[None, :] - ops.take_along_axis(
            kept_starts, position_rank, axis=1
        )  # [B,L] index among the snippet's valid tokens
        snippet = ops.take_along_axis(order, position_rank, axis=1)  # [B,L]
        cumulative = ops.cumsum(valid_tokens, axis=-1)  # [B,P,T]
        rows = ops.take_along_axis(
            cumulative,
            ops.broadcast_to(snippet[:, :, None], (batch, length_limit, tokens)),
            axis=1,
        )  # [B,L,T]
        # The offset-th valid token (0-based) is preceded by exactly the
        # positions whose running count of valid tokens is <= offset.
        token = ops.sum(ops.cast(rows <= offset[:, :, None], "int32"), axis=-1)
        token = ops.minimum(token, tokens - 1)
        flat_index = snippet * tokens + token  # [B,L]
        flat = ops.reshape(snippets, (batch, paragraphs * tokens, dim))
        memory = ops.take_along_axis(flat, flat_index[:, :, None], axis=1)
        memory = ops.where(memory_mask[:, :, None], memory, ops.zeros_like(memory))
        return memory, memory_mask, selected_ids

    def compute_output_shape(
        self,
        snippets_shape,
        scores_shape,
        token_mask_shape=None,
        paragraph_mask_shape=None,
    ):
        batch, paragraphs, _, dim = snippets_shape
        return (
            (batch, self.max_length, dim),
            (batch, self.max_length),
            (batch, paragraphs),
        )

    def compute_output_spec(
        self, snippets, scores, token_mask=None, paragraph_mask=None
    ):
        memory_shape, mask_shape, ids_shape = self.compute_output_shape(
            snippets.shape, scores.shape
        )
        return (
            keras.KerasTensor(memory_shape, dtype=snippets.dtype),
            keras.KerasTensor(mask_shape, dtype="bool"),
            keras.KerasTensor(ids_shape, dtype="int32"),
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "max_length": self.max_length,
                "cut_last_snippet": self.cut_last_snippet,
            }
        )
        return config
