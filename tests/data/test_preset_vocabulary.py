"""PresetVocabulary: a keras-hub preset's tokenizer in the structurer, the
pipeline, the run folder and the SavedModel.

The presets are made from bundled real text and saved with `save_to_preset`
next to a tiny backbone (`tests/preset_helpers.py`): T5's SentencePiece
model trained with `sentencepiece` (pad 0, EOS 1, unk 2, as T5's), BART's
byte-level BPE vocabulary and merges learned by `learn_bpe`.

The references are independent of the structurer: the keras-hub tokenizer
called eagerly on the texts of the Python reader (`example_from_text`),
packed by `pack_rows`, a transcription of the family's greedy packing;
and the tokenizer's ids of whole paragraphs.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from preset_helpers import save_presets
from structurer_helpers import SERVING_PREAMBLE
from structurer_helpers import render
from keras_hsum.data.preset_vocabulary import PresetVocabulary
from keras_hsum.data.reader import example_from_text
from keras_hsum.data.structurer import TextStructurer

keras_hub = pytest.importorskip("keras_hub")


@pytest.fixture(scope="module")
def presets(real_examples, tmp_path_factory):
    """`{"bart": folder, "t5": folder}`: tokenizer + tiny backbone presets."""
    return save_presets(tmp_path_factory.mktemp("presets"), real_examples)


@pytest.fixture(scope="module")
def vocabularies(presets):
    return {kind: PresetVocabulary.from_preset(path) for kind, path in presets.items()}


@pytest.fixture(scope="module")
def references(presets):
    """The keras-hub tokenizers loaded again, left on keras-hub's eager
    default (its pure-Python path: Hugging Face `tokenizers` for BPE,
    `sentencepiece` for T5), which the structurer does not run."""
    return {
        kind: keras_hub.tokenizers.Tokenizer.from_preset(path)
        for kind, path in presets.items()
    }


# The "paragraphs" structurer most tests share (tracing keras-hub's BPE
# tokenizer into a graph takes seconds, once per structurer).
P, T, C = 12, 24, 16


@pytest.fixture(scope="module")
def structurers(vocabularies):
    return {
        kind: TextStructurer(
            vocabulary, "paragraphs", P, T, rank="order", pack="paragraph",
            context_length=C,
        )
        for kind, vocabulary in vocabularies.items()
    }


def eager_ids(tokenizer, texts):
    """The keras-hub tokenizer's own ids, called eagerly (its Python path)."""
    return [[int(i) for i in ids] for ids in tokenizer(list(texts))]


def pack_rows(sentence_ids, limit):
    """`structure`'s greedy packing of one group's sentences into rows of at
    most `limit` tokens: a sentence joins the current row when it fits, an
    over-long one is cut into rows of `limit` and ends its last row."""
    rows, current = [], 0
    for ids in sentence_ids:
        if not ids:
            continue
        if len(ids) > limit:
            rows.extend(ids[i:i + limit] for i in range(0, len(ids), limit))
            current = 0
        elif current and current + len(ids) <= limit:
            rows[-1] = rows[-1] + ids
            current += len(ids)
        else:
            rows.append(list(ids))
            current = len(ids)
    return rows


def reference_paragraph_rows(vocabulary, reference, documents, title, query, limit):
    """Rows of the "paragraphs" family (pack="paragraph", rank="order"):
    every paragraph of `example_from_text` tokenized sentence by sentence
    by `reference`, a keras-hub tokenizer (BPE: later sentences after one space),
    packed into rows of `limit`, in reading order."""
    example = example_from_text(
        "\n---\n".join(documents), title=title or None, query=query or None
    )
    rows = []
    for document in example.documents:
        for section in document.sections:
            for paragraph in section.paragraphs:
                texts = [
                    (" " + s) if i and vocabulary.space_before_sentences else s
                    for i, s in enumerate(paragraph)
                ]
                rows.extend(pack_rows(eager_ids(reference, texts), limit))
    return rows, example


def padded(rows, shape, pad):
    tokens = np.full(shape, pad, np.int32)
    for r, row in enumerate(rows[: shape[0]]):
        row = row[: shape[1]]
        tokens[r, : len(row)] = row
    return tokens


def test_special_ids_as_documented(vocabularies, presets):
    bart, t5 = vocabularies["bart"], vocabularies["t5"]
    # BART: <s> 0, <pad> 1, </s> 2, <unk> 3; decoding starts from </s>.
    assert (bart.pad_id, bart.eos_id, bart.bos_id, bart.unk_id) == (1, 2, 2, 3)
    assert bart.control_ids == (0, 1, 2, bart.vocabulary_size - 1)
    # T5: <pad> 0, </s> 1, <unk> 2; decoding starts from <pad>.
    assert (t5.pad_id, t5.eos_id, t5.bos_id, t5.unk_id) == (0, 1, 0, 2)
    assert t5.control_ids == (0, 1)
    for vocabulary in (bart, t5):
        assert vocabulary.paragraph_id is None and vocabulary.title_id is None
        assert vocabulary.sentence_id is None and vocabulary.document_id is None
    assert bart.space_before_sentences and not t5.space_before_sentences
    assert bart.piece_to_id("<mask>") == bart.vocabulary_size - 1
    assert bart.id_to_piece(2) == "</s>" and t5.id_to_piece(1) == "</s>"
    with pytest.raises(ValueError, match="not a piece"):
        bart.piece_to_id("no such piece")


def test_save_and_load_keep_the_ids(vocabularies, tmp_path, real_examples, references):
    texts = [e.summary for e in real_examples("scitldr_a", "val")[:4]]
    for kind, vocabulary in vocabularies.items():
        folder = tmp_path / kind
        vocabulary.save(folder)
        assert not os.path.exists(folder / "config.json")
        loaded = PresetVocabulary.from_preset(folder)
        assert (loaded.kind, loaded.control_ids) == (kind, vocabulary.control_ids)
        assert eager_ids(loaded.tokenizer, texts) == eager_ids(references[kind], texts)
        # encode runs the graph ops the structurer runs.
        assert vocabulary.encode_batch(texts) == eager_ids(references[kind], texts)
        assert vocabulary.encode(texts[0]) == eager_ids(references[kind], texts[:1])[0]


def test_refuses_other_tokenizers(foreign_vocabulary):
    with pytest.raises(TypeError, match="BartTokenizer or"):
        PresetVocabulary(foreign_vocabulary.keras_hub_tokenizer())


@pytest.mark.parametrize("kind", ["bart", "t5"])
def test_structurer_rows_equal_the_tokenizer_packed(
    kind, vocabularies, structurers, real_examples, references):
    """The "paragraphs" family's tokens with a preset tokenizer equal the
    keras-hub tokenizer's eager ids of each sentence, packed greedily."""
    vocabulary, structurer = vocabularies[kind], structurers[kind]
    examples = real_examples("scitldr_a", "val")[:3] + real_examples("qmsum_goldspan", "val")[:2]
    rendered = [render(e) for e in examples]
    width = max(len(d) for d, _, _ in rendered)
    features = structurer(
        tf.constant([d + [""] * (width - len(d)) for d, _, _ in rendered]),
        title=tf.constant([t for _, t, _ in rendered]),
        query=tf.constant([q for _, _, q in rendered]),
    )
    for b, (documents, title, query) in enumerate(rendered):
        rows, _ = reference_paragraph_rows(vocabulary, references[kind], documents, title, query, T)
        expected = padded(rows, (P, T), vocabulary.pad_id)
        np.testing.assert_array_equal(
            features["tokens"][b].numpy(), expected,
            err_msg=f"{kind} example {b}: structurer rows (received) vs the "
            "tokenizer's packed ids (expected)",
        )
        np.testing.assert_array_equal(
            features["paragraph_mask"][b].numpy(), np.arange(P) < len(rows)
        )
        context = eager_ids(references[kind], [query or title])[0][:C]
        np.testing.assert_array_equal(
            features["context_tokens"][b].numpy(),
            padded([context], (1, C), vocabulary.pad_id)[0],
        )


@pytest.mark.parametrize("kind", [pytest.param("bart", marks=pytest.mark.slow), "t5"])
def test_rows_are_the_ids_of_whole_paragraphs(kind, vocabularies, real_examples, references):
    """With rows long enough, a row holds one paragraph, and its ids are the
    tokenizer's ids of the paragraph's text (one string): the sentence by
    sentence tokenization loses no space between sentences."""
    vocabulary = vocabularies[kind]
    rows_per_example, row_length = 8, 400
    structurer = TextStructurer(
        vocabulary, "paragraphs", rows_per_example, row_length, rank="order"
    )
    # Paragraphs of several sentences, short enough for one row each.
    paragraphs = [
        " ".join(p)
        for example in real_examples("qmsum_goldspan", "val")
        for d in example.documents for s in d.sections for p in s.paragraphs
        if len(p) > 2 and sum(len(x) for x in p) < 1000
    ][:rows_per_example]
    assert len(paragraphs) == rows_per_example
    features = structurer(tf.constant([["\n\n".join(paragraphs)]]))
    rows = eager_ids(references[kind], paragraphs)
    assert max(len(r) for r in rows) <= row_length
    np.testing.assert_array_equal(
        features["tokens"][0].numpy(),
        padded(rows, (rows_per_example, row_length), vocabulary.pad_id),
    )


@pytest.mark.parametrize("kind", [pytest.param("bart", marks=pytest.mark.slow), "t5"])
def test_flat_family_joins_paragraphs_without_separator(kind, vocabularies, real_examples, references):
    vocabulary = vocabularies[kind]
    N = 160
    structurer = TextStructurer(vocabulary, "flat", None, N, rank="order")
    documents, title, query = render(real_examples("fewsum_amazon", "val")[0])
    features = structurer(tf.constant([documents]))
    rows, _ = reference_paragraph_rows(vocabulary, references[kind], documents, "", "", 10**6)
    expected = [i for row in rows for i in row][:N]
    np.testing.assert_array_equal(
        features["tokens"][0].numpy(), padded([expected], (1, N), vocabulary.pad_id)[0]
    )


@pytest.mark.parametrize("kind", ["bart", "t5"])
def test_detokenize_round_trips_real_text(kind, vocabularies, structurers, real_examples, references):
    """tokenize → [start] + ids + [EOS] + padding → detokenize gives the
    text back (BART's start token equals its EOS; T5's its padding)."""
    vocabulary, structurer = vocabularies[kind], structurers[kind]
    # Text the T5 model was trained on (SentencePiece without byte fallback
    # writes unseen characters as <unk>); BPE is byte-level: any text.
    source = "scisummnet" if kind == "t5" else "fewsum_yelp"
    texts = [
        " ".join(p)
        for p in real_examples(source, "train")[0].documents[0].sections[0].paragraphs[:3]
    ] + ["Short one."]
    ids = structurer.tokenize(tf.constant(texts))
    assert ids.to_list() == eager_ids(references[kind], texts)
    rows = [
        [vocabulary.bos_id] + row + [vocabulary.eos_id] + [vocabulary.pad_id] * 3
        for row in ids.to_list()
    ]
    width = max(len(r) for r in rows)
    rows = [r + [vocabulary.pad_id] * (width - len(r)) for r in rows]
    text = structurer.detokenize(tf.constant(rows))
    assert [t.decode() for t in text.numpy()] == texts
    # The search's sequences have no start token: the first EOS ends them.
    cut = structurer.detokenize(tf.constant([row[1:] for row in rows]))
    assert [t.decode() for t in cut.numpy()] == texts
    assert [vocabulary.decode(r) for r in rows] == texts


@pytest.mark.parametrize("kind", [pytest.param("bart", marks=pytest.mark.slow), "t5"])
def test_pipeline_targets_use_the_preset_ids(kind, vocabularies, real_examples, references):
    from keras_hsum.data import make_dataset

    examples = list(real_examples("scitldr_a", "val")[:2])
    vocabulary = vocabularies[kind]
    dataset = make_dataset(
        examples, vocabulary, family="paragraphs", max_units=6, max_tokens=24,
        max_target_length=40, batch_size=2, pad_to_max=True,
    )
    batch = next(iter(dataset))
    for b, example in enumerate(examples):
        ids = eager_ids(references[kind], [example.summary])[0][:38]
        expected = [vocabulary.bos_id] + ids + [vocabulary.eos_id]
        received = batch["target"][b].numpy().tolist()
        assert received[: len(expected)] == expected, kind
        assert set(received[len(expected):]) <= {vocabulary.pad_id}, kind
        rows, _ = reference_paragraph_rows(vocabulary, references[kind], render(example)[0], "", "", 24)
        np.testing.assert_array_equal(
            batch["tokens"][b].numpy(), padded(rows, (6, 24), vocabulary.pad_id)
        )


def test_t5_tokenizer_survives_set_random_seed(vocabularies, references, real_examples):
    """`keras.utils.set_random_seed` (the trainer calls it between building
    its datasets and fitting) frees tensorflow-text's SentencePiece
    resource: a structurer built after it, and encode, still work."""
    import keras

    vocabulary, reference = vocabularies["t5"], references["t5"]
    documents = render(real_examples("scitldr_a", "val")[0])[0]
    texts = [real_examples("scitldr_a", "val")[0].summary]
    before = TextStructurer(vocabulary, "flat", None, 32, rank="order")
    expected = before(tf.constant([documents]))["tokens"].numpy()
    assert vocabulary.encode_batch(texts) == eager_ids(reference, texts)
    keras.utils.set_random_seed(0)
    after = TextStructurer(vocabulary, "flat", None, 32, rank="order")
    np.testing.assert_array_equal(after(tf.constant([documents]))["tokens"].numpy(), expected)
    assert vocabulary.encode_batch(texts) == eager_ids(reference, texts)


def test_refused_options(vocabularies):
    with pytest.raises(ValueError, match="rank='learned'"):
        TextStructurer(
            vocabularies["t5"], "paragraphs", 4, 8, rank="learned", ranker_run="x"
        )
    with pytest.raises(ValueError, match="`oov_words` finds words by SentencePiece"):
        TextStructurer(vocabularies["t5"], "paragraphs", 4, 8, oov_words=4)
    with pytest.raises(TypeError, match="or a PresetVocabulary"):
        TextStructurer("spm.model", "paragraphs", 4, 8)


SERVE = SERVING_PREAMBLE + textwrap.dedent(
    """
    out = loaded.structure(tf.constant(request["documents"]))
    text = loaded.detokenize(tf.constant(request["ids"]))
    json.dump({"tokens": out["tokens"].numpy().tolist(),
               "text": [t.decode() for t in text.numpy()]}, sys.stdout)
    """
)


class _Served(tf.Module):
    def __init__(self, structurer):
        super().__init__()
        self.structurer = structurer

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.string)])
    def structure(self, documents):
        return self.structurer(documents)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def detokenize(self, ids):
        return self.structurer.detokenize(ids)


@pytest.mark.parametrize(
    "kind", [pytest.param("bart", marks=pytest.mark.slow), "t5"]
)
def test_saved_model_serves_without_keras_hub(kind, vocabularies, real_examples, tmp_path, references):
    """The structurer and detokenizer on a preset tokenizer, saved, run in
    a process that imports only tensorflow and tensorflow_text."""
    vocabulary = vocabularies[kind]
    structurer = TextStructurer(vocabulary, "paragraphs", 6, 24, rank="order")
    documents = [render(e)[0][:1] for e in real_examples("scitldr_a", "val")[:2]]
    ids = [
        [vocabulary.bos_id] + i + [vocabulary.eos_id]
        for i in eager_ids(references[kind], ["A summary, of 2 words.", "Ok."])
    ]
    ids[1] += [vocabulary.pad_id] * (len(ids[0]) - len(ids[1]))
    module = _Served(structurer)
    expected = {
        "tokens": module.structure(tf.constant(documents))["tokens"].numpy().tolist(),
        "text": [t.decode() for t in module.detokenize(tf.constant(ids)).numpy()],
    }
    assert expected["text"] == ["A summary, of 2 words.", "Ok."]
    path = str(tmp_path / "saved")
    tf.saved_model.save(module, path)
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"documents": documents, "ids": ids}))
    done = subprocess.run(
        [sys.executable, "-c", SERVE, path, str(request)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == expected
