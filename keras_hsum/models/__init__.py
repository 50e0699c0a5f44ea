"""Recipe models built from keras_hsum.layers (backend-agnostic).

Every abstractive model is a `Summarizer`: `call` is teacher-forced training;
decoding uses `encode` / `initial_cache` / `step` (see
`keras_hsum.models.summarizer`).
"""

from keras_hsum.models.flat_transformer import FlatTransformer
from keras_hsum.models.losses import LabelSmoothedCrossEntropy
from keras_hsum.models.summarizer import Summarizer
from keras_hsum.models.transformer_summary_decoder import TransformerSummaryDecoder

__all__ = [
    "FlatTransformer",
    "LabelSmoothedCrossEntropy",
    "Summarizer",
    "TransformerSummaryDecoder",
]
