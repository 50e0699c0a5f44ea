"""What a pipeline read, yielded and skipped: `PipelineReport`.

`make_dataset` and `structured_examples` count into it as they read a
corpus (`keras_hsum.data.raw_examples`), structure it and run the extras;
`keras-hsum preprocess` (`keras_hsum.data.beam_preprocess`) sums one per
piece of the corpus.
"""

import dataclasses

from keras_hsum.data import structure


@dataclasses.dataclass
class PipelineReport:
    """What a pipeline read, yielded and skipped, and why.

    Counts accumulate over every pass through the source (each epoch of a
    dataset re-reads it unless the dataset is cached). They count what the
    generator produced; with shuffling or prefetching the consumer may not
    have received all of it yet.

    Attributes:
        read: records read: examples plus invalid lines.
        yielded: examples structured and yielded.
        invalid_lines: lines that are not valid UTF-8, JSON or schema.
        empty_input: examples whose documents hold no token.
        empty_summary: examples without a reference summary (when one is
            required or a target is built).
        other_errors: examples for which structuring (or an extra) raised
            another `ValueError`.
        passes: how many times the source was read from the start.
        truncation: the merged `TruncationReport` of the yielded examples.
        errors: the first `max_errors` messages of skipped records, each
            `"[reason] example 'id': message"`.
        max_errors: how many messages to keep.
    """

    read: int = 0
    yielded: int = 0
    invalid_lines: int = 0
    empty_input: int = 0
    empty_summary: int = 0
    other_errors: int = 0
    passes: int = 0
    truncation: structure.TruncationReport = dataclasses.field(
        default_factory=structure.TruncationReport
    )
    errors: list = dataclasses.field(default_factory=list)
    max_errors: int = 10

    @property
    def skipped(self):
        """Records skipped for any reason (`read == yielded + skipped`)."""
        return (
            self.invalid_lines
            + self.empty_input
            + self.empty_summary
            + self.other_errors
        )

    def count_skip(self, reason, message):
        """Counts one skipped record under `reason` and keeps its message.

        Args:
            reason: one of `"invalid_lines"`, `"empty_input"`,
                `"empty_summary"`, `"other_errors"`.
            message: what went wrong (it should name the example).
        """
        if reason not in (
            "invalid_lines",
            "empty_input",
            "empty_summary",
            "other_errors",
        ):
            raise ValueError(
                "`reason` must be 'invalid_lines', 'empty_input', "
                f"'empty_summary' or 'other_errors', received {reason!r}."
            )
        setattr(self, reason, getattr(self, reason) + 1)
        if len(self.errors) < self.max_errors:
            self.errors.append(f"[{reason}] {message}")

    def as_dict(self):
        """The report as plain Python values (for JSON)."""
        values = dataclasses.asdict(self)
        values["skipped"] = self.skipped
        return values

    def __str__(self):
        text = (
            f"Read {self.read:,} records in {self.passes} pass(es), yielded "
            f"{self.yielded:,} examples and skipped {self.skipped:,} "
            f"({self.invalid_lines:,} invalid lines, {self.empty_input:,} "
            f"with empty input, {self.empty_summary:,} with an empty "
            f"summary, {self.other_errors:,} other errors). Truncation: "
            f"{self.truncation}"
        )
        if self.errors:
            shown = "; ".join(self.errors[:3])
            more = len(self.errors) - 3
            text += f" First errors: {shown}" + (
                f" (and {more} more kept in `errors`)." if more > 0 else "."
            )
        return text
