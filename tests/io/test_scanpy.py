"""scanpy integration: sc.read_deltacells, AnnData.write_deltacells, and real scanpy on lazily read subsets."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable

import anndata as ad
import numpy as np
import pandas as pd
import pytest

import deltacells
from deltacells.datasets import synthetic_counts

sc = pytest.importorskip("scanpy")


def _run(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (warnings are errors there too)."""
    return subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning:deltacells", "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# ---------------------------------------------------------------------- the attached functions


def test_attached_in_this_process():
    assert sc.read_deltacells is deltacells.read_deltacells
    assert callable(ad.AnnData.write_deltacells)


def test_post_import_hook():
    """deltacells does not import scanpy; importing scanpy afterwards gets the function; the hook replaces nothing."""
    result = _run(
        """
        import sys
        import deltacells
        assert "scanpy" not in sys.modules, "import deltacells imported scanpy"
        import scanpy
        assert scanpy.read_deltacells is deltacells.read_deltacells
        import anndata
        assert anndata.AnnData.write_deltacells.__module__.startswith("deltacells")

        sentinel = object()
        scanpy.read_deltacells = sentinel
        from deltacells.io._scverse import attach
        attach()  # registers the hook again: scanpy is imported, so it runs at once, and must keep the sentinel
        assert scanpy.read_deltacells is sentinel
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_existing_attributes_are_not_replaced():
    result = _run(
        """
        import anndata, scanpy
        sentinel = object()
        scanpy.read_deltacells = sentinel
        anndata.AnnData.write_deltacells = sentinel
        import deltacells
        assert scanpy.read_deltacells is sentinel
        assert anndata.AnnData.write_deltacells is sentinel
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_method_and_sc_reader(new_path, cache_dir, assert_X_equal):
    src = synthetic_counts(200, 40, seed=4)
    path = new_path()
    src.write_deltacells(path, progress=False, tile_size=64, reorder_genes=False)
    adata = sc.read_deltacells(path, cache_dir=cache_dir)
    assert adata.X.dataset.manifest.tile_size == 64 and "deltacells" not in adata.uns
    assert_X_equal(adata.X, src.X)
    pd.testing.assert_frame_equal(adata.obs, src.obs, check_index_type=False)
    with pytest.raises(FileExistsError):
        src.write_deltacells(path, progress=False)


# ---------------------------------------------------------------------- scanpy on lazily read subsets


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[ad.AnnData, ad.AnnData]:
    """(subset read from deltacells and loaded, the same subset of the in-memory original), genes as written."""
    root = tmp_path_factory.mktemp("scanpy")
    src = synthetic_counts(1500, 800, seed=12)
    deltacells.write_deltacells(src, root / "data", tile_size=256, progress=False)
    lazy = sc.read_deltacells(root / "data", cache_dir=root / "cache")
    subset = (lazy.obs["donor"] == "donor_1").to_numpy()
    assert 200 < subset.sum() < 1000
    loaded = lazy[subset].to_memory()  # genes in the source's order (the default)
    reference = src[subset].copy()  # counts in the dtype written, as the dataset gives them
    reference.uns = dict(loaded.uns)
    return loaded, reference


def _both(pair: tuple[ad.AnnData, ad.AnnData], step: Callable[[ad.AnnData], None]) -> tuple[ad.AnnData, ad.AnnData]:
    got, ref = pair[0].copy(), pair[1].copy()
    step(got)
    step(ref)
    return got, ref


def test_inputs_are_equal(pair, assert_X_equal):
    got, ref = pair
    assert got.X.has_sorted_indices  # mapped back to the source's gene order, each row sorted (canonical CSR)
    assert_X_equal(got.X, ref.X)
    pd.testing.assert_frame_equal(got.obs, pd.DataFrame(ref.obs), check_index_type=False)
    pd.testing.assert_frame_equal(got.var, pd.DataFrame(ref.var), check_index_type=False)


def test_calculate_qc_metrics(pair):
    got, ref = _both(pair, lambda a: sc.pp.calculate_qc_metrics(a, qc_vars=["mito"], percent_top=(50,), inplace=True))
    assert "total_counts_mito" in got.obs and "pct_counts_in_top_50_genes" in got.obs
    pd.testing.assert_frame_equal(got.obs, ref.obs, check_index_type=False, rtol=1e-6)
    pd.testing.assert_frame_equal(got.var, ref.var, check_index_type=False, rtol=1e-6)
    np.testing.assert_allclose(got.obs["total_counts"], got.obs["total_counts"].round())


def _normalized(adata: ad.AnnData) -> None:
    sc.pp.normalize_total(adata, target_sum=1e4)
    sc.pp.log1p(adata)


def test_normalize_log1p(pair):
    got, ref = _both(pair, _normalized)
    assert got.X.dtype == ref.X.dtype == np.float32
    np.testing.assert_allclose(got.X.toarray(), ref.X.toarray(), rtol=1e-6, atol=1e-7)
    sums = np.expm1(got.X.toarray()).sum(axis=1)
    np.testing.assert_allclose(sums[sums > 0], 1e4, rtol=1e-3)


def test_highly_variable_genes_seurat(pair):
    def step(adata: ad.AnnData) -> None:
        _normalized(adata)
        sc.pp.highly_variable_genes(adata, flavor="seurat", n_top_genes=200)

    got, ref = _both(pair, step)
    assert got.var["highly_variable"].sum() == 200
    np.testing.assert_array_equal(got.var["highly_variable"], ref.var["highly_variable"])
    for column in ("means", "dispersions", "dispersions_norm"):
        np.testing.assert_allclose(got.var[column], ref.var[column], rtol=1e-5, equal_nan=True)


def test_highly_variable_genes_seurat_v3(pair):
    pytest.importorskip("skmisc", reason="flavor='seurat_v3' needs scikit-misc")

    got, ref = _both(pair, lambda a: sc.pp.highly_variable_genes(a, flavor="seurat_v3", n_top_genes=200))
    np.testing.assert_array_equal(got.var["highly_variable"], ref.var["highly_variable"])
    np.testing.assert_allclose(got.var["variances_norm"], ref.var["variances_norm"], rtol=1e-5)


@pytest.mark.parametrize(("solver", "dense"), [("arpack", False), ("full", True)], ids=["arpack", "full-dense"])
def test_pca(pair, solver, dense):
    def step(adata: ad.AnnData) -> None:
        _normalized(adata)
        sc.pp.highly_variable_genes(adata, flavor="seurat", n_top_genes=200)
        if dense:  # scanpy's "full" solver needs a dense X
            adata.X = adata.X.toarray()
        sc.pp.pca(adata, n_comps=15, svd_solver=solver, random_state=0, mask_var="highly_variable")

    got, ref = _both(pair, step)
    assert got.obsm["X_pca"].shape == (got.n_obs, 15)
    np.testing.assert_allclose(got.uns["pca"]["variance_ratio"], ref.uns["pca"]["variance_ratio"], rtol=1e-4)
    # Components are defined up to sign; scanpy fixes signs deterministically, but compare robustly anyway.
    signs = np.sign(np.sum(got.obsm["X_pca"] * ref.obsm["X_pca"], axis=0))
    scale = np.abs(ref.obsm["X_pca"]).max()
    np.testing.assert_allclose(got.obsm["X_pca"] * signs, ref.obsm["X_pca"], rtol=1e-3, atol=1e-4 * scale)


def test_pipeline_on_lazy_view_directly(tmp_path, cache_dir):
    """Functions that only read X work on a view of the lazy AnnData itself (rows decoded on access)."""
    src = synthetic_counts(300, 60, seed=5)
    deltacells.write_deltacells(src, tmp_path / "d", reorder_genes=False, tile_size=64, progress=False)
    lazy = sc.read_deltacells(tmp_path / "d", cache_dir=cache_dir)
    rows = np.arange(0, 300, 2)
    qc, _ = sc.pp.calculate_qc_metrics(lazy[rows], percent_top=None, inplace=False)
    expected, _ = sc.pp.calculate_qc_metrics(src[rows].copy(), percent_top=None, inplace=False)
    pd.testing.assert_frame_equal(qc, expected, check_index_type=False, check_dtype=False, rtol=1e-6)
