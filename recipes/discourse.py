"""Cohan et al. (2018): the discourse-aware summarizer of long documents.

A hierarchical BiLSTM reads the document's first P sections (T tokens each),
an LSTM decoder attends to sections and words (discourse attention), copies
source words (pointer-generator) and, in the final epochs, uses coverage
(`callbacks` switches it on after `coverage_start_epoch` epochs, so one
`model.fit` runs both phases). Loss: token NLL of the final distribution
(the model outputs log-probabilities) plus λ · coverage loss (added by the
model itself with `add_loss` once coverage is on).
"""

import dataclasses

import keras

from keras_hsum.models.discourse_summarizer import DiscourseSummarizer
from keras_hsum.models.losses import LabelSmoothedCrossEntropy
from keras_hsum.recipes.base import Recipe
from keras_hsum.recipes.base import RecipeConfig
from keras_hsum.recipes.base import model_arguments
from keras_hsum.recipes.base import text_features

DEFAULT_DATASET = "scisummnet"


@dataclasses.dataclass(frozen=True)
class Config(RecipeConfig):
    """DiscourseSummarizer sizes and the coverage phase.

    Attributes:
        hidden_dim: D, LSTM cell size (encoder and decoder).
        embedding_dim: E.
        max_sections: P, the first sections kept.
        max_section_length: T, tokens per section.
        max_target_length: S, the summary length (with BOS/EOS).
        num_oov: K, See et al.'s extended vocabulary: the structurer gives
            each example's first K out-of-vocabulary source words (words
            with an `<unk>` piece; `TextStructurer(oov_words=K)`) the ids
            V .. V+K-1 (`source_extended_ids`), a summary word that is one
            of them is that id in the target, the model's distribution
            covers V + K ids, and the export writes a copied id back as its
            word. 0 (both configs): off, copying goes to the pieces.
        use_coverage: build the coverage mechanism.
        coverage_start_epoch: epochs trained without coverage; coverage is
            on from this (0-based) epoch to the end (None: never).
        coverage_loss_weight: λ once coverage is on (See et al.: 1).
        section_weighting: `DiscourseAttention`'s "scores" or "probabilities".
        section_encoding: `DiscourseSummarizer`'s word-level encoder:
            "paper" (each section alone, the paper's §2), "carry" (the
            state carried from section to section, the authors' code) or
            "concatenated" (one BiLSTM over all sections). Both configs
            below use "paper"; the field's default is "concatenated", what
            runs trained before the field existed used, so that resuming
            such a run with another encoder is refused, not done silently.
        use_cudnn: `DiscourseSummarizer`'s: True, cuDNN's LSTM kernel for
            the "paper" word encoder where a GPU is visible; False, the
            scan everywhere (`--set use_cudnn=false`).
    """

    dataset: str = DEFAULT_DATASET
    hidden_dim: int = 256
    embedding_dim: int = 128
    max_sections: int = 4
    max_section_length: int = 500
    max_target_length: int = 210
    num_oov: int = 0
    use_coverage: bool = True
    coverage_start_epoch: int | None = 8
    coverage_loss_weight: float = 1.0
    section_weighting: str = "scores"
    section_encoding: str = "concatenated"
    use_cudnn: bool = True
    optimizer: str = "adagrad"
    learning_rate: float = 0.15
    label_smoothing: float = 0.0
    clipnorm: float | None = 2.0


CONFIGS = {
    "tiny": Config(
        vocabulary_size=4000,
        hidden_dim=64,
        embedding_dim=32,
        max_sections=4,
        max_section_length=64,
        max_target_length=48,
        batch_size=8,
        epochs=12,
        steps_per_epoch=50,
        validation_steps=4,
        coverage_start_epoch=10,
        # Adam learns the tiny model several times faster than the paper's
        # Adagrad 0.15 in the few hundred steps a CPU test affords.
        optimizer="adam",
        learning_rate=0.5,
        warmup_steps=100,
        max_val_examples=32,
        section_encoding="paper",
    ),
    # Cohan et al. §5 (with See et al.'s hyperparameters): cell 256,
    # embeddings 128, 4 sections × 500 tokens, 50k vocabulary, batch 16,
    # Adagrad 0.15 (Keras' Adagrad starts its accumulator at 0.1, as theirs),
    # gradient-norm clipping 2 (See et al.), summaries up to 210 tokens,
    # about 10 epochs with coverage in the last two. An epoch here is one
    # pass over scisummnet's 596 training papers (37 steps of 16).
    "paper": Config(
        vocabulary_size=50000,
        batch_size=16,
        epochs=10,
        steps_per_epoch=37,
        coverage_start_epoch=8,
        section_encoding="paper",
    ),
}


# How `keras-hsum export --preset paper` decodes (see docs/serving.md).
# Cohan et al., Experiments, Implementation details: "We used beam search at
# decoding time with beam size of 4." (no length penalty or blocking given).
DECODING = {
    "paper": {"beam_size": 4},
}


def build_model(config, vocabulary_size):
    return DiscourseSummarizer(**model_arguments(
        DiscourseSummarizer, config, vocabulary_size=vocabulary_size,
        name="discourse_summarizer",
    ))


def features(config, *, training):
    """The "sections" family, P = `max_sections`, T = `max_section_length`,
    and `oov_words` = `num_oov` when above 0 (absent at 0: the structure of
    the runs trained before the option)."""
    del training
    return text_features(
        "sections",
        max_units=config.max_sections,
        max_tokens=config.max_section_length,
        max_target_length=config.max_target_length,
        family_options={"oov_words": config.num_oov} if config.num_oov else {},
    )


def loss(config):
    """NLL of the pointer-generator's final distribution (log-probabilities)."""
    return LabelSmoothedCrossEntropy(config.label_smoothing)


class CoveragePhase(keras.callbacks.Callback):
    """Switches coverage on for the final epochs (Cohan et al. §5).

    At the start of every epoch sets the model's coverage weight λ to 0
    before `start_epoch` and to `weight` from `start_epoch` on (0-based;
    resumed trainings get the right phase too).

    Args:
        start_epoch: first epoch with coverage (None: never).
        weight: λ during the coverage phase.
    """

    def __init__(self, start_epoch, weight=1.0):
        super().__init__()
        self.start_epoch = start_epoch
        self.weight = weight

    def on_epoch_begin(self, epoch, logs=None):
        if not hasattr(self.model, "set_coverage_weight"):
            raise ValueError(
                "CoveragePhase needs a model with `set_coverage_weight` (a "
                f"DiscourseSummarizer), received {type(self.model).__name__}."
            )
        on = self.start_epoch is not None and epoch >= self.start_epoch
        self.model.set_coverage_weight(self.weight if on else 0.0)


def callbacks(config):
    """The coverage phase switch (when the model has coverage)."""
    if not config.use_coverage or config.coverage_start_epoch is None:
        return []
    return [CoveragePhase(config.coverage_start_epoch, config.coverage_loss_weight)]


RECIPE = Recipe(
    name="discourse",
    config_class=Config,
    configs=CONFIGS,
    build_model=build_model,
    features=features,
    decoding=DECODING,
    loss=loss,
    callbacks=callbacks,
)
make_dataset = RECIPE.make_dataset
structure_options = RECIPE.structure_options
