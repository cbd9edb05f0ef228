"""The shared thread pool that decodes chunks and tiles.

zstandard releases the GIL while it (de)compresses and the numba kernels are
compiled with ``nogil=True``, so threads give real parallelism here. One pool per
process, created on first use and re-created after a fork (a forked child must not
inherit the parent's threads).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_pid: int | None = None


def default_threads() -> int:
    """Threads used when the caller does not say: ``$DELTACELLS_THREADS`` or the usable CPUs."""
    env = os.environ.get("DELTACELLS_THREADS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            msg = f"DELTACELLS_THREADS must be a positive integer, got {env!r}"
            raise ValueError(msg) from None
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


def shared_pool() -> ThreadPoolExecutor:
    """Return the process-wide decoding pool."""
    global _pool, _pool_pid
    pid = os.getpid()
    if _pool is None or _pool_pid != pid:
        with _lock:
            if _pool is None or _pool_pid != pid:
                _pool = ThreadPoolExecutor(max_workers=default_threads(), thread_name_prefix="deltacells")
                _pool_pid = pid
    return _pool
