"""The shared thread pool that decodes chunks and tiles.

zstandard releases the GIL while it (de)compresses and the numba kernels are compiled with ``nogil=True``,
so threads give real parallelism here. One pool per process, created on first use. A forked child (a
torch DataLoader worker, a multiprocessing pool) starts with no pool and a fresh lock: it must not inherit
the parent's threads, which do not exist in the child, nor a lock one of them held at the fork.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

from deltacells.errors import InvalidValueError

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def default_threads() -> int:
    """Threads used when the caller does not say: ``$DELTACELLS_THREADS`` or the usable CPUs."""
    env = os.environ.get("DELTACELLS_THREADS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            msg = f"DELTACELLS_THREADS must be a positive integer, got {env!r}"
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
