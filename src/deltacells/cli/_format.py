"""Numbers for people: counted nouns and byte sizes."""

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
