"""CA: SEAL paper's compressive-abstractive model (Zhao, Saleh & Liu 2020, §3.2).

Groups of k consecutive snippets are compressed by the encoder into c
learnable vectors each; the decoder attends to all compressed vectors.
With `max_documents` set, groups never straddle two input documents.
Trained with L_abs only, so batches carry no proxy labels.
"""

import dataclasses

from keras_hsum.models.compressive_abstractive import CompressiveAbstractive
from keras_hsum.recipes.base import Recipe
from keras_hsum.recipes.base import RecipeConfig
from keras_hsum.recipes.base import model_arguments
from keras_hsum.recipes.extractive_abstractive import PAPER_SIZES
from keras_hsum.recipes.extractive_abstractive import TINY_SIZES
from keras_hsum.recipes.extractive_abstractive import snippet_features

DEFAULT_DATASET = "qmsum_general"

_SHARED = ("extract_length", "num_scorer_layers")


@dataclasses.dataclass(frozen=True)
class Config(RecipeConfig):
    """CA sizes (see `recipes.base.RecipeConfig` for the rest).

    Attributes:
        snippet_length: L_snpt (T).
        max_snippets: N_snpt (P).
        snippets_per_group: k, snippets compressed together.
        compressed_length: c, compressed vectors per group.
        max_target_length: target length with BOS and EOS.
        max_documents: None (groups of k consecutive snippets, whatever
            their document) or the number of documents whose snippets are
            grouped apart (`CompressiveAbstractive`'s `max_documents`).
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
    snippet_length: int = 64
    max_snippets: int = 64
    snippets_per_group: int = 8
    compressed_length: int = 64
    max_target_length: int = 129
    max_documents: int | None = None


def _sizes(sizes, **changes):
    sizes = {k: v for k, v in sizes.items() if k not in _SHARED}
    sizes.update(changes)
    return sizes


CONFIGS = {
    # 16 snippets of 32 tokens in groups of 4 → 4 groups × 16 vectors = 64.
    "tiny": Config(**_sizes(TINY_SIZES, snippets_per_group=4, compressed_length=16)),
    # The paper does not give k and c in the extracted text; groups of 8
    # snippets of 64 tokens compressed 8× (64 vectors per group, so 256
    # snippets → 2,048 memory vectors, the EA/SEAL L_ext).
    "paper": Config(
        **_sizes(PAPER_SIZES, snippets_per_group=8, compressed_length=64)
    ),
}


# How `keras-hsum export --preset paper` decodes: greedy, as SEAL decodes
# every model of its paper (see `recipes.seal.DECODING`).
DECODING = {
    "paper": {"beam_size": 1},
}


def build_model(config, vocabulary_size):
    return CompressiveAbstractive(**model_arguments(
        CompressiveAbstractive, config, vocabulary_size=vocabulary_size,
        name="compressive_abstractive",
    ))


# EA's snippets; trained with L_abs only, so no labels.
RECIPE = Recipe(
    name="compressive_abstractive",
    config_class=Config,
    configs=CONFIGS,
    build_model=build_model,
    features=snippet_features,
    decoding=DECODING,
)
make_dataset = RECIPE.make_dataset
structure_options = RECIPE.structure_options
