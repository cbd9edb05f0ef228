"""Localizing obs columns costs a few concurrent requests per shard, not one request per column chunk.

The store here is a local directory that behaves as object storage: not local (so shards to check are read in
concurrent blocks and up to 32 requests are in flight), optionally with a latency per request, and counting
requests, bytes and the most requests in flight. The tests assert counts and bytes, never durations.
"""

from __future__ import annotations

import collections
import hashlib
import io
import math
import pickle
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from tests.servers.datasets import obs_adata

import deltacells
from deltacells import FormatError
from deltacells.format import Manifest, obs_shard_path
from deltacells.obs import ObsStore, _ranges, _shards
from deltacells.storage import FsspecStore, StoreFile

N_TILES = 200
TILE = 50
PER_FILE = 25  # 8 shards of ~40 KB: the read of the tail (for the footer) holds the whole shard
PER_FILE_LARGE = 100  # 2 shards of ~160 KB: the tail, then the column chunks before it
COLUMNS = ["cell_type", "donor", "n_counts", "pct"]


class RemoteLikeStore(FsspecStore):
    """A FsspecStore over a local directory that reads as object storage does, counting what it is asked for.

    ``read`` is wrapped: ``read_many`` and ``submit_read`` of a local filesystem run it on the store's threads.
    """

    def __init__(self, url: Any, *, latency: float = 0.0) -> None:
        super().__init__(url)
        self.latency = latency
        self._count_lock = threading.Lock()
        self.requests: collections.Counter[str] = collections.Counter()
        self.bytes: collections.Counter[str] = collections.Counter()
        self.ranges: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
        self.in_flight = 0
        self.max_in_flight = 0

    @property
    def is_local(self) -> bool:
        return False

    def read(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        with self._count_lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.latency:
                time.sleep(self.latency)
            data = super().read(path, start, end)
        finally:
            with self._count_lock:
                self.in_flight -= 1
        with self._count_lock:
            self.requests[path] += 1
            self.bytes[path] += len(data)
            first = start or 0
            self.ranges[path].append((first, first + len(data)))
        return data

    def shard_requests(self) -> int:
        return sum(n for path, n in self.requests.items() if path.endswith(".parquet"))

    def shard_bytes(self) -> int:
        return sum(n for path, n in self.bytes.items() if path.endswith(".parquet"))


class Dataset:
    def __init__(self, root: Path, adata: ad.AnnData) -> None:
        self.root = root
        self.adata = adata
        self.manifest = Manifest.from_json((root / "manifest.json").read_text())

    @property
    def shard_total(self) -> int:
        return int(sum(self.manifest.obs_shard_bytes))

    def store(self, *, latency: float = 0.0) -> RemoteLikeStore:
        return RemoteLikeStore(self.root, latency=latency)

    def open(self, store: FsspecStore, cache: Path, *, verify: bool = True) -> ObsStore:
        return ObsStore(store, self.manifest, cache_dir=cache, verify=verify)

    def copy(self, to: Path) -> Dataset:
        shutil.copytree(self.root, to)
        return Dataset(to, self.adata)


def _write(root: Path, adata: ad.AnnData, per_file: int) -> Dataset:
    deltacells.write_deltacells(adata, str(root), tile_size=TILE, obs_tiles_per_file=per_file, progress=False)
    return Dataset(root, adata)


@pytest.fixture(scope="module")
def small_shards(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return _write(tmp_path_factory.mktemp("small") / "ds", obs_adata(N_TILES, TILE), PER_FILE)


@pytest.fixture(scope="module")
def large_shards(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return _write(tmp_path_factory.mktemp("large") / "ds", obs_adata(N_TILES, TILE), PER_FILE_LARGE)


@pytest.fixture(scope="module")
def wide_shards(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """40 tiles, 10 per shard, each row group ~100 KB of random text besides ~1 KB of the other columns."""
    return _write(tmp_path_factory.mktemp("wide") / "ds", obs_adata(40, TILE, blob_chars=4000, seed=1), 10)


def _assert_column(obs: ObsStore, adata: ad.AnnData, name: str) -> None:
    series = obs.read_column(name)
    expected = adata.obs[name]
    if isinstance(expected.dtype, pd.CategoricalDtype):
        assert list(series.cat.categories) == list(expected.cat.categories)
    np.testing.assert_array_equal(np.asarray(series, dtype=object), np.asarray(expected, dtype=object))
    assert list(series.index) == list(adata.obs_names)


# ---------------------------------------------------------------------- requests and bytes


@pytest.mark.parametrize("name", COLUMNS)
def test_one_column_costs_one_request_per_small_shard(small_shards: Dataset, tmp_path: Path, name: str) -> None:
    ds = small_shards
    n_shards = ds.manifest.n_obs_shards
    assert n_shards == N_TILES // PER_FILE == 8
    store = ds.store()
    obs = ds.open(store, tmp_path / "cache", verify=False)
    obs.localize(name)
    # each shard is smaller than the read of its tail (for the footer): that one read is all (with the
    # old one-request-per-chunk reading: 208 requests, 387,533 bytes -- more than the shards, 331,452)
    assert store.requests == {obs_shard_path(s): 1 for s in range(n_shards)} | {"obs/schema.json": 1}
    assert store.shard_bytes() == ds.shard_total
    _assert_column(obs, ds.adata, name)


@pytest.mark.parametrize("name", ["n_counts", "cell_type"])
def test_one_column_costs_requests_per_shard_not_per_tile(large_shards: Dataset, tmp_path: Path, name: str) -> None:
    ds = large_shards
    n_shards = ds.manifest.n_obs_shards
    assert n_shards == 2 and ds.manifest.n_tiles == N_TILES
    store = ds.store(latency=0.005)
    obs = ds.open(store, tmp_path / "cache", verify=False)
    obs.localize([name])
    # the tail (the footer and the last row groups), then the other chunks of the column, coalesced
    assert store.shard_requests() <= 2 * n_shards, store.requests
    assert set(store.requests) == {obs_shard_path(s) for s in range(n_shards)} | {"obs/schema.json"}
    # the gaps between the chunks are small (the other columns of a tile): read, not worth a request each
    assert store.shard_bytes() <= ds.shard_total
    assert store.max_in_flight > 1
    _assert_column(obs, ds.adata, name)


def test_wide_shards_move_only_the_column(wide_shards: Dataset, tmp_path: Path) -> None:
    ds = wide_shards
    n_shards, n_tiles = ds.manifest.n_obs_shards, ds.manifest.n_tiles
    assert n_shards == 4
    store = ds.store(latency=0.005)
    obs = ds.open(store, tmp_path / "cache", verify=False)
    obs.localize("n_counts")
    # chunks more than MAX_GAP apart are fetched apart, all at once: the footer and the column, not the rest
    assert store.shard_requests() <= n_tiles + n_shards
    assert store.shard_bytes() < ds.shard_total / 5
    assert store.max_in_flight > 1
    _assert_column(obs, ds.adata, "n_counts")


def test_several_columns_in_one_pass(large_shards: Dataset, tmp_path: Path) -> None:
    ds = large_shards
    store = ds.store()
    obs = ds.open(store, tmp_path / "cache", verify=False)
    frame = obs.to_dataframe(COLUMNS)
    assert store.shard_requests() <= 2 * ds.manifest.n_obs_shards
    for name in COLUMNS:
        _assert_column(obs, ds.adata, name)
    assert list(frame.index) == list(ds.adata.obs_names)


def test_footer_longer_than_the_tail_read(
    large_shards: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_ranges, "FOOTER_TAIL", 1024)
    monkeypatch.setattr(_ranges, "FOOTER_BYTES_PER_CHUNK", 0)
    ds = large_shards
    store = ds.store()
    obs = ds.open(store, tmp_path / "cache", verify=False)
    obs.localize("donor")
    # the tail, the rest of the footer (its length is in the tail), the column chunks
    assert store.shard_requests() <= 3 * ds.manifest.n_obs_shards
    assert store.shard_bytes() < ds.shard_total
    _assert_column(obs, ds.adata, "donor")


def test_local_store_reads_the_same(large_shards: Dataset, tmp_path: Path) -> None:
    ds = large_shards
    for verify in (True, False):
        obs = ds.open(FsspecStore(ds.root), tmp_path / f"cache{verify}", verify=verify)
        for name in COLUMNS:
            _assert_column(obs, ds.adata, name)


# ---------------------------------------------------------------------- verification


def test_verify_reads_each_shard_once_in_concurrent_blocks(
    large_shards: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    block = 16 * 1024
    monkeypatch.setattr(_ranges, "VERIFY_BLOCK", block)
    ds = large_shards
    store = ds.store(latency=0.005)
    obs = ds.open(store, tmp_path / "cache")
    obs.localize("cell_type")
    for shard, size in enumerate(ds.manifest.obs_shard_bytes):
        path = obs_shard_path(shard)
        assert store.requests[path] == math.ceil(size / block), "the blocks, and no second read for the columns"
        assert sorted(store.ranges[path]) == [(a, min(a + block, size)) for a in range(0, size, block)]
        assert store.bytes[path] == size
    assert store.max_in_flight > 1
    _assert_column(obs, ds.adata, "cell_type")
    verified = (obs.directory / "verified.json").read_text()
    assert all(sha in verified for sha in ds.manifest.obs_shard_sha256)
    # a later column comes from the (now verified) shards' footers and column chunks
    before = store.shard_requests()
    obs.localize("pct")
    assert store.shard_requests() - before <= 2 * ds.manifest.n_obs_shards
    _assert_column(obs, ds.adata, "pct")


def test_read_shard_bytes_in_blocks(large_shards: Dataset, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_ranges, "VERIFY_BLOCK", 10_000)
    ds = large_shards
    store = ds.store()
    blob = _shards.read_shard_bytes(store, ds.manifest, 1)
    assert hashlib.sha256(blob).hexdigest() == ds.manifest.obs_shard_sha256[1]
    assert store.requests[obs_shard_path(1)] == math.ceil(ds.manifest.obs_shard_bytes[1] / 10_000)


def _flip_chunk_byte(ds: Dataset, shard: int, group: int, column: str) -> None:
    """Flip the first byte of a column chunk (its first page header), the file size unchanged."""
    path = ds.root / "obs" / f"obs_{shard:04d}.parquet"
    metadata = pq.read_metadata(path)
    index = [metadata.schema.column(i).path for i in range(metadata.num_columns)].index(column)
    chunk = metadata.row_group(group).column(index)
    offset = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("verify", [True, False])
def test_corrupted_chunk_is_refused(large_shards: Dataset, tmp_path: Path, verify: bool) -> None:
    ds = large_shards.copy(tmp_path / "ds")
    _flip_chunk_byte(ds, 1, 3, "n_counts")
    obs = ds.open(ds.store(), tmp_path / "cache", verify=verify)
    if verify:
        match = r"/obs/obs_0001\.parquet: SHA-256 is [0-9a-f]{64} but manifest\.json field obs_shard_sha256\[1\]"
    else:
        match = r"/obs/obs_0001\.parquet: row group 3 \(tile 103\): cannot be read"
    with pytest.raises(FormatError, match=match):
        obs.localize("n_counts")
    assert not list(obs.directory.glob("*.arrow")) and not list(obs.directory.glob("*.tmp"))
    if verify:  # the shard before the bad one was checked, and recorded
        assert ds.manifest.obs_shard_sha256[0] in (obs.directory / "verified.json").read_text()
    if verify:  # shard 1 is refused again, whatever the column
        with pytest.raises(FormatError, match=r"obs_0001\.parquet: SHA-256"):
            obs.localize("pct")
    else:  # the other columns' chunks are intact
        _assert_column(obs, ds.adata, "pct")


@pytest.mark.parametrize(("change", "says"), [("longer", ""), ("shorter", "")])
def test_shard_of_another_size_without_verify(large_shards: Dataset, tmp_path: Path, change: str, says: str) -> None:
    ds = large_shards.copy(tmp_path / "ds")
    path = ds.root / "obs" / "obs_0001.parquet"
    data = path.read_bytes()
    path.write_bytes(data + b"\0" if change == "longer" else data[:-100])
    size = ds.manifest.obs_shard_bytes[1]
    match = rf"obs_0001\.parquet: size is {says}\d+ bytes but manifest\.json field obs_shard_bytes\[1\] says {size}"
    with pytest.raises(FormatError, match=match):
        ds.open(ds.store(), tmp_path / "cache", verify=False).localize("n_counts")


# ---------------------------------------------------------------------- batches


def test_fetches_one_batch_ahead(small_shards: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_shards, "BATCH_SHARDS", 2)
    ds = small_shards
    store = ds.store(latency=0.002)
    schema = ObsStore(store, ds.manifest, cache_dir=tmp_path, verify=False).schema
    plan = [(s, s % 3 == 0) for s in range(ds.manifest.n_obs_shards)]
    seen = []
    for fetched in _shards.fetch_shards(store, ds.manifest, schema, plan, ["n_counts"]):
        seen.append(fetched.shard)
        assert fetched.verified == (fetched.shard % 3 == 0)
        touched = {int(path[-12:-8]) for path in store.requests if path.endswith(".parquet")}
        assert max(touched) <= (fetched.shard // 2 + 1) * 2 + 1, "at most the next batch is fetched ahead"
        tiles = list(_shards.tile_columns(store, ds.manifest, schema, fetched, ["n_counts"]))
        assert [tile for tile, _ in tiles] == list(range(fetched.shard * PER_FILE, (fetched.shard + 1) * PER_FILE))
    assert seen == list(range(ds.manifest.n_obs_shards))


# ---------------------------------------------------------------------- the pieces


def test_known_ranges_file_serves_the_planned_chunks(large_shards: Dataset) -> None:
    ds = large_shards
    path = ds.root / "obs" / "obs_0000.parquet"
    data = path.read_bytes()
    metadata = pq.read_metadata(path)
    ranges = _ranges.column_chunk_ranges(metadata, ["pct"], len(data))
    assert len(ranges) == PER_FILE_LARGE
    parts = {(a, b): data[a:b] for a, b in ranges}
    store = RemoteLikeStore(ds.root)
    with _ranges.KnownRangesFile(store, "obs/obs_0000.parquet", len(data), parts) as file:
        parquet = pq.ParquetFile(file, metadata=metadata)
        values = [parquet.read_row_group(g, columns=["pct"]).column(0) for g in range(metadata.num_row_groups)]
        assert file.misses == 0 and not store.requests, "pyarrow reads only the chunks planned"
        assert np.concatenate([v.to_numpy() for v in values]).tolist() == ds.adata.obs["pct"][: 100 * TILE].tolist()
        file.seek(10)
        assert file.read(20) == data[10:30] and file.misses == 1, "a miss is one ranged read of the store"
    assert store.requests == {"obs/obs_0000.parquet": 1}


def test_coalesce_and_footer_helpers() -> None:
    assert _ranges.coalesce("x", []) == []
    assert _ranges.coalesce("x", [(50, 60), (0, 10), (12, 20)], max_gap=5) == [(0, 20), (50, 60)]
    assert _ranges.coalesce("x", [(0, 10), (12, 20)], max_gap=5, max_block=15) == [(0, 10), (12, 20)]
    assert _ranges.footer_length(b"....\x10\x00\x00\x00PAR1") == 24
    assert _ranges.footer_length(b"not parquet") is None
    assert _ranges.block_ranges(25, 10) == [(0, 10), (10, 20), (20, 25)]
    assert _ranges.block_ranges(0, 10) == [(0, 0)]
    assert _ranges.footer_tail_start(10, 1000, 10) == 0
    assert _ranges.footer_tail_start(10**9, 1, 1) == 10**9 - _ranges.FOOTER_TAIL
    assert _ranges.footer_tail_start(10**9, 1000, 20) < 10**9 - 1000 * 20 * 70


def test_known_ranges_file_joins_adjacent_ranges(tmp_path: Path) -> None:
    data = bytes(range(100))
    (tmp_path / "obj").write_bytes(data)
    store = RemoteLikeStore(tmp_path)
    parts = {(0, 10): data[0:10], (10, 20): data[10:20], (50, 60): data[50:60]}
    with _ranges.KnownRangesFile(store, "obj", len(data), parts) as file:
        file.seek(5)
        assert file.read(10) == data[5:15]  # across two adjacent ranges: still no request
        file.seek(52)
        assert file.read(4) == data[52:56]
        assert file.misses == 0 and not store.requests
        file.seek(18)
        assert file.read(4) == data[18:22] and file.misses == 1  # past the end of a range
        file.seek(95)
        assert file.read() == data[95:] and file.misses == 2
    assert store.requests == {"obj": 2}


def test_known_ranges_file_is_a_store_file(tmp_path: Path) -> None:
    """The position bookkeeping is StoreFile's: misses count as its requests, closing drops the ranges."""
    data = bytes(range(100))
    (tmp_path / "obj").write_bytes(data)
    store = RemoteLikeStore(tmp_path)
    parts = {(0, 10): data[0:10], (10, 20): data[10:20], (50, 60): data[50:60]}
    with _ranges.KnownRangesFile(store, "obj", len(data), parts) as file:
        assert isinstance(file, StoreFile) and file.name == "obj" and file.size == len(data)
        assert file.readable() and file.seekable() and not file.writable()
        buffer = bytearray(8)
        assert file.readinto(buffer) == 8 and bytes(buffer) == data[:8] and file.tell() == 8
        assert file.seek(-45, io.SEEK_END) == 55 and file.read(10) == data[55:65]
        assert file.read(0) == b"" and file.seek(200) == 200 and file.read(5) == b""
        assert (file.misses, file.requests, file.bytes_read) == (1, 1, 10)
        with pytest.raises(ValueError, match="negative"):
            file.seek(-1)
        with pytest.raises(TypeError, match="pickle the store"):
            pickle.dumps(file)
    assert file.closed and file.misses == 1 and not file._parts
    with pytest.raises(ValueError, match="closed"):
        file.read(1)
    assert store.requests == {"obj": 1}


def test_known_ranges_file_reads_as_the_bytes(tmp_path: Path) -> None:
    """Any sequence of seeks and reads returns what the same on the whole bytes would."""
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, 1000, dtype=np.uint8).tobytes()
    (tmp_path / "obj").write_bytes(data)
    parts = {(a, b): data[a:b] for a, b in [(0, 100), (100, 150), (300, 420), (900, 1000)]}
    with _ranges.KnownRangesFile(RemoteLikeStore(tmp_path), "obj", len(data), parts) as file:
        for _ in range(300):
            start = int(rng.integers(0, 1100))
            length = int(rng.integers(-1, 200))
            file.seek(start)
            expected = data[start:] if length < 0 else data[start : start + length]
            assert file.read(length) == expected
            assert file.tell() == start + len(expected)
