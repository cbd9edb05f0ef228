"""A reader whose dataset changed under it in a way no append explains gets the error, never other cells.

A reader survives appends (``tests/storage/test_readers_during_appends.py``): an append only adds cells, so
the reader keeps its version of the last tile. When the dataset at its path was instead replaced (other
genes, fewer tiles, other cells in the same layout), its manifest deleted, or the tile the append rewrote is
damaged, the reader's read of its last tile raises the format's error naming that tile.
"""

from __future__ import annotations

import json
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
from scipy import sparse

import deltacells
from deltacells.core import STALE_ERRORS, open_dataset
from deltacells.errors import FormatError
from deltacells.format import MANIFEST_NAME, tile_path

TILE, BASE, N_GENES = 16, 20, 12  # two tiles, the last (4 cells) partial: the one an append rewrites


def _cells(n: int, *, seed: int, n_genes: int = N_GENES, start: int = 0) -> ad.AnnData:
    rng = np.random.default_rng(seed)
    counts = sparse.random(n, n_genes, density=0.4, format="csr", random_state=seed, dtype=np.float64)
    counts.data = rng.integers(1, 30, counts.nnz).astype(np.float64)
    obs = pd.DataFrame({"value": rng.random(n)}, index=[f"c{start + i}" for i in range(n)])
    var = pd.DataFrame(index=[f"g{j}" for j in range(n_genes)])
    return ad.AnnData(X=counts.astype(np.float32), obs=obs, var=var)


def _write(adata: ad.AnnData, path: Path, **options) -> None:
    deltacells.write_deltacells(adata, path, tile_size=TILE, reorder_genes=False, progress=False, **options)


@pytest.fixture
def first(tmp_path: Path) -> tuple[Path, ad.AnnData]:
    path = tmp_path / "ds"
    adata = _cells(BASE, seed=1)
    _write(adata, path)
    return path, adata


def test_an_append_is_followed(first) -> None:
    """The case the others differ from: after an append, the old reader reads its own cells."""
    path, adata = first
    old = open_dataset(path, tile_cache_bytes=0)
    _write(_cells(9, seed=2, start=100), path, append=True)
    np.testing.assert_array_equal(old.read_rows().toarray(), adata.X.toarray())


def test_a_dataset_replaced_by_one_of_other_genes(first) -> None:
    path, _ = first
    old = open_dataset(path, tile_cache_bytes=0)
    _write(_cells(BASE + 9, seed=3, n_genes=N_GENES + 1), path, overwrite=True)
    with pytest.raises(STALE_ERRORS, match=r"tile_000001\.dct"):
        old.read_rows(slice(TILE, BASE))


def test_a_dataset_replaced_by_a_smaller_one(first) -> None:
    path, _ = first
    old = open_dataset(path, tile_cache_bytes=0)
    _write(_cells(TILE - 6, seed=4), path, overwrite=True)  # one tile: tile 1 is gone
    with pytest.raises(STALE_ERRORS, match=r"tile_000001\.dct"):
        old.read_rows(slice(TILE, BASE))


def test_a_dataset_replaced_by_other_cells_in_the_same_layout(first) -> None:
    """Tile 0 the same, tile 1 with more cells: it looks like an append, but its first cells are not the reader's."""
    path, adata = first
    old = open_dataset(path, tile_cache_bytes=0)
    others = _cells(BASE + 9, seed=5, start=200)
    rest = sparse.lil_matrix((BASE + 9 - TILE, N_GENES), dtype=np.float32)
    rest[BASE - TILE :, :] = 1.0  # more counts than the reader's tile 1 had, none in its 4 cells
    others.X = sparse.csr_matrix(sparse.vstack([adata.X[:TILE], rest]))
    _write(others, path, overwrite=True)
    grown = open_dataset(path)
    assert grown.tile_bytes[0] == old.tile_bytes[0] and grown.tile_cells[1] > old.tile_cells[1]
    assert grown.manifest.tile_nnz[1] > old.manifest.tile_nnz[1]
    with pytest.raises(STALE_ERRORS, match=r"tile_000001\.dct"):
        old.read_rows(slice(TILE, BASE))


def test_a_manifest_deleted_after_the_reader_opened(first) -> None:
    path, _ = first
    old = open_dataset(path, tile_cache_bytes=0)
    tile = path / tile_path(1)
    tile.write_bytes(tile.read_bytes()[:-2])
    (path / MANIFEST_NAME).unlink()  # nothing to follow: the damaged tile's error stands
    with pytest.raises(FormatError, match=r"tile_000001\.dct"):
        old.read_rows()


def test_the_tile_an_append_rewrote_is_damaged(first) -> None:
    path, _ = first
    old = open_dataset(path, tile_cache_bytes=0)
    _write(_cells(9, seed=6, start=100), path, append=True)
    tile = path / tile_path(1)
    blob = bytearray(tile.read_bytes())
    blob[len(blob) // 2] ^= 0xFF  # the newer version's tile 1 no longer decodes: no version of it can be had
    tile.write_bytes(bytes(blob))
    with pytest.raises(FormatError, match=r"tile_000001\.dct") as raised:
        old.read_rows(slice(TILE, BASE))
    assert json.loads((path / MANIFEST_NAME).read_text())["n_cells"] == BASE + 9
    assert "CRC" in str(raised.value) or "crc" in str(raised.value).lower() or "decode" in str(raised.value)
