"""Backend-agnostic Keras 3 layers of the five papers (see DESIGN.md).

Every layer is registered under the `keras_hsum>` package for `.keras`
saving and runs on the TensorFlow and JAX backends.
"""

from keras_hsum.layers.copy_attention import CopyAttention
from keras_hsum.layers.discourse_attention import DiscourseAttention
from keras_hsum.layers.global_transformer_layer import GlobalTransformerLayer
from keras_hsum.layers.hierarchical_encoder import HierarchicalEncoder
from keras_hsum.layers.hierarchical_position_encoding import (
    HierarchicalPositionEncoding,
)
from keras_hsum.layers.inter_paragraph_attention import InterParagraphAttention
from keras_hsum.layers.multi_head_pooling import MultiHeadPooling
from keras_hsum.layers.parallel_cross_attention import ParallelCrossAttention
from keras_hsum.layers.pht_decoder_layer import PHTDecoderLayer
from keras_hsum.layers.pointer_generator import PointerGenerator
from keras_hsum.layers.pointer_generator import coverage_loss
from keras_hsum.layers.residual_gate import ResidualGate
from keras_hsum.layers.siamese_classifier_head import SiameseClassifierHead
from keras_hsum.layers.siamese_classifier_head import sentence_scores
from keras_hsum.layers.snippet_gate import SnippetGate
from keras_hsum.layers.snippet_scorer import SnippetScorer
from keras_hsum.layers.token_shift import TokenShift
from keras_hsum.layers.transformer_decoder import TransformerDecoder
from keras_hsum.layers.transformer_encoder import TransformerEncoder

__all__ = [
    "CopyAttention",
    "DiscourseAttention",
    "GlobalTransformerLayer",
    "HierarchicalEncoder",
    "HierarchicalPositionEncoding",
    "InterParagraphAttention",
    "MultiHeadPooling",
    "ParallelCrossAttention",
    "PHTDecoderLayer",
    "PointerGenerator",
    "ResidualGate",
    "SiameseClassifierHead",
    "SnippetGate",
    "SnippetScorer",
    "TokenShift",
    "TransformerDecoder",
    "TransformerEncoder",
    "coverage_loss",
    "sentence_scores",
]
