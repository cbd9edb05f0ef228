"""Processes racing to localize obs into one cache, and a process killed while it holds the cache lock.

(tests/obs/test_concurrency.py has 4 processes fetching two overlapping groups; here 8 fetch the same
columns, every memory-mapped file is checked to be the final one, and the lock holder dies.)
"""

from __future__ import annotations

import collections
import contextlib
import errno
import fcntl
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from reliability_lib import hold_lock, join_all, load_pickle, localize, snapshot

import deltacells
from deltacells.datasets import synthetic_counts
from deltacells.obs import ObsStore, column_file_name
from deltacells.storage import FsspecStore

N_PROCESSES = 8
COLUMNS = ["cell_type", "donor", "total_counts", "pct_mito"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """4000 cells in 63 tiles, obs in 8 shards; the expected obs frame."""
    root = tmp_path_factory.mktemp("conc") / "ds"
    adata = synthetic_counts(4000, 20, seed=5)
    deltacells.write_deltacells(adata, root, tile_size=64, obs_tiles_per_file=8, level=1, progress=False)
    ds = deltacells.open_dataset(root)
    expected = deltacells.read_obs(root, COLUMNS, cache_dir=tmp_path_factory.mktemp("reference-cache"))
    return {"root": root, "manifest": ds.manifest, "expected": expected}


def obs_directory(dataset: dict[str, Any], cache: Path) -> Path:
    return ObsStore(FsspecStore(dataset["root"]), dataset["manifest"], cache_dir=cache).directory


def events(log: Path) -> list[tuple[int, str, str]]:
    rows = [[*line.split(" ", 2), ""] for line in log.read_text().splitlines()]
    return [(int(pid), what, rest[0] if rest else "") for pid, what, *rest in rows]


def start_localizer(ctx: Any, dataset: dict[str, Any], cache: Path, log: Path, out: Path, **options: Any) -> Any:
    process = ctx.Process(
        target=localize,
        args=(str(dataset["root"]), dataset["manifest"].to_json(), str(cache), options.pop("columns", COLUMNS)),
        kwargs={"log_path": str(log), "out_path": str(out), **options},
    )
    process.start()
    return process


def test_eight_processes_fetch_each_column_once(dataset: dict[str, Any], ctx: Any, tmp_path: Path) -> None:
    cache, log = tmp_path / "cache", tmp_path / "log.txt"
    barrier = ctx.Barrier(N_PROCESSES)
    outputs = [tmp_path / f"out{i}.pkl" for i in range(N_PROCESSES)]
    processes = [
        # half ask in the other order; every shard read is slowed down so that the others queue on the lock
        start_localizer(
            ctx, dataset, cache, log, out, barrier=barrier, delay=0.05, columns=COLUMNS if i % 2 else COLUMNS[::-1]
        )
        for i, out in enumerate(outputs)
    ]
    assert join_all(processes, 120) == [0] * N_PROCESSES
    for i, out in enumerate(outputs):
        frame = load_pickle(out)
        pd.testing.assert_frame_equal(frame[COLUMNS], dataset["expected"], check_exact=True, obj=f"process {i}")

    log_events = events(log)
    assert {pid for pid, what, _ in log_events if what == "done"} == {p.pid for p in processes}
    directory = obs_directory(dataset, cache)
    expected_files = {column_file_name(c) for c in ["_index", *COLUMNS]}
    renamed = collections.Counter(name for _, what, name in log_events if what == "replace" and name.endswith(".arrow"))
    assert renamed == dict.fromkeys(expected_files, 1), "each column file is written (renamed into place) once"
    whole = collections.Counter(name for _, what, name in log_events if what == "read" and name.endswith(".parquet"))
    n_shards = dataset["manifest"].n_obs_shards
    assert whole == {f"obs_{s:04d}.parquet": 1 for s in range(n_shards)}, "each shard is fetched (and checked) once"
    assert [e for e in log_events if e[1] == "open"] == [], "nobody needed a second, ranged pass over the shards"
    # every file anyone memory-mapped was the complete, final file (never a temporary or a partial one)
    final = {name: digest for name, digest in snapshot(directory).items() if name.endswith(".arrow")}
    mapped = [(pid, rest.split(" ")) for pid, what, rest in log_events if what == "mmap"]
    assert len({pid for pid, _ in mapped}) == N_PROCESSES
    for pid, (name, digest) in mapped:
        assert name in final and digest == final[name], f"process {pid} mapped {name} with other contents"
    assert sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp")) == []


def _try_lock(path: Path) -> bool:
    """Whether a non-blocking flock on ``path`` succeeds (released at once)."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        return False
    finally:
        os.close(fd)  # closing releases a lock we got
    return True


@contextlib.contextmanager
def lock_holder(ctx: Any, lock: Path) -> Iterator[Any]:
    """A child process that holds the cache lock ``lock`` until killed (killed on the way out in any case)."""
    ready = ctx.Event()
    holder = ctx.Process(target=hold_lock, args=(str(lock), ready))
    holder.start()
    try:
        assert ready.wait(30), "the lock holder did not start"
        yield holder
    finally:
        if holder.is_alive():
            os.kill(holder.pid, signal.SIGKILL)
        holder.join(10)


def test_the_os_releases_the_lock_of_a_killed_process(dataset: dict[str, Any], ctx: Any, tmp_path: Path) -> None:
    """filelock uses flock(2): the lock belongs to an open file, which the kernel closes when the holder dies."""
    lock = obs_directory(dataset, tmp_path / "cache") / ".lock"
    lock.parent.mkdir(parents=True)
    with lock_holder(ctx, lock) as holder:
        assert not _try_lock(lock), "the holder has the lock"
        os.kill(holder.pid, signal.SIGKILL)
        join_all([holder], 10)
        assert holder.exitcode == -signal.SIGKILL
        assert lock.exists(), "the lock file stays (stale), yet does not lock anything"
        assert _try_lock(lock), "the kernel released the dead holder's lock"


def test_killed_lock_holder_does_not_block_others(dataset: dict[str, Any], ctx: Any, tmp_path: Path) -> None:
    cache, log = tmp_path / "cache", tmp_path / "log.txt"
    lock = obs_directory(dataset, cache) / ".lock"
    lock.parent.mkdir(parents=True)
    started = ctx.Event()
    with lock_holder(ctx, lock) as holder:
        waiter = start_localizer(ctx, dataset, cache, log, tmp_path / "out.pkl", started=started)
        assert started.wait(30)
        time.sleep(1.0)
        assert waiter.is_alive() and "done" not in log.read_text(), "the localizer waits for the lock"
        killed = time.monotonic()
        os.kill(holder.pid, signal.SIGKILL)
        # the first shard is read under the lock: that is when the waiter got it
        while "obs_0000.parquet" not in log.read_text() and time.monotonic() - killed < 30:
            time.sleep(0.01)
        waited = time.monotonic() - killed
        assert join_all([waiter], 60) == [0]
    assert waited < 5, f"the localizer got the lock {waited:.1f} s after its holder died"
    pd.testing.assert_frame_equal(load_pickle(tmp_path / "out.pkl")[COLUMNS], dataset["expected"], check_exact=True)


def _kill_mid_fetch(dataset: dict[str, Any], ctx: Any, cache: Path, log: Path, out: Path) -> list[str]:
    """Start a slow localizer, SIGKILL it once it is fetching (lock held, column files half written)."""
    slow = start_localizer(ctx, dataset, cache, log, out, delay=0.3)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "obs_0002.parquet" not in (log.read_text() if log.exists() else ""):
        time.sleep(0.02)
    directory = obs_directory(dataset, cache)
    partial = sorted(p.name for p in directory.glob("*.arrow.*.tmp"))
    os.kill(slow.pid, signal.SIGKILL)
    join_all([slow], 10)
    assert slow.exitcode == -signal.SIGKILL
    assert partial, "killed while its column files were being written"
    assert not list(directory.glob("*.arrow")), "no column file was complete"
    return partial


def test_localizer_killed_mid_fetch(dataset: dict[str, Any], ctx: Any, tmp_path: Path) -> None:
    cache, log = tmp_path / "cache", tmp_path / "log.txt"
    partial = _kill_mid_fetch(dataset, ctx, cache, log, tmp_path / "dead.pkl")
    began = time.monotonic()
    after = start_localizer(ctx, dataset, cache, log, tmp_path / "out.pkl")
    assert join_all([after], 60) == [0]
    assert time.monotonic() - began < 30, "the dead localizer's lock and files did not hold the next one up"
    pd.testing.assert_frame_equal(load_pickle(tmp_path / "out.pkl")[COLUMNS], dataset["expected"], check_exact=True)
    mapped = [rest.split(" ")[0] for pid, what, rest in events(log) if what == "mmap" and pid == after.pid]
    assert mapped and not [m for m in mapped if m.endswith(".tmp") or m in partial]


def test_localizer_removes_temporary_files_of_a_killed_one(dataset: dict[str, Any], ctx: Any, tmp_path: Path) -> None:
    """Every killed job used to leave its (possibly GB-sized) *.arrow.<hex>.tmp files for good (until c2c022d)."""
    cache, log = tmp_path / "cache", tmp_path / "log.txt"
    _kill_mid_fetch(dataset, ctx, cache, log, tmp_path / "dead.pkl")
    deltacells.read_obs(dataset["root"], COLUMNS, cache_dir=cache)
    assert sorted(p.name for p in obs_directory(dataset, cache).glob("*.tmp")) == []
