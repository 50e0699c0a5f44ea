"""rank="learned" end to end: a ranker run trained, HT trained on its top
paragraphs, exported, and the SavedModel run without Keras.

The reference is independent of the code under test: every row in reading
order (`rank="order"`), the trained ranker loaded from its run folder
and called directly, its scores sorted in numpy (`ranker_runs.ranker_order`).
The SavedModel's `paragraphs` output (the rows the summarizer reads) must be
those top-L rows, and not tf-idf's, from the same raw text.
"""

import json
import os

import numpy as np
import pytest

from ranker_runs import ranker_order
from test_export_cli import run_command
from test_serving import padded
from test_serving import run_saved_model

pytestmark = pytest.mark.tensorflow_only


def _tiny(config, **changes):
    return config.replace(
        epochs=1, steps_per_epoch=3, validation_steps=1, batch_size=4,
        max_val_examples=4, **changes,
    )


def test_ranked_config_refuses_what_the_run_did_not_train_on():
    from keras_hsum import recipes
    from keras_hsum.export.exporter import ranked_config

    tfidf = recipes.config("ht", "tiny")
    with pytest.raises(ValueError, match="trained on rank='tfidf' paragraphs"):
        ranked_config("ht", tfidf, ranker_run="runs/ranker")
    with pytest.raises(ValueError, match="only ht and pht rank paragraphs"):
        ranked_config("seal", recipes.config("seal", "tiny"), ranker_run="runs/ranker")
    with pytest.raises(ValueError, match="was not trained with rank='learned'"):
        ranked_config("ht", tfidf, extractive_beta=0.5)
    learned = tfidf.replace(rank="learned", ranker_run="runs/ranker")
    assert learned.ranker_run == os.path.abspath("runs/ranker")
    moved = ranked_config("ht", learned, ranker_run="elsewhere/ranker")
    assert moved.ranker_run == os.path.abspath("elsewhere/ranker")
    with pytest.raises(ValueError, match="give one of them"):
        ranked_config("pht", learned, extractive_beta=0.5, predictor_run="p")
    with pytest.raises(ValueError, match="needs `ranker_run`"):
        tfidf.replace(rank="learned")
    with pytest.raises(ValueError, match="needs rank='learned'"):
        recipes.config("pht", "tiny").replace(ranker_run="runs/ranker")


@pytest.mark.slow
def test_trained_ranker_order_reaches_ht_in_training_and_in_the_saved_model(
    tmp_path, real_examples
):
    import keras
    import tensorflow as tf

    from keras_hsum import recipes
    from keras_hsum.data import corpora
    from keras_hsum.data.reader import render_documents
    from keras_hsum.data.structurer import TextStructurer
    from keras_hsum.data.vocabulary import Vocabulary
    from keras_hsum.export.serving import read_metadata
    from keras_hsum.training import train

    data = os.path.dirname(corpora.sample_path("qmsum_goldspan", "train"))
    ranker_dir, ht_dir = tmp_path / "ranker", tmp_path / "ht"
    ranker_config = _tiny(recipes.config("ranker", "tiny"), max_paragraphs=16,
                          context_length=8, embedding_dim=16, hidden_dim=16,
                          feature_dim=16)
    train(recipes.get("ranker"), ranker_config, out=str(ranker_dir), data=data,
          recipe_name="ranker", config_name="tiny", verbose=0)
    ht_config = _tiny(
        recipes.config("ht", "tiny"), rank="learned", ranker_run=str(ranker_dir),
        hidden_dim=16, num_heads=2, intermediate_dim=32, layer_schedule="LG",
        num_decoder_layers=1, max_paragraphs=4, max_test_paragraphs=5,
        paragraph_length=24, max_target_length=12,
    )
    train(recipes.get("ht"), ht_config, out=str(ht_dir), data=data,
          recipe_name="ht", config_name="tiny", verbose=0)

    # The run took the ranker's vocabulary and recorded the ranker.
    assert (ht_dir / "vocabulary.model").read_bytes() == (
        ranker_dir / "vocabulary.model").read_bytes()
    recorded = json.loads((ht_dir / "config.json").read_text())["config"]
    assert (recorded["rank"], recorded["ranker_run"]) == ("learned", str(ranker_dir))

    out = tmp_path / "saved_models" / "ht"
    assert run_command("export", "--run", ht_dir, "--out", out, "--beam-size", "2",
                       "--extractive-alignment", "0.5") == 0
    version = out / "1"
    metadata = read_metadata(version)
    assert metadata["ranker_run"] == str(ranker_dir)
    assert metadata["structure_options"]["rank"] == "learned"
    assert metadata["search"]["extractive_beta"] == 0.5

    examples = real_examples("qmsum_goldspan", "val")[:6]
    documents = padded([render_documents(e) for e in examples])
    titles = [e.title or "" for e in examples]
    queries = [e.query or "" for e in examples]
    requests = [{"signature": "summarize_with_context",
                 "inputs": {"documents": documents, "title": titles, "query": queries}}]
    [served], leaked = run_saved_model(version, requests, tmp_path)
    assert leaked == [] and "__error__" not in served, served.get("__error__")
    paragraphs = served["paragraphs"]  # [B, L]: what the summarizer read
    kept = ht_config.max_test_paragraphs
    assert paragraphs.shape == (len(examples), kept)

    # The reference: every row in reading order (HT's ranker scores every
    # paragraph), the trained ranker called directly, sorted in numpy.
    vocabulary = Vocabulary.load(str(ranker_dir / "vocabulary.model"))
    ranker = keras.saving.load_model(str(ranker_dir / "model.keras"), compile=False)
    inputs = dict(documents=tf.constant(documents), title=tf.constant(titles),
                  query=tf.constant(queries))
    candidates = TextStructurer(
        vocabulary.proto, "paragraphs", 400, ht_config.paragraph_length, rank="order",
    )
    features = {k: v.numpy() for k, v in candidates(**inputs).items()}
    assert not features["paragraph_mask"][:, -1].any()  # every row is there
    context_tokens = np.full([len(examples), ranker_config.context_length],
                             vocabulary.pad_id, np.int32)
    for row, (query, title) in enumerate(zip(queries, titles)):
        ids = vocabulary.encode(query or title)[: ranker_config.context_length]
        context_tokens[row, : len(ids)] = ids
    order, scores = ranker_order(ranker, features, context_tokens)
    tfidf = TextStructurer(vocabulary.proto, "paragraphs", kept,
                           ht_config.paragraph_length)(**inputs)["unit_texts"].numpy()
    for row in range(len(examples)):
        texts = list(features["unit_texts"][row])
        expected = [texts[p] for p in order[row, :kept]]
        if list(paragraphs[row]) != expected:
            # Only rows whose scores tie (graph vs eager float rounding) may
            # swap: the served rows must have the top-L scores.
            served_scores = [scores[row, texts.index(t)] for t in paragraphs[row]]
            np.testing.assert_allclose(
                served_scores, scores[row, order[row, :kept]], atol=1e-5
            )
        assert list(paragraphs[row]) != list(tfidf[row])
