"""Tests for keras_hsum.data.vocabulary: training, reserved ids, in-graph ids."""

import io
import unicodedata

import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

from keras_hsum.data.vocabulary import SEPARATORS
from keras_hsum.data.vocabulary import Vocabulary
from keras_hsum.data.vocabulary import corpus_sentences

# (dataset, split) samples used as "real text from several datasets".
SOURCES = (
    ("scitldr_a", "val"),
    ("fewsum_yelp", "val"),
    ("fewsum_amazon", "val"),
    ("qmsum_goldspan", "val"),
    ("cnndm", "summeval100"),
    ("scisummnet", "val"),
)
HANDMADE = [
    "Größe: 3 µm — “quoted” text, naïve café.",
    "数据 和 模型 🙂 emoji ok.",
    "Ünïcödé ﬁ ligature, full-width ＡＢＣ and a\u00a0non-breaking space.",
    "Tabs\tand   runs of   spaces.",
    "Literal markers <para> <sent> <doc> <title> and <s> </s> <pad>.",
    "",
]


def real_sentences(real_examples, per_source=60):
    """Hundreds of real sentences, every non-ASCII one of the samples included."""
    sentences = []
    for name, split in SOURCES:
        examples = real_examples(name, split)
        pool = [s for e in examples for s in e.sentences()]
        sentences += pool[:per_source]
        sentences += [e.summary for e in examples[:10]]
        sentences += [s for s in pool if any(ord(c) > 127 for c in s)][:40]
    return sentences + HANDMADE


def python_ids(proto, texts):
    """The reference: sentencepiece's own processor on the serialized proto."""
    processor = sentencepiece.SentencePieceProcessor(model_proto=proto)
    return [processor.encode(t, out_type=int) for t in texts]


def test_trained_vocabulary_reserves_the_documented_ids(vocabulary):
    assert 1000 < vocabulary.vocabulary_size <= 4000
    assert (vocabulary.pad_id, vocabulary.unk_id) == (0, 1)
    assert (vocabulary.bos_id, vocabulary.eos_id) == (2, 3)
    assert (
        vocabulary.title_id,
        vocabulary.paragraph_id,
        vocabulary.sentence_id,
        vocabulary.document_id,
    ) == (4, 5, 6, 7)
    pieces = [vocabulary.id_to_piece(i) for i in range(8)]
    assert pieces == ["<pad>", "<unk>", "<s>", "</s>", *SEPARATORS]


@pytest.mark.parametrize("separator, piece_id", list(zip(SEPARATORS, range(4, 8))))
def test_separators_are_single_pieces(vocabulary, separator, piece_id):
    text = f"before {separator} after{separator}end"
    ids = vocabulary.encode(text)
    assert ids.count(piece_id) == 2
    assert vocabulary.encode(separator)[-1:] == [piece_id]
    assert vocabulary.decode(ids) == text


def test_control_ids_never_come_from_text(vocabulary, real_examples):
    texts = real_sentences(real_examples)
    for ids in vocabulary.encode_batch(texts):
        assert not {vocabulary.pad_id, vocabulary.bos_id, vocabulary.eos_id} & set(
            ids
        )


def test_save_load_round_trip_gives_identical_ids(vocabulary, real_examples, tmp_path):
    path = tmp_path / "nested" / "spm.model"
    vocabulary.save(path)
    loaded = Vocabulary.load(path)
    assert loaded.proto == vocabulary.proto
    texts = real_sentences(real_examples)
    assert loaded.encode_batch(texts) == vocabulary.encode_batch(texts)
    assert python_ids(path.read_bytes(), texts) == vocabulary.encode_batch(texts)


def test_training_is_deterministic(real_examples):
    sentences = list(corpus_sentences(real_examples("scitldr_a", "val")))
    first = Vocabulary.train(sentences, vocabulary_size=600)
    second = Vocabulary.train(iter(sentences), vocabulary_size=600)
    assert first.proto == second.proto
    assert first.vocabulary_size == 600


def test_training_on_no_text_is_a_clear_error():
    for sentences in ([], ["", "  \n"]):
        with pytest.raises(ValueError, match="no non-empty sentence"):
            Vocabulary.train(sentences, vocabulary_size=100)


def test_one_str_where_a_list_is_expected_is_refused(vocabulary):
    """A str is iterable: without the check, encode_batch("text") encodes
    each character and train("text") learns a vocabulary of characters."""
    with pytest.raises(TypeError, match="list of str; received one str"):
        vocabulary.encode_batch("the model")
    with pytest.raises(TypeError, match="received one str"):
        Vocabulary.train("a single sentence", vocabulary_size=20)
    for size in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="`vocabulary_size` must be an int >= 1"):
            Vocabulary.train(["a sentence"], vocabulary_size=size)


def test_decode_names_bad_ids(vocabulary):
    V = vocabulary.vocabulary_size
    with pytest.raises(ValueError, match=f"token id {V} is outside this vocabulary's \\[0, {V}\\)"):
        vocabulary.decode([5, V])
    with pytest.raises(ValueError, match="token id -1"):
        vocabulary.decode([-1])
    with pytest.raises(ValueError, match="token id 99999"):
        vocabulary.id_to_piece(99999)
    with pytest.raises(ValueError, match="must be integers; received 40.7"):
        vocabulary.decode([40.7])
    with pytest.raises(ValueError, match=r"of shape \(2, 3\)\. Decode a batch row by row"):
        vocabulary.decode(np.ones((2, 3), "int32"))
    with pytest.raises(ValueError, match="received int"):
        vocabulary.decode(40)
    assert vocabulary.decode(np.asarray([40, 41], "int64")) == vocabulary.decode([40, 41])


def test_small_corpus_stops_below_the_requested_size():
    vocab = Vocabulary.train(["a b c", "a b", "c a b a"] * 20, vocabulary_size=5000)
    assert 8 < vocab.vocabulary_size < 5000
    assert vocab.encode("a b c") and vocab.pad_id == 0


def _nmt_nfkc(text):
    """An independent transcription of sentencepiece's `nmt_nfkc` + decode.

    NFKC; U+FFFD, zero-width characters and the BOM become spaces; other
    control characters are removed; whitespace runs become one space and
    the ends are stripped (`remove_extra_whitespaces`).
    """
    text = unicodedata.normalize("NFKC", text)
    out = []
    for char in text:
        if char in "\ufffd\u200b\u200c\u200d\ufeff" or char.isspace():
            out.append(" ")
        elif unicodedata.category(char) == "Cc":
            continue
        else:
            out.append(char)
    return " ".join("".join(out).split())


@pytest.mark.parametrize("which", ["trained", "foreign"])
def test_decode_inverts_encode_up_to_normalisation(
    which, vocabulary, foreign_vocabulary, real_examples
):
    vocab = vocabulary if which == "trained" else foreign_vocabulary
    texts = real_sentences(real_examples)
    checked = checked_non_ascii = 0
    for text in texts:
        ids = vocab.encode(text)
        if vocab.unk_id in ids:
            # Unknown characters decode to " ⁇ "; only their count is checked.
            assert vocab.decode(ids).count("\u2047") == ids.count(vocab.unk_id)
            continue
        assert vocab.decode(ids) == _nmt_nfkc(text), text
        checked += 1
        checked_non_ascii += any(ord(c) > 127 for c in text)
    # The trained vocabulary covers 99.95% of scisummnet + qmsum characters;
    # the non-ASCII sentences picked from other corpora often hold others.
    assert checked > 0.75 * len(texts)
    assert checked_non_ascii >= 10


def test_decode_drops_padding_bos_and_eos(vocabulary):
    ids = vocabulary.encode("Hierarchical transformers summarize documents.")
    padded = [vocabulary.bos_id, *ids, vocabulary.eos_id, 0, 0]
    assert vocabulary.decode(np.asarray(padded)) == vocabulary.decode(ids)
    assert vocabulary.decode(ids) == "Hierarchical transformers summarize documents."


def test_piece_to_id_refuses_what_sentencepiece_maps_to_unknown(vocabulary, real_examples):
    processor = sentencepiece.SentencePieceProcessor(model_proto=vocabulary.proto)
    # Every piece of real encoded text maps back to its own id.
    ids = vocabulary.encode(real_sentences(real_examples)[0])
    for piece_id in ids:
        assert vocabulary.piece_to_id(processor.id_to_piece(piece_id)) == piece_id
    assert vocabulary.piece_to_id(",") == processor.piece_to_id(",") != vocabulary.unk_id
    assert vocabulary.piece_to_id("<unk>") == vocabulary.unk_id
    # A word-start piece whose bare spelling is no piece: SentencePiece
    # answers the unknown id for it, piece_to_id refuses and names the other.
    bare = next(
        piece[1:] for piece in map(processor.id_to_piece, range(len(processor)))
        if piece.startswith("▁") and len(piece) > 2
        and processor.piece_to_id(piece[1:]) == vocabulary.unk_id
    )
    with pytest.raises(ValueError, match=f"'{bare}' is not a piece of this vocabulary "
                       rf"\(4000 pieces\)\. It has '▁{bare}'\."):
        vocabulary.piece_to_id(bare)
    with pytest.raises(ValueError, match="'qqqzzz' is not a piece"):
        vocabulary.piece_to_id("qqqzzz")


def test_encode_batch_matches_encode(vocabulary, real_examples):
    texts = real_sentences(real_examples)[:50]
    assert vocabulary.encode_batch(texts) == [vocabulary.encode(t) for t in texts]
    assert vocabulary.encode_batch([]) == []


def _in_graph_cases(vocabulary, foreign_vocabulary):
    return {"trained": vocabulary, "foreign": foreign_vocabulary}


@pytest.mark.parametrize("which", ["trained", "foreign"])
def test_keras_hub_tokenizer_gives_the_python_ids(
    which, vocabulary, foreign_vocabulary, real_examples
):
    vocab = _in_graph_cases(vocabulary, foreign_vocabulary)[which]
    texts = real_sentences(real_examples)
    assert len(texts) > 300
    expected = python_ids(vocab.proto, texts)
    tokenizer = vocab.keras_hub_tokenizer()

    eager = tokenizer(tf.constant(texts))
    eager = eager.to_list() if isinstance(eager, tf.RaggedTensor) else eager
    assert [list(map(int, ids)) for ids in eager] == expected

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(batch):
        return tokenizer(batch)

    assert tokenize(tf.constant(texts)).to_list() == expected
    # The graph really holds the tensorflow-text op (what a SavedModel keeps).
    graph = tokenize.get_concrete_function().graph
    assert any("Sentencepiece" in op.type for op in graph.get_operations())

    dataset = tf.data.Dataset.from_tensor_slices(texts).map(tokenizer)
    assert [ids.numpy().tolist() for ids in dataset] == expected


def test_keras_hub_tokenizer_with_sequence_length_pads_with_pad_id(vocabulary):
    texts = ["A short one.", "A much longer sentence " * 10]
    expected = python_ids(vocabulary.proto, texts)
    tokenizer = vocabulary.keras_hub_tokenizer(sequence_length=12)

    @tf.function
    def tokenize(batch):
        return tokenizer(batch)

    dense = tokenize(tf.constant(texts)).numpy()
    assert dense.shape == (2, 12)
    for row, ids in zip(dense, expected):
        n = min(len(ids), 12)
        assert row[:n].tolist() == ids[:n]
        assert (row[n:] == vocabulary.pad_id).all()


def test_foreign_model_loads_without_separators(foreign_vocabulary):
    vocab = foreign_vocabulary
    assert vocab.vocabulary_size == 32000
    assert (vocab.pad_id, vocab.unk_id, vocab.bos_id, vocab.eos_id) == (0, 1, 2, 3)
    assert vocab.title_id is None and vocab.paragraph_id is None
    assert vocab.sentence_id is None and vocab.document_id is None


def test_model_without_padding_is_rejected():
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(["a b c d e f", "b c d e", "a c e"] * 20),
        model_writer=model,
        vocab_size=20,
        hard_vocab_limit=False,
        minloglevel=2,
    )  # sentencepiece's default: pad_id=-1
    proto = model.getvalue()
    assert sentencepiece.SentencePieceProcessor(model_proto=proto).pad_id() == -1
    with pytest.raises(ValueError, match="no padding piece"):
        Vocabulary(proto)


def test_non_bytes_proto_is_rejected(tmp_path):
    with pytest.raises(TypeError, match="Vocabulary.load"):
        Vocabulary(str(tmp_path / "spm.model"))


def test_bytes_that_are_not_a_model_are_named(vocabulary):
    with pytest.raises(ValueError, match="Vocabulary received 4 bytes that are not a serialized "
                                         "SentencePiece model"):
        Vocabulary(b"junk")
    with pytest.raises(ValueError, match="not a serialized SentencePiece model"):
        Vocabulary(vocabulary.proto[: len(vocabulary.proto) // 2])  # a truncated file


def test_corpus_sentences_covers_titles_queries_headings_and_summaries(real_examples):
    example = real_examples("scisummnet", "val")[0]
    sentences = list(corpus_sentences([example]))
    assert example.title in sentences
    headings = [
        s.heading for d in example.documents for s in d.sections if s.heading
    ]
    assert headings and all(h in sentences for h in headings)
    assert set(example.sentences()) <= set(sentences)
    assert example.summary in sentences
    without = list(corpus_sentences([example], include_summaries=False))
    assert example.summary not in without or example.summary in example.sentences()
    assert len(without) == len(sentences) - len(example.references)
    query_example = real_examples("qmsum_goldspan", "val")[0]
    assert query_example.query in list(corpus_sentences([query_example]))
