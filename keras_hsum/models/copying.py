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
from keras_hsum.layers.masking import fold_rows
from keras_hsum.layers.masking import unfold_rows
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

    The N rows of the decoder side (`logits`, `hidden`, `decoder_inputs`,
    `paragraph_weights`) may be N = B·K hypotheses sharing the B examples of
    the source side (`memory`, `source_ids`, `token_mask`, `keys`): row
    b·K + k reads example b, as a search's `beam_cache` shares one copy of
    the memory. The K rows are folded into the query axis
    (`masking.fold_rows`), so the memory is read once per example.

    Args:
        model: a model with `copy_attention` and `copy_switch` sublayers.
        logits: float [N,S,V], the decoder's vocabulary logits.
        hidden: float [N,S,D], the final decoder states h_s.
        decoder_inputs: float [N,S,D], the embedded decoder inputs x_s.
        memory: float [B,P,T,D], the source token states.
        source_ids: int [B,P,T], the source token ids (the words copied).
        token_mask: bool [B,P,T].
        paragraph_weights: optional float [N,S,P] (hierarchical copying).
        keys: optional precomputed `copy_attention.project_keys(memory)`.

    Returns:
        `(log_probabilities float32 [N,S,V], attention float32 [N,S,P,T],
        p_gen float32 [N,S,1])`.
    """
    hidden, rows = fold_rows(hidden, memory)
    logits, _ = fold_rows(logits, memory)
    decoder_inputs, _ = fold_rows(decoder_inputs, memory)
    if paragraph_weights is not None:
        paragraph_weights, _ = fold_rows(paragraph_weights, memory)
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
    return tuple(unfold_rows(x, rows) for x in (log_probabilities, attention, p_gen))

