"""rank="learned": a ranker run's top-L rows reach the summarizer's features.

The reference is independent of the in-graph ranking: every row
structured in reading order (`rank="order"`, checked against the Python
builders in test_structurer.py), the `ParagraphRanker` called directly on
them and its scores sorted in numpy (`ranker_runs.ranker_order`). The ranker
has fixed random weights, so its order differs from tf-idf's on the bundled
examples (asserted).
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_hsum.data import make_dataset
from keras_hsum.data.reader import render_documents
from keras_hsum.data.structurer import TextStructurer
from ranker_runs import ranker_order
from ranker_runs import write_ranker_run

pytestmark = pytest.mark.tensorflow_only

CANDIDATES = 16  # the ranker run's max_paragraphs (it once capped the candidates)
ALL_ROWS = 400  # more rows than any of the examples below has
CONTEXT = 8  # its context_length
KEPT = 5  # L, the summarizer's max_units
TOKENS = 24  # T
PAGE = ("tokens", "token_mask", "paragraph_mask", "document_ids", "unit_texts",
        "paragraph_index")


@pytest.fixture(scope="module")
def ranker_run(tmp_path_factory, vocabulary):
    folder = tmp_path_factory.mktemp("ranker_run")
    model = write_ranker_run(
        folder, vocabulary, max_paragraphs=CANDIDATES, context_length=CONTEXT
    )
    return str(folder), model


@pytest.fixture(scope="module")
def batch(real_examples):
    """12 qmsum examples (queries, many rows) as the export receives them."""
    examples = real_examples("qmsum_goldspan", "val")[:12]
    documents = [render_documents(e) for e in examples]
    width = max(len(d) for d in documents)
    return examples, {
        "documents": tf.constant([d + [""] * (width - len(d)) for d in documents]),
        "title": tf.constant([e.title or "" for e in examples]),
        "query": tf.constant([e.query or "" for e in examples]),
    }


def reference(vocabulary, model, inputs, pack="paragraph"):
    """Every row in reading order, the ranker's order over them."""
    candidates = TextStructurer(
        vocabulary.proto, "paragraphs", ALL_ROWS, TOKENS, rank="order", pack=pack
    )
    features = {k: v.numpy() for k, v in candidates(**inputs).items()}
    assert not features["paragraph_mask"][:, -1].any()  # no row left out
    context = [q or t for q, t in zip(inputs["query"].numpy(), inputs["title"].numpy())]
    context_tokens = np.full([len(context), CONTEXT], vocabulary.pad_id, np.int32)
    for row, text in enumerate(context):
        ids = vocabulary.encode(text.decode())[:CONTEXT]
        context_tokens[row, : len(ids)] = ids
    order, scores = ranker_order(model, features, context_tokens)
    return features, order, scores


def gathered(features, order, name):
    value = features[name]
    index = order[:, :KEPT].reshape(order.shape[0], KEPT, *[1] * (value.ndim - 2))
    return np.take_along_axis(value, index, axis=1)


@pytest.mark.parametrize("pack", ["paragraph", "section"])
@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_structurer_keeps_the_rankers_top_rows_not_tfidfs(
    pack, batch, vocabulary, ranker_run
):
    run, model = ranker_run
    _, inputs = batch
    structurer = TextStructurer(
        vocabulary.proto, "paragraphs", KEPT, TOKENS, rank="learned",
        ranker_run=run, pack=pack,
    )
    learned = {k: v.numpy() for k, v in structurer(**inputs).items()}
    candidates, order, scores = reference(vocabulary, model, inputs, pack)
    for name in PAGE:
        np.testing.assert_array_equal(
            learned[name], gathered(candidates, order, name), err_msg=name
        )
    np.testing.assert_allclose(
        learned["rank_score"],
        np.where(learned["paragraph_mask"],
                 np.take_along_axis(scores, order[:, :KEPT], axis=1), 0.0),
        rtol=1e-6,
    )
    tfidf = TextStructurer(vocabulary.proto, "paragraphs", KEPT, TOKENS, pack=pack)
    tfidf_rows = tfidf(**inputs)["paragraph_index"].numpy()
    differs = (tfidf_rows != learned["paragraph_index"]).any(axis=1)
    assert differs.sum() >= len(differs) - 1, (tfidf_rows, learned["paragraph_index"])


def test_make_dataset_feeds_the_rankers_top_rows(batch, vocabulary, ranker_run):
    """make_dataset renders the examples and ranks them in its tf.data map."""
    run, model = ranker_run
    examples, inputs = batch
    dataset = make_dataset(
        list(examples), vocabulary, "paragraphs", batch_size=len(examples),
        max_units=KEPT, max_tokens=TOKENS, max_target_length=16, pad_to_max=True,
        family_options={"rank": "learned", "ranker_run": run},
    )
    [features] = [{k: v.numpy() for k, v in b.items()} for b in dataset]
    candidates, order, scores = reference(vocabulary, model, inputs)
    for name in ("tokens", "token_mask", "paragraph_mask", "paragraph_index"):
        np.testing.assert_array_equal(
            features[name], gathered(candidates, order, name), err_msg=name
        )
    np.testing.assert_allclose(
        features["rank_score"],
        np.where(features["paragraph_mask"],
                 np.take_along_axis(scores, order[:, :KEPT], axis=1), 0.0),
        rtol=1e-6,
    )


def test_refusals_say_what_was_expected(tmp_path, vocabulary, foreign_vocabulary,
                                        ranker_run):
    run, _ = ranker_run
    with pytest.raises(ValueError, match="rank='learned' needs `ranker_run`"):
        TextStructurer(vocabulary.proto, "paragraphs", 4, 16, rank="learned")
    with pytest.raises(ValueError, match="used only with rank='learned'"):
        TextStructurer(vocabulary.proto, "paragraphs", 4, 16, ranker_run=run)
    with pytest.raises(ValueError, match="ranks the 'paragraphs' family only"):
        TextStructurer(vocabulary.proto, "flat", None, 64, rank="learned")
    with pytest.raises(ValueError, match="Unknown family options"):
        TextStructurer(vocabulary.proto, "sections", 4, 16, ranker_run=run)
    with pytest.raises(ValueError, match="another SentencePiece vocabulary.*sha256"):
        TextStructurer(foreign_vocabulary.proto, "paragraphs", 4, 16,
                       rank="learned", ranker_run=run)
    with pytest.raises(ValueError, match="missing"):
        TextStructurer(vocabulary.proto, "paragraphs", 4, 16, rank="learned",
                       ranker_run=str(tmp_path))
    (tmp_path / "config.json").write_text('{"recipe": "ht", "config": {}}')
    (tmp_path / "model.keras").write_text("")
    (tmp_path / "vocabulary.model").write_bytes(vocabulary.proto)
    with pytest.raises(ValueError, match="must be a 'ranker' run"):
        TextStructurer(vocabulary.proto, "paragraphs", 4, 16, rank="learned",
                       ranker_run=str(tmp_path))


@pytest.mark.parametrize("recipe_name", ["ht", "pht"])
def test_recipes_train_and_export_with_the_ranker_they_record(
    recipe_name, vocabulary, ranker_run, monkeypatch
):
    """`--set rank=learned --set ranker_run=RUN`: make_dataset and export's
    structure_options both pass the (absolute) ranker run."""
    from keras_hsum import recipes

    run, _ = ranker_run
    module = recipes.get(recipe_name)
    config = recipes.config(recipe_name, "tiny").replace(rank="learned", ranker_run=run)
    captured = {}

    class Captured(Exception):
        pass

    def fake_make_dataset(source, vocabulary, family, **kwargs):
        captured.update(kwargs["family_options"])
        raise Captured

    # recipes.base imports keras_hsum.data inside make_dataset (so that the
    # recipes import without TensorFlow): patch the name where it is read.
    import keras_hsum.data

    monkeypatch.setattr(keras_hsum.data, "make_dataset", fake_make_dataset)
    with pytest.raises(Captured):
        module.make_dataset(config, [], vocabulary, training=True)
    assert captured["rank"] == "learned" and captured["ranker_run"] == run
    options = module.structure_options(config)
    assert (options["rank"], options["ranker_run"]) == ("learned", run)
    TextStructurer(vocabulary.proto, **options)  # loads the ranker


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_loading_a_ranker_without_the_models_registered_says_what_to_import(ranker_run):
    """The data layer does not import keras_hsum.models; in a process that has
    not registered ParagraphRanker, loading a ranker run says what to import
    (instead of Keras' 'Could not locate class')."""
    import subprocess
    import sys

    code = (
        "from keras_hsum.data.learned_ranking import load_ranker_run\n"
        f"load_ranker_run({ranker_run[0]!r})\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode != 0
    assert "import keras_hsum.models" in result.stderr, result.stderr[-2000:]


@pytest.mark.slow  # 25 s on 2 cores (two structurer graphs)
def test_a_row_past_the_rankers_training_size_is_kept_when_it_scores_highest(
    vocabulary, ranker_run
):
    """HT's ranker scores every input paragraph: a row after the ranker
    run's max_paragraphs (P_c = 16) rows, scoring highest, is kept first."""
    run, model = ranker_run
    texts = ["The committee discussed the budget for the next year.",
             "Remote controls need bigger buttons for elderly users."]
    pair = TextStructurer(vocabulary.proto, "paragraphs", 2, TOKENS, rank="order")
    pair_features = {k: v.numpy() for k, v in pair(tf.constant([["\n\n".join(texts)]])).items()}
    no_context = np.full([1, CONTEXT], vocabulary.pad_id, np.int32)
    _, scores = ranker_order(model, pair_features, no_context)
    low, high = np.argsort(scores[0])
    assert scores[0, high] > scores[0, low]
    last = CANDIDATES + 10
    rows = [texts[low]] * last + [texts[high]]
    structurer = TextStructurer(vocabulary.proto, "paragraphs", KEPT, TOKENS,
                                rank="learned", ranker_run=run)
    learned = structurer(tf.constant([["\n\n".join(rows)]]))
    assert learned["paragraph_index"].numpy()[0, 0] == last
    np.testing.assert_allclose(learned["rank_score"].numpy()[0, 0], scores[0, high], rtol=1e-5)
    np.testing.assert_array_equal(learned["tokens"].numpy()[0, 0], pair_features["tokens"][0, high])
