"""Uploads while encoding: tiles, obs shards and sidecars are written concurrently, bounded, manifest last.

The store is a local directory whose writes are slowed down (a sleep in :meth:`write`), counted and logged, so
that concurrency is observable; the tests assert counts and orders, never durations.
"""

from __future__ import annotations

import re
import threading
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pytest
from scipy import sparse

import deltacells
from deltacells.core import DatasetWriter
from deltacells.datasets import synthetic_counts
from deltacells.obs import _write as obs_write
from deltacells.storage import FsspecStore
from deltacells.tiles import TileWriter
from deltacells.tiles import _writer as tiles_writer
from deltacells.tiles._writer import PendingWrites

N_CELLS, N_GENES, TILE = 2_000, 60, 100  # 20 tiles
N_TILES = N_CELLS // TILE


class SlowStore(FsspecStore):
    """A local store whose writes sleep ``delay`` seconds, are counted in flight, logged, and may fail.

    Parameters
    ----------
    url
        The local directory.
    storage_options
        Unused (the two-argument constructor of :class:`FsspecStore`).
    delay
        Seconds each write sleeps before writing.
    fail
        A regular expression: writes of matching paths raise :class:`PermissionError` after the sleep.
    name_in_error
        Whether the error message names the object (as the stores of deltacells do).
    """

    def __init__(
        self,
        url: str | Path,
        storage_options: Mapping[str, Any] | None = None,
        *,
        delay: float = 0.02,
        fail: str | None = None,
        name_in_error: bool = True,
    ) -> None:
        super().__init__(url, storage_options)
        self.delay = delay
        self.fail = re.compile(fail) if fail else None
        self.name_in_error = name_in_error
        self.lock = threading.Lock()
        self.in_flight: dict[str, int] = {}  # by kind: "all", "tiles", "obs"
        self.max_in_flight: dict[str, int] = {}
        self.bytes_in_flight = 0
        self.max_bytes_in_flight = 0
        self.started: list[str] = []
        self.completed: list[str] = []
        self.failed: list[str] = []
        self.events: list[tuple[str, str]] = []  # ("start" | "end", path), and what tests add

    @staticmethod
    def _kinds(path: str) -> list[str]:
        name = path.rsplit(".deltacells-staging-", 1)[-1].split("/", 1)[-1] if "staging" in path else path
        kinds = ["all"]
        if name.startswith("tiles/"):
            kinds.append("tiles")
        elif name.startswith("obs/"):
            kinds.append("obs")
        return kinds

    def write(self, path: str, data: bytes) -> None:
        """Sleep, then write (or fail); count the writes in flight, by kind, and their bytes."""
        kinds = self._kinds(path)
        with self.lock:
            self.started.append(path)
            self.events.append(("start", path))
            for kind in kinds:
                self.in_flight[kind] = self.in_flight.get(kind, 0) + 1
                self.max_in_flight[kind] = max(self.max_in_flight.get(kind, 0), self.in_flight[kind])
            self.bytes_in_flight += len(data)
            self.max_bytes_in_flight = max(self.max_bytes_in_flight, self.bytes_in_flight)
        try:
            time.sleep(self.delay)
            if self.fail is not None and self.fail.search(path):
                with self.lock:
                    self.failed.append(path)
                what = f"{self._where(path)}: access denied" if self.name_in_error else "Access Denied"
                raise PermissionError(what)
            super().write(path, data)
            with self.lock:
                self.completed.append(path)
                self.events.append(("end", path))
        finally:
            with self.lock:
                for kind in kinds:
                    self.in_flight[kind] -= 1
                self.bytes_in_flight -= len(data)

    def peak(self, kind: str = "all") -> int:
        """The most writes of ``kind`` in flight at once."""
        return self.max_in_flight.get(kind, 0)


@pytest.fixture(scope="module")
def adata() -> ad.AnnData:
    """2,000 synthetic cells x 60 genes, with obs (cell type, donor...) and var."""
    return synthetic_counts(N_CELLS, N_GENES, seed=0)


def _write(adata: ad.AnnData, store: FsspecStore, **options: Any) -> None:
    options = {"tile_size": TILE, "level": 1, "progress": False, "threads": 2, **options}
    deltacells.write_deltacells(adata, store, **options)


def _tiles_of(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "tiles").glob("tile_*.dct"))


# ---------------------------------------------------------------------------------------------- overlap


def test_writes_overlap_and_manifest_is_last(tmp_path: Path, adata: ad.AnnData) -> None:
    root = tmp_path / "ds"
    store = SlowStore(root)
    _write(adata, store, obs_tiles_per_file=4)

    assert store.peak() > 1, "no two writes were ever in flight at once"
    assert store.peak("tiles") > 1, "tile uploads did not overlap"
    assert store.completed[-1] == "manifest.json"
    assert store.completed.count("manifest.json") == 1
    assert store.started[-1] == "manifest.json", "the manifest started before every other write had finished"
    expected = {f"tiles/tile_{i:06d}.dct" for i in range(N_TILES)}
    expected |= {"gene_order.npy", "var_names.txt", "var.parquet", "obs/schema.json"}
    expected |= {f"obs/obs_{i:04d}.parquet" for i in range(N_TILES // 4)}
    assert set(store.completed[:-1]) == expected
    assert len(store.completed) == len(expected) + 1, "an object was written twice"
    for name in expected:
        assert (root / name).is_file(), name

    back = deltacells.read_deltacells(root)
    assert back.shape == adata.shape
    assert (sparse.csr_matrix(back.X.to_memory()) != sparse.csr_matrix(adata.X)).nnz == 0
    assert list(back.obs_names) == list(adata.obs_names)


def test_overwrite_writes_manifest_last_and_swaps_in(tmp_path: Path, adata: ad.AnnData) -> None:
    root = tmp_path / "ds"
    _write(adata[:500].copy(), FsspecStore(root))
    store = SlowStore(root)
    _write(adata, store, overwrite=True)

    assert store.peak("tiles") > 1
    assert store.completed[-1].endswith("/manifest.json") and ".deltacells-staging-" in store.completed[-1]
    assert not [entry for entry in FsspecStore(root).list() if entry.startswith(".deltacells-staging-")]
    assert len(_tiles_of(root)) == N_TILES
    assert deltacells.open_dataset(root).n_cells == N_CELLS


def test_obs_shards_upload_in_order_while_the_next_is_built(
    tmp_path: Path, adata: ad.AnnData, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SlowStore(tmp_path / "ds")
    real = obs_write._shard_bytes

    def shard_bytes(*args: Any, **kwargs: Any) -> bytes:
        with store.lock:
            store.events.append(("build", "obs"))
        return real(*args, **kwargs)

    monkeypatch.setattr(obs_write, "_shard_bytes", shard_bytes)
    _write(adata, store, obs_tiles_per_file=2)

    obs = [(kind, path) for kind, path in store.events if path.startswith("obs") or kind == "build"]
    shards = [path for kind, path in obs if kind == "end" and path.startswith("obs/obs_")]
    assert shards == [f"obs/obs_{i:04d}.parquet" for i in range(N_TILES // 2)], "shards stored out of order"
    assert store.peak("obs") == 1, "obs uploads are one at a time (a killed writer leaves a prefix of them)"
    # a shard is built while the one before it uploads: shard k+1 is built (started) before shard k is stored,
    # where building and storing one after the other would have built only shards 0 .. k by then
    ends = {path: i for i, (kind, path) in enumerate(obs) if kind == "end"}
    built_before = [sum(1 for kind, _ in obs[: ends[path]] if kind == "build") for path in shards]
    overlapped = [k for k, built in enumerate(built_before) if built >= k + 2]
    assert overlapped, f"no shard was built while the one before it uploaded: {obs}"
    assert store.completed[-1] == "manifest.json"


def test_tile_writer_alone_waits_for_its_uploads(tmp_path: Path) -> None:
    store = SlowStore(tmp_path / "tiles-only")
    writer = TileWriter(store, N_GENES, tile_size=10, level=1, threads=2)
    counts = sparse.random(200, N_GENES, density=0.3, format="csr", rng=np.random.default_rng(0)) * 9
    writer.write(np.floor(counts.toarray()).astype(np.int32))
    tiles = writer.finish()
    assert writer.uploads.pending == 0
    assert writer.uploads.submitted == len(tiles.tile_cells) == 20
    assert sorted(store.completed) == [f"tiles/tile_{i:06d}.dct" for i in range(20)]
    assert store.peak() > 1
    assert [int(x) for x in tiles.tile_bytes] == [
        (tmp_path / "tiles-only" / "tiles" / f"tile_{i:06d}.dct").stat().st_size for i in range(20)
    ]


# ---------------------------------------------------------------------------------------------- failures


def test_failed_tile_upload_fails_the_write_without_manifest(tmp_path: Path, adata: ad.AnnData) -> None:
    root = tmp_path / "ds"
    store = SlowStore(root, fail=r"tiles/tile_000003\.dct$")
    with pytest.raises(PermissionError, match=r"tiles/tile_000003\.dct"):
        _write(adata, store)
    assert store.failed == ["tiles/tile_000003.dct"]
    assert "manifest.json" not in store.started
    assert not (root / "manifest.json").exists()
    with pytest.raises(deltacells.FormatError):
        deltacells.open_dataset(root)


def test_failed_upload_is_named_even_when_the_store_does_not(tmp_path: Path, adata: ad.AnnData) -> None:
    store = SlowStore(tmp_path / "ds", fail=r"tile_000005\.dct$", name_in_error=False)
    with pytest.raises(PermissionError, match="Access Denied") as info:
        _write(adata, store)
    assert "tiles/tile_000005.dct" in "".join(traceback.format_exception(info.value))
    assert not (tmp_path / "ds" / "manifest.json").exists()


def test_failed_upload_surfaces_before_close(tmp_path: Path) -> None:
    """The failure of an early tile stops the writer at a later write(), long before all tiles are sent."""
    store = SlowStore(tmp_path / "ds", delay=0.01, fail=r"tile_000001\.dct$")
    n_blocks, block_rows = 200, 10
    rng = np.random.default_rng(1)
    writer = DatasetWriter(store, N_GENES, tile_size=block_rows, level=1, threads=2)
    blocks = [rng.integers(0, 3, size=(block_rows, N_GENES)) for _ in range(n_blocks)]
    written, error = 0, None
    for block in blocks:
        try:
            writer.write(block)
        except PermissionError as exc:
            error = exc
            break
        written += 1
    assert error is not None, "the failure only surfaced at close()"
    assert "tile_000001.dct" in str(error)
    assert written < n_blocks
    assert len(store.started) < n_blocks
    assert "manifest.json" not in store.started
    assert not (tmp_path / "ds" / "manifest.json").exists()
    with pytest.raises(ValueError, match="closed"):
        writer.close()


def test_failed_obs_shard_fails_the_write(tmp_path: Path, adata: ad.AnnData) -> None:
    store = SlowStore(tmp_path / "ds", fail=r"obs/obs_0002\.parquet$")
    with pytest.raises(PermissionError, match=r"obs/obs_0002\.parquet"):
        _write(adata, store, obs_tiles_per_file=2)
    assert "manifest.json" not in store.started
    assert not (tmp_path / "ds" / "manifest.json").exists()


def test_failed_sidecar_fails_the_write(tmp_path: Path, adata: ad.AnnData) -> None:
    store = SlowStore(tmp_path / "ds", fail=r"var\.parquet$")
    with pytest.raises(PermissionError, match=r"var\.parquet"):
        _write(adata, store)
    assert "manifest.json" not in store.started


def test_failed_overwrite_keeps_the_old_dataset(tmp_path: Path, adata: ad.AnnData) -> None:
    root = tmp_path / "ds"
    _write(adata[:500].copy(), FsspecStore(root))
    store = SlowStore(root, fail=r"tile_000007\.dct$")
    with pytest.raises(PermissionError, match=r"tile_000007\.dct"):
        _write(adata, store, overwrite=True)
    assert deltacells.open_dataset(root).n_cells == 500
    assert not [entry for entry in FsspecStore(root).list() if entry.startswith(".deltacells-staging-")]


# ---------------------------------------------------------------------------------------------- bounds


def _tile_blocks(n_tiles: int, tile: int = 50) -> np.ndarray:
    return np.random.default_rng(2).integers(0, 5, size=(n_tiles * tile, N_GENES))


def test_tiny_byte_bound_allows_one_upload_at_a_time(tmp_path: Path) -> None:
    store = SlowStore(tmp_path / "ds", delay=0.005)
    writer = TileWriter(store, N_GENES, tile_size=50, level=1, threads=2, max_pending_bytes=1)
    writer.write(_tile_blocks(30))
    tiles = writer.finish()
    assert len(tiles.tile_cells) == 30
    assert store.peak() == 1, f"{store.peak()} uploads in flight with a 1-byte bound"
    assert writer.uploads.peak_count == 1
    assert len(store.completed) == 30


def test_byte_bound_caps_the_bytes_in_flight(tmp_path: Path) -> None:
    store = SlowStore(tmp_path / "ds", delay=0.01)
    probe = TileWriter(FsspecStore(tmp_path / "probe"), N_GENES, tile_size=50, level=1, threads=1)
    probe.write(_tile_blocks(30))
    sizes = probe.finish().tile_bytes
    bound = int(3 * sizes.max())  # room for three tiles at most
    writer = TileWriter(store, N_GENES, tile_size=50, level=1, threads=2, max_pending_bytes=bound)
    writer.write(_tile_blocks(30))
    writer.finish()
    assert store.max_bytes_in_flight <= bound
    assert writer.uploads.peak_bytes <= bound
    assert 1 < store.peak() <= 3
    assert len(store.completed) == 30


def test_count_bound_caps_the_uploads_in_flight(tmp_path: Path) -> None:
    store = SlowStore(tmp_path / "ds", delay=0.01)
    writer = TileWriter(store, N_GENES, tile_size=50, level=1, threads=2, max_pending_uploads=3)
    writer.write(_tile_blocks(30))
    writer.finish()
    assert 1 < store.peak() <= 3
    assert writer.uploads.peak_count <= 3
    assert len(store.completed) == 30


def test_default_bound_applies_to_write_deltacells(
    tmp_path: Path, adata: ad.AnnData, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tiles_writer, "DEFAULT_MAX_PENDING_BYTES", 1)
    store = SlowStore(tmp_path / "ds", delay=0.005)
    _write(adata, store)
    assert store.peak("tiles") == 1
    assert store.completed[-1] == "manifest.json"


def test_default_count_bound_is_twice_the_io_concurrency(tmp_path: Path) -> None:
    store = FsspecStore(tmp_path, io_concurrency=3)
    pending = PendingWrites(store)
    assert pending.max_count == 6
    assert pending.max_bytes == tiles_writer.DEFAULT_MAX_PENDING_BYTES
    with pytest.raises(ValueError, match="at least 1"):
        PendingWrites(store, max_bytes=0)


def test_abort_refuses_new_writes_and_waits(tmp_path: Path) -> None:
    store = SlowStore(tmp_path / "ds", delay=0.05)
    pending = PendingWrites(store, max_count=4)
    for i in range(4):
        pending.submit(f"x/{i}", b"data")
    pending.abort()
    assert pending.pending == 0
    with store.lock:
        assert store.in_flight.get("all", 0) == 0, "abort() returned with writes still running"
    with pytest.raises(ValueError, match="aborted"):
        pending.submit("x/late", b"data")
