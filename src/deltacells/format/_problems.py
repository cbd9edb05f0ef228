"""Problems found in a dataset, and the two ways of acting on them: raise the first, or collect them all.

Every rule of the format is a *checker*: a generator that yields a :class:`Problem` for each rule broken
and may return what it parsed (``value = yield from check(...)``). A reader runs a checker through
:func:`first_problem_raises`, which raises the first problem as an exception; ``deltacells validate``
runs the same checker through :func:`collect`, which records every problem and carries on.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from deltacells.errors import DeltaCellsError, FormatError, MissingObjectError

__all__ = ["Checker", "Problem", "collect", "first_problem_raises", "problem_from_error", "reopen_hint"]

T = TypeVar("T")

#: A checker: yields problems, returns what it parsed (None when it could not).
Checker = Generator["Problem", None, T]


@dataclass(frozen=True)
class Problem:
    """One rule of the format broken by one object of a dataset.

    ``object`` is the object at fault, relative to the dataset root (``"manifest.json"``,
    ``"tiles/tile_000003.dct"``, ``"obs/obs_0001.parquet"``...); ``message`` says what is wrong with it
    (without the object's name); ``error`` is the exception a reader raises for it:
    :class:`~deltacells.errors.FormatError`, or :class:`~deltacells.errors.MissingObjectError` for an object
    that is not there.
    """

    object: str
    message: str
    error: type[DeltaCellsError] = field(default=FormatError, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.object}: {self.message}"

    def to_exception(self, url: str | None = None) -> DeltaCellsError:
        """The exception a reader raises: ``"<url>/<object>: <message>"``."""
        where = f"{url.rstrip('/')}/{self.object}" if url else self.object
        return self.error(f"{where}: {self.message}")


def problem_from_error(obj: str, error: BaseException, *, url: str | None = None) -> Problem:
    """A problem of ``obj`` reported by an exception (a decoder's :class:`FormatError`, an I/O error...).

    The object's location at the start of the exception's message (``"<url>/<obj>: "`` or ``"<obj>: "``) is
    dropped, since the problem names the object already.
    """
    if isinstance(error, FormatError):
        text = str(error)
    else:
        detail = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
        text = f"{type(error).__name__}: {detail}" if detail else type(error).__name__
    for prefix in ((f"{url.rstrip('/')}/{obj}: ",) if url else ()) + (f"{obj}: ",):
        while text.startswith(prefix):
            text = text[len(prefix) :]
    kind = MissingObjectError if isinstance(error, FileNotFoundError) else FormatError
    return Problem(obj, text, kind)


def first_problem_raises(checker: Checker[T], url: str | None = None) -> T:
    """Run ``checker``; raise its first problem as an exception (naming ``url``), else return its result."""
    try:
        problem = next(checker)
    except StopIteration as stop:
        result: T = stop.value  # what the checker returned
        return result
    checker.close()
    raise problem.to_exception(url)


def collect(checker: Checker[T], sink: Any) -> T:
    """Run ``checker`` to the end, passing every problem to ``sink(problem)``; return its result."""
    while True:
        try:
            problem = next(checker)
        except StopIteration as stop:
            result: T = stop.value  # what the checker returned
            return result
        sink(problem)


def reopen_hint(index: int, per_object: Any) -> str:
    """For the last tile or shard of a manifest (the objects an append rewrites): the advice to open it again."""
    if per_object is None or index != len(per_object) - 1:
        return ""
    return " (if cells were appended to the dataset since it was opened, open it again)"
