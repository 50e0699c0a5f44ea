"""A `ranker` run folder with fixed weights, for the learned-ranking tests.

`write_ranker_run` writes what `keras-hsum train --recipe ranker` leaves
(config.json, model.keras, vocabulary.model) for a small `ParagraphRanker`
whose weights are drawn from a seeded numpy generator: its order is
arbitrary, so on real text it differs from tf-idf's, and the tests need no
training (and change no global seed). `ranker_order` is the reference the
tests compare with: the ranker called directly, scores sorted in numpy.
"""

import dataclasses
import json
import os

import numpy as np


def write_ranker_run(folder, vocabulary, *, max_paragraphs=16, context_length=8,
                     width=16, seed=0):
    """Writes the run into `folder` (created); returns the model."""
    from keras_hsum import recipes
    from keras_hsum.models.paragraph_ranker import ParagraphRanker

    os.makedirs(folder, exist_ok=True)
    config = recipes.config("ranker", "tiny").replace(
        embedding_dim=width, hidden_dim=width, feature_dim=width, dropout=0.0,
        max_paragraphs=max_paragraphs, context_length=context_length,
    )
    model = ParagraphRanker(
        vocabulary_size=vocabulary.vocabulary_size, embedding_dim=width,
        hidden_dim=width, feature_dim=width, dropout=0.0, name="paragraph_ranker",
    )
    model({"tokens": np.ones([1, 2, 3], "int32"),
           "context_tokens": np.ones([1, 2], "int32")})
    rng = np.random.default_rng(seed)
    model.set_weights([
        rng.normal(0.0, 0.5, weight.shape).astype(weight.dtype)
        for weight in model.get_weights()
    ])
    model.save(os.path.join(folder, "model.keras"))
    vocabulary.save(os.path.join(folder, "vocabulary.model"))
    with open(os.path.join(folder, "config.json"), "w") as handle:
        json.dump({"recipe": "ranker", "config_name": "tiny",
                   "config": dataclasses.asdict(config)}, handle)
    return model


def ranker_order(model, features, context_tokens):
    """The reference ranking: `model` on reading-order rows, sorted in numpy.

    Args:
        model: the `ParagraphRanker`.
        features: numpy features of a `rank="order"` structuring of the
            candidates (`tokens` [B,P_c,T], `token_mask`, `paragraph_mask`).
        context_tokens: int [B,C_r], the title/query ids cut to the
            ranker's context length (pad elsewhere).

    Returns:
        `(order, scores)`: int [B,P_c], the candidate rows best first (ties
        in reading order, padding last), and the ranker's float32 scores.
    """
    scores = np.asarray(model({
        "tokens": features["tokens"],
        "token_mask": features["token_mask"],
        "paragraph_mask": features["paragraph_mask"],
        "context_tokens": context_tokens,
    }, training=False), np.float32)
    mask = np.asarray(features["paragraph_mask"], bool)
    order = np.stack([
        np.concatenate([
            sorted(np.flatnonzero(row_mask), key=lambda p: (-row_scores[p], p)),
            np.flatnonzero(~row_mask),
        ]).astype(int)
        for row_scores, row_mask in zip(scores, mask)
    ])
    return order, scores
