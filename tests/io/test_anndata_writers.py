"""anndata's own writers (write_h5ad, write_zarr) on a deltacells-backed AnnData: the real matrix, streamed."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
from scipy import sparse

import deltacells
from deltacells.datasets import synthetic_counts
from deltacells.io import TiledCSRDataset

#: Reading with genes as stored (the tests below check the stored order; test_gene_order.py the default).
read_stored = partial(deltacells.read_deltacells, gene_order="stored")

N_CELLS, N_GENES, TILE = 600, 80, 64


class Data:
    def __init__(self, root: Path) -> None:
        self.source = synthetic_counts(N_CELLS, N_GENES, seed=21)
        self.path = root / "data"
        self.cache = root / "cache"
        deltacells.write_deltacells(self.source, self.path, tile_size=TILE, progress=False)
        self.order = np.asarray(self.read().X.dataset.gene_permutation())
        self.M = sparse.csr_matrix(self.source.X[:, self.order])  # in the dtype written (docs/format.md, decision 9)
        self.var = self.source.var.iloc[self.order]

    def read(self, **options: Any) -> ad.AnnData:
        return read_stored(self.path, cache_dir=self.cache, **options)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Data:
    return Data(tmp_path_factory.mktemp("writers"))


def _write(adata: ad.AnnData, path: Path, fmt: str, **options: Any) -> ad.AnnData:
    if fmt == "h5ad":
        adata.write_h5ad(path, **options)
        return ad.read_h5ad(path)
    adata.write_zarr(path, **options)
    return ad.read_zarr(path)


SELECTIONS: dict[str, Callable[[pd.DataFrame], tuple[Any, Any]]] = {
    "whole": lambda obs: (slice(None), slice(None)),
    "mask": lambda obs: ((obs["cell_type"] == "type_A").to_numpy(), slice(None)),
    "random-rows": lambda obs: (np.random.default_rng(0).choice(N_CELLS, 150, replace=False), slice(None)),
    "step": lambda obs: (slice(3, None, 4), slice(None)),
    "rows-and-genes": lambda obs: (np.arange(50, 400, 3), np.array([70, 1, 33, 5])),
    "gene-mask": lambda obs: (slice(None), np.arange(N_GENES) % 2 == 0),
}


@pytest.mark.parametrize("fmt", ["h5ad", "zarr"])
@pytest.mark.parametrize("selection", list(SELECTIONS), ids=list(SELECTIONS))
def test_write_real_matrix(data, tmp_path, fmt, selection, assert_X_equal):
    lazy = data.read()
    rows, cols = SELECTIONS[selection](data.source.obs)
    target = lazy if selection == "whole" else lazy[rows, cols]
    back = _write(target, tmp_path / f"out.{fmt}", fmt)
    expected = data.source[rows, cols]  # the in-memory original, same selection (genes in the dataset's order)
    assert back.shape == target.shape
    assert sparse.issparse(back.X) and back.X.format == "csr"
    order_of_selection = data.order[np.arange(N_GENES)[cols]]
    assert_X_equal(back.X, data.source.X[rows][:, order_of_selection], sorted_indices=False)
    pd.testing.assert_frame_equal(back.obs, pd.DataFrame(expected.obs), check_index_type=False)
    pd.testing.assert_frame_equal(back.var, data.var.iloc[np.arange(N_GENES)[cols]], check_index_type=False)
    np.testing.assert_array_equal(lazy.X.dataset.gene_permutation(), data.order)
    assert "deltacells" not in back.uns  # nothing of ours written out


@pytest.mark.parametrize("fmt", ["h5ad", "zarr"])
def test_write_streams_tiles(data, tmp_path, fmt, monkeypatch, assert_X_equal):
    """A whole-dataset write never loads the matrix at once: it goes tile by tile through iter_row_blocks."""

    def refuse(self: TiledCSRDataset, *args: Any, **kwargs: Any) -> None:
        msg = "to_memory must not be called by the writer"
        raise AssertionError(msg)

    block_rows: list[int] = []
    original = TiledCSRDataset.iter_row_blocks

    def counting(self: TiledCSRDataset, *args: Any, **kwargs: Any):
        for rows, block in original(self, *args, **kwargs):
            block_rows.append(block.shape[0])
            yield rows, block

    original_getitem = TiledCSRDataset.__getitem__
    getitem_rows: list[int] = []

    def recording_getitem(self: TiledCSRDataset, index: Any) -> Any:
        result = original_getitem(self, index)
        getitem_rows.append(result.shape[0] if hasattr(result, "shape") and len(result.shape) == 2 else 1)
        return result

    monkeypatch.setattr(TiledCSRDataset, "to_memory", refuse)
    monkeypatch.setattr(TiledCSRDataset, "iter_row_blocks", counting)
    monkeypatch.setattr(TiledCSRDataset, "__getitem__", recording_getitem)
    lazy = data.read()
    back = _write(lazy, tmp_path / f"out.{fmt}", fmt)
    assert block_rows == [TILE] * (N_CELLS // TILE) + [N_CELLS % TILE]
    assert all(n <= TILE for n in getitem_rows), getitem_rows  # nothing read the whole matrix another way
    assert_X_equal(back.X, data.M)


def test_write_h5ad_options(data, tmp_path, assert_X_equal):
    lazy = data.read(dtype="int32")
    lazy.write_h5ad(tmp_path / "gz.h5ad", compression="gzip")
    import h5py

    with h5py.File(tmp_path / "gz.h5ad") as f:
        assert f["X"].attrs["encoding-type"] == "csr_matrix"
        assert f["X/data"].compression == "gzip"
        assert f["X/data"].dtype == np.int32
        assert tuple(f["X"].attrs["shape"]) == (N_CELLS, N_GENES)
    back = ad.read_h5ad(tmp_path / "gz.h5ad", backed="r")
    try:
        assert_X_equal(back.X[10:300], data.M[10:300], dtype=np.int32)
    finally:
        back.file.close()


def test_roundtrip_through_h5ad(data, tmp_path, new_path, cache_dir, assert_X_equal):
    """deltacells -> h5ad (anndata) -> deltacells gives the same dataset."""
    lazy = data.read()
    lazy.write_h5ad(tmp_path / "out.h5ad")
    back = ad.read_h5ad(tmp_path / "out.h5ad", backed="r")
    path = new_path()
    try:
        deltacells.write_deltacells(back, path, tile_size=100, reorder_genes=False, progress=False)
    finally:
        back.file.close()
    again = read_stored(path, cache_dir=cache_dir)
    assert_X_equal(again.X, data.M)
    pd.testing.assert_frame_equal(again.obs, lazy.obs)


def test_empty_view(data, tmp_path):
    lazy = data.read()
    lazy[np.zeros(N_CELLS, dtype=bool)].write_h5ad(tmp_path / "empty.h5ad")
    back = ad.read_h5ad(tmp_path / "empty.h5ad")
    assert back.shape == (0, N_GENES)
