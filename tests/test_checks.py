"""``deltacells._checks``: the argument checks every public call shares, and their one wording."""

from __future__ import annotations

import numpy as np
import pytest

from deltacells._checks import check_bool, check_choice, check_integer, check_names, is_bool, is_integer
from deltacells.errors import InvalidTypeError, InvalidValueError


@pytest.mark.parametrize("value", [0, 7, np.int64(7), np.uint8(3), np.int32(-2)])
def test_integers(value: object) -> None:
    assert is_integer(value)
    got = check_integer("n", value)
    assert type(got) is int and got == int(value)  # type: ignore[call-overload]


@pytest.mark.parametrize("value", [True, np.bool_(False), 1.0, np.float32(2), "3", None, [1]])
def test_not_integers(value: object) -> None:
    assert not is_integer(value)
    with pytest.raises(InvalidTypeError, match=r"^n must be an integer >= 1, got .* \(\w+\)$"):
        check_integer("n", value, minimum=1)


@pytest.mark.parametrize(
    ("minimum", "maximum", "value", "message"),
    [
        (1, None, 0, "n must be an integer >= 1, got 0"),
        (None, 10, 11, "n must be an integer <= 10, got 11"),
        (1, 2**31, 2**31 + 1, "n must be an integer from 1 to 2,147,483,648, got 2147483649"),
    ],
)
def test_integer_bounds(minimum: int | None, maximum: int | None, value: int, message: str) -> None:
    with pytest.raises(InvalidValueError) as info:
        check_integer("n", value, minimum=minimum, maximum=maximum)
    assert str(info.value) == message
    assert check_integer("n", minimum or maximum, minimum=minimum, maximum=maximum) == (minimum or maximum)


def test_a_hint_ends_the_message() -> None:
    with pytest.raises(InvalidValueError, match=r"^tile_size must be an integer >= 1, got 0 \(cells per tile\)$"):
        check_integer("tile_size", 0, minimum=1, hint="cells per tile")


def test_bools() -> None:
    assert check_bool("flag", np.bool_(True)) is True
    assert check_bool("flag", False) is False
    assert is_bool(np.bool_(False)) and not is_bool(0)
    for value in (0, 1, None, "yes"):
        with pytest.raises(InvalidTypeError, match=r"^flag must be True or False, got "):
            check_bool("flag", value)


def test_choices() -> None:
    assert check_choice("join", "outer", ("inner", "outer")) == "outer"
    with pytest.raises(InvalidValueError) as info:
        check_choice("join", "left", ("inner", "outer"), hint="as anndata.concat's")
    assert str(info.value) == "join must be one of 'inner', 'outer', got 'left' (as anndata.concat's)"
    with pytest.raises(InvalidValueError, match="got \\['inner'\\]"):
        check_choice("join", ["inner"], ("inner", "outer"))  # unhashable: not a choice, not a crash


def test_names() -> None:
    assert check_names("obs_columns", ["a", "b"]) == ("a", "b")
    assert check_names("obs_columns", (c for c in "ab")) == ("a", "b")
    with pytest.raises(InvalidTypeError) as info:
        check_names("obs_columns", "donor", of="column names")
    assert str(info.value) == "obs_columns must be a list of column names, got the string 'donor' (write ['donor'])"
