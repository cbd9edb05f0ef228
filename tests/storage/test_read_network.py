"""Reading datasets over the network: requests made, faults, http(s)://, memory:// and pickling.

Datasets are written to the S3 server directly (``direct_storage_options``), the proxy's log is reset, then
they are read through the :class:`~tests.servers.proxy.RecordingProxy`. Tests assert request counts, bytes
and statuses, never durations.
"""

from __future__ import annotations

import pickle
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anndata as ad
import fsspec
import numpy as np
import pytest
from scipy import sparse

import deltacells
from deltacells.core import open_dataset
from deltacells.datasets import synthetic_counts
from deltacells.errors import DatasetNotFoundError, StorageAccessError, StorageError, StorageTimeoutError
from deltacells.storage import BaseStore, FsspecStore, ObstoreStore, RetryPolicy

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.servers import ProxiedS3Bucket, ServedDirectory
    from tests.servers.proxy import Record

N_CELLS, N_GENES, TILE_SIZE = 1200, 50, 100
N_TILES = N_CELLS // TILE_SIZE  # 12
FAULTY_TILE = 3
FAULTY_NAME = f"tiles/tile_{FAULTY_TILE:06d}.dct"
FAULTY_ROWS = slice(FAULTY_TILE * TILE_SIZE, (FAULTY_TILE + 1) * TILE_SIZE)


@pytest.fixture(scope="module")
def source() -> ad.AnnData:
    """The in-memory dataset every test writes."""
    return synthetic_counts(N_CELLS, N_GENES, seed=0)


@pytest.fixture
def s3_dataset(s3_proxy: ProxiedS3Bucket, source: ad.AnnData) -> str:
    """``source`` written to the S3 server directly; the proxy's log is empty. Returns the dataset URL."""
    url = f"{s3_proxy.url}/ds"
    deltacells.write_deltacells(
        source, url, storage_options=s3_proxy.direct_storage_options, tile_size=TILE_SIZE, progress=False
    )
    s3_proxy.proxy.reset()
    return url


def _dense(matrix: Any) -> np.ndarray:
    return matrix.toarray() if sparse.issparse(matrix) else np.asarray(matrix)


def _assert_same(actual: Any, expected: Any) -> None:
    a, b = sparse.csr_matrix(actual), sparse.csr_matrix(expected)
    assert a.shape == b.shape
    assert (a != b).nnz == 0


def _objects(records: list[Record], prefix: str) -> Counter[str]:
    """How many times each object (path relative to ``prefix``) was requested."""
    return Counter(record.path.split(prefix, 1)[-1].lstrip("/") for record in records)


#: The objects read_deltacells + X.to_memory() requests, and how often (the obs shard is localized into
#: cache_dir, read whole once with its SHA-256 checked).
_EXPECTED_READ = Counter(
    {
        "manifest.json": 1,
        "gene_order.npy": 1,
        "var.parquet": 1,
        "obs/schema.json": 1,
        "obs/obs_0000.parquet": 1,
        **{f"tiles/tile_{i:06d}.dct": 1 for i in range(N_TILES)},
    }
)


#: The two clients of s3:// URLs: tests of faults, timeouts and pickling run with each.
CLIENTS = {"fsspec": FsspecStore, "obstore": ObstoreStore}


@pytest.fixture(params=list(CLIENTS))
def client(request: pytest.FixtureRequest) -> type[BaseStore]:
    """The store class of one client (obstore's skipped where it is not installed)."""
    if request.param == "obstore":
        pytest.importorskip("obstore")
    return CLIENTS[request.param]


def _with_config(options: dict[str, Any], **config: Any) -> dict[str, Any]:
    """s3fs ``options`` with ``config`` merged into their ``config_kwargs``."""
    return {**options, "config_kwargs": {**(options.get("config_kwargs") or {}), **config}}


# ------------------------------------------------------------------------------ requests of a healthy read


def test_open_makes_one_get_of_the_manifest(s3_proxy: ProxiedS3Bucket, s3_dataset: str) -> None:
    ds = open_dataset(s3_dataset, storage_options=s3_proxy.storage_options, tile_cache_bytes=0)
    assert ds.manifest.n_tiles == N_TILES
    records = s3_proxy.proxy.requests()
    # observed: [GET /<bucket>/ds/manifest.json 200]
    assert len(records) == 1
    (record,) = records
    assert record.method == "GET"
    assert record.path == f"/{s3_proxy.name}/ds/manifest.json"
    assert record.status == 200
    assert "list-type" not in record.query
    assert s3_proxy.proxy.count("HEAD") == 0


@pytest.mark.parametrize("asked", [None, "when_supported"])
def test_botocore_checks_no_response_unless_asked(
    s3_proxy: ProxiedS3Bucket, s3_dataset: str, asked: str | None
) -> None:
    """Tiles read whole carry their own CRC-32: botocore's checksum of each response is off, unless the user asks."""
    options = (
        s3_proxy.storage_options
        if asked is None
        else _with_config(s3_proxy.storage_options, response_checksum_validation=asked)
    )
    ds = open_dataset(FsspecStore(s3_dataset, options), tile_cache_bytes=0)
    assert sum(tile.n_cells for _, tile in ds.iter_tiles()) == ds.n_cells
    client = ds.store.fs.s3  # s3fs's botocore client, made by the reads above
    assert client.meta.config.response_checksum_validation == (asked or "when_required")


def test_full_scan_makes_one_get_per_tile(s3_proxy: ProxiedS3Bucket, s3_dataset: str) -> None:
    proxy = s3_proxy.proxy
    ds = open_dataset(s3_dataset, storage_options=s3_proxy.storage_options, tile_cache_bytes=0)
    proxy.reset()
    proxy.latency = 0.05
    for _ in ds.iter_tiles():
        pass
    records = proxy.requests()
    # observed: 12 GETs, one per tile, each 206 with exactly the tile's bytes; no HEAD, no LIST
    assert proxy.count("HEAD") == 0
    assert all(record.method == "GET" and "list-type" not in record.query for record in records)
    per_object = _objects(records, f"/{s3_proxy.name}/ds/")
    assert per_object == Counter({f"tiles/tile_{i:06d}.dct": 1 for i in range(N_TILES)})
    assert all(record.status in (200, 206) for record in records)
    tile_bytes = np.asarray(ds.manifest.tile_bytes)
    by_tile = {record.path.rsplit("/", 1)[-1]: record.bytes for record in records}
    assert [by_tile[f"tile_{i:06d}.dct"] for i in range(N_TILES)] == tile_bytes.tolist()
    assert proxy.max_in_flight > 1


def _scan(s3_proxy: ProxiedS3Bucket, url: str, **kwargs: Any) -> None:
    """Open ``url`` through the proxy, reset the log, and read every tile with 50 ms of latency per request."""
    ds = open_dataset(url, storage_options=s3_proxy.storage_options, tile_cache_bytes=0, **kwargs)
    s3_proxy.proxy.reset()
    s3_proxy.proxy.latency = 0.05
    for _ in ds.iter_tiles():
        pass


def test_full_scan_respects_io_concurrency(s3_proxy: ProxiedS3Bucket, s3_dataset: str) -> None:
    _scan(s3_proxy, s3_dataset, io_concurrency=2, threads=2)
    proxy = s3_proxy.proxy
    # observed: max_in_flight == 2
    assert 1 <= proxy.max_in_flight <= 2
    assert proxy.count("HEAD") == 0
    assert set(_objects(proxy.requests(), f"/{s3_proxy.name}/ds/")) == {
        f"tiles/tile_{i:06d}.dct" for i in range(N_TILES)
    }


def test_full_scan_with_low_io_concurrency_reads_each_tile_once(s3_proxy: ProxiedS3Bucket, s3_dataset: str) -> None:
    _scan(s3_proxy, s3_dataset, io_concurrency=2, threads=2)
    # the fetch stage always runs ahead of the decode stage: no tile is fetched twice (a bug once: 20 GETs)
    per_object = _objects(s3_proxy.proxy.requests(), f"/{s3_proxy.name}/ds/")
    assert per_object == Counter({f"tiles/tile_{i:06d}.dct": 1 for i in range(N_TILES)})


def test_read_deltacells_requests_each_object_once(
    s3_proxy: ProxiedS3Bucket, s3_dataset: str, source: ad.AnnData, tmp_path: Path
) -> None:
    adata = deltacells.read_deltacells(s3_dataset, storage_options=s3_proxy.storage_options, cache_dir=tmp_path)
    assert list(adata.var_names) == list(source.var_names)
    _assert_same(adata.X.to_memory(), source.X)
    records = s3_proxy.proxy.requests()
    per_object = _objects(records, f"/{s3_proxy.name}/ds/")
    # observed (17 GETs, no HEAD, no LIST): manifest.json 1, gene_order.npy 1, obs/schema.json 1,
    # obs/obs_0000.parquet 1 (range bytes=0-, localized into cache_dir with its SHA-256 checked),
    # var.parquet 1, tiles/tile_0000NN.dct 1 each (12)
    assert per_object == _EXPECTED_READ
    assert all(record.method == "GET" and "list-type" not in record.query for record in records)
    assert all(record.status in (200, 206) for record in records)


# ------------------------------------------------------------------------------ faults


def _tile_url(dataset_url: str) -> str:
    return f"{dataset_url}/{FAULTY_NAME}"


def test_403_on_a_tile_names_the_tile_and_credentials(
    s3_proxy: ProxiedS3Bucket, s3_dataset: str, client: type[FsspecStore]
) -> None:
    ds = open_dataset(client(s3_dataset, s3_proxy.storage_options), tile_cache_bytes=0)
    s3_proxy.proxy.add_fault(FAULTY_NAME, status=403)
    with pytest.raises(StorageAccessError) as info:
        ds.read_rows(FAULTY_ROWS)
    assert isinstance(info.value, PermissionError)
    message = str(info.value)
    assert _tile_url(s3_dataset) in message
    assert "credentials" in message
    # observed: one GET of the tile, answered 403 (a refusal is not retried)
    faulted = s3_proxy.proxy.requests("GET", path_contains=FAULTY_NAME)
    assert [record.status for record in faulted] == [403]


def test_403_on_the_manifest_names_it(s3_proxy: ProxiedS3Bucket, s3_dataset: str, client: type[FsspecStore]) -> None:
    s3_proxy.proxy.add_fault("manifest.json", status=403)
    with pytest.raises(StorageAccessError) as info:
        open_dataset(client(s3_dataset, s3_proxy.storage_options), tile_cache_bytes=0)
    # a refusal is not an absent dataset: StorageAccessError, not DatasetNotFoundError
    assert not isinstance(info.value, DatasetNotFoundError)
    assert f"{s3_dataset}/manifest.json" in str(info.value)
    assert "credentials" in str(info.value)
    # observed: one GET of manifest.json, 403
    assert [(r.method, r.status) for r in s3_proxy.proxy.requests()] == [("GET", 403)]


def test_transient_503_is_retried(
    s3_proxy: ProxiedS3Bucket, s3_dataset: str, source: ad.AnnData, client: type[FsspecStore]
) -> None:
    store = client(s3_dataset, s3_proxy.storage_options, retry=RetryPolicy(attempts=4, backoff=0.01))
    ds = open_dataset(store, tile_cache_bytes=0).with_gene_order("original")  # reads gene_order.npy
    s3_proxy.proxy.add_fault(FAULTY_NAME, status=503, times=2)
    rows = ds.read_rows(FAULTY_ROWS)
    _assert_same(rows, source.X[FAULTY_ROWS])
    # observed: 3 GETs of the tile: 503, 503, 206
    statuses = [record.status for record in s3_proxy.proxy.requests("GET", path_contains=FAULTY_NAME)]
    assert statuses == [503, 503, 206]


def test_persistent_503_gives_storage_error_after_the_attempts(
    s3_proxy: ProxiedS3Bucket, s3_dataset: str, client: type[FsspecStore]
) -> None:
    store = client(s3_dataset, s3_proxy.storage_options, retry=RetryPolicy(attempts=3, backoff=0.01))
    ds = open_dataset(store, tile_cache_bytes=0)
    s3_proxy.proxy.add_fault(FAULTY_NAME, status=503)
    with pytest.raises(StorageError) as info:
        ds.read_rows(FAULTY_ROWS)
    assert _tile_url(s3_dataset) in str(info.value)
    assert "3 attempts" in str(info.value)
    # observed: 3 GETs of the tile, all 503
    statuses = [record.status for record in s3_proxy.proxy.requests("GET", path_contains=FAULTY_NAME)]
    assert statuses == [503, 503, 503]


@pytest.mark.timeout(60)
def test_hung_tile_times_out_by_the_policy(
    s3_proxy: ProxiedS3Bucket, s3_dataset: str, client: type[FsspecStore]
) -> None:
    store = client(s3_dataset, s3_proxy.storage_options, retry=RetryPolicy(attempts=2, backoff=0.01, timeout=1.0))
    ds = open_dataset(store, tile_cache_bytes=0)
    s3_proxy.proxy.add_fault(FAULTY_NAME, hang=True)
    with pytest.raises(StorageTimeoutError) as info:
        ds.read_rows(FAULTY_ROWS)
    assert isinstance(info.value, TimeoutError)
    assert _tile_url(s3_dataset) in str(info.value)
    # observed: 2 GETs of the tile, both hung (no status)
    faulted = s3_proxy.proxy.requests("GET", path_contains=FAULTY_NAME)
    assert len(faulted) == 2
    assert all(record.fault == "hang" for record in faulted)


@pytest.mark.timeout(60)
def test_hung_tile_times_out_by_storage_options(
    s3_proxy: ProxiedS3Bucket, s3_dataset: str, client: type[FsspecStore]
) -> None:
    options = _with_config(s3_proxy.storage_options, read_timeout=1, connect_timeout=1)
    store = client(s3_dataset, options, retry=RetryPolicy(attempts=2, backoff=0.01))  # default timeout=120
    ds = open_dataset(store, tile_cache_bytes=0)
    s3_proxy.proxy.add_fault(FAULTY_NAME, hang=True)
    with pytest.raises(StorageTimeoutError) as info:
        ds.read_rows(FAULTY_ROWS)
    assert _tile_url(s3_dataset) in str(info.value)
    # observed: 2 GETs of the tile (botocore's read timeout, then deltacells' one retry), both hung
    faulted = s3_proxy.proxy.requests("GET", path_contains=FAULTY_NAME)
    assert len(faulted) == 2
    assert all(record.fault == "hang" for record in faulted)


# ------------------------------------------------------------------------------ other filesystems


def test_http_read(http_server: Callable[[Path], ServedDirectory], source: ad.AnnData, tmp_path: Path) -> None:
    root = tmp_path / "served"
    deltacells.write_deltacells(source, root / "ds", tile_size=TILE_SIZE, progress=False)
    served = http_server(root)
    adata = deltacells.read_deltacells(f"{served.url}/ds", cache_dir=tmp_path / "cache")
    _assert_same(adata.X.to_memory(), source.X)
    records = served.proxy.requests()
    per_object = _objects([r for r in records if r.method == "GET"], "/ds/")
    # observed (17 GETs, no HEAD at all): the same objects as on S3, once each
    assert served.proxy.count("HEAD") == 0
    assert all(record.method == "GET" for record in records)
    assert per_object == _EXPECTED_READ, per_object
    assert all(record.status in (200, 206) for record in records)


def test_memory_round_trip(source: ad.AnnData, tmp_path: Path) -> None:
    name = f"deltacells-test-{uuid.uuid4().hex}"
    url = f"memory://{name}/ds"
    try:
        deltacells.write_deltacells(source, url, tile_size=TILE_SIZE, progress=False)
        adata = deltacells.read_deltacells(url, cache_dir=tmp_path)
        _assert_same(adata.X.to_memory(), source.X)
        assert list(adata.var_names) == list(source.var_names)
    finally:
        fs = fsspec.filesystem("memory")
        if fs.exists(f"/{name}"):
            fs.rm(f"/{name}", recursive=True)


# ------------------------------------------------------------------------------ pickling


def test_pickled_lazy_x_reads_the_same(
    s3_proxy: ProxiedS3Bucket, s3_dataset: str, source: ad.AnnData, tmp_path: Path
) -> None:
    adata = deltacells.read_deltacells(s3_dataset, storage_options=s3_proxy.storage_options, cache_dir=tmp_path)
    s3_proxy.proxy.reset()
    data = pickle.dumps(adata.X)
    assert s3_proxy.proxy.count() == 0  # pickling makes no request
    x = pickle.loads(data)
    # observed: unpickling makes 1 GET, of gene_order.npy (the copy's Dataset is rebuilt from URL + options +
    # io_concurrency and re-reads the gene order it needs for the "original" order; the manifest travels inside)
    assert [(r.method, r.path.rsplit("/", 1)[-1]) for r in s3_proxy.proxy.requests()] == [("GET", "gene_order.npy")]
    s3_proxy.proxy.reset()
    _assert_same(x.to_memory(), source.X)
    # observed: the copy reads the 12 tiles through the proxy, one GET each, nothing else
    per_object = _objects(s3_proxy.proxy.requests(), f"/{s3_proxy.name}/ds/")
    assert per_object == Counter({f"tiles/tile_{i:06d}.dct": 1 for i in range(N_TILES)})


def test_pickled_dataset_reads_the_same(
    s3_proxy: ProxiedS3Bucket, s3_dataset: str, source: ad.AnnData, client: type[FsspecStore]
) -> None:
    store = client(s3_dataset, s3_proxy.storage_options, io_concurrency=3)
    ds = open_dataset(store, tile_cache_bytes=0).with_gene_order("original")
    copy = pickle.loads(pickle.dumps(ds))
    assert type(copy.store) is client
    assert copy.store.url == s3_dataset
    assert copy.store.io_concurrency == 3
    assert copy.store.storage_options == s3_proxy.storage_options
    _assert_same(copy.read_rows(slice(None)), source.X)


def test_few_cells_of_a_tile_are_read_in_ranges(s3_proxy: ProxiedS3Bucket, s3_dataset: str, source: ad.AnnData) -> None:
    """One cell of a tile: its prefix (header, chunk table, indptr), then only the frames of one chunk."""
    dataset = open_dataset(s3_dataset, storage_options=s3_proxy.storage_options, tile_cache_bytes=0)
    dataset = dataset.with_gene_order("original")
    size = int(dataset.manifest.tile_bytes[3])
    s3_proxy.proxy.reset()
    cells = np.array([3 * TILE_SIZE + 5, 7 * TILE_SIZE + 60])
    _assert_same(dataset.read_rows(cells), source.X[cells])
    for tile in (3, 7):
        records = s3_proxy.proxy.requests(path_contains=f"tile_{tile:06d}.dct")
        assert len(records) == 2, records  # the prefix, then one range of frames (one chunk)
        assert all(record.range and record.range.startswith("bytes=") for record in records)
        assert sum(record.bytes for record in records) < size / 2
    assert dataset._tiles.tiles_read_ranged == 2
    # many cells of a tile: one whole-object request (and the tile can be cached)
    s3_proxy.proxy.reset()
    many = np.arange(5 * TILE_SIZE, 6 * TILE_SIZE, 2)
    _assert_same(dataset.read_rows(many), source.X[many])
    assert s3_proxy.proxy.count(path_contains="tile_000005.dct") == 1
