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

- a kernel is compiled for a signature (loaded from the cache, or compiled and saved) under an inter-process
  lock on its cache directory (:mod:`filelock`), so that reading the index, choosing a data file and writing
  both is one step, and so that processes starting together on a cold cache compile each signature once:
  the first compiles and saves it while the others wait, then load it (a torch ``DataLoader``'s or a dask
  cluster's workers would otherwise each spend seconds compiling the same code);
- an entry whose compiled signature is not the one asked for is not used: the kernel is compiled afresh and
  saved over it, which also repairs a cache damaged before this guard existed.

Where the lock cannot be taken in time (a read-only or unlockable directory), the cache is not used for that
signature: the kernel is compiled in the process, never loaded or saved without the lock.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, cast

import numba

from deltacells import _internals

__all__ = ["add_compile_listener", "cache_index_path", "compiled_kernels_list", "kernel"]

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
    cache = _internals.numba_function_cache(dispatcher)  # numba's per-function cache (none with NUMBA_DISABLE_JIT)
    if cache is not None and _internals.numba_cache_path(cache):
        guarded = GuardedCache(cache)
        _internals.set_numba_function_cache(dispatcher, guarded)
        _internals.wrap_numba_compile(dispatcher, guarded.locking)  # numba calls self.compile(sig) for each one
        _KERNELS.append(dispatcher)
    return cast("F", dispatcher)  # called as the function it compiles (numba's types say Dispatcher[F])


def compiled_kernels_list() -> list[Any]:
    """Every kernel made by :func:`kernel` so far, numba's dispatchers (none with ``NUMBA_DISABLE_JIT``)."""
    return list(_KERNELS)


def cache_index_path(dispatcher: Any) -> str:
    """The index file of a kernel made by :func:`kernel` in numba's cache (present once a compilation is saved)."""
    cache = _internals.numba_function_cache(dispatcher)
    assert isinstance(cache, GuardedCache)
    return cache.index_path


#: Every kernel made by :func:`kernel` so far (those of the modules imported; see
#: ``deltacells._kernel_loading.kernels_to_compile``).
_KERNELS: list[Any] = []

#: Called, on the compiling thread, before a kernel is compiled for a signature its cache lacks.
_COMPILE_LISTENERS: list[Callable[[], None]] = []


def add_compile_listener(listener: Callable[[], None]) -> None:
    """Have ``listener()`` called before a kernel made by :func:`kernel` is compiled (not loaded from the cache).

    On the thread that compiles, once per signature compiled; what numba's cache holds is loaded unannounced.
    ``deltacells._kernel_loading`` so learns that its loading takes seconds, not milliseconds.
    """
    if listener not in _COMPILE_LISTENERS:
        _COMPILE_LISTENERS.append(listener)


class GuardedCache:
    """A numba function cache used only under a lock on its directory, and checked on load.

    It implements numba's (internal) cache protocol, which numba's dispatcher calls (see
    :mod:`deltacells._internals`).

    Parameters
    ----------
    cache
        numba's cache of one function (``numba.core.caching.FunctionCache``); everything but
        :meth:`load_overload` and :meth:`save_overload` goes to it unchanged.
    """

    def __init__(self, cache: Any) -> None:
        self._cache = cache
        self.cache_path = _internals.numba_cache_path(cache) or ""
        self.lock_path = os.path.join(self.cache_path, LOCK_NAME)
        self._usable = False  # whether the compilation under way holds the lock (see locking)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cache, name)

    @property
    def index_path(self) -> str:
        """The file numba writes first when it saves this function's compilations (its index)."""
        return _internals.numba_cache_index_path(self._cache)

    def locking(self, compile_signature: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``compile_signature`` (the dispatcher's ``compile``), run holding the lock on the cache's directory.

        numba's ``compile(sig)`` loads ``sig`` from the cache or compiles and saves it; under the lock, another
        process asking for the same signature meanwhile waits, then loads what this one saved. The lock is
        re-entrant in the process (a kernel compiled while compiling its caller), and one thread of the process
        compiles at a time (numba compiles one function at a time anyway). Without the lock (not taken in
        :data:`LOCK_TIMEOUT`, or a directory that cannot be locked), nothing is loaded or saved.
        """

        def compile_locked(sig: Any) -> Any:
            with _COMPILING, _directory_lock(self.cache_path) as locked:
                usable, self._usable = self._usable, locked
                try:
                    return compile_signature(sig)
                finally:
                    self._usable = usable

        return compile_locked

    @_internals.overrides("numba.core.caching.Cache")
    def load_overload(self, sig: Any, target_context: Any) -> Any:
        """The cached compilation of ``sig``, or ``None``: not cached, not locked, or for another signature.

        ``None`` makes numba compile ``sig``: the listeners of :func:`add_compile_listener` are told first.
        """
        result = None
        if self._usable and os.path.isdir(self.cache_path):  # (the directory comes with the first save)
            result = _internals.numba_load_overload(self._cache, sig, target_context)
            if result is not None and (
                _internals.numba_loaded_signature_args(result) != _internals.numba_signature_args(sig)
            ):
                result = None  # another signature's code under this one's entry: compiled again and saved over it
        if result is None:
            for listener in tuple(_COMPILE_LISTENERS):  # (a copy: one may be added meanwhile)
                listener()
        return result

    @_internals.overrides("numba.core.caching.Cache")
    def save_overload(self, sig: Any, data: Any) -> None:
        """Save the compilation of ``sig`` (skipped without the lock)."""
        if self._usable:
            _internals.numba_save_overload(self._cache, sig, data)


#: One thread of the process compiles (or loads) a kernel at a time: taken before any directory's lock, so
#: that two threads never take those in opposite orders.
_COMPILING = threading.RLock()

#: The lock of each cache directory, one object per directory (re-entrant: a kernel compiled while its caller
#: is, from the same directory, takes it again).
_DIRECTORY_LOCKS: dict[str, Any] = {}


@contextmanager
def _directory_lock(cache_path: str) -> Iterator[bool]:
    """Hold the inter-process lock of a kernel cache directory (made if missing); yields whether it was taken."""
    from filelock import FileLock, Timeout

    try:
        os.makedirs(cache_path, exist_ok=True)
    except OSError:
        yield False
        return
    lock = _DIRECTORY_LOCKS.get(cache_path)
    if lock is None:
        lock = _DIRECTORY_LOCKS[cache_path] = FileLock(os.path.join(cache_path, LOCK_NAME), thread_local=False)
    try:
        lock.acquire(timeout=LOCK_TIMEOUT)
    except (Timeout, OSError):
        yield False
        return
    try:
        yield True
    finally:
        lock.release()


def _after_fork_in_child() -> None:
    global _COMPILING
    _COMPILING = threading.RLock()  # a thread of the parent may have held it at the fork
    _DIRECTORY_LOCKS.clear()  # the parent's open lock files are its own


os.register_at_fork(after_in_child=_after_fork_in_child)
