"""Extras: features computed in Python from the structurer's output.

An extra is a callable `(example, structured) -> dict` of numpy arrays
(one example, no batch axis) that `make_dataset(extras=[...])` merges into
the features. It runs in Python (`tf.py_function`) on the structurer's
output: `example` is the `Example` without its documents (id, dataset,
title, query, summary, references), `structured.texts` the text of each
kept row (the structurer's `unit_texts`) and `structured.features` the
example's features as numpy arrays; it never structures the text again.
Its signature (dtype and axes of each array) is taken, in this order, from:
1. its `feature_spec` attribute (set it with `@declare_features(...)`): a
   dict `name -> (dtype, axes)` or `(dtype, axes, padding_value)`, axes a
   tuple of `"P"` (rows, padded with the batch), `"T"` (= max_tokens),
   `"S"` (target length), `"C"` (context length), an int (fixed size) or
   None (any length, padded to the longest in the batch);
2. otherwise, by running it on the first example that structures
   (`infer_specs`): dtypes are the arrays' dtypes, an axis whose length is
   that example's number of rows is a `"P"` axis, any other axis is None.
   Declare the signature when this guess can be wrong (an axis that
   happens to equal P), or when `pad_to_max=True` needs the size of a None
   axis.
A `ValueError` an extra raises on one example skips that example.

An extra may also run in the graph: when it has a `graph_features`
attribute, `graph_features(features, table) -> dict of tensors`,
`make_dataset` calls that on each chunk of examples right after the
structurer (inside its parallel `map`, no `tf.py_function`) instead of
calling the extra in Python. `features` holds the chunk's structurer
features with a batch axis ([B,P,T] rows, P = max_units), its raw strings,
and the ids of its summaries (`label_extras.SUMMARY_LABEL_IDS`, int32
ragged [B, None]) and references (`label_extras.REFERENCE_LABEL_IDS`,
int32 ragged [B, R, None]); `table` is `id_rouge.rouge_id_table(vocabulary)`.
It returns its declared `feature_spec` (it must declare one) with a batch
axis, its "P" axes of size P (the pipeline trims them to each example's
rows) and a None axis ragged.

The library's own extras (ranker targets, the paragraph graph, SEAL's
proxy labels, the oracle) are in `keras_hsum.data.label_extras`.
"""

import numpy as np
import tensorflow as tf

from keras_hsum.data import reader as reader_lib
from keras_hsum.data import structure
from keras_hsum.data.raw_examples import RAW_SIGNATURE
from keras_hsum.data.structuring.statistics import STATISTICS
from keras_hsum.features import AXES
from keras_hsum.features import EXAMPLE_ID
from keras_hsum.features import Feature
from keras_hsum.features import PARAGRAPH_MASK


def declare_features(**specs):
    """Declares the features an extra returns (decorator).

    Args:
        **specs: `name=(dtype, axes)` or `name=(dtype, axes, padding_value)`
            per returned array; dtype a numpy dtype or its name, axes a
            tuple of `"P"`, `"T"`, `"S"`, `"C"`, `"N"`, ints and None (see
            the module docstring). Without a padding value, arrays are
            padded with 0 / False / 0.0.

    Returns:
        A decorator that sets `feature_spec` on the function and returns it.

    Example:
    >>> @declare_features(graph=("float32", ("P", "P")))
    ... def similarity_graph(example, structured):
    ...     ...
    >>> similarity_graph.feature_spec["graph"]
    Feature(dtype='float32', axes=('P', 'P'), padding=None, mask_of=None)
    """
    normalised = {name: _spec(name, value) for name, value in specs.items()}

    def decorate(function):
        function.feature_spec = normalised
        return function

    return decorate


def _spec(name, value):
    if not isinstance(value, (tuple, list)) or len(value) not in (2, 3):
        raise ValueError(
            f"The spec of feature {name!r} must be (dtype, axes) or "
            f"(dtype, axes, padding_value), received {value!r}."
        )
    dtype, axes = np.dtype(value[0]), tuple(value[1])
    for axis in axes:
        if not (
            axis is None
            or axis in AXES
            or (isinstance(axis, int) and axis >= 0)
        ):
            raise ValueError(
                f"Axis {axis!r} of feature {name!r} is not one of "
                f"{', '.join(AXES)}, a non-negative int or None."
            )
    padding = value[2] if len(value) == 3 else None
    return Feature(dtype, axes, padding)


def extra_name(extra):
    """How errors name an extra: its `__name__`, else its repr."""
    return getattr(extra, "__name__", repr(extra))


def _structured_from_tensors(values, family):
    """One graph-structured example as (`Example` without documents,
    `Structured`) for the Python extras."""

    def text(value):
        return value.decode("utf-8") if isinstance(value, bytes) else str(value)

    texts = [text(t) for t in values["unit_texts"]]
    if family == "flat":
        texts = [t for t in texts if t]
    example = reader_lib.Example(
        id=text(values[EXAMPLE_ID]),
        dataset=text(values["dataset"]) or None,
        title=text(values["title"]) or None,
        query=text(values["query"]) or None,
        documents=(),
        summary=text(values["summary"]),
        references=tuple(text(r) for r in values["references"]),
    )
    internal = set(RAW_SIGNATURE) | set(STATISTICS) | {"unit_texts", "summary_tokens_count"}
    features = {name: value for name, value in values.items() if name not in internal}
    return example, structure.Structured(
        features=features, texts=texts, report=structure.TruncationReport()
    )


def _run_extras(extras, example, structured):
    """The extras' outputs on one example: a list of (extra, dict)."""
    outputs = []
    for extra in extras:
        values = extra(example, structured)
        if not isinstance(values, dict):
            raise TypeError(
                f"Extra {extra_name(extra)} must return a dict of numpy arrays, "
                f"returned a {type(values).__name__}."
            )
        for name in values:
            if name in structured.features or any(name in v for _, v in outputs):
                raise TypeError(
                    f"Extra {extra_name(extra)} returns feature {name!r}, which "
                    "already exists (from the structurer or another extra); "
                    "rename it."
                )
        outputs.append((extra, values))
    return outputs


def infer_specs(extras, dataset, family):
    """Specs of undeclared extras from their outputs on the first example.

    Args:
        extras: the undeclared extras.
        dataset: unbatched structured examples (the pipeline's, with the
            raw strings the extras read).
        family: the structurer's family.

    Returns:
        A dict `name -> Feature`.

    Raises:
        ValueError: when no example structures.
    """
    for values in dataset.take(1).as_numpy_iterator():
        example, structured = _structured_from_tensors(values, family)
        outputs = _run_extras(extras, example, structured)
        rows = None
        if PARAGRAPH_MASK in structured.features:
            rows = structured.features[PARAGRAPH_MASK].shape[0]
        specs = {}
        for _, values_out in outputs:
            for name, value in values_out.items():
                value = np.asarray(value)
                axes = tuple("P" if size == rows else None for size in value.shape)
                specs[name] = Feature(value.dtype, axes)
        return specs
    raise ValueError(
        "Cannot infer the signature of undeclared extras: the source "
        "holds no example that structures. Check the source (see the "
        "PipelineReport) or declare the extras with @declare_features."
    )


def _conform(features, specs, max_tokens, rows):
    """Checks and casts one example's arrays against the signature."""
    if set(features) != set(specs):
        raise TypeError(
            f"Expected the features {sorted(specs)}, the example has "
            f"{sorted(features)}; an extra returned other names than it "
            "declared (or than it returned on the first example)."
        )
    out = {}
    for name, spec in specs.items():
        value = np.asarray(features[name])
        if value.ndim != len(spec.axes):
            raise TypeError(
                f"Feature {name!r} has shape {value.shape}; expected rank "
                f"{len(spec.axes)} (axes {spec.axes})."
            )
        for size, axis in zip(value.shape, spec.axes):
            expected = (
                rows if axis == "P" else max_tokens if axis == "T" else axis
            )
            if isinstance(expected, (int, np.integer)) and size != expected:
                raise TypeError(
                    f"Feature {name!r} has shape {value.shape}; axis "
                    f"{axis!r} should have size {expected}. Fix the extra "
                    "that returns it or its declared axes."
                )
        if spec.dtype != "string" and value.dtype != spec.numpy_dtype:
            value = value.astype(spec.numpy_dtype)
        out[name] = value
    return out


def runs_in_graph(extra, family):
    """Whether `make_dataset` runs `extra` in the graph (its
    `graph_features`) for `family` (not `"flat"`, whose rows are not
    [P,T])."""
    return family != "flat" and hasattr(extra, "graph_features")


def run_graph_extras(extras, features, table):
    """The graph extras' features of one chunk of structured examples.

    Args:
        extras: extras with `graph_features`.
        features: the chunk's features with a batch axis (the structurer's,
            the raw strings, and the label ids).
        table: `id_rouge.rouge_id_table(vocabulary)`.

    Returns:
        A dict of the extras' tensors with a batch axis.

    Raises:
        TypeError: for an extra that returns other names than it declares,
            or a name that already exists.
    """
    out = {}
    for extra in extras:
        values = extra.graph_features(features, table)
        declared = set(getattr(extra, "feature_spec", {}))
        if set(values) != declared:
            raise TypeError(
                f"Extra {extra_name(extra)}'s graph_features returned "
                f"{sorted(values)}, but it declares {sorted(declared)}; "
                "return exactly the declared features."
            )
        for name, value in values.items():
            if name in features or name in out:
                raise TypeError(
                    f"Extra {extra_name(extra)} returns feature {name!r}, which "
                    "already exists (from the structurer or another extra); "
                    "rename it."
                )
            spec = extra.feature_spec[name]
            out[name] = tf.cast(value, tf.as_dtype(spec.numpy_dtype))
    return out


def with_extras(dataset, extras, names, specs, family, max_tokens, strict, failures,
                skip):
    """Adds the Python extras' arrays (`tf.py_function`); extras that run
    in the graph (`runs_in_graph`) were computed with the structurer
    (`run_graph_extras`) and are skipped here.

    Args:
        dataset: unbatched structured examples with the raw strings.
        extras: the extras to run (those the structurer does not compute).
        names: the features they return, in order.
        specs: `name -> Feature` for at least `names`.
        family: the structurer's family.
        max_tokens: T.
        strict: raise an extra's ValueError instead of skipping the example.
        failures: a list that receives any error raised.
        skip: `skip(values, message)`, called for an example an extra's
            ValueError skips (`values`: its numpy features).

    Returns:
        The dataset with the extras' arrays (an example an extra refused
        is dropped).
    """
    in_graph = [extra for extra in extras if runs_in_graph(extra, family)]
    if in_graph:  # computed with the structurer (`run_graph_extras`)
        graph_names = {name for extra in in_graph for name in extra.feature_spec}
        names = [name for name in names if name not in graph_names]
        extras = [extra for extra in extras if extra not in in_graph]
    if not extras:
        return dataset
    dtypes = [tf.as_dtype(specs[name].numpy_dtype) for name in names]
    keys = sorted(dataset.element_spec)

    def row(*tensors):
        values = {key: tensor.numpy() for key, tensor in zip(keys, tensors)}
        example, structured = _structured_from_tensors(values, family)
        try:
            outputs = _run_extras(extras, example, structured)
        except ValueError as error:
            if strict:
                raise
            skip(values, f"example {example.id!r}: {error}")
            return [np.asarray(False)] + [
                np.zeros([0] * len(specs[name].axes), specs[name].numpy_dtype)
                for name in names
            ]
        merged = {}
        for _, values_out in outputs:
            merged.update(values_out)
        rows = len(structured.texts) if family != "flat" else None
        merged = _conform(merged, {n: specs[n] for n in names}, max_tokens, rows)
        return [np.asarray(True)] + [merged[name] for name in names]

    def run(*tensors):
        try:
            return row(*tensors)
        except Exception as error:
            failures.append(error)
            raise

    def add(example):
        results = tf.py_function(
            run, [example[key] for key in keys], [tf.bool] + dtypes
        )
        example = dict(example)
        example["_extras_ok"] = tf.reshape(results[0], [])
        for name, value in zip(names, results[1:]):
            value.set_shape([None] * len(specs[name].axes))
            example[name] = value
        return example

    def ok(example):
        return example["_extras_ok"]

    def drop_flag(example):
        example = dict(example)
        example.pop("_extras_ok")
        return example

    return (
        dataset.map(add, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .filter(ok)
        .map(drop_flag)
    )
