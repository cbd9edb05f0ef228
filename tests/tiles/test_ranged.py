"""Ranged reads of tiles: the rule choosing them over whole reads, partial tiles, and their errors."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import sparse
from tests.servers.stores import RemoteLookingStore

import deltacells
from deltacells.codec import prefix_size
from deltacells.core import DatasetWriter
from deltacells.errors import FormatError, MissingObjectError
from deltacells.format import Manifest
from deltacells.storage import FsspecStore
from deltacells.tiles import TileReader
from deltacells.tiles._ranged import RANGED_MAX_SHARE, decode_ranged, ranged_read_pays, submit_ranged_fetch

N_CELLS, N_GENES, TILE, N_CHUNKS = 1200, 1000, 400, 8


@pytest.fixture(scope="module")
def matrix() -> sparse.csr_matrix:
    rng = np.random.default_rng(11)
    return sparse.random(N_CELLS, N_GENES, density=0.1, format="csr", random_state=rng, dtype=np.float64).ceil()


@pytest.fixture(scope="module")
def root(matrix: sparse.csr_matrix, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ranged") / "ds"
    with DatasetWriter(path, N_GENES, tile_size=TILE, n_chunks=N_CHUNKS, level=1) as writer:
        writer.write(matrix)
    return path


@pytest.fixture(scope="module")
def manifest(root: Path) -> Manifest:
    return deltacells.open_dataset(root).manifest


def _whole(root: Path, manifest: Manifest, tile: int) -> sparse.csr_matrix:
    return TileReader(FsspecStore(root), manifest, cache_bytes=0).get(tile).to_csr(np.int32)


def test_rule_reads_few_cells_of_remote_tiles_in_ranges(root: Path, manifest: Manifest) -> None:
    remote, local = RemoteLookingStore(root), FsspecStore(root)
    assert ranged_read_pays(remote, manifest, 0, 1)
    assert not ranged_read_pays(local, manifest, 0, 1), "a local tile is always read whole"
    assert not ranged_read_pays(remote, manifest, 0, 0)
    assert not ranged_read_pays(remote, manifest, 0, TILE), "every chunk touched: whole"
    # the share grows with the cells wanted: ranged up to some number of them, whole from there on
    pays = [ranged_read_pays(remote, manifest, 0, n) for n in range(1, TILE + 1)]
    last = pays.index(False)  # the most cells read in ranges
    assert last >= 2 and not any(pays[last:])
    size, prefix = int(manifest.tile_bytes[0]), prefix_size(TILE, N_CHUNKS)

    def expected(n_rows: int) -> float:  # the prefix, plus the share of the chunks n_rows random cells touch
        return prefix + (1 - (1 - 1 / N_CHUNKS) ** n_rows) * size

    assert expected(last) <= RANGED_MAX_SHARE * size < expected(last + 1)


def test_one_chunk_tiles_are_read_whole(matrix: sparse.csr_matrix, tmp_path: Path) -> None:
    path = tmp_path / "one_chunk"
    with DatasetWriter(path, N_GENES, tile_size=TILE, n_chunks=1, level=1) as writer:
        writer.write(matrix)
    manifest = deltacells.open_dataset(path).manifest
    assert not ranged_read_pays(RemoteLookingStore(path), manifest, 0, 1)


def test_cached_tile_is_not_read_in_ranges(root: Path, manifest: Manifest) -> None:
    reader = TileReader(RemoteLookingStore(root), manifest)
    assert reader.reads_ranged(1, 2)
    reader.get(1)
    assert not reader.reads_ranged(1, 2), "a cached tile costs nothing"
    assert reader.reads_ranged(2, 2)


def test_iter_tiles_yields_partial_tiles_with_the_wanted_rows(root: Path, manifest: Manifest) -> None:
    reader = TileReader(RemoteLookingStore(root), manifest)
    rows = [np.array([5, 6]), np.arange(0, TILE, 3), np.array([TILE - 1])]
    got = list(reader.iter_tiles([0, 1, 2], rows=rows))
    assert [t for t, _ in got] == [0, 1, 2]
    assert [tile.complete for _, tile in got] == [False, True, False]
    for (t, tile), wanted in zip(got, rows, strict=True):
        assert tile.n_cells == TILE
        assert (tile.to_csr(np.int32)[wanted] != _whole(root, manifest, t)[wanted]).nnz == 0
    partial = got[0][1]
    assert partial.nnz < _whole(root, manifest, 0).nnz, "only the chunks holding the rows were decoded"
    assert reader.tiles_read_ranged == 2 and reader.tiles_decoded == 1
    assert len(reader.cache) == 3, "partial tiles are cached too"
    assert reader.cache.peek(0) is partial and not reader.reads_ranged(0, 2, cells=rows[0]), "held: nothing to read"


def test_dataset_reads_a_sparse_subset_right(root: Path, matrix: sparse.csr_matrix) -> None:
    ds = deltacells.open_dataset(RemoteLookingStore(root), tile_cache_bytes=0)
    cells = np.array([7, TILE + 100, TILE + 101, 2 * TILE + 399])
    assert (ds.read_rows(cells) != matrix[cells]).nnz == 0
    assert ds._tiles.tiles_read_ranged == 3


@pytest.mark.parametrize("cells", [slice(7, 8), slice(TILE - 2, TILE + 3), slice(5, 9, 1)])
def test_a_short_range_of_cells_is_read_in_ranges(root: Path, matrix: sparse.csr_matrix, cells: slice) -> None:
    """A single cell, or a few consecutive ones, of a remote dataset reads its tiles in ranges, not whole."""
    ds = deltacells.open_dataset(RemoteLookingStore(root), tile_cache_bytes=0)
    assert (ds.read_rows(cells) != matrix[cells]).nnz == 0
    tiles = len(set(np.arange(cells.start, cells.stop) // TILE))
    assert ds._tiles.tiles_read_ranged == tiles and ds._tiles.tiles_decoded == 0


def test_decode_ranged_of_a_missing_tile_raises(root: Path, manifest: Manifest, tmp_path: Path) -> None:
    copy = tmp_path / "ds"
    shutil.copytree(root, copy)
    (copy / "tiles" / "tile_000001.dct").unlink()
    store = RemoteLookingStore(copy)
    fetched = submit_ranged_fetch(store, manifest, 1, np.array([3]))
    with pytest.raises(MissingObjectError, match="tile 1 of 3"):
        decode_ranged(1, fetched, store=store, fields=manifest.to_fields())


def test_decode_ranged_checks_the_header_against_the_manifest(root: Path, manifest: Manifest) -> None:
    store = RemoteLookingStore(root)
    fields = manifest.to_fields()
    fetched = submit_ranged_fetch(store, manifest, 0, np.array([3]))
    fetched.result()
    wrong = dataclasses.replace(fields, tile_nnz=np.asarray(fields.tile_nnz) + 1)
    with pytest.raises(FormatError, match="tile_nnz"):
        decode_ranged(0, fetched, store=store, fields=wrong)
