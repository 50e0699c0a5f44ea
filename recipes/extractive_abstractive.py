"""EA: SEAL paper's extractive-abstractive model (Zhao, Saleh & Liu 2020, §3.3).

Snippets (sentences packed to L_snpt tokens, the first N_snpt kept) are
encoded separately, scored, and the best ones within L_ext tokens are the
decoder's memory. Batches carry SEAL's proxy labels (`proxy_labels` [B,P],
ROUGE F1 of every snippet vs the summary) so that `model.fit` minimises
L_abs + L_ext (the model adds L_ext itself). The dataset helpers are shared
with `recipes.seal`.
"""

import dataclasses

from keras_hsum.models.seal import ExtractiveAbstractive
from keras_hsum.recipes.base import RecipeConfig
from keras_hsum.recipes.seal import PAPER_SIZES
from keras_hsum.recipes.seal import TINY_SIZES
from keras_hsum.recipes.seal import snippet_dataset

DEFAULT_DATASET = "qmsum_general"


@dataclasses.dataclass(frozen=True)
class Config(RecipeConfig):
    """EA sizes (see `recipes.base.RecipeConfig` for the rest).

    Attributes:
        snippet_length: L_snpt (T).
        max_snippets: N_snpt (P).
        extract_length: L_ext.
        max_target_length: target length with BOS and EOS (L_dec + 1).
        extractive_loss_weight: the weight of L_ext.
        max_documents: document-embedding table of the scorer (None: off).
    """

    dataset: str = DEFAULT_DATASET
    hidden_dim: int = 256
    num_heads: int = 8
    intermediate_dim: int = 1024
    num_encoder_layers: int = 6
    num_scorer_layers: int = 2
    num_decoder_layers: int = 6
    dropout: float = 0.1
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
    return ExtractiveAbstractive(
        vocabulary_size=vocabulary_size,
        hidden_dim=config.hidden_dim,
        num_heads=config.num_heads,
        intermediate_dim=config.intermediate_dim,
        num_encoder_layers=config.num_encoder_layers,
        num_scorer_layers=config.num_scorer_layers,
        num_decoder_layers=config.num_decoder_layers,
        extract_length=config.extract_length,
        max_documents=config.max_documents,
        extractive_loss_weight=config.extractive_loss_weight,
        dropout=config.dropout,
        name="extractive_abstractive",
    )


def make_dataset(
    config, source, vocabulary, *, training, seed=0, cache=None, max_examples=None
):
    """(inputs with `proxy_labels` [B,P], labels [B,S], sample_weight [B,S])."""
    return snippet_dataset(
        config,
        source,
        vocabulary,
        training=training,
        seed=seed,
        cache=cache,
        max_examples=max_examples,
        labels="summary",
    )


def structure_options(config):
    """How export structures raw text for this recipe (`TextStructurer` kwargs).

    Mirrors `snippet_dataset`: the "snippets" family, P = `max_snippets`
    (N_snpt), T = `snippet_length` (L_snpt).
    """
    return dict(
        family="snippets",
        max_units=config.max_snippets,
        max_tokens=config.snippet_length,
    )
