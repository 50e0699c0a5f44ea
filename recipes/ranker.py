"""HT's learned paragraph ranker (Liu & Lapata 2019, §3).

Every paragraph (pipeline "paragraphs" family, reading order, so that the
ranker never sees the tf-idf rank) is scored against the query/title; the
labels are its ROUGE-2 recall against the summary (extra
`ranker_targets`), the sample weight is `paragraph_mask`, the loss binary
cross-entropy per paragraph.
"""

import dataclasses

import keras

from keras_hsum.features import PARAGRAPH_MASK
from keras_hsum.features import RANKER_TARGETS
from keras_hsum.models.paragraph_ranker import ParagraphBinaryCrossEntropy
from keras_hsum.models.paragraph_ranker import ParagraphRanker
from keras_hsum.recipes.base import Recipe
from keras_hsum.recipes.base import RecipeConfig
from keras_hsum.recipes.base import model_arguments
from keras_hsum.recipes.base import text_features

DEFAULT_DATASET = "qmsum_goldspan"


@dataclasses.dataclass(frozen=True)
class Config(RecipeConfig):
    """ParagraphRanker sizes (see `recipes.base.RecipeConfig`).

    Attributes:
        embedding_dim, hidden_dim, feature_dim: see `ParagraphRanker`.
        max_paragraphs: P, paragraphs scored per example.
        paragraph_length: T.
        context_length: C, title/query tokens.
    """

    dataset: str = DEFAULT_DATASET
    embedding_dim: int = 256
    hidden_dim: int = 256
    feature_dim: int = 256
    dropout: float = 0.1
    max_paragraphs: int = 100
    paragraph_length: int = 100
    context_length: int = 32
    optimizer: str = "adagrad"
    learning_rate: float = 0.15
    label_smoothing: float = 0.0


CONFIGS = {
    "tiny": Config(
        vocabulary_size=4000,
        embedding_dim=64,
        hidden_dim=64,
        feature_dim=64,
        max_paragraphs=32,
        paragraph_length=48,
        batch_size=8,
        epochs=4,
        steps_per_epoch=50,
        validation_steps=4,
        learning_rate=0.1,
        max_val_examples=32,
    ),
    "paper": Config(
        vocabulary_size=32000,
        batch_size=16,
        epochs=10,
        steps_per_epoch=5000,
    ),
}


def build_model(config, vocabulary_size):
    return ParagraphRanker(**model_arguments(
        ParagraphRanker, config, vocabulary_size=vocabulary_size, name="paragraph_ranker"
    ))


def features(config, *, training):
    """Every paragraph in reading order ("paragraphs" family, `rank="order"`,
    so the ranker never sees the tf-idf rank) with the query/title as
    `context_tokens` [C]; no target."""
    del training
    return text_features(
        "paragraphs",
        max_units=config.max_paragraphs,
        max_tokens=config.paragraph_length,
        family_options={"rank": "order", "context_length": config.context_length},
    )


def labels(config, vocabulary):
    """`ranker_targets` [P]: each paragraph's ROUGE-2 recall of the summary."""
    del config, vocabulary
    from keras_hsum.data.pipeline import ranker_targets

    return [ranker_targets]


def pairs(config, batches, vocabulary):
    """`(inputs, ranker_targets [B,P], paragraph_mask as float [B,P])`."""
    del config, vocabulary
    import tensorflow as tf

    def split(features):
        features = dict(features)
        labels = features.pop(RANKER_TARGETS)
        weights = tf.cast(features[PARAGRAPH_MASK], tf.float32)
        return features, labels, weights

    return batches.map(split, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def loss(config):
    return ParagraphBinaryCrossEntropy()


def paragraph_absolute_error(y_true, y_pred):
    """|y − s| per paragraph [B,P] (weighted by paragraph_mask)."""
    return keras.ops.abs(
        keras.ops.cast(y_true, "float32") - keras.ops.cast(y_pred, "float32")
    )


def metrics(config):
    return [
        keras.metrics.MeanMetricWrapper(
            paragraph_absolute_error, name="paragraph_absolute_error"
        )
    ]


RECIPE = Recipe(
    name="ranker",
    config_class=Config,
    configs=CONFIGS,
    build_model=build_model,
    features=features,
    labels=labels,
    pairs=pairs,
    loss=loss,
    metrics=metrics,
)
make_dataset = RECIPE.make_dataset
structure_options = RECIPE.structure_options
