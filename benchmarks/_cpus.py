"""Pinning a whole process (every thread it has, and those it starts later) to some CPUs.

``os.sched_setaffinity(0, cpus)`` sets the affinity of the calling thread only: threads started before it (a
thread pool, fsspec's event loop) keep theirs. :func:`pin` sets it for every thread of the process, so that a
benchmark measuring "the client on one core" really has one.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


def usable() -> list[int]:
    """The CPUs this process may run on, sorted."""
    return sorted(os.sched_getaffinity(0))


def pin(cpus: set[int] | list[int]) -> None:
    """Pin every thread of this process (and the threads they start later) to ``cpus``."""
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(task), set(cpus))


@contextlib.contextmanager
def pinned(cpus: set[int] | list[int] | None) -> Iterator[None]:
    """Run the block with the whole process pinned to ``cpus`` (None: as it is); the CPUs it had after."""
    if cpus is None:
        yield
        return
    before = usable()
    pin(cpus)
    try:
        yield
    finally:
        pin(before)
