"""How deltacells compiles its numba kernels: ``nogil``, no bounds checks, cached on disk, safely.

numba's on-disk cache (``cache=True``) is not safe when several processes compile one function at the same
time for different argument types (numba 0.68, ``IndexDataCacheFile.save``): each reads the function's
index, picks the first free data file for its own signature, and writes the index and then the data file,
so the index can end up naming, for one signature, the machine code compiled for another. Every later
process then runs the wrong code, silently: a decode kernel writing ``float32`` counts that writes the bit
patterns of ``int32`` ones (seen here with four test processes starting at once on a fresh install). That is
how deltacells is used: torch ``DataLoader`` workers, dask workers and array jobs on a shared filesystem all
start together, and a fresh install compiles in each of them.

:func:`kernel` keeps numba's cache and guards it, without touching its file format:

- a function's cache entries are loaded and saved under an inter-process lock on its cache directory
  (:mod:`filelock`), so that reading the index, choosing a data file and writing both is one step;
- an entry whose compiled signature is not the one asked for is not used: the kernel is compiled afresh and
  saved over it, which also repairs a cache damaged before this guard existed.

Where the lock cannot be taken in time (a read-only or unlockable directory), the cache is not used for that
signature: the kernel is compiled in the process, never loaded or saved without the lock.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import numba
from numba.core import sigutils

__all__ = ["kernel", "kernels_to_compile"]

F = TypeVar("F", bound=Callable[..., Any])

#: The lock file beside the cached kernels of a directory.
LOCK_NAME = "deltacells-numba-cache.lock"

#: Seconds to wait for another process's load or save of cached kernels (each takes milliseconds).
LOCK_TIMEOUT = 60.0


def kernel(func: F) -> F:
    """Compile ``func`` with numba (``nogil=True``, ``boundscheck=False``), cached on disk behind a guard.

    Parameters
    ----------
    func
        The Python function of the kernel.

    Returns
    -------
    numba.core.registry.CPUDispatcher
        numba's dispatcher, whose cache loads and saves under an inter-process lock and never hands out
        code compiled for another signature (see the module docstring). With ``NUMBA_DISABLE_JIT=1``,
        ``func`` itself.
    """
    dispatcher = numba.njit(nogil=True, cache=True, boundscheck=False)(func)
    cache = getattr(dispatcher, "_cache", None)  # numba's per-function cache (absent with NUMBA_DISABLE_JIT)
    if cache is not None and getattr(cache, "cache_path", None):
        dispatcher._cache = GuardedCache(cache)
        _KERNELS.append(dispatcher)
    return dispatcher


#: Every kernel made by :func:`kernel` so far (those of the modules imported).
_KERNELS: list[Any] = []

#: The modules that define kernels (``tests/test_jit.py`` checks that none is missing). They are imported on
#: the first decode, not by ``import deltacells``.
KERNEL_MODULES = ("deltacells.codec._kernels", "deltacells.tiles._gather")


def kernels_to_compile() -> list[str]:
    """The kernels that no earlier process compiled into numba's cache on this machine (imports them).

    A process that finds some spends seconds compiling them on its first reads (about 10 s for all of
    deltacells' on 2 cores); later processes load them from the cache. ``deltacells demo`` says so first.
    """
    import importlib

    for module in KERNEL_MODULES:
        importlib.import_module(module)
    return [
        dispatcher.py_func.__qualname__ for dispatcher in _KERNELS if not os.path.exists(dispatcher._cache.index_path)
    ]


class GuardedCache:
    """A numba function cache whose loads and saves hold a lock on its directory, checked on load.

    Parameters
    ----------
    cache
        numba's cache of one function (``numba.core.caching.FunctionCache``); everything but
        :meth:`load_overload` and :meth:`save_overload` goes to it unchanged.
    """

    def __init__(self, cache: Any) -> None:
        self._cache = cache
        self.lock_path = os.path.join(cache.cache_path, LOCK_NAME)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cache, name)

    @property
    def index_path(self) -> str:
        """The file numba writes first when it saves this function's compilations (its index)."""
        return self._cache._cache_file._index_path

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        """The cached compilation of ``sig``, or ``None``: not cached, not lockable, or for another signature."""
        if not os.path.isdir(self._cache.cache_path):
            return None  # nothing cached yet (the directory comes with the first save)
        with self._locked() as locked:
            result = self._cache.load_overload(sig, target_context) if locked else None
        if result is not None and tuple(result.signature.args) != tuple(sigutils.normalize_signature(sig)[0]):
            return None  # another signature's code under this one's entry: compiled again and saved over it
        return result

    def save_overload(self, sig: Any, data: Any) -> None:
        """Save the compilation of ``sig`` (skipped if the lock cannot be taken)."""
        try:
            os.makedirs(self._cache.cache_path, exist_ok=True)
        except OSError:
            return
        with self._locked() as locked:
            if locked:
                self._cache.save_overload(sig, data)

    @contextmanager
    def _locked(self) -> Iterator[bool]:
        """Hold the directory's lock; yields whether it was taken."""
        from filelock import FileLock, Timeout

        lock = FileLock(self.lock_path, timeout=LOCK_TIMEOUT)
        try:
            lock.acquire()
        except (Timeout, OSError):
            yield False
            return
        try:
            yield True
        finally:
            lock.release()
