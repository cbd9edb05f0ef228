"""Reading cells: every kind of row index against a scipy oracle, tile counting, the cache, fsspec and corruption."""

from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import sparse

import deltacells
import deltacells.core._row_gathers as gathers_module
from deltacells import FormatError
from deltacells.core import Dataset, DatasetWriter, open_dataset
from deltacells.errors import DeltaCellsWarning, MissingObjectError
from deltacells.storage import FsspecStore
from deltacells.tiles import TileCache

SHAPES = {
    "uneven": {"n_cells": 103, "n_genes": 17, "tile_size": 10},
    "tile_size_1": {"n_cells": 7, "n_genes": 5, "tile_size": 1},
    "one_gene": {"n_cells": 41, "n_genes": 1, "tile_size": 8},
    "single_partial_tile": {"n_cells": 6, "n_genes": 12, "tile_size": 100},
    "zero_rows": {"n_cells": 0, "n_genes": 9, "tile_size": 4},
}


class Oracle:
    """A dataset on disk and the dense int64 matrix it must read back as."""

    def __init__(self, path: Path, dense: np.ndarray, tile_size: int) -> None:
        self.path = path
        self.dense = dense
        self.tile_size = tile_size

    @property
    def n(self) -> int:
        return self.dense.shape[0]

    def open(self, **options: Any) -> Dataset:
        return open_dataset(self.path, **options)


def _oracle(write: Callable[..., Path], make: Callable[..., sparse.csr_matrix], name: str, seed: int = 0) -> Oracle:
    shape = SHAPES[name]
    density = 0.6 if shape["n_genes"] == 1 else 0.3
    counts = make(shape["n_cells"], shape["n_genes"], density=density, seed=seed)
    path = write(counts, tile_size=shape["tile_size"], block_rows=7)
    return Oracle(path, counts.toarray(), shape["tile_size"])


@pytest.fixture(scope="module")
def oracles(write_module_dataset, make_counts) -> dict[str, Oracle]:
    """One dataset per entry of SHAPES."""
    return {name: _oracle(write_module_dataset, make_counts, name) for name in SHAPES}


@pytest.fixture(params=list(SHAPES))
def oracle(request, oracles) -> Oracle:
    return oracles[request.param]


@pytest.fixture(scope="module")
def uneven(write_module_dataset, make_counts) -> Oracle:
    """103 cells x 17 genes in 11 tiles of 10 (the last holds 3)."""
    return _oracle(write_module_dataset, make_counts, "uneven", seed=5)


# ---------------------------------------------------------------------------------------------- row indices


def _ints(n: int, rng: np.random.Generator) -> Any:
    return rng.integers(-n, n, size=2 * n + 3) if n else None


INDEX_CASES: dict[str, Callable[[int, np.random.Generator], Any]] = {
    "full-default": lambda n, rng: slice(None),
    "slice-middle": lambda n, rng: slice(n // 4, 3 * n // 4),
    "slice-step-3": lambda n, rng: slice(1, None, 3),
    "slice-step-7-from-2": lambda n, rng: slice(2, n - 1, 7),
    "slice-reversed": lambda n, rng: slice(None, None, -1),
    "slice-negative-step-2": lambda n, rng: slice(-2, 0, -2),
    "slice-negative-bounds": lambda n, rng: slice(-n // 2, -1),
    "slice-out-of-range": lambda n, rng: slice(-10 * n - 5, 10 * n + 5),
    "slice-out-of-range-reversed": lambda n, rng: slice(10 * n + 5, -10 * n - 5, -3),
    "slice-empty": lambda n, rng: slice(5, 2),
    "slice-empty-past-end": lambda n, rng: slice(n + 3, n + 10),
    "slice-empty-reversed": lambda n, rng: slice(0, 5, -1),
    "int-first": lambda n, rng: 0 if n else None,
    "int-middle": lambda n, rng: n // 2 if n else None,
    "int-last-negative": lambda n, rng: -1 if n else None,
    "int-first-negative": lambda n, rng: -n if n else None,
    "numpy-int": lambda n, rng: np.int32(n - 1) if n else None,
    "array-random-repeats": _ints,
    "array-uint": lambda n, rng: rng.integers(0, n, size=n + 2).astype(np.uint32) if n else None,
    "array-ascending-unique": lambda n, rng: np.unique(rng.integers(0, n, size=n)) if n else None,
    "array-descending-repeats": lambda n, rng: np.sort(rng.integers(0, n, size=n))[::-1] if n else None,
    "array-all-same": lambda n, rng: np.full(5, n // 3) if n else None,
    "list-of-ints": lambda n, rng: [int(x) for x in _ints(n, rng)] if n else None,
    "range": lambda n, rng: range(n - 1, -1, -2),
    "bool-mask": lambda n, rng: rng.random(n) < 0.4,
    "bool-mask-all": lambda n, rng: np.ones(n, dtype=bool),
    "bool-mask-none": lambda n, rng: np.zeros(n, dtype=bool),
    "bool-list": lambda n, rng: [bool(x) for x in rng.random(n) < 0.5],
    "empty-int-array": lambda n, rng: np.array([], dtype=np.int64),
    "empty-list": lambda n, rng: [],
}


def _expected_rows(index: Any, n: int) -> np.ndarray:
    """Rows selected by ``index``, computed by numpy (the oracle of the indexing)."""
    if isinstance(index, list) and not index:
        return np.zeros(0, dtype=np.int64)
    return np.atleast_1d(np.arange(n)[index])


def _index(case: str, n: int) -> Any:
    return INDEX_CASES[case](n, np.random.default_rng(len(case)))


@pytest.mark.parametrize(
    ("shape", "case"),
    [
        (shape, case)
        for shape in SHAPES
        for case in INDEX_CASES
        if _index(case, SHAPES[shape]["n_cells"]) is not None  # cases that need a cell are left out for 0 cells
    ],
)
def test_read_rows_matches_oracle(oracles, shape, case, assert_csr_equals):
    oracle = oracles[shape]
    index = _index(case, oracle.n)
    ds = oracle.open()
    rows = _expected_rows(index, oracle.n)
    assert_csr_equals(ds.read_rows(index), oracle.dense[rows])


def test_read_rows_no_argument_is_everything(oracle, assert_csr_equals):
    ds = oracle.open()
    assert ds.shape == oracle.dense.shape
    assert ds.n_cells == oracle.n
    assert ds.n_genes == oracle.dense.shape[1]
    assert ds.n_tiles == -(-oracle.n // oracle.tile_size)
    assert_csr_equals(ds.read_rows(), oracle.dense)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, "int64", "float64"])
def test_read_rows_dtypes(write_dataset, dtype, assert_csr_equals):
    dense = np.zeros((9, 6), dtype=np.int64)
    dense[0, 0] = 2**24  # the largest count float32 holds exactly: no warning (filterwarnings = error)
    dense[3, 2] = 65536
    dense[4, 1:4] = [1, 2, 3]
    dense[8, 5] = 7
    ds = open_dataset(write_dataset(sparse.csr_matrix(dense), tile_size=4))
    result = ds.read_rows(dtype=dtype)
    assert_csr_equals(result, dense, dtype)
    assert result[0, 0] == 2**24


def _big_counts_dataset(write_dataset) -> tuple[Dataset, np.ndarray]:
    dense = np.zeros((9, 6), dtype=np.int64)
    dense[0, 0] = 2**31 - 1
    dense[1, 5] = 2**24 + 1  # not exact in float32
    dense[4, 1:4] = [1, 2, 3]
    dense[8, 5] = 7
    return open_dataset(write_dataset(sparse.csr_matrix(dense), tile_size=4)), dense


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_counts_above_2_24_exact_in_wide_dtypes(write_dataset, dtype, assert_csr_equals):
    ds, dense = _big_counts_dataset(write_dataset)
    result = ds.read_rows(dtype=dtype)  # no warning: these dtypes are exact
    assert_csr_equals(result, dense, dtype)
    assert result[0, 0] == 2**31 - 1
    assert result[1, 5] == 2**24 + 1


def test_float32_without_big_counts_in_the_tiles_read_does_not_warn(write_dataset, assert_csr_equals):
    ds, dense = _big_counts_dataset(write_dataset)
    assert_csr_equals(ds.read_rows([4, 8], dtype=np.float32), dense[[4, 8]], np.float32)  # no count above 2^24 there


def test_float32_warns_once_for_counts_above_2_24(write_dataset, assert_csr_equals):
    ds, dense = _big_counts_dataset(write_dataset)
    with pytest.warns(DeltaCellsWarning, match=r"above 2\^24") as record:
        result = ds.read_rows(dtype=np.float32)
    assert len(record) == 1
    assert record[0].filename == __file__  # attributed to the caller, not to deltacells
    assert_csr_equals(result, dense, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds.read_rows([0, 1], dtype=np.float32)  # once per dataset
        ds.read_rows(dtype=np.float64)


def test_default_dtype_is_the_one_written(uneven, write_dataset):
    assert uneven.open().dtype == uneven.dense.dtype == np.int64
    assert uneven.open().read_rows([0, 1]).dtype == np.int64
    assert uneven.open().read_rows(slice(0, 30)).dtype == np.int64
    assert uneven.open().read_rows_uncached([3, 0]).dtype == np.int64


def test_a_dataset_that_records_no_dtype_reads_as_float32(write_dataset):
    path = Path(write_dataset(sparse.csr_matrix(np.ones((3, 2), dtype=np.int32)), tile_size=2))
    manifest = json.loads((path / "manifest.json").read_text())
    del manifest["metadata"]["deltacells"]  # as written before the dtype was recorded
    (path / "manifest.json").write_text(json.dumps(manifest))
    assert open_dataset(path).recorded_dtype is None
    assert open_dataset(path).read_rows().dtype == np.float32


def test_result_index_dtype_is_int32(uneven):
    result = uneven.open().read_rows()
    assert result.indices.dtype == np.int32
    assert result.indptr.dtype == np.int32


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_read_rows_property(uneven, data, assert_csr_equals):
    n = uneven.n
    rows = data.draw(st.lists(st.integers(-n, n - 1), max_size=60))
    threads = data.draw(st.sampled_from([1, 2]))
    cache = data.draw(st.sampled_from([0, 2**20]))
    ds = uneven.open(threads=threads, tile_cache_bytes=cache)
    index = np.asarray(rows, dtype=np.int64)
    assert_csr_equals(ds.read_rows(index), uneven.dense[index] if rows else uneven.dense[:0])


@pytest.mark.parametrize(
    "make_index",
    [
        pytest.param(lambda n: np.ones(n + 1, dtype=bool), id="mask-too-long"),
        pytest.param(lambda n: np.ones(n - 1, dtype=bool), id="mask-too-short"),
        pytest.param(lambda n: [True] * (n + 2), id="bool-list-too-long"),
        pytest.param(lambda n: np.ones((n, 1), dtype=bool), id="mask-2d"),
        pytest.param(lambda n: True, id="bool-scalar"),
        pytest.param(lambda n: n, id="int-n"),
        pytest.param(lambda n: -n - 1, id="int-below"),
        pytest.param(lambda n: np.int64(10 * n), id="numpy-int-far"),
        pytest.param(lambda n: np.array([0, 1, n]), id="array-with-n"),
        pytest.param(lambda n: [0, -n - 1], id="list-with-below"),
        pytest.param(lambda n: np.array([2**40], dtype=np.uint64), id="uint64-huge"),
    ],
)
def test_out_of_range_index_raises_index_error(uneven, make_index):
    ds = uneven.open()
    with pytest.raises(IndexError, match=r"out of range|does not match"):
        ds.read_rows(make_index(uneven.n))


@pytest.mark.parametrize(
    "index",
    [
        pytest.param(np.array([0.0, 1.0]), id="float-array"),
        pytest.param([0.0, 2.0], id="float-list"),
        pytest.param(np.array([1.5], dtype=np.float32), id="float32-array"),
        pytest.param(1.0, id="float-scalar"),
        pytest.param("3", id="string"),
        pytest.param(["a", "b"], id="string-list"),
        pytest.param(None, id="none"),
        pytest.param(np.array([1 + 0j]), id="complex"),
    ],
)
def test_non_integer_index_raises_type_error(uneven, index):
    with pytest.raises(TypeError, match="integers, slices or a boolean mask"):
        uneven.open().read_rows(index)


def test_zero_cell_dataset_rejects_any_int(write_dataset):
    ds = open_dataset(write_dataset(sparse.csr_matrix((0, 3), dtype=np.int64)))
    with pytest.raises(IndexError):
        ds.read_rows(0)
    with pytest.raises(IndexError):
        ds.read_rows([-1])


# ---------------------------------------------------------------------------------------------- tiles decoded


def test_tile_of_and_tile_range(uneven):
    ds = uneven.open()
    tiles, local = ds.tile_of(np.array([0, 9, 10, 11, 99, 100, 102]))
    np.testing.assert_array_equal(tiles, [0, 0, 1, 1, 9, 10, 10])
    np.testing.assert_array_equal(local, [0, 9, 0, 1, 9, 0, 2])
    assert ds.tile_range(0) == (0, 10)
    assert ds.tile_range(10) == (100, 103)


@pytest.mark.parametrize(
    ("index", "n_decoded"),
    [
        pytest.param([25, 52, 21, 58, 25], 2, id="tiles-2-and-5"),
        pytest.param(slice(20, 40), 2, id="slice-two-whole-tiles"),
        pytest.param(slice(19, 41), 4, id="slice-straddling"),
        pytest.param(102, 1, id="int-last-tile"),
        pytest.param(-103, 1, id="int-first-tile"),
        pytest.param(np.arange(103) >= 100, 1, id="mask-last-tile"),
        pytest.param([], 0, id="empty"),
        pytest.param(slice(50, 50), 0, id="empty-slice"),
        pytest.param(slice(None, None, 10), 11, id="one-row-per-tile"),
        pytest.param([99, 0, 99, 0], 2, id="first-and-tenth"),
        pytest.param(slice(None), 11, id="everything"),
    ],
)
@pytest.mark.parametrize("threads", [1, 2])
def test_only_needed_tiles_are_decoded(uneven, index, n_decoded, threads, assert_csr_equals):
    ds = uneven.open(tile_cache_bytes=0, threads=threads)
    assert ds.tiles_decoded == 0
    result = ds.read_rows(index)
    assert ds.tiles_decoded == n_decoded
    assert_csr_equals(result, uneven.dense[_expected_rows(index, uneven.n)])


def test_without_cache_every_read_decodes(uneven):
    ds = uneven.open(tile_cache_bytes=0, threads=1)
    first = ds.read_rows([25, 52])
    second = ds.read_rows([25, 52])
    assert ds.tiles_decoded == 4
    assert len(ds.cache) == 0
    assert ds.cache.nbytes == 0
    assert (first != second).nnz == 0


def test_cache_decodes_once(uneven):
    ds = uneven.open(threads=1)
    first = ds.read_rows([25, 52])
    assert ds.tiles_decoded == 2 and ds.chunks_decoded == 2  # one chunk of each (partial tiles, cached)
    second = ds.read_rows([52, 25])
    assert ds.tiles_decoded == 2 and ds.chunks_decoded == 2
    assert (first[[1, 0]] != second).nnz == 0
    assert len(ds.cache) == 2
    partial_bytes = ds.cache.nbytes
    whole_bytes = ds.read_tile(2).nbytes + ds.read_tile(5).nbytes
    assert whole_bytes > partial_bytes
    assert ds.tiles_decoded == 4  # the other chunks of both
    # The partial tiles (read twice: protected) stay until the whole ones, in probation, are used again.
    assert ds.cache.nbytes == partial_bytes + whole_bytes and len(ds.cache) == 2
    ds.read_tile(2)
    ds.read_tile(5)
    assert ds.cache.nbytes == whole_bytes and len(ds.cache) == 2
    assert ds.tiles_decoded == 4
    chunks = [min(ds.manifest.n_chunks, int(ds.manifest.tile_cells[t])) for t in (2, 5)]
    assert ds.chunks_decoded == sum(chunks)  # every chunk of both tiles, each decoded once
    ds.read_rows()
    assert ds.tiles_decoded == 13


def test_read_tile_uses_the_cache(uneven):
    ds = uneven.open(threads=1)
    tile = ds.read_tile(3)
    again = ds.read_tile(3)
    assert ds.tiles_decoded == 1
    assert again is not tile and not np.shares_memory(again.data, tile.data)  # copies, never the cached arrays
    np.testing.assert_array_equal(tile.to_csr(np.int64).toarray(), uneven.dense[30:40])
    ds.cache.clear()
    ds.read_tile(3)
    assert ds.tiles_decoded == 2


@pytest.mark.parametrize("tile", [-1, 11, 100])
def test_read_tile_out_of_range(uneven, tile):
    with pytest.raises(IndexError, match="out of range"):
        uneven.open().read_tile(tile)


def test_cache_bound_respected(uneven):
    probe = uneven.open(tile_cache_bytes=0, threads=1)
    sizes = [probe.read_tile(t).nbytes for t in range(probe.n_tiles)]
    bound = 3 * max(sizes)
    ds = uneven.open(tile_cache_bytes=bound, threads=1)
    for t in [0, 5, 3, 8, 1, 10, 2, 9]:
        ds.read_tile(t)
        assert ds.cache.nbytes <= bound
    ds.read_rows()
    assert ds.cache.nbytes <= bound
    assert 3 <= len(ds.cache) < ds.n_tiles
    assert ds.cache.max_bytes == bound


def test_tile_larger_than_cache_is_not_kept(uneven):
    ds = uneven.open(tile_cache_bytes=1, threads=1)
    ds.read_rows([0, 1])
    ds.read_rows([0, 1])
    assert len(ds.cache) == 0
    assert ds.tiles_decoded == 2


def test_cache_evicts_least_recently_used(write_dataset):
    # Every row has exactly two nonzeros and every tile 10 rows, so all tiles have the same decoded size.
    n_cells, n_genes = 40, 6
    cols = np.stack([np.arange(n_cells) % n_genes, (np.arange(n_cells) + 1) % n_genes], axis=1)
    cols.sort(axis=1)
    counts = sparse.csr_matrix(
        (np.ones(2 * n_cells, dtype=np.int64), cols.reshape(-1), np.arange(0, 2 * n_cells + 1, 2)),
        shape=(n_cells, n_genes),
    )
    path = write_dataset(counts, tile_size=10)
    probe = open_dataset(path, tile_cache_bytes=0)
    sizes = {probe.read_tile(t).nbytes for t in range(4)}
    assert len(sizes) == 1
    size = sizes.pop()
    ds = open_dataset(path, tile_cache_bytes=2 * size, threads=1)
    ds._tiles.cache = TileCache(2 * size, policy="lru")
    decoded = []
    for t in [0, 1, 0, 2, 0, 1, 2, 1]:
        ds.read_tile(t)
        decoded.append(ds.tiles_decoded)
        assert len(ds.cache) <= 2
    # LRU: reading 0 again protects it from the eviction caused by 2 (FIFO would evict 0 instead).
    assert decoded == [1, 2, 2, 3, 3, 4, 5, 5]
    # SLRU (the default): 0, used again, is protected (a share of 80% of the cache: one tile of these);
    # the others take turns in probation, so 1 is evicted by 2 and 2 by 1.
    ds = open_dataset(path, tile_cache_bytes=2 * size, threads=1)
    decoded = []
    for t in [0, 1, 0, 2, 0, 1, 2, 1]:
        ds.read_tile(t)
        decoded.append(ds.tiles_decoded)
    assert decoded == [1, 2, 2, 3, 3, 4, 5, 6]
    assert ds.cache.segment(0) == "protected"


class FakeTile:
    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes


def test_tile_cache_lru_order():
    cache = TileCache(30)
    tiles = {i: FakeTile(10) for i in range(5)}
    for i in range(3):
        cache.put(i, tiles[i])
    assert cache.get(0) is tiles[0]  # 0 becomes the most recently used
    cache.put(3, tiles[3])  # evicts 1, the least recently used
    assert cache.get(1) is None
    assert cache.get(2) is tiles[2]
    assert cache.get(0) is tiles[0]
    cache.put(4, tiles[4])  # evicts 3
    assert cache.get(3) is None
    assert len(cache) == 3
    assert cache.nbytes == 30


def test_tile_cache_sizes():
    cache = TileCache(100)
    cache.put(0, FakeTile(60))
    cache.put(1, FakeTile(60))  # does not fit beside 0: 0 goes
    assert cache.get(0) is None
    assert cache.nbytes == 60
    cache.put(1, FakeTile(30))  # replacing an entry updates the byte count
    assert cache.nbytes == 30
    assert len(cache) == 1
    cache.put(2, FakeTile(101))  # larger than the bound: never kept
    assert cache.get(2) is None
    assert cache.nbytes == 30
    cache.put(3, FakeTile(70))
    assert cache.nbytes == 100
    assert len(cache) == 2
    cache.clear()
    assert len(cache) == 0
    assert cache.nbytes == 0


def test_tile_cache_zero_disables():
    cache = TileCache(0)
    cache.put(0, FakeTile(1))
    assert cache.get(0) is None
    assert len(cache) == 0


def test_tile_cache_negative_rejected():
    with pytest.raises(ValueError, match=">= 0"):
        TileCache(-1)


# ---------------------------------------------------------------------------------------------- large requests


def _spy_select_rows(monkeypatch) -> list[int]:
    calls: list[int] = []
    original = gathers_module.select_rows

    def spy(tile, rows, dtype):
        calls.append(rows.shape[0])
        return original(tile, rows, dtype)

    monkeypatch.setattr(gathers_module, "select_rows", spy)
    return calls


@pytest.mark.parametrize(
    ("threads", "n_tiles", "compact"),
    [
        pytest.param(1, 2, False, id="1-thread-2-tiles-small"),
        pytest.param(1, 3, True, id="1-thread-3-tiles-large"),
        pytest.param(2, 4, False, id="2-threads-4-tiles-small"),
        pytest.param(2, 5, True, id="2-threads-5-tiles-large"),
        pytest.param(2, 11, True, id="2-threads-11-tiles-large"),
    ],
)
def test_large_request_path(uneven, monkeypatch, threads, n_tiles, compact, assert_csr_equals):
    calls = _spy_select_rows(monkeypatch)
    rng = np.random.default_rng(threads * 100 + n_tiles)
    tiles = rng.permutation(11)[:n_tiles]
    rows = np.concatenate([t * 10 + rng.integers(0, 3 if t == 10 else 10, size=4) for t in tiles])
    rows = rng.permutation(np.concatenate([rows, rows[:3]]))
    ds = uneven.open(threads=threads, tile_cache_bytes=0)
    assert_csr_equals(ds.read_rows(rows), uneven.dense[rows])
    assert ds.tiles_decoded == n_tiles
    assert len(calls) == (n_tiles if compact else 0)


@pytest.mark.parametrize("threads", [1, 2])
def test_large_request_ascending_rows(uneven, threads, assert_csr_equals):
    rows = np.unique(np.random.default_rng(threads).integers(0, 103, size=80))
    ds = uneven.open(threads=threads, tile_cache_bytes=0)
    assert_csr_equals(ds.read_rows(rows), uneven.dense[rows])
    assert_csr_equals(ds.read_rows(slice(3, 97)), uneven.dense[3:97])
    assert_csr_equals(ds.read_rows(slice(None, None, 2)), uneven.dense[::2])
    assert ds.tiles_decoded == 11 + 10 + 11


@pytest.mark.parametrize("threads", [1, 2])
def test_large_ascending_outputs_on_mappings_of_their_own(uneven, monkeypatch, threads, assert_csr_equals):
    """Rows in ascending order into an output large enough to be mapped (deltacells._memory), which numpy
    cannot resize: the output is cut to the rows' nonzeros by views (``resize`` raised ValueError)."""
    from deltacells import _memory

    monkeypatch.setattr(_memory, "MAPPED_MIN_BYTES", 64)  # every output mapped, as a read of millions of nonzeros
    rows = np.unique(np.random.default_rng(threads).integers(0, 103, size=80))
    ds = uneven.open(threads=threads, tile_cache_bytes=0)
    got = ds.read_rows(rows)
    assert _memory._block_of(got.indices) is not None
    assert_csr_equals(got, uneven.dense[rows])


ASCENDING_WITH_REPEATS = """
import sys
import numpy as np
from deltacells.core import open_dataset

path = sys.argv[1]
expected = np.load(sys.argv[2])
rows = np.repeat(np.arange(expected.shape[0]), 3)  # ascending, each row three times, every tile needed
for threads in (1, 2):
    result = open_dataset(path, threads=threads, tile_cache_bytes=0).read_rows(rows, dtype=np.int64)
    if not np.array_equal(result.toarray(), expected[rows]):
        sys.exit(f"wrong result with threads={threads}")
"""


def test_ascending_rows_with_repeats(uneven, tmp_path):
    # Run in a subprocess: the bug corrupts the heap and kills the interpreter.
    np.save(tmp_path / "expected.npy", uneven.dense)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(Path(deltacells.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]),
    )
    done = subprocess.run(
        [sys.executable, "-c", ASCENDING_WITH_REPEATS, str(uneven.path), str(tmp_path / "expected.npy")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"exit status {done.returncode}: {done.stderr[-2000:]}"


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_large_and_small_paths_agree(uneven, dtype):
    rows = np.random.default_rng(7).integers(-103, 103, size=300)
    results = [
        uneven.open(threads=threads, tile_cache_bytes=cache).read_rows(rows, dtype=dtype)
        for threads in (1, 2, 64)  # 64 threads: batch 128 > 11 tiles, so the small path
        for cache in (0, 2**20)
    ]
    for result in results[1:]:
        assert result.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(result.indptr, results[0].indptr)
        np.testing.assert_array_equal(result.indices, results[0].indices)
        np.testing.assert_array_equal(result.data, results[0].data)
    np.testing.assert_array_equal(results[0].toarray(), uneven.dense[rows])


# ---------------------------------------------------------------------------------------------- iter_tiles


@pytest.mark.parametrize(("threads", "batch"), [(1, None), (2, None), (2, 1), (2, 3), (4, 100)])
def test_iter_tiles_yields_all_in_order(uneven, threads, batch):
    ds = uneven.open(threads=threads, tile_cache_bytes=0)
    seen = []
    for t, tile in ds.iter_tiles(decode_ahead=batch):
        assert isinstance(t, int)
        lo, hi = ds.tile_range(t)
        np.testing.assert_array_equal(tile.to_csr(np.int64).toarray(), uneven.dense[lo:hi])
        seen.append(t)
    assert seen == list(range(11))


@pytest.mark.parametrize("threads", [1, 2])
def test_iter_tiles_subset_keeps_order(uneven, threads):
    ds = uneven.open(threads=threads)
    order = [t for t, _ in ds.iter_tiles([7, 3, 7, 0], decode_ahead=2)]
    assert order == [7, 3, 7, 0]


def test_decode_ahead_has_no_old_name(uneven):
    ds = uneven.open(threads=2)
    with pytest.raises(TypeError, match="batch"):
        list(ds.iter_tiles([7, 3], batch=2))
    assert not hasattr(ds._tiles, "batch_size")
    assert ds._tiles.decode_ahead == 4


def test_iter_tiles_empty_dataset(write_dataset):
    ds = open_dataset(write_dataset(sparse.csr_matrix((0, 4), dtype=np.int64)))
    assert list(ds.iter_tiles()) == []


# ---------------------------------------------------------------------------------------------- pickling


def test_dataset_pickle_round_trip(uneven, assert_csr_equals):
    ds = uneven.open(tile_cache_bytes=123_456, threads=1)
    before = pickle.dumps(ds)
    ds.read_rows()  # fill the cache: the pickle must not grow
    blob = pickle.dumps(ds)
    assert len(blob) == len(before)
    assert len(blob) < 3000
    clone = pickle.loads(blob)
    assert isinstance(clone, Dataset)
    assert clone is not ds
    assert clone.shape == ds.shape
    assert clone.manifest.to_dict() == ds.manifest.to_dict()
    assert clone.store.url == ds.store.url
    assert clone.threads == 1
    assert clone.cache.max_bytes == 123_456
    assert len(clone.cache) == 0
    assert clone.tiles_decoded == 0
    assert_csr_equals(clone.read_rows(), uneven.dense)
    assert "n_cells=103" in repr(clone)


def test_store_pickle_round_trip(uneven):
    store = FsspecStore(str(uneven.path), {"auto_mkdir": True})
    data = store.read("manifest.json")
    assert store.is_local
    blob = pickle.dumps(store)
    assert len(blob) < 300
    clone = pickle.loads(blob)
    assert clone.url == store.url
    assert clone.storage_options == {"auto_mkdir": True}
    assert clone.read("manifest.json") == data
    assert len(pickle.dumps(clone)) == len(blob)


def test_memory_dataset_pickle_round_trip(memory_url, make_counts, assert_csr_equals):
    counts = make_counts(30, 8, seed=2)
    with DatasetWriter(memory_url, 8, tile_size=7, level=1) as writer:
        writer.write(counts)
    ds = open_dataset(memory_url)
    clone = pickle.loads(pickle.dumps(ds))
    assert clone.store.url == memory_url
    assert_csr_equals(clone.read_rows([29, 0, 15]), counts.toarray()[[29, 0, 15]])


# ---------------------------------------------------------------------------------------------- fsspec


def test_memory_url_round_trip(memory_url, make_counts, assert_csr_equals):
    counts = make_counts(45, 11, seed=8)
    with DatasetWriter(memory_url, 11, tile_size=10, level=1, var_names=[f"g{i}" for i in range(11)]) as writer:
        writer.write(counts[:20])
        writer.write(counts[20:])
    fs = fsspec.filesystem("memory")
    root = memory_url.removeprefix("memory://")
    assert fs.exists(f"{root}/manifest.json")
    assert len(fs.ls(f"{root}/tiles")) == 5
    for ds in (open_dataset(memory_url), open_dataset(FsspecStore(memory_url))):
        assert ds.shape == (45, 11)
        assert ds.var_names() == [f"g{i}" for i in range(11)]
        assert_csr_equals(ds.read_rows(), counts.toarray())
        assert_csr_equals(ds.read_rows(slice(None, None, -3)), counts.toarray()[::-3])


def test_memory_url_missing_dataset(memory_url):
    with pytest.raises(FormatError, match=r"no manifest\.json"):
        open_dataset(memory_url)


def test_file_url_round_trip(tmp_path, make_counts, assert_csr_equals):
    counts = make_counts(33, 6, seed=9)
    url = f"file://{tmp_path}/ds"
    with DatasetWriter(url, 6, tile_size=8, level=1) as writer:
        writer.write(counts)
    assert (tmp_path / "ds" / "manifest.json").is_file()
    assert sorted(p.name for p in (tmp_path / "ds" / "tiles").iterdir()) == [f"tile_{i:06d}.dct" for i in range(5)]
    for target in (url, tmp_path / "ds", str(tmp_path / "ds")):
        assert_csr_equals(open_dataset(target).read_rows(), counts.toarray())


# ---------------------------------------------------------------------------------------------- corruption


@pytest.fixture
def corruptible(write_dataset, make_counts) -> Oracle:
    """30 cells x 9 genes in 3 tiles of 10, with gene order and names (a fresh copy per test)."""
    counts = make_counts(30, 9, density=0.4, seed=4, empty_fraction=0.0)
    order = np.array([8, 1, 0, 2, 7, 3, 6, 4, 5])
    path = write_dataset(counts, tile_size=10, gene_order=order, var_names=[f"gene{i}" for i in range(9)])
    return Oracle(Path(path), counts.toarray()[:, order], 10)


def _tile(path: Path, index: int) -> Path:
    return path / "tiles" / f"tile_{index:06d}.dct"


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda b: b + b"\0", id="one-byte-appended"),
        pytest.param(lambda b: b[:-1], id="one-byte-truncated"),
        pytest.param(lambda b: b[:64], id="header-only"),
        pytest.param(lambda b: b"", id="empty"),
    ],
)
def test_tile_size_mismatch(corruptible, change, assert_csr_equals):
    tile = _tile(corruptible.path, 1)
    tile.write_bytes(change(tile.read_bytes()))
    ds = corruptible.open(tile_cache_bytes=0)
    with pytest.raises(FormatError, match=r"tile_000001\.dct: .*tile_bytes\[1\]"):
        ds.read_rows([15])
    assert_csr_equals(ds.read_rows([0, 29]), corruptible.dense[[0, 29]])  # other tiles are fine


@pytest.mark.parametrize("offset", [-1, 64, 200, -20])
def test_tile_same_size_corruption_fails_crc(corruptible, offset):
    tile = _tile(corruptible.path, 2)
    blob = bytearray(tile.read_bytes())
    blob[offset] ^= 0x5A
    tile.write_bytes(bytes(blob))
    with pytest.raises(FormatError, match=r"tile_000002\.dct: CRC-32"):
        corruptible.open().read_rows()


@pytest.mark.parametrize("offset", [0, 8, 16, 32, 56])
def test_tile_header_corruption(corruptible, offset):
    tile = _tile(corruptible.path, 0)
    blob = bytearray(tile.read_bytes())
    blob[offset] ^= 0x01
    tile.write_bytes(bytes(blob))
    with pytest.raises(FormatError, match=r"tile_000000\.dct"):
        corruptible.open(threads=2).read_rows()


def test_tiles_swapped(corruptible):
    path = corruptible.path
    doc = json.loads((path / "manifest.json").read_text())
    doc["tile_cells"] = [10, 10, 10]
    a, b = _tile(path, 0).read_bytes(), _tile(path, 1).read_bytes()
    _tile(path, 0).write_bytes(b)
    _tile(path, 1).write_bytes(a)
    doc["tile_bytes"][0], doc["tile_bytes"][1] = len(b), len(a)
    (path / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(FormatError, match=r"tile_000000\.dct: .*tile_nnz\[0\]"):
        open_dataset(path).read_rows()


def test_tile_with_other_gene_count(corruptible, tmp_path):
    other = tmp_path / "other"
    with DatasetWriter(other, 10, tile_size=10, level=1) as writer:
        writer.write(np.ones((10, 10), dtype=np.int64))
    blob = _tile(other, 0).read_bytes()
    _tile(corruptible.path, 0).write_bytes(blob)
    doc = json.loads((corruptible.path / "manifest.json").read_text())
    doc["tile_bytes"][0] = len(blob)
    doc["tile_nnz"][0] = 90  # the most the manifest allows for 10 cells x 9 genes
    (corruptible.path / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(FormatError, match=r"tile_000000\.dct"):
        open_dataset(corruptible.path).read_rows([0])


def test_missing_tile(corruptible):
    _tile(corruptible.path, 1).unlink()
    ds = corruptible.open()
    ds.read_rows([0, 25])
    with pytest.raises(MissingObjectError, match=r"tile_000001\.dct"):
        ds.read_rows([10])


def test_corruption_found_by_threaded_read(uneven, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(uneven.path, copy)
    tile = _tile(copy, 7)
    blob = bytearray(tile.read_bytes())
    blob[-1] ^= 0xFF
    tile.write_bytes(bytes(blob))
    ds = open_dataset(copy, threads=2, tile_cache_bytes=0)
    with pytest.raises(FormatError, match=r"tile_000007\.dct: CRC-32"):
        ds.read_rows(np.arange(103)[::-1])
    with pytest.raises(FormatError, match=r"tile_000007\.dct"):
        list(ds.iter_tiles())


# ---------------------------------------------------------------------------------------------- sidecars


def test_sidecars_read(corruptible):
    ds = corruptible.open()
    order = ds.gene_permutation()
    assert order.dtype == np.int32
    np.testing.assert_array_equal(order, [8, 1, 0, 2, 7, 3, 6, 4, 5])
    assert ds.var_names() == [f"gene{i}" for i in order]


def test_no_sidecars(uneven):
    ds = uneven.open()
    assert ds.gene_permutation() is None
    assert ds.var_names() is None


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(_npy(np.array([8, 1, 0, 2, 7, 3, 6, 4, 4], dtype=np.int32)), id="repeat"),
        pytest.param(_npy(np.array([9, 1, 0, 2, 7, 3, 6, 4, 5], dtype=np.int32)), id="out-of-range"),
        pytest.param(_npy(np.array([-1, 1, 0, 2, 7, 3, 6, 4, 5], dtype=np.int32)), id="negative"),
        pytest.param(_npy(np.arange(8, dtype=np.int32)), id="too-short"),
        pytest.param(_npy(np.arange(10, dtype=np.int32)), id="too-long"),
        pytest.param(_npy(np.arange(9, dtype=np.float64)), id="float"),
        pytest.param(_npy(np.arange(9, dtype=np.int32).reshape(3, 3)), id="2d"),
        pytest.param(_npy(np.array(list(range(9)), dtype=object)), id="pickled-object"),
        pytest.param(_npy(np.arange(9, dtype=np.int32))[:-4], id="truncated"),
        pytest.param(b"not an npy file at all", id="garbage"),
    ],
)
def test_bad_gene_order(corruptible, content):
    (corruptible.path / "gene_order.npy").write_bytes(content)
    ds = corruptible.open()
    with pytest.raises(FormatError, match=r"gene_order\.npy"):
        ds.gene_permutation()
    assert ds.read_rows([0]).shape == (1, 9)  # X does not depend on the sidecar


def test_empty_gene_order_file(corruptible):
    (corruptible.path / "gene_order.npy").write_bytes(b"")
    with pytest.raises(FormatError, match=r"gene_order\.npy"):
        corruptible.open().gene_permutation()


@pytest.mark.parametrize(
    "content",
    [
        pytest.param("".join(f"gene{i}\n" for i in range(8)).encode(), id="too-few"),
        pytest.param("".join(f"gene{i}\n" for i in range(10)).encode(), id="too-many"),
        pytest.param(b"", id="empty"),
        pytest.param("".join(f"gene{i}\n" for i in range(9)).encode() + b"\n", id="blank-last-line"),
        pytest.param(b"\xff\xfe\n" * 9, id="not-utf8"),
    ],
)
def test_bad_var_names(corruptible, content):
    (corruptible.path / "var_names.txt").write_bytes(content)
    with pytest.raises(FormatError, match=r"var_names\.txt"):
        corruptible.open().var_names()


# ---------------------------------------------------------------------------------------------- store


@pytest.mark.parametrize("local", [True, False], ids=["local", "memory"])
def test_store_basics(tmp_path, memory_url, local):
    store = FsspecStore(str(tmp_path / "root") if local else memory_url)
    assert store.is_local == local
    assert store.list() == []
    assert not store.exists("a.bin")
    store.write("a.bin", b"12345")
    store.write("sub/b.bin", b"")
    store.write("a.bin", b"123")  # replaced whole
    assert store.read("a.bin") == b"123"
    assert store.size("a.bin") == 3
    assert store.read("sub/b.bin") == b""
    assert store.list() == ["a.bin", "sub"]
    assert store.list("sub") == ["b.bin"]
    assert store.list("nothing-here") == []
    with pytest.raises(MissingObjectError, match=r"missing\.bin is missing"):
        store.read("missing.bin")
    store.delete("sub")
    store.delete("not-there")  # no error
    assert store.list() == ["a.bin"]
    if local:
        assert sorted(p.name for p in (tmp_path / "root").iterdir()) == ["a.bin"]  # no temporary files left
