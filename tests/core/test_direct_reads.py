"""Ranges of cells decode their whole tiles straight into the output: same result, checked, not cached."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from scipy import sparse
from tests.servers.stores import RemoteLookingStore

from deltacells.codec import TileHeader, read_chunk_table
from deltacells.core import open_dataset
from deltacells.errors import FormatError, MissingObjectError
from deltacells.format import tile_path

N_CELLS, N_GENES, TILE = 1000, 70, 128


@pytest.fixture(scope="module")
def counts(make_counts: Callable[..., sparse.csr_matrix]) -> sparse.csr_matrix:
    return make_counts(N_CELLS, N_GENES, density=0.25, seed=21, empty_fraction=0.1)


@pytest.fixture(scope="module")
def path(write_module_dataset: Callable[..., Path], counts: sparse.csr_matrix) -> Path:
    return write_module_dataset(counts, tile_size=TILE, n_chunks=4)


ORDER = np.random.default_rng(3).permutation(N_GENES)


@pytest.fixture(scope="module")
def reordered(write_module_dataset: Callable[..., Path], counts: sparse.csr_matrix) -> Path:
    """The same counts, columns stored in another order (``gene_order.npy``)."""
    return write_module_dataset(counts, tile_size=TILE, n_chunks=4, gene_order=ORDER)


RANGES = [
    slice(None),  # every tile whole (the last one shorter)
    slice(0, TILE),  # one tile whole
    slice(3, 2 * TILE + 5),  # partial ends, a whole tile between
    slice(TILE + 1, TILE + 9),  # inside one tile
    slice(5 * TILE, N_CELLS),  # whole tiles to the end
]


@pytest.mark.parametrize("remote", [False, True], ids=["local", "remote"])
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint16])
@pytest.mark.parametrize("index", RANGES, ids=lambda s: f"{s.start}:{s.stop}")
def test_ranges_equal_the_written_matrix(
    path: Path, counts: sparse.csr_matrix, remote: bool, threads: int, dtype: type, index: slice
) -> None:
    store = RemoteLookingStore(path) if remote else path
    ds = open_dataset(store, threads=threads)
    got = ds.read_rows(index, dtype=dtype)
    expected = counts[index]
    assert got.dtype == np.dtype(dtype) and got.shape == expected.shape
    assert got.indptr[0] == 0 and got.indptr[-1] == got.nnz
    np.testing.assert_array_equal(got.indptr, expected.indptr)
    np.testing.assert_array_equal(got.indices, expected.indices)
    np.testing.assert_array_equal(got.data, expected.data.astype(dtype))
    got = ds.read_rows(np.arange(N_CELLS)[index], dtype=dtype)  # the same cells as an array
    assert (got != expected.astype(dtype)).nnz == 0


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("index", RANGES, ids=lambda s: f"{s.start}:{s.stop}")
def test_ranges_in_the_original_gene_order(
    reordered: Path, counts: sparse.csr_matrix, threads: int, index: slice
) -> None:
    """Stored columns mapped back to the written order as they are decoded, each row then sorted (canonical CSR)."""
    original = open_dataset(reordered, threads=threads).with_gene_order("original")
    got = original.read_rows(index)
    want = counts[index].astype(np.float32)
    want.sort_indices()
    assert got.has_sorted_indices
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.indices, want.indices)  # sorted within each row, as scipy's
    np.testing.assert_array_equal(got.data, want.data)
    stored = open_dataset(reordered, threads=threads).read_rows(index)
    assert (stored != counts[index][:, ORDER].astype(np.float32)).nnz == 0
    assert stored.has_sorted_indices


def test_whole_tiles_are_counted_and_not_cached(path: Path, counts: sparse.csr_matrix) -> None:
    ds = open_dataset(path, threads=2)
    ds.read_rows(slice(3, 3 * TILE + 5))  # tiles 0 and 3 partial, 1 and 2 whole
    assert ds.tiles_decoded == 4
    assert ds.cache.peek(1) is None and ds.cache.peek(2) is None
    assert ds.cache.peek(0) is not None and ds.cache.peek(3) is not None
    before = ds.chunks_decoded
    ds.read_rows()  # 8 tiles, of which none is whole in the cache (0 and 3 are partial or whole)
    held = sum(ds.cache.peek(t) is not None and ds.cache.peek(t).complete for t in (0, 3))
    assert ds.tiles_decoded == 4 + 8 - held
    assert ds.chunks_decoded > before
    assert ds.cache.peek(5) is None, "a full read leaves the cache as it was"


def test_a_whole_tile_the_cache_holds_is_copied_from_it(path: Path, counts: sparse.csr_matrix) -> None:
    ds = open_dataset(path, threads=1)
    ds.read_tile(2)  # cached whole
    decoded = ds.tiles_decoded
    got = ds.read_rows(slice(2 * TILE, 3 * TILE))
    assert ds.tiles_decoded == decoded and ds.cache.hits == 1
    assert (got != counts[2 * TILE : 3 * TILE]).nnz == 0


def test_counts_above_float32_warn_once(write_dataset: Callable[..., Path]) -> None:
    matrix = sparse.csr_matrix(np.array([[1, 0, 2**24 + 1], [0, 3, 0]] * 100, dtype=np.int64))
    ds = open_dataset(write_dataset(matrix, tile_size=50), threads=2)
    with pytest.warns(UserWarning, match="above 2\\^24"):
        got = ds.read_rows(dtype=np.float32)
    assert got.data.max() == np.float32(2**24 + 1)
    exact = ds.read_rows(dtype=np.int64)
    assert exact.data.max() == 2**24 + 1


@pytest.fixture
def copy(path: Path, tmp_path: Path) -> Path:
    target = tmp_path / "ds"
    shutil.copytree(path, target)
    return target


@pytest.mark.parametrize("threads", [1, 2])
def test_a_corrupt_tile_is_named(copy: Path, threads: int) -> None:
    target = copy / tile_path(4)
    blob = bytearray(target.read_bytes())
    blob[-3] ^= 0xFF
    target.write_bytes(bytes(blob))
    ds = open_dataset(copy, threads=threads)
    with pytest.raises(FormatError, match=r"tiles/.*4.*CRC-32"):
        ds.read_rows()
    ds.read_rows(slice(0, 4 * TILE))  # the tiles before it still read


@pytest.mark.parametrize("threads", [1, 2])
def test_a_missing_tile_is_named(copy: Path, threads: int) -> None:
    (copy / tile_path(6)).unlink()
    with pytest.raises(MissingObjectError, match="tile 6"):
        open_dataset(copy, threads=threads).read_rows()


def test_a_tile_disagreeing_with_the_manifest_is_refused(copy: Path, counts: sparse.csr_matrix) -> None:
    """Tiles 1 and 2 swapped: sizes that disagree with tile_bytes, before any byte is written to the output."""
    one, two = copy / tile_path(1), copy / tile_path(2)
    a, b = one.read_bytes(), two.read_bytes()
    manifest = json.loads((copy / "manifest.json").read_text())
    assert manifest["tile_bytes"][1] != manifest["tile_bytes"][2], "the test needs tiles of different sizes"
    one.write_bytes(b)
    two.write_bytes(a)
    with pytest.raises(FormatError, match="tile_bytes"):
        open_dataset(copy, threads=1).read_rows(slice(0, 3 * TILE))


def test_gap_exceptions_in_the_original_gene_order(write_dataset: Callable[..., Path]) -> None:
    """Gaps above 65535 (gexc frames) are added to the stored indices before these are mapped."""
    n_genes = 70_000
    rng = np.random.default_rng(5)
    order = rng.permutation(n_genes)  # stored column j holds source gene order[j]
    rows = [np.sort(rng.choice(n_genes, 30, replace=False)) for _ in range(300)]
    rows[7] = np.sort(order[[0, 69_999]])  # stored columns 0 and 69999: a gap of more than 65535
    indptr = np.concatenate(([0], np.cumsum([len(r) for r in rows])))
    indices = np.concatenate(rows)
    matrix = sparse.csr_matrix((rng.integers(1, 9, indices.size), indices, indptr), shape=(300, n_genes))
    path = write_dataset(matrix, tile_size=64, gene_order=order)
    blob = (path / tile_path(0)).read_bytes()
    gexc_len = 11  # a column of the chunk table (docs/format.md, "Chunk table")
    assert read_chunk_table(blob, TileHeader.unpack(blob))[:, gexc_len].any(), "tile 0 must have a gexc frame"
    for threads in (1, 2):
        got = open_dataset(path, threads=threads).with_gene_order("original").read_rows(dtype=np.int64)
        assert (got != matrix).nnz == 0


@pytest.mark.parametrize("rows", [np.arange(0, 1000, 7), np.arange(999, 0, -3), np.array([5, 5, 900, 3])])
def test_gathered_rows_in_the_original_gene_order_are_sorted(
    reordered: Path, counts: sparse.csr_matrix, rows: np.ndarray
) -> None:
    """Rows gathered from decoded tiles (any order, repeats) are sorted too, in the cache's copies as in fresh ones."""
    original = open_dataset(reordered, threads=2).with_gene_order("original")
    want = counts[rows].astype(np.float32)
    want.sort_indices()
    for _ in range(2):  # decoded, then from the tile cache
        got = original.read_rows(rows)
        assert got.has_canonical_format
        np.testing.assert_array_equal(got.indices, want.indices)
        np.testing.assert_array_equal(got.data, want.data)
