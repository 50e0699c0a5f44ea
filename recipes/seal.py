"""SEAL: segment-wise extractive-abstractive summarization (Zhao, Saleh & Liu 2020).

The summary is decoded in segments of L_seg tokens; before each segment the
scorer re-scores the snippets, seeing the previously decoded segments, and
the gate re-selects L_ext tokens of snippets for the decoder. Batches carry
per-segment proxy labels (`segment_labels` [B,M,P], ROUGE F1 of every
snippet vs every L_seg-token summary segment; M = ceil((max_target_length
− 1) / L_seg), fixed so that `pad_to_max` gives static shapes), and
`model.fit` minimises L_abs + L_ext.

SEAL is EA with segments (`SEAL` subclasses `ExtractiveAbstractive`): its
config is EA's plus `segment_length`, its features are EA's snippets
(`recipes.extractive_abstractive`, which also holds the paper sizes and
where they come from); only the labels differ.
"""

import dataclasses
import math

from keras_hsum.models.seal import SEAL
from keras_hsum.recipes import extractive_abstractive
from keras_hsum.recipes.base import Recipe
from keras_hsum.recipes.base import model_arguments
from keras_hsum.recipes.extractive_abstractive import PAPER_SIZES
from keras_hsum.recipes.extractive_abstractive import TINY_SIZES
from keras_hsum.recipes.extractive_abstractive import snippet_features

DEFAULT_DATASET = extractive_abstractive.DEFAULT_DATASET


@dataclasses.dataclass(frozen=True)
class Config(extractive_abstractive.Config):
    """SEAL sizes: EA's (`recipes.extractive_abstractive.Config`, whose
    fields and defaults SEAL shares) and the segment length.

    Attributes:
        segment_length: L_seg, the decoder tokens of one segment.
    """

    segment_length: int = 16


CONFIGS = {
    "tiny": Config(segment_length=16, **TINY_SIZES),
    "paper": Config(segment_length=64, **PAPER_SIZES),
}


# How `keras-hsum export --preset paper` decodes (see docs/serving.md).
# SEAL, Experiments, experimental details, as our extraction reads: "order
# clear comparison models models decoded greedy decoding" (beam 1; EA and
# CA, the same paper's models, declare the same).
DECODING = {
    "paper": {"beam_size": 1},
}


def build_model(config, vocabulary_size):
    return SEAL(**model_arguments(
        SEAL, config, vocabulary_size=vocabulary_size, name="seal"
    ))


def num_segments(config):
    """M = ceil(S / L_seg), S = max_target_length − 1 decoder positions."""
    return math.ceil((config.max_target_length - 1) / config.segment_length)


def labels(config, vocabulary):
    """`proxy_labels` [P] and `segment_labels` [M,P] (M = `num_segments`,
    cut or zero-padded: a static shape for `pad_to_max=True`), computed in
    the tf.data graph on token ids (`seal_labels`' `graph_features`)."""
    from keras_hsum.data.pipeline import seal_labels

    return [seal_labels(
        segment_length=config.segment_length,
        vocabulary=vocabulary,
        num_segments=num_segments(config),
    )]


RECIPE = Recipe(
    name="seal",
    config_class=Config,
    configs=CONFIGS,
    build_model=build_model,
    features=snippet_features,
    labels=labels,
    decoding=DECODING,
)
make_dataset = RECIPE.make_dataset
structure_options = RECIPE.structure_options
