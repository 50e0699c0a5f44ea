"""EA: SEAL paper's extractive-abstractive model (Zhao, Saleh & Liu 2020, §3.3).

Snippets (sentences packed to L_snpt tokens, the first N_snpt kept) are
encoded separately, scored, and the best ones within L_ext tokens are the
decoder's memory. Batches carry SEAL's proxy labels (`proxy_labels` [B,P],
ROUGE F1 of every snippet vs the summary) so that `model.fit` minimises
L_abs + L_ext (the model adds L_ext itself).

EA is the base of the paper's models, as `ExtractiveAbstractive` is the
base class of `SEAL`: this module also holds what the three SEAL-paper
recipes share (the sizes, the config SEAL extends with `segment_length`,
and the snippet features); `recipes.seal` and
`recipes.compressive_abstractive` import them.

Paper sizes. The plain-text extraction of the paper lost every number; the
"paper" configs use the values of its §4.1 and Appendix C for arXiv as we
recall them: Transformer width 1024, FFN 4096, 16 heads, 12 encoder, 2
scorer and 12 decoder layers; L_snpt 64, N_snpt 256 (L_input 16,384), L_ext
2,048, L_dec 512, L_seg 64 (= L_dec / 8, as §4.4 prescribes), batch 256,
dropout 0.1. Check them against the PDF before reporting results. The paper
trains with Adafactor (learning rate 0.01, square-root decay); our recipes
use Adam with the Noam schedule.
"""

import dataclasses

from keras_hsum.models.seal import ExtractiveAbstractive
from keras_hsum.recipes.base import Recipe
from keras_hsum.recipes.base import RecipeConfig
from keras_hsum.recipes.base import model_arguments
from keras_hsum.recipes.base import text_features

DEFAULT_DATASET = "qmsum_general"

# Sizes shared by the SEAL-paper recipes (SEAL adds segment_length).
TINY_SIZES = dict(
    vocabulary_size=4000,
    hidden_dim=64,
    num_heads=4,
    intermediate_dim=128,
    num_encoder_layers=2,
    num_scorer_layers=1,
    num_decoder_layers=2,
    dropout=0.1,
    snippet_length=32,
    max_snippets=16,
    extract_length=128,
    max_target_length=65,
    batch_size=8,
    epochs=6,
    steps_per_epoch=50,
    validation_steps=4,
    learning_rate=1.0,
    warmup_steps=200,
    max_val_examples=32,
)
PAPER_SIZES = dict(
    vocabulary_size=96000,
    hidden_dim=1024,
    num_heads=16,
    intermediate_dim=4096,
    num_encoder_layers=12,
    num_scorer_layers=2,
    num_decoder_layers=12,
    dropout=0.1,
    snippet_length=64,
    max_snippets=256,
    extract_length=2048,
    max_target_length=513,
    batch_size=256,
    epochs=20,
    steps_per_epoch=5000,
    warmup_steps=10000,
)


@dataclasses.dataclass(frozen=True)
class Config(RecipeConfig):
    """EA sizes (see `recipes.base.RecipeConfig` for the rest); SEAL's
    config adds `segment_length`.

    Attributes:
        snippet_length: L_snpt (T).
        max_snippets: N_snpt (P).
        extract_length: L_ext.
        max_target_length: target length with BOS and EOS (L_dec + 1).
        extractive_loss_weight: the weight of L_ext.
        max_documents: document-embedding table of the scorer (None: off).
        attention_dropout: dropout on the attention probabilities (a
            recipe option, not the paper's); None uses `dropout`, as the
            paper configs do; 0 lets Keras take fused (cuDNN flash)
            attention on a GPU (docs/recipes.md, "Attention dropout").
    """

    dataset: str = DEFAULT_DATASET
    hidden_dim: int = 256
    num_heads: int = 8
    intermediate_dim: int = 1024
    num_encoder_layers: int = 6
    num_scorer_layers: int = 2
    num_decoder_layers: int = 6
    dropout: float = 0.1
    attention_dropout: float | None = None
    snippet_length: int = 64
    max_snippets: int = 64
    extract_length: int = 512
    max_target_length: int = 129
    extractive_loss_weight: float = 1.0
    max_documents: int | None = None


CONFIGS = {
    "tiny": Config(**TINY_SIZES),
    "paper": Config(**PAPER_SIZES),
}


# How `keras-hsum export --preset paper` decodes: greedy, as SEAL decodes
# every model of its paper (see `recipes.seal.DECODING`).
DECODING = {
    "paper": {"beam_size": 1},
}


def build_model(config, vocabulary_size):
    return ExtractiveAbstractive(**model_arguments(
        ExtractiveAbstractive, config, vocabulary_size=vocabulary_size,
        name="extractive_abstractive",
    ))


def snippet_features(config, *, training):
    """The "snippets" family of the SEAL-paper recipes, in training and
    serving alike: P = `max_snippets` (N_snpt), T = `snippet_length`
    (L_snpt)."""
    del training
    return text_features(
        "snippets",
        max_units=config.max_snippets,
        max_tokens=config.snippet_length,
        max_target_length=config.max_target_length,
    )


def labels(config, vocabulary):
    """SEAL's proxy labels against the whole summary: `proxy_labels` [P]."""
    del config
    from keras_hsum.data.pipeline import seal_labels

    return [seal_labels(vocabulary=vocabulary)]


RECIPE = Recipe(
    name="extractive_abstractive",
    config_class=Config,
    configs=CONFIGS,
    build_model=build_model,
    features=snippet_features,
    labels=labels,
    decoding=DECODING,
)
make_dataset = RECIPE.make_dataset
structure_options = RECIPE.structure_options
