"""Recipe models built from keras_hsum.layers (backend-agnostic).

Every abstractive model is a `Summarizer`: `call` is teacher-forced training;
decoding uses `encode` / `initial_cache` / `step` (see
`keras_hsum.models.summarizer`).

| model | paper |
|---|---|
| `FlatTransformer` | FT / Trunc baseline |
| `BackboneSummarizer` | a pretrained keras-hub BART or T5 backbone (Lewis et al. 2020; Raffel et al. 2020) |
| `HierarchicalBackboneSummarizer` | HT global layers / PHT parallel cross attention on a pretrained backbone |
| `HierarchicalTransformer`, `ParagraphRanker` | Liu & Lapata 2019 (HT) |
| `ParallelHierarchicalTransformer`, `AttentionPredictor` | Ma & Zong (PHT) |
| `ExtractiveAbstractive`, `SEAL`, `CompressiveAbstractive` | Zhao, Saleh & Liu (SEAL) |
| `DiscourseSummarizer` | Cohan et al. 2018 |
| `SHTE` | González et al. 2020 |
| `SummarizerEnsemble` | decodes several summarizers as one (ensemble decoding) |
"""

from keras_hsum.models.attention_predictor import AttentionPredictor
from keras_hsum.models.attention_predictor import ParagraphAttentionMSE
from keras_hsum.models.attention_predictor import attention_labels
from keras_hsum.models.backbone_summarizer import BackboneSummarizer
from keras_hsum.models.compressive_abstractive import CompressiveAbstractive
from keras_hsum.models.discourse_summarizer import DiscourseSummarizer
from keras_hsum.models.ensemble import SummarizerEnsemble
from keras_hsum.models.flat_transformer import FlatTransformer
from keras_hsum.models.hierarchical_backbone_summarizer import HierarchicalBackboneSummarizer
from keras_hsum.models.hierarchical_transformer import HierarchicalTransformer
from keras_hsum.models.losses import LabelSmoothedCrossEntropy
from keras_hsum.models.paragraph_ranker import ParagraphBinaryCrossEntropy
from keras_hsum.models.paragraph_ranker import ParagraphRanker
from keras_hsum.models.paragraph_ranker import rerank_paragraphs
from keras_hsum.models.paragraph_ranker import take_paragraphs
from keras_hsum.models.parallel_hierarchical_transformer import (
    ParallelHierarchicalTransformer,
)
from keras_hsum.models.seal import SEAL
from keras_hsum.models.seal import ExtractiveAbstractive
from keras_hsum.models.shte import SHTE
from keras_hsum.models.summarizer import Summarizer
from keras_hsum.models.transformer_summary_decoder import TransformerSummaryDecoder

__all__ = [
    "AttentionPredictor",
    "BackboneSummarizer",
    "CompressiveAbstractive",
    "DiscourseSummarizer",
    "ExtractiveAbstractive",
    "FlatTransformer",
    "HierarchicalBackboneSummarizer",
    "HierarchicalTransformer",
    "LabelSmoothedCrossEntropy",
    "ParagraphAttentionMSE",
    "ParagraphBinaryCrossEntropy",
    "ParagraphRanker",
    "ParallelHierarchicalTransformer",
    "SEAL",
    "SHTE",
    "Summarizer",
    "SummarizerEnsemble",
    "TransformerSummaryDecoder",
    "attention_labels",
    "rerank_paragraphs",
    "take_paragraphs",
]
