"""Sentences -> token ids and ids -> text, in the graph.

SentencePiece tokenisation of every sentence
(`tensorflow_text.SentencepieceTokenizer` on the vocabulary's proto: the
same ids as `keras_hsum.data.vocabulary.Vocabulary.encode`), or a keras-hub
preset's own tokenizer (`PresetVocabulary.graph_tokenizer`); sentences
without tokens are dropped. Detokenisation writes the ids before EOS
without padding, BOS and the separator pieces.
"""

import tensorflow as tf
import tensorflow_text as tf_text


def graph_tokenizer(vocabulary_proto, preset):
    """The tokenizer a structurer runs (and a SavedModel saves).

    Args:
        vocabulary_proto: the serialized SentencePiece model (bytes), or
            None with `preset`.
        preset: a `PresetVocabulary`, or None.

    Returns:
        An object with `tokenize(tf.string [n]) -> int32 ragged [n, None]`
        and `detokenize(ids ragged [n, None]) -> tf.string [n]` (the
        SentencePiece tokenizer also has `tokenize_with_offsets`).
    """
    if preset is not None:
        # A keras-hub layer: its lookup tables are tracked by the module
        # holding it and saved with it.
        return preset.graph_tokenizer()
    return tf_text.SentencepieceTokenizer(
        model=bytes(vocabulary_proto), out_type=tf.int32
    )


def skipped_ids(vocabulary):
    """The ids that are text of none: sorted list of int.

    Padding, BOS and the separator pieces (`<title>`, `<para>`, `<sent>`,
    `<doc>`) the vocabulary has, and a preset tokenizer's special tokens
    (BART's <s>, <mask>: its `control_ids`); EOS is not among them (BART's
    start token equal to EOS is handled by `text_ids`).
    """
    separators = {
        i
        for i in (
            vocabulary.title_id,
            vocabulary.paragraph_id,
            vocabulary.sentence_id,
            vocabulary.document_id,
        )
        if i is not None
    } - {-1}
    return sorted(
        {vocabulary.pad_id, vocabulary.bos_id}
        | separators
        | set(getattr(vocabulary, "control_ids", ()))
    )


def text_ids(ids, bos_id, eos_id, skipped):
    """The ids of each row that detokenize to text.

    Args:
        ids: int [B, L] (e.g. a decoded summary with BOS first).
        bos_id, eos_id: the vocabulary's.
        skipped: `skipped_ids`.

    Returns:
        int32 ragged [B, None]: the ids before the first EOS, without the
        skipped ids. When BOS equals EOS (BART starts from </s>), a first
        </s> is the start token, not the end.
    """
    ids = tf.cast(tf.convert_to_tensor(ids), tf.int32)
    is_eos = tf.equal(ids, eos_id)
    if bos_id == eos_id:
        is_eos &= tf.range(tf.shape(ids)[1])[None, :] > 0
    before_eos = tf.equal(tf.cumsum(tf.cast(is_eos, tf.int32), axis=1), 0)
    skipped = tf.reduce_any(
        tf.equal(ids[..., None], tf.constant(skipped, tf.int32)), axis=-1
    )
    return tf.ragged.boolean_mask(ids, before_eos & ~skipped)


def sentence_inputs(text, paragraph, space_before_sentences):
    """What the tokenizer reads of each sentence.

    Args:
        text: tf.string [S].
        paragraph: int32 [S], non-decreasing paragraph of each sentence.
        space_before_sentences: the tokenizer marks word starts by the
            space before them (byte-level BPE).

    Returns:
        tf.string [S]: the text, after one space when the sentence
        continues its paragraph and `space_before_sentences`.
    """
    if not space_before_sentences:
        return text
    continues = tf.concat(
        [tf.zeros([tf.minimum(tf.shape(paragraph)[0], 1)], tf.bool),
         tf.equal(paragraph[1:], paragraph[:-1])],
        0,
    )
    return tf.where(continues, " " + text, text)


def sentence_table(ids, text, paragraph, paragraphs, words=None):
    """The sentences with tokens, and what the rows need of each.

    Args:
        ids: int32 ragged [S, None], each sentence's token ids.
        text: tf.string [S].
        paragraph: int32 [S], the paragraph of each sentence.
        paragraphs: `text.paragraphs`' `(text, batch, document,
            document_key, section_key)`, per paragraph.
        words: optional, the sentences' `ExtendedVocabulary.words`.

    Returns:
        A dict over the S' sentences with at least one token, in reading
        order: `ids` int32 ragged [S', None], `lengths` int32 [S'], `text`,
        `paragraph`, `batch`, `document`, `document_key`, `section_key`
        ([S'] each), and `words` when given (a sentence without tokens has
        no word either).
    """
    _, paragraph_batch, paragraph_document, paragraph_key, paragraph_section = (
        paragraphs
    )
    lengths = tf.cast(ids.row_lengths(), tf.int32)
    nonempty = lengths > 0
    ids = tf.ragged.boolean_mask(ids, nonempty)
    lengths = tf.boolean_mask(lengths, nonempty)
    text = tf.boolean_mask(text, nonempty)
    paragraph = tf.boolean_mask(paragraph, nonempty)
    sentences = dict(
        ids=ids,
        lengths=lengths,
        text=text,
        paragraph=paragraph,
        batch=tf.gather(paragraph_batch, paragraph),
        document=tf.gather(paragraph_document, paragraph),
        document_key=tf.gather(paragraph_key, paragraph),
        section_key=tf.gather(paragraph_section, paragraph),
    )
    if words is not None:
        sentences["words"] = words
    return sentences
