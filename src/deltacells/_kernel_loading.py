"""numba's kernels loaded on a background thread, numpy's versions of them serving until they are.

The first call of a numba kernel in a process pays for numba itself before any kernel runs: importing it
and preparing its compiler's target, about 0.3 s on the benchmark machine (Python 3.11) even when every
kernel is in numba's on-disk cache, then a few milliseconds for each kernel and signature loaded from it,
or seconds each when the cache is cold (a fresh install, a new machine) and they are compiled. Every
short script, CLI call, dask worker and ``DataLoader`` worker would pay it on its first cell.

So the loading starts on a daemon thread as soon as a dataset is opened (:func:`prepare_kernels`): it
imports the kernel modules and calls each module's ``warm_up()``, which runs the kernels on tiny inputs,
loading (or compiling) the signatures reads use. The kernel calls ask :func:`compiled_kernels` first: until
the loading is done it answers ``False``, and the caller runs the kernel's numpy version
(``deltacells.codec._vectorised``, ``deltacells.tiles._gather_vectorised``: same arguments, same results,
nothing to load, but 4 to 5 times the compiled kernels' time a nonzero). So a read of a few cells is served at
once; a read of :data:`WAIT_MIN_NNZ` nonzeros or more waits for the loading instead (through
:func:`prepare_kernels`), which costs it less, unless the loading has to compile a kernel (one its warm-ups
call is not in numba's cache: a fresh install): that takes seconds, and the read runs numpy's versions
meanwhile. The loading knows it compiles when numba's cache misses a signature it asks for
(``deltacells._jit``), not from the kernels the cache lacks: some kernels (the format's escapes) are compiled
only when first used, and a cache without them says nothing about the signatures reads need. (Judged by
those, every process of a machine that never met an escape ran the numpy versions until the kernels were
loaded, the first large read of a process included, at several times the compiled kernels' cost.) Kernels
without a numpy version, and the error reports of the numpy versions, wait for the loading too
(:func:`load_compiled_kernels`).

A process that compiles kernels (the cold cache of a fresh install) finishes compiling them before it exits,
so that they are in the cache for the next process: a short script or CLI call would otherwise leave it
half-filled, and every later process would compile again. A process that only loads them from the cache does
not wait.

A process must not fork while the loading thread runs (the child would inherit numba's locks, held by a
thread it does not have): a fork waits for it to finish, and the child then has the kernels loaded, free.
That wait is a hook of ``os.register_at_fork``, registered when the loading first starts, after filelock's own
(see :func:`_register_fork_hooks`): filelock's closes its locks to other threads until the fork is done, the
loading thread included, which the wait would then wait for forever.
"""

from __future__ import annotations

import atexit
import importlib
import os
import threading

__all__ = [
    "KERNEL_MODULES",
    "WAIT_MIN_NNZ",
    "compiled_kernels",
    "kernels_loaded",
    "kernels_to_compile",
    "load_compiled_kernels",
    "prepare_kernels",
]

#: The modules that define kernels (``tests/test_jit.py`` checks that none is missing). None is imported by
#: ``import deltacells``.
KERNEL_MODULES = ("deltacells.codec._kernels", "deltacells.tiles._gather")

#: The modules whose ``warm_up()`` the loading thread runs, in this order: each runs kernels of the modules
#: above on tiny inputs, as reads call them.
WARM_UP_MODULES = ("deltacells.codec._warm_up", "deltacells.tiles._warm_up")

#: Nonzeros from which a read waits for the compiled kernels rather than run their numpy versions. Measured
#: on 100,000 resampled Visium cells (2-core machine, one thread, chunk by chunk): the numpy versions take
#: 13.6 ns a nonzero in stored gene order (the compiled kernels 3.6) and 32.8 ns in the original order, rows
#: sorted (7.0); loading the kernels takes about 0.3 s from numba's cache. A million nonzeros (about 2,700
#: such cells) run in numpy's versions in at most 0.03 s, well within what the loading costs.
WAIT_MIN_NNZ = 1_000_000

_loaded = threading.Event()
_progress = threading.Condition()  # notified when the kernels are loaded, and when the loading starts compiling
_compiling = False  # whether the loading thread compiles a kernel (numba's cache missed it: seconds)
_start_lock = threading.Lock()
_thread: threading.Thread | None = None
_fork_hooks_registered = False
_local = threading.local()  # .loading: this thread is the loading thread (its calls run the compiled kernels)


def compiled_kernels() -> bool:
    """Whether the caller should run numba's compiled kernels (``True``) or their numpy versions.

    ``True`` once the kernels are loaded in this process, and always on the loading thread itself. Otherwise
    the loading starts in the background (once per process) and the answer is ``False``.
    """
    if _usable():
        return True
    _start()
    return False


def kernels_loaded() -> bool:
    """Whether numba's kernels are loaded in this process (nothing is started: for work that has another way)."""
    return _usable()


def prepare_kernels(nnz: int = 0) -> None:
    """Before work on about ``nnz`` nonzeros: start loading the compiled kernels, and wait for them if it is large.

    Parameters
    ----------
    nnz
        The nonzeros the caller is about to decode or copy; 0 (a dataset just opened): only start loading.
        From :data:`WAIT_MIN_NNZ` on, returns once the kernels are loaded.
    """
    if _usable():
        return
    _start()
    if nnz >= WAIT_MIN_NNZ:
        with _progress:
            _progress.wait_for(lambda: _loaded.is_set() or _compiling)


def load_compiled_kernels() -> None:
    """Return once numba's kernels are loaded: wait for the loading thread (started now if need be)."""
    if _usable():
        return
    _start()
    _loaded.wait()


def _usable() -> bool:
    """Whether the compiled kernels can be called now: loaded, or this is the thread loading them."""
    return _loaded.is_set() or getattr(_local, "loading", False)


def kernels_to_compile() -> list[str]:
    """The kernels that no earlier process compiled into numba's cache on this machine (imports them).

    A process that finds some spends seconds compiling them (about 10 s for all of deltacells' on 2 cores);
    later processes load them from the cache. ``deltacells demo`` says so first.
    """
    for module in KERNEL_MODULES:
        importlib.import_module(module)
    from deltacells._jit import cache_index_path, compiled_kernels_list

    return [
        dispatcher.py_func.__qualname__
        for dispatcher in compiled_kernels_list()
        if not os.path.exists(cache_index_path(dispatcher))
    ]


def _start() -> None:
    global _thread
    with _start_lock:
        if _thread is None and not _loaded.is_set():
            _register_fork_hooks()
            _thread = threading.Thread(target=_load, name="deltacells-kernel-loading", daemon=True)
            _thread.start()


def _register_fork_hooks() -> None:
    """Make a fork wait for the loading thread (once a process), after filelock has registered its fork hooks.

    ``os.register_at_fork`` runs the ``before`` hooks in the reverse order of their registration, so this one
    runs before filelock's. filelock (4.x) closes its locks to every thread but the forking one from its
    ``before`` hook until the fork is done; the loading thread takes and releases the kernel cache's file lock
    (``deltacells._jit``) for each kernel it loads, so if filelock's hook ran first, the loading thread would
    stop at its next lock, and this hook, waiting for it, would never return: the fork (a ``DataLoader``
    worker, a notebook's ``!command``, ``multiprocessing``) would hang.
    """
    global _fork_hooks_registered
    if _fork_hooks_registered:
        return
    import filelock  # noqa: F401  # registers filelock's fork hooks (once), before this module's below

    os.register_at_fork(before=_wait_before_fork, after_in_child=_after_fork_in_child)
    _fork_hooks_registered = True


def _load() -> None:
    """The loading thread: import every kernel module and warm its kernels up, then say they are loaded."""
    _local.loading = True
    try:
        for module in KERNEL_MODULES:
            importlib.import_module(module)  # imports numba
        from deltacells._jit import add_compile_listener

        add_compile_listener(_compiles)
        for name in WARM_UP_MODULES:
            importlib.import_module(name).warm_up()
    except Exception:  # not raised here, on a thread nobody waits on: the kernels then load on
        pass  # their first call, in the caller's thread, where whatever failed fails again, and is reported
    finally:
        with _progress:
            _loaded.set()
            _progress.notify_all()


def _compiles() -> None:
    """Called by ``deltacells._jit`` before numba compiles a signature its cache lacks (on any thread)."""
    global _compiling
    if getattr(_local, "loading", False) and not _compiling:
        with _progress:
            _compiling = True  # large reads stop waiting: numpy's versions serve them while this compiles
            _progress.notify_all()


def _finish_compiling_at_exit() -> None:
    thread = _thread
    if thread is not None and _compiling and thread.is_alive():
        thread.join()


def _wait_before_fork() -> None:
    thread = _thread
    if thread is not None and thread is not threading.current_thread():
        thread.join()


def _after_fork_in_child() -> None:
    global _progress, _start_lock, _thread
    _progress = threading.Condition()
    _start_lock = threading.Lock()
    _thread = None  # the parent's thread had finished (see _wait_before_fork); loaded stays as it was


atexit.register(_finish_compiling_at_exit)
