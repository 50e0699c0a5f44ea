"""TextStructurer (in-graph structuring) against the Python pipeline.

The reference is independent of the code under test: the Python reader
(`example_from_text`), sentence splitter and builders of
`keras_hsum.data.structure`, run on the same text. Real bundled examples are
rendered the way the export receives them: one string per document,
paragraphs separated by blank lines, sections by a `===` line.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import reference_structure as structure
from structurer_helpers import SERVING_PREAMBLE
from structurer_helpers import render
from keras_hsum.data.reader import example_from_text
from keras_hsum.data.structurer import TextStructurer

# (dataset, split, how many examples): long single documents with titles
# (scisummnet), queries (qmsum), multi-document reviews (fewsum), news and
# abstracts (cnndm, scitldr).
CORPUS = (
    ("scisummnet", "val", 16),
    ("qmsum_goldspan", "val", 40),
    ("fewsum_amazon", "val", 12),
    ("cnndm", "summeval100", 32),
    ("scitldr_a", "val", 32),
)
# (recipe, family options as the recipe's tiny config gives them).
RECIPES = ("ht", "pht", "seal", "discourse", "shte", "flat")
# Every example agrees (stop 39 measured 160 of 160 per recipe, and 360
# fuzzed inputs): a tolerance would let a regression through.
MIN_AGREEMENT = 1.0
BATCH = 16


def python_features(documents, title, query, vocabulary, options):
    """The Python pipeline's features (padded as pad_to_max does) + texts."""
    example = example_from_text(
        "\n---\n".join(documents), title=title or None, query=query or None
    )
    return builder_features(example, vocabulary, options)


def builder_features(example, vocabulary, options):
    """The family's builder on `example`, padded as pad_to_max does, + texts."""
    options = dict(options)
    family = options.pop("family")
    max_units = options.pop("max_units")
    max_tokens = options.pop("max_tokens")
    pad = vocabulary.pad_id
    try:
        if family == "flat":
            built = structure.build_flat(example, vocabulary, max_tokens, **options)
        else:
            built = structure.BUILDERS[family](
                example, vocabulary, max_units, max_tokens, **options
            )
    except structure.EmptyInputError:
        built = None
    if family == "flat":
        tokens = np.full((max_tokens,), pad, np.int32)
        mask = np.zeros((max_tokens,), bool)
        if built is not None:
            n = len(built.features["tokens"])
            tokens[:n] = built.features["tokens"]
            mask[:n] = True
        texts = built.texts if built is not None else []
        return {"tokens": tokens, "token_mask": mask, "unit_texts": texts}
    features = {
        "tokens": np.full((max_units, max_tokens), pad, np.int32),
        "token_mask": np.zeros((max_units, max_tokens), bool),
        "paragraph_mask": np.zeros((max_units,), bool),
        "document_ids": np.zeros((max_units,), np.int32),
        "unit_texts": np.full((max_units,), "", object),
    }
    if family == "paragraphs":
        length = options.get("context_length", 32)
        features["paragraph_index"] = np.zeros((max_units,), np.int32)
        features["rank_score"] = np.zeros((max_units,), np.float32)
        features["context_tokens"] = np.full((length,), pad, np.int32)
    if built is None:
        return features
    rows = len(built.texts)
    for name, value in built.features.items():
        if name == "context_tokens":
            features[name][: len(value)] = value
        else:
            features[name][:rows] = value
    features["unit_texts"][:rows] = built.texts
    return features


def graph_features(structurer, batch):
    documents = [d for d, _, _ in batch]
    width = max(1, max(len(d) for d in documents))
    padded = [d + [""] * (width - len(d)) for d in documents]
    out = structurer(
        tf.constant(padded, tf.string),
        title=tf.constant([t for _, t, _ in batch], tf.string),
        query=tf.constant([q for _, _, q in batch], tf.string),
    )
    return {name: value.numpy() for name, value in out.items()}


def differences(expected, actual):
    """Names of the features that differ for one example."""
    wrong = []
    for name, value in expected.items():
        got = actual[name]
        if name == "unit_texts":
            got = [t.decode("utf-8") for t in got]
            if name == "unit_texts" and isinstance(value, list):
                got = [t for t in got if t]
            if list(got) != list(value):
                wrong.append(name)
        elif name == "rank_score":
            if not np.allclose(value, got, atol=1e-6):
                wrong.append(name)
        elif value.shape != got.shape or not np.array_equal(value, got):
            wrong.append(name)
    return wrong


@pytest.fixture(scope="module")
def corpus(real_examples):
    rendered = []
    for name, split, count in CORPUS:
        rendered.extend(render(e) for e in real_examples(name, split)[:count])
    return rendered


def recipe_options(name):
    from keras_hsum import recipes

    return recipes.get(name).structure_options(recipes.config(name, "tiny"))


@pytest.mark.parametrize("recipe", RECIPES)
def test_features_equal_python_pipeline(recipe, corpus, vocabulary):
    options = recipe_options(recipe)
    structurer = TextStructurer(vocabulary.proto, **options)
    same, failures = 0, []
    for start in range(0, len(corpus), BATCH):
        batch = corpus[start : start + BATCH]
        got = graph_features(structurer, batch)
        for i, item in enumerate(batch):
            expected = python_features(*item, vocabulary, options)
            wrong = differences(expected, {k: v[i] for k, v in got.items()})
            if wrong:
                failures.append((start + i, wrong))
            else:
                same += 1
    rate = same / len(corpus)
    print(
        f"\n{recipe} ({options['family']}): {same}/{len(corpus)} examples "
        f"identical ({rate:.1%}); differing: {failures[:10]}"
    )
    assert rate >= MIN_AGREEMENT, failures


@pytest.mark.parametrize(
    "recipe,corpus_name",
    [("discourse", "scisummnet"), ("discourse", "qmsum_general"),
     ("pht", "scisummnet"), ("pht", "qmsum_goldspan")],
)
def test_served_text_keeps_the_sections_training_reads(
    recipe, corpus_name, real_examples, vocabulary
):
    """What the export serves from text equals what training read.

    The examples are rendered as `summarize`/`evaluate` send them
    (`render_documents`) and structured in the graph; the reference is the
    family's builder on the stored JSONL example with its sentences split
    by `split_sentences` (`resplit_sentences`, as training with
    `resplit_sentences=True` reads it; QMSum's stored split is already
    ours). Without the `===` line every document was served as one
    section: measured on these cases, discourse equalled training on 0 of
    16 scisummnet papers and 0 of 8 qmsum_general meetings, PHT on 9 of 16
    papers and 38 of 40 qmsum_goldspan excerpts.
    """
    from keras_hsum.data.reader import render_documents
    from keras_hsum.data.reader import resplit_sentences

    options = recipe_options(recipe)
    structurer = TextStructurer(vocabulary.proto, **options)
    examples = real_examples(corpus_name, "val")[:40]
    sectioned = sum(
        any(len(d.sections) > 1 for d in e.documents) for e in examples
    )
    assert sectioned >= 3, f"only {sectioned} examples with several sections"
    wrong = []
    for example in examples:
        built = builder_features(resplit_sentences(example), vocabulary, options)
        expected = {k: built[k] for k in ("tokens", "paragraph_mask", "document_ids")}
        got = graph_features(
            structurer,
            [(render_documents(example), example.title or "", example.query or "")],
        )
        if any(not np.array_equal(v, got[k][0]) for k, v in expected.items()):
            wrong.append(example.id)
    print(f"\n{recipe} on {corpus_name}: {len(examples) - len(wrong)}/"
          f"{len(examples)} served feature sets equal training's "
          f"({sectioned} with several sections)")
    assert not wrong, wrong


BUNDLED = ("cnndm", "fewsum_amazon", "fewsum_yelp", "qmsum_general",
           "qmsum_goldspan", "scisummnet", "scitldr_a")


def _bundled(real_examples, split):
    """Every bundled example of `split`; "train" also takes cnndm's one
    file (summeval100)."""
    examples = []
    for name in BUNDLED:
        if name == "cnndm":
            if split == "train":
                examples.extend(real_examples(name, "summeval100"))
            continue
        examples.extend(real_examples(name, split))
    return examples


@pytest.mark.parametrize(
    "split", ["val", pytest.param("train", marks=pytest.mark.slow)]
)
@pytest.mark.parametrize("recipe", RECIPES)
def test_training_features_equal_the_saved_models_on_all_bundled_text(
    recipe, split, real_examples, vocabulary
):
    """What a recipe trains on (`structured_examples` with the recipe's
    structure options, the per-example stage of its make_dataset) equals,
    tensor for tensor, what its SavedModel's structurer computes from the
    same example sent as text with its title and query (`render_documents`,
    as `summarize` and `evaluate` send it), on every bundled example of the
    split (226 val; 842 train, cnndm's 100 among them); batched 7 at a time here against 16 in the
    pipeline, so batch composition cannot matter."""
    from keras_hsum.data import structured_examples
    from keras_hsum.data.reader import render_documents

    options = dict(recipe_options(recipe))
    family = options.pop("family")
    max_units = options.pop("max_units")
    max_tokens = options.pop("max_tokens")
    structurer = TextStructurer(
        vocabulary.proto, family, max_units, max_tokens, **options
    )
    examples = _bundled(real_examples, split)
    trained = list(
        structured_examples(
            examples, vocabulary, family, max_units, max_tokens,
            family_options=options, require_summary=False, include_ids=True,
        )
    )
    assert [str(f["example_id"]) for f in trained] == [e.id for e in examples]
    wrong = []
    for start in range(0, len(examples), 7):
        chunk = examples[start:start + 7]
        served = graph_features(
            structurer,
            [(render_documents(e), e.title or "", e.query or "") for e in chunk],
        )
        for i, features in enumerate(trained[start:start + 7]):
            for name, value in features.items():
                if name == "example_id":
                    continue
                got = served[name][i]
                head, tail = got[: len(value)], got[len(value):]
                padding = vocabulary.pad_id if name in ("tokens", "context_tokens") else 0
                same = (
                    np.allclose(head, value, atol=1e-6)
                    if name == "rank_score"
                    else np.array_equal(head, value)
                ) and (tail == padding).all()
                if not same:
                    wrong.append((features["example_id"], name))
    print(f"\n{recipe} on bundled {split}: {len(examples)} examples, "
          f"{len(wrong)} differing features")
    assert not wrong, wrong[:10]


# Sentences that exercise every rule of `split_sentences`.
TRICKY_PARAGRAPHS = (
    "See Fig. 3 for details. It costs 3.5 dollars. Then e.g. Paris works.",
    "J. Smith and A. B. Jones met. They said no. Then No. 5 won. See nos. 3-4.",
    "It is on CF. Our work differs. We use x. Then y. The U.S. Army came.",
    "He asked \"why?\" Then left. (This is it.) [Really!] \u201cQuote.\u201d Next one.",
    "Wow!!! Really?! Yes... 42 is the answer. \u00c9tant donn\u00e9. \u00e9tant not.",
    "Dr. Who is here. Mr. Bean too. Prof. X. Etc. Inc. ends. Vol. 2 and vol. II.",
    "Kelvin \u212a. Then \u017ft. Next ST. Done. Digits \u00b2. Superscript ok. \u2160. Roman.",
    "Tabs\tand\u00a0nbsp. New\u2003space. Line\u2028sep. End with closers.)\" Next.",
    "ends with abbreviation approx. 5 and etc. The end",
    "a.b. C d. 'Quoted start. (Paren start. [Bracket start.",
)


@pytest.mark.parametrize("recipe", ["discourse", "pht", "flat"])
def test_escaped_markers_read_in_the_graph_as_in_python(recipe, vocabulary):
    """Texts with escaped markers (`\\===`, `\\\\---`) and near-misses, and
    an Example whose paragraphs look like markers, through
    `render_documents`: the graph's features equal the Python reader's."""
    from keras_hsum.data.reader import Document
    from keras_hsum.data.reader import Example
    from keras_hsum.data.reader import Section
    from keras_hsum.data.reader import render_documents

    looks_like = Example(
        id="x", dataset="d", title=None, query=None, summary="", references=(),
        documents=(Document(None, (
            Section(None, (("First words here.",), ("===",), ("a\n\nb c.",))),
            Section(None, (("---",), ("x\n===\ny", "z."), ("\\===",))),
        )), Document(None, (Section(None, (("Second document.",), ("\n---\n",))),))),
    )
    batch = [
        (["Intro.\n\n\\===\n\nMore text.\n===\n\\\\---\n  \\---  \nEnd."], "", ""),
        (["\\=== x\n\\====\n\\ ===\n\n===\n\nLast one.", "\\---"], "", ""),
        (render_documents(looks_like), "", ""),
    ]
    options = recipe_options(recipe)
    structurer = TextStructurer(vocabulary.proto, **options)
    got = graph_features(structurer, batch)
    for i, item in enumerate(batch):
        expected = python_features(*item, vocabulary, options)
        assert not differences(expected, {k: v[i] for k, v in got.items()}), (recipe, i)
        # The escaped markers stayed text (the reader's rules are tested in
        # tests/data/test_reader.py).
        texts = [t.decode() for t in np.ravel(got["unit_texts"][i]) if t]
        assert any("===" in t for t in texts), texts


def test_sentence_splitter_matches_python_on_tricky_text(vocabulary):
    from keras_hsum.data.sentences import split_sentences

    structurer = TextStructurer(vocabulary.proto, "sentences", 64, 64)
    got = structurer(tf.constant([[p] for p in TRICKY_PARAGRAPHS]))["unit_texts"]
    for paragraph, row in zip(TRICKY_PARAGRAPHS, got.numpy()):
        expected = [
            s for s in split_sentences(paragraph) if vocabulary.encode(s)
        ]
        assert [t.decode() for t in row if t] == expected, paragraph


@pytest.mark.parametrize(
    "name,split",
    [("scisummnet", "train"), ("qmsum_general", "val"), ("fewsum_yelp", "val")],
)
def test_sentence_splitter_agreement_on_all_real_paragraphs(
    name, split, real_examples, vocabulary
):
    """Every paragraph of a split, split in the graph and in Python."""
    from keras_hsum.data.sentences import split_sentences

    paragraphs = [
        " ".join(p)
        for e in real_examples(name, split)
        for d in e.documents
        for s in d.sections
        for p in s.paragraphs
        if " ".join(p).strip()
    ]
    structurer = TextStructurer(vocabulary.proto, "sentences", 256, 1)
    same = 0
    for start in range(0, len(paragraphs), 256):
        chunk = paragraphs[start : start + 256]
        got = structurer(tf.constant([[p] for p in chunk]))["unit_texts"].numpy()
        for paragraph, row in zip(chunk, got):
            expected = [s for s in split_sentences(paragraph) if vocabulary.encode(s)]
            same += [t.decode() for t in row if t] == expected[:256]
    print(f"\n{name}/{split}: {same}/{len(paragraphs)} paragraphs split identically")
    assert same == len(paragraphs)


def test_runs_in_tf_function_and_bad_inputs(real_examples, vocabulary):
    """Empty strings, an all-empty row, a document 20x over the limits,
    invalid UTF-8 and a mixed-length batch, inside a tf.function."""
    options = recipe_options("seal")  # P=16 snippets of T=32 tokens
    structurer = TextStructurer(vocabulary.proto, **options)
    budget = options["max_units"] * options["max_tokens"] * 20
    long_document, _, _ = render(real_examples("scisummnet", "val")[0])
    long_text = long_document[0]
    while len(vocabulary.encode(long_text)) < budget:
        long_text = long_text + "\n\n" + long_document[0]
    batch = [
        ([long_text, "A second document. With two sentences."], "", ""),
        (["", ""], "", ""),
        (["   \n\n  \n", ""], "ignored title", ""),
        (["Caf\xe9 bad \xff byte. Next sentence \xc3 here."], "", ""),
        (["One.", "", "Three docs, one empty."], "", ""),
    ]

    @tf.function(
        input_signature=[
            tf.TensorSpec([None, None], tf.string),
            tf.TensorSpec([None], tf.string),
            tf.TensorSpec([None], tf.string),
        ]
    )
    def serve(documents, title, query):
        return structurer(documents, title=title, query=query)

    raw = [
        [d.encode("utf-8") if "\xff" not in d else None for d in docs]
        for docs, _, _ in batch
    ]
    raw[3] = [b"Caf\xc3\xa9 bad \xff byte. Next sentence \xc3 here."]
    width = max(len(r) for r in raw)
    documents = tf.constant([r + [b""] * (width - len(r)) for r in raw])
    out = serve(documents, tf.constant([t for _, t, _ in batch]), tf.constant(["", "", "", "", ""]))
    out = {k: v.numpy() for k, v in out.items()}
    assert out["tokens"].shape == (5, 16, 32)
    for i, (docs, title, query) in enumerate(batch):
        if i == 3:
            docs = [raw[3][0].decode("utf-8", errors="replace")]
        expected = python_features(docs, title, query, vocabulary, options)
        assert not differences(expected, {k: v[i] for k, v in out.items()}), i
    for i in (1, 2):  # no text: all padding
        assert not out["paragraph_mask"][i].any()
        assert not out["token_mask"][i].any()
        assert (out["tokens"][i] == vocabulary.pad_id).all()
        assert (out["unit_texts"][i] == b"").all()
    assert out["paragraph_mask"][0].all()  # truncated to P
    assert "\ufffd" in out["unit_texts"][3][0].decode("utf-8")
    # A batch without any text, and an empty batch.
    empty = structurer(tf.constant([["", ""]]))
    assert not empty["paragraph_mask"].numpy().any()
    assert structurer(tf.zeros([0, 1], tf.string))["tokens"].shape[0] == 0


def test_detokenize_round_trip_on_real_sentences(real_examples, vocabulary):
    sentences = [
        s for e in real_examples("cnndm", "summeval100")[:20] for s in e.sentences()
    ]
    structurer = TextStructurer(vocabulary.proto, "sentences", 4, 8)
    ids = structurer.tokenize(tf.constant(sentences))
    for row, sentence in zip(ids.to_list(), sentences):
        assert row == vocabulary.encode(sentence)
    # BOS first, EOS then junk after it, separators and padding inside.
    targets = [
        [vocabulary.bos_id]
        + ([vocabulary.paragraph_id] if vocabulary.paragraph_id else [])
        + row
        + [vocabulary.eos_id, 17, 18]
        for row in ids.to_list()
    ]
    width = max(len(t) for t in targets) + 3
    padded = [t + [vocabulary.pad_id] * (width - len(t)) for t in targets]
    texts = structurer.detokenize(tf.constant(padded)).numpy()
    for text, row, sentence in zip(texts, ids.to_list(), sentences):
        assert text.decode("utf-8") == vocabulary.decode(row)
    # Text round trip where every piece is known (<unk> loses characters;
    # SentencePiece collapses runs of whitespace).
    known = [
        (t.decode("utf-8"), " ".join(s.split()))
        for t, s, row in zip(texts, sentences, ids.to_list())
        if vocabulary.unk_id not in row
    ]
    same = sum(a == b for a, b in known)
    print(f"\nround trip: {same}/{len(known)} sentences without <unk> identical")
    assert len(known) > 100 and same / len(known) >= 0.95


SUBPROCESS = SERVING_PREAMBLE + textwrap.dedent(
    """
    result = {}
    for name, signature in loaded.signatures.items():
        out = signature(
            documents=tf.constant(request["documents"]),
            title=tf.constant(request["title"]),
            query=tf.constant(request["query"]),
        )
        result[name] = {
            k: v.numpy().tolist() if v.dtype != tf.string
            else [[t.decode() for t in r] for r in v.numpy()]
            for k, v in out.items()
        }
    # (tensorflow_text itself imports keras; our code and keras-hub must not.)
    assert not any(m.startswith(("keras_hsum", "keras_hub")) for m in sys.modules)
    json.dump(result, open(sys.argv[3], "w"))
    """
)


def test_saved_model_reloads_with_only_tensorflow_text(tmp_path, corpus, vocabulary):
    """PHT's paragraphs (tf-idf, packing) and the flat family, saved as two
    signatures, reloaded in a process without keras_hsum or keras-hub."""
    specs = [
        tf.TensorSpec([None, None], tf.string, name="documents"),
        tf.TensorSpec([None], tf.string, name="title"),
        tf.TensorSpec([None], tf.string, name="query"),
    ]
    module = tf.Module()
    structurers, signatures = {}, {}
    for recipe in ("pht", "flat"):
        structurer = TextStructurer(vocabulary.proto, **recipe_options(recipe))
        setattr(module, recipe, structurer)
        structurers[recipe] = structurer
        signatures[recipe] = tf.function(
            lambda d, t, q, s=structurer: s(d, title=t, query=q),
            input_signature=specs,
        )
    tf.saved_model.save(module, str(tmp_path / "model"), signatures=signatures)
    batch = corpus[56:62]  # qmsum queries and fewsum multi-document titles
    width = max(len(d) for d, _, _ in batch)
    request = {
        "documents": [d + [""] * (width - len(d)) for d, _, _ in batch],
        "title": [t for _, t, _ in batch],
        "query": [q for _, _, q in batch],
    }
    (tmp_path / "request.json").write_text(json.dumps(request))
    env = dict(os.environ, PYTHONPATH="", TF_CPP_MIN_LOG_LEVEL="3")
    subprocess.run(
        [sys.executable, "-c", SUBPROCESS, str(tmp_path / "model"),
         str(tmp_path / "request.json"), str(tmp_path / "out.json")],
        check=True, env=env, cwd=str(tmp_path), timeout=300,
    )
    reloaded = json.loads((tmp_path / "out.json").read_text())
    assert sorted(reloaded) == ["flat", "pht"]
    for recipe, structurer in structurers.items():
        here = graph_features(structurer, batch)
        assert sorted(reloaded[recipe]) == sorted(here)
        for name, value in here.items():
            if value.dtype == object:
                value = [[t.decode() for t in r] for r in value]
                assert reloaded[recipe][name] == value, (recipe, name)
            else:
                np.testing.assert_array_equal(
                    np.asarray(reloaded[recipe][name]), value
                )


@pytest.mark.parametrize(
    "recipe",
    ["flat", "ht", "pht", "seal", "extractive_abstractive",
     "compressive_abstractive", "discourse", "shte"],
)
@pytest.mark.parametrize("config_name", ["tiny", "paper"])
def test_recipe_structure_options_match_make_dataset(
    recipe, config_name, vocabulary, monkeypatch
):
    """What `structure_options` says is what the recipe's make_dataset passes."""
    from keras_hsum import recipes

    module = recipes.get(recipe)
    config = recipes.config(recipe, config_name)
    captured = {}

    class Captured(Exception):
        pass

    def fake_make_dataset(source, vocabulary, family, **kwargs):
        captured.update(kwargs, family=family)
        raise Captured

    # Every recipe batches through recipes.base.batches, which reads
    # keras_hsum.data.make_dataset when called (the recipes import without
    # TensorFlow): patch it there.
    import keras_hsum.data

    monkeypatch.setattr(keras_hsum.data, "make_dataset", fake_make_dataset)
    with pytest.raises(Captured):
        module.make_dataset(config, [], vocabulary, training=False)
    options = module.structure_options(config)
    expected = dict(
        family=captured["family"],
        max_units=captured.get("max_units"),
        max_tokens=captured["max_tokens"],
        **(captured.get("family_options") or {}),
    )
    assert options == expected
    TextStructurer(vocabulary.proto, **options)  # accepted as is


def test_one_long_paragraph_is_structured_as_in_python(real_examples, vocabulary):
    """A ~30 KB document without a blank line (one paragraph of ~200
    sentences, runs of spaces and tabs inside its sentences): every
    sentence's text and every family's features equal the Python pipeline's
    (the structurer's time on such text is benchmarked, not tested:
    benchmarks/data_pipeline.py --structurer)."""
    from keras_hsum.data.sentences import split_sentences

    sentences = [
        s for e in real_examples("qmsum_general", "val") for s in e.sentences()
    ]
    pieces = []
    for i, sentence in enumerate(sentences):
        if i % 7 == 0:  # whitespace runs inside a sentence are kept
            sentence = sentence.replace(" ", ("  ", "\t", " \t ")[i % 3], 1)
        pieces.append(sentence + ("\n" if i % 5 == 0 else " "))
        if sum(len(p.encode("utf-8")) for p in pieces) >= 30_000:
            break
    text = "".join(pieces)
    assert "\n\n" not in text
    every = TextStructurer(vocabulary.proto, "sentences", 2048, 512)
    row = every(tf.constant([[text]]))["unit_texts"].numpy()[0]
    paragraph = " ".join(line.strip() for line in text.split("\n") if line.strip())
    expected = [s for s in split_sentences(paragraph) if vocabulary.encode(s)]
    assert len(expected) > 150
    assert [t.decode() for t in row if t] == expected
    assert any("\t" in s for s in expected) and any("  " in s for s in expected)
    for recipe in ("pht", "seal", "discourse", "flat"):  # the other families
        options = recipe_options(recipe)
        structurer = TextStructurer(vocabulary.proto, **options)
        got = graph_features(structurer, [([text], "A title", "")])
        expected = python_features([text], "A title", "", vocabulary, options)
        assert not differences(expected, {k: v[0] for k, v in got.items()}), recipe
