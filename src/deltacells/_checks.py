"""Checks of the arguments users pass: one home, one wording.

Each check returns the value in its plain Python form (``int``, ``bool``, ``str``, a tuple of names) or raises
:class:`~deltacells.errors.InvalidTypeError` for a value of the wrong type and
:class:`~deltacells.errors.InvalidValueError` for one out of range, with the message
``"<name> must be <what>, got <value>"`` (and, where it helps, what to do).

``bool`` is a subclass of ``int`` in Python and ``numpy.bool_`` is not an ``numpy.integer``: an integer
argument never accepts ``True``, and a flag accepts both kinds of booleans.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any, TypeGuard, TypeVar

import numpy as np

from deltacells.errors import InvalidTypeError, InvalidValueError

__all__ = ["check_bool", "check_choice", "check_integer", "check_names", "is_bool", "is_integer"]

T = TypeVar("T")


def is_integer(value: object) -> TypeGuard[int | np.integer[Any]]:
    """Whether ``value`` is a Python or numpy integer, and not a boolean."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def is_bool(value: object) -> TypeGuard[bool | np.bool_]:
    """Whether ``value`` is a Python or numpy boolean."""
    return isinstance(value, bool | np.bool_)


def check_integer(
    name: str, value: object, *, minimum: int | None = None, maximum: int | None = None, hint: str = ""
) -> int:
    """``value`` as an ``int``, if it is an integer within ``minimum`` .. ``maximum`` (either bound optional).

    Parameters
    ----------
    name
        The argument's name, as the message gives it.
    value
        What was passed.
    minimum, maximum
        The bounds, inclusive.
    hint
        Added to the message in parentheses (what the value means, what to do).

    Raises
    ------
    InvalidTypeError
        If ``value`` is not an integer (a bool, a float, a string...).
    InvalidValueError
        If it is out of bounds.
    """
    what = _integer_range(minimum, maximum)
    if not is_integer(value):
        raise InvalidTypeError(_message(name, what, f"{value!r} ({type(value).__name__})", hint))
    number = int(value)
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        raise InvalidValueError(_message(name, what, repr(number), hint))
    return number


def check_bool(name: str, value: object) -> bool:
    """``value`` as a ``bool``, if it is ``True`` or ``False`` (Python's or numpy's).

    Raises
    ------
    InvalidTypeError
        For anything else (``None``, ``0``, ``"yes"``...).
    """
    if not is_bool(value):
        raise InvalidTypeError(_message(name, "True or False", repr(value), ""))
    return bool(value)


def check_choice(name: str, value: T, choices: Collection[T], *, hint: str = "") -> T:
    """``value``, if it is one of ``choices``.

    Raises
    ------
    InvalidValueError
        Naming the choices.
    """
    try:
        chosen = value in choices
    except TypeError:  # unhashable
        chosen = False
    if not chosen:
        listed = ", ".join(repr(choice) for choice in choices)
        raise InvalidValueError(_message(name, f"one of {listed}", repr(value), hint))
    return value


def check_names(name: str, value: Iterable[str] | str, *, of: str = "names") -> tuple[str, ...]:
    """``value`` as a tuple of names, if it is a list (or other iterable) of them and not one string.

    A string is iterable too, and would otherwise be read as a list of one-letter names. ``of`` says what the
    names are (``"column names"``), as the message gives it.

    Raises
    ------
    InvalidTypeError
        For a string.
    """
    if isinstance(value, str):
        raise InvalidTypeError(_message(name, f"a list of {of}", f"the string {value!r}", f"write [{value!r}]"))
    return tuple(value)


def _integer_range(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f"an integer from {minimum:,} to {maximum:,}"
    if minimum is not None:
        return f"an integer >= {minimum:,}"
    if maximum is not None:
        return f"an integer <= {maximum:,}"
    return "an integer"


def _message(name: str, what: str, got: str, hint: str) -> str:
    return f"{name} must be {what}, got {got}" + (f" ({hint})" if hint else "")
