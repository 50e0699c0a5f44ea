"""Command-line argument checks: argparse types for numbers (a value out of
range is a usage error naming the flag, "argument --beam-size: expected an
int >= 1, received 0", raised before any model is loaded or example scored)
and `unwritable_output` for output files."""

import argparse
import os


def _int_at_least(least):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected an int >= {least}, received {text!r}"
            ) from None
        if value < least:
            raise argparse.ArgumentTypeError(f"expected an int >= {least}, received {value}")
        return value

    parse.__name__ = f"int >= {least}"
    return parse


positive_int = _int_at_least(1)
non_negative_int = _int_at_least(0)


def positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, received {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, received {value}")
    return value


def unwritable_output(path):
    """Why the output file `path` cannot be written (its folder is created
    here), or None: commands check their outputs before long work, so a
    typo in a path does not lose the work at the end."""
    if not path:
        return None
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as error:
        return f"cannot create its folder ({error.strerror or error})"
    if os.path.isdir(path):
        return "is a folder; expected a file name"
    if not os.access(folder, os.W_OK):
        return f"its folder {folder!r} is not writable"
    return None
