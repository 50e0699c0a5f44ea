"""In-graph decoding for keras_hsum summarizers (backend-agnostic keras.ops).

`beam_search(model, inputs, ...)` and `greedy_search(model, inputs, ...)`
drive a `Summarizer`'s `encode` / `initial_cache` / `step` contract
(`keras_hsum.models.summarizer`) inside one `ops.while_loop`; `search(...)`
runs the same loop over any plain step function; `sample_search` (or
`search(..., sampling=Sampling(...))`) draws K independent samples instead
of a beam; `mbr_rerank` reorders hypotheses or samples by minimum Bayes
risk (expected ROUGE against the others). Score terms
(`keras_hsum.decoding.terms`) compose as a list. `compress_paragraphs` is
PHT's paragraph compression (§7). `ReinforceObjective` trains a
`Summarizer` on the ROUGE of its own in-graph samples (REINFORCE);
`SearchOptions` is a whole decoding policy (search, terms, MBR) as one
value, the one exported models run.
"""

from keras_hsum.decoding.beam_search import beam_search
from keras_hsum.decoding.beam_search import greedy_search
from keras_hsum.decoding.beam_search import sample_search
from keras_hsum.decoding.beam_search import search
from keras_hsum.decoding.mbr import expected_utility
from keras_hsum.decoding.mbr import mbr_rerank
from keras_hsum.decoding.mbr import pairwise_rouge_n
from keras_hsum.decoding.paragraph_compression import compress_paragraphs
from keras_hsum.decoding.reinforce import ReinforceObjective
from keras_hsum.decoding.sampling import Sampling
from keras_hsum.decoding.search_options import SearchOptions
from keras_hsum.decoding.terms import AttentionAlignment
from keras_hsum.decoding.terms import CoveragePenalty
from keras_hsum.decoding.terms import ExtractiveAlignment
from keras_hsum.decoding.terms import LengthNormalization
from keras_hsum.decoding.terms import MaxLength
from keras_hsum.decoding.terms import MinLength
from keras_hsum.decoding.terms import NgramBlocking
from keras_hsum.decoding.terms import RecentTokenBlocking
from keras_hsum.decoding.terms import ScoreTerm
from keras_hsum.decoding.terms import StructuralCoverage
from keras_hsum.decoding.terms import TokenBlocking

__all__ = [
    "AttentionAlignment",
    "CoveragePenalty",
    "ExtractiveAlignment",
    "LengthNormalization",
    "MaxLength",
    "MinLength",
    "NgramBlocking",
    "RecentTokenBlocking",
    "ReinforceObjective",
    "Sampling",
    "ScoreTerm",
    "SearchOptions",
    "StructuralCoverage",
    "TokenBlocking",
    "beam_search",
    "compress_paragraphs",
    "expected_utility",
    "greedy_search",
    "mbr_rerank",
    "pairwise_rouge_n",
    "sample_search",
    "search",
]
