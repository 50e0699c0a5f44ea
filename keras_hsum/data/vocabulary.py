"""SentencePiece vocabularies: training, saving, loading, tokenising.

A vocabulary trained here reserves these ids:

| id | piece     | use                                   |
|----|-----------|---------------------------------------|
| 0  | `<pad>`   | padding (masks are built from it)     |
| 1  | `<unk>`   | unknown                               |
| 2  | `<s>`     | BOS: starts every target              |
| 3  | `</s>`    | EOS: ends every target                |
| 4  | `<title>` | separates a title/query from the text |
| 5  | `<para>`  | paragraph separator (flat inputs)     |
| 6  | `<sent>`  | sentence separator                    |
| 7  | `<doc>`   | document separator (multi-document)   |

Foreign models (e.g. `../shared/tokenizers/spm_unigram_32k.model`) load too;
separator ids they lack are `None`.

Python-side tokenisation uses the `sentencepiece` processor; in-graph
tokenisation (for SavedModels) uses
`keras_hub.tokenizers.SentencePieceTokenizer` on the same serialized proto and
gives the same ids.
"""

import io
import itertools
import os

import sentencepiece

from keras_hsum.checks import check_int

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3
SEPARATORS = ("<title>", "<para>", "<sent>", "<doc>")


def checked_id(value, vocabulary_size):
    """`value` as an int token id in [0, vocabulary_size), or a ValueError
    (a float, a bool or a non-integer array scalar is refused)."""
    if isinstance(value, (float, bool)) or (
        hasattr(value, "dtype") and "int" not in str(value.dtype)
    ):
        raise ValueError(f"token ids must be integers; received {value!r}.")
    piece_id = int(value)
    if not 0 <= piece_id < vocabulary_size:
        raise ValueError(
            f"token id {piece_id} is outside this vocabulary's "
            f"[0, {vocabulary_size}) ids."
        )
    return piece_id


class Vocabulary:
    """A SentencePiece model with the project's reserved ids.

    Args:
        proto: the serialized SentencePiece model (bytes).

    Example:
    >>> vocab = Vocabulary.train(["The cat sat on the mat.", "Dogs bark."] * 10,
    ...                          vocabulary_size=40)
    >>> vocab.pad_id, vocab.bos_id, vocab.eos_id, vocab.paragraph_id
    (0, 2, 3, 5)
    >>> ids = vocab.encode("The cat sat.")
    >>> vocab.decode(ids)
    'The cat sat.'
    >>> from keras_hsum.data import corpora
    >>> foreign = Vocabulary.load(corpora.sample_tokenizer_path())
    >>> ids = foreign.encode("Hierarchical transformers summarize.")
    >>> [foreign.id_to_piece(i) for i in ids[:3]], foreign.paragraph_id
    (['▁Hi', 'er', 'arch'], None)
    """

    def __init__(self, proto):
        if not isinstance(proto, (bytes, bytearray)):
            raise TypeError(
                "Vocabulary expects the serialized SentencePiece model as "
                f"bytes, received {type(proto).__name__}. Use "
                "`Vocabulary.load(path)` to read a .model file."
            )
        self.proto = bytes(proto)
        try:
            self._processor = sentencepiece.SentencePieceProcessor(model_proto=self.proto)
        except RuntimeError as error:  # SentencePiece's "INTERNAL: ... ParseFromArray"
            raise ValueError(
                f"Vocabulary received {len(self.proto)} bytes that are not a serialized "
                "SentencePiece model (the bytes of a .model file, as `Vocabulary.load` "
                f"reads them, or `Vocabulary.proto`); SentencePiece says: {error}"
            ) from None
        self.pad_id = self._processor.pad_id()
        self.unk_id = self._processor.unk_id()
        self.bos_id = self._processor.bos_id()
        self.eos_id = self._processor.eos_id()
        for name, key in zip(
            ("title_id", "paragraph_id", "sentence_id", "document_id"),
            SEPARATORS,
        ):
            setattr(self, name, self._lookup(key))
        if self.pad_id < 0:
            raise ValueError(
                "This SentencePiece model has no padding piece (pad_id=-1); "
                "keras_hsum needs one to pad tensors. Train it with "
                "`Vocabulary.train` (pad=0) or with --pad_id=0."
            )

    @property
    def vocabulary_size(self):
        """V: the number of pieces, reserved ones included."""
        return self._processor.get_piece_size()

    @classmethod
    def train(
        cls,
        sentences,
        vocabulary_size=8000,
        character_coverage=0.9995,
        max_sentences=2_000_000,
        num_threads=1,
    ):
        """Trains a unigram SentencePiece model on an iterable of sentences.

        Args:
            sentences: an iterable of str (e.g. `corpus_sentences(examples)`);
                consumed once, streamed to the trainer.
            vocabulary_size: V, reserved pieces included. On a small corpus
                the trainer may not reach V; it then stops at the largest
                size the corpus supports (`hard_vocab_limit=False`).
            character_coverage: fraction of characters covered by pieces.
            max_sentences: at most this many sentences are sampled; below
                that, training is deterministic for the same input.
            num_threads: trainer threads (1 keeps results reproducible).

        Returns:
            A `Vocabulary`.
        """
        if isinstance(sentences, (str, bytes)):
            raise TypeError(
                "Vocabulary.train expects an iterable of sentences (str); received "
                "one str, which would train on its characters."
            )
        vocabulary_size = check_int("vocabulary_size", vocabulary_size)
        model = io.BytesIO()
        iterator = (s for s in sentences if s and s.strip())
        first = next(iterator, None)
        if first is None:
            raise ValueError(
                "Vocabulary.train received no non-empty sentence; expected an "
                "iterable of str, e.g. `corpus_sentences(examples)` of a corpus "
                "with text."
            )
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=itertools.chain([first], iterator),
            model_writer=model,
            model_type="unigram",
            vocab_size=vocabulary_size,
            character_coverage=character_coverage,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            user_defined_symbols=list(SEPARATORS),
            hard_vocab_limit=False,
            input_sentence_size=max_sentences,
            shuffle_input_sentence=True,
            max_sentence_length=16384,
            num_threads=num_threads,
            minloglevel=2,
        )
        return cls(model.getvalue())

    @classmethod
    def load(cls, path):
        """Loads a `.model` file written by `save` or by sentencepiece."""
        with open(os.fspath(path), "rb") as handle:
            return cls(handle.read())

    def save(self, path):
        """Writes the serialized model to `path` (a `.model` file)."""
        path = os.fspath(path)
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(self.proto)

    def encode(self, text):
        """Tokenises one str into a list of int ids (no BOS/EOS)."""
        return self._processor.encode(text, out_type=int)

    def encode_batch(self, texts):
        """Tokenises a list of str into a list of lists of int ids."""
        if isinstance(texts, (str, bytes)):
            raise TypeError(
                "encode_batch expects a list of str; received one str (use "
                "`encode` for a single text)."
            )
        if not texts:
            return []
        return self._processor.encode(list(texts), out_type=int)

    def _checked_id(self, value):
        """`value` as an int id in [0, vocabulary_size), or a ValueError."""
        return checked_id(value, self.vocabulary_size)

    def decode(self, ids):
        """Detokenises a sequence of int ids (list or 1-D array); padding,
        BOS and EOS are dropped."""
        if getattr(ids, "ndim", 1) != 1 or isinstance(ids, (str, bytes, int)):
            raise ValueError(
                "decode expects one sequence of ids (a list or a 1-D array); "
                f"received {type(ids).__name__}"
                + (f" of shape {tuple(ids.shape)}" if hasattr(ids, "shape") else "")
                + ". Decode a batch row by row."
            )
        skip = {self.pad_id, self.bos_id, self.eos_id}
        ids = [self._checked_id(i) for i in ids]
        return self._processor.decode([i for i in ids if i not in skip])

    def id_to_piece(self, piece_id):
        """The piece spelled by id `piece_id` (an int in [0, vocabulary_size))."""
        return self._processor.id_to_piece(self._checked_id(piece_id))

    def _lookup(self, piece):
        """The id of `piece`, or None where SentencePiece answers the
        unknown id for a piece it does not have."""
        piece_id = self._processor.piece_to_id(piece)
        return piece_id if self._processor.id_to_piece(piece_id) == piece else None

    def piece_to_id(self, piece):
        """The id of `piece`, spelled as the model spells it ("," or
        "▁the": a leading "▁" marks a word start).

        Raises:
            ValueError: the model has no such piece (SentencePiece itself
                would silently return the unknown id).
        """
        piece_id = self._lookup(piece)
        if piece_id is not None:
            return piece_id
        bare = piece.lstrip("▁")
        near = [
            other for other in (bare, "▁" + bare)
            if other != piece and self._lookup(other) is not None
        ]
        raise ValueError(
            f"{piece!r} is not a piece of this vocabulary ({self.vocabulary_size} "
            "pieces)." + (f" It has {near[0]!r}." if near else "")
        )

    def keras_hub_tokenizer(self, sequence_length=None):
        """The in-graph tokenizer on the same model.

        Returns:
            A `keras_hub.tokenizers.SentencePieceTokenizer` whose ids equal
            `encode`'s; it is a tensorflow-text op and survives SavedModel
            export.
        """
        import keras_hub

        return keras_hub.tokenizers.SentencePieceTokenizer(
            proto=self.proto, sequence_length=sequence_length
        )


def corpus_sentences(examples, include_summaries=True):
    """Yields every sentence of `examples` for vocabulary training.

    Titles, queries, section headings and summaries (when
    `include_summaries`) are included, so that the decoder's vocabulary is
    covered too.
    """
    for example in examples:
        for text in (example.title, example.query):
            if text:
                yield text
        for document in example.documents:
            if document.title:
                yield document.title
            for section in document.sections:
                if section.heading:
                    yield section.heading
                for paragraph in section.paragraphs:
                    yield from paragraph
        if include_summaries:
            for reference in example.references or (example.summary,):
                if reference:
                    yield reference
