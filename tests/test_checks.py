"""keras_hsum.checks: check_int, the one rule for counts and sizes, and
options_or_keywords, the one rule for an options object or its keywords."""

import dataclasses

import numpy as np
import pytest

from keras_hsum.checks import check_int
from keras_hsum.checks import options_or_keywords


def test_ints_at_or_above_the_bound_pass_as_python_ints():
    for value, least in ((1, 1), (0, 0), (7, 3), (np.int64(5), 1), (np.int32(2), 2)):
        result = check_int("size", value, least)
        assert result == value and type(result) is int
    assert check_int("size", None, allow_none=True) is None


@pytest.mark.parametrize(
    "value",
    [0, -1, 2.0, 2.7, True, False, "3", None, np.float32(3.0), [3]],
)
def test_everything_else_is_a_value_error_naming_the_argument(value):
    with pytest.raises(ValueError) as info:
        check_int("beam_size", value, 1, owner="SearchOptions")
    assert str(info.value) == (
        f"SearchOptions: `beam_size` must be an int >= 1, received {value!r}."
    )


def test_bound_hint_and_none_wording():
    with pytest.raises(ValueError, match=r"^`n` must be an int >= 3 \(BOS\), received 2\.$"):
        check_int("n", 2, 3, hint=" (BOS)")
    with pytest.raises(ValueError, match=r"^`k` must be None or an int >= 1, received 0\.$"):
        check_int("k", 0, allow_none=True)


@dataclasses.dataclass(frozen=True)
class _Options:
    size: int
    seed: int = 0


def test_options_or_keywords_takes_one_or_the_other():
    given = _Options(size=2, seed=5)
    assert options_or_keywords("f", _Options, given, {}) is given
    assert options_or_keywords("f", _Options, None, {"size": 2, "seed": 5}) == given
    assert options_or_keywords("f", _Options, None, {"size": 3}) == _Options(3, 0)


@pytest.mark.parametrize(
    "options, keywords, message",
    [
        (_Options(2), {"seed": 1}, r"f\(\) received options= and the keyword\(s\) \['seed'\]"),
        (None, {"size": 2, "sede": 1}, r"f\(\) got an unexpected keyword argument 'sede'"),
        (None, {"seed": 1}, r"f\(\) missing 1 required keyword-only argument: 'size' "
                            r"\(or pass options=_Options\(size=...\)\)"),
        ({"size": 2}, {}, r"`options` must be a _Options; received dict"),
    ],
)
def test_options_or_keywords_misuse_is_a_type_error_saying_what_to_do(
    options, keywords, message
):
    with pytest.raises(TypeError, match=message):
        options_or_keywords("f", _Options, options, keywords)
