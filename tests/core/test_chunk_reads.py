"""Reads of a few cells decode only the chunks holding them, on every store, against a scipy oracle."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import sparse
from tests.servers.stores import RemoteLookingStore

from deltacells.codec import parse_tile
from deltacells.core import Dataset, open_dataset

N_CELLS, N_GENES, TILE, N_CHUNKS = 1000, 60, 125, 8
ORDER = np.random.default_rng(1).permutation(N_GENES)


@pytest.fixture(scope="module")
def counts(make_counts: Callable[..., sparse.csr_matrix]) -> sparse.csr_matrix:
    return make_counts(N_CELLS, N_GENES, density=0.2, seed=12)


@pytest.fixture(scope="module")
def path(write_module_dataset: Callable[..., Path], counts: sparse.csr_matrix) -> Path:
    """Eight tiles of eight chunks, columns stored in another order (``gene_order.npy``)."""
    return write_module_dataset(counts, tile_size=TILE, n_chunks=N_CHUNKS, gene_order=ORDER)


def _open(path: Path, remote: bool, **options: Any) -> Dataset:
    return open_dataset(RemoteLookingStore(path) if remote else path, **options)


def _check(ds: Dataset, rows: np.ndarray, expected: sparse.csr_matrix) -> None:
    got = ds.read_rows(rows, dtype=np.int64)
    assert got.shape == (len(rows), N_GENES)
    assert (got != expected[rows]).nnz == 0
    got.sort_indices()
    assert got.has_sorted_indices


@pytest.mark.parametrize("remote", [False, True], ids=["local", "remote"])
def test_one_cell_decodes_one_chunk(path: Path, counts: sparse.csr_matrix, remote: bool) -> None:
    ds = _open(path, remote, threads=1)
    _check(ds, np.array([3 * TILE + 70]), counts[:, ORDER])
    assert ds.chunks_decoded == 1
    _check(ds, np.array([3 * TILE + 70, 3 * TILE + 70]), counts[:, ORDER])
    assert ds.chunks_decoded == 1 and ds.cache.hits == 1, "a repeat is a hit"


@pytest.mark.parametrize("remote", [False, True], ids=["local", "remote"])
@pytest.mark.parametrize("gene_order", ["stored", "original"])
@pytest.mark.parametrize("cache", [0, 2**22])
@pytest.mark.parametrize("threads", [1, 2])
def test_random_subsets_equal_the_written_matrix(
    path: Path, counts: sparse.csr_matrix, remote: bool, gene_order: str, cache: int, threads: int
) -> None:
    """Random subsets (repeats, any order), read again and grown, against scipy of the written matrix."""
    ds = _open(path, remote, threads=threads, tile_cache_bytes=cache).with_gene_order(gene_order)
    expected = counts if gene_order == "original" else counts[:, ORDER]
    rng = np.random.default_rng(threads + 10 * remote + (cache > 0))
    seen: list[np.ndarray] = []
    for size in (1, 3, 10, 40, 200, 3, 1):
        rows = rng.integers(0, N_CELLS, size)
        _check(ds, rows, expected)
        seen.append(rows)
    for rows in seen:  # the same subsets again (hits when cached), then reversed, then all of them at once
        _check(ds, rows, expected)
        _check(ds, rows[::-1], expected)
    _check(ds, np.concatenate(seen), expected)
    _check(ds, np.arange(N_CELLS)[::-1], expected)
    assert ds.chunks_decoded < ds.tiles_decoded * N_CHUNKS + ds._tiles.tiles_read_ranged * N_CHUNKS
    if cache:
        assert ds.cache.hits > 0


def test_chunk_decoding_decodes_less_than_whole_tiles(path: Path, counts: sparse.csr_matrix) -> None:
    """The same reads with the private switch off decode every chunk of every tile touched."""
    rows = np.random.default_rng(5).integers(0, N_CELLS, 12)
    chunked, whole = open_dataset(path, tile_cache_bytes=0), open_dataset(path, tile_cache_bytes=0)
    whole._tiles._partial_decode = False
    for ds in (chunked, whole):
        _check(ds, rows, counts[:, ORDER])
    n_tiles = len(np.unique(rows // TILE))
    assert chunked.tiles_decoded == whole.tiles_decoded == n_tiles
    assert whole.chunks_decoded == n_tiles * N_CHUNKS
    bounds = {t: parse_tile((path / "tiles" / f"tile_{t:06d}.dct").read_bytes()).chunk_bounds for t in range(8)}
    chunks = {(r // TILE, int(np.searchsorted(bounds[r // TILE], r % TILE, side="right")) - 1) for r in rows.tolist()}
    assert chunked.chunks_decoded == len(chunks) < whole.chunks_decoded


def test_slices_and_full_reads_decode_whole_tiles(path: Path, counts: sparse.csr_matrix) -> None:
    ds = open_dataset(path, threads=1)
    _check(ds, np.arange(2 * TILE, 4 * TILE), counts[:, ORDER])
    assert ds.tiles_decoded == 2 and ds.chunks_decoded == 2 * N_CHUNKS
    # Whole tiles decode straight into the output: they are not cached (a scan does not evict anything).
    assert ds.cache.peek(2) is None and ds.cache.peek(3) is None
    _check(ds, np.arange(TILE + 5, 2 * TILE), counts[:, ORDER])  # part of tile 1: cached, partial or not
    assert ds.tiles_decoded == 3 and ds.cache.peek(1) is not None
    ds.read_rows(slice(TILE, 2 * TILE))  # tile 1 whole, and the cache holds it whole: copied from there
    assert ds.tiles_decoded == 3 + (not ds.cache.peek(1).complete)
    ds.read_rows()
    assert ds.tiles_decoded == 10 + (not ds.cache.peek(1).complete) and ds.cache.hits == 1 + ds.cache.peek(1).complete


def test_partial_tiles_grow_in_the_cache(path: Path, counts: sparse.csr_matrix) -> None:
    """More cells of a cached partial tile decode only the missing chunks; the whole tile then is a hit."""
    ds = open_dataset(path, threads=1)
    _check(ds, np.array([5]), counts[:, ORDER])
    first = ds.cache.peek(0)
    _check(ds, np.array([5, 120]), counts[:, ORDER])
    grown = ds.cache.peek(0)
    assert first.n_chunks_decoded == 1 and grown.n_chunks_decoded == 2 and ds.chunks_decoded == 2
    assert ds.tiles_decoded == 2
    np.testing.assert_array_equal(ds.read_tile(0).to_csr(np.int64).toarray(), counts[:TILE, ORDER].toarray())
    assert ds.chunks_decoded == N_CHUNKS and ds.cache.peek(0).complete
    _check(ds, np.array([6, 7, 100]), counts[:, ORDER])
    assert ds.chunks_decoded == N_CHUNKS
