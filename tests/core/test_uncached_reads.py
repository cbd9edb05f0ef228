"""Rows read past the tile cache (``read_rows_uncached``): each chunk holding a wanted cell decoded once."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from scipy import sparse
from tests.servers.stores import RemoteLookingStore

from deltacells.core import open_dataset
from deltacells.errors import FormatError, MissingObjectError
from deltacells.format import tile_path

N_CELLS, N_GENES, TILE, CHUNKS = 1000, 70, 128, 4
ORDER = np.random.default_rng(4).permutation(N_GENES)


@pytest.fixture(scope="module")
def counts(make_counts: Callable[..., sparse.csr_matrix]) -> sparse.csr_matrix:
    return make_counts(N_CELLS, N_GENES, density=0.25, seed=22, empty_fraction=0.1)


@pytest.fixture(scope="module")
def path(write_module_dataset: Callable[..., Path], counts: sparse.csr_matrix) -> Path:
    return write_module_dataset(counts, tile_size=TILE, n_chunks=CHUNKS, gene_order=ORDER)


ROWS = {
    "shuffled window": np.random.default_rng(0).permutation(np.arange(100, 700)),
    "runs of many tiles": np.concatenate([np.arange(s, s + 20) for s in (900, 5, 300, 640)]),
    "repeats and reversed": np.array([999, 5, 5, 130, 4, 999, 0]),
    "every cell": np.arange(N_CELLS),
    "one cell": np.array([517]),
    "none": np.array([], dtype=np.int64),
}


def _canonical(matrix: sparse.csr_matrix, dtype: type) -> sparse.csr_matrix:
    matrix = matrix.astype(dtype)
    matrix.sort_indices()
    return matrix


@pytest.mark.parametrize("remote", [False, True], ids=["local", "remote"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("gene_order", ["original", "stored"])
@pytest.mark.parametrize("name", list(ROWS))
def test_rows_equal_the_written_matrix(
    path: Path, counts: sparse.csr_matrix, remote: bool, threads: int, gene_order: str, name: str
) -> None:
    rows = ROWS[name]
    ds = open_dataset(RemoteLookingStore(path) if remote else path, threads=threads).with_gene_order(gene_order)
    got = ds.read_rows_uncached(rows)
    source = counts if gene_order == "original" else counts[:, ORDER]
    want = _canonical(source[rows], counts.dtype)  # in the dtype written (docs/format.md, decision 9)
    assert got.dtype == counts.dtype and got.shape == (rows.shape[0], N_GENES)
    assert got.has_canonical_format
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.indices, want.indices)  # sorted in each row, as scipy's
    np.testing.assert_array_equal(got.data, want.data)
    assert len(ds.cache) == 0, "nothing goes through the tile cache"


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int64, np.uint16, np.int8])
def test_any_dtype(path: Path, counts: sparse.csr_matrix, dtype: type) -> None:
    rows = ROWS["shuffled window"]
    got = open_dataset(path).with_gene_order("original").read_rows_uncached(rows, dtype=dtype)
    assert got.dtype == np.dtype(dtype)
    assert (got != _canonical(counts[rows], dtype)).nnz == 0


def test_unsorted_columns_make_the_same_dense_rows(path: Path, counts: sparse.csr_matrix) -> None:
    rows = ROWS["shuffled window"]
    ds = open_dataset(path, threads=2).with_gene_order("original")
    got = ds.read_rows_uncached(rows, sort_columns=False)
    assert not got.has_sorted_indices  # scipy sorts before its arithmetic; toarray() needs no order
    np.testing.assert_array_equal(got.toarray(), counts[rows].toarray().astype(np.float32))
    stored = open_dataset(path).read_rows_uncached(rows, sort_columns=False)
    assert stored.has_sorted_indices, "stored genes are in order as they decode"


def test_each_chunk_holding_a_cell_is_decoded_once(path: Path) -> None:
    ds = open_dataset(path, threads=2)
    ds.read_rows_uncached(np.array([3, 1, 2, TILE + 1]))  # the first chunks of tiles 0 and 1
    assert (ds.tiles_decoded, ds.chunks_decoded) == (2, 2)
    ds.read_rows_uncached(np.arange(TILE))  # tile 0 whole: every chunk
    assert (ds.tiles_decoded, ds.chunks_decoded) == (3, 2 + CHUNKS)


def test_remote_tiles_are_read_in_ranges_when_it_pays(
    write_dataset: Callable[..., Path], make_counts: Callable[..., sparse.csr_matrix]
) -> None:
    matrix = make_counts(1024, 2000, density=0.1, seed=3)
    ds = open_dataset(RemoteLookingStore(write_dataset(matrix, tile_size=512, n_chunks=8)), threads=2)
    rows = np.array([600, 601, 603])  # in one chunk of tile 1: its prefix and that chunk's frames are read
    got = ds.read_rows_uncached(rows)
    assert (ds._tiles.tiles_read_ranged, ds.tiles_decoded, ds.chunks_decoded) == (1, 0, 1)
    assert (got != matrix[rows].astype(np.float32)).nnz == 0
    ds.read_rows_uncached(np.arange(0, 512, 8))  # every chunk of tile 0: fetched whole
    assert (ds._tiles.tiles_read_ranged, ds.tiles_decoded) == (1, 1)


@pytest.fixture
def copy(path: Path, tmp_path: Path) -> Path:
    target = tmp_path / "ds"
    shutil.copytree(path, target)
    return target


@pytest.mark.parametrize("remote", [False, True], ids=["local", "remote"])
def test_a_corrupt_tile_is_named(copy: Path, remote: bool) -> None:
    target = copy / tile_path(4)
    blob = bytearray(target.read_bytes())
    blob[-3] ^= 0xFF  # in the last chunk's frames
    target.write_bytes(bytes(blob))
    ds = open_dataset(RemoteLookingStore(copy) if remote else copy, threads=2)
    with pytest.raises(FormatError, match=r"tile_000004"):
        ds.read_rows_uncached(np.arange(4 * TILE, 5 * TILE))  # whole: the CRC-32
    with pytest.raises(FormatError, match=r"tile_000004"):
        ds.read_rows_uncached(np.array([5 * TILE - 1]))  # the last chunk alone: CRC-32, or its frames in ranges
    ds.read_rows_uncached(np.arange(4 * TILE))  # the tiles before it still read


def test_a_missing_tile_is_named(copy: Path) -> None:
    (copy / tile_path(6)).unlink()
    with pytest.raises(MissingObjectError, match="tile 6"):
        open_dataset(copy, threads=2).read_rows_uncached(np.arange(0, N_CELLS, 50))
