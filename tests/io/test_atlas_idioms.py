"""The everyday scanpy and pandas idioms on an atlas above the lazy-obs threshold, with the defaults.

Each idiom runs on the AnnData ``read_deltacells`` gives by default (obs lazy: more than a million cells) and on
the same dataset read with ``lazy_obs=False`` (a pandas obs), and must give the same cells, names and values.
The table of issue 27 (and of the user guide's "Atlases" page) is the list of idioms.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
from anndata.experimental.backed import Dataset2D

import deltacells

sc = pytest.importorskip("scanpy")

N_CELLS = 1_000_000 + 48_576  # the atlas of tests/io/conftest.py: just above the lazy-obs threshold (a million)


@pytest.fixture(scope="module")
def path(atlas_path: Path) -> Path:
    return atlas_path


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("atlas-cache")


@pytest.fixture
def lazy(path: Path, cache: Path) -> ad.AnnData:
    adata = deltacells.read_deltacells(path, cache_dir=cache)
    assert isinstance(adata.obs, Dataset2D)  # the defaults: above the threshold, obs is lazy (xarray-backed)
    return adata


@pytest.fixture(scope="module")
def eager(path: Path, cache: Path) -> ad.AnnData:
    adata = deltacells.read_deltacells(path, cache_dir=cache, lazy_obs=False)
    assert isinstance(adata.obs, pd.DataFrame)
    return adata


@pytest.fixture(scope="module")
def cell_indices() -> np.ndarray:
    """Cells in no order, with a repeat and a negative position, across many tiles."""
    rng = np.random.default_rng(5)
    return np.concatenate([rng.choice(N_CELLS, 300, replace=False), [7, 7, -1]])


def same_anndata(got: ad.AnnData, expected: ad.AnnData) -> None:
    """The same cells (names), genes, counts and obs (dtypes included), both in memory."""
    assert isinstance(got.obs, pd.DataFrame)
    pd.testing.assert_frame_equal(got.obs, expected.obs)
    pd.testing.assert_index_equal(got.var_names, expected.var_names)
    assert (got.X != expected.X).nnz == 0


def mask_of(adata: ad.AnnData) -> object:
    return adata.obs["cell_type"] == "NK cell"


# ---------------------------------------------------------------------- views of views


def test_mask_then_slice(lazy: ad.AnnData, eager: ad.AnnData) -> None:
    got, expected = lazy[mask_of(lazy)][:1000], eager[mask_of(eager)][:1000]
    assert got.is_view
    pd.testing.assert_index_equal(got.obs_names, expected.obs_names)
    same_anndata(got.to_memory(), expected.to_memory())


def test_indices_then_slice(lazy: ad.AnnData, eager: ad.AnnData, cell_indices: np.ndarray) -> None:
    got, expected = lazy[cell_indices][:10], eager[cell_indices][:10]
    pd.testing.assert_index_equal(got.obs_names, expected.obs_names)
    same_anndata(got.to_memory(), expected.to_memory())
    got, expected = lazy[cell_indices][::-3][5:9], eager[cell_indices][::-3][5:9]  # three deep
    same_anndata(got.to_memory(), expected.to_memory())


def test_mask_then_genes(lazy: ad.AnnData, eager: ad.AnnData) -> None:
    got, expected = lazy[mask_of(lazy)][:, :5], eager[mask_of(eager)][:, :5]
    assert got.shape == expected.shape
    pd.testing.assert_index_equal(got.var_names, expected.var_names)
    same_anndata(got.to_memory(), expected.to_memory())


def test_copy_of_a_view_is_in_memory(lazy: ad.AnnData, eager: ad.AnnData) -> None:
    got, expected = lazy[mask_of(lazy)].copy(), eager[mask_of(eager)].copy()
    assert not got.is_view and isinstance(got.obs, pd.DataFrame)
    same_anndata(got, expected)


def test_subsample_of_a_view(lazy: ad.AnnData, eager: ad.AnnData) -> None:
    got = sc.pp.subsample(lazy[mask_of(lazy)], n_obs=1000, random_state=3, copy=True)
    expected = sc.pp.subsample(eager[mask_of(eager)], n_obs=1000, random_state=3, copy=True)
    same_anndata(got, expected)


def test_subsample_then_scanpy_and_h5ad(lazy: ad.AnnData, eager: ad.AnnData, tmp_path: Path) -> None:
    got = sc.pp.subsample(lazy, n_obs=1000, random_state=0, copy=True)
    expected = sc.pp.subsample(eager, n_obs=1000, random_state=0, copy=True)
    same_anndata(got, expected)
    for adata in (got, expected):
        sc.pp.calculate_qc_metrics(adata, percent_top=(5,), inplace=True)
        sc.pp.log1p(adata)
        sc.tl.rank_genes_groups(adata, "donor")
    pd.testing.assert_frame_equal(got.obs, expected.obs)
    np.testing.assert_array_equal(got.uns["rank_genes_groups"]["names"], expected.uns["rank_genes_groups"]["names"])
    got.write_h5ad(tmp_path / "subsample.h5ad")
    pd.testing.assert_frame_equal(ad.read_h5ad(tmp_path / "subsample.h5ad").obs, got.obs)


# ---------------------------------------------------------------------- names


def test_the_whole_atlas_reads_no_name(lazy: ad.AnnData, cache: Path) -> None:
    assert isinstance(lazy.obs_names, pd.RangeIndex)  # cell numbers: a RangeIndex, never a string per cell
    assert lazy.obs_names.equals(pd.RangeIndex(N_CELLS))


def test_select_by_stored_names(lazy: ad.AnnData, eager: ad.AnnData) -> None:
    names = list(eager.obs_names[[N_CELLS - 1, 13, 500_000]])
    same_anndata(lazy[names].to_memory(), eager[names].to_memory())
    same_anndata(lazy[np.array(names)].to_memory(), eager[np.array(names)].to_memory())
    same_anndata(lazy[names[1]].to_memory(), eager[names[1]].to_memory())
    assert names[2] in lazy.obs_names
    assert "no such cell" not in lazy.obs_names
    with pytest.raises(KeyError, match="no such cell"):
        lazy[["no such cell", names[0]]]
    view = lazy[mask_of(lazy)]  # a view's names are names too, and find its cells
    first = view.obs_names[:3].tolist()
    same_anndata(view[first].to_memory(), eager[first].to_memory())


# ---------------------------------------------------------------------- pandas on obs columns


def test_column_idioms(lazy: ad.AnnData, eager: ad.AnnData) -> None:
    got, expected = lazy.obs["cell_type"], eager.obs["cell_type"]
    assert isinstance(got, pd.Series)
    pd.testing.assert_series_equal(got.value_counts(), expected.value_counts())
    pd.testing.assert_index_equal(got.cat.categories, expected.cat.categories)
    np.testing.assert_array_equal(got.unique(), expected.unique())
    np.testing.assert_array_equal(got.isin(["B cell", "platelet"]), expected.isin(["B cell", "platelet"]))
    np.testing.assert_array_equal(lazy.obs.n_counts > 50, eager.obs.n_counts > 50)
    np.testing.assert_array_equal(lazy.obs.score.to_numpy(), eager.obs.score.to_numpy())
    pd.testing.assert_frame_equal(lazy.obs.head(), eager.obs.head())
    pd.testing.assert_frame_equal(lazy.obs.tail(3), eager.obs.tail(3))
    assert got.head().tolist() == expected.head().tolist()
    assert list(lazy.obs.columns) == list(eager.obs.columns) and lazy.obs.shape == eager.obs.shape
    assert dict(lazy.obs.dtypes) == dict(eager.obs.dtypes) and len(lazy.obs) == len(eager.obs)
    assert "donor" in lazy.obs and "_index" not in lazy.obs and list(lazy.obs) == list(eager.obs)
    selected = lazy[lazy.obs["donor"].isin(["d2"]) & lazy.obs["is_doublet"]]
    expected_selected = eager[eager.obs["donor"].isin(["d2"]) & eager.obs["is_doublet"]]
    pd.testing.assert_index_equal(selected.obs_names, expected_selected.obs_names)


def test_a_view_s_columns(lazy: ad.AnnData, eager: ad.AnnData, cell_indices: np.ndarray) -> None:
    got, expected = lazy[cell_indices].obs, eager[cell_indices].obs
    for column in expected.columns:
        pd.testing.assert_series_equal(got[column], expected[column])  # index (names) and unused categories too
    pd.testing.assert_frame_equal(got[["donor", "score"]], expected[["donor", "score"]])
    pd.testing.assert_frame_equal(got.head(4), expected.head(4))


def test_obs_row_selection(lazy: ad.AnnData, eager: ad.AnnData) -> None:
    names = list(eager.obs_names[[3, 999_999]])
    pd.testing.assert_frame_equal(lazy.obs.loc[names].to_memory(), eager.obs.loc[names])
    pd.testing.assert_series_equal(lazy.obs.loc[names, "score"], eager.obs.loc[names, "score"])
    pd.testing.assert_series_equal(lazy.obs.iloc[12], eager.obs.iloc[12])
    pd.testing.assert_frame_equal(lazy.obs.iloc[5:9].to_memory(), eager.obs.iloc[5:9])
    doublets = lazy.obs[lazy.obs["is_doublet"]]
    pd.testing.assert_frame_equal(doublets.to_memory(), eager.obs[eager.obs["is_doublet"]])


def test_obs_df(lazy: ad.AnnData, eager: ad.AnnData, cell_indices: np.ndarray) -> None:
    keys = ["cell_type", "score", "gene_3"]
    pd.testing.assert_frame_equal(
        sc.get.obs_df(lazy[cell_indices], keys), sc.get.obs_df(eager[cell_indices], keys), check_dtype=False
    )


def test_setting_a_column(lazy: ad.AnnData, eager: ad.AnnData) -> None:
    for adata in (lazy, eager):
        adata.obs["high"] = adata.obs["n_counts"].to_numpy() > 60
        adata.obs["label"] = adata.obs["cell_type"].astype(str)  # pandas 3: the str dtype, kept
        adata.obs["donor_again"] = adata.obs["donor"]
    cells = np.array([1, 2, 400_000])
    pd.testing.assert_frame_equal(lazy[cells].to_memory().obs, eager[cells].to_memory().obs)
    assert dict(lazy.obs.dtypes) == dict(eager.obs.dtypes)
    del eager.obs["high"], eager.obs["label"], eager.obs["donor_again"]


def test_a_view_cuts_the_colours_of_its_categories(lazy: ad.AnnData, eager: ad.AnnData) -> None:
    colors = ["#000001", "#000002", "#000003", "#000004", "#000005", "#000006"]
    for adata in (lazy, eager):
        adata.uns["cell_type_colors"] = np.array(colors)
    got = lazy[lazy.obs["cell_type"].isin(["T cell", "platelet"])]
    expected = eager[eager.obs["cell_type"].isin(["T cell", "platelet"])]
    np.testing.assert_array_equal(got.uns["cell_type_colors"], expected.uns["cell_type_colors"])
    assert list(got.uns["cell_type_colors"]) == ["#000002", "#000005"]
    del eager.uns["cell_type_colors"]


def test_a_missing_column_says_so(lazy: ad.AnnData) -> None:
    with pytest.raises(KeyError, match="not an obs column"):
        lazy.obs["nothing"]
    with pytest.raises(AttributeError, match="lazy_obs=False"):
        lazy.obs.groupby("cell_type")


# ---------------------------------------------------------------------- X and the rest


def test_to_df(lazy: ad.AnnData, eager: ad.AnnData, cell_indices: np.ndarray) -> None:
    pd.testing.assert_frame_equal(lazy[cell_indices].to_df(), eager[cell_indices].to_df())
    whole = lazy.to_df()  # the whole atlas, dense (12 genes)
    assert whole.shape == (N_CELLS, eager.n_vars)
    np.testing.assert_array_equal(whole.to_numpy()[cell_indices], eager[cell_indices].X.toarray())


def test_pickled_view_and_writing_a_subset(lazy: ad.AnnData, eager: ad.AnnData, tmp_path: Path) -> None:
    view = pickle.loads(pickle.dumps(lazy[mask_of(lazy)][:50]))
    same_anndata(view.to_memory(), eager[mask_of(eager)][:50].to_memory())
    deltacells.write_deltacells(lazy[mask_of(lazy)][:50], tmp_path / "subset", progress=False)
    back = deltacells.read_deltacells(tmp_path / "subset", cache_dir=tmp_path / "cache").to_memory()
    same_anndata(back, eager[mask_of(eager)][:50].to_memory())
