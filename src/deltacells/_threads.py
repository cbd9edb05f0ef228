"""The shared thread pool that decodes chunks and tiles, and the threads that wait on a collection's datasets.

zstandard releases the GIL while it (de)compresses and the numba kernels are compiled with ``nogil=True``,
so threads give real parallelism here. One pool per process, created on first use. A forked child (a
torch DataLoader worker, a multiprocessing pool) starts with no pool and a fresh lock: it must not inherit
the parent's threads, which do not exist in the child, nor a lock one of them held at the fork.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from deltacells.errors import InvalidValueError

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None

#: How many of a collection's datasets are opened or read at once (their requests overlap on object storage).
MEMBER_CONCURRENCY = 32

_T = TypeVar("_T")
_R = TypeVar("_R")


def map_members(function: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
    """``[function(item) for item in items]``, up to :data:`MEMBER_CONCURRENCY` at once (the first error raised).

    One per dataset of a collection: each call mostly waits on its dataset's store, so threads overlap them.
    """
    if len(items) <= 1:
        return [function(item) for item in items]
    with ThreadPoolExecutor(min(MEMBER_CONCURRENCY, len(items)), thread_name_prefix="deltacells-members") as pool:
        return list(pool.map(function, items))


def default_threads() -> int:
    """Threads used when the caller does not say: ``$DELTACELLS_THREADS`` or the usable CPUs."""
    env = os.environ.get("DELTACELLS_THREADS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            msg = f"DELTACELLS_THREADS must be an integer >= 1, got {env!r} (unset it to use every usable CPU)"
            raise InvalidValueError(msg) from None
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


def shared_pool() -> ThreadPoolExecutor:
    """Return the process-wide decoding pool."""
    global _pool
    pool = _pool
    if pool is None:
        with _lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(max_workers=default_threads(), thread_name_prefix="deltacells")
            pool = _pool
    return pool


def _after_fork_in_child() -> None:
    global _lock, _pool
    _lock = threading.Lock()
    _pool = None  # the parent's worker threads do not exist here


os.register_at_fork(after_in_child=_after_fork_in_child)
