"""``CellLoader`` on a dataset in an S3 bucket (moto): the batches, the requests of an epoch, resuming.

Datasets are written to the server directly; the loaders read them by URL with ``storage_options``, through the
:class:`~tests.servers.proxy.RecordingProxy` when requests are counted. The proxy's latency only makes
concurrency observable: the tests assert request counts, ranges and overlap, never durations.

Here a tile of 200 cells has 4 chunks, so the default block is 50 cells; a window is 400 cells, exactly 4
batches of 100 (blocks of 50 or 200 cells fill windows exactly), so the cells of window ``w`` are those of
batches ``4w .. 4w + 3``.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anndata as ad
import numpy as np
import pytest
from scipy import sparse

import deltacells
from deltacells import Batch, CellLoader
from deltacells.datasets import synthetic_counts

if TYPE_CHECKING:
    from tests.servers import ProxiedS3Bucket, S3Bucket
    from tests.servers.proxy import Record

pytestmark = pytest.mark.timeout(120)

N_CELLS, N_GENES, TILE_SIZE, N_CHUNKS = 2000, 40, 200, 4
N_TILES = N_CELLS // TILE_SIZE  # 10
BATCH, BUFFER = 100, 400
BATCHES_PER_WINDOW = BUFFER // BATCH  # 4
N_BATCHES = N_CELLS // BATCH  # 20
LATENCY = 0.05


@pytest.fixture(autouse=True)
def _no_default_cache(no_default_cache: None) -> None:
    """Every loader here must be given ``cache_dir=``."""


@pytest.fixture(scope="module")
def source() -> ad.AnnData:
    return synthetic_counts(N_CELLS, N_GENES, seed=7)


def _write(source: ad.AnnData, url: str, storage_options: dict[str, Any]) -> str:
    deltacells.write_deltacells(
        source, url, storage_options=storage_options, tile_size=TILE_SIZE, n_chunks=N_CHUNKS, progress=False
    )
    return url


@pytest.fixture
def bucket_dataset(s3_bucket: S3Bucket, source: ad.AnnData) -> str:
    """``source`` in a fresh bucket; its URL."""
    return _write(source, f"{s3_bucket.url}/ds", s3_bucket.storage_options)


@pytest.fixture
def proxied_dataset(s3_proxy: ProxiedS3Bucket, source: ad.AnnData) -> str:
    """``source`` written to the server directly (the proxy's log stays empty); its URL."""
    url = _write(source, f"{s3_proxy.url}/ds", s3_proxy.direct_storage_options)
    s3_proxy.proxy.reset()
    return url


def _rows(source: ad.AnnData, index: np.ndarray) -> np.ndarray:
    return np.asarray(sparse.csr_matrix(source.X)[index].toarray(), dtype=np.float32)


def _indices(batches: list[Batch]) -> list[list[int]]:
    return [batch.index.tolist() for batch in batches]


def _tile_number(record: Record) -> int:
    return int(record.path.rsplit("tile_", 1)[1].split(".")[0])


def _tile_gets(records: list[Record]) -> Counter[int]:
    """GETs per tile number."""
    return Counter(_tile_number(record) for record in records if "/tiles/" in record.path)


def _windows_per_tile(batches: list[Batch]) -> Counter[int]:
    """How many windows hold cells of each tile (a window is ``BATCHES_PER_WINDOW`` consecutive batches)."""
    counts: Counter[int] = Counter()
    for first in range(0, len(batches), BATCHES_PER_WINDOW):
        cells = np.concatenate([b.index for b in batches[first : first + BATCHES_PER_WINDOW]])
        counts.update(np.unique(cells // TILE_SIZE).tolist())
    return counts


def _epoch_requests(
    s3_proxy: ProxiedS3Bucket, load: CellLoader, epoch: int, latency: float = LATENCY
) -> tuple[list[Batch], list[Record]]:
    """The batches of ``epoch`` and the requests they made, with ``latency`` per request."""
    proxy = s3_proxy.proxy
    proxy.reset()
    proxy.latency = latency
    load.set_epoch(epoch)
    batches = list(load)
    return batches, proxy.requests()


def _assert_whole_tile_gets(load: CellLoader, records: list[Record]) -> None:
    """Every request is a GET of a whole tile object (no HEAD, no LIST, no ranged read of part of a tile)."""
    tile_bytes = np.asarray(load.dataset.manifest.tile_bytes)
    for record in records:
        assert record.method == "GET" and "/tiles/tile_" in record.path and "list-type" not in record.query, record
        assert record.status in (200, 206), record
        tile = _tile_number(record)
        assert record.range is not None and record.range.startswith("bytes=0-"), record
        assert record.bytes == tile_bytes[tile], record
    assert load.dataset._tiles.tiles_read_ranged == 0


# ---------------------------------------------------------------------- the batches


def test_an_epoch_from_the_bucket_holds_every_cell_once(
    s3_bucket: S3Bucket, bucket_dataset: str, source: ad.AnnData, tmp_path: Path
) -> None:
    load = CellLoader(
        bucket_dataset, batch_size=BATCH, buffer_size=BUFFER, obs_columns=["cell_type", "total_counts"],
        storage_options=s3_bucket.storage_options, cache_dir=tmp_path / "cache",
    )  # fmt: skip
    batches = list(load)
    assert len(batches) == len(load) == N_BATCHES
    seen = np.concatenate([b.index for b in batches])
    np.testing.assert_array_equal(np.sort(seen), np.arange(N_CELLS))  # every cell once
    assert not np.array_equal(seen, np.arange(N_CELLS))  # shuffled
    categories = np.asarray(load.obs_categories["cell_type"], dtype=object)
    for batch in batches:
        assert isinstance(batch.X, sparse.csr_matrix) and batch.X.shape == (len(batch), N_GENES)
        np.testing.assert_array_equal(batch.X.toarray(), _rows(source, batch.index))
        obs = source.obs.iloc[batch.index]
        np.testing.assert_array_equal(categories[batch.obs["cell_type"]], obs["cell_type"].to_numpy())
        np.testing.assert_array_equal(batch.obs["total_counts"], obs["total_counts"].to_numpy())
    # the plan depends on the cells and settings only: the same batches as from a copy on disk
    local = _write(source, str(tmp_path / "local.deltacells"), {})
    on_disk = CellLoader(local, batch_size=BATCH, buffer_size=BUFFER, cache_dir=tmp_path / "cache")
    assert _indices(list(on_disk)) == _indices(batches)
    load.set_epoch(1)
    second = list(load)
    assert _indices(second) != _indices(batches)
    np.testing.assert_array_equal(np.sort(np.concatenate([b.index for b in second])), np.arange(N_CELLS))


# ---------------------------------------------------------------------- the requests of an epoch


def test_an_epoch_of_whole_tile_blocks_gets_each_tile_once(
    s3_proxy: ProxiedS3Bucket, proxied_dataset: str, tmp_path: Path
) -> None:
    load = CellLoader(
        proxied_dataset, batch_size=BATCH, buffer_size=BUFFER, block_size=TILE_SIZE,
        storage_options=s3_proxy.storage_options, cache_dir=tmp_path / "cache",
    )  # fmt: skip
    # making the loader reads the manifest and the gene order (no obs asked for), no tile
    opened = Counter(record.path.split("/ds/", 1)[1] for record in s3_proxy.proxy.requests())
    assert opened == Counter({"manifest.json": 1, "gene_order.npy": 1})
    batches, records = _epoch_requests(s3_proxy, load, 0)
    assert len(batches) == N_BATCHES
    # observed: 10 GETs, one whole-object read per tile; max_in_flight 4 (2 tiles a window, 2 windows ahead)
    _assert_whole_tile_gets(load, records)
    assert _tile_gets(records) == Counter(dict.fromkeys(range(N_TILES), 1))
    assert s3_proxy.proxy.max_in_flight > 1
    assert load.dataset.tiles_decoded == N_TILES
    # the next epoch reads them again, once each: windows go past the tile cache (a chunk is read once an epoch)
    batches, records = _epoch_requests(s3_proxy, load, 1)
    assert len(batches) == N_BATCHES
    _assert_whole_tile_gets(load, records)
    assert _tile_gets(records) == Counter(dict.fromkeys(range(N_TILES), 1))
    assert len(load.dataset.cache) == 0


def test_an_epoch_of_chunk_blocks_decodes_each_chunk_once(
    s3_proxy: ProxiedS3Bucket, proxied_dataset: str, tmp_path: Path
) -> None:
    """Blocks of one chunk each (the default), no tile groups: the chunk tables are read when the loader is made
    (one ranged GET of each tile's first bytes), then each window reads the chunks it wants: a tile's first read
    is whole (its prefix is then kept), the next ones only the frames of the chunks wanted. Each chunk is
    decoded once.
    """
    s3_proxy.proxy.reset()
    load = CellLoader(
        proxied_dataset, batch_size=BATCH, buffer_size=BUFFER, group_tiles=0,
        storage_options=s3_proxy.storage_options, cache_dir=tmp_path / "cache",
    )  # fmt: skip
    assert load.block_size == "chunk"
    heads = [record for record in s3_proxy.proxy.requests() if "/tiles/" in record.path]
    assert _tile_gets(heads) == Counter(dict.fromkeys(range(N_TILES), 1))
    assert all(record.range is not None and record.range.startswith("bytes=0-") for record in heads)
    assert sum(record.bytes for record in heads) == N_TILES * (64 + 96 * N_CHUNKS)  # header and chunk table
    chunk_starts = load.dataset.chunk_starts()
    assert len(load._blocks) == N_TILES * N_CHUNKS and chunk_starts[-1] == N_CELLS

    batches, records = _epoch_requests(s3_proxy, load, 0)
    assert len(batches) == N_BATCHES
    np.testing.assert_array_equal(np.sort(np.concatenate([b.index for b in batches])), np.arange(N_CELLS))
    # observed: each tile read whole by its first window (or two, read at once), and again by a window wanting
    # more than half its bytes; other windows read the frames of their chunks alone (ranges not from byte 0)
    tile_bytes = np.asarray(load.dataset.manifest.tile_bytes)
    whole = {_tile_number(r) for r in records if r.bytes == tile_bytes[_tile_number(r)]}
    assert whole == set(range(N_TILES))
    frames = [r for r in records if r.bytes < tile_bytes[_tile_number(r)]]
    assert frames and all(r.range is not None and not r.range.startswith("bytes=0-") for r in frames)
    first_epoch_bytes = sum(r.bytes for r in records)
    assert first_epoch_bytes < 3 * tile_bytes.sum()  # a whole tile for each of its blocks: N_CHUNKS times
    assert load.dataset.chunks_decoded == N_TILES * N_CHUNKS  # no chunk decoded twice
    assert s3_proxy.proxy.max_in_flight > 1
    # the next epoch: every prefix is kept, so no prefix is read again
    batches, records = _epoch_requests(s3_proxy, load, 1)
    assert len(batches) == N_BATCHES
    assert all(r.bytes == tile_bytes[_tile_number(r)] or not r.range.startswith("bytes=0-") for r in records)
    assert sum(r.bytes for r in records) <= first_epoch_bytes
    assert load.dataset.chunks_decoded == 2 * N_TILES * N_CHUNKS


@pytest.mark.parametrize("group_tiles", [None, 4])
def test_tile_groups_fetch_each_tile_once_an_epoch(
    s3_proxy: ProxiedS3Bucket, proxied_dataset: str, source: ad.AnnData, tmp_path: Path, group_tiles: int | None
) -> None:
    """Chunk blocks in tile groups (on object storage by default, 64 tiles: here one group of all 10 tiles): each
    tile is fetched whole with one GET per epoch, ahead of the windows that read it and shared by them, and
    each chunk is decoded once; groups of 4 tiles give each window the tiles of one or two groups."""
    load = CellLoader(
        proxied_dataset, batch_size=BATCH, buffer_size=BUFFER, group_tiles=group_tiles,
        storage_options=s3_proxy.storage_options, cache_dir=tmp_path / "cache",
    )  # fmt: skip
    assert load.group_tiles == (64 if group_tiles is None else group_tiles)
    for epoch in (0, 1):
        batches, records = _epoch_requests(s3_proxy, load, epoch)
        assert len(batches) == N_BATCHES
        seen = np.concatenate([b.index for b in batches])
        np.testing.assert_array_equal(np.sort(seen), np.arange(N_CELLS))
        for batch in batches[::5]:
            np.testing.assert_array_equal(batch.X.toarray(), _rows(source, batch.index))
        _assert_whole_tile_gets(load, records)
        assert _tile_gets(records) == Counter(dict.fromkeys(range(N_TILES), 1))
        assert load.dataset.chunks_decoded == (epoch + 1) * N_TILES * N_CHUNKS  # no chunk decoded twice
        assert s3_proxy.proxy.max_in_flight > 1
        if group_tiles == 4:  # the blocks (chunks) come group by group: 4 tiles of 4 chunks, 4, then 2
            tiles = load._plan()._ranges[2]
            groups = [set(tiles[k : k + 4 * N_CHUNKS].tolist()) for k in range(0, len(tiles), 4 * N_CHUNKS)]
            assert [len(group) for group in groups] == [4, 4, 2]


def test_tile_groups_on_disk_order_as_on_object_storage(
    s3_bucket: S3Bucket, bucket_dataset: str, source: ad.AnnData, tmp_path: Path
) -> None:
    """The same settings give the same batches from a bucket and from a copy on disk; the defaults differ (tile
    groups on object storage only), but not for a dataset of fewer tiles than a group."""
    local = _write(source, str(tmp_path / "local.deltacells"), {})
    options = {"batch_size": BATCH, "buffer_size": BUFFER, "cache_dir": tmp_path / "cache"}
    remote = CellLoader(bucket_dataset, group_tiles=3, storage_options=s3_bucket.storage_options, **options)
    on_disk = CellLoader(local, group_tiles=3, **options)
    assert _indices(list(remote)) == _indices(list(on_disk))
    assert CellLoader(local, **options).group_tiles == 0
    assert _indices(list(CellLoader(local, **options))) != _indices(list(on_disk))


@pytest.mark.parametrize("prefetch", [1, 2])
def test_windows_are_read_ahead(s3_proxy: ProxiedS3Bucket, proxied_dataset: str, tmp_path: Path, prefetch: int) -> None:
    """One tile per window: requests overlap only when windows are read ahead, ``prefetch`` of them at once."""
    load = CellLoader(
        proxied_dataset, batch_size=BATCH, buffer_size=TILE_SIZE, block_size=TILE_SIZE, prefetch=prefetch,
        storage_options=s3_proxy.storage_options, cache_dir=tmp_path / "cache",
    )  # fmt: skip
    _, records = _epoch_requests(s3_proxy, load, 0, latency=2 * LATENCY)
    assert _tile_gets(records) == Counter(dict.fromkeys(range(N_TILES), 1))
    # observed: max_in_flight == prefetch (at most prefetch is certain: a window here is one request)
    assert s3_proxy.proxy.max_in_flight == prefetch


# ---------------------------------------------------------------------- resuming


def test_resume_from_a_state_dict_gives_the_remaining_batches(
    s3_bucket: S3Bucket, bucket_dataset: str, source: ad.AnnData, tmp_path: Path
) -> None:
    def make() -> CellLoader:
        return CellLoader(
            bucket_dataset, batch_size=BATCH, buffer_size=BUFFER, seed=3, obs_columns=["donor"],
            storage_options=s3_bucket.storage_options, cache_dir=tmp_path / "cache",
        )  # fmt: skip

    load = make()
    load.set_epoch(2)
    full = list(load)
    interrupted = iter(load)
    for _ in range(6):  # mid-window: window 1 holds batches 4 .. 7
        next(interrupted)
    state = json.loads(json.dumps(load.state_dict()))  # saved with a checkpoint
    interrupted.close()
    assert state["epoch"] == 2 and state["batches_done"] == 6
    resumed = make()
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert _indices(rest) == _indices(full[6:])
    for batch, expected in zip(rest, full[6:], strict=True):
        np.testing.assert_array_equal(batch.X.toarray(), _rows(source, batch.index))
        np.testing.assert_array_equal(batch.obs["donor"], expected.obs["donor"])


def test_a_resumed_loader_reads_only_the_windows_left(
    s3_proxy: ProxiedS3Bucket, proxied_dataset: str, tmp_path: Path
) -> None:
    def make() -> CellLoader:
        return CellLoader(
            proxied_dataset, batch_size=BATCH, buffer_size=BUFFER, block_size=TILE_SIZE, seed=5,
            storage_options=s3_proxy.storage_options, cache_dir=tmp_path / "cache",
        )  # fmt: skip

    load = make()
    full = list(load)
    done = 6  # window 0 (batches 0 .. 3) and part of window 1 (4 .. 7)
    interrupted = iter(load)
    for _ in range(done):
        next(interrupted)
    state = load.state_dict()
    interrupted.close()
    resumed = make()
    resumed.load_state_dict(state)
    s3_proxy.proxy.reset()
    s3_proxy.proxy.latency = LATENCY
    rest = list(resumed)
    records = s3_proxy.proxy.requests()
    assert _indices(rest) == _indices(full[done:])
    # whole-tile blocks: a window is two tiles; windows 1 .. 4 are read, each tile of them once, window 0's not
    first_window = done // BATCHES_PER_WINDOW
    wanted = np.unique(np.concatenate([b.index for b in full[first_window * BATCHES_PER_WINDOW :]]) // TILE_SIZE)
    assert _tile_gets(records) == Counter(dict.fromkeys(wanted.tolist(), 1))
    assert len(wanted) == N_TILES - 2


def test_blocks_of_large_tiles_are_read_in_ranges(s3_proxy: ProxiedS3Bucket, tmp_path: Path) -> None:
    """Tiles large enough that a chunk is a small part of them: a window holding one block (one chunk) of a tile
    reads the tile's prefix (the first time) and the frames of the block's chunk, not the whole tile; an epoch
    moves about the dataset's bytes, not once per block (8x)."""
    source = synthetic_counts(4096, 600, seed=5)
    url = f"{s3_proxy.url}/large"
    deltacells.write_deltacells(
        source, url, storage_options=s3_proxy.direct_storage_options, tile_size=1024, n_chunks=8, progress=False
    )
    load = CellLoader(
        url, batch_size=128, buffer_size=256, group_tiles=0, storage_options=s3_proxy.storage_options,
        cache_dir=tmp_path / "cache",
    )  # fmt: skip
    assert load.block_size == "chunk"
    batches, records = _epoch_requests(s3_proxy, load, 0)
    seen = np.concatenate([b.index for b in batches])
    np.testing.assert_array_equal(np.sort(seen), np.arange(4096))
    for batch in batches[:3]:
        np.testing.assert_array_equal(batch.X.toarray(), _rows(source, batch.index))
    tiles = [r for r in records if "/tiles/" in r.path]
    moved = sum(r.bytes for r in tiles)
    stored = int(load.dataset.manifest.tile_bytes.sum())
    assert load.dataset._tiles.tiles_read_ranged > 0
    assert any(r.range is not None and not r.range.startswith("bytes=0-") for r in tiles)  # frames, not whole
    assert moved < 1.5 * stored, (moved, stored)  # whole tiles, once per block: 8 times the bytes
    assert load.dataset.chunks_decoded == 4 * 8


def test_rows_read_with_tiles_fetched_by_the_caller(
    s3_proxy: ProxiedS3Bucket, proxied_dataset: str, source: ad.AnnData
) -> None:
    """``read_row_batches(fetched=...)``: the tiles the caller fetched whole come from its fetches (no other
    request for them), the others are read as usual; the rows are the same either way."""
    dataset = deltacells.open_dataset(proxied_dataset, storage_options=s3_proxy.storage_options)
    dataset = dataset.with_gene_order("original")  # the columns of the AnnData written
    rows = np.random.default_rng(0).permutation(N_CELLS)[:300]  # cells of every tile
    cuts = np.array([0, 100, 300])
    expected = [_rows(source, rows[a:b]) for a, b in itertools.pairwise(cuts.tolist())]
    for given in (set(range(N_TILES)), {0, 3, 4}):
        s3_proxy.proxy.reset()
        fetches = {tile: dataset.submit_tile_fetch(tile) for tile in given}
        matrices = dataset.read_row_batches(rows, cuts, fetched=fetches.get)
        for matrix, rows_expected in zip(matrices, expected, strict=True):
            np.testing.assert_array_equal(matrix.toarray(), rows_expected)
            assert matrix.has_sorted_indices
        gets = _tile_gets(s3_proxy.proxy.requests())
        assert all(gets[tile] == 1 for tile in given)  # the caller's fetch only
        assert set(gets) == set(range(N_TILES))


def test_default_tile_groups_hold_at_most_256_mib(s3_bucket: S3Bucket, bucket_dataset: str, tmp_path: Path) -> None:
    from deltacells.loader import _loader

    options = {"storage_options": s3_bucket.storage_options, "cache_dir": tmp_path / "cache"}
    assert CellLoader(bucket_dataset, **options).group_tiles == 64
    dataset = deltacells.open_dataset(bucket_dataset, storage_options=s3_bucket.storage_options)
    tile_bytes = float(np.mean(dataset.manifest.tile_bytes))
    limit = _loader.DEFAULT_REMOTE_GROUP_BYTES
    try:
        _loader.DEFAULT_REMOTE_GROUP_BYTES = int(10 * tile_bytes)
        assert CellLoader(bucket_dataset, **options).group_tiles == 10
        _loader.DEFAULT_REMOTE_GROUP_BYTES = 1
        assert CellLoader(bucket_dataset, **options).group_tiles == 1
    finally:
        _loader.DEFAULT_REMOTE_GROUP_BYTES = limit


def test_chunk_starts_are_kept_in_the_local_cache(
    s3_proxy: ProxiedS3Bucket, proxied_dataset: str, tmp_path: Path
) -> None:
    """Blocks of chunks need every tile's chunk table: read from the bucket by the first loader (one ranged GET
    a tile), then kept in the cache, so that the next process's loader makes no request for them."""
    cache = tmp_path / "cache"
    options = {"batch_size": BATCH, "buffer_size": BUFFER, "storage_options": s3_proxy.storage_options}
    s3_proxy.proxy.reset()
    first = CellLoader(proxied_dataset, cache_dir=cache, **options)
    assert _tile_gets(s3_proxy.proxy.requests()) == Counter(dict.fromkeys(range(N_TILES), 1))
    kept = list((cache / "chunk-starts").glob("*.npy"))
    assert len(kept) == 1
    s3_proxy.proxy.reset()
    again = CellLoader(proxied_dataset, cache_dir=cache, **options)  # a new dataset object, as in a new process
    assert not _tile_gets(s3_proxy.proxy.requests())
    np.testing.assert_array_equal(again._blocks.starts, first._blocks.starts)
    assert _indices(list(again)) == _indices(list(first))
    # a kept file that does not fit the manifest is read again (and replaced)
    np.save(kept[0], np.array([0, 5, 3, N_CELLS]))
    s3_proxy.proxy.reset()
    fixed = CellLoader(proxied_dataset, cache_dir=cache, **options)
    assert _tile_gets(s3_proxy.proxy.requests()) == Counter(dict.fromkeys(range(N_TILES), 1))
    np.testing.assert_array_equal(fixed._blocks.starts, first._blocks.starts)
    np.testing.assert_array_equal(np.load(kept[0]), first.dataset.chunk_starts())
    # another cache, another read
    s3_proxy.proxy.reset()
    CellLoader(proxied_dataset, cache_dir=tmp_path / "other", **options)
    assert _tile_gets(s3_proxy.proxy.requests()) == Counter(dict.fromkeys(range(N_TILES), 1))


def test_chunk_starts_of_a_dataset_on_disk_are_not_kept(source: ad.AnnData, tmp_path: Path) -> None:
    local = _write(source, str(tmp_path / "local.deltacells"), {})
    CellLoader(local, batch_size=BATCH, cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache" / "chunk-starts").exists()


# ---------------------------------------------------------------------- a broken dataset


@pytest.mark.parametrize("group_tiles", [None, 0])
@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_a_broken_tile_stops_the_epoch_with_an_error_naming_it(
    s3_bucket: S3Bucket, source: ad.AnnData, tmp_path: Path, group_tiles: int | None, damage: str
) -> None:
    """A tile gone or altered (same size, so that only its CRC-32 or frames tell) after the loader was made: the
    epoch raises the format's error naming the tile, from the window reading it, and stops (no hang; the
    module's timeout)."""
    import s3fs

    from deltacells.errors import FormatError, MissingObjectError
    from deltacells.format import tile_path

    url = _write(source, f"{s3_bucket.url}/broken-{damage}-{group_tiles}", s3_bucket.storage_options)
    load = CellLoader(
        url, batch_size=BATCH, buffer_size=BUFFER, group_tiles=group_tiles,
        storage_options=s3_bucket.storage_options, cache_dir=tmp_path / "cache",
    )  # fmt: skip
    fs = s3fs.S3FileSystem(**s3_bucket.storage_options)
    key = f"{url.removeprefix('s3://')}/{tile_path(3)}"
    if damage == "missing":
        fs.rm(key)
    else:
        blob = bytearray(fs.cat_file(key))
        blob[-100] ^= 0xFF  # a byte of the last frames: the header and chunk table still read as before
        fs.pipe_file(key, bytes(blob))
    expected = MissingObjectError if damage == "missing" else FormatError
    with pytest.raises(expected, match=r"tile_000003|tile 3"):
        list(load)
