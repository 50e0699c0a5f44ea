"""The features keras_hsum's parts pass to each other, declared once
(backend-free).

`keras_hsum.data` builds each example's features as a dict of arrays; the
models read them, decoding gathers them, shards store them and batching pads
them. Each feature is declared here: its name (a constant below), dtype, the
symbolic axes of one example (no batch axis), the value batching pads it
with, and, for a mask, the feature whose positions it marks.
`family_features(family)` gives the features every structure family
produces; extras (labels, graphs, SHTE's candidate summary) declare theirs
with `keras_hsum.data.pipeline.declare_features`, which makes the same
`Feature`s. The pipeline, the shards' spec, batching and the models' input
checks all read these declarations.

Axes (`AXES`): `"P"` rows of an example (paragraphs, sections, snippets or
sentences; `max_units`), `"T"` tokens per row (`max_tokens`), `"S"` target
tokens (`max_target_length`), `"C"` title/query context tokens (the
paragraphs family's `context_length`), `"N"` tokens of a flat example
(`max_tokens`), an int (a fixed size) or None (any length, padded to the
longest in the batch).

Example:
>>> from keras_hsum import features
>>> spec = features.family_features("paragraphs")[features.PARAGRAPH_MASK]
>>> spec.dtype, spec.axes, spec.mask_of
('bool', ('P',), 'tokens')
"""

import dataclasses

import numpy as np

# Names of the features more than one part of keras_hsum reads.
TOKENS = "tokens"
TOKEN_MASK = "token_mask"
PARAGRAPH_MASK = "paragraph_mask"
DOCUMENT_IDS = "document_ids"
PARAGRAPH_INDEX = "paragraph_index"
RANK_SCORE = "rank_score"
CONTEXT_TOKENS = "context_tokens"
TARGET = "target"
EXAMPLE_ID = "example_id"
RANKER_TARGETS = "ranker_targets"
GRAPH = "graph"
PROXY_LABELS = "proxy_labels"
SEGMENT_LABELS = "segment_labels"
ORACLE_LABELS = "oracle_labels"
SUMMARY_TOKENS = "summary_tokens"
SUMMARY_TOKEN_MASK = "summary_token_mask"
SUMMARY_PARAGRAPH_MASK = "summary_paragraph_mask"
SOURCE_EXTENDED_IDS = "source_extended_ids"
SOURCE_OOV_WORDS = "source_oov_words"
UNIT_TEXTS = "unit_texts"
# Teacher forcing: what `training_pairs` puts in place of `target`.
DECODER_TOKENS = "decoder_tokens"
TARGET_MASK = "target_mask"
# What a decoding step reports (`Summarizer.step`'s aux) and the search
# gathers: the step's paragraph attention [B,P]; SEAL's selection [B,P'].
PARAGRAPH_ATTENTION = "paragraph_attention"
SELECTED_IDS = "selected_ids"
# PHT's predicted paragraph attention η̂ [B,P] (an `AttentionPredictor`).
PREDICTED_ATTENTION = "predicted_attention"
# Serving outputs (the SavedModel signatures' output names; see
# `SUMMARIZER_OUTPUTS` and `EXTRACTOR_OUTPUTS`). `paragraph_attention`,
# `rank_score` and `predicted_attention` are also outputs.
SUMMARY = "summary"
SCORE = "score"
SUMMARY_IDS = "summary_ids"
TOKEN_ATTENTION = "token_attention"
PARAGRAPHS = "paragraphs"
ERROR = "error"
SELECTED_SNIPPET_IDS = "selected_snippet_ids"
SELECTED_SNIPPETS = "selected_snippets"
SENTENCES = "sentences"
SENTENCE_SCORES = "sentence_scores"
INDICES = "indices"
SCORES = "scores"
EXTRACTED = "extracted"

AXES = ("P", "T", "S", "C", "N")
"""The axis symbols of `Feature.axes` (see the module docstring)."""

FAMILIES = ("paragraphs", "sections", "snippets", "sentences", "flat")
"""The structure families (`keras_hsum.data.TextStructurer`)."""

TOKEN_FEATURES = (TOKENS, CONTEXT_TOKENS, TARGET, SUMMARY_TOKENS, SOURCE_EXTENDED_IDS)
"""Token-id features: batching pads them with the vocabulary's pad id."""

PARAGRAPH_FEATURES = (
    TOKENS,
    TOKEN_MASK,
    PARAGRAPH_MASK,
    DOCUMENT_IDS,
    PARAGRAPH_INDEX,
    RANK_SCORE,
    RANKER_TARGETS,
    GRAPH,
)
"""The paragraph-major features of the `paragraphs` family: P is axis 1
(and axis 2 of the [B,P,P] `graph`). Reordering paragraphs
(`keras_hsum.models.take_paragraphs`) or keeping some of them
(`keras_hsum.decoding.compress_paragraphs`) gathers these together."""


def dtype_name(dtype):
    """The name a `Feature` stores for a numpy dtype (or its name):
    `"string"` for text (numpy's object dtype), else numpy's name."""
    if dtype == "string":
        return "string"
    dtype = np.dtype(dtype)
    return "string" if dtype == np.dtype(object) else dtype.name


@dataclasses.dataclass(frozen=True)
class Feature:
    """One feature of one example (no batch axis).

    Attributes:
        dtype: a dtype name: "int32", "bool", "float32", "string", ...
        axes: a tuple of axis symbols (`AXES`), ints and None.
        padding: the value batching pads with; None: the vocabulary's pad
            id for `TOKEN_FEATURES`, else 0 / False / 0.0 / "".
        mask_of: for a boolean mask, the feature whose leading axes it
            covers (`token_mask` all of `tokens`' axes, `paragraph_mask`
            its rows); None otherwise.
    """

    dtype: str
    axes: tuple
    padding: object = None
    mask_of: object = None

    def __post_init__(self):
        object.__setattr__(self, "dtype", dtype_name(self.dtype))
        object.__setattr__(self, "axes", tuple(self.axes))

    @property
    def numpy_dtype(self):
        """The numpy dtype (object for "string")."""
        return np.dtype(object) if self.dtype == "string" else np.dtype(self.dtype)

    def as_dict(self):
        """JSON-able (the shards' spec); `from_dict` reads it back."""
        return {"dtype": self.dtype, "axes": list(self.axes), "padding": self.padding}

    @classmethod
    def from_dict(cls, values):
        return cls(values["dtype"], tuple(values["axes"]), values.get("padding"))


_ROWS = {
    TOKENS: Feature("int32", ("P", "T")),
    TOKEN_MASK: Feature("bool", ("P", "T"), mask_of=TOKENS),
    PARAGRAPH_MASK: Feature("bool", ("P",), mask_of=TOKENS),
    DOCUMENT_IDS: Feature("int32", ("P",)),
}

_FAMILY_FEATURES = {
    "paragraphs": {
        **_ROWS,
        PARAGRAPH_INDEX: Feature("int32", ("P",)),
        RANK_SCORE: Feature("float32", ("P",)),
        CONTEXT_TOKENS: Feature("int32", ("C",)),
    },
    "sections": _ROWS,
    "snippets": _ROWS,
    "sentences": _ROWS,
    "flat": {
        TOKENS: Feature("int32", ("N",)),
        TOKEN_MASK: Feature("bool", ("N",), mask_of=TOKENS),
    },
}

TARGET_FEATURE = Feature("int32", ("S",))
"""`target`: the summary's token ids, [S] (BOS ... EOS, padded)."""

EXAMPLE_ID_FEATURE = Feature("string", ())
"""`example_id`: the example's id, a scalar string."""

TEACHER_FORCING_FEATURES = {
    DECODER_TOKENS: Feature("int32", (None,)),
    TARGET_MASK: Feature("bool", (None,), mask_of=DECODER_TOKENS),
}
"""What `keras_hsum.data.training_pairs` gives a model in place of `target`
[S] (teacher forcing): `decoder_tokens` int32 [S-1] = target[:-1] (BOS
first) and `target_mask` bool [S-1], True where the label target[1:] is a
real token. The labels are target[1:] (int32 [S-1], EOS last) and the
sample weights the mask as 0/1. A model's `call` reads `decoder_tokens`;
its encoder reads the family's features."""

SUMMARY_FEATURES = {
    SUMMARY_TOKENS: Feature("int32", (None, "T")),
    SUMMARY_TOKEN_MASK: Feature("bool", (None, "T"), mask_of=SUMMARY_TOKENS),
    SUMMARY_PARAGRAPH_MASK: Feature("bool", (None,), mask_of=SUMMARY_TOKENS),
}
"""SHTE's candidate summary, structured as a `sentences` example (an extra
of the SHTE recipe, which fixes the row count)."""


SUMMARIZER_OUTPUTS = {
    SUMMARY: Feature("string", ()),
    SCORE: Feature("float32", ()),
    SUMMARY_IDS: Feature("int32", ("L",)),
    SUMMARY_TOKENS: Feature("string", ("L",)),
    TOKEN_ATTENTION: Feature("float32", ("L", "P")),
    PARAGRAPH_ATTENTION: Feature("float32", ("P",)),
    PARAGRAPHS: Feature("string", ("P",)),
    ERROR: Feature("string", ()),
}
"""The outputs of every abstractive SavedModel's signatures
(`keras_hsum.export.serving.SummarizerModule`), per example: L the decoded
length, P the structurer's rows (`max_units`; for the flat family the one
row of the whole input). `summarizer_outputs` adds the optional ones."""

SEAL_OUTPUTS = {
    SELECTED_SNIPPET_IDS: Feature("int32", ("M", "K")),
    SELECTED_SNIPPETS: Feature("string", ("M", "K")),
}
"""SEAL's: the K snippets selected for each of the M decoded segments."""

EXTRACTOR_OUTPUTS = {
    SENTENCES: Feature("string", ("P",)),
    SENTENCE_SCORES: Feature("float32", ("P",)),
    SUMMARY: Feature("string", ()),
    INDICES: Feature("int32", ("K",)),
    SCORES: Feature("float32", ("K",)),
    ERROR: Feature("string", ()),
}
"""SHTE's `serving_default` outputs (`ExtractorModule`): the P sentences and
their scores, the extract of K sentences (indices in document order, -1
padded). Its `extract` signature returns `EXTRACT_OUTPUTS`."""

EXTRACT_OUTPUTS = {
    SUMMARY: Feature("string", ()),
    INDICES: Feature("int32", ("K",)),
    EXTRACTED: Feature("string", ("K",)),
    SCORES: Feature("float32", ("K",)),
    ERROR: Feature("string", ()),
}


def summarizer_outputs(ranked=False, seal=False, predictor=False):
    """`{name: Feature}` of an abstractive SavedModel's outputs.

    Args:
        ranked: its structurer produces `rank_score` (the paragraphs
            family): the rows' ranking scores, float32 [P] (tf-idf cosine
            with the title/query, or the learned ranker's score).
        seal: a SEAL model (`SEAL_OUTPUTS`).
        predictor: exported with a PHT attention predictor:
            `predicted_attention` float32 [P] (η̂).
    """
    outputs = dict(SUMMARIZER_OUTPUTS)
    if ranked:
        outputs[RANK_SCORE] = Feature("float32", ("P",))
    if seal:
        outputs.update(SEAL_OUTPUTS)
    if predictor:
        outputs[PREDICTED_ATTENTION] = Feature("float32", ("P",))
    return outputs


def extended_vocabulary_features(oov_words):
    """The features of the source-vocabulary extension (See et al., 2017),
    which `TextStructurer(..., oov_words=K)` adds to a row family's
    features:

    - `source_extended_ids` int32 [P,T]: `tokens` with the pieces of the
      example's j-th out-of-vocabulary source word (a word with an `<unk>`
      piece, edge punctuation left out) replaced by V + j (V: the
      vocabulary size), the ids a pointer-generator copies;
    - `source_oov_words` string [K]: those words, in order of first
      occurrence in `tokens` (row-major), "" after the last.

    Args:
        oov_words: K >= 1, the extended vocabulary's slots per example.
    """
    return {
        SOURCE_EXTENDED_IDS: Feature("int32", ("P", "T")),
        SOURCE_OOV_WORDS: Feature("string", (int(oov_words),)),
    }


def family_features(family, with_target=False, with_id=False):
    """`{name: Feature}` of every feature a family's structurer produces, in
    a fixed order, then `target` and `example_id` when asked.

    Raises:
        ValueError: for an unknown family.
    """
    if family not in _FAMILY_FEATURES:
        raise ValueError(f"Unknown family {family!r}; expected one of {', '.join(FAMILIES)}.")
    features = dict(_FAMILY_FEATURES[family])
    if with_target:
        features[TARGET] = TARGET_FEATURE
    if with_id:
        features[EXAMPLE_ID] = EXAMPLE_ID_FEATURE
    return features


def masks():
    """`(mask, feature, prefix)` for every declared mask: the mask's shape is
    `feature`'s shape (prefix None) or its first `prefix` axes, the batch
    axis included (`keras_hsum.layers.input_checks` checks it)."""
    out = []
    for group in (*_FAMILY_FEATURES.values(), SUMMARY_FEATURES):
        for name, feature in group.items():
            if feature.mask_of is None:
                continue
            whole = len(feature.axes) == len(group[feature.mask_of].axes)
            entry = (name, feature.mask_of, None if whole else 1 + len(feature.axes))
            if entry not in out:
                out.append(entry)
    return tuple(out)


def axis_sizes(max_units, max_tokens, max_target_length=None, context_length=None):
    """`{axis symbol: size or None}` of a structure's sizes (see `AXES`)."""
    return {
        "P": max_units,
        "T": max_tokens,
        "S": max_target_length,
        "C": context_length,
        "N": max_tokens,
    }


def padded_shape(name, feature, sizes, pad_to_max, missing_size):
    """The shape batching pads one example's `feature` to, as a list (None:
    the longest in the batch).

    Args:
        name: the feature's name (passed to `missing_size`).
        feature: its `Feature`.
        sizes: `{axis symbol: size or None}`; "T" must have a size.
        pad_to_max: True: every symbolic axis to its size in `sizes`.
        missing_size: `missing_size(name, axis)` returns the exception to
            raise when `pad_to_max` needs a size that `sizes` lacks.
    """
    shape = []
    for axis in feature.axes:
        if isinstance(axis, int):
            shape.append(axis)
        elif axis == "T":
            shape.append(sizes["T"])
        elif not pad_to_max:
            shape.append(None)
        elif sizes.get(axis) is None:
            raise missing_size(name, axis)
        else:
            shape.append(sizes[axis])
    return shape


def padding_value(name, feature, pad_id):
    """The Python value batching pads `feature` with (see `Feature.padding`)."""
    if feature.padding is not None:
        return feature.padding
    if name in TOKEN_FEATURES:
        return pad_id
    return {"string": b"", "bool": False}.get(feature.dtype, 0)
