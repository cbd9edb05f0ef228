"""Exactly what anndata gives (issue 41, items 1, 4, 5, 9, 10), with anndata as the oracle.

- a round trip with the defaults passes anndata's ``assert_equal`` against the AnnData written, ``uns`` included,
  for counts in X, in a layer and in raw, in each dtype counts come in (item 5: X's dtype is the one written);
- nothing of deltacells' bookkeeping reaches the AnnData (no ``uns["deltacells"]``, no local path in an h5ad
  written from one; item 4);
- ``__sizeof__(with_disk=True)`` counts X as anndata counts a backed X (item 9, anndata's ``test_backed_sizeof``);
- a data frame in obsm with a lazy obs reads as anndata's ``read_lazy`` gives it (item 1);
- a view over a mask reads no name, and its names are those of anndata's ``read_lazy`` of the same data (item 10).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
from anndata.experimental.backed import Dataset2D
from anndata.tests.helpers import assert_equal
from scipy import sparse

import deltacells
from deltacells.errors import FormatError, InvalidValueError
from deltacells.validate import validate_dataset

N_CELLS, N_GENES = 120, 30

#: The dtypes counts come in, each read back as it was written.
COUNT_DTYPES = ["int32", "int64", "float32", "float64", "uint16"]


def counts(
    dtype: Any = np.int32, *, n_cells: int = N_CELLS, n_genes: int = N_GENES, seed: int = 0
) -> sparse.csr_matrix:
    rng = np.random.default_rng(seed)
    dense = rng.poisson(0.6, (n_cells, n_genes)) * (rng.random((n_cells, n_genes)) < 0.5)
    return sparse.csr_matrix(dense.astype(dtype))


def annotated(X: Any, *, seed: int = 0) -> ad.AnnData:
    """An AnnData holding every kind of element, ``X`` its counts (a categorical obs, an obsm frame, nested uns)."""
    rng = np.random.default_rng(seed)
    n_cells, n_genes = X.shape
    obs = pd.DataFrame(
        {
            "cell_type": pd.Categorical(rng.choice(["B", "T", "NK"], n_cells), categories=["B", "NK", "T"]),
            "score": rng.random(n_cells),
        },
        index=[f"cell_{i:04d}" for i in range(n_cells)],
    )
    var = pd.DataFrame(
        {"gene_ids": [f"ENSG{i:05d}" for i in range(n_genes)]}, index=[f"gene_{i}" for i in range(n_genes)]
    )
    adata = ad.AnnData(X=X, obs=obs, var=var)
    adata.obsm["X_pca"] = rng.random((n_cells, 4)).astype(np.float32)
    adata.obsm["frame"] = pd.DataFrame(
        {"u": rng.random(n_cells), "k": pd.Categorical(rng.choice(["x", "y"], n_cells))}, index=adata.obs_names
    )
    adata.varm["loadings"] = rng.random((n_genes, 3))
    adata.obsp["distances"] = sparse.random(n_cells, n_cells, density=0.05, format="csr", random_state=seed)
    adata.uns["cell_type_colors"] = np.array(["#aa0000", "#00aa00", "#0000aa"])
    adata.uns["params"] = {"method": "wilcoxon", "n": 3, "nested": {"ok": True}}
    adata.uns["note"] = "kept as written"
    return adata


def written(tmp_path: Path, adata: ad.AnnData, name: str = "data.deltacells", **options: Any) -> Path:
    path = tmp_path / name
    deltacells.write_deltacells(adata, path, progress=False, tile_size=32, **options)
    return path


def assert_same_anndata(got: ad.AnnData, expected: ad.AnnData) -> None:
    """anndata's ``assert_equal`` on the whole AnnData, the dtypes of every matrix of counts, and uns's keys."""
    assert_equal(got, expected)
    assert sorted(got.uns) == sorted(expected.uns)  # nothing added (in anndata's order: its readers sort the keys)
    assert got.X is None or got.X.dtype == expected.X.dtype
    for key in [k for k in expected.layers if k is not None]:
        assert got.layers[key].dtype == expected.layers[key].dtype, key
    if expected.raw is not None:
        assert got.raw.X.dtype == expected.raw.X.dtype


# ---------------------------------------------------------------------- round trips (items 4 and 5)


@pytest.mark.parametrize("dtype", COUNT_DTYPES)
def test_counts_in_x_come_back_as_written(tmp_path: Path, dtype: str) -> None:
    source = annotated(counts(dtype))
    got = deltacells.read_deltacells(written(tmp_path, source), cache_dir=tmp_path / "cache")
    assert got.X.dtype == np.dtype(dtype)
    assert_same_anndata(got.to_memory(), source)
    assert_equal(got, source)  # the lazy AnnData itself (anndata's helpers compare a lazy X by its values)


@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_counts_in_a_layer_come_back_as_written(tmp_path: Path, dtype: str) -> None:
    source = annotated(counts(dtype))
    source.layers["counts"] = source.X
    source.X = sparse.csr_matrix(np.log1p(source.X.toarray().astype(np.float64)))
    got = deltacells.read_deltacells(written(tmp_path, source, layer="counts"), cache_dir=tmp_path / "cache")
    assert isinstance(got.layers["counts"], deltacells.TiledCSRDataset)
    assert got.layers["counts"].dtype == np.dtype(dtype)
    assert_same_anndata(got.to_memory(), source)


@pytest.mark.parametrize("dtype", ["int64", "float64"])
def test_counts_in_raw_come_back_as_written(tmp_path: Path, dtype: str) -> None:
    full = annotated(counts(dtype, n_genes=N_GENES + 10))
    source = full[:, :N_GENES].copy()
    source.raw = full
    source.X = sparse.csr_matrix(np.log1p(source.X.toarray().astype(np.float32)))
    path = written(tmp_path, source, raw=True)
    got = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache")
    assert got.raw.X.dtype == np.dtype(dtype)
    assert_same_anndata(got.to_memory(), source)  # raw's varm too (beside the tiles: raw/varm/<key>)
    assert not validate_dataset(path).problems
    stored = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache", gene_order="stored")
    order = stored.raw.X.dataset.gene_permutation()
    np.testing.assert_array_equal(stored.raw.varm["loadings"], full.varm["loadings"][order])  # in the tiles' order


@pytest.mark.parametrize("chunks", ["tiles", 64])
def test_a_dask_x_and_the_dataset_read_in_the_dtype_written(tmp_path: Path, chunks: Any) -> None:
    source = annotated(counts(np.uint16))
    path = written(tmp_path, source)
    got = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache", chunks=chunks)
    assert got.X.dtype == np.uint16
    assert got.X.compute().dtype == np.uint16
    assert_same_anndata(got.to_memory(), source)
    dataset = deltacells.open_dataset(path)
    assert dataset.dtype == np.uint16 and dataset.read_rows(slice(3, 40)).dtype == np.uint16
    assert dataset.read_rows([5, 1, 1]).dtype == np.uint16


def test_dtype_overrides_the_written_one(tmp_path: Path) -> None:
    source = annotated(counts(np.int32))
    path = written(tmp_path, source)
    for dtype in ("float32", "float64", "int64"):
        got = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache", dtype=dtype)
        assert got.X.dtype == np.dtype(dtype) and got.to_memory().X.dtype == np.dtype(dtype)
        assert (got.X.to_memory() != source.X).nnz == 0
    with pytest.raises(TypeError, match="dtype must be one of"):
        deltacells.read_deltacells(path, cache_dir=tmp_path / "cache", dtype="uint16")


def test_a_dataset_that_records_no_dtype_reads_as_float32(tmp_path: Path) -> None:
    source = annotated(counts(np.int32))
    path = written(tmp_path, source)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["metadata"]["deltacells"]["dtype"] == "int32"
    del manifest["metadata"]["deltacells"]["dtype"]  # as datasets written before the dtype was recorded
    (path / "manifest.json").write_text(json.dumps(manifest))
    got = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache")
    assert got.X.dtype == np.float32 and deltacells.open_dataset(path).dtype == np.float32


def test_a_malformed_recorded_dtype_is_a_format_error(tmp_path: Path) -> None:
    path = written(tmp_path, annotated(counts()))
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["metadata"]["deltacells"]["dtype"] = "complex64"
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(FormatError, match=r"manifest.json: .*metadata.deltacells.dtype is 'complex64'"):
        deltacells.open_dataset(path)
    report = validate_dataset(path)
    assert any("metadata.deltacells.dtype" in str(problem) for problem in report.problems)


def test_float16_counts_are_recorded_as_float32(tmp_path: Path) -> None:
    X = counts(np.float32).toarray().astype(np.float16)  # dense: scipy's sparse matrices have no float16
    source = ad.AnnData(X=X)
    path = written(tmp_path, source)
    got = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache")
    assert got.X.dtype == np.float32
    np.testing.assert_array_equal(got.X.to_memory().toarray(), X.astype(np.float32))


def test_counts_above_2_24_warn_once_as_float32_only(tmp_path: Path) -> None:
    X = counts(np.int32)
    X.data[0] = 2**24 + 1
    path = written(tmp_path, ad.AnnData(X=X))
    exact = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache")
    assert exact.X.to_memory().data[0] == 2**24 + 1  # int32, as written: exact, no warning
    rounded = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache", dtype="float32")
    with pytest.warns(UserWarning, match="above 2\\^24"):
        rounded.X.to_memory()


def test_an_append_keeps_the_dtype_and_refuses_counts_it_cannot_hold(tmp_path: Path) -> None:
    first = annotated(counts(np.uint16))
    path = written(tmp_path, first, extras=False)
    second = annotated(counts(np.int64, seed=1), seed=1)
    second.obs_names = [f"new_{i}" for i in range(N_CELLS)]
    deltacells.write_deltacells(second, path, append=True, extras=False, progress=False)
    got = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache")
    assert got.X.dtype == np.uint16 and got.n_obs == 2 * N_CELLS
    assert (got.X.to_memory() != sparse.vstack([first.X, second.X])).nnz == 0
    large = annotated(counts(np.int64, seed=2), seed=2)
    large.X.data[-1] = 70_000
    large.obs_names = [f"large_{i}" for i in range(N_CELLS)]
    with pytest.raises(InvalidValueError, match="include 70000, which uint16 cannot hold"):
        deltacells.write_deltacells(large, path, append=True, extras=False, progress=False)
    assert deltacells.read_deltacells(path, cache_dir=tmp_path / "cache2").n_obs == 2 * N_CELLS  # unchanged


def test_a_collection_reads_in_the_dtype_anndata_concat_gives(tmp_path: Path) -> None:
    sources = [annotated(counts(dtype, seed=k), seed=k) for k, dtype in enumerate(["int32", "float32", "uint16"])]
    for k, source in enumerate(sources):
        source.obs_names = [f"d{k}_{i}" for i in range(N_CELLS)]
    paths = [written(tmp_path, source, name=f"d{k}.deltacells") for k, source in enumerate(sources)]
    expected = ad.concat(sources)
    got = deltacells.read_deltacells(paths, cache_dir=tmp_path / "cache")
    assert got.X.dtype == expected.X.dtype == np.float64
    assert (got.X.to_memory() != expected.X).nnz == 0
    two = deltacells.read_deltacells(paths[::2], cache_dir=tmp_path / "cache")
    assert two.X.dtype == ad.concat(sources[::2]).X.dtype == np.int32


# ---------------------------------------------------------------------- no bookkeeping (item 4)


def test_nothing_of_deltacells_is_added_to_uns(tmp_path: Path) -> None:
    source = annotated(counts())
    path = written(tmp_path, source)
    for options in ({}, {"chunks": "tiles"}, {"lazy_obs": True}, {"gene_order": "stored"}, {"extras": False}):
        got = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache", **options)
        assert "deltacells" not in got.uns, options
        assert sorted(got.uns) == ([] if options.get("extras") is False else sorted(source.uns)), options
    collection = deltacells.read_deltacells(
        [path, path], keys=["a", "b"], index_unique="-", cache_dir=tmp_path / "cache"
    )
    assert dict(collection.uns) == {}


def test_an_h5ad_written_from_a_read_anndata_has_no_local_path(tmp_path: Path) -> None:
    source = annotated(counts())
    path = written(tmp_path, source)
    cache = tmp_path / "obs-cache-somewhere"
    got = deltacells.read_deltacells(path, cache_dir=cache)
    got.write_h5ad(tmp_path / "out.h5ad")
    got[got.obs["cell_type"] == "B"].to_memory().write_h5ad(tmp_path / "subset.h5ad")
    for name in ("out.h5ad", "subset.h5ad"):
        data = (tmp_path / name).read_bytes()
        assert str(path).encode() not in data and str(cache).encode() not in data, name
    back = ad.read_h5ad(tmp_path / "out.h5ad")
    assert_same_anndata(back, source)


def test_the_bookkeeping_of_older_versions_is_dropped_a_users_own_key_kept(tmp_path: Path) -> None:
    source = annotated(counts())
    old = source.copy()
    old.uns["deltacells"] = {"url": "data/someone.deltacells", "format_version": 2, "cache_dir": "cache/c"}
    got = deltacells.read_deltacells(written(tmp_path, old, name="old.deltacells"), cache_dir=tmp_path / "cache")
    assert_same_anndata(got.to_memory(), source)  # written without it
    mine = source.copy()
    mine.uns["deltacells"] = {"my": "own"}
    got = deltacells.read_deltacells(written(tmp_path, mine, name="mine.deltacells"), cache_dir=tmp_path / "cache")
    assert_same_anndata(got.to_memory(), mine)


def test_read_obs_and_the_loader_find_what_the_read_was_given(tmp_path: Path) -> None:
    source = annotated(counts())
    path = written(tmp_path, source)
    cache = tmp_path / "cache"
    got = deltacells.read_deltacells(path, cache_dir=cache, obs_columns=[])
    for adata in (got, got[::2], got.copy()):  # views and copies keep the X that knows it
        frame = deltacells.read_obs(adata, ["score"])
        np.testing.assert_array_equal(frame["score"], source.obs["score"].to_numpy()[:: 2 if adata.is_view else 1])
    dask = deltacells.read_deltacells(path, cache_dir=cache, chunks="tiles", obs_columns=[])
    assert deltacells.read_obs(dask, ["cell_type"])["cell_type"].tolist() == source.obs["cell_type"].tolist()
    batches = list(deltacells.CellLoader(got, batch_size=50, shuffle=False, obs_columns=["cell_type"]))
    codes = [int(value) for batch in batches for value in batch.obs["cell_type"]]  # a categorical's codes
    assert codes == source.obs["cell_type"].cat.codes.tolist()


def test_restore_gene_order_without_uns(tmp_path: Path) -> None:
    source = annotated(counts(np.int32))
    path = written(tmp_path, source)
    stored = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache", gene_order="stored")
    order = stored.X.dataset.gene_permutation()
    assert list(stored.var_names) == list(source.var_names[order])
    restored = deltacells.restore_gene_order(stored)
    assert_same_anndata(restored.to_memory(), source)
    assert deltacells.restore_gene_order(restored) is restored  # in the original order now
    memory = stored.to_memory()
    assert deltacells.restore_gene_order(memory) is memory  # in memory: nothing says which order it is in
    assert_same_anndata(deltacells.restore_gene_order(memory, gene_order=order), source)


# ---------------------------------------------------------------------- sizeof (item 9)


@pytest.mark.parametrize("dtype", ["int32", "float64"])
def test_sizeof_with_disk_is_the_size_in_memory(tmp_path: Path, dtype: str) -> None:
    """anndata's ``test_backed_sizeof``: an AnnData's size with its data on disk is its size in memory."""
    source = ad.AnnData(X=counts(dtype), obs=annotated(counts()).obs)
    got = deltacells.read_deltacells(written(tmp_path, source), cache_dir=tmp_path / "cache")

    def frames(adata: ad.AnnData) -> int:  # pandas 3 counts an Arrow string column's buffers, as it was built
        return adata.obs.__sizeof__() + adata.var.__sizeof__()

    assert source.__sizeof__() - frames(source) == got.__sizeof__(with_disk=True) - frames(got)
    assert source.__sizeof__() > got.__sizeof__()
    memory = got.X.to_memory()
    arrays = memory.data.nbytes + memory.indices.nbytes + memory.indptr.nbytes
    assert got.__sizeof__(with_disk=True) - got.__sizeof__() == arrays - object.__sizeof__(got.X)


# ---------------------------------------------------------------------- obsm frames with a lazy obs (item 1)


def test_an_obsm_frame_with_a_lazy_obs_is_read_lazy_s(tmp_path: Path) -> None:
    source = annotated(counts())
    path = written(tmp_path, source)
    source.write_h5ad(tmp_path / "same.h5ad")
    reference = ad.experimental.read_lazy(tmp_path / "same.h5ad")
    got = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache", lazy_obs=True)
    assert isinstance(got.obsm["frame"], Dataset2D) and isinstance(reference.obsm["frame"], Dataset2D)
    assert_same_anndata(got.to_memory(), source)
    mask = (source.obs["cell_type"] == "NK").to_numpy()
    for cells in (mask, np.array([7, 3, 99]), slice(10, 50)):
        view, expected = got[cells], reference[cells]
        assert_equal(view.obsm["frame"].to_memory(), expected.obsm["frame"].to_memory())
        # the rest as anndata's views of an in-memory AnnData (their unused categories and colours dropped)
        assert_same_anndata(view.to_memory(), source[cells].copy())


@pytest.mark.parametrize("lazy_obs", [False, True])
def test_obsm_frames_take_the_names_the_cells_get(tmp_path: Path, lazy_obs: bool) -> None:
    source = annotated(counts())
    got = deltacells.read_deltacells(
        written(tmp_path, source), cache_dir=tmp_path / "cache", lazy_obs=lazy_obs, obs_names=False
    )
    memory = got[[4, 2]].to_memory()
    assert list(memory.obs_names) == list(memory.obsm["frame"].index) == ["4", "2"]
    np.testing.assert_array_equal(memory.obsm["frame"]["u"], source.obsm["frame"]["u"].to_numpy()[[4, 2]])


# ---------------------------------------------------------------------- a view's names (item 10)


def test_a_view_reads_no_name_until_asked_and_gives_read_lazy_s(tmp_path: Path) -> None:
    source = annotated(counts())
    path = written(tmp_path, source)
    source.write_zarr(tmp_path / "same.zarr")
    reference = ad.experimental.read_lazy(tmp_path / "same.zarr")
    cache = tmp_path / "cache"
    got = deltacells.read_deltacells(path, cache_dir=cache, lazy_obs=True, obs_columns=["cell_type"])
    view = got[got.obs["cell_type"].isin(["B", "NK"])]  # uns has the column's colours, which the view cuts
    assert "_index.arrow" not in {p.name for p in cache.rglob("*.arrow")}  # making the view read no name
    assert list(view.uns["cell_type_colors"]) == ["#aa0000", "#00aa00"]
    expected = reference[np.asarray(reference.obs["cell_type"].isin(["B", "NK"]))]
    assert list(view.obs_names) == list(expected.obs_names)  # the stored names, read for the view's cells
    assert view.obs_names.dtype == ad.read_zarr(tmp_path / "same.zarr").obs_names.dtype
