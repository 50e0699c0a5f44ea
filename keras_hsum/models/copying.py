"""Pointer-generator copying for the Transformer summarizers (optional).

A model built with `pointer_generator=True` keeps a `CopyAttention` head
(`model.copy_attention`) and a `PointerGenerator` switch (`model.copy_switch`)
and turns its decoder's vocabulary logits into the log of

    P(w) = p_gen softmax(logits)(w) + (1 - p_gen) sum_{i: x_i = w} alpha_i

over the fixed vocabulary: these models copy pieces, and a word with an
`<unk>` piece cannot be copied as a word (See et al.'s extended vocabulary,
`TextStructurer(oov_words=K)`, is used by `DiscourseSummarizer` only). `decode` and
`step` then return log-probabilities instead of logits; the label-smoothed
loss and every search take both (log-softmax is idempotent).
"""

from keras import ops

from keras_hsum.layers.copy_attention import CopyAttention
from keras_hsum.layers.pointer_generator import PointerGenerator

# The floor of P(w) before its log (as in DiscourseSummarizer).
MIN_PROBABILITY = 1e-12


def make_copy_layers(model, vocabulary_size):
    """`(CopyAttention, PointerGenerator)` sublayers in `model`'s dtype policy."""
    attention = CopyAttention(dtype=model.dtype_policy, name="copy_attention")
    switch = PointerGenerator(
        vocabulary_size=vocabulary_size,
        num_oov=0,
        dtype=model.dtype_policy,
        name="copy_switch",
    )
    return attention, switch


def copy_log_probabilities(
    model,
    logits,
    hidden,
    decoder_inputs,
    memory,
    source_ids,
    token_mask,
    paragraph_weights=None,
    keys=None,
):
    """log P(w) of the pointer-generator mixture.

    Args:
        model: a model with `copy_attention` and `copy_switch` sublayers.
        logits: float [B,S,V], the decoder's vocabulary logits.
        hidden: float [B,S,D], the final decoder states h_s.
        decoder_inputs: float [B,S,D], the embedded decoder inputs x_s.
        memory: float [B,P,T,D], the source token states.
        source_ids: int [B,P,T], the source token ids (the words copied).
        token_mask: bool [B,P,T].
        paragraph_weights: optional float [B,S,P] (hierarchical copying).
        keys: optional precomputed `copy_attention.project_keys(memory)`.

    Returns:
        `(log_probabilities float32 [B,S,V], attention float32 [B,S,P,T],
        p_gen float32 [B,S,1])`.
    """
    attention, context = model.copy_attention(
        hidden,
        memory,
        token_mask=token_mask,
        paragraph_weights=paragraph_weights,
        keys=keys,
    )
    probabilities = ops.softmax(ops.cast(logits, "float32"), axis=-1)
    distribution, p_gen = model.copy_switch(
        probabilities,
        attention,
        source_ids,
        hidden,
        context,
        decoder_inputs,
        token_mask=token_mask,
    )
    log_probabilities = ops.log(ops.maximum(distribution, MIN_PROBABILITY))
    return log_probabilities, attention, p_gen


def shared_memory_copy_log_probabilities(
    model,
    logits,
    hidden,
    decoder_inputs,
    memory,
    source_ids,
    token_mask,
    paragraph_weights=None,
    keys=None,
):
    """`copy_log_probabilities` (its first output) where the N = B·K rows
    of `logits`, `hidden`, `decoder_inputs` and `paragraph_weights` may
    share the B examples of `memory`, `source_ids`, `token_mask` and `keys`
    (row b·K + k reads example b; a search's `beam_cache`). The K rows are
    folded into the query axis, so the memory is read once per example.

    Returns:
        float32 [N,S,V]: log P(w).
    """
    rows, examples = hidden.shape[0], memory.shape[0]
    fold = rows is None or examples is None or rows != examples
    if fold:
        rows = ops.shape(hidden)[0]
        examples = ops.shape(memory)[0]

        def folded(x):
            return None if x is None else ops.reshape(x, (examples, -1, ops.shape(x)[-1]))

        logits, hidden, decoder_inputs, paragraph_weights = (
            folded(x) for x in (logits, hidden, decoder_inputs, paragraph_weights)
        )
    log_probabilities, _, _ = copy_log_probabilities(
        model, logits, hidden, decoder_inputs, memory, source_ids, token_mask,
        paragraph_weights=paragraph_weights, keys=keys,
    )
    if fold:
        log_probabilities = ops.reshape(
            log_probabilities, (rows, -1, ops.shape(log_probabilities)[-1])
        )
    return log_probabilities
