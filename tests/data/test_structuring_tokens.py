"""The graph tokenizer and the sentence table against their references.

`keras_hsum.data.structuring.tokens.graph_tokenizer` must give the ids of
the `sentencepiece` library (`Vocabulary.encode`, the reference) on real
and adversarial text, for the trained and the bundled vocabulary (the
compiled tokenizer) and for models the compiled tokenizer cannot
reproduce (the library op); `sentence_table` must drop exactly the
sentences without tokens, as a list filter does.
"""

import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

from keras_hsum.data.structuring import tokens

from conftest import SAMPLE_SPLITS

# Texts of the bundled corpora where the library op
# (`tf_text.SentencepieceTokenizer`, the sentencepiece release that
# tensorflow-text embeds) breaks a Viterbi tie the other way than the
# sentencepiece package (measured: 17 of 90,525 texts for each of the
# two vocabularies).
TIES = (
    "It was hard finding her but I did Yayyyy",
    "PhD G: Oh there is something spelled out \" BEEEEEEP \"",
    "0xfffffffffffc0000) xor ((l >> 40) ?",
    "Excitatory Link ..........................",
    "These grammars each had 44,199 (pivot), 7,813 (train) and 22,555 (copy) rules.",
    "Then, B??D B???D can be efficiently calculated because ?? is common.",
    "1 ?? ???rZ???",
)
ADVERSARIAL = (
    "", " ", "   ", "\t", "\n", " \t\r\n ", "a", " a", "a ", "  a  b  ", "a\tb",
    "a\r\nb", "a\u3000b", "\u00a0a\u00a0", "\u2581", "\u2581a", "a\u2581b",
    "\u2581\u2581", "café", "cafe\u0301", "\ufb01ne", "①②", "Ｆｕｌｌｗｉｄｔｈ",
    "\x00", "a\x00b", "\x01\x02 control", "\x7f", "\u200b", "a\u200bb",
    "zero\u200dwidth", "\ufeffa", "\ufffd", "\u2028\u2029", "\u0085x",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "😀 emoji 😀😀", "中文字符测试", "ᚠᛇᚻ runes", "𓀀𓀁", "ꯀꯁꯂ",
    "Ελληνικά", "русский", "عربي", "עברית", "한국어", "\U000e0001tag",
    "<para>", "a<para>b", "<title> x", "<sent><doc>", "<s>", "</s>", "<unk>",
    "<pad>", "⁇", " ⁇ ", "x" * 2000, "ab " * 400,
    "A.B.C. e.g. i.e. $3.50 -- (x) [y] {z}",
)


@pytest.fixture(scope="module")
def texts(real_examples):
    """About 3,500 sentences of every bundled corpus, summaries and
    titles, the known ties and the adversarial texts."""
    out = list(TIES) + list(ADVERSARIAL)
    for name, split in SAMPLE_SPLITS:
        examples = real_examples(name, split)
        out += [s for e in examples[:8] for s in e.sentences()][:250]
        out += [t for e in examples[:8] for t in (e.summary, e.title, e.query) if t]
    return out


def graph_ids(tokenizer, texts):
    """The tokenizer's ids in a tf.function, and the op types it runs."""
    function = tf.function(
        lambda t: tokenizer.tokenize(t), input_signature=[tf.TensorSpec([None], tf.string)]
    )
    graph = function.get_concrete_function().graph
    return function(tf.constant(texts)).to_list(), {op.type for op in graph.get_operations()}


@pytest.mark.parametrize("which", ["trained", "bundled"])
def test_graph_tokenizer_gives_the_library_ids(which, vocabulary, foreign_vocabulary, texts):
    vocab = {"trained": vocabulary, "bundled": foreign_vocabulary}[which]
    tokenizer = tokens.graph_tokenizer(vocab.proto, None)
    assert tokenizer.fast_mismatch is None
    ids, ops = graph_ids(tokenizer, texts)
    assert "TFText>FastSentencepieceTokenize" in ops
    expected = vocab.encode_batch(texts)
    wrong = [(t, e, i) for t, e, i in zip(texts, expected, ids) if e != i]
    assert not wrong, f"{len(wrong)} of {len(texts)} differ, e.g. {wrong[:2]}"
    # Ragged rows as the library op gives them (int64 splits), eagerly too.
    eager = tokenizer.tokenize(tf.constant(texts[:50]))
    assert eager.row_splits.dtype == tf.int64 and eager.to_list() == expected[:50]
    # Offsets and detokenize are the library op's; on these texts its ids
    # are the same, and detokenize inverts as sentencepiece decodes.
    plain = [t for t in texts if t not in TIES][:300]
    with_offsets, starts, ends = tokenizer.tokenize_with_offsets(tf.constant(plain))
    assert with_offsets.to_list() == vocab.encode_batch(plain)
    assert (starts.flat_values <= ends.flat_values).numpy().all()
    rows = expected[:300] + [[vocab.unk_id], [vocab.unk_id, 40], []]
    written = tokenizer.detokenize(tf.ragged.constant(rows, tf.int32)).numpy()
    assert [w.decode() for w in written] == [vocab.decode(r) for r in rows]


# Options appended to a trained model: a protocol-buffer field written
# again overrides the first (a message field merges into it), which both
# the library and `fast_tokenizer_mismatch` honour.
VARIANTS = {
    # trainer_spec { model_type: BPE }: the pieces' scores become merge ranks.
    "not a unigram model": b"\x12\x02\x18\x02",
    # trainer_spec { treat_whitespace_as_suffix: true }
    "whitespace as suffix": b"\x12\x03\xc0\x01\x01",
    # normalizer_spec { add_dummy_prefix: false }
    "add_dummy_prefix off": b"\x1a\x02\x18\x00",
    # normalizer_spec { name: "nfkc" } (the nmt_nfkc map kept)
    "normaliser 'nfkc'": b"\x1a\x06\x0a\x04nfkc",
}


@pytest.mark.parametrize("reason", sorted(VARIANTS))
def test_models_the_compiled_tokenizer_cannot_reproduce_use_the_library_op(
    reason, vocabulary, texts
):
    proto = vocabulary.proto + VARIANTS[reason]
    assert tokens.fast_tokenizer_mismatch(proto) == reason
    tokenizer = tokens.graph_tokenizer(proto, None)
    assert tokenizer.fast_mismatch == reason
    sample = list(ADVERSARIAL) + texts[len(TIES) + len(ADVERSARIAL) :][:400]
    ids, ops = graph_ids(tokenizer, sample)
    assert "TFText>FastSentencepieceTokenize" not in ops
    processor = sentencepiece.SentencePieceProcessor(model_proto=proto)
    assert ids == processor.encode(sample, out_type=int)


def test_fast_tokenizer_mismatch_reads_the_model_proto(vocabulary, foreign_vocabulary):
    assert tokens.fast_tokenizer_mismatch(vocabulary.proto) is None
    assert tokens.fast_tokenizer_mismatch(foreign_vocabulary.proto) is None
    # byte_fallback (trainer_spec field 35), a piece of type BYTE, the
    # case-folding map (allowed), a proto that does not parse.
    assert tokens.fast_tokenizer_mismatch(vocabulary.proto + b"\x12\x03\x98\x02\x01") == (
        "byte fallback"
    )
    byte_piece = b"\x0a\x0a\x0a\x06<0x41>\x18\x06"
    assert tokens.fast_tokenizer_mismatch(vocabulary.proto + byte_piece) == "piece types [6]"
    folding = b"\x1a\x0d\x0a\x0bnmt_nfkc_cf"
    assert tokens.fast_tokenizer_mismatch(vocabulary.proto + folding) is None
    assert tokens.fast_tokenizer_mismatch(b"\xff\xff") == "the model proto does not parse"


def _user_defined_ids(vocab):
    processor = sentencepiece.SentencePieceProcessor(model_proto=vocab.proto)
    return [
        i for i in range(processor.get_piece_size())
        if not (processor.is_unknown(i) or processor.is_control(i))
        and processor.id_to_piece(i).startswith("<")
        and processor.id_to_piece(i).endswith(">")
    ]


@pytest.mark.parametrize("which", ["trained", "bundled"])
def test_detokenize_writes_what_the_library_op_writes(
    which, vocabulary, foreign_vocabulary, texts
):
    """The piece-table detokenizer against the classic op (the reference)
    and the sentencepiece package: rows cut out of real sentences (as the
    structurer cuts over-long ones), random ids over the whole vocabulary
    with <unk>, control and (trained) user-defined pieces anywhere, and
    the leading-space cases."""
    vocab = {"trained": vocabulary, "bundled": foreign_vocabulary}[which]
    tokenizer = tokens.graph_tokenizer(vocab.proto, None)
    assert tokenizer.table_mismatch is None
    size = vocab.vocabulary_size
    random = np.random.RandomState(7)
    rows = [ids[start : start + 7] for ids in vocab.encode_batch(texts[:400])
            for start in range(0, len(ids), 7)]
    rows += [list(random.randint(0, size, random.randint(0, 9))) for _ in range(800)]
    processor = sentencepiece.SentencePieceProcessor(model_proto=vocab.proto)
    lone = [processor.piece_to_id("\u2581")]
    assert processor.id_to_piece(lone[0]) == "\u2581"
    word = vocab.encode("the")
    rows += [lone + word, lone + lone + word, [vocab.unk_id] + word,
             word + [vocab.unk_id] + word, [vocab.bos_id] + lone + word, [], [vocab.unk_id]]
    detokenize = tf.function(tokenizer.detokenize)
    ragged = tf.ragged.constant(rows, tf.int32, ragged_rank=1)
    written = [w.decode() for w in detokenize(ragged).numpy()]
    expected = [w.decode() for w in tokenizer._classic.detokenize(ragged).numpy()]
    wrong = [(r, w, e) for r, w, e in zip(rows, written, expected) if w != e]
    assert not wrong, f"{len(wrong)} of {len(rows)} differ, e.g. {wrong[:3]}"
    assert written[:50] == [vocab.decode(r) for r in rows[:50]]
    # A call holding a user-defined piece (the trained model's separators)
    # goes to the classic op whole, and still writes the same.
    user_defined = _user_defined_ids(vocab)
    assert bool(user_defined) == (which == "trained")
    if user_defined:
        mixed = tf.ragged.constant([word + user_defined[:1] + word, word], tf.int32)
        assert not tokenizer._surfaces.covers(mixed.flat_values)
        assert (detokenize(mixed).numpy() == tokenizer._classic.detokenize(mixed).numpy()).all()
    assert tokenizer._surfaces.covers(ragged.flat_values) == (
        not set(user_defined) & set(ragged.flat_values.numpy().tolist())
    )


def test_piece_table_mismatch_reads_the_model_proto(vocabulary):
    assert tokens.piece_table_mismatch(vocabulary.proto) is None
    assert tokens.piece_table_mismatch(vocabulary.proto + VARIANTS["add_dummy_prefix off"]) == (
        "add_dummy_prefix off"
    )
    assert tokens.piece_table_mismatch(
        vocabulary.proto + VARIANTS["whitespace as suffix"]
    ) == "whitespace as suffix"
    # denormalizer_spec { precompiled_charsmap: "x" } (field 5)
    assert tokens.piece_table_mismatch(vocabulary.proto + b"\x2a\x03\x12\x01x") == (
        "a denormaliser"
    )
    tokenizer = tokens.graph_tokenizer(vocabulary.proto + VARIANTS["add_dummy_prefix off"], None)
    assert tokenizer.table_mismatch == "add_dummy_prefix off" and tokenizer._surfaces is None
    rows = tf.ragged.constant([vocabulary.encode("a b"), [vocabulary.unk_id]], tf.int32)
    processor = sentencepiece.SentencePieceProcessor(
        model_proto=vocabulary.proto + VARIANTS["add_dummy_prefix off"]
    )
    assert [w.decode() for w in tokenizer.detokenize(rows).numpy()] == [
        processor.decode(r) for r in rows.to_list()
    ]


@pytest.mark.parametrize(
    "lengths", [[2, 0, 3, 0, 0, 1], [0, 0, 4], [3, 1, 0], [0, 0], [2, 5], []]
)
def test_sentence_table_keeps_the_sentences_with_tokens(lengths):
    S = len(lengths)
    rows = [list(range(10 * s, 10 * s + n)) for s, n in enumerate(lengths)]
    ids = tf.RaggedTensor.from_row_lengths(
        tf.constant([i for r in rows for i in r], tf.int32),
        tf.constant(lengths, tf.int64),
    )
    text = tf.constant([f"sentence {s}" for s in range(S)], tf.string)
    paragraph = tf.constant([s // 2 for s in range(S)], tf.int32)
    P = (S + 1) // 2
    paragraphs = (
        tf.constant([f"paragraph {p}" for p in range(P)]),
        tf.constant([p // 2 for p in range(P)], tf.int32),
        tf.constant([p % 2 for p in range(P)], tf.int32),
        tf.constant([100 + p for p in range(P)], tf.int32),
        tf.constant([200 + p for p in range(P)], tf.int32),
    )
    table = tokens.sentence_table(ids, text, paragraph, paragraphs)
    kept = [s for s in range(S) if lengths[s] > 0]
    assert table["ids"].to_list() == [rows[s] for s in kept]
    np.testing.assert_array_equal(table["lengths"].numpy(), [lengths[s] for s in kept])
    assert [t.decode() for t in table["text"].numpy()] == [f"sentence {s}" for s in kept]
    np.testing.assert_array_equal(table["paragraph"].numpy(), [s // 2 for s in kept])
    np.testing.assert_array_equal(table["batch"].numpy(), [s // 2 // 2 for s in kept])
    np.testing.assert_array_equal(table["document"].numpy(), [s // 2 % 2 for s in kept])
    np.testing.assert_array_equal(table["document_key"].numpy(), [100 + s // 2 for s in kept])
    np.testing.assert_array_equal(table["section_key"].numpy(), [200 + s // 2 for s in kept])
