"""FT / Trunc: the flat Transformer baseline (Liu & Lapata 2019 §4; SEAL's Trunc).

The documents are concatenated in tf-idf rank order and truncated to
`max_source_length` tokens.
"""

import dataclasses

from keras_hsum.models import FlatTransformer
from keras_hsum.recipes.base import BackboneOptions
from keras_hsum.recipes.base import Recipe
from keras_hsum.recipes.base import RecipeConfig
from keras_hsum.recipes.base import backbone_model
from keras_hsum.recipes.base import model_arguments
from keras_hsum.recipes.base import text_features

DEFAULT_DATASET = "qmsum_goldspan"


@dataclasses.dataclass(frozen=True)
class Config(BackboneOptions, RecipeConfig):
    """FlatTransformer sizes (see `recipes.base.RecipeConfig` for the rest, and
    `recipes.base.BackboneOptions` for `backbone`, a pretrained start).

    Attributes:
        pointer_generator: add the copy mechanism over the source tokens
            (`keras_hsum.models.copying`).
        token_shift: add each source token's predecessor to its embedding
            (`keras_hsum.layers.TokenShift`), so copying can follow a span.
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
    num_decoder_layers: int = 6
    dropout: float = 0.1
    attention_dropout: float | None = None
    max_source_length: int = 800
    max_target_length: int = 100
    pointer_generator: bool = False
    token_shift: bool = False

    def __post_init__(self):
        self.check_backbone()


CONFIGS = {
    "tiny": Config(
        vocabulary_size=4000,
        hidden_dim=64,
        num_heads=4,
        intermediate_dim=128,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dropout=0.1,
        max_source_length=400,
        max_target_length=64,
        batch_size=8,
        epochs=6,
        steps_per_epoch=50,
        validation_steps=4,
        learning_rate=1.0,
        warmup_steps=200,
        max_val_examples=32,
    ),
    # Liu & Lapata's FT: 6+6 layers of width 256 (they report 800 input
    # tokens for T-DMCA/FT comparisons; PHT's FT reads 3,000).
    "paper": Config(
        vocabulary_size=32000,
        max_source_length=3000,
        max_target_length=200,
        batch_size=16,
        epochs=20,
        steps_per_epoch=5000,
        warmup_steps=8000,
    ),
}


def build_model(config, vocabulary_size):
    if config.backbone:
        model = backbone_model(config, vocabulary_size, "flat_transformer")
        model.check_source_length(config.max_source_length)
        return model
    return FlatTransformer(**model_arguments(
        FlatTransformer, config, vocabulary_size=vocabulary_size, name="flat_transformer"
    ))


def features(config, *, training):
    """The "flat" family with `TextStructurer`'s defaults (tf-idf ranking),
    N = `max_source_length`."""
    del training  # the same input in training and evaluation
    return text_features(
        "flat",
        max_tokens=config.max_source_length,
        max_target_length=config.max_target_length,
    )


RECIPE = Recipe(
    name="flat",
    config_class=Config,
    configs=CONFIGS,
    build_model=build_model,
    features=features,
)
make_dataset = RECIPE.make_dataset
structure_options = RECIPE.structure_options
