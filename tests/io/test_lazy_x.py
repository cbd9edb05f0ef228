"""The lazy X of read_deltacells: every way of indexing an AnnData gives what the in-memory matrix gives."""

from __future__ import annotations

import pickle
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

N_CELLS, N_GENES, TILE = 1000, 150, 128  # 8 tiles, the last one of 104 cells


class Data:
    """The dataset on disk and its oracles, in the dataset's own gene order."""

    def __init__(self, root: Path) -> None:
        self.source = synthetic_counts(N_CELLS, N_GENES, seed=7)
        self.path = root / "data"
        self.cache = root / "cache"
        deltacells.write_deltacells(self.source, self.path, tile_size=TILE, progress=False)
        first = self.read()
        self.order = np.asarray(first.X.dataset.gene_permutation())
        self.M = sparse.csr_matrix(self.source.X[:, self.order])  # in the dtype written (docs/format.md, decision 9)
        self.obs = self.source.obs
        self.var = self.source.var.iloc[self.order]

    def read(self, **options: Any) -> ad.AnnData:
        return read_stored(self.path, cache_dir=self.cache, **options)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Data:
    return Data(tmp_path_factory.mktemp("lazy"))


@pytest.fixture
def adata(data: Data) -> ad.AnnData:
    """A fresh lazy AnnData of the module's dataset (its own tile cache and counters)."""
    return data.read()


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------- rows


def test_x_is_lazy(adata, data):
    assert isinstance(adata.X, TiledCSRDataset)
    assert isinstance(adata.X, ad.abc.CSRDataset)
    assert adata.X.dataset.tiles_decoded == 0  # opening decodes nothing
    assert adata.X.format == "csr"


def test_bool_mask(adata, data, assert_X_equal):
    mask = (data.obs["cell_type"] == "type_B").to_numpy()
    assert 0 < mask.sum() < N_CELLS
    view = adata[mask]
    assert_X_equal(view.X, data.M[mask])
    pd.testing.assert_frame_equal(pd.DataFrame(view.obs), pd.DataFrame(data.source[mask].obs), check_index_type=False)
    assert adata[adata.obs["donor"] == "donor_2"].shape == (int((data.obs["donor"] == "donor_2").sum()), N_GENES)


def test_int_array_random_order_with_repeats(adata, data, assert_X_equal):
    idx = _rng(1).integers(0, N_CELLS, 300)
    idx[:5] = [999, 0, 0, 127, 128]  # tile edges and a repeat
    assert len(np.unique(idx)) < len(idx)
    assert_X_equal(adata[idx].X, data.M[idx])
    assert_X_equal(adata.X[idx], data.M[idx])
    assert_X_equal(adata.X[list(idx[:20])], data.M[idx[:20]])


def test_negative_int_array(adata, data, assert_X_equal):
    idx = np.array([-1, -N_CELLS, 5, -129])
    assert_X_equal(adata.X[idx], data.M[idx])


@pytest.mark.parametrize(
    "sl",
    [
        slice(None),
        slice(10, 900, 7),
        slice(None, None, -1),
        slice(900, 10, -13),
        slice(-50, None),
        slice(None, -990),
        slice(127, 129),
        slice(5, 5),
        slice(2000, 3000),
        slice(None, None, 250),
    ],
    ids=repr,
)
def test_slices(adata, data, assert_X_equal, sl):
    expected = data.M[sl]
    assert_X_equal(adata[sl].X, expected)
    assert_X_equal(adata.X[sl], expected)


def test_single_rows(adata, data, assert_X_equal):
    assert_X_equal(adata.X[-1], data.M[-1])
    assert adata.X[-1].shape == (1, N_GENES)
    assert_X_equal(adata.X[0], data.M[0])
    assert_X_equal(adata.X[np.int64(500)], data.M[500])
    assert_X_equal(adata[500].X, data.M[500])


def test_empty_selections(adata, data, assert_X_equal):
    assert_X_equal(adata.X[np.array([], dtype=np.int64)], data.M[np.array([], dtype=np.int64)])
    assert_X_equal(adata[np.zeros(N_CELLS, dtype=bool)].X, data.M[np.zeros(N_CELLS, dtype=bool)])
    assert adata[[]].shape == (0, N_GENES)


def test_out_of_range(adata):
    with pytest.raises(IndexError):
        adata.X[N_CELLS]
    with pytest.raises(IndexError):
        adata.X[np.array([0, -N_CELLS - 1])]
    with pytest.raises(IndexError):
        adata.X[np.ones(N_CELLS - 1, dtype=bool)]
    with pytest.raises(IndexError):
        adata.X[0, 0, 0]


# ---------------------------------------------------------------------- rows and columns


def test_rows_and_columns(adata, data, assert_X_equal):
    rows = _rng(2).choice(N_CELLS, 60, replace=False)
    cols = np.array([149, 0, 75, 3, 3, 10])
    assert_X_equal(adata[rows, cols].X, data.M[rows][:, cols], sorted_indices=False)
    assert_X_equal(adata.X[rows, cols], data.M[rows][:, cols], sorted_indices=False)
    assert_X_equal(adata.X[np.ix_(rows, cols)], data.M[np.ix_(rows, cols)], sorted_indices=False)
    mask_rows = np.zeros(N_CELLS, dtype=bool)
    mask_rows[rows] = True
    mask_cols = np.zeros(N_GENES, dtype=bool)
    mask_cols[cols] = True
    assert_X_equal(adata[mask_rows, mask_cols].X, data.M[mask_rows][:, mask_cols])
    assert_X_equal(adata.X[np.ix_(mask_rows, mask_cols)], data.M[np.ix_(mask_rows, mask_cols)])
    assert_X_equal(adata.X[10:400:3, 20:80:2], data.M[10:400:3, 20:80:2])
    assert_X_equal(adata.X[..., 5:9], data.M[:, 5:9])
    assert_X_equal(adata.X[rows, 7], data.M[rows][:, [7]])


def test_gene_names(adata, data, assert_X_equal):
    names = [data.var.index[40], "MT-ND1", data.var.index[0], "GENE00100"]
    positions = [data.var.index.get_loc(n) for n in names]
    view = adata[:, names]
    assert list(view.var_names) == names
    assert_X_equal(view.X, data.M[:, positions], sorted_indices=False)
    pd.testing.assert_frame_equal(pd.DataFrame(view.var), data.var.iloc[positions], check_index_type=False)


def test_gene_mask(adata, data, assert_X_equal):
    mask = data.var["mito"].to_numpy() | (np.arange(N_GENES) % 4 == 0)
    assert_X_equal(adata[:, mask].X, data.M[:, mask])
    assert_X_equal(adata[:, adata.var["mito"]].X, data.M[:, data.var["mito"].to_numpy()])


def test_scalar(adata, data):
    dense = data.M.toarray()
    nz = np.argwhere(dense > 0)
    zeros = np.argwhere(dense == 0)
    for i, j in [*nz[:: len(nz) // 5], *zeros[:: len(zeros) // 5], (-1, -1), (N_CELLS - 1, 0)]:
        value = adata.X[int(i), int(j)]
        assert np.ndim(value) == 0
        assert value == dense[i, j]
    assert np.dtype(type(adata.X[0, 0])) == data.M.dtype  # the dtype written


# ---------------------------------------------------------------------- to_memory, repr, properties


def test_subset_to_memory(adata, data, assert_X_equal):
    idx = _rng(3).choice(N_CELLS, 200, replace=False)
    mem = adata[idx].to_memory()
    assert not mem.is_view
    assert isinstance(mem.X, sparse.csr_matrix)  # anndata keeps its view class here, as for in-memory X
    assert_X_equal(mem.X, data.M[idx])
    pd.testing.assert_frame_equal(mem.obs, pd.DataFrame(data.source[idx].obs), check_index_type=False)
    pd.testing.assert_frame_equal(mem.var, data.var, check_index_type=False)
    mem = adata[idx[:50], 10:40].to_memory()
    assert_X_equal(mem.X, data.M[idx[:50], 10:40])


def test_whole_to_memory(adata, data, assert_X_equal):
    mem = adata.to_memory()
    assert type(mem.X) is sparse.csr_matrix
    assert_X_equal(mem.X, data.M)
    pd.testing.assert_frame_equal(mem.obs, data.obs, check_index_type=False)
    assert "deltacells" not in mem.uns  # nothing of ours in the AnnData
    assert_X_equal(adata.X.to_memory(), data.M)
    assert_X_equal(ad.AnnData(X=adata.X).X, data.M)  # an AnnData can be made on the lazy X


def test_repr_and_properties(adata, data):
    text = repr(adata)
    assert f"n_obs \u00d7 n_vars = {N_CELLS} \u00d7 {N_GENES}" in text
    assert "cell_type" in text and "deltacells" not in text  # nothing of ours in uns
    x_text = repr(adata.X)
    assert "TiledCSRDataset" in x_text and "1,000 x 150" in x_text and "8 tiles" in x_text
    assert str(data.path) in x_text
    assert len(adata.X) == N_CELLS
    assert adata.X.shape == (N_CELLS, N_GENES) == adata.shape
    assert adata.X.ndim == 2
    assert adata.X.dtype == data.source.X.dtype  # the dtype written (docs/format.md, decision 9)
    assert adata.X.nnz == data.M.nnz
    assert adata.X.dataset.tiles_decoded == 0  # none of this decodes anything


# ---------------------------------------------------------------------- dtypes


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "float64", np.int64, np.dtype("float64")], ids=str)
def test_read_dtypes(data, assert_X_equal, dtype):
    adata = data.read(dtype=dtype)
    want = np.dtype(dtype)
    assert adata.X.dtype == want
    rows = np.array([900, 3, 3, 450])
    assert_X_equal(adata[rows].X, data.M[rows], dtype=want)
    assert_X_equal(adata.X.to_memory(), data.M, dtype=want)
    assert adata.to_memory().X.dtype == want
    assert np.dtype(type(adata.X[0, 0])) == want
    assert_X_equal(adata.X.astype(np.float32)[rows], data.M[rows], dtype=np.float32)


@pytest.mark.parametrize("dtype", ["int16", "uint8", "float16", "bool", "complex64", "foo", object])
def test_bad_dtype(data, dtype):
    with pytest.raises(TypeError, match="float32, int32, int64, float64"):
        data.read(dtype=dtype)


# ---------------------------------------------------------------------- tiles decoded


def test_decodes_only_the_tiles_needed(data, assert_X_equal):
    adata = data.read(tile_cache_bytes=0)
    dataset = adata.X.dataset
    rows = np.array([5, TILE + 3, 7, TILE + 100])  # tiles 0 and 1 only
    assert_X_equal(adata[rows].X, data.M[rows])
    assert dataset.tiles_decoded == 2
    assert_X_equal(adata.X[TILE * 5 : TILE * 5 + 10], data.M[TILE * 5 : TILE * 5 + 10])
    assert dataset.tiles_decoded == 3
    adata[rows].X  # noqa: B018 (no cache: decoded again)
    assert dataset.tiles_decoded == 5
    assert adata[rows].to_memory().shape == (4, N_GENES)
    assert dataset.tiles_decoded == 7


def test_tile_cache(data):
    adata = data.read()
    rows = np.array([5, TILE + 3])
    adata[rows].X  # noqa: B018
    assert adata.X.dataset.tiles_decoded == 2
    adata[rows[::-1]].X  # noqa: B018
    assert adata.X.dataset.tiles_decoded == 2  # from the cache


def test_iter_row_blocks(adata, data, assert_X_equal):
    blocks = list(adata.X.iter_row_blocks())
    assert len(blocks) == 8
    covered = np.concatenate([np.arange(N_CELLS)[rows] for rows, _ in blocks])
    np.testing.assert_array_equal(covered, np.arange(N_CELLS))
    assert all(block.shape[0] <= TILE for _, block in blocks)
    assert_X_equal(sparse.vstack([block for _, block in blocks], format="csr"), data.M)
    rows = _rng(4).choice(N_CELLS, 300, replace=False)
    blocks = list(adata.X.iter_row_blocks(rows))
    np.testing.assert_array_equal(np.concatenate([r for r, _ in blocks]), rows)
    assert_X_equal(sparse.vstack([b for _, b in blocks], format="csr"), data.M[rows])


# ---------------------------------------------------------------------- pickling and copies


def test_pickle_x(adata, data, assert_X_equal):
    adata.X.to_memory()  # fill the tile cache: it must not be pickled
    blob = pickle.dumps(adata.X)
    assert len(blob) < 20_000
    X = pickle.loads(blob)
    assert isinstance(X, TiledCSRDataset)
    assert X.dataset.tiles_decoded == 0
    rows = np.array([999, 0, 500])
    assert_X_equal(X[rows], data.M[rows])
    assert X.dtype == data.M.dtype


def test_pickle_x_keeps_dtype(data, assert_X_equal):
    X = pickle.loads(pickle.dumps(data.read(dtype="int64").X))
    assert X.dtype == np.int64
    assert_X_equal(X[3:9], data.M[3:9], dtype=np.int64)


def test_pickle_anndata(adata, data, assert_X_equal):
    back = pickle.loads(pickle.dumps(adata))
    assert isinstance(back.X, TiledCSRDataset)
    assert_X_equal(back[10:20].X, data.M[10:20])
    pd.testing.assert_frame_equal(back.obs, adata.obs)


def test_copy(adata, data, assert_X_equal):
    copy = adata.copy()
    assert isinstance(copy.X, TiledCSRDataset)
    assert copy.X is not adata.X
    assert_X_equal(copy[100:300:2].X, data.M[100:300:2])
    copy.obs["new"] = 1
    assert "new" not in adata.obs
    sub = adata[np.arange(0, N_CELLS, 9)].copy()
    assert not sub.is_view
    assert_X_equal(sub.X, data.M[::9])
