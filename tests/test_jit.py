"""The kernels' on-disk cache: used under an inter-process lock held across each compilation, no code used for
another signature.

numba's own cache can pair one signature with another's machine code when processes compile at once (see
``deltacells._jit``). The end-to-end tests run a real kernel (``_copy``, compiled per output dtype) in
fresh interpreters whose numba cache is a temporary directory (``NUMBA_CACHE_DIR``), never the package's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numba
import pytest
from filelock import FileLock, Timeout
from numba.core import types

import deltacells
from deltacells import _jit
from deltacells._jit import LOCK_NAME, GuardedCache

#: Copies 1..5 into an output of each dtype named on the command line with the kernel ``_copy``; prints, per
#: dtype, whether numba's cache had it.
COPY_INTO = """
import sys
import numpy as np
from deltacells.tiles._gather import _copy

for name in sys.argv[1:]:
    source = np.arange(1, 6, dtype=np.int64)
    out = np.zeros(5, dtype=name)
    _copy(source, out)
    assert (out == source).all(), f"{name}: {out.tolist()}"
print(sum(_copy.stats.cache_hits.values()), sum(_copy.stats.cache_misses.values()))
"""


needs_jit = pytest.mark.skipif(numba.config.DISABLE_JIT, reason="NUMBA_DISABLE_JIT: nothing is compiled or cached")


def copy_into(cache_dir: Path, *dtypes: str) -> tuple[int, int]:
    """Run :data:`COPY_INTO` in a fresh interpreter; its cache hits and misses."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir)}
    done = subprocess.run(
        [sys.executable, "-c", COPY_INTO, *dtypes], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    hits, misses = map(int, done.stdout.split())
    return hits, misses


def data_files(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.rglob("*_copy-*.nbc"))


@needs_jit
def test_an_entry_holding_another_signatures_code_is_compiled_again_and_repaired(tmp_path):
    """What numba's race leaves (the index naming another signature's code) gives right values, and is mended."""
    assert copy_into(tmp_path, "int32", "float32") == (0, 2)
    first, second = data_files(tmp_path)
    swap = first.with_suffix(".swap")
    first.rename(swap)
    second.rename(first)
    swap.rename(second)  # each signature's entry now names the other's machine code

    assert copy_into(tmp_path, "int32", "float32") == (0, 2)  # not used: compiled again, saved over
    assert copy_into(tmp_path, "int32", "float32") == (2, 0)  # the cache is whole again


@needs_jit
def test_processes_starting_together_on_an_empty_cache_leave_it_right(tmp_path):
    """Four interpreters compile the kernel for different dtypes at once; then every dtype is right, from cache.

    Whether numba's race strikes in a given run is chance (the test above makes its outcome by hand); this one
    shows that the guard's lock, taken by real processes at once, neither blocks them nor loses an entry.
    """
    orders = [("int32", "float32"), ("float32", "int32"), ("float64", "int64"), ("int64", "float64")]
    with_cache = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    runs = [
        subprocess.Popen([sys.executable, "-c", COPY_INTO, *order], env=with_cache, stdout=subprocess.PIPE, text=True)
        for order in orders
    ]
    for run in runs:
        run.communicate(timeout=300)
        assert run.returncode == 0
    hits, misses = copy_into(tmp_path, "int32", "float32", "float64", "int64")
    assert (hits, misses) == (4, 0)


# ---------------------------------------------------------------------- the guard itself, in this process


class RecordingCache:
    """Stands in for numba's cache of one function: records whether the lock was held at each call."""

    def __init__(self, cache_path: Path, result: object = None) -> None:
        self.cache_path = str(cache_path)
        self.result = result
        self.calls: list[tuple[str, bool]] = []
        self.flushed = False

    def lock_held(self) -> bool:
        probe = FileLock(os.path.join(self.cache_path, LOCK_NAME), timeout=0)
        try:
            probe.acquire()
        except Timeout:
            return True
        probe.release()
        return False

    def load_overload(self, sig, target_context):
        self.calls.append(("load", self.lock_held()))
        return self.result

    def save_overload(self, sig, data):
        self.calls.append(("save", self.lock_held()))

    def flush(self) -> None:
        self.flushed = True


def compiled(*arg_types: types.Type) -> SimpleNamespace:
    """What numba's cache gives back (a ``CompileResult``), as far as the guard looks at it."""
    return SimpleNamespace(signature=SimpleNamespace(args=arg_types))


def compiling(guarded: GuardedCache, result: object = None):
    """What numba's ``Dispatcher.compile`` does with the cache, run through the guard's lock: load, else save."""

    def compile_signature(sig):
        loaded = guarded.load_overload(sig, None)
        if loaded is None:
            guarded.save_overload(sig, object())
        return loaded

    return guarded.locking(compile_signature)


def test_a_compilation_holds_the_lock_while_it_loads_and_saves(tmp_path):
    inner = RecordingCache(tmp_path, result=None)
    guarded = GuardedCache(inner)
    assert compiling(guarded)((types.int32, types.float32)) is None
    assert inner.calls == [("load", True), ("save", True)]  # one step under the lock: others wait, then load it
    inner.result = compiled(types.int32, types.float32)
    assert compiling(guarded)((types.int32, types.float32)) is inner.result
    guarded.flush()
    assert inner.flushed and guarded.cache_path == str(tmp_path)


def test_the_lock_is_taken_again_by_a_kernel_compiled_within_another(tmp_path):
    outer, inner = GuardedCache(RecordingCache(tmp_path)), GuardedCache(RecordingCache(tmp_path))
    inside = compiling(inner)
    began = time.monotonic()
    compile_outer = outer.locking(lambda sig: inside(sig))  # same directory: the same process's lock, re-entered
    compile_outer((types.int32,))
    assert time.monotonic() - began < _jit.LOCK_TIMEOUT
    assert inner._cache.calls == [("load", True), ("save", True)]


def test_code_compiled_for_another_signature_is_not_handed_out(tmp_path):
    guarded = GuardedCache(RecordingCache(tmp_path, result=compiled(types.int32)))
    assert compiling(guarded)((types.float32,)) is None


def test_nothing_is_loaded_or_saved_without_the_lock(tmp_path, monkeypatch):
    monkeypatch.setattr(_jit, "LOCK_TIMEOUT", 0.2)
    inner = RecordingCache(tmp_path, result=compiled(types.int32))
    guarded = GuardedCache(inner)
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:  # another process would hold it the same way: its own open file, locked
        with FileLock(tmp_path / LOCK_NAME):
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        held.wait(10)
        began = time.monotonic()
        assert compiling(guarded)((types.int32,)) is None  # compiled in the process, as if nothing were cached
        assert time.monotonic() - began >= 0.2  # waited for the lock, then gave up
    finally:
        release.set()
        holder.join()
    assert inner.calls == []


def test_nothing_is_loaded_outside_a_compilation(tmp_path):
    inner = RecordingCache(tmp_path, result=compiled(types.int32))
    guarded = GuardedCache(inner)
    assert guarded.load_overload((types.int32,), None) is None
    guarded.save_overload((types.int32,), object())
    assert inner.calls == []


@needs_jit
def test_processes_starting_together_on_an_empty_cache_compile_a_signature_once(tmp_path):
    """Three interpreters ask for the same kernel and signature at once: one compiles it, the others load it.

    As a torch ``DataLoader``'s or a dask cluster's workers do on a fresh install: without the lock held across
    the compilation, each would compile (and save) it.
    """
    with_cache = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", COPY_INTO, "float32"], env=with_cache, stdout=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    counts = []
    for run in runs:
        out, _ = run.communicate(timeout=300)
        assert run.returncode == 0
        counts.append(tuple(map(int, out.split())))
    assert sorted(counts) == [(0, 1), (1, 0), (1, 0)], counts  # (hits, misses) of each process


@needs_jit
def test_every_kernel_is_guarded():
    from deltacells.codec import _kernels
    from deltacells.tiles import _gather

    dispatchers = [
        value
        for module in (_kernels, _gather)
        for value in vars(module).values()
        if isinstance(value, numba.core.registry.CPUDispatcher)
    ]
    assert len(dispatchers) > 20
    assert all(isinstance(d._cache, GuardedCache) for d in dispatchers)


def test_kernel_modules_lists_every_module_with_kernels():
    from deltacells._kernel_loading import KERNEL_MODULES

    package = Path(deltacells.__file__).parent
    with_kernels = {
        "deltacells." + ".".join(path.relative_to(package).with_suffix("").parts)
        for path in package.rglob("*.py")
        if "@kernel" in path.read_text(encoding="utf-8") and path.name != "_jit.py"
    }
    assert with_kernels == set(KERNEL_MODULES)


@needs_jit
def test_kernels_to_compile_on_a_fresh_cache(tmp_path):
    """A fresh cache: every kernel is to compile; once the kernels are loaded, none of those reads use."""
    script = (
        "from deltacells._kernel_loading import kernels_to_compile\n"
        "from deltacells._kernel_loading import load_compiled_kernels\n"
        "before = kernels_to_compile()\n"
        "load_compiled_kernels()\n"
        "after = kernels_to_compile()\n"
        "print(len(before), 'decode_chunk' in before, 'decode_chunk' in after)\n"
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    n_before, before, after = out.stdout.split()
    assert int(n_before) > 20 and before == "True" and after == "False"
