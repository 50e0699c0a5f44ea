"""Argument checks shared by every part of keras_hsum (layers, models,
decoding, data, training, export, evaluation): one rule and one message for
every count and size, e.g.

    SearchOptions: `beam_size` must be an int >= 1, received 0.

Pure Python, no framework import.
"""

import dataclasses
import numbers


def check_int(name, value, least=1, owner=None, allow_none=False, hint=""):
    """Returns `value` as a Python int, or raises a ValueError naming it.

    Python and numpy ints >= `least` pass; bools and floats do not (a float
    would otherwise be truncated: `int(2.7)` quietly decodes 2 beams).

    Args:
        name: the argument's name, shown in backticks.
        value: the value received.
        least: the smallest value allowed.
        owner: an optional prefix naming the layer, model or function.
        allow_none: None passes (and is returned) when True.
        hint: optional words after the bound, e.g. " (0: no shuffling)".
    """
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        prefix = f"{owner}: " if owner else ""
        expected = f"None or an int >= {least}" if allow_none else f"an int >= {least}"
        raise ValueError(
            f"{prefix}`{name}` must be {expected}{hint}, received {value!r}."
        )
    return int(value)


def options_or_keywords(function, options_class, options, keywords):
    """The options object of a call that takes either `options=` (an
    instance of the frozen dataclass `options_class`) or that class's fields
    as keywords, never both: e.g. `make_dataset(..., options=DatasetOptions(
    batch_size=8))` or `make_dataset(..., batch_size=8)`.

    Args:
        function: the function's name, for the messages.
        options_class: the dataclass.
        options: the call's `options` argument (None: not given).
        keywords: the call's other keywords, `{name: value}`.

    Returns:
        `options`, or `options_class(**keywords)`.

    Raises:
        TypeError: for `options` together with keywords (naming them), a
            keyword that is no field, a required field left out, or
            `options` of another type.
    """
    fields = dataclasses.fields(options_class)
    names = [field.name for field in fields]
    kind = options_class.__name__
    unknown = sorted(set(keywords) - set(names))
    if unknown:
        raise TypeError(
            f"{function}() got an unexpected keyword argument {unknown[0]!r}; "
            f"the settings it takes as keywords are {kind}'s fields {names}."
        )
    if options is None:
        missing = [field.name for field in fields
                   if field.default is dataclasses.MISSING
                   and field.default_factory is dataclasses.MISSING
                   and field.name not in keywords]
        if missing:
            raise TypeError(
                f"{function}() missing 1 required keyword-only argument: "
                f"{missing[0]!r} (or pass options={kind}({missing[0]}=...))."
            )
        return options_class(**keywords)
    if keywords:
        raise TypeError(
            f"{function}() received options= and the keyword(s) {sorted(keywords)}, "
            f"which {kind} also holds; pass options={kind}(...) with every setting "
            "in it, or the keywords alone."
        )
    if not isinstance(options, options_class):
        raise TypeError(
            f"{function}()'s `options` must be a {kind}; received "
            f"{type(options).__name__}."
        )
    return options
