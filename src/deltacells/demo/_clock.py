"""A stopwatch for the steps' timings."""

from __future__ import annotations

import time
from types import TracebackType

__all__ = ["Stopwatch"]


class Stopwatch:
    """Seconds spent in a ``with`` block, in :attr:`seconds` once the block ends.

    Examples
    --------
    >>> with Stopwatch() as watch:
    ...     pass
    >>> watch.seconds >= 0
    True
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self._start = 0.0

    def __enter__(self) -> Stopwatch:
        self._start = time.perf_counter()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.seconds = time.perf_counter() - self._start
