"""See et al.'s extended vocabulary in the structurer (`oov_words=K`).

The reference is plain Python: the text's whitespace-delimited words, each
tokenised by the `sentencepiece` package (its pieces' ids and surfaces),
over the rows of the Python builders (`tests/reference_structure.py`), on
bundled real text and on a vocabulary of 4000 pieces trained on other
bundled text, so that real words hold characters it has no piece for.
"""

import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

import reference_structure as structure
from structurer_helpers import render
from keras_hsum.data.reader import example_from_text
from keras_hsum.data.structurer import TextStructurer

P, T, K = 4, 256, 3
# (dataset, split, examples): news with £ and curly quotes, abstracts with
# LaTeX, papers with accented names.
CORPUS = (("cnndm", "summeval100", 40), ("scitldr_a", "val", 40), ("scisummnet", "val", 8))


@pytest.fixture(scope="module")
def processor(vocabulary):
    return sentencepiece.SentencePieceProcessor(model_proto=vocabulary.proto)


@pytest.fixture(scope="module")
def corpus(real_examples):
    rendered = []
    for name, split, count in CORPUS:
        for example in real_examples(name, split)[:count]:
            rendered.append((render(example), example.summary))
    return rendered


def reference_words(text, processor):
    """Per whitespace word of `text`: (ids, OOV core as (first, last, text) or
    None), the core running from the first to the last piece that is not
    punctuation alone."""
    unk = processor.unk_id()
    words = []
    for word in text.split():
        pieces = processor.encode(word, return_type="proto").pieces
        ids = [piece.id for piece in pieces]
        core = None
        if unk in ids:
            inner = [
                i for i, piece in enumerate(pieces)
                if piece.id == unk
                or not processor.id_to_piece(piece.id).lstrip("\u2581")
                or any(c.isalnum() for c in processor.id_to_piece(piece.id))
            ]
            first, last = inner[0], inner[-1]
            surface = "".join(p.surface for p in pieces[first:last + 1]).strip()
            core = (first, last, surface)
        words.append((ids, core))
    return words


def reference_extension(documents, title, query, vocabulary, processor):
    """`(tokens [P,T], source_extended_ids [P,T], source_oov_words [K])` in Python."""
    example = example_from_text(
        "\n---\n".join(documents), title=title or None, query=query or None
    )
    tokens = np.full((P, T), vocabulary.pad_id, np.int32)
    try:
        built = structure.build_sections(example, vocabulary, P, T)
    except structure.EmptyInputError:
        return tokens, tokens.copy(), [""] * K
    listed, occurrences = [], []
    for row, text in enumerate(built.texts):
        ids = built.features["tokens"][row]
        position, flat = 0, []
        for word_ids, core in reference_words(text, processor):
            if core is not None:
                first, last, surface = core
                for i in range(first, last + 1):
                    if position + i < T:
                        occurrences.append((row, position + i, surface))
                        if surface not in listed:
                            listed.append(surface)
            flat += word_ids
            position += len(word_ids)
        kept = min(len(flat), T)
        # The words' pieces are the row's tokens (SentencePiece segments
        # each whitespace-delimited word alone).
        np.testing.assert_array_equal(ids[:kept], flat[:kept], err_msg=text)
        tokens[row] = ids
    extended = tokens.copy()
    listed = listed[:K]
    for row, position, surface in occurrences:
        if surface in listed:
            extended[row, position] = vocabulary.vocabulary_size + listed.index(surface)
    return tokens, extended, listed + [""] * (K - len(listed))


def reference_target(summary, oov_words, vocabulary, processor):
    """The target ids: a word whose OOV core is listed gives V + j for its core."""
    ids = []
    for word_ids, core in reference_words(summary, processor):
        if core is not None and core[2] in oov_words and core[2]:
            first, last, surface = core
            ids += word_ids[:first]
            ids.append(vocabulary.vocabulary_size + oov_words.index(surface))
            ids += word_ids[last + 1:]
        else:
            ids += word_ids
    return ids


def structured(structurer, batch):
    documents = [d for (d, _, _), _ in batch]
    width = max(1, max(len(d) for d in documents))
    return structurer(
        tf.constant([d + [""] * (width - len(d)) for d in documents]),
        title=tf.constant([t for (_, t, _), _ in batch]),
        query=tf.constant([q for (_, _, q), _ in batch]),
    )


def test_oov_words_and_extended_ids_equal_the_python_reference(corpus, vocabulary, processor):
    structurer = TextStructurer(vocabulary.proto, "sections", P, T, oov_words=K)
    found = capped = 0
    for start in range(0, len(corpus), 16):
        batch = corpus[start:start + 16]
        out = {k: v.numpy() for k, v in structured(structurer, batch).items()}
        for i, (rendered, _) in enumerate(batch):
            tokens, extended, words = reference_extension(*rendered, vocabulary, processor)
            got = [w.decode("utf-8") for w in out["source_oov_words"][i]]
            assert got == words, f"example {start + i}: OOV words {got}, expected {words}"
            np.testing.assert_array_equal(out["tokens"][i], tokens)
            np.testing.assert_array_equal(
                out["source_extended_ids"][i], extended,
                err_msg=f"example {start + i} (OOV words {words})",
            )
            found += sum(bool(w) for w in words)
            capped += words[-1] != ""
    # Not vacuous: real OOV words, and examples with more than K of them.
    assert found >= 20 and capped >= 1, (found, capped)


def test_targets_take_the_extended_id_of_a_copied_word(corpus, vocabulary, processor):
    structurer = TextStructurer(vocabulary.proto, "sections", P, T, oov_words=K)
    copies = 0
    for start in range(0, len(corpus), 16):
        batch = corpus[start:start + 16]
        words = structured(structurer, batch)["source_oov_words"]
        summaries = tf.constant([summary for _, summary in batch])
        got = structurer.tokenize_extended(summaries, words).to_list()
        for i, (_, summary) in enumerate(batch):
            listed = [w.decode("utf-8") for w in words[i].numpy()]
            expected = reference_target(summary, listed, vocabulary, processor)
            assert got[i] == expected, f"example {start + i}: {summary!r}"
            copies += sum(t >= vocabulary.vocabulary_size for t in expected)
    assert copies >= 5, copies


def test_detokenize_writes_a_copied_id_as_its_word(vocabulary, processor):
    structurer = TextStructurer(vocabulary.proto, "sections", P, T, oov_words=6)
    source = "The café — Schrödinger's naïve (x²) report on £20 fees."
    features = structurer(tf.constant([[source], ["Plain text only."]]))
    words = [w.decode("utf-8") for w in features["source_oov_words"][0].numpy()]
    assert words == ["café", "—", "Schrödinger's", "naïve", "£20", ""], words
    summary = "A naïve café, Schrödinger's — and £20."
    ids = structurer.tokenize_extended(tf.constant([summary, summary]),
                                       features["source_oov_words"])
    V = vocabulary.vocabulary_size
    first = ids[0].numpy()
    assert [t - V for t in first if t >= V] == [3, 0, 2, 1, 4]
    # The second row's source has no OOV words: its pieces stay.
    np.testing.assert_array_equal(ids[1].numpy(), processor.encode(summary))
    text = structurer.detokenize(
        ids.to_tensor(default_value=vocabulary.pad_id), features["source_oov_words"]
    ).numpy()
    assert text[0].decode("utf-8") == "A naïve café, Schrödinger's — and £20."
    assert text[1].decode("utf-8") == processor.decode(processor.encode(summary))
    # An id past the list, or naming an empty slot, reads as <unk>.
    late = structurer.detokenize(tf.constant([[V + 9, V + 5]]),
                                 features["source_oov_words"][1:]).numpy()[0]
    assert late.decode("utf-8") == " ".join([processor.decode([processor.unk_id()])] * 2)


def test_oov_words_option_is_checked(vocabulary):
    with pytest.raises(ValueError, match="Unknown family options.*oov_words"):
        TextStructurer(vocabulary.proto, "flat", None, 32, oov_words=4)
    with pytest.raises(ValueError, match="oov_words"):
        TextStructurer(vocabulary.proto, "sections", 2, 8, oov_words=0)
    plain = TextStructurer(vocabulary.proto, "sections", 2, 8)
    assert "source_extended_ids" not in plain(tf.constant([["Café."]]))
    with pytest.raises(ValueError, match="built with `oov_words=K`"):
        plain.detokenize(tf.constant([[5]]), oov_words=tf.constant([["x"]]))
    with pytest.raises(ValueError, match="built with `oov_words=K`"):
        plain.tokenize_extended(tf.constant(["Café."]), tf.constant([["x"]]))


def test_discourse_summarizer_copies_a_word_the_vocabulary_cannot_spell(vocabulary):
    """Greedy decoding of a copying DiscourseSummarizer (p_gen ≈ 0) on a
    source whose pieces all belong to one OOV word must produce that word's
    extended id, which `detokenize` writes back as the word; without the
    extension the same model writes the word's pieces, " ⁇ " included."""
    import keras

    from keras_hsum.decoding import greedy_search
    from keras_hsum.models.discourse_summarizer import DiscourseSummarizer

    # Seeded first: setting the seed clears TF's kernel cache, and with it
    # a SentencePiece kernel's resource that the structurer already made.
    keras.utils.set_random_seed(0)
    structurer = TextStructurer(vocabulary.proto, "sections", 2, 16, oov_words=2)
    features = structurer(tf.constant([["Schrödinger"], ["café café"]]))
    inputs = {k: v for k, v in features.items() if v.dtype != tf.string}
    V = vocabulary.vocabulary_size
    model = DiscourseSummarizer(V, hidden_dim=8, embedding_dim=6, num_oov=2)
    model(dict(inputs, decoder_tokens=tf.fill([2, 1], vocabulary.bos_id)))
    gate = model.pointer_generator.context_gate
    gate.bias.assign(np.full(gate.bias.shape, -20.0, "float32"))
    out = greedy_search(model, inputs, max_length=3)
    sequences = out["sequences"][:, 0].numpy()
    # Every source piece is word 0's: the copy distribution is on V + 0.
    np.testing.assert_array_equal(sequences, np.full((2, 3), V))
    text = structurer.detokenize(sequences, features["source_oov_words"]).numpy()
    assert [t.decode("utf-8") for t in text] == [
        "Schrödinger Schrödinger Schrödinger", "café café café"
    ]
    # The same weights copying pieces (`tokens`): the word cannot come out.
    plain = greedy_search(model, {k: v for k, v in inputs.items()
                                  if k != "source_extended_ids"}, max_length=3)
    pieces = structurer.detokenize(plain["sequences"][:, 0]).numpy()
    assert all("ö" not in t.decode("utf-8") and "é" not in t.decode("utf-8")
               for t in pieces), pieces


def test_make_dataset_gives_extended_ids_and_targets(vocabulary, processor):
    """The training pipeline carries the structurer's extension, and its
    targets are `tokenize_extended`'s (BOS ... EOS) of the summary."""
    from keras_hsum.data import corpora
    from keras_hsum.data import make_dataset
    from keras_hsum.data import reader

    path = corpora.sample_path("cnndm", "summeval100")
    dataset = make_dataset(
        path, vocabulary, "sections", max_units=P, max_tokens=T, max_target_length=96,
        family_options={"oov_words": K}, batch_size=24, pad_to_max=True,
    )
    batch = next(iter(dataset))
    assert batch["source_extended_ids"].shape == (24, P, T)
    assert batch["source_oov_words"].shape == (24, K)
    V = vocabulary.vocabulary_size
    copies = 0
    for i, example in enumerate(list(reader.read_jsonl(path))[:24]):
        words = [w.decode("utf-8") for w in batch["source_oov_words"][i].numpy()]
        expected = reference_target(example.summary, words, vocabulary, processor)[:94]
        expected = [vocabulary.bos_id] + expected + [vocabulary.eos_id]
        target = batch["target"][i].numpy()
        np.testing.assert_array_equal(target[:len(expected)], expected)
        assert (target[len(expected):] == vocabulary.pad_id).all()
        copies += int((target >= V).sum())
    assert copies >= 3, copies


def test_shards_store_the_extension(corpus, vocabulary):
    """A shard record (`keras-hsum preprocess`) keeps the two features under
    their declared specs."""
    from keras_hsum.data import shards
    from keras_hsum.features import extended_vocabulary_features
    from keras_hsum.features import family_features

    specs = {**family_features("sections"), **extended_vocabulary_features(K)}
    structurer = TextStructurer(vocabulary.proto, "sections", P, T, oov_words=K)
    out = {k: v.numpy() for k, v in structured(structurer, corpus[:8]).items()}
    parse = shards.parse_function(specs)
    for i in range(8):
        features = {name: out[name][i] for name in specs}
        back = parse(shards.serialize_example("x", features, specs))
        for name in specs:
            np.testing.assert_array_equal(back[name].numpy(), features[name], err_msg=name)
    assert sum(bool(w) for w in out["source_oov_words"].reshape(-1)) >= 3
