"""Sentences -> token ids and ids -> text, in the graph.

SentencePiece tokenisation of every sentence (`SentencePieceTokenizer`:
the same ids as `keras_hsum.data.vocabulary.Vocabulary.encode`), or a
keras-hub preset's own tokenizer (`PresetVocabulary.graph_tokenizer`);
sentences without tokens are dropped. Detokenisation writes the ids before
EOS without padding, BOS and the separator pieces.
"""

import functools

import tensorflow as tf
import tensorflow_text as tf_text
from google.protobuf import descriptor_pb2
from google.protobuf import descriptor_pool
from google.protobuf import message_factory
from google.protobuf.message import DecodeError

from keras_hsum.data.structuring.segments import length_rows

# SentencePiece's ModelProto (sentencepiece_model.proto): the values that
# let tensorflow-text's compiled tokenizer give the sentencepiece
# package's ids. Piece types NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4
# (not BYTE 6, UNUSED 5); model type UNIGRAM 1.
_FAST_PIECE_TYPES = (1, 2, 3, 4)
_NORMAL, _UNKNOWN, _CONTROL = 1, 2, 3
_UNIGRAM = 1
_FAST_NORMALIZERS = ("nmt_nfkc", "nmt_nfkc_cf")


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
    return SentencePieceTokenizer(bytes(vocabulary_proto))


class SentencePieceTokenizer(tf.Module):
    """A SentencePiece model in the graph, with the ids of the
    `sentencepiece` package (`Vocabulary.encode`).

    `tokenize` runs tensorflow-text's compiled unigram tokenizer
    (`FastSentencepieceTokenizer`: a double-array trie and one Viterbi
    pass, 2.0-2.2x faster than the classic op on the bundled corpora,
    `benchmarks/tokenizer_ops.py`) when `fast_tokenizer_mismatch(proto)`
    finds nothing it cannot reproduce, else the classic op
    (`tf_text.SentencepieceTokenizer`, the sentencepiece library compiled
    into tensorflow-text). Measured against the package on every sentence,
    title, query, summary and reference of the bundled corpora (90,525
    texts) and on adversarial text (empty, whitespace only, control
    characters, unknown scripts, fullwidth and combining characters, a
    literal "▁", separators), for the bundled 32k model and a 4k model of
    `Vocabulary.train`: the compiled tokenizer gives the package's ids on
    every text; the classic op breaks ties between equal-scored
    segmentations the other way on 17 texts for each model ("Yayyyy",
    "0xffffffff", "44,199 (pivot), 7,813 (train)"), so it is only the
    fallback.

    `tokenize_with_offsets` is the classic op's (the compiled kernel has
    no offsets): with offsets, ids may thus differ from `tokenize`'s on
    such ties; the extended vocabulary (`extended_vocabulary.py`)
    tokenizes its sources and targets with offsets alike.

    `detokenize` writes each id's surface from a table of the model's
    pieces (`_PieceSurfaces`: a gather, one join per row, one regex for
    the leading spaces) when `piece_table_mismatch(proto)` finds nothing
    it cannot reproduce, else, and for any call holding an id of another
    piece type or out of range, the classic op. Equal to the classic op
    on the structured rows and random ids of every piece type
    (tests/data/test_structuring_tokens.py); 2-4x faster on rows cut out
    of over-long sentences (the structurer's one detokenisation). The
    compiled kernel's detokenizer is not used: it writes a leading
    `<unk>` as "⁇ " where the package writes " ⁇ ".

    Args:
        proto: the serialized SentencePiece model (bytes).

    Attributes:
        fast_mismatch: None when `tokenize` runs the compiled tokenizer,
            else why it does not (`fast_tokenizer_mismatch`).
    """

    def __init__(self, proto):
        super().__init__(name="sentencepiece_tokenizer")
        self._classic = tf_text.SentencepieceTokenizer(model=proto, out_type=tf.int32)
        self.fast_mismatch, self._fast = _compiled_tokenizer(bytes(proto))
        self.table_mismatch, surfaces = _piece_surfaces(bytes(proto))
        self._surfaces = None
        if surfaces is not None:
            with tf.init_scope():
                self._surfaces = _PieceSurfaces(*surfaces)

    def tokenize(self, texts):
        """tf.string [n] -> int32 ragged [n, None] (int64 row splits, as
        the classic op's)."""
        if self._fast is None:
            return self._classic.tokenize(texts)
        ids = self._fast.tokenize(texts)
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.with_row_splits_dtype(tf.int64)
        return ids

    def tokenize_with_offsets(self, texts):
        """tf.string [n] -> `(ids, starts, ends)`, ragged [n, None] each
        (byte offsets in `texts`): the classic op's."""
        return self._classic.tokenize_with_offsets(texts)

    def detokenize(self, ids):
        """int ragged [n, None] -> tf.string [n]: the text the classic op
        (the sentencepiece package's `decode`) writes of each row. A dense
        int tensor goes to the classic op (as it reads it)."""
        if self._surfaces is None or not isinstance(ids, tf.RaggedTensor):
            return self._classic.detokenize(ids)
        ids = tf.cast(ids, tf.int32)
        return tf.cond(
            self._surfaces.covers(ids.flat_values),
            lambda: self._surfaces.detokenize(ids),
            lambda: self._classic.detokenize(ids),
        )


class _PieceSurfaces:
    """What the sentencepiece package's `decode` writes of each id, for a
    model of NORMAL, UNKNOWN and CONTROL pieces (`piece_table_mismatch`):
    a NORMAL piece with "▁" read as a space, UNKNOWN its `unk_surface`
    (" ⁇ "), CONTROL nothing; other ids (USER_DEFINED, out of range) are
    left to the classic op. The package drops the spaces at the start of
    a row up to its first non-space character or first `<unk>` (measured:
    ["▁", "▁the"] -> "the", ["<s>", "▁", "▁the"] -> "the", ["<unk>",
    "▁the"] -> " ⁇  the", ["▁the", "<unk>", "▁and"] -> "the ⁇  and").

    Args:
        surfaces: list of str, one per id.
        known: list of bool, one per id: the id is written from the table.
        unk_id: the UNKNOWN piece's id.
    """

    def __init__(self, surfaces, known, unk_id):
        self.surfaces = tf.constant(surfaces, tf.string)
        self.known = tf.constant(known, tf.bool)
        self.size = len(surfaces)
        self.unk_id = unk_id

    def covers(self, flat_ids):
        """bool []: every id of int32 [k] is in range and in the table."""
        in_range = (flat_ids >= 0) & (flat_ids < self.size)
        known = tf.gather(self.known, tf.clip_by_value(flat_ids, 0, self.size - 1))
        return tf.reduce_all(in_range & known)

    def detokenize(self, ids):
        """int32 ragged [n, None] (covered ids) -> tf.string [n]."""
        flat = ids.flat_values
        pieces = tf.gather(self.surfaces, flat)
        unknown = tf.equal(flat, self.unk_id)

        def without_unknown():
            joined = tf.strings.reduce_join(ids.with_flat_values(pieces), axis=1)
            return tf.strings.regex_replace(joined, "^ +", "")

        def with_unknown():
            # Each row's pieces before its first <unk> (whose leading
            # spaces go) and from it on, joined apart.
            count = tf.cumsum(tf.cast(unknown, tf.int32))
            rows = length_rows(ids.row_lengths())
            before_row = tf.gather(
                tf.concat([[0], count], 0), tf.cast(ids.row_starts(), tf.int32)
            )
            tail = tf.cast(count - tf.gather(before_row, rows) > 0, tf.int32)
            nrows = tf.cast(ids.nrows(), tf.int32)
            parts = tf.reshape(
                tf.strings.unsorted_segment_join(pieces, rows * 2 + tail, nrows * 2),
                [-1, 2],
            )
            return tf.strings.regex_replace(parts[:, 0], "^ +", "") + parts[:, 1]

        return tf.cond(tf.reduce_any(unknown), with_unknown, without_unknown)


@functools.lru_cache(maxsize=8)
def _compiled_tokenizer(proto):
    """`(fast_tokenizer_mismatch(proto), FastSentencepieceTokenizer or
    None)`, once per model and process (converting a 32k model takes
    about 0.1 s, and tests and evaluations build many structurers).

    The converted model is a constant that the functions calling
    `tokenize` capture (a SavedModel stores it once); it is made eagerly,
    so that a structurer built inside a function works.
    """
    mismatch = fast_tokenizer_mismatch(proto)
    if mismatch is not None:
        return mismatch, None
    with tf.init_scope():
        return None, tf_text.FastSentencepieceTokenizer(proto)


@functools.lru_cache(maxsize=8)
def _piece_surfaces(proto):
    """`(piece_table_mismatch(proto), (surfaces, known, unk_id) or
    None)`, once per model and process (`_PieceSurfaces`' arguments)."""
    mismatch = piece_table_mismatch(proto)
    if mismatch is not None:
        return mismatch, None
    model = _model_proto_class().FromString(bytes(proto))
    surfaces, known, unk_id = [], [], -1
    for index, piece in enumerate(model.pieces):
        if piece.type == _NORMAL:
            surfaces.append(piece.piece.replace("\u2581", " "))
        elif piece.type == _UNKNOWN:
            surfaces.append(model.trainer_spec.unk_surface)
            unk_id = index
        else:
            surfaces.append("")
        known.append(piece.type in (_NORMAL, _UNKNOWN, _CONTROL))
    return None, (tuple(surfaces), tuple(known), unk_id)


def piece_table_mismatch(proto):
    """Why `decode` of this model is not a table of piece surfaces
    (`_PieceSurfaces`), or None when it is.

    Returns:
        None, or a str naming the first feature found: whitespace as
        suffix, `add_dummy_prefix`, `remove_extra_whitespaces` or
        `escape_whitespaces` off, a denormaliser, or a proto that does
        not parse. USER_DEFINED, BYTE and UNUSED pieces are allowed: a
        call holding one goes to the classic op.
    """
    try:
        model = _model_proto_class().FromString(bytes(proto))
    except DecodeError:
        return "the model proto does not parse"
    if model.trainer_spec.treat_whitespace_as_suffix:
        return "whitespace as suffix"
    normalizer = model.normalizer_spec
    for option in (
        "add_dummy_prefix", "remove_extra_whitespaces", "escape_whitespaces"
    ):
        if not getattr(normalizer, option):
            return f"{option} off"
    if model.denormalizer_spec.precompiled_charsmap:
        return "a denormaliser"
    return None


def fast_tokenizer_mismatch(proto):
    """Why `FastSentencepieceTokenizer` would not give the sentencepiece
    package's ids for this model, or None when it gives them.

    The compiled tokenizer runs a unigram Viterbi over the NORMAL and
    USER_DEFINED pieces, after a normalisation of its own: the model's
    precompiled character map, a dummy prefix added before whitespace runs
    are collapsed, and spaces, tabs, CR and LF taken as whitespace. It
    equals the package for unigram models with the default normalisation
    options and an `nmt_nfkc` character map (which turns tabs and line
    breaks into spaces first). Measured counterexamples (5,121 texts,
    models of 2,000 pieces trained with each option): BPE 4,880 differ;
    byte fallback 2,313; whitespace as suffix all; the `nfkc` and
    `identity` maps on "a", tab, "b"; no dummy prefix on "  x  y " (one
    leading "▁" more). `nmt_nfkc_cf` and
    `split_digits` (a training option) agreed and are allowed;
    `remove_extra_whitespaces = false` agreed on that sample but is refused
    as untested beyond it.

    Returns:
        None, or a str naming the first feature found: a model type other
        than unigram, byte fallback, whitespace as suffix, a piece type
        other than normal, unknown, control and user-defined, a
        normaliser other than `nmt_nfkc`/`nmt_nfkc_cf` or without its
        character map, `add_dummy_prefix`, `remove_extra_whitespaces` or
        `escape_whitespaces` turned off, or a proto that does not parse.
    """
    try:
        model = _model_proto_class().FromString(bytes(proto))
    except DecodeError:
        return "the model proto does not parse"
    trainer, normalizer = model.trainer_spec, model.normalizer_spec
    if trainer.model_type != _UNIGRAM:
        return "not a unigram model"
    if trainer.byte_fallback:
        return "byte fallback"
    if trainer.treat_whitespace_as_suffix:
        return "whitespace as suffix"
    piece_types = {piece.type for piece in model.pieces}
    if not piece_types <= set(_FAST_PIECE_TYPES):
        return f"piece types {sorted(piece_types - set(_FAST_PIECE_TYPES))}"
    if (normalizer.name not in _FAST_NORMALIZERS
            or not normalizer.precompiled_charsmap):
        return f"normaliser {normalizer.name!r}"
    for option in (
        "add_dummy_prefix", "remove_extra_whitespaces", "escape_whitespaces"
    ):
        if not getattr(normalizer, option):
            return f"{option} off"
    return None


@functools.lru_cache(maxsize=None)
def _model_proto_class():
    """The fields of SentencePiece's `ModelProto` that
    `fast_tokenizer_mismatch` reads, as a message class (the others are
    skipped when parsing). Built here from their numbers, types and
    defaults in sentencepiece_model.proto, because the `sentencepiece`
    package's generated module needs a newer protobuf runtime than
    TensorFlow's."""
    file = descriptor_pb2.FileDescriptorProto(
        name="keras_hsum_sentencepiece_model.proto",
        package="keras_hsum_sentencepiece",
        syntax="proto2",
    )
    field = descriptor_pb2.FieldDescriptorProto

    def message(name, fields):
        described = file.message_type.add(name=name)
        for field_name, number, kind, default in fields:
            added = described.field.add(
                name=field_name, number=number, label=field.LABEL_OPTIONAL
            )
            if kind in ("Piece", "TrainerSpec", "NormalizerSpec"):
                added.type = field.TYPE_MESSAGE
                added.type_name = f".keras_hsum_sentencepiece.{kind}"
            else:
                added.type = kind
            if default is not None:
                added.default_value = default
            if field_name == "pieces":
                added.label = field.LABEL_REPEATED

    # Enums read as the int32 they are on the wire.
    message("Piece", [
        ("piece", 1, field.TYPE_STRING, None),
        ("type", 3, field.TYPE_INT32, "1"),
    ])
    message("TrainerSpec", [
        ("model_type", 3, field.TYPE_INT32, "1"),
        ("treat_whitespace_as_suffix", 24, field.TYPE_BOOL, "false"),
        ("byte_fallback", 35, field.TYPE_BOOL, "false"),
        ("unk_surface", 44, field.TYPE_STRING, " \u2047 "),
    ])
    message("NormalizerSpec", [
        ("name", 1, field.TYPE_STRING, None),
        ("precompiled_charsmap", 2, field.TYPE_BYTES, None),
        ("add_dummy_prefix", 3, field.TYPE_BOOL, "true"),
        ("remove_extra_whitespaces", 4, field.TYPE_BOOL, "true"),
        ("escape_whitespaces", 5, field.TYPE_BOOL, "true"),
    ])
    message("ModelProto", [
        ("pieces", 1, "Piece", None),
        ("trainer_spec", 2, "TrainerSpec", None),
        ("normalizer_spec", 3, "NormalizerSpec", None),
        ("denormalizer_spec", 5, "NormalizerSpec", None),
    ])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("keras_hsum_sentencepiece.ModelProto")
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
    row_lengths = ids.row_lengths()
    nonempty = row_lengths > 0
    # The dropped rows hold no ids: only the row partition changes
    # (`tf.ragged.boolean_mask` would copy every id, most of the table's
    # cost on long inputs).
    ids = tf.RaggedTensor.from_row_lengths(
        ids.values, tf.boolean_mask(row_lengths, nonempty), validate=False
    )
    lengths = tf.cast(ids.row_lengths(), tf.int32)
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
