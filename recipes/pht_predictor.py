"""PHT's attention predictor (Ma & Zong §4.2.1), trained after PHT.

The teacher is a trained PHT run folder (`teacher_run`), as written by the
trainer: `model.keras` (the `ParallelHierarchicalTransformer`, its last
weights; `best.keras`, its lowest validation loss, with
`teacher_checkpoint="best"`: the weights the PHT is exported with) and
`vocabulary.model` (its SentencePiece vocabulary). Each batch of ranked
paragraphs goes through the frozen teacher once:

- predictor inputs: `paragraph_embeddings` = the teacher's Φ [B,P,D]
  (Eq. 6, ranking encoding included) and `paragraph_mask` [B,P];
- labels: η [B,P] = `attention_labels(teacher, batch)`, the teacher's
  paragraph attention on the reference summary (teacher forcing), summed
  over decoder layers and real target positions, normalised (Eq. 15);
- sample weights: `paragraph_mask` as float [B,P] (padded paragraphs do
  not count in the MSE).

The loss is the mean squared error over real paragraphs (§4.2.1).
"""

import dataclasses
import os

from keras_hsum import run_folder
from keras_hsum.features import DECODER_TOKENS
from keras_hsum.features import PARAGRAPH_MASK
from keras_hsum.features import TARGET
from keras_hsum.features import TARGET_MASK
from keras_hsum.features import TOKENS
from keras_hsum.features import TOKEN_MASK
from keras_hsum.models.attention_predictor import AttentionPredictor
from keras_hsum.models.attention_predictor import ParagraphAttentionMSE
from keras_hsum.models.attention_predictor import attention_labels
from keras_hsum.recipes import pht as pht_recipe
from keras_hsum.recipes.base import Recipe
from keras_hsum.recipes.base import RecipeConfig
from keras_hsum.recipes.base import check_ranking
from keras_hsum.recipes.base import model_arguments

DEFAULT_DATASET = pht_recipe.DEFAULT_DATASET

TEACHER_VOCABULARY = run_folder.VOCABULARY


@dataclasses.dataclass(frozen=True)
class Config(RecipeConfig):
    """Predictor sizes, teacher run and input shape.

    Attributes:
        teacher_run: folder of a trained PHT run with `model.keras` and
            `vocabulary.model` (required to build batches).
        teacher_checkpoint: "last" (`model.keras`), "best" (`best.keras`),
            or a kept "epoch-N" / "epochs-A-B": the teacher weights whose
            attention is learnt; use the checkpoint the PHT is exported
            with (`keras-hsum export --checkpoint`).
        hidden_dim: the teacher's width D (Φ's width; also the Noam
            schedule's D); checked against the loaded teacher.
        num_heads, intermediate_dim, num_layers, dropout: the predictor's
            Transformer encoder (paper: 2 layers, dropout 0.5). Its width is
            the teacher's D; `num_heads` must divide it.
        max_paragraphs, max_paragraph_tokens, max_target_length, rank,
            ranker_run, pack:
            how paragraphs and summaries are cut; keep them equal to the
            teacher's recipe config (η is only meaningful for inputs shaped
            like the teacher's training data).
        attention_dropout: dropout on the attention probabilities (a
            recipe option, not the paper's); None uses `dropout`, as the
            paper configs do; 0 lets Keras take fused (cuDNN flash)
            attention on a GPU (docs/recipes.md, "Attention dropout").
    """

    dataset: str = DEFAULT_DATASET
    teacher_run: str | None = None
    teacher_checkpoint: str = "last"
    hidden_dim: int = 256
    num_heads: int = 4
    intermediate_dim: int = 1024
    num_layers: int = 2
    dropout: float = 0.5
    attention_dropout: float | None = None
    max_paragraphs: int = 30
    max_paragraph_tokens: int = 100
    max_target_length: int = 200
    rank: str = "tfidf"
    ranker_run: str | None = None
    pack: str = "section"

    def __post_init__(self):
        check_ranking(self)


_TINY_TEACHER = pht_recipe.CONFIGS["tiny"]

CONFIGS = {
    "tiny": Config(
        vocabulary_size=_TINY_TEACHER.vocabulary_size,
        hidden_dim=_TINY_TEACHER.hidden_dim,
        num_heads=4,
        intermediate_dim=128,
        num_layers=2,
        dropout=0.1,
        max_paragraphs=_TINY_TEACHER.max_paragraphs,
        max_paragraph_tokens=_TINY_TEACHER.max_paragraph_tokens,
        max_target_length=_TINY_TEACHER.max_target_length,
        batch_size=8,
        epochs=4,
        steps_per_epoch=50,
        validation_steps=4,
        optimizer="adam",
        learning_rate=1.0,
        warmup_steps=100,
        label_smoothing=0.0,
        max_val_examples=32,
    ),
    # §5.2: a two-layer Transformer encoder with dropout 0.5, ~100k steps.
    "paper": Config(
        vocabulary_size=32000,
        batch_size=16,
        epochs=10,
        steps_per_epoch=10000,
        warmup_steps=8000,
        label_smoothing=0.0,
    ),
}


def build_model(config, vocabulary_size):
    """The predictor (it has no embedding: `vocabulary_size` is unused; its
    width is the teacher's, so `hidden_dim` is not an argument)."""
    del vocabulary_size
    return AttentionPredictor(**model_arguments(
        AttentionPredictor, config, name="attention_predictor"
    ))


def _teacher_files(teacher_run, checkpoint):
    """Raises a ValueError unless `teacher_run` holds the checkpoint and the
    vocabulary; returns the run folder as a str."""
    from keras_hsum.training.checkpoints import checkpoint_files

    if not teacher_run:
        raise ValueError(
            "pht_predictor needs `teacher_run`, the folder of a trained PHT "
            "run (with model.keras and vocabulary.model); received None. "
            "Train `pht` first, then use config.replace(teacher_run=<run "
            "folder>) (CLI: --set teacher_run=<run folder>)."
        )
    teacher_run = os.fspath(teacher_run)
    flag = "pht_predictor: teacher_checkpoint"
    teacher_files = checkpoint_files(teacher_run, checkpoint, flag)
    missing = [
        name
        for name in (*teacher_files, TEACHER_VOCABULARY)
        if not os.path.isfile(os.path.join(teacher_run, name))
    ]
    if missing:
        raise ValueError(
            f"pht_predictor: the teacher run {teacher_run!r} must contain "
            f"{', '.join(teacher_files)} and {TEACHER_VOCABULARY}; missing {missing}. "
            "Point `teacher_run` at the folder the trainer wrote for a "
            "finished `pht` run."
        )
    return teacher_run


def load_teacher(teacher_run, checkpoint="last"):
    """`(pht_model, vocabulary)` from a trained PHT run folder.

    Args:
        teacher_run: the PHT run folder.
        checkpoint: "last" (`model.keras`), "best" (`best.keras`), or a
            kept "epoch-N" / "epochs-A-B" (`keras_hsum.training.checkpoints`).

    Raises:
        ValueError: `teacher_run` is None or lacks the checkpoint /
            `vocabulary.model`, `checkpoint` is unknown, or the model is
            not a PHT.
    """
    from keras_hsum.training.checkpoints import checkpoint_files
    from keras_hsum.training.checkpoints import load_checkpoint_model
    from keras_hsum.models.parallel_hierarchical_transformer import (
        ParallelHierarchicalTransformer,
    )

    teacher_run = _teacher_files(teacher_run, checkpoint)
    flag = "pht_predictor: teacher_checkpoint"
    teacher = load_checkpoint_model(teacher_run, checkpoint, flag)
    if not isinstance(teacher, ParallelHierarchicalTransformer):
        raise ValueError(
            f"pht_predictor: {teacher_run}/{checkpoint_files(teacher_run, checkpoint, flag)[-1]} "
            "must be a ParallelHierarchicalTransformer, received "
            f"{type(teacher).__name__}. Point `teacher_run` at a `pht` run."
        )
    teacher.trainable = False
    return teacher, teacher_vocabulary(teacher_run)


def teacher_vocabulary(teacher_run):
    """The teacher run's `Vocabulary`."""
    from keras_hsum.data.vocabulary import Vocabulary

    return Vocabulary.load(os.path.join(teacher_run, TEACHER_VOCABULARY))


def data_vocabulary(config, vocabulary):
    """The teacher's vocabulary, not the run's (which is ignored: η and Φ
    are only defined for the teacher's tokenisation; the predictor has no
    embedding)."""
    del vocabulary
    return teacher_vocabulary(_teacher_files(config.teacher_run, config.teacher_checkpoint))


def teacher_labels(config, batches, vocabulary):
    """Batches `(inputs, η, paragraph weights)` labelled by the frozen teacher.

    The teacher is loaded once per call from `config.teacher_run`; the
    batches are the teacher's paragraphs (`recipes.pht.features`),
    tokenised with its vocabulary (`data_vocabulary`).

    Returns:
        tf.data of `({"paragraph_embeddings": float32 [B,P,D],
        "paragraph_mask": bool [B,P]}, η float32 [B,P], weights float32
        [B,P])`.
    """
    import tensorflow as tf

    teacher, _ = load_teacher(config.teacher_run, config.teacher_checkpoint)
    if teacher.hidden_dim != config.hidden_dim:
        raise ValueError(
            f"pht_predictor: config.hidden_dim={config.hidden_dim} but the "
            f"teacher in {config.teacher_run!r} has width "
            f"{teacher.hidden_dim}; set hidden_dim to the teacher's D."
        )
    pad_id = vocabulary.pad_id

    def label(features):
        target = features[TARGET]
        inputs = {
            TOKENS: features[TOKENS],
            TOKEN_MASK: features[TOKEN_MASK],
            PARAGRAPH_MASK: features[PARAGRAPH_MASK],
            DECODER_TOKENS: target[:, :-1],
            TARGET_MASK: tf.not_equal(target[:, 1:], pad_id),
        }
        memory = teacher.encode(inputs, training=False)
        eta = attention_labels(teacher, inputs, memory=memory)
        predictor_inputs = {
            "paragraph_embeddings": tf.cast(memory["paragraph_memory"], tf.float32),
            PARAGRAPH_MASK: memory[PARAGRAPH_MASK],
        }
        weights = tf.cast(memory[PARAGRAPH_MASK], tf.float32)
        return predictor_inputs, tf.cast(eta, tf.float32), weights

    # The teacher runs in the input pipeline, one batch at a time.
    return batches.map(label, num_parallel_calls=1, deterministic=True)


def loss(config):
    """Mean squared error between η̂ and η over real paragraphs (§4.2.1)."""
    del config
    return ParagraphAttentionMSE()


def metrics(config):
    """None: the loss is the measure (the default token accuracy does not
    apply, and Keras' MAE would average over P before the paragraph
    weights)."""
    del config
    return []


RECIPE = Recipe(
    name="pht_predictor",
    config_class=Config,
    configs=CONFIGS,
    build_model=build_model,
    # The teacher's paragraphs, cut as the teacher's recipe cuts them.
    features=pht_recipe.features,
    vocabulary=data_vocabulary,
    pairs=teacher_labels,
    loss=loss,
    metrics=metrics,
)
make_dataset = RECIPE.make_dataset
structure_options = RECIPE.structure_options
