"""The per-example stage of `make_dataset` as a function of a list of examples.

`ExampleStructure` says how a recipe structures one example (family, sizes,
options, extras: the arguments a recipe gives `make_dataset` besides its
batching); `ExampleFeatures` turns a chunk of `Example`s into one dict of
numpy arrays per kept example, the features `make_dataset` batches, and
declares them (`specs`: `keras_hsum.features.Feature`s, dtype, axes and
padding) and the sizes of the axes (`sizes`).

`keras-hsum preprocess` (Apache Beam) calls `ExampleFeatures` on chunks of
a corpus and writes the result as TFRecord shards (`keras_hsum.data.shards`);
`read_shards` batches them as `make_dataset` does. Today the features come
from `keras_hsum.data.pipeline.structured_examples` (the graph
`TextStructurer` and the extras), so shards hold exactly what the
in-process pipeline yields; whatever computes them later only has to keep
this signature.

Axes are the symbols of `keras_hsum.data.extras.declare_features`: `"P"`
rows (max_units), `"T"` tokens per row (max_tokens), `"S"` target length
(max_target_length), `"C"` context length (the paragraphs family's
`context_length`), `"N"` tokens of a flat example (max_tokens), an int
(fixed size) or None (any length).
"""

import dataclasses

import numpy as np

from keras_hsum.data.structuring.options import FAMILY_OPTIONS
from keras_hsum.features import EXAMPLE_ID
from keras_hsum.features import FAMILIES
from keras_hsum.features import Feature
from keras_hsum.features import axis_sizes
from keras_hsum.features import family_features

def _plain(value):
    """A JSON-able copy of a family option value."""
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    return value


@dataclasses.dataclass(frozen=True)
class ExampleStructure:
    """How a recipe structures one example: `make_dataset`'s per-example
    arguments.

    Attributes:
        family: `"paragraphs"`, `"sections"`, `"snippets"`, `"sentences"`
            or `"flat"`.
        max_units: P (None for `"flat"`).
        max_tokens: T (N for `"flat"`).
        max_target_length: S, or None for no `target`.
        family_options: the family's options as given (defaults are added
            by `options`).
        extras: the extras (callables with a `feature_spec`, see
            `declare_features`).
    """

    family: str
    max_units: object = None
    max_tokens: int = 0
    max_target_length: object = None
    family_options: dict = dataclasses.field(default_factory=dict)
    extras: tuple = ()

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(
                f"Unknown family {self.family!r}; expected one of {', '.join(FAMILIES)}."
            )
        for extra in self.extras:
            if not hasattr(extra, "feature_spec"):
                raise ValueError(
                    f"Extra {getattr(extra, '__name__', extra)!r} declares no "
                    "features; shards need every extra's dtypes and axes: "
                    "decorate it with keras_hsum.data.extras.declare_features."
                )

    @property
    def options(self):
        """The family options with the family's defaults filled in."""
        return dict(FAMILY_OPTIONS[self.family], **dict(self.family_options or {}))

    @property
    def specs(self):
        """`{name: Feature}` of every feature of one example (without
        `example_id`), in a fixed order: the family's, `target`, then the
        extras'."""
        specs = family_features(self.family, bool(self.max_target_length))
        for extra in self.extras:
            for name, spec in extra.feature_spec.items():
                padding = spec.padding
                if isinstance(padding, np.generic):
                    padding = padding.item()
                specs[name] = Feature(spec.dtype, spec.axes, padding)
        return specs

    @property
    def sizes(self):
        """The size of each axis symbol (None where there is no maximum)."""
        return axis_sizes(
            self.max_units, self.max_tokens, self.max_target_length,
            self.options.get("context_length"),
        )

    def describe(self):
        """A JSON-able description: two structures that describe the same
        produce the same features from the same text."""
        return {
            "family": self.family,
            "max_units": self.max_units,
            "max_tokens": self.max_tokens,
            "max_target_length": self.max_target_length,
            "family_options": {k: _plain(v) for k, v in sorted(self.options.items())},
            "extras": [getattr(extra, "__name__", repr(extra)) for extra in self.extras],
            "features": {name: spec.as_dict() for name, spec in self.specs.items()},
        }


class ExampleFeatures:
    """Features of a stream of examples for one `ExampleStructure`.

    Args:
        structure: an `ExampleStructure`.
        vocabulary: the `Vocabulary` that tokenizes.

    Call arguments:
        examples: an iterable of `Example` (read once, lazily: a generator
            over a corpus keeps memory flat).
        report: an optional `keras_hsum.data.pipeline.PipelineReport` that
            receives the counts of read and skipped examples.

    Returns:
        An iterator of `(example_id, features)`, one per kept example in
        input order; `features` maps each name of `structure.specs` to a
        numpy array with that dtype and the axes' sizes of this example
        (P <= max_units rows, S <= max_target_length, ...). Examples
        without a summary or without a token are skipped and counted, as
        `make_dataset` skips them.

    Example:
    >>> from keras_hsum.data import Vocabulary, corpora, read_jsonl, sample_path
    >>> vocabulary = Vocabulary.load(corpora.sample_tokenizer_path())
    >>> examples = read_jsonl(sample_path("fewsum_amazon", "val"))
    >>> structure = ExampleStructure("sections", 8, 32, 40)  # P, T, S
    >>> example_id, arrays = next(ExampleFeatures(structure, vocabulary)(examples))
    >>> example_id, {name: array.shape for name, array in arrays.items()}
    ('amazon-B007I8G8A8', {'tokens': (8, 32), 'token_mask': (8, 32),
     'paragraph_mask': (8,), 'document_ids': (8,), 'target': (40,)})
    """

    def __init__(self, structure, vocabulary):
        self.structure = structure
        self.vocabulary = vocabulary
        self.specs = structure.specs

    def __call__(self, examples, report=None):
        from keras_hsum.data.pipeline import structured_examples

        structure = self.structure
        for values in structured_examples(
            examples,
            self.vocabulary,
            structure.family,
            structure.max_units,
            structure.max_tokens,
            max_target_length=structure.max_target_length,
            family_options=structure.family_options,
            extras=list(structure.extras),
            report=report,
            include_ids=True,
        ):
            example_id = str(values.pop(EXAMPLE_ID))
            yield example_id, {name: values[name] for name in self.specs}
