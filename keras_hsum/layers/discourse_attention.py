"""Cohan et al.'s discourse-aware attention (2018, §3, Eq. 2, 4-6 and coverage)."""

import keras
from keras import ops

from keras_hsum.layers.input_checks import check_cache_keys
from keras_hsum.layers.input_checks import check_dims
from keras_hsum.layers.input_checks import check_rank
from keras_hsum.layers.input_checks import expect_width
from keras_hsum.layers.masking import as_bool_mask
from keras_hsum.layers.masking import large_negative
from keras_hsum.layers.masking import masked_softmax
from keras_hsum.layers.masking import merge_masks

SECTION_WEIGHTINGS = ("scores", "probabilities")


@keras.saving.register_keras_serializable(package="keras_hsum")
class DiscourseAttention(keras.layers.Layer):
    """Additive attention over the words of a document's discourse sections.

    Cohan et al. (2018) attend to sections and to words at every decoder
    step. With s the decoder state, h_j the state of section j and h_(j,i)
    the state of word i of section j, all scores are additive (Bahdanau,
    their Eq. 2):

    - section weights (Eq. 6): beta_j = softmax over valid sections j of
      v_s . tanh(W_s' s + b' + W_h' h_j);
    - word scores: e_(j,i) = v . tanh(W_s s + b + W_h h_(j,i) [+ w_c cov_(j,i)]),
      where the optional coverage cov_(j,i) (the sum of the word weights of
      all previous steps, See et al., 2017) enters through a learned
      vector w_c;
    - word weights (Eq. 5): one softmax over every valid word (j,i) of every
      section, of the word scores weighted by their section's beta:
      `section_weighting="scores"` (default) transcribes Eq. 5 as printed
      and as the authors' released code computes it,
      alpha_(j,i) = softmax_(j,i)(beta_j * e_(j,i));
      `section_weighting="probabilities"` is the hierarchical product
      alpha_(j,i) = beta_j exp(e_(j,i)) / sum_(j',i') beta_j' exp(e_(j',i')),
      computed in log space as softmax_(j,i)(log beta_j + e_(j,i));
    - context (Eq. 4): c = sum_(j,i) alpha_(j,i) h_(j,i).

    Padded words (`token_mask`) and the words of padded sections
    (`section_mask`) get weight exactly 0; a fully padded section gets
    beta = 0, and a document with no valid word gets all-zero weights and a
    zero context (no NaN, forward or backward). Masked scores use a large
    finite negative, never inf.

    While decoding, the memory terms W_h h_(j,i) [B, P, T, A] and
    W_h' h_j [B, P, A] do not change from step to step:
    `project_memory(word_states, section_states)` computes them once and
    `call(..., memory_cache=...)` reuses them at every step (same results,
    without the O(P·T·Dw·A) projection per step).

    The paper scores with the previous decoder state h_(t-1); the authors'
    code (after See et al.) uses the state after the current step. The layer
    attends with whichever `decoder_state` it is given.

    Args:
        attention_dim: A, the width of the additive-attention features
            (v, W_h h, W_s s); See et al. and Cohan et al. use the encoder
            state width.
        use_coverage: create the coverage weight w_c so that `coverage` can
            be passed. A call without `coverage` then means zero coverage
            (the first step; also the paper's training without coverage
            before it is switched on for the last epochs).
        section_weighting: `"scores"` or `"probabilities"`, see above.
        kernel_initializer: initializer of every projection matrix and of
            v, v_s and w_c.
        bias_initializer: initializer of the biases b and b'.
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        decoder_state: float [B, Dd] for one decoder step, or [B, S, Dd] for
            S steps at once (teacher forcing without coverage; this
            materialises [B, S, P, T, A] features, so call step by step for
            long targets).
        word_states: float [B, P, T, Dw], encoder state of every word.
        section_states: float [B, P, Ds], encoder state of every section.
        token_mask: optional bool/0-1 [B, P, T], True for real words.
        section_mask: optional bool/0-1 [B, P], True for real sections.
        coverage: optional float [B, P, T], sum of the alphas of the previous
            steps; only with `use_coverage=True` and a rank-2
            `decoder_state` (coverage makes steps sequential).
        memory_cache: optional dict from `project_memory(word_states,
            section_states)`; its memory terms are used instead of being
            projected again.

    Returns:
        A tuple `(context, alpha, beta)`: context float [B, Dw], word weights
        alpha float [B, P, T] (summing to 1 over valid words), section
        weights beta float [B, P]; with a rank-3 `decoder_state`
        [B, S, Dw], [B, S, P, T] and [B, S, P].

    Example:
    >>> layer = DiscourseAttention(attention_dim=8)
    >>> context, alpha, beta = layer(
    ...     decoder_state=np.ones((2, 6), "float32"),
    ...     word_states=np.ones((2, 3, 4, 5), "float32"),
    ...     section_states=np.ones((2, 3, 7), "float32"),
    ...     token_mask=np.ones((2, 3, 4), "bool"),
    ...     section_mask=np.array([[1, 1, 0], [1, 0, 0]], "bool"),
    ... )
    >>> tuple(context.shape), tuple(alpha.shape), tuple(beta.shape)
    ((2, 5), (2, 3, 4), (2, 3))
    >>> cache = layer.project_memory(
    ...     np.ones((2, 3, 4, 5), "float32"), np.ones((2, 3, 7), "float32"))
    >>> tuple(cache["word_keys"].shape), tuple(cache["section_keys"].shape)
    ((2, 3, 4, 8), (2, 3, 8))

    References:
        Cohan et al. (2018), A Discourse-Aware Attention Model for
        Abstractive Summarization of Long Documents, NAACL.
        See et al. (2017), Get To The Point: Summarization with
        Pointer-Generator Networks, ACL (coverage).
        Bahdanau et al. (2015), Neural Machine Translation by Jointly
        Learning to Align and Translate, ICLR (additive attention).
    """

    def __init__(
        self,
        attention_dim,
        use_coverage=False,
        section_weighting="scores",
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if section_weighting not in SECTION_WEIGHTINGS:
            raise ValueError(
                "DiscourseAttention: `section_weighting` must be one of "
                f"{SECTION_WEIGHTINGS}, received {section_weighting!r}."
            )
        self.attention_dim = attention_dim
        self.use_coverage = use_coverage
        self.section_weighting = section_weighting
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

        def dense(units, use_bias, name):
            return keras.layers.Dense(
                units,
                use_bias=use_bias,
                kernel_initializer=self._clone(self.kernel_initializer),
                bias_initializer=self._clone(self.bias_initializer),
                dtype=self.dtype_policy,
                name=name,
            )

        # Section attention (Eq. 6): v_s . tanh(W_s' s + b' + W_h' h_j).
        self.section_query_dense = dense(attention_dim, True, "section_query_dense")
        self.section_key_dense = dense(attention_dim, False, "section_key_dense")
        self.section_score_dense = dense(1, False, "section_score_dense")
        # Word attention (Eq. 2, 5): v . tanh(W_s s + b + W_h h_(j,i) + w_c cov).
        self.word_query_dense = dense(attention_dim, True, "word_query_dense")
        self.word_key_dense = dense(attention_dim, False, "word_key_dense")
        self.word_score_dense = dense(1, False, "word_score_dense")
        self.coverage_dense = (
            dense(attention_dim, False, "coverage_dense") if use_coverage else None
        )

    @staticmethod
    def _clone(initializer):
        return initializer.__class__.from_config(initializer.get_config())

    def _check_shapes(
        self,
        decoder_state_shape,
        word_states_shape,
        section_states_shape,
        token_mask_shape=None,
        section_mask_shape=None,
        coverage_shape=None,
    ):
        decoder_state_shape = tuple(decoder_state_shape)
        if len(decoder_state_shape) not in (2, 3):
            raise ValueError(
                f"{self.name}: `decoder_state` must have rank 2 with shape "
                "[B,Dd] (one step) or rank 3 with shape [B,S,Dd] (all steps), "
                f"received shape {decoder_state_shape}."
            )
        batch, paragraphs, tokens, _ = check_rank(
            self.name, "word_states", word_states_shape, 4, "[B,P,T,Dw]"
        )
        check_rank(self.name, "section_states", section_states_shape, 3, "[B,P,Ds]")
        check_dims(
            self.name,
            "section_states",
            section_states_shape,
            (batch, paragraphs, None),
            "[B,P,Ds]",
        )
        check_dims(
            self.name,
            "decoder_state",
            decoder_state_shape,
            (batch,) + (None,) * (len(decoder_state_shape) - 1),
            "[B,Dd] or [B,S,Dd]",
        )
        if token_mask_shape is not None:
            check_rank(self.name, "token_mask", token_mask_shape, 3, "[B,P,T]")
            check_dims(
                self.name, "token_mask", token_mask_shape, (batch, paragraphs, tokens), "[B,P,T]"
            )
        if section_mask_shape is not None:
            check_rank(self.name, "section_mask", section_mask_shape, 2, "[B,P]")
            check_dims(
                self.name, "section_mask", section_mask_shape, (batch, paragraphs), "[B,P]"
            )
        if coverage_shape is not None:
            if not self.use_coverage:
                raise ValueError(
                    f"{self.name}: received `coverage` with shape "
                    f"{tuple(coverage_shape)} but the layer was created with "
                    "`use_coverage=False`; create it with `use_coverage=True`."
                )
            if len(decoder_state_shape) != 2:
                raise ValueError(
                    f"{self.name}: `coverage` needs a rank-2 `decoder_state` "
                    "[B,Dd] (coverage depends on the previous steps' weights, so "
                    "steps run one at a time), received `decoder_state` shape "
                    f"{decoder_state_shape}."
                )
            check_rank(self.name, "coverage", coverage_shape, 3, "[B,P,T]")
            check_dims(
                self.name, "coverage", coverage_shape, (batch, paragraphs, tokens), "[B,P,T]"
            )

    def build(
        self,
        decoder_state_shape,
        word_states_shape,
        section_states_shape,
        token_mask_shape=None,
        section_mask_shape=None,
        coverage_shape=None,
    ):
        self._check_shapes(
            decoder_state_shape,
            word_states_shape,
            section_states_shape,
            token_mask_shape,
            section_mask_shape,
            coverage_shape,
        )
        features_shape = tuple(word_states_shape[:3]) + (self.attention_dim,)
        self.section_query_dense.build(decoder_state_shape)
        self.section_key_dense.build(section_states_shape)
        self.section_score_dense.build(tuple(section_states_shape[:2]) + (self.attention_dim,))
        self.word_query_dense.build(decoder_state_shape)
        self.word_key_dense.build(word_states_shape)
        self.word_score_dense.build(features_shape)
        if self.coverage_dense is not None:
            self.coverage_dense.build(tuple(word_states_shape[:3]) + (1,))
        expect_width(self, "decoder_state", decoder_state_shape)
        self.built = True

    def project_memory(self, word_states, section_states):
        """The attention's memory terms, to pass as `memory_cache`.

        Args:
            word_states: float [B, P, T, Dw], encoder state of every word.
            section_states: float [B, P, Ds], encoder state of every section.

        Returns:
            A dict: `"word_keys"` W_h h_(j,i) [B, P, T, A] and
            `"section_keys"` W_h' h_j [B, P, A], in the compute dtype.
        """
        if not self.built:
            raise ValueError(
                f"{self.name}: `project_memory` needs a built layer (its "
                "projections are sized by the first call); call the layer "
                "once, or build it, first."
            )
        return {
            "word_keys": self.word_key_dense(word_states),
            "section_keys": self.section_key_dense(section_states),
        }

    def _check_memory_cache(self, memory_cache, word_states_shape):
        check_cache_keys(self, "memory_cache", memory_cache, ("section_keys", "word_keys"),
                         "project_memory(word_states, section_states)")
        batch, paragraphs, tokens = tuple(word_states_shape)[:3]
        for key, rank, dims, spec in (
            ("word_keys", 4, (batch, paragraphs, tokens, self.attention_dim), "[B,P,T,A]"),
            ("section_keys", 3, (batch, paragraphs, self.attention_dim), "[B,P,A]"),
        ):
            name = f"memory_cache['{key}']"
            shape = check_rank(self.name, name, memory_cache[key].shape, rank, spec)
            check_dims(
                self.name, name, shape, dims, f"{spec} (B, P, T of `word_states`)"
            )

    def call(
        self,
        decoder_state,
        word_states,
        section_states,
        token_mask=None,
        section_mask=None,
        coverage=None,
        memory_cache=None,
    ):
        self._check_shapes(
            decoder_state.shape,
            word_states.shape,
            section_states.shape,
            None if token_mask is None else token_mask.shape,
            None if section_mask is None else section_mask.shape,
            None if coverage is None else coverage.shape,
        )
        if memory_cache is None:
            memory_cache = self.project_memory(word_states, section_states)
        else:
            self._check_memory_cache(memory_cache, word_states.shape)
        one_step = len(decoder_state.shape) == 2
        if one_step:
            decoder_state = decoder_state[:, None, :]  # [B,S=1,Dd]

        # Section scores [B,S,P] (Eq. 6).
        section_features = ops.tanh(
            self.section_query_dense(decoder_state)[:, :, None, :]
            + memory_cache["section_keys"][:, None, :, :]
        )
        section_scores = ops.squeeze(self.section_score_dense(section_features), -1)

        # Word scores e [B,S,P,T] (Eq. 2, with coverage).
        word_features = (
            self.word_query_dense(decoder_state)[:, :, None, None, :]
            + memory_cache["word_keys"][:, None, :, :, :]
        )
        if coverage is not None:
            coverage_features = self.coverage_dense(
                ops.cast(coverage, self.compute_dtype)[..., None]
            )
            word_features = word_features + coverage_features[:, None, :, :, :]
        word_scores = ops.squeeze(self.word_score_dense(ops.tanh(word_features)), -1)

        context, alpha, beta = self._weights_and_context(
            section_scores, word_scores, word_states, token_mask, section_mask
        )
        if one_step:
            return context[:, 0], alpha[:, 0], beta[:, 0]
        return context, alpha, beta

    def loop_weights(self):
        """The weights `attend` reads, in the compute dtype, to read once
        before a decoder loop instead of at every step.

        Returns:
            A dict: `"query_kernel"` [Dd, 2A], W_s' and W_s side by side
            (both queries in one matmul), `"query_bias"` [2A], b' and b;
            `"section_vector"` v_s and `"word_vector"` v [A]; with
            coverage, `"coverage_vector"` w_c [A]. Built from the layer's
            own weights at call time: the variables stay as they are.
        """
        if not self.built:
            raise ValueError(
                f"{self.name}: `loop_weights` needs a built layer (its "
                "projections are sized by the first call); call the layer "
                "once, or build it, first."
            )

        def read(weight):
            return ops.cast(weight, self.compute_dtype)

        queries = (self.section_query_dense, self.word_query_dense)
        weights = {
            "query_kernel": ops.concatenate([read(d.kernel) for d in queries], axis=-1),
            "query_bias": ops.concatenate([read(d.bias) for d in queries], axis=-1),
            "section_vector": read(self.section_score_dense.kernel)[:, 0],
            "word_vector": read(self.word_score_dense.kernel)[:, 0],
        }
        if self.coverage_dense is not None:
            weights["coverage_vector"] = read(self.coverage_dense.kernel)[0]
        return weights

    def attend(
        self,
        decoder_state,
        word_states,
        section_states,
        token_mask=None,
        section_mask=None,
        coverage=None,
        memory_cache=None,
        loop_weights=None,
    ):
        """One step of `call`, for the body of a decoder loop.

        The same math and arguments as `call` with a rank-2
        `decoder_state` and a `memory_cache` (both required here), plus
        `loop_weights`, the dict of `loop_weights()` read before the loop.
        Fewer operations per step: both queries in one matmul, the scores
        through `additive_scores`, whose gradient keeps no [B, P, T, A]
        features per step, and the softmaxes through
        `softmax_keeping_weights`, whose gradient keeps only the weights.
        Called outside `__call__`: the layer must be built, and floating
        inputs in its compute dtype (`coverage` is cast).

        Returns:
            `(context [B, Dw], alpha [B, P, T], beta [B, P])`.
        """
        if memory_cache is None or loop_weights is None:
            raise ValueError(
                f"{self.name}: `attend` needs `memory_cache` (from "
                "`project_memory`) and `loop_weights` (from `loop_weights()`), "
                f"received memory_cache={type(memory_cache).__name__} and "
                f"loop_weights={type(loop_weights).__name__}; or call the layer."
            )
        if len(decoder_state.shape) != 2:
            raise ValueError(
                f"{self.name}: `attend` takes one step, `decoder_state` [B,Dd]; "
                f"received shape {tuple(decoder_state.shape)}. Call the layer for "
                "[B,S,Dd]."
            )
        queries = ops.add(
            ops.matmul(decoder_state, loop_weights["query_kernel"]),
            loop_weights["query_bias"],
        )  # [B,2A]
        section_scores = additive_scores(
            queries[:, : self.attention_dim],
            memory_cache["section_keys"],
            loop_weights["section_vector"],
        )
        coverage_terms = ()
        if coverage is not None:
            if not self.use_coverage:
                raise ValueError(
                    f"{self.name}: received `coverage` but the layer was created "
                    "with `use_coverage=False`; create it with `use_coverage=True`."
                )
            coverage_terms = (
                ops.cast(coverage, self.compute_dtype),
                loop_weights["coverage_vector"],
            )
        word_scores = additive_scores(
            queries[:, self.attention_dim:],
            memory_cache["word_keys"],
            loop_weights["word_vector"],
            *coverage_terms,
        )
        context, alpha, beta = self._weights_and_context(
            section_scores[:, None], word_scores[:, None], word_states, token_mask,
            section_mask, softmax=softmax_keeping_weights,
        )
        return context[:, 0], alpha[:, 0], beta[:, 0]

    def _weights_and_context(
        self, section_scores, word_scores, word_states, token_mask, section_mask,
        softmax=masked_softmax,
    ):
        """Eq. 4-6 from the scores: section scores [B,S,P] and word scores
        [B,S,P,T] → `(context [B,S,Dw], alpha [B,S,P,T], beta [B,S,P])`;
        `softmax` is `masked_softmax` or `softmax_keeping_weights`."""
        shape = ops.shape(word_scores)
        batch, steps, paragraphs, tokens = shape[0], shape[1], shape[2], shape[3]
        section_mask = as_bool_mask(section_mask)
        step_section_mask = None if section_mask is None else section_mask[:, None, :]
        beta = softmax(section_scores, step_section_mask, axis=-1)

        # Word weights alpha [B,S,P,T]: one softmax over all words (Eq. 5).
        if self.section_weighting == "scores":
            logits = beta[..., None] * word_scores
        else:
            log_beta = section_scores
            if step_section_mask is not None:
                log_beta = ops.where(
                    step_section_mask,
                    section_scores,
                    ops.cast(large_negative(section_scores.dtype), section_scores.dtype),
                )
            log_beta = log_beta - ops.logsumexp(log_beta, axis=-1, keepdims=True)
            logits = log_beta[..., None] + word_scores
        word_mask = merge_masks(
            token_mask, None if section_mask is None else section_mask[:, :, None]
        )
        flat_logits = ops.reshape(logits, (batch, steps, paragraphs * tokens))
        flat_mask = (
            None
            if word_mask is None
            else ops.reshape(
                ops.broadcast_to(word_mask, (batch, paragraphs, tokens)),
                (batch, 1, paragraphs * tokens),
            )
        )
        alpha = ops.reshape(
            softmax(flat_logits, flat_mask, axis=-1),
            (batch, steps, paragraphs, tokens),
        )

        # Context (Eq. 4).
        context = ops.einsum("bspt,bptd->bsd", alpha, word_states)
        return context, alpha, beta

    def compute_output_shape(
        self,
        decoder_state_shape,
        word_states_shape,
        section_states_shape,
        token_mask_shape=None,
        section_mask_shape=None,
        coverage_shape=None,
        memory_cache_shape=None,
    ):
        self._check_shapes(
            decoder_state_shape,
            word_states_shape,
            section_states_shape,
            token_mask_shape,
            section_mask_shape,
            coverage_shape,
        )
        batch, paragraphs, tokens, width = tuple(word_states_shape)
        leading = tuple(decoder_state_shape[:-1])  # (B,) or (B, S)
        return (
            leading + (width,),
            leading + (paragraphs, tokens),
            leading + (paragraphs,),
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "attention_dim": self.attention_dim,
                "use_coverage": self.use_coverage,
                "section_weighting": self.section_weighting,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config


def additive_scores(queries, keys, vector, coverage=None, coverage_vector=None):
    """Additive-attention scores v . tanh(q + k_n [+ cov_n w_c]), with
    their gradient written out.

    Left to automatic differentiation, a decoder loop saves the tanh
    features [B, N..., A] of every step twice (tanh and 1 - tanh²), each a
    kernel per step and B·N·A values per step kept for the backward pass.
    This gradient keeps nothing the size of the features: it computes them
    again from the queries, keys and coverage.

    Args:
        queries: float [B, A], q.
        keys: float [B, N..., A], k for every memory position (N... one or
            two axes: sections [B, P, A], words [B, P, T, A]).
        vector: float [A], v.
        coverage: optional float [B, N...], cov; only with `coverage_vector`.
        coverage_vector: optional float [A], w_c.

    Returns:
        Scores float [B, N...]: features = tanh((q + k) + cov w_c) and
        features · v, in the order (and, as `keras.layers.Dense` computes
        them, with the ops) of `DiscourseAttention.call`.
    """
    memory_axes = tuple(range(1, len(keys.shape) - 1))

    def features_of(queries, keys, coverage, coverage_vector):
        for axis in memory_axes:
            queries = ops.expand_dims(queries, axis)
        features = ops.add(queries, keys)
        if coverage is not None:
            features = ops.add(
                features, ops.matmul(coverage[..., None], coverage_vector[None, :])
            )
        return ops.tanh(features)

    def scores_and_gradient(queries, keys, vector, coverage=None, coverage_vector=None):
        features = features_of(queries, keys, coverage, coverage_vector)
        scores = ops.squeeze(ops.matmul(features, vector[:, None]), -1)

        def gradient(*upstream):
            (d_scores,) = upstream
            features = features_of(queries, keys, coverage, coverage_vector)
            # d(features) = d(scores) v; through tanh: · (1 - features²).
            d_inputs = ops.matmul(d_scores[..., None], vector[None, :]) * (
                1.0 - features * features
            )  # [B,N...,A]
            all_axes = len(keys.shape) - 1
            grads = [
                ops.sum(d_inputs, axis=memory_axes),
                d_inputs,
                ops.tensordot(d_scores, features, axes=all_axes),
            ]
            if coverage is not None:
                grads += [
                    ops.squeeze(ops.matmul(d_inputs, coverage_vector[:, None]), -1),
                    ops.tensordot(coverage, d_inputs, axes=all_axes),
                ]
            return tuple(grads)

        return scores, gradient

    if (coverage is None) != (coverage_vector is None):
        raise ValueError(
            "additive_scores: pass `coverage` [B,N...] and `coverage_vector` [A] "
            f"together; received coverage={type(coverage).__name__} and "
            f"coverage_vector={type(coverage_vector).__name__}."
        )
    if coverage is None:
        return ops.custom_gradient(
            lambda queries, keys, vector: scores_and_gradient(queries, keys, vector)
        )(queries, keys, vector)
    return ops.custom_gradient(scores_and_gradient)(
        queries, keys, vector, coverage, coverage_vector
    )


def softmax_keeping_weights(scores, mask=None, axis=-1):
    """`masked_softmax` whose gradient is written from its weights alone.

    The weights w of a softmax are all its gradient needs:
    d scores = w (d w - Σ_axis d w · w); a masked entry has w = 0 and gets 0,
    as through `masked_softmax`. Automatic differentiation keeps the
    masked scores, their maximum and sum besides, each one more value
    (and kernel) per step in a decoder loop.

    Args:
        scores: float tensor of any shape.
        mask: optional bool/0-1 tensor broadcastable to `scores`; True = keep.
        axis: the normalisation axis.

    Returns:
        `masked_softmax(scores, mask, axis)`.
    """
    def weights_and_gradient(scores, *keep):
        weights = masked_softmax(scores, keep[0] if keep else None, axis=axis)

        def gradient(*upstream):
            (d_weights,) = upstream
            d_scores = weights * (
                d_weights - ops.sum(d_weights * weights, axis=axis, keepdims=True)
            )
            return (d_scores,) + tuple(ops.zeros_like(k) for k in keep)

        return weights, gradient

    if mask is None:
        return ops.custom_gradient(weights_and_gradient)(scores)
    keep = ops.cast(ops.broadcast_to(as_bool_mask(mask), ops.shape(scores)), scores.dtype)
    return ops.custom_gradient(weights_and_gradient)(scores, keep)
