"""Helpers of the reliability tests, importable by the child processes they start.

Children come from a multiprocessing *forkserver* that has already imported deltacells (see
:func:`mp_context`): starting one costs milliseconds instead of the second and a half of a fresh
interpreter, which is what lets the tests kill, race and restart dozens of processes in CI time.
"""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing
import os
import pickle
import re
import signal
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
FUZZ_DIR = ROOT / "fuzz"  # the fuzzing package deltacells_fuzz and its script
FUZZ_SCRIPT = FUZZ_DIR / "fuzz_decode.py"
BENCH_MEMORY = ROOT / "benchmarks" / "bench_memory.py"

_PRELOAD = ["deltacells", "deltacells.obs", "pyarrow.ipc", "pyarrow.parquet", "reliability_lib"]


def mp_context() -> Any:
    """A multiprocessing context whose children fork from a server that has imported deltacells."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_PRELOAD)
    return context


def die() -> None:
    """SIGKILL this process (what an OOM killer, a preempted job or ``kill -9`` does: no cleanup at all)."""
    os.kill(os.getpid(), signal.SIGKILL)


def _report_errors(out_path: str | None, body: Callable[[], Any]) -> Any:
    try:
        return body()
    except BaseException:
        if out_path:
            Path(out_path + ".err").write_text(traceback.format_exc())
        raise


# ---------------------------------------------------------------------------------------------- test helpers


def snapshot(root: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``root``."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def load_pickle(path: Path) -> Any:
    """The object pickled at ``path`` (or the traceback a child left beside it)."""
    err = path.with_name(path.name + ".err")
    if err.exists():
        pytest.fail(f"the child process failed:\n{err.read_text()}")
    with path.open("rb") as f:
        return pickle.load(f)


def join_all(processes: list[Any], timeout: float = 60) -> list[int | None]:
    """Wait for ``processes``; kill (and fail on) any still running after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    for process in processes:
        process.join(max(0.1, deadline - time.monotonic()))
    stuck = [p for p in processes if p.is_alive()]
    for process in stuck:
        os.kill(process.pid, 9)
        process.join(5)
    assert not stuck, f"{len(stuck)} child process(es) still running after {timeout} s"
    return [p.exitcode for p in processes]


# ---------------------------------------------------------------------------------------------- crash mid-write


def arm_kill_switch(plan: dict[str, Any]) -> None:
    """Make this process SIGKILL itself at the moment ``plan`` names, by hooking the writer's I/O.

    ``plan["hook"]``:

    ``before_write`` / ``after_write``
        Before / after the ``nth`` object whose name matches ``plan["match"]`` is stored (``FsspecStore.write``).
    ``partial_write``
        Halfway through writing that object's temporary file (a torn file).
    ``before_rename``
        With that object's temporary file complete, just before it is renamed into place.
    ``after_remove``
        After ``FsspecStore.delete`` removed the ``nth`` entry matching (replacing a dataset being overwritten).
    ``before_replace`` / ``after_replace``
        Before / after ``FsspecStore.replace`` moved the ``nth`` object matching (an append rolling forward).

    Names are matched relative to the dataset, also when an overwrite or an append writes them under a staging
    prefix.
    """
    import builtins

    from deltacells.format import APPEND_PREFIX, STAGING_PREFIX
    from deltacells.storage import FsspecStore
    from deltacells.storage import _fsspec as storage

    hook, match, nth = plan.get("hook"), re.compile(plan.get("match", "")), int(plan.get("nth", 1))
    if hook is None:
        return
    lock = threading.Lock()
    seen = {"count": 0}

    staged = re.compile(f"({re.escape(STAGING_PREFIX)}|{re.escape(APPEND_PREFIX)})" + r"[0-9a-f]+/")

    def hit(name: str) -> bool:
        if not match.fullmatch(staged.sub("", name, count=1)):
            return False
        with lock:
            seen["count"] += 1
            return seen["count"] == nth

    real_write, real_remove = FsspecStore.write, FsspecStore.delete

    def dying_around(real: Callable[..., None], name_of: Callable[..., str]) -> Callable[..., None]:
        """``real`` that dies before (``before_*`` hooks) or after it handles the planned object."""

        def call(self: Any, *args: Any) -> None:
            now = hit(name_of(*args))
            if now and hook.startswith("before"):
                die()
            real(self, *args)
            if now:
                die()

        return call

    if hook in ("before_write", "after_write"):
        FsspecStore.write = dying_around(real_write, lambda name, data: name)
    elif hook in ("partial_write", "before_rename"):
        armed = threading.local()
        real_open, real_replace = builtins.open, os.replace

        class Torn:
            def __init__(self, f: Any) -> None:
                self.f = f

            def __enter__(self) -> Torn:
                return self

            def __exit__(self, *exc: object) -> None:
                self.f.close()

            def write(self, data: bytes) -> int:
                self.f.write(data[: len(data) // 2])
                self.f.flush()
                die()
                return 0  # pragma: no cover

        def opener(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            f = real_open(path, mode, *args, **kwargs)
            return Torn(f) if getattr(armed, "on", False) and hook == "partial_write" else f

        def replace(src: Any, dst: Any) -> None:
            if getattr(armed, "on", False):
                die()
            real_replace(src, dst)

        def write(self: Any, name: str, data: bytes) -> None:
            armed.on = hit(name)
            try:
                real_write(self, name, data)
            finally:
                armed.on = False

        storage.open = opener  # FsspecStore.write's open() and os.replace(), in this child only
        storage.os = _OsProxy(replace)
        FsspecStore.write = write
    elif hook in ("before_replace", "after_replace"):
        FsspecStore.replace = dying_around(FsspecStore.replace, lambda src, dst: dst)
    elif hook == "after_remove":

        def remove(self: Any, name: str) -> None:
            real_remove(self, name)
            if hit(name):
                die()

        FsspecStore.delete = remove
    else:
        msg = f"unknown hook {hook!r}"
        raise ValueError(msg)


class _OsProxy:
    """``os`` with ``replace`` swapped (for the storage module of a child only)."""

    def __init__(self, replace: Callable[[Any, Any], None]) -> None:
        self.replace = replace

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)


def convert_and_maybe_die(
    source: str, out: str, options: dict[str, Any], plan: dict[str, Any], started: Any, finished: Any
) -> None:
    """Child: ``write_deltacells`` the pickled AnnData ``source`` to ``out``, dying as ``plan`` says."""
    import deltacells

    with open(source, "rb") as f:
        adata = pickle.load(f)
    arm_kill_switch(plan)
    started.set()
    deltacells.write_deltacells(adata, out, progress=False, overwrite=True, **options)
    finished.set()


def run_killable(
    ctx: Any, target: Callable[..., None], args: tuple[Any, ...], plan: dict[str, Any], *, kill_after: float | None
) -> tuple[int | None, bool, float]:
    """Run ``target(*args, hooks, started, finished)`` in a child; SIGKILL it ``kill_after`` s after it started.

    ``hooks`` are the plan's kill point (``hook``, ``match``, ``nth``), which the child arms itself. Without
    them and without ``kill_after`` the run is uninterrupted and timed. Returns the exit code, whether the
    child finished, and the seconds from its start.
    """
    started, finished = ctx.Event(), ctx.Event()
    hooks = {k: v for k, v in plan.items() if k in ("hook", "match", "nth")}
    child = ctx.Process(target=target, args=(*args, hooks, started, finished))
    child.start()
    assert started.wait(60), "the child did not start"
    began = time.monotonic()
    if kill_after is not None:
        time.sleep(kill_after)
        if child.is_alive():
            os.kill(child.pid, signal.SIGKILL)
    elif not hooks:  # an uninterrupted run: time the write itself
        assert finished.wait(60), "the child did not finish"
    seconds = time.monotonic() - began
    (code,) = join_all([child], 60)
    return code, finished.is_set(), seconds


def append_and_maybe_die(source: str, out: str, plan: dict[str, Any], started: Any, finished: Any) -> None:
    """Child: append the pickled AnnData ``source`` to the dataset ``out``, dying as ``plan`` says."""
    import deltacells

    with open(source, "rb") as f:
        adata = pickle.load(f)
    arm_kill_switch(plan)
    started.set()
    deltacells.write_deltacells(adata, out, progress=False, append=True)
    finished.set()


# ---------------------------------------------------------------------------------------------- obs cache


def _log(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:  # O_APPEND: short lines of several processes do not mix
        f.write(line + "\n")


def logging_store(root: str, log_path: str, delay: float = 0.0) -> Any:
    """A FsspecStore that logs whole reads and ranged opens to a file shared by processes, each after ``delay`` s."""
    from deltacells.storage import FsspecStore

    class LoggingStore(FsspecStore):
        def read(self, name: str, start: int | None = None, end: int | None = None) -> bytes:
            if start is None and end is None:
                _log(log_path, f"{os.getpid()} read {name.rsplit('/', 1)[-1]}")
                time.sleep(delay)
            return super().read(name, start, end)

        def open_file(self, path: str, size: int | None = None) -> Any:
            _log(log_path, f"{os.getpid()} open {path.rsplit('/', 1)[-1]}")
            time.sleep(delay)
            return super().open_file(path, size)

    return LoggingStore(root)


def watch_cache_files(log_path: str) -> None:
    """Log every cache file this process memory-maps (with its SHA-256 then) and every rename it makes."""
    import pyarrow as pa

    real_map, real_replace = pa.memory_map, os.replace

    def memory_map(path: str, *args: Any, **kwargs: Any) -> Any:
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        _log(log_path, f"{os.getpid()} mmap {os.path.basename(path)} {digest}")
        return real_map(path, *args, **kwargs)

    def replace(src: Any, dst: Any) -> None:
        real_replace(src, dst)
        _log(log_path, f"{os.getpid()} replace {os.path.basename(os.fspath(dst))}")

    pa.memory_map = memory_map
    os.replace = replace


def localize(
    root: str,
    manifest_json: str,
    cache_dir: str,
    columns: list[str],
    log_path: str,
    out_path: str,
    *,
    barrier: Any = None,
    started: Any = None,
    delay: float = 0.0,
) -> None:
    """Child: read obs ``columns`` through the cache (all children together at ``barrier``); pickle the frame."""

    def body() -> None:
        from deltacells.format import Manifest
        from deltacells.obs import ObsStore

        watch_cache_files(log_path)
        obs = ObsStore(logging_store(root, log_path, delay), Manifest.from_json(manifest_json), cache_dir=cache_dir)
        if barrier is not None:
            barrier.wait(timeout=60)
        if started is not None:
            started.set()
        frame = obs.to_dataframe(columns)
        _log(log_path, f"{os.getpid()} done")
        frame.to_pickle(out_path)

    _report_errors(out_path, body)


def hold_lock(lock_path: str, ready: Any) -> None:
    """Child: take the obs cache lock (as a localizing process does) and keep it until killed."""
    from filelock import FileLock

    lock = FileLock(lock_path)
    lock.acquire()  # (a lock object that is garbage collected releases its lock: keep the reference)
    ready.set()
    time.sleep(120)
    lock.release()


# ---------------------------------------------------------------------------------------------- unprivileged


def as_nobody(action: str, root: str, manifest_json: str, cache_dir: str, warm_cache: str, out_path: str) -> None:
    """Child started as root: drop to uid/gid 65534 (nobody), then read obs through ``cache_dir``.

    Everything the read needs is imported, and a first read into the writable ``warm_cache`` is made, while
    still root: after the switch the interpreter's own files (under ``/root``) are out of reach.
    """
    import pickle as _pickle

    from deltacells.errors import ObsCacheError
    from deltacells.format import Manifest
    from deltacells.obs import ObsStore
    from deltacells.storage import FsspecStore

    manifest = Manifest.from_json(manifest_json)
    ObsStore(FsspecStore(root), manifest, cache_dir=warm_cache).to_dataframe()
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
    result: dict[str, Any] = {"uid": os.getuid()}
    try:
        frame = ObsStore(FsspecStore(root), manifest, cache_dir=cache_dir).to_dataframe(["pct_mito"])
        result.update(ok=True, frame=frame)
    except ObsCacheError as exc:
        result.update(ok=False, error="ObsCacheError", message=str(exc), is_oserror=isinstance(exc, OSError))
    except Exception as exc:
        result.update(ok=False, error=type(exc).__name__, message=traceback.format_exc())
    with open(out_path, "wb") as f:
        _pickle.dump(result, f)


def read_obs_in_child(root: str, cache_dir: str, columns: list[str] | None, out_path: str, fsize: int = 0) -> None:
    """Child: ``deltacells.read_obs(root, columns)``, with an optional file-size limit; pickle the outcome."""
    import resource

    import deltacells

    if fsize:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    result: dict[str, Any]
    try:
        result = {"ok": True, "frame": deltacells.read_obs(root, columns, cache_dir=cache_dir)}
    except Exception as exc:
        result = {"ok": False, "error": type(exc).__name__, "message": str(exc), "is_oserror": isinstance(exc, OSError)}
    finally:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    with open(out_path, "wb") as f:
        pickle.dump(result, f)
