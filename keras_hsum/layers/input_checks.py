"""Shape checks that turn wrong inputs into ValueErrors naming the argument.

Every check works on static shapes (tuples with `None` for unknown sizes), so
it runs at build or trace time on every backend and costs nothing per step.
"""


def _shape(value):
    shape = getattr(value, "shape", value)
    return tuple(None if d is None else int(d) for d in shape)


def check_rank(layer, name, value, rank, symbols):
    """Raises unless `value` has `rank` axes; `symbols` names them, e.g. "[B,P,T,D]"."""
    shape = _shape(value)
    if len(shape) != rank:
        raise ValueError(
            f"{layer}: `{name}` must have rank {rank} with shape {symbols}, "
            f"received shape {shape}."
        )
    return shape


def check_dims(layer, name, shape, expected, symbols):
    """Raises when known dims of `shape` differ from `expected` (None = any)."""
    shape = _shape(shape)
    expected = tuple(expected)
    ok = len(shape) == len(expected) and all(
        e is None or s is None or s == e for s, e in zip(shape, expected)
    )
    if not ok:
        raise ValueError(
            f"{layer}: `{name}` must have shape {symbols} = {expected} "
            f"(None: any size), received shape {shape}."
        )
    return shape
