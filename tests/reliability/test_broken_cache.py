"""Damaged, foreign, read-only and full obs caches (what tests/obs/test_cache.py does not cover already).

Covered there: a cached file truncated in half, missing a batch, merged into one batch, with shifted rows,
foreign bytes, empty, renamed or retyped; a read-only cache as a non-root user. Here: files copied from
another fingerprint's directory, an extra batch, files torn at many points, a damaged offsets buffer, a
read-only cache as an unprivileged user when the tests run as root, a full disk (ENOSPC) and a file-size
limit (EFBIG, a real I/O error raised by Arrow's C++ writer).
"""

from __future__ import annotations

import errno
import io
import os
import pathlib
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from reliability_lib import as_nobody, join_all, load_pickle, read_obs_in_child

import deltacells
from deltacells.datasets import synthetic_counts
from deltacells.errors import ObsCacheError
from deltacells.obs import ObsStore, column_file_name
from deltacells.storage import FsspecStore

COLUMN = "total_counts"


def write(root: Path, *, seed: int, tile_size: int = 100) -> Path:
    adata = synthetic_counts(1200, 30, seed=seed)
    deltacells.write_deltacells(adata, root, tile_size=tile_size, obs_tiles_per_file=4, level=1, progress=False)
    return root


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three datasets of 1200 cells: ``a`` and ``b`` in the same tiles (other values), ``c`` in other tiles."""
    base = tmp_path_factory.mktemp("broken")
    return {
        "a": write(base / "a", seed=1),
        "b": write(base / "b", seed=2),
        "c": write(base / "c", seed=3, tile_size=64),
    }


@pytest.fixture(scope="module")
def expected(datasets: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, pd.DataFrame]:
    cache = tmp_path_factory.mktemp("expected-cache")
    return {name: deltacells.read_obs(root, cache_dir=cache) for name, root in datasets.items()}


def cached_file(root: Path, cache: Path, column: str = COLUMN) -> Path:
    store = FsspecStore(root)
    obs = ObsStore(store, deltacells.open_dataset(store).manifest, cache_dir=cache)
    return obs.directory / column_file_name(column)


def batches(path: Path) -> list[pa.RecordBatch]:
    reader = pa.ipc.open_file(pa.BufferReader(path.read_bytes()))  # a copy: the file is rewritten next
    return [reader.get_batch(i) for i in range(reader.num_record_batches)]


def rewrite(path: Path, parts: list[pa.RecordBatch]) -> None:
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, parts[0].schema) as writer:
        for batch in parts:
            writer.write_batch(batch)


def assert_refetched(root: Path, cache: Path, good: bytes, expected: pd.DataFrame) -> None:
    """Reading gives the right values, and the damaged file was replaced by a freshly fetched one."""
    got = deltacells.read_obs(root, [COLUMN], cache_dir=cache)
    pd.testing.assert_series_equal(got[COLUMN], expected[COLUMN], check_exact=True)
    assert cached_file(root, cache).read_bytes() == good, "deleted and fetched again"
    assert not list(cached_file(root, cache).parent.glob("*.tmp"))


# ---------------------------------------------------------------------------------------------- damaged files


def test_file_from_another_fingerprint_with_other_tiles_is_refetched(
    datasets: dict[str, Path], expected: dict[str, pd.DataFrame], tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    deltacells.read_obs(datasets["b"], [COLUMN], cache_dir=cache)
    deltacells.read_obs(datasets["c"], [COLUMN], cache_dir=cache)
    target = cached_file(datasets["b"], cache)
    good = target.read_bytes()
    shutil.copyfile(cached_file(datasets["c"], cache), target)  # same name and type, 19 batches instead of 12
    assert_refetched(datasets["b"], cache, good, expected["b"])


def test_file_from_another_fingerprint_with_the_same_tiles_is_refetched(
    datasets: dict[str, Path], expected: dict[str, pd.DataFrame], tmp_path: Path
) -> None:
    """Same name, type, batches and rows, other values: only the fingerprint in the file tells (found here;
    before c2c022d such a file was served as is, silently wrong)."""
    cache = tmp_path / "cache"
    deltacells.read_obs(datasets["a"], [COLUMN], cache_dir=cache)
    deltacells.read_obs(datasets["b"], [COLUMN], cache_dir=cache)
    target = cached_file(datasets["b"], cache)
    good = target.read_bytes()
    assert cached_file(datasets["a"], cache).parent != target.parent
    shutil.copyfile(cached_file(datasets["a"], cache), target)
    assert not expected["a"][COLUMN].equals(expected["b"][COLUMN])
    assert_refetched(datasets["b"], cache, good, expected["b"])


def test_file_with_an_extra_batch_is_refetched(
    datasets: dict[str, Path], expected: dict[str, pd.DataFrame], tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    deltacells.read_obs(datasets["b"], [COLUMN], cache_dir=cache)
    target = cached_file(datasets["b"], cache)
    good = target.read_bytes()
    parts = batches(target)
    rewrite(target, [*parts, parts[-1]])
    assert_refetched(datasets["b"], cache, good, expected["b"])


@pytest.mark.parametrize("cut", [8, 0.25, 0.5, 0.9, -40, -10, -6, -1])
def test_torn_file_is_refetched(
    datasets: dict[str, Path], expected: dict[str, pd.DataFrame], tmp_path: Path, cut: float
) -> None:
    """A file cut anywhere: inside the header, the batches, the footer, the footer length, the end magic."""
    cache = tmp_path / "cache"
    deltacells.read_obs(datasets["b"], [COLUMN], cache_dir=cache)
    target = cached_file(datasets["b"], cache)
    good = target.read_bytes()
    size = int(cut * len(good)) if isinstance(cut, float) else cut % len(good)
    target.write_bytes(good[:size])
    assert_refetched(datasets["b"], cache, good, expected["b"])


def _damage_offsets(path: Path) -> None:
    """One string offset of the first batch points a gigabyte past the data (what one flipped bit can do)."""
    parts = batches(path)
    column = parts[0].column(0)
    validity, offsets, data = column.buffers()
    values = np.frombuffer(offsets, dtype=np.int32).copy()
    values[2] = 1 << 30
    bad = pa.Array.from_buffers(column.type, len(column), [validity, pa.py_buffer(values.tobytes()), data])
    rewrite(path, [pa.record_batch([bad], schema=parts[0].schema), *parts[1:]])


def test_damaged_string_offsets_do_not_crash(
    datasets: dict[str, Path], expected: dict[str, pd.DataFrame], ctx: Any, tmp_path: Path
) -> None:
    """In a child process: before c2c022d, Array.validate() let the offsets through and the reader segfaulted."""
    cache = tmp_path / "cache"
    deltacells.read_obs(datasets["b"], [], cache_dir=cache)  # the index (column _index, strings) is cached
    _damage_offsets(cached_file(datasets["b"], cache, "_index"))
    out = tmp_path / "out.pkl"
    child = ctx.Process(target=read_obs_in_child, args=(str(datasets["b"]), str(cache), [], str(out)))
    child.start()
    (code,) = join_all([child], 60)
    assert code == 0, f"the reader died with exit code {code} (-11: segmentation fault)"
    result = load_pickle(out)
    assert result["ok"], result
    pd.testing.assert_index_equal(result["frame"].index, expected["b"].index)


# ---------------------------------------------------------------------------------------------- read-only caches


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every user can read (tmp_path is under a directory only root can enter)."""
    base = Path(tempfile.mkdtemp(prefix="deltacells-reliability-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _nobody(ctx: Any, root: Path, cache: Path, base: Path) -> dict[str, Any]:
    out_dir = base / "out"
    out_dir.mkdir(mode=0o777)
    out_dir.chmod(0o777)
    out = out_dir / "result.pkl"
    manifest = deltacells.open_dataset(root).manifest.to_json()
    child = ctx.Process(target=as_nobody, args=("read", str(root), manifest, str(cache), str(base / "warm"), str(out)))
    child.start()
    assert join_all([child], 60) == [0]
    result = load_pickle(out)
    assert result["uid"] == 65534
    return result


root_only = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="as a non-root user, tests/obs/test_cache.py::test_read_only_cache_dir runs this case directly",
)


@root_only
def test_read_only_cache_as_an_unprivileged_user(ctx: Any, shared_dir: Path) -> None:
    root = write(shared_dir / "ds", seed=4)
    cache = shared_dir / "cache"
    cache.mkdir(mode=0o755)  # owned by root: nobody can read it but not write it
    result = _nobody(ctx, root, cache, shared_dir)
    assert not result["ok"] and result["error"] == "ObsCacheError", result
    assert result["is_oserror"]
    message = result["message"]
    assert str(cache) in message and "cache_dir=" in message and "$DELTACELLS_CACHE" in message, message
    assert "Permission denied" in message or "not writable" in message, message


@root_only
def test_read_only_cache_holding_the_columns_still_reads_as_an_unprivileged_user(ctx: Any, shared_dir: Path) -> None:
    root = write(shared_dir / "ds", seed=4)
    cache = shared_dir / "cache"
    expected = deltacells.read_obs(root, ["pct_mito"], cache_dir=cache)  # filled by root
    for path in [cache, *cache.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod(stat.S_IMODE(mode) & ~0o222 | (0o555 if path.is_dir() else 0o444))
    result = _nobody(ctx, root, cache, shared_dir)
    assert result["ok"], result
    pd.testing.assert_frame_equal(result["frame"], expected, check_exact=True)


# ---------------------------------------------------------------------------------------------- a full disk


class _FullDisk(io.RawIOBase):
    """A file that takes ``budget[0]`` more bytes in all, then fails with ENOSPC (as a full disk does)."""

    def __init__(self, path: str, budget: list[int]) -> None:
        self._file = open(path, "wb")  # noqa: SIM115 (closed by close())
        self._budget = budget

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        data = bytes(data)
        if len(data) > self._budget[0]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._budget[0] -= len(data)
        return self._file.write(data)

    def close(self) -> None:
        self._file.close()
        super().close()


def _assert_clear(error: BaseException, cache: Path, reason: str) -> None:
    assert isinstance(error, ObsCacheError) and isinstance(error, OSError)
    message = str(error)
    assert str(cache) in message, message
    assert reason in message and "cache_dir=" in message and "$DELTACELLS_CACHE" in message, message


@pytest.mark.parametrize("budget", [100, 5000, 20_000])
def test_full_disk_while_writing_columns(
    datasets: dict[str, Path],
    expected: dict[str, pd.DataFrame],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    budget: int,
) -> None:
    """The disk fills up in the schema of the first file, in a batch, in a later file: a clear error, no litter."""
    cache = tmp_path / "cache"
    real = pa.OSFile
    left = [budget]
    monkeypatch.setattr(
        pa, "OSFile", lambda path, mode="rb": _FullDisk(path, left) if "w" in mode else real(path, mode)
    )
    with pytest.raises(ObsCacheError) as info:
        deltacells.read_obs(datasets["b"], ["cell_type", "donor", COLUMN], cache_dir=cache)
    _assert_clear(info.value, cache, "No space left on device")
    directory = cached_file(datasets["b"], cache).parent
    assert sorted(p.name for p in directory.iterdir() if p.suffix in (".arrow", ".tmp")) == []
    monkeypatch.undo()  # space is freed
    got = deltacells.read_obs(datasets["b"], ["cell_type", "donor", COLUMN], cache_dir=cache)
    pd.testing.assert_frame_equal(got, expected["b"][["cell_type", "donor", COLUMN]], check_exact=True)


def test_full_disk_when_recording_verified_shards(
    datasets: dict[str, Path], expected: dict[str, pd.DataFrame], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    real = pathlib.Path.write_bytes

    def write_bytes(self: Path, data: Any) -> int:
        if self.name.startswith("verified.json"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real(self, data)

    monkeypatch.setattr(pathlib.Path, "write_bytes", write_bytes)
    with pytest.raises(ObsCacheError) as info:
        deltacells.read_obs(datasets["b"], [COLUMN], cache_dir=cache)
    _assert_clear(info.value, cache, "No space left on device")
    monkeypatch.undo()
    got = deltacells.read_obs(datasets["b"], [COLUMN], cache_dir=cache)
    pd.testing.assert_series_equal(got[COLUMN], expected["b"][COLUMN], check_exact=True)


def test_full_disk_for_the_schema_copy_is_harmless(
    datasets: dict[str, Path], expected: dict[str, pd.DataFrame], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cached copy of obs/schema.json is only a shortcut: failing to write it must not fail the read."""
    real = pathlib.Path.write_bytes

    def write_bytes(self: Path, data: Any) -> int:
        if self.name.startswith("schema.json"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real(self, data)

    monkeypatch.setattr(pathlib.Path, "write_bytes", write_bytes)
    got = deltacells.read_obs(datasets["b"], [COLUMN], cache_dir=tmp_path / "cache")
    pd.testing.assert_series_equal(got[COLUMN], expected["b"][COLUMN], check_exact=True)


def test_file_size_limit_gives_a_clear_error(
    datasets: dict[str, Path], expected: dict[str, pd.DataFrame], ctx: Any, tmp_path: Path
) -> None:
    """A real write failure from Arrow's C++ writer (EFBIG under RLIMIT_FSIZE), in a child process."""
    cache, out = tmp_path / "cache", tmp_path / "out.pkl"
    child = ctx.Process(target=read_obs_in_child, args=(str(datasets["b"]), str(cache), [COLUMN], str(out), 4096))
    child.start()
    assert join_all([child], 60) == [0]
    result = load_pickle(out)
    assert not result["ok"] and result["error"] == "ObsCacheError" and result["is_oserror"], result
    assert str(cache) in result["message"] and "too large" in result["message"].lower(), result["message"]
    assert not list(cached_file(datasets["b"], cache).parent.glob("*.tmp"))
    got = deltacells.read_obs(datasets["b"], [COLUMN], cache_dir=cache)
    pd.testing.assert_series_equal(got[COLUMN], expected["b"][COLUMN], check_exact=True)
