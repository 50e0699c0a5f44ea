"""`SearchOptions`: a whole decoding policy as one frozen value.

The search (beam, greedy or sampling), its score terms and MBR reranking,
with their settings checked once; `options(model, inputs)` decodes a batch.
Exported models run one (`keras_hsum.export.SummarizerModule`, `keras-hsum
export`), and it is backend-agnostic like the rest of `keras_hsum.decoding`.
"""

import dataclasses

from keras import ops

from keras_hsum.checks import check_int
from keras_hsum.decoding.beam_search import beam_search
from keras_hsum.decoding.beam_search import greedy_search
from keras_hsum.decoding.beam_search import sample_search
from keras_hsum.decoding.mbr import mbr_rerank
from keras_hsum.decoding.sampling import Sampling
from keras_hsum.decoding.terms import AttentionAlignment
from keras_hsum.decoding.terms import ExtractiveAlignment
from keras_hsum.decoding.terms import LengthNormalization
from keras_hsum.decoding.terms import NgramBlocking
from keras_hsum.decoding.terms import RecentTokenBlocking
from keras_hsum.decoding.terms import TokenBlocking
from keras_hsum.features import PARAGRAPH_MASK
from keras_hsum.features import PREDICTED_ATTENTION
from keras_hsum.features import RANK_SCORE


@dataclasses.dataclass(frozen=True)
class SearchOptions:
    """How a `SummarizerModule` decodes: `keras_hsum.decoding.beam_search`
    with these score terms (called as `options(model, inputs)`).

    Attributes:
        beam_size: K (1: `greedy_search`).
        max_length: L, the most generated tokens (EOS included).
        min_length: no EOS before this position.
        length_normalization: divide log P(y|x) by a length penalty
            (`LengthNormalization(length_alpha)`).
        length_alpha: None (|y|, PHT's Eq. 17) or GNMT's α.
        block_ngrams: n of `NgramBlocking` (0: off; PHT blocks trigrams).
        block_recent: window of `RecentTokenBlocking` (0: off; PHT: 2).
        recent_exceptions: ids that may repeat anyway (e.g. the comma).
        blocked_ids: ids never generated (`TokenBlocking`; `keras-hsum
            export` blocks the vocabulary's unknown piece).
        alignment_beta: β of PHT's `AttentionAlignment`, used when the
            inputs carry `predicted_attention` η̂ [B,P] (an exported
            `AttentionPredictor`); 0 turns it off.
        extractive_beta: β of `ExtractiveAlignment` (PHT §6's extProb),
            used when the inputs carry the learned ranker's scores
            `rank_score` [B,P] (a structurer with rank="learned"): η̂ is
            those scores normalised over the real paragraphs. 0: off.
        mbr: return the finished hypothesis of highest expected ROUGE-1/2
            against the other K - 1 (`keras_hsum.decoding.mbr_rerank`)
            instead of the one of highest score.
        sampling: None (beam search), or a `keras_hsum.decoding.Sampling`
            (or the dict of its fields): draw `beam_size` independent
            samples (`keras_hsum.decoding.sample_search`) instead; with
            `mbr`, sampling-based MBR.
    """

    beam_size: int = 5
    max_length: int = 100
    min_length: int = 0
    length_normalization: bool = True
    length_alpha: float | None = None
    block_ngrams: int = 0
    block_recent: int = 0
    recent_exceptions: tuple = ()
    blocked_ids: tuple = ()
    alignment_beta: float = 0.8
    extractive_beta: float = 0.0
    mbr: bool = False
    sampling: object = None

    def __post_init__(self):
        for name, least in (("beam_size", 1), ("max_length", 1), ("min_length", 0),
                            ("block_ngrams", 0), ("block_recent", 0)):
            value = check_int(name, getattr(self, name), least, owner="SearchOptions")
            object.__setattr__(self, name, value)  # a numpy int as a Python int
        if self.min_length > self.max_length:
            raise ValueError(
                f"SearchOptions: `min_length` ({self.min_length}) must not exceed "
                f"`max_length` ({self.max_length}): no summary could end."
            )
        if self.mbr and self.beam_size < 2:
            raise ValueError(
                f"MBR reranking chooses among the beam's hypotheses (or the "
                f"samples) and needs a beam of at least 2; received "
                f"beam_size={self.beam_size}."
            )
        if isinstance(self.sampling, dict):  # e.g. read back from to_dict()
            object.__setattr__(self, "sampling", Sampling(**self.sampling))

    def terms(self, inputs):
        """The score terms for one batch (η̂ comes from `inputs`)."""
        terms = []
        if self.length_normalization:
            terms.append(LengthNormalization(self.length_alpha))
        if self.block_ngrams:
            terms.append(NgramBlocking(self.block_ngrams))
        if self.block_recent:
            terms.append(
                RecentTokenBlocking(self.block_recent, self.recent_exceptions)
            )
        if self.blocked_ids:
            terms.append(TokenBlocking(self.blocked_ids))
        mask = inputs.get(PARAGRAPH_MASK)
        mask = None if mask is None else ops.cast(mask, "bool")
        # PHT §6's alignment with the predictor's attention, and with the
        # learned ranker's normalised scores (extProb).
        for term, beta, target in (
            (AttentionAlignment, self.alignment_beta, inputs.get(PREDICTED_ATTENTION)),
            (ExtractiveAlignment, self.extractive_beta, inputs.get(RANK_SCORE)),
        ):
            if beta and target is not None:
                terms.append(term(target, beta=beta, paragraph_mask=mask))
        return terms

    def __call__(self, model, inputs):
        terms = self.terms(inputs)
        if self.sampling is not None:
            result = sample_search(
                model, inputs, num_samples=self.beam_size, max_length=self.max_length,
                terms=terms, min_length=self.min_length, **dataclasses.asdict(self.sampling),
                rows_alike=True,  # a request's summary does not depend on its batch
            )
        elif self.beam_size == 1:
            return greedy_search(
                model, inputs, max_length=self.max_length, terms=terms,
                min_length=self.min_length,
            )
        else:
            result = beam_search(
                model, inputs, beam_size=self.beam_size, max_length=self.max_length,
                terms=terms, min_length=self.min_length,
            )
        if self.mbr:
            result = mbr_rerank(result, eos_id=model.eos_id, pad_id=model.pad_id)
        return result

    def to_dict(self):
        return dataclasses.asdict(self)
