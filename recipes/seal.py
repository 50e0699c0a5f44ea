"""SEAL: segment-wise extractive-abstractive summarization (Zhao, Saleh & Liu 2020).

The summary is decoded in segments of L_seg tokens; before each segment the
scorer re-scores the snippets, seeing the previously decoded segments, and
the gate re-selects L_ext tokens of snippets for the decoder. Batches carry
per-segment proxy labels (`segment_labels` [B,M,P], ROUGE F1 of every
snippet vs every L_seg-token summary segment; M = ceil((max_target_length
− 1) / L_seg), fixed so that `pad_to_max` gives static shapes), and
`model.fit` minimises L_abs + L_ext.

This module also holds what the three SEAL-paper recipes share
(`extractive_abstractive`, `compressive_abstractive`): the sizes and the
snippet dataset.

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
import math

import numpy as np

from keras_hsum.features import PROXY_LABELS
from keras_hsum.features import SEGMENT_LABELS
from keras_hsum.models.seal import SEAL
from keras_hsum.recipes.base import RecipeConfig
from keras_hsum.recipes.base import batches

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
    """SEAL sizes (see `recipes.base.RecipeConfig` for the rest).

    Attributes:
        snippet_length: L_snpt (T).
        max_snippets: N_snpt (P).
        extract_length: L_ext.
        segment_length: L_seg.
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
    segment_length: int = 16
    max_target_length: int = 129
    extractive_loss_weight: float = 1.0
    max_documents: int | None = None


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
    return SEAL(
        vocabulary_size=vocabulary_size,
        segment_length=config.segment_length,
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
        name="seal",
    )


def num_segments(config):
    """M = ceil(S / L_seg), S = max_target_length − 1 decoder positions."""
    return math.ceil((config.max_target_length - 1) / config.segment_length)


def fixed_segment_labels(segment_length, vocabulary, segments):
    """`seal_labels(segment_length, vocabulary)` with `segment_labels` cut
    or zero-padded to exactly `segments` rows ([M,P] per example), so that
    `pad_to_max=True` batches have a static shape."""
    from keras_hsum.data.pipeline import declare_features
    from keras_hsum.data.pipeline import seal_labels

    base = seal_labels(segment_length=segment_length, vocabulary=vocabulary)

    @declare_features(
        proxy_labels=("float32", ("P",)),
        segment_labels=("float32", (segments, "P")),
    )
    def seal_segment_labels(example, structured):
        out = base(example, structured)
        labels = np.asarray(out[SEGMENT_LABELS], np.float32)[:segments]
        fixed = np.zeros((segments, labels.shape[1]), np.float32)
        fixed[: labels.shape[0]] = labels
        return {PROXY_LABELS: out[PROXY_LABELS], SEGMENT_LABELS: fixed}

    return seal_segment_labels


def snippet_dataset(
    config, source, vocabulary, *, training, seed=0, cache=None,
    max_examples=None, labels="segments"
):
    """The "snippets" family batches as `(inputs, labels, sample_weight)`.

    Args:
        labels: "segments" (SEAL: `proxy_labels` and `segment_labels`),
            "summary" (EA: `proxy_labels`) or None (no ROUGE labels).
    """
    from keras_hsum.data import training_pairs
    from keras_hsum.data.pipeline import seal_labels

    if labels == "segments":
        extras = [
            fixed_segment_labels(
                config.segment_length, vocabulary, num_segments(config)
            )
        ]
    elif labels == "summary":
        extras = [seal_labels(vocabulary=vocabulary)]
    elif labels is None:
        extras = None
    else:
        raise ValueError(
            f"`labels` must be 'segments', 'summary' or None, received {labels!r}."
        )
    dataset = batches(
        config,
        source,
        vocabulary,
        "snippets",
        max_units=config.max_snippets,
        max_tokens=config.snippet_length,
        max_target_length=config.max_target_length,
        extras=extras,
        training=training,
        seed=seed,
        cache=cache,
        max_examples=max_examples,
    )
    return training_pairs(dataset, pad_id=vocabulary.pad_id)


def make_dataset(
    config, source, vocabulary, *, training, seed=0, cache=None, max_examples=None
):
    """(inputs with `segment_labels` [B,M,P], labels [B,S], sample_weight)."""
    return snippet_dataset(
        config,
        source,
        vocabulary,
        training=training,
        seed=seed,
        cache=cache,
        max_examples=max_examples,
        labels="segments",
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
