"""A keras-hub preset's own tokenizer, with the surface of `Vocabulary`.

A run on a pretrained backbone (`--set backbone=PRESET_OR_PATH`) must read
the token ids the backbone was trained with, so its tokenizer replaces the
run's SentencePiece `Vocabulary` everywhere: in `make_dataset` (the
`TextStructurer` tokenizes with it) and inside the exported SavedModel
(the structurer holds the keras-hub tokenizer layer; its ops are
TensorFlow / tensorflow-text ops and its lookup tables are saved with the
module, so the SavedModel still loads with only `tensorflow` and
`tensorflow_text`).

Two tokenizers are supported:

| tokenizer | pieces | pad | EOS | bos_id (decoder start) | unk |
|-----------|--------|-----|-----|------------------------|-----|
| `keras_hub.tokenizers.BartTokenizer` | byte-level BPE (vocabulary + merges) | `<pad>` 1 | `</s>` 2 | `</s>` 2 | `<unk>` 3 |
| `keras_hub.models.T5Tokenizer` | SentencePiece | `<pad>` 0 | `</s>` 1 | `<pad>` 0 | `<unk>` 2 |

(the ids are those of the hub presets; they are read from the tokenizer.)

The decoding contract of keras_hsum starts a target from ONE token,
`bos_id`. T5 starts its decoder from `<pad>` (keras-hub's
`T5Seq2SeqLMPreprocessor` packs the decoder input as `[pad, tokens...,
</s>]`): the same here. BART's `BartSeq2SeqLMPreprocessor` packs it as
`[</s>, <s>, tokens..., </s>]`, two start tokens; here it starts from
`</s>` alone (as fairseq and Hugging Face set `decoder_start_token_id=2`)
and the target is `[</s>, tokens..., </s>]` without `<s>`: a pretrained
BART, which puts `<s>` after `</s>`, learns to drop it in fine-tuning.
`bos_id == eos_id` for BART and `bos_id == pad_id` for T5: the data side
handles both (`TextStructurer.detokenize` does not read a leading start
token as the end; the models mask the first target position as real).

The separators that a keras_hsum SentencePiece vocabulary reserves
(`<title>`, `<para>`, `<sent>`, `<doc>`) are not mapped to any of the
preset's tokens: `title_id`, `paragraph_id`, `sentence_id` and
`document_id` are None, as for a foreign SentencePiece model, and the
structurer inserts no separator (the `"flat"` family joins its paragraphs
without `<para>`). The preset's special tokens (`control_ids`: `<s>`,
`</s>`, `<pad>`, `<mask>`; `<unk>` is not one) are dropped by `decode` and
`TextStructurer.detokenize`.

Byte-level BPE marks a word start by the space before it ("Ġworld"), so
the structurer, which tokenizes sentence by sentence, tokenizes every
sentence after the first of its paragraph with one leading space
(`space_before_sentences`): the ids of a paragraph's sentences are then
the ids of the paragraph (sentences that the text separates by one space).
SentencePiece marks every sentence's first word itself.
"""

import json
import os

import tensorflow as tf

from keras_hsum import run_folder
from keras_hsum.data.vocabulary import checked_id

# The keras-hub tokenizer classes supported, and how each starts decoding.
SUPPORTED_TOKENIZERS = ("BartTokenizer", "T5Tokenizer")
# The file `save` writes (keras-hub's name), which a run folder's tokenizer/ holds.
TOKENIZER_CONFIG = run_folder.TOKENIZER_FILE


class PresetGraphTokenizer(tf.Module):
    """A keras-hub tokenizer as the TensorFlow ops it runs in a graph.

    `tokenize` and `detokenize` are `tf.function`s, so that they run the
    tokenizer's TensorFlow path also when called eagerly (keras-hub's eager
    default is a pure-Python path returning Python lists; its BPE
    pre-splits text with another regex than its graph path), and the
    keras-hub layer is an attribute of this module, so that a SavedModel
    holding the module saves its lookup tables.

    Args:
        tokenizer: a keras-hub tokenizer layer.
    """

    def __init__(self, tokenizer):
        super().__init__(name="preset_tokenizer")
        self.tokenizer = tokenizer

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(self, texts):
        """tf.string [n] → int32 ragged [n, None]."""
        return tf.cast(self.tokenizer.tokenize(texts), tf.int32)

    def detokenize(self, ids):
        """int ragged [n, None] → tf.string [n]."""
        return self._detokenize(
            tf.cast(ids, tf.int32).with_row_splits_dtype(tf.int64)
        )

    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.int32)])
    def _detokenize(self, ids):
        return self.tokenizer.detokenize(ids)


def _tokenizer_class(tokenizer):
    """The name of the first supported class in `tokenizer`'s MRO, or None."""
    for klass in type(tokenizer).__mro__:
        if klass.__name__ in SUPPORTED_TOKENIZERS:
            return klass.__name__
    return None


class PresetVocabulary:
    """A keras-hub preset tokenizer (BART's BPE, T5's SentencePiece) with
    the attributes and methods of `keras_hsum.data.Vocabulary` that the
    library reads.

    Args:
        tokenizer: a `keras_hub.tokenizers.BartTokenizer` or
            `keras_hub.models.T5Tokenizer` (or a subclass), with its
            vocabulary set.

    Attributes:
        pad_id, eos_id, unk_id: the tokenizer's ids (`unk_id` None when it
            has no `<unk>`).
        bos_id: the single decoder start token (`</s>` for BART, `<pad>`
            for T5; see the module docstring).
        title_id, paragraph_id, sentence_id, document_id: None.
        control_ids: the ids `decode` drops (the special tokens but `<unk>`).
        vocabulary_size: V.
        kind: `"bart"` or `"t5"`.
        space_before_sentences: the structurer tokenizes a paragraph's
            later sentences with a leading space (BPE).

    Example (a hub preset needs the network: `from_preset("bart_base_en")`;
    here a T5 tokenizer on a small SentencePiece model made on the spot):
    >>> import keras_hub
    >>> from keras_hsum.data import Vocabulary
    >>> spm = Vocabulary.train(["The cat sat on the mat.", "Dogs bark."] * 10,
    ...                        vocabulary_size=40)
    >>> vocab = PresetVocabulary(keras_hub.models.T5Tokenizer(proto=spm.proto))
    >>> vocab.kind, vocab.pad_id, vocab.bos_id, vocab.eos_id, vocab.paragraph_id
    ('t5', 0, 0, 3, None)
    >>> ids = vocab.encode("The cat sat.")
    >>> ids == spm.encode("The cat sat."), vocab.decode(ids)
    (True, 'The cat sat.')
    """

    def __init__(self, tokenizer):
        kind = _tokenizer_class(tokenizer)
        if kind is None:
            raise TypeError(
                "PresetVocabulary expects a keras_hub.tokenizers.BartTokenizer or "
                f"keras_hub.models.T5Tokenizer; received {type(tokenizer).__name__}. "
                "Only BART and T5 presets are supported as backbones."
            )
        self.tokenizer = tokenizer
        self.kind = "bart" if kind == "BartTokenizer" else "t5"
        self.pad_id = int(tokenizer.pad_token_id)
        self.eos_id = int(tokenizer.end_token_id)
        self.bos_id = self.eos_id if self.kind == "bart" else self.pad_id
        # piece -> id and back, read once (keras-hub's id_to_token scans the
        # whole BPE vocabulary per call on its TensorFlow path).
        if self.kind == "bart":
            self._vocabulary = {p: int(i) for p, i in tokenizer.vocabulary.items()}
        else:
            self._vocabulary = {p: i for i, p in enumerate(tokenizer.get_vocabulary())}
        self._pieces = {i: p for p, i in self._vocabulary.items()}
        self.unk_id = self._vocabulary.get("<unk>")
        self.title_id = self.paragraph_id = self.sentence_id = self.document_id = None
        special = {int(i) for i in tokenizer.special_token_ids}
        if "<mask>" in self._vocabulary:
            special.add(self._vocabulary["<mask>"])
        self.control_ids = tuple(sorted(special - {self.unk_id}))
        self.space_before_sentences = self.kind == "bart"
        # Python-side ids come from the graph ops the structurer runs.
        self._graph = PresetGraphTokenizer(tokenizer)

    @property
    def vocabulary_size(self):
        """V: the number of pieces, special ones included."""
        return int(self.tokenizer.vocabulary_size())

    @classmethod
    def from_preset(cls, preset):
        """The tokenizer of a keras-hub preset.

        Args:
            preset: a preset name (`"bart_base_en"`, `"t5_small_multi"`,
                where the hub is reachable), a `kaggle://` / `hf://` handle,
                a local preset folder (with `config.json`), or a folder
                written by `save` (`tokenizer.json` and its assets only).

        Returns:
            A `PresetVocabulary`.
        """
        import keras_hub

        preset = os.fspath(preset)
        if os.path.isdir(preset) and not os.path.exists(
            os.path.join(preset, "config.json")
        ):
            return cls.load(preset)
        return cls(keras_hub.tokenizers.Tokenizer.from_preset(preset))

    @classmethod
    def load(cls, directory):
        """Loads a tokenizer folder written by `save`."""
        import keras

        directory = os.fspath(directory)
        config = os.path.join(directory, TOKENIZER_CONFIG)
        if not os.path.exists(config):
            raise ValueError(
                f"{directory!r} holds no {TOKENIZER_CONFIG}: expected a folder "
                "written by PresetVocabulary.save (or a keras-hub tokenizer's "
                "save_to_preset)."
            )
        with open(config, encoding="utf-8") as handle:
            tokenizer = keras.saving.deserialize_keras_object(json.load(handle))
        tokenizer.load_preset_assets(directory)
        return cls(tokenizer)

    def save(self, directory):
        """Writes the tokenizer (`tokenizer.json` and its assets: BART's
        vocabulary and merges, T5's SentencePiece model) to `directory`."""
        directory = os.fspath(directory)
        os.makedirs(directory, exist_ok=True)
        self.tokenizer.save_to_preset(directory)

    def encode(self, text):
        """Tokenises one str into a list of int ids (no start/end token)."""
        if not isinstance(text, str):
            raise TypeError(f"encode expects one str; received {type(text).__name__}.")
        return self.encode_batch([text])[0]

    def encode_batch(self, texts):
        """Tokenises a list of str into a list of lists of int ids."""
        if isinstance(texts, (str, bytes)):
            raise TypeError(
                "encode_batch expects a list of str; received one str (use "
                "`encode` for a single text)."
            )
        if not texts:
            return []
        return self._run("tokenize", list(texts)).to_list()

    def _checked_id(self, value):
        return checked_id(value, self.vocabulary_size)

    def decode(self, ids):
        """Detokenises one sequence of int ids (list or 1-D array); the
        special tokens (`control_ids`) are dropped."""
        import tensorflow as tf

        if getattr(ids, "ndim", 1) != 1 or isinstance(ids, (str, bytes, int)):
            raise ValueError(
                "decode expects one sequence of ids (a list or a 1-D array); "
                f"received {type(ids).__name__}. Decode a batch row by row."
            )
        skip = set(self.control_ids)
        kept = [i for i in (self._checked_id(i) for i in ids) if i not in skip]
        text = self._run(
            "detokenize", tf.ragged.constant([kept], dtype=tf.int32, ragged_rank=1)
        )
        return text.numpy()[0].decode("utf-8", errors="replace")

    def id_to_piece(self, piece_id):
        """The piece spelled by id `piece_id` (BPE pieces in the byte-level
        alphabet: "Ġworld" is " world")."""
        piece_id = self._checked_id(piece_id)
        if piece_id not in self._pieces:
            raise ValueError(f"token id {piece_id} has no piece in this tokenizer.")
        return self._pieces[piece_id]

    def piece_to_id(self, piece):
        """The id of `piece`, spelled as the tokenizer spells it.

        Raises:
            ValueError: the tokenizer has no such piece.
        """
        if piece in self._vocabulary:
            return self._vocabulary[piece]
        raise ValueError(
            f"{piece!r} is not a piece of this {self.kind} tokenizer "
            f"({self.vocabulary_size} pieces); its pieces are spelled as "
            "`id_to_piece` writes them (BPE: 'Ġ' for a space)."
        )

    def _run(self, method, value):
        """`self._graph.<method>(value)`, on a new copy of the tokenizer if
        its SentencePiece resource was freed (`keras.utils.set_random_seed`
        clears TensorFlow's eager kernel cache, and with it that resource)."""
        try:
            return getattr(self._graph, method)(value)
        except tf.errors.NotFoundError:
            self._graph = PresetGraphTokenizer(self._copy())
            return getattr(self._graph, method)(value)

    def _copy(self):
        """A new keras-hub tokenizer equal to this one (its own resources)."""
        tokenizer = self.tokenizer
        copy = type(tokenizer).from_config(tokenizer.get_config())
        if self.kind == "t5":
            copy.set_proto(tokenizer.proto)
        else:
            copy.set_vocabulary_and_merges(tokenizer.vocabulary, tokenizer.merges)
        return copy

    def graph_tokenizer(self):
        """A `PresetGraphTokenizer` for a `TextStructurer`.

        T5's SentencePiece op holds a resource that
        `keras.utils.set_random_seed` frees (when it is called after a
        structurer was built): every call gets a new copy of
        the tokenizer, as `Vocabulary` users build a new tensorflow-text
        tokenizer per structurer. BART's lookup tables survive it, and the
        one graph tokenizer (traced once, which takes seconds) is shared.
        """
        if self.kind == "t5":
            return PresetGraphTokenizer(self._copy())
        return self._graph
