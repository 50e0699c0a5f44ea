"""Argument checks shared by every part of keras_hsum (layers, models,
decoding, data, training, export, evaluation): one rule and one message for
every count and size, e.g.

    SearchOptions: `beam_size` must be an int >= 1, received 0.

Pure Python, no framework import.
"""

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
