"""keras_hsum.checks.check_int: the one rule for counts and sizes."""

import numpy as np
import pytest

from keras_hsum.checks import check_int


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
