"""Everything an AnnData holds, beside the tiles (DECISIONS.md 15): written with anndata's writer, read back.

A round trip with the defaults gives back an AnnData equal to the one written (anndata's own ``assert_equal``,
X's dtype aside: float32 on read), whatever the source (in memory, backed h5ad, dask, ``read_lazy``) and
wherever the counts were (X, a layer, raw); large elements come back lazily, and a subset carries their rows.
"""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import zarr
from anndata.tests.helpers import assert_equal
from scipy import sparse

import deltacells
from deltacells.datasets import synthetic_counts
from deltacells.errors import FormatError
from deltacells.format import EXTRAS_FORMAT, EXTRAS_NAME
from deltacells.io import _extras, _zarr_batch
from deltacells.io._extras import collect_extras, write_extras
from deltacells.storage import BaseStore, FsspecStore, open_store

da = pytest.importorskip("dask.array")

N_CELLS, N_GENES = 240, 60


def full_anndata(seed: int = 0) -> ad.AnnData:
    """Counts in X and a counts layer, a normalized layer, raw with more genes than X, every mapping, uns."""
    base = synthetic_counts(N_CELLS, N_GENES + 20, seed=seed)
    adata = base[:, :N_GENES].copy()
    adata.raw = base  # 80 genes
    rng = np.random.default_rng(seed)
    adata.layers["counts"] = adata.X.copy()
    adata.layers["lognorm"] = sparse.csr_matrix(np.log1p(adata.X.astype(np.float32)))
    adata.obsm["X_pca"] = rng.random((N_CELLS, 5)).astype(np.float32)
    adata.obsm["X_umap"] = rng.random((N_CELLS, 2))
    adata.obsm["frame"] = pd.DataFrame({"a": rng.random(N_CELLS)}, index=adata.obs_names)
    adata.varm["PCs"] = rng.random((N_GENES, 5))
    adata.obsp["connectivities"] = sparse.random(N_CELLS, N_CELLS, density=0.02, format="csr", random_state=1)
    adata.varp["correlations"] = rng.random((N_GENES, N_GENES))
    adata.uns["cell_type_colors"] = np.array(["#aa0000", "#00aa00", "#0000aa", "#aaaa00", "#00aaaa", "#aa00aa"])
    adata.uns["rank_genes_groups"] = {"params": {"method": "wilcoxon"}, "names": np.array([["g1", "g2"]] * 3)}
    adata.uns["note"] = "kept"
    return adata


def read_back(path: Path, cache: Path, **options: Any) -> ad.AnnData:
    return deltacells.read_deltacells(path, cache_dir=cache, **options)


def assert_same(got: ad.AnnData, expected: ad.AnnData) -> None:
    """anndata's ``assert_equal`` on everything, the tiles' counts in the dtype they were written in."""
    got = got.to_memory()
    assert got.X is None or got.X.dtype == expected.X.dtype
    for key in [k for k in got.layers if k is not None]:  # anndata 0.13 lists X among the layers, as None
        assert got.layers[key].dtype == expected.layers[key].dtype
    if got.raw is not None and expected.raw is not None:
        assert got.raw.X.dtype == expected.raw.X.dtype
    # Names come back in the default string dtype of the pandas reading them (pandas 3: str), as read_parquet's.
    got.obs_names = got.obs_names.astype(expected.obs_names.dtype)
    got.var_names = got.var_names.astype(expected.var_names.dtype)
    if got.raw is not None and expected.raw is not None:
        got.raw.var.index = got.raw.var.index.astype(expected.raw.var_names.dtype)
    assert_equal(got, expected)


@pytest.mark.parametrize("counts", ["X", "layer", "raw"])
@pytest.mark.parametrize("gene_order", ["original", "stored", "stored, restored in memory"])
def test_round_trip(tmp_path: Path, counts: str, gene_order: str) -> None:
    adata = full_anndata()
    options: dict[str, Any] = {"layer": "counts"} if counts == "layer" else {"raw": True} if counts == "raw" else {}
    if counts == "raw":
        adata.raw = ad.AnnData(X=adata.raw.X, var=adata.raw.var)  # raw of counts, 80 genes
        adata.X = adata.X.astype(np.float32) / 2  # X is not counts
    if counts == "layer":
        adata.X = adata.layers.pop("lognorm")
    deltacells.write_deltacells(adata, tmp_path / "ds", progress=False, tile_size=64, **options)
    if gene_order == "original":
        got = read_back(tmp_path / "ds", tmp_path / "cache")
    else:
        got = deltacells.read_deltacells(tmp_path / "ds", cache_dir=tmp_path / "cache", gene_order="stored")
        order = deltacells.io.counts_of(got).dataset.gene_permutation()  # what the AnnData in memory is restored with
        if gene_order.endswith("in memory"):
            if counts == "raw":
                pytest.skip("restore_gene_order(gene_order=) reorders X's genes; raw's are restored before to_memory")
            got = got.to_memory()
        got = deltacells.restore_gene_order(got, gene_order=order)
    assert_same(got, adata)


def test_what_a_round_trip_holds(tmp_path: Path) -> None:
    adata = full_anndata()
    deltacells.write_deltacells(adata, tmp_path / "ds", progress=False)
    got = deltacells.read_deltacells(tmp_path / "ds", cache_dir=tmp_path / "cache")
    assert isinstance(got.X, deltacells.TiledCSRDataset)  # the counts: the tiles, lazy
    manifest = deltacells.open_dataset(tmp_path / "ds").manifest
    entry = manifest.metadata["deltacells"]["anndata"]
    assert entry["counts"] == "X" and entry["zarr_format"] == 2
    assert set(entry["elements"]) == {
        "raw", "layers/counts", "layers/lognorm", "obsm/X_pca", "obsm/X_umap", "obsm/frame", "varm/PCs",
        "obsp/connectivities", "varp/correlations", "uns",
    }  # fmt: skip
    assert (tmp_path / "ds" / EXTRAS_NAME / ".zmetadata").exists()  # consolidated: opened in one read
    back = deltacells.read_deltacells(tmp_path / "ds", cache_dir=tmp_path / "cache", extras=False)
    assert set(back.uns) == set() and not back.obsm and back.raw is None  # what FORMAT.md alone gives


def test_sources(tmp_path: Path) -> None:
    """In memory, backed h5ad, zarr read lazily with anndata's read_lazy, a dask AnnData: the same dataset."""
    adata = full_anndata()
    del adata.obsm["frame"]  # read_lazy gives data frames of obsm as its lazy frames, not pandas
    adata.write_h5ad(tmp_path / "src.h5ad")
    adata.write_zarr(tmp_path / "src.zarr")
    dask_adata = adata.copy()
    dask_adata.X = da.from_array(adata.X.toarray(), chunks=(60, -1)).map_blocks(
        sparse.csr_matrix, meta=sparse.csr_matrix((0, 0), dtype=adata.X.dtype)
    )
    dask_adata.obsm["X_pca"] = da.from_array(adata.obsm["X_pca"], chunks=(50, -1))
    sources = {
        "memory": adata,
        "backed": ad.read_h5ad(tmp_path / "src.h5ad", backed="r"),
        "read_lazy": ad.experimental.read_lazy(tmp_path / "src.zarr"),
        "dask": dask_adata,
    }
    for name, source in sources.items():
        deltacells.write_deltacells(source, tmp_path / name, progress=False, tile_size=64)
        # read_lazy's strings are pandas' nullable ones (pd.NA), which the dataset keeps: compare with its own
        expected = ad.experimental.read_lazy(tmp_path / "src.zarr").to_memory() if name == "read_lazy" else adata
        assert_same(read_back(tmp_path / name, tmp_path / "cache"), expected)


def test_large_elements_are_lazy_and_subset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    adata = full_anndata()
    deltacells.write_deltacells(adata, tmp_path / "ds", progress=False, tile_size=64)
    monkeypatch.setattr(_extras, "IN_MEMORY_BYTES", 1000)  # everything but uns read lazily
    got = read_back(tmp_path / "ds", tmp_path / "cache")
    assert isinstance(got.obsm["X_pca"], da.Array) and isinstance(got.obsp["connectivities"], da.Array)
    assert isinstance(got.layers["lognorm"], da.Array) and isinstance(got.raw.X, da.Array)
    assert isinstance(got.uns["note"], str)
    cells = np.array([200, 3, 77, 4])
    subset = got[cells].to_memory()
    np.testing.assert_array_equal(subset.obsm["X_pca"], adata.obsm["X_pca"][cells])
    assert isinstance(subset.obsp["connectivities"], sparse.spmatrix | sparse.sparray)
    assert (subset.obsp["connectivities"] != adata.obsp["connectivities"][cells][:, cells]).nnz == 0
    assert_same(got, adata)


def test_lazy_atlas_with_an_embedding(atlas_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An atlas above the lazy-obs threshold with a cells x 50 embedding: lazy, and its rows subset right."""
    source = deltacells.read_deltacells(atlas_path, cache_dir=tmp_path / "cache", extras=False)
    n = source.n_obs
    embedding = np.arange(n * 8, dtype=np.float32).reshape(n, 8)
    source.obsm["X_scvi"] = da.from_array(embedding, chunks=(100_000, -1))
    deltacells.write_deltacells(source, tmp_path / "atlas", progress=False, tile_size=8192)
    monkeypatch.setattr(_extras, "IN_MEMORY_BYTES", 2**20)
    got = deltacells.read_deltacells(tmp_path / "atlas", cache_dir=tmp_path / "cache")
    assert isinstance(got.obsm["X_scvi"], da.Array)
    mask = got.obs["cell_type"] == "platelet"
    subset = got[mask][:500].to_memory()
    cells = np.flatnonzero(mask.to_numpy())[:500]
    np.testing.assert_array_equal(subset.obsm["X_scvi"], embedding[cells])


def test_an_element_anndata_cannot_write_is_named_before_any_tile(tmp_path: Path) -> None:
    adata = full_anndata()
    adata.uns["bad"] = object()
    with pytest.raises(TypeError, match=r"adata\.uns\['bad'\] cannot be stored.*extras=False") as info:
        deltacells.write_deltacells(adata, tmp_path / "ds", progress=False)
    assert "uns['bad']" in str(info.value)
    assert not (tmp_path / "ds").exists()
    deltacells.write_deltacells(adata, tmp_path / "ds", progress=False, extras=False)  # the counts, obs, var
    assert not (tmp_path / "ds" / EXTRAS_NAME).exists()


def test_overwrite_replaces_the_extras(tmp_path: Path) -> None:
    adata = full_anndata()
    deltacells.write_deltacells(adata, tmp_path / "ds", progress=False)
    plain = synthetic_counts(N_CELLS, N_GENES, seed=3)
    deltacells.write_deltacells(plain, tmp_path / "ds", progress=False, overwrite=True)
    assert not (tmp_path / "ds" / EXTRAS_NAME).exists()
    got = read_back(tmp_path / "ds", tmp_path / "cache")
    assert not got.obsm and not got.uns
    deltacells.write_deltacells(adata, tmp_path / "ds", progress=False, overwrite=True)
    assert_same(read_back(tmp_path / "ds", tmp_path / "cache2"), adata)


def test_a_round_trip_through_a_url(tmp_path: Path) -> None:
    import uuid

    import fsspec

    root = f"deltacells-extras-{uuid.uuid4().hex}"
    try:
        adata = full_anndata()
        deltacells.write_deltacells(adata, f"memory://{root}/ds", progress=False)
        assert_same(read_back(f"memory://{root}/ds", tmp_path / "cache"), adata)
    finally:
        fs = fsspec.filesystem("memory")
        if fs.exists(f"/{root}"):
            fs.rm(f"/{root}", recursive=True)


def test_validate_and_info(tmp_path: Path) -> None:
    from deltacells.cli import dataset_info
    from deltacells.validate import validate_dataset

    adata = full_anndata()
    path = tmp_path / "ds"
    deltacells.write_deltacells(adata, path, progress=False)
    assert validate_dataset(path).ok
    info = dataset_info(path)["anndata"]
    assert info["counts"] == "X"
    shapes = {e["path"]: e["shape"] for e in info["elements"]}
    assert shapes["obsm/X_pca"] == [N_CELLS, 5] and shapes["obsp/connectivities"] == [N_CELLS, N_CELLS]
    import shutil

    shutil.rmtree(path / EXTRAS_NAME / "obsm" / "X_pca")  # an element gone (the consolidated metadata stays)
    problems = [f"{p.object}: {p.message}" for p in validate_dataset(path).problems]
    assert any(p.startswith(f"{EXTRAS_NAME}/obsm/X_pca") for p in problems), problems
    shutil.rmtree(path / EXTRAS_NAME)
    problems = [f"{p.object}: {p.message}" for p in validate_dataset(path).problems]
    assert any(p.startswith(EXTRAS_NAME) for p in problems), problems


def test_a_wrong_shape_is_a_problem(tmp_path: Path) -> None:
    from deltacells.validate import validate_dataset

    adata = full_anndata()
    path = tmp_path / "ds"
    deltacells.write_deltacells(adata, path, progress=False)
    import zarr

    (path / EXTRAS_NAME / ".zmetadata").unlink()  # anndata edits no consolidated store
    group = zarr.open_group(str(path / EXTRAS_NAME), mode="a", zarr_format=2)
    ad.io.write_elem(group["obsm"], "X_pca", np.zeros((N_CELLS + 1, 5), dtype=np.float32))
    zarr.consolidate_metadata(str(path / EXTRAS_NAME), zarr_format=2)
    problems = [f"{p.object}: {p.message}" for p in validate_dataset(path).problems]
    assert any("obsm/X_pca: has shape (241, 5)" in p for p in problems), problems


def test_a_malformed_entry_is_a_format_error(tmp_path: Path) -> None:
    import json

    adata = full_anndata()
    path = tmp_path / "ds"
    deltacells.write_deltacells(adata, path, progress=False)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["metadata"]["deltacells"]["anndata"]["elements"].append("obsm/a/b")
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(FormatError, match="metadata.deltacells.anndata.elements"):
        deltacells.read_deltacells(path, cache_dir=tmp_path / "cache")
    assert deltacells.read_deltacells(path, cache_dir=tmp_path / "cache", extras=False).n_obs == N_CELLS


def test_the_scanpy_tutorial_on_real_data(shared_dir: Path, tmp_path: Path) -> None:
    """Visium CytAssist through scanpy's tutorial: QC, HVG, PCA, neighbours, UMAP, leiden, markers; all kept."""
    data = shared_dir / "data" / "visium-cytassist"
    if not (data / "matrix.mtx.gz").exists():
        pytest.skip(f"real data not found at {data}")
    sc = pytest.importorskip("scanpy")
    pytest.importorskip("igraph")
    adata = sc.read_10x_mtx(data)
    adata.var["mt"] = adata.var_names.str.startswith("MT-")
    sc.pp.calculate_qc_metrics(adata, qc_vars=["mt"], inplace=True)
    adata.layers["counts"] = adata.X.copy()
    sc.pp.normalize_total(adata)
    sc.pp.log1p(adata)
    adata.raw = adata  # all 19,465 genes, log-normalized
    sc.pp.highly_variable_genes(adata, n_top_genes=1000)
    adata = adata[:, adata.var["highly_variable"]].copy()
    sc.pp.pca(adata, n_comps=20)
    sc.pp.neighbors(adata)
    sc.tl.umap(adata, maxiter=30)
    sc.tl.leiden(adata, flavor="igraph", n_iterations=2, directed=False)
    sc.tl.rank_genes_groups(adata, "leiden", n_genes=5)
    deltacells.write_deltacells(adata, tmp_path / "ds", layer="counts", progress=False)
    got = read_back(tmp_path / "ds", tmp_path / "cache")
    assert isinstance(got.layers["counts"], deltacells.TiledCSRDataset)
    assert got.raw.shape == (adata.n_obs, 19_465) and got.n_vars == 1000
    assert_same(got, adata)
    cells = np.random.default_rng(0).choice(adata.n_obs, 50, replace=False)
    subset = got[cells].to_memory()
    np.testing.assert_array_equal(subset.obsm["X_umap"], adata.obsm["X_umap"][cells])
    assert (subset.obsp["connectivities"] != adata.obsp["connectivities"][cells][:, cells]).nnz == 0


def test_the_counts_in_a_layer_are_found_by_the_loader_and_read_obs(tmp_path: Path) -> None:
    adata = full_anndata()
    adata.X = adata.layers.pop("lognorm")
    deltacells.write_deltacells(adata, tmp_path / "ds", layer="counts", progress=False, tile_size=64)
    got = deltacells.read_deltacells(tmp_path / "ds", cache_dir=tmp_path / "cache")
    assert not isinstance(got.X, deltacells.TiledCSRDataset)  # X is the AnnData's own X, from anndata.zarr
    batches = list(deltacells.CellLoader(got[10:110], batch_size=50, shuffle=False))
    counts = sparse.vstack([b.X for b in batches])
    assert (counts != adata.layers["counts"][10:110].astype(np.float32)).nnz == 0
    frame = deltacells.read_obs(got, ["donor"])
    assert frame["donor"].tolist() == adata.obs["donor"].tolist()


# ---------------------------------------------------------------------- written in memory, stored in one pass
# The elements in memory go through a zarr group in memory, then every object is stored at once by the dataset's
# store (deltacells.io._zarr_batch); the others (dask arrays, elements past the budget) are written in place after
# them. Either way the group holds byte for byte what anndata's writer into a zarr group on the disk makes.


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _in_place(root: Path, elements: dict[str, Any]) -> None:
    """What ``write_extras`` wrote before it batched: anndata's writer into a zarr group on the disk, consolidated."""
    group = zarr.open_group(zarr.storage.LocalStore(root), mode="w", zarr_format=EXTRAS_FORMAT)
    for path, value in elements.items():
        mapping, _, key = path.rpartition("/")
        items = value.items() if path == "uns" else [(key, value)]
        mapping = "uns" if path == "uns" else mapping
        if mapping and mapping not in group:
            ad.io.write_elem(group, mapping, {})
        for name, item in items:
            ad.io.write_elem(group[mapping] if mapping else group, name, item)
    zarr.consolidate_metadata(zarr.storage.LocalStore(root), zarr_format=EXTRAS_FORMAT)


@pytest.mark.parametrize("budget", [None, 0, 20_000], ids=["all in memory", "all in place", "some of each"])
def test_the_objects_are_those_zarr_writes_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: int | None
) -> None:
    if budget is not None:
        monkeypatch.setattr(_zarr_batch, "BATCH_BYTES", budget)
    adata = full_anndata()
    counts, elements = collect_extras(adata, layer="counts", raw=False)
    stored = write_extras(open_store(tmp_path / "ds"), counts, elements)
    assert stored.elements == tuple(elements)
    _in_place(tmp_path / "reference", elements)
    got, expected = _files(tmp_path / "ds" / EXTRAS_NAME), _files(tmp_path / "reference")
    assert sorted(got) == sorted(expected)
    assert got == expected


@pytest.mark.parametrize("budget", [None, 20_000])
def test_round_trip_with_a_dask_element(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: int | None) -> None:
    if budget is not None:
        monkeypatch.setattr(_zarr_batch, "BATCH_BYTES", budget)
    adata = full_anndata()
    adata.obsm["X_dask"] = da.from_array(np.arange(adata.n_obs * 3, dtype=np.float64).reshape(-1, 3), chunks=(50, 3))
    deltacells.write_deltacells(adata, tmp_path / "ds", layer="counts", progress=False, tile_size=64)
    expected = adata.copy()
    expected.obsm["X_dask"] = adata.obsm["X_dask"].compute()
    assert_same(read_back(tmp_path / "ds", tmp_path / "cache"), expected)


def test_element_bytes() -> None:
    size = _zarr_batch.element_bytes
    assert size(np.zeros((10, 3))) == 240
    assert size(sparse.csr_matrix(np.eye(4, dtype=np.float32))) == 4 * 4 + 4 * 4 + 5 * 4  # int32 indices
    frame = pd.DataFrame({"a": np.zeros(5), "s": list("abcde")})
    assert size(frame) >= 5 * 8 + 5 * 8  # the numbers, and at least a pointer a string
    assert size({"x": np.zeros(2), "y": "text"}) == 16 + size("text")
    assert size(da.zeros(10)) is None  # not in memory
    assert size({"lazy": da.zeros(10)}) is None
    assert size(object()) is None  # unknown here: written in place


def test_the_budget_takes_elements_while_it_lasts() -> None:
    budget = _zarr_batch.BatchBudget(1000)
    assert budget.takes(np.zeros(100))  # 800 bytes
    assert not budget.takes(np.zeros(100))  # 800 more: past the budget
    assert budget.takes(np.zeros(10))  # 80: still fits
    assert not budget.takes(da.zeros(2))  # unknown size: never


class _FailingStore(FsspecStore):
    """A local store whose writes of one object fail, written all at once (as an object store's are)."""

    write_many = BaseStore.write_many

    def submit_write(self, path: str, data: bytes) -> Future[None]:
        if path.endswith("obsm/X_pca/.zarray"):
            future: Future[None] = Future()
            future.set_exception(OSError(f"cannot write {path}"))
            return future
        return super().submit_write(path, data)


def test_a_failed_write_is_raised_and_no_manifest_is_written(tmp_path: Path) -> None:
    adata = full_anndata()
    counts, elements = collect_extras(adata, layer="counts", raw=False)
    with pytest.raises(OSError, match=r"obsm/X_pca/\.zarray"):
        write_extras(_FailingStore(tmp_path / "ds"), counts, elements)
    store = _FailingStore(tmp_path / "whole")
    with pytest.raises(OSError, match=r"obsm/X_pca/\.zarray"):
        deltacells.write_deltacells(adata, store, layer="counts", progress=False)
    assert not (tmp_path / "whole" / "manifest.json").exists()


def test_a_failed_file_write_is_raised(tmp_path: Path) -> None:
    counts, elements = collect_extras(full_anndata(), layer="counts", raw=False)
    blocked = tmp_path / "ds" / EXTRAS_NAME / "obsm" / "X_pca"
    blocked.parent.mkdir(parents=True)
    blocked.write_bytes(b"a file where the array's folder goes")
    with pytest.raises(OSError, match=r"obsm/X_pca"):
        write_extras(open_store(tmp_path / "ds"), counts, elements)
