"""PHT: Ma & Zong's Parallel Hierarchical Transformer (the project's flagship).

Ranked paragraphs ("paragraphs" family, tf-idf to the query/title, best
first) → word-level Transformer encoder per paragraph → multi-head pooling
→ paragraph embeddings + ranking encoding → PHT decoder with parallel
word/paragraph cross attention. The attention predictor for attention
alignment is trained afterwards by `recipes.pht_predictor`.
"""

import dataclasses

from keras_hsum.models.parallel_hierarchical_transformer import (
    ParallelHierarchicalTransformer,
)
from keras_hsum.recipes.base import BackboneOptions
from keras_hsum.recipes.base import Recipe
from keras_hsum.recipes.base import RecipeConfig
from keras_hsum.recipes.base import backbone_model
from keras_hsum.recipes.base import check_ranking
from keras_hsum.recipes.base import model_arguments
from keras_hsum.recipes.base import ranking_options
from keras_hsum.recipes.base import text_features

DEFAULT_DATASET = "qmsum_goldspan"


@dataclasses.dataclass(frozen=True)
class Config(BackboneOptions, RecipeConfig):
    """PHT sizes and input shape (see `recipes.base.RecipeConfig` for the rest, and
    `recipes.base.BackboneOptions` for `backbone`, a pretrained start).

    Attributes:
        hidden_dim, num_heads, intermediate_dim: D, H, FFN width.
        num_encoder_layers, num_decoder_layers: word-level encoder and PHT
            decoder depths (paper: 3 + 3).
        num_paragraph_layers: optional paragraph-level encoder layers over
            Φ (not in the paper: 0).
        dropout: dropout rate (paper: 0.3).
        max_paragraphs: P, ranked paragraphs kept (paper: 30).
        max_paragraph_tokens: T, tokens per paragraph (paper: 100).
        max_target_length: S, summary tokens incl. BOS/EOS (paper decodes
            up to 200).
        rank: paragraph ranking, "tfidf" (to the query/title), "order" or
            "learned" (the `ParagraphRanker` of the `ranker` run
            `ranker_run`; see `recipes.ht.Config`).
        ranker_run: with rank="learned", the `ranker` run folder.
        pack: "paragraph" (re-chunk each source paragraph) or "section"
            (also pack consecutive short paragraphs, e.g. meeting turns).
        pointer_generator: add the copy mechanism (not in the paper; see
            `ParallelHierarchicalTransformer`).
        token_shift: add each source token's predecessor to its embedding
            (`keras_hsum.layers.TokenShift`; not in the paper), so copying
            can follow a span.
        attention_dropout: dropout on the attention probabilities (a
            recipe option, not the paper's); None uses `dropout`, as the
            paper configs do; 0 lets Keras take fused (cuDNN flash)
            attention on a GPU (docs/recipes.md, "Attention dropout").
    """

    dataset: str = DEFAULT_DATASET
    hidden_dim: int = 256
    num_heads: int = 4
    intermediate_dim: int = 1024
    num_encoder_layers: int = 3
    num_decoder_layers: int = 3
    num_paragraph_layers: int = 0
    dropout: float = 0.3
    attention_dropout: float | None = None
    max_paragraphs: int = 30
    max_paragraph_tokens: int = 100
    max_target_length: int = 200
    rank: str = "tfidf"
    ranker_run: str | None = None
    pack: str = "section"
    pointer_generator: bool = False
    token_shift: bool = False

    def __post_init__(self):
        self.check_backbone()
        check_ranking(self)


CONFIGS = {
    # A few CPU minutes on the bundled qmsum_goldspan sample.
    "tiny": Config(
        vocabulary_size=4000,
        hidden_dim=64,
        num_heads=4,
        intermediate_dim=128,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dropout=0.1,
        max_paragraphs=12,
        max_paragraph_tokens=48,
        max_target_length=64,
        batch_size=8,
        epochs=6,
        steps_per_epoch=50,
        validation_steps=4,
        learning_rate=1.0,
        warmup_steps=200,
        max_val_examples=32,
    ),
    # Ma & Zong §5.2: 3+3 layers, width 256, FFN 1024, 4 heads, dropout 0.3,
    # 30 paragraphs × 100 tokens, Adam with 16,000 warm-up steps, 32k
    # subwords; summaries decoded up to 200 tokens.
    "paper": Config(
        vocabulary_size=32000,
        batch_size=16,
        epochs=30,
        steps_per_epoch=20000,
        warmup_steps=16000,
    ),
}


# How `keras-hsum export --preset paper` decodes (see docs/serving.md).
# Ma & Zong §5.2: "We set the beam size to 5 ... we disallow the repetition
# of trigrams, at the same time block two tokens (except commas) before the
# current step"; Eq. 17 divides by |y| (no GNMT α); §5.3: β "approximately
# 0.8 for the Wikisum dataset" (applied only with --predictor-run).
DECODING = {
    "paper": {
        "beam_size": 5,
        "length_alpha": None,
        "block_ngrams": 3,
        "block_recent": 2,
        "recent_exceptions": (",",),
        "alignment_beta": 0.8,
    },
}


def build_model(config, vocabulary_size):
    if config.backbone:
        return backbone_model(
            config,
            vocabulary_size,
            "parallel_hierarchical_transformer",
            parallel_cross_attention=True,
            num_paragraph_layers=config.num_paragraph_layers,
        )
    return ParallelHierarchicalTransformer(**model_arguments(
        ParallelHierarchicalTransformer,
        config,
        vocabulary_size=vocabulary_size,
        name="parallel_hierarchical_transformer",
    ))


def features(config, *, training):
    """The "paragraphs" family with the config's `rank` (and `ranker_run`)
    and `pack`, P = `max_paragraphs`, T = `max_paragraph_tokens`, in
    training and serving alike; shared with `recipes.pht_predictor`."""
    del training
    return text_features(
        "paragraphs",
        max_units=config.max_paragraphs,
        max_tokens=config.max_paragraph_tokens,
        max_target_length=config.max_target_length,
        family_options={**ranking_options(config), "pack": config.pack},
    )


RECIPE = Recipe(
    name="pht",
    config_class=Config,
    configs=CONFIGS,
    build_model=build_model,
    features=features,
    decoding=DECODING,
)
make_dataset = RECIPE.make_dataset
structure_options = RECIPE.structure_options
