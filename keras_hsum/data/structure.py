"""Structuring's shared vocabulary: errors, reports, option checks.

Raw text becomes model features in one place, the graph
`keras_hsum.data.structurer.TextStructurer` (training maps it over the
corpus in `keras_hsum.data.make_dataset`; a SavedModel runs it at serving
time). This module holds what the rest of the library says about
structuring: the errors that skip an example, `TruncationReport` (what
structuring left out), `Structured` (one example as the extras see it) and
the checks of the family options.

Common features of a family with rows (P is the number of rows present, at
most `max_units`; batching pads P):
- `tokens` int32 [P, T], padded with `vocabulary.pad_id`;
- `token_mask` bool [P, T], True on real tokens;
- `paragraph_mask` bool [P], True on real rows;
- `document_ids` int32 [P], the input document each row comes from.

A sentence longer than a row (T tokens) is split at token boundaries
("forced split"); no token is lost by it, and it is counted.
"""

import dataclasses

from keras_hsum.checks import check_int


class EmptyInputError(ValueError):
    """An example whose documents hold no token at all."""


class EmptySummaryError(ValueError):
    """A training example without a reference summary."""


@dataclasses.dataclass
class TruncationReport:
    """What structuring kept and left out (sums over examples when merged).

    Attributes:
        examples: examples structured.
        input_tokens: source tokens after tokenisation.
        output_tokens: source tokens present in the output rows.
        dropped_tokens: source tokens absent from the output.
        dropped_units: whole rows (paragraphs, sections, snippets,
            sentences) left out because more than P existed.
        truncated_units: rows cut at T tokens.
        forced_splits: sentences longer than T split at token boundaries.
        target_tokens: summary tokens (without BOS/EOS).
        target_dropped_tokens: summary tokens cut by the target length S.
        truncated_targets: targets that were cut.
    """

    examples: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    dropped_tokens: int = 0
    dropped_units: int = 0
    truncated_units: int = 0
    forced_splits: int = 0
    target_tokens: int = 0
    target_dropped_tokens: int = 0
    truncated_targets: int = 0

    def merge(self, other):
        """Adds `other`'s counts into this report; returns self."""
        for field in dataclasses.fields(self):
            setattr(
                self,
                field.name,
                getattr(self, field.name) + getattr(other, field.name),
            )
        return self

    def as_dict(self):
        return dataclasses.asdict(self)

    def __str__(self):
        kept = self.output_tokens / max(self.input_tokens, 1)
        return (
            f"{self.examples} examples: kept {self.output_tokens:,} of "
            f"{self.input_tokens:,} source tokens ({kept:.1%}); "
            f"{self.dropped_units:,} rows over the row limit, "
            f"{self.truncated_units:,} rows truncated, "
            f"{self.forced_splits:,} over-long sentences split; "
            f"{self.target_dropped_tokens:,} of {self.target_tokens:,} "
            f"summary tokens cut in {self.truncated_targets:,} targets."
        )


@dataclasses.dataclass
class Structured:
    """One structured example.

    Attributes:
        features: dict of numpy arrays (see the module docstring).
        texts: the text of every row, in row order.
        report: a `TruncationReport` for this example.
    """

    features: dict
    texts: list
    report: TruncationReport


def context_text(example):
    """The text paragraphs are ranked against: the query, else the title."""
    return example.query or example.title or ""


def _check_rank(rank):
    if rank not in ("tfidf", "order", "learned"):
        raise ValueError(
            f"`rank` must be 'tfidf' or 'order', or 'learned' (the 'paragraphs' "
            f"family, with `ranker_run`); received {rank!r}."
        )


def _check_pack(pack):
    if pack not in ("paragraph", "section"):
        raise ValueError(
            f"`pack` must be 'paragraph' or 'section', received {pack!r}."
        )


def _check_context_length(context_length):
    check_int("context_length", context_length, 0)


_OPTION_CHECKS = {"rank": _check_rank, "pack": _check_pack,
                  "context_length": _check_context_length}


def check_options(options):
    """Raises the ValueError a builder would raise for a bad option value
    (`rank`, `pack`, `context_length`), before any example is read: a
    pipeline then fails at once instead of counting every example as an
    error."""
    for name, value in options.items():
        if name in _OPTION_CHECKS:
            _OPTION_CHECKS[name](value)
