"""Numbers for people: counted nouns, byte sizes and durations."""

from __future__ import annotations


def plural(n: int, word: str) -> str:
    """``n`` with thousands separators and ``word``, plural unless ``n`` is 1 (``"1,024 tiles"``)."""
    return f"{n:,} {word}{'s' if n != 1 else ''}"


def format_size(n: float) -> str:
    """A size in bytes with a decimal unit: ``"512 B"``, ``"1.50 kB"``, ``"2.25 MB"``, ``"3.00 GB"``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"


def format_age(seconds: float | None) -> str:
    """A duration for people, rounded down to its largest unit: ``"40 s"``, ``"12 min"``, ``"5 h"``, ``"3 days"``."""
    if seconds is None:
        return "an unknown time"
    for unit, scale in (("day", 86400), ("h", 3600), ("min", 60)):
        if seconds >= scale:
            n = int(seconds // scale)
            return f"{n} {unit}{'s' if unit == 'day' and n != 1 else ''}"
    return f"{int(seconds)} s"


def parse_age(text: str) -> float:
    """Seconds in a duration such as ``"90"``, ``"90s"``, ``"30m"``, ``"2h"``, ``"7d"`` (or ``"1.5h"``).

    Raises
    ------
    ValueError
        If ``text`` is not a number with one of the units ``s``, ``m``, ``h``, ``d`` (or none: seconds).
    """
    scales = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    stripped = text.strip().lower()
    scale = scales.get(stripped[-1:])
    number = stripped[:-1] if scale is not None else stripped
    try:
        value = float(number) * (scale or 1)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        msg = f"{text!r} is not a duration: give a number of seconds, or one with a unit, as in 30m, 2h or 7d"
        raise ValueError(msg)
    return value
