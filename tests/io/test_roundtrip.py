"""write_deltacells -> read_deltacells for many kinds of AnnData: X, obs, var and uns come back as they went in."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
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
from deltacells.errors import DeltaCellsWarning
from deltacells.io import TiledCSRDataset

#: Reading with genes as stored (the tests below check the stored order; test_gene_order.py the default).
read_stored = partial(deltacells.read_deltacells, gene_order="stored")


def _check_full(
    got: ad.AnnData,
    path: Path,
    source_X: Any,
    source_obs: pd.DataFrame,
    source_var: pd.DataFrame,
    assert_X_equal: Callable[..., None],
    assert_obs_equal: Callable[..., None],
) -> np.ndarray:
    """The common checks of a reordered round trip; returns the gene order."""
    assert isinstance(got.X, TiledCSRDataset)
    src = sparse.csr_matrix(source_X) if sparse.issparse(source_X) else sparse.csr_matrix(np.asarray(source_X))
    totals = np.asarray(src.sum(axis=0), dtype=np.float64).ravel()
    order = np.asarray(got.X.dataset.gene_permutation())
    # DECISIONS 10: decreasing totals, ties in their original order.
    np.testing.assert_array_equal(order, np.argsort(-totals, kind="stable"))
    assert_X_equal(got.X, src[:, order])
    assert_obs_equal(got.obs, source_obs)
    pd.testing.assert_frame_equal(got.var, source_var.iloc[order], check_index_type=False)
    restored = deltacells.restore_gene_order(got)
    assert_X_equal(restored.X, src)
    pd.testing.assert_frame_equal(restored.var, source_var, check_index_type=False)
    assert_obs_equal(restored.obs, source_obs)  # categories (unused ones too), their order and `ordered` kept
    # The default read gives back what was written, with no extra call (DECISIONS.md 13).
    # extras=False: X is the tiles' matrix also where the counts came from a layer or raw (tests/io/test_extras.py)
    default = deltacells.read_deltacells(
        path, cache_dir=Path(deltacells.io.read_options_of(got.X).cache_dir), extras=False
    )
    assert default.X.dataset.gene_order == "original"
    assert_X_equal(default.X, src)
    assert_obs_equal(default.obs, source_obs)
    pd.testing.assert_frame_equal(default.var, source_var, check_index_type=False)
    assert deltacells.restore_gene_order(default) is default
    cells = np.random.default_rng(1).permutation(src.shape[0])[: max(1, src.shape[0] // 3)]
    assert_X_equal(default[cells].X, src[cells])
    manifest = deltacells.open_dataset(path).manifest
    assert manifest.n_cells == src.shape[0] and manifest.n_genes == src.shape[1]
    assert manifest.nnz == canonical_nnz(src)
    return order


def canonical_nnz(matrix: sparse.spmatrix) -> int:
    m = sparse.csr_matrix(matrix, copy=True)
    m.sum_duplicates()
    m.eliminate_zeros()
    return int(m.nnz)


# ---------------------------------------------------------------------- synthetic data, several sizes


@pytest.mark.parametrize(
    ("n_cells", "n_genes", "tile_size"),
    [(1, 7, 2048), (300, 80, 64), (1025, 120, 256), (2500, 200, 2048)],
    ids=["1-cell", "5-tiles", "last-tile-1-cell", "2-tiles-default-size"],
)
def test_synthetic_counts(roundtrip, assert_X_equal, assert_obs_equal, n_cells, n_genes, tile_size):
    src = synthetic_counts(n_cells, n_genes, seed=n_cells)
    got, path = roundtrip(src, tile_size=tile_size)
    assert got.shape == src.shape
    _check_full(got, path, src.X, src.obs, src.var, assert_X_equal, assert_obs_equal)
    manifest = deltacells.open_dataset(path).manifest
    expected_tiles = [tile_size] * (n_cells // tile_size) + ([n_cells % tile_size] if n_cells % tile_size else [])
    assert manifest.tile_cells.tolist() == expected_tiles


def test_settings_are_on_the_dataset_not_in_uns(roundtrip, small_adata, cache_dir):
    got, path = roundtrip(small_adata, tile_size=64, n_chunks=3, level=5, metadata={"source": "test", "n": 3})
    dataset = got.X.dataset
    manifest = deltacells.open_dataset(path).manifest
    assert dataset.url.rstrip("/").endswith(path.name)
    assert dataset.n_tiles == manifest.n_tiles == math.ceil(300 / 64)
    assert dataset.manifest.tile_size == 64 and dataset.manifest.n_chunks == 3 and dataset.manifest.zstd_level == 5
    user_metadata = {k: v for k, v in dataset.manifest.metadata.items() if k != "deltacells"}
    assert user_metadata == {"source": "test", "n": 3}
    # the writer's own: the counts' dtype, and its word that the obs names are unique
    assert dataset.manifest.metadata["deltacells"] == {"dtype": str(small_adata.X.dtype), "obs_names_unique": True}
    assert deltacells.io.read_options_of(got.X).cache_dir == str(cache_dir)
    assert len(dataset.manifest.obs_fingerprint) == 24
    stored = np.load(path / "gene_order.npy")
    assert stored.dtype == np.dtype("<i4")
    np.testing.assert_array_equal(dataset.gene_permutation(), stored)
    assert dict(got.uns) == dict(small_adata.uns)  # nothing added


def test_keep_gene_order(roundtrip, small_adata, assert_X_equal, assert_obs_equal):
    got, path = roundtrip(small_adata, reorder_genes=False)
    assert got.X.dataset.gene_permutation() is None
    assert not (path / "gene_order.npy").exists()
    assert not deltacells.open_dataset(path).manifest.has_gene_order
    assert_X_equal(got.X, small_adata.X)
    assert_obs_equal(got.obs, small_adata.obs)
    pd.testing.assert_frame_equal(got.var, small_adata.var, check_index_type=False)
    assert (path / "var_names.txt").read_text().splitlines() == list(small_adata.var_names)
    assert deltacells.restore_gene_order(got) is got  # nothing to restore: not an error


def test_restore_gene_order_of_cell_subset(roundtrip, small_adata, assert_X_equal):
    got, _ = roundtrip(small_adata, tile_size=64)
    cells = np.array([250, 3, 77, 130])
    restored = deltacells.restore_gene_order(got[cells])
    assert list(restored.var_names) == list(small_adata.var_names)
    assert_X_equal(restored.X, small_adata.X[cells], sorted_indices=False)
    with pytest.raises(ValueError, match="subset by genes"):
        deltacells.restore_gene_order(got[:, :10])


def test_ties_keep_their_order(roundtrip, assert_X_equal):
    # Every gene has the same total: the stable sort must keep the input order.
    X = sparse.csr_matrix(np.array([[1, 2, 0, 3], [2, 1, 3, 0]], dtype=np.int32))
    src = ad.AnnData(X=X, var=pd.DataFrame(index=["d", "c", "b", "a"]))
    got, _ = roundtrip(src)
    np.testing.assert_array_equal(got.X.dataset.gene_permutation(), [0, 1, 2, 3])
    assert list(got.var_names) == ["d", "c", "b", "a"]
    assert_X_equal(got.X, X)


# ---------------------------------------------------------------------- obs dtypes


def _rich_obs(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    with_na = rng.random(n) < 0.2
    return pd.DataFrame(
        {
            "cat_str": pd.Categorical(np.where(with_na, None, rng.choice(["b", "a", "c"], n))),
            "cat_ordered": pd.Categorical(
                rng.choice(["low", "mid", "high"], n), categories=["low", "mid", "high"], ordered=True
            ),
            "cat_int": pd.Categorical(rng.choice([30, 10, 20], n)),
            "cat_int8": pd.Categorical(rng.choice([3, 1, 2], n).astype(np.int8)),
            "cat_float": pd.Categorical(rng.choice([0.5, 1.5, 2.25], n)),
            "cat_bool": pd.Categorical(rng.choice([True, False], n)),
            "cat_unused": pd.Categorical(["x"] * n, categories=["y", "x", "z"]),
            "cat_empty": pd.Categorical([None] * n, categories=pd.Index([], dtype=object)),
            "int8": rng.integers(-100, 100, n).astype(np.int8),
            "uint32": rng.integers(0, 2**32 - 1, n, dtype=np.uint64).astype(np.uint32),
            "int64": rng.integers(-(2**62), 2**62, n),
            "float16": rng.random(n).astype(np.float16),
            "float32": rng.random(n).astype(np.float32),
            "float64": np.where(with_na, np.nan, rng.normal(size=n)),
            "Int64": pd.array(np.where(with_na, None, rng.integers(0, 9, n)), dtype="Int64"),
            "UInt8": pd.array(np.where(with_na, None, rng.integers(0, 255, n)), dtype="UInt8"),
            "Float32": pd.array(np.where(with_na, None, rng.random(n)), dtype="Float32"),
            "bool": rng.random(n) < 0.5,
            "boolean": pd.array(np.where(with_na, None, rng.random(n) < 0.5), dtype="boolean"),
            "text": np.where(with_na, None, rng.choice(["\u03b1\u03b2", "beta", ""], n)).astype(object),
            "string": pd.array(np.where(with_na, None, rng.choice(["x", "yy"], n)), dtype="string"),
        },
        index=pd.Index([f"cell-{i}" for i in range(n)], name="barcode"),
    )


def test_obs_dtypes(roundtrip, assert_X_equal, assert_obs_equal, make_counts):
    n = 90
    obs = _rich_obs(n)
    src = ad.AnnData(X=make_counts(n, 12, seed=1), obs=obs)
    got, path = roundtrip(src, tile_size=16, obs_tiles_per_file=2)
    assert_obs_equal(got.obs, src.obs)
    assert got.obs["cat_ordered"].cat.ordered
    assert got.obs["cat_int8"].cat.categories.dtype == np.int8
    assert got.obs["cat_str"].isna().sum() == obs["cat_str"].isna().sum() > 0
    assert list(got.obs["cat_unused"].cat.categories) == ["y", "x", "z"]
    assert len(list((path / "obs").glob("obs_*.parquet"))) == math.ceil(math.ceil(n / 16) / 2)
    assert_X_equal(restore_X(got), src.X, sorted_indices=False)


def test_obs_index_name(roundtrip, small_adata):
    src = small_adata.copy()
    src.obs.index.name = "barcode"
    got, _ = roundtrip(src)
    assert got.obs.index.name == "barcode"


def restore_X(adata: ad.AnnData) -> Any:
    return deltacells.restore_gene_order(adata).X


def test_obs_from_anndata_generator(roundtrip, assert_obs_equal, assert_X_equal, make_counts):
    """anndata's own random obs/var columns (``gen_typed_df``, what ``gen_adata`` uses)."""
    from anndata.tests.helpers import gen_typed_df

    n_cells, n_genes = 120, 25
    obs = gen_typed_df(n_cells, pd.Index([f"cell{i}" for i in range(n_cells)]))
    var = gen_typed_df(n_genes, pd.Index([f"gene{i}" for i in range(n_genes)]))
    X = make_counts(n_cells, n_genes, seed=4)
    src = ad.AnnData(X=X, obs=obs, var=var)
    got, path = roundtrip(src, tile_size=32)
    _check_full(got, path, X, src.obs, src.var, assert_X_equal, assert_obs_equal)


@pytest.mark.filterwarnings("ignore:The inplace keyword in DataFrame.rename is deprecated")  # anndata's gen_adata
def test_gen_adata(roundtrip, assert_obs_equal, assert_X_equal, make_counts, monkeypatch):
    """``anndata.tests.helpers.gen_adata`` with integer counts as X: obs, var and X here (the rest: test_extras)."""
    pytest.importorskip("dask", reason="gen_adata needs dask")
    from anndata.tests import helpers

    if not _has_module("awkward"):
        # gen_adata always builds awkward arrays for obsm/varm/uns; stand in plain arrays (filtered out below).
        monkeypatch.setattr(helpers, "gen_awkward", lambda shape, dtype=np.int32: np.zeros([s or 2 for s in shape]))
    src = helpers.gen_adata(
        (80, 30),
        obsm_types=(np.ndarray,),
        varm_types=(np.ndarray,),
        layers_types=(np.ndarray,),
        random_state=np.random.default_rng(0),
    )
    src.X = make_counts(80, 30, seed=2)
    got, path = roundtrip(src, tile_size=16)
    _check_full(got, path, src.X, src.obs, src.var, assert_X_equal, assert_obs_equal)


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def test_obs_columns_on_write(roundtrip, small_adata, assert_obs_equal):
    src = small_adata.copy()
    src.obs["when"] = pd.Timestamp("2024-01-01")  # not storable: left out with obs_columns=
    got, _ = roundtrip(src, obs_columns=["donor", "total_counts"])
    assert list(got.obs.columns) == ["donor", "total_counts"]
    assert_obs_equal(got.obs, src.obs[["donor", "total_counts"]])
    got, _ = roundtrip(src, obs_columns=[])
    assert list(got.obs.columns) == []
    assert list(got.obs_names) == list(src.obs_names)


# ---------------------------------------------------------------------- every kind of source


@dataclass
class Case:
    """A source AnnData and what reading back must give (in the source's gene order)."""

    adata: ad.AnnData
    X: Any
    obs: pd.DataFrame
    var: pd.DataFrame
    options: dict[str, Any]
    read: dict[str, Any] | None = None  # options of read_deltacells (extras=False: X is the tiles' matrix)
    cleanup: Callable[[], None] | None = None


def _base() -> ad.AnnData:
    return synthetic_counts(300, 50, seed=5)


def _in_memory(convert: Callable[[sparse.csr_matrix], Any]) -> Callable[[Path], Case]:
    def build(tmp: Path) -> Case:
        base = _base()
        X = convert(base.X)
        adata = ad.AnnData(X=X, obs=base.obs, var=base.var)
        return Case(adata, X, base.obs, base.var, {})

    return build


def _backed(fmt: str) -> Callable[[Path], Case]:
    def build(tmp: Path) -> Case:
        base = _base()
        on_disk = base.copy()
        on_disk.X = sparse.csr_matrix(base.X) if fmt == "csr" else sparse.csc_matrix(base.X)
        on_disk.write_h5ad(tmp / "src.h5ad")
        backed = ad.read_h5ad(tmp / "src.h5ad", backed="r")
        assert backed.isbacked and backed.X.format == fmt
        return Case(backed, base.X, base.obs, base.var, {}, cleanup=backed.file.close)

    return build


def _backed_view(tmp: Path) -> Case:
    base = _base()
    base.X = sparse.csc_matrix(base.X)
    base.write_h5ad(tmp / "src.h5ad")
    backed = ad.read_h5ad(tmp / "src.h5ad", backed="r")
    rows = np.random.default_rng(3).permutation(300)[:120]  # random order: read sorted, then reordered
    view = backed[rows]
    return Case(view, base.X[rows], pd.DataFrame(view.obs), base.var, {}, cleanup=backed.file.close)


def _zarr(tmp: Path) -> Case:
    base = _base()
    base.write_zarr(tmp / "src.zarr")
    return Case(ad.read_zarr(tmp / "src.zarr"), base.X, base.obs, base.var, {})


def _dask(sparse_chunks: bool) -> Callable[[Path], Case]:
    def build(tmp: Path) -> Case:
        da = pytest.importorskip("dask.array")
        base = _base()
        X = da.from_array(base.X.toarray(), chunks=(37, -1))
        if sparse_chunks:
            meta = sparse.csr_matrix((0, 0), dtype=X.dtype)
            X = X.map_blocks(sparse.csr_matrix, dtype=X.dtype, meta=meta)
        return Case(ad.AnnData(X=X, obs=base.obs, var=base.var), base.X, base.obs, base.var, {})

    return build


def _view(select: Callable[[ad.AnnData], Any]) -> Callable[[Path], Case]:
    def build(tmp: Path) -> Case:
        base = _base()
        rows, cols = select(base)
        view = base[rows, cols]
        assert view.is_view
        # A view's obs drops the categories it does not use: that is the obs the user has, and what is written.
        return Case(view, base.X[rows][:, cols], pd.DataFrame(view.obs), base.var.iloc[cols], {})

    return build


def _layer(tmp: Path) -> Case:
    base = _base()
    adata = base.copy()
    adata.layers["counts"] = base.X.copy()
    adata.X = sparse.csr_matrix(np.log1p(base.X.astype(np.float32)))  # not counts: must not be written
    return Case(adata, base.X, base.obs, base.var, {"layer": "counts"}, read={"extras": False})


def _raw(tmp: Path) -> Case:
    base = _base()
    adata = base.copy()
    adata.raw = base  # raw keeps all 50 genes
    adata = adata[:, 5:25].copy()
    adata.X = adata.X.astype(np.float32) / 2  # not counts: must not be written
    return Case(adata, base.X, base.obs, base.var, {"raw": True}, read={"extras": False})


def _raw_of_view(tmp: Path) -> Case:
    base = _base()
    adata = base[:, 10:].copy()
    adata.raw = base
    rows = np.flatnonzero(base.obs["donor"] == "donor_1")
    view = adata[rows]
    return Case(view, base.X[rows], pd.DataFrame(view.obs), base.var, {"raw": True}, read={"extras": False})


def _deltacells_backed(tmp: Path) -> Case:
    base = _base()
    deltacells.write_deltacells(base, tmp / "first", tile_size=128, progress=False)
    lazy = read_stored(tmp / "first", cache_dir=tmp / "cache0")
    order = lazy.X.dataset.gene_permutation()
    # The source is the dataset itself (already in its own gene order); its uns entry is not reported.
    return Case(lazy, base.X[:, order], base.obs, base.var.iloc[order], {"tile_size": 50})


def _deltacells_backed_view(tmp: Path) -> Case:
    base = _base()
    deltacells.write_deltacells(base, tmp / "first", tile_size=128, progress=False, reorder_genes=False)
    lazy = read_stored(tmp / "first", cache_dir=tmp / "cache0")
    rows = np.flatnonzero(base.obs["cell_type"].isin(["type_A", "type_C"]))
    view = lazy[rows]
    return Case(view, base.X[rows], pd.DataFrame(view.obs), base.var, {"tile_size": 37})


def _random_rows(n: int) -> np.ndarray:
    return np.random.default_rng(1).permutation(n)[: n // 2]


SOURCES: dict[str, Callable[[Path], Case]] = {
    "csr-int32": _in_memory(lambda m: m),
    "csr-int64": _in_memory(lambda m: m.astype(np.int64)),
    "csr-uint16": _in_memory(lambda m: m.astype(np.uint16)),
    "csr_array": _in_memory(sparse.csr_array),
    "csc": _in_memory(sparse.csc_matrix),
    "dense-int": _in_memory(lambda m: m.toarray()),
    "dense-float64-whole": _in_memory(lambda m: m.toarray().astype(np.float64)),
    "csr-float32-whole": _in_memory(lambda m: m.astype(np.float32)),
    "csr-explicit-zeros": _in_memory(
        lambda m: sparse.csr_matrix((np.where(np.arange(m.nnz) % 5 == 0, 0, m.data), m.indices, m.indptr), m.shape)
    ),
    "backed-h5ad-csr": _backed("csr"),
    "backed-h5ad-csc": _backed("csc"),
    "backed-h5ad-view-random-rows": _backed_view,
    "zarr": _zarr,
    "dask-dense": _dask(sparse_chunks=False),
    "dask-csr-chunks": _dask(sparse_chunks=True),
    "view-mask": _view(lambda a: ((a.obs["cell_type"] == "type_B").to_numpy(), slice(None))),
    "view-step": _view(lambda a: (slice(None, None, 3), slice(None))),
    "view-random-rows": _view(lambda a: (_random_rows(a.n_obs), slice(None))),
    "view-rows-gene-range": _view(lambda a: (np.arange(10, 200), slice(0, 30))),
    "view-rows-gene-list": _view(lambda a: (_random_rows(a.n_obs), np.array([7, 2, 40, 3, 11]))),
    "view-gene-mask": _view(lambda a: (slice(None), np.arange(a.n_vars) % 3 != 0)),
    "view-gene-permutation": _view(lambda a: (slice(None), np.array([4, 0, 3, 1, 2]))),
    "layer": _layer,
    "raw-more-genes-than-X": _raw,
    "raw-of-a-view": _raw_of_view,
    "deltacells-retiled": _deltacells_backed,
    "deltacells-view-retiled": _deltacells_backed_view,
}


@pytest.mark.parametrize("reorder", [True, False], ids=["reorder", "keep-order"])
@pytest.mark.parametrize("build", [pytest.param(b, id=name) for name, b in SOURCES.items()])
def test_sources(build, reorder, tmp_path, roundtrip, assert_X_equal, assert_obs_equal):
    case = build(tmp_path)
    try:
        options = {"tile_size": 64, **case.options, "reorder_genes": reorder}
        got, path = roundtrip(case.adata, read=case.read, **options)
    finally:
        if case.cleanup is not None:
            case.cleanup()
    assert got.shape == case.X.shape
    if reorder:
        _check_full(got, path, case.X, case.obs, case.var, assert_X_equal, assert_obs_equal)
    else:
        assert got.X.dataset.gene_permutation() is None
        assert_X_equal(got.X, case.X)
        assert_obs_equal(got.obs, case.obs)
        pd.testing.assert_frame_equal(got.var, case.var, check_index_type=False)
    assert deltacells.open_dataset(path).manifest.tile_size == options["tile_size"]


def test_fsspec_url(small_adata, cache_dir, assert_X_equal, assert_obs_equal):
    """A dataset at an fsspec URL (here the in-memory filesystem): written, read lazily, obs localized."""
    import uuid

    import fsspec

    root = f"deltacells-io-test-{uuid.uuid4().hex}"
    url = f"memory://{root}/ds"
    try:
        deltacells.write_deltacells(small_adata, url, tile_size=64, progress=False)
        got = read_stored(url, cache_dir=cache_dir)
        assert got.X.dataset.url.startswith("memory://")
        order = got.X.dataset.gene_permutation()
        assert_X_equal(got[10:100].X, small_adata.X[10:100][:, order])
        assert_obs_equal(got.obs, small_adata.obs)
    finally:
        fs = fsspec.filesystem("memory")
        if fs.exists(f"/{root}"):
            fs.rm(f"/{root}", recursive=True)


def test_source_is_not_modified(roundtrip, small_adata):
    src = small_adata.copy()
    src.X = sparse.csr_matrix(src.X, dtype=np.float64)
    src.X.data[::7] = 0  # explicit zeros
    before = (src.X.data.copy(), src.X.indices.copy(), src.X.indptr.copy(), src.obs.copy(), src.var.copy())
    roundtrip(src)
    np.testing.assert_array_equal(src.X.data, before[0])
    np.testing.assert_array_equal(src.X.indices, before[1])
    np.testing.assert_array_equal(src.X.indptr, before[2])
    pd.testing.assert_frame_equal(src.obs, before[3])
    pd.testing.assert_frame_equal(src.var, before[4])


# ---------------------------------------------------------------------- real data


def test_visium_10x(shared_dir, roundtrip, assert_X_equal, assert_obs_equal):
    data = shared_dir / "data" / "visium-cytassist"
    if not (data / "matrix.mtx.gz").exists():
        pytest.skip(f"real data not found at {data}")
    import scanpy as sc

    src = sc.read_10x_mtx(data)
    assert src.shape == (2898, 19465)
    got, path = roundtrip(src, level=3)
    order = _check_full(got, path, src.X, src.obs, src.var, assert_X_equal, assert_obs_equal)
    assert list(got.var_names[:3]) == list(src.var_names[order[:3]])
    assert deltacells.open_dataset(path).manifest.nnz == 1_069_459
    # A random subset, in random order, read lazily.
    cells = np.random.default_rng(0).choice(src.n_obs, 200, replace=False)
    assert_X_equal(got[cells].X, src.X[cells][:, order])


# ---------------------------------------------------------------------- edge shapes and values


def test_one_gene(roundtrip, assert_X_equal, assert_obs_equal, small_adata):
    src = small_adata[:, 3:4].copy()
    got, _ = roundtrip(src, tile_size=64)
    assert got.shape == (300, 1)
    np.testing.assert_array_equal(got.X.dataset.gene_permutation(), [0])
    assert_X_equal(got.X, src.X)
    assert_obs_equal(got.obs, src.obs)
    assert list(got.var_names) == list(src.var_names)


def test_zero_genes_is_refused(new_path, small_adata):
    path = new_path()
    with pytest.raises(ValueError, match="at least one gene"):
        deltacells.write_deltacells(small_adata[:, []].copy(), path, progress=False)
    assert not (path / "manifest.json").exists()


def test_zero_cells(roundtrip, small_adata):
    """Zero cells: a valid, empty dataset (no tiles) with the genes and their table."""
    src = small_adata[:0].copy()
    got, path = roundtrip(src)
    manifest = deltacells.open_dataset(path).manifest
    assert manifest.n_cells == 0 and manifest.n_tiles == 0 and manifest.n_genes == 50
    assert got.shape == (0, 50)
    assert got.X.to_memory().shape == (0, 50)
    assert got.X.nnz == 0
    assert list(got.var_names) == list(src.var_names)  # all totals 0: ties keep the input order
    pd.testing.assert_frame_equal(got.var, src.var, check_index_type=False)
    assert len(got.obs_names) == 0
    assert got[[]].X.shape == (0, 50)


def test_zero_cells_keep_obs_columns(roundtrip, small_adata):
    src = small_adata[:0].copy()
    got, _ = roundtrip(src)
    assert list(got.obs.columns) == list(src.obs.columns)
    assert dict(got.obs.dtypes) == dict(src.obs.dtypes)


def test_counts_above_uint16(roundtrip, assert_X_equal, make_counts):
    """Counts above 65535 are exceptions in the tiles and come back exact (float32 is exact up to 2^24)."""
    X = make_counts(200, 30, seed=9).tolil()
    big = {(0, 0): 65536, (5, 3): 70_000, (150, 29): 2**24, (199, 7): 1_000_000, (100, 15): 65535}
    for (i, j), v in big.items():
        X[i, j] = v
    X = X.tocsr()
    got, _ = roundtrip(ad.AnnData(X=X), tile_size=64, reorder_genes=False)
    assert_X_equal(got.X, X)  # float32, no warning (every count is exact)
    for (i, j), v in big.items():
        assert got.X[i, j] == v


def test_counts_above_2_24(roundtrip, new_path, cache_dir, assert_X_equal, make_counts):
    X = make_counts(100, 20, seed=3).astype(np.int64).tolil()
    X[10, 4] = 2**24 + 1
    X[90, 19] = 2**31 - 1
    X = X.tocsr()
    got, path = roundtrip(ad.AnnData(X=X), tile_size=32, reorder_genes=False)
    assert got.X.dtype == np.int64 and got.X.to_memory()[10, 4] == 2**24 + 1  # as written: exact, no warning
    rounded = got.X.astype(np.float32)
    with pytest.warns(DeltaCellsWarning, match="above 2\\^24") as record:
        first = rounded.to_memory()
    assert len([w for w in record if issubclass(w.category, DeltaCellsWarning)]) == 1
    # Once per dataset: reading again does not warn (warnings are errors here).
    rounded.to_memory()
    rounded[5:20]
    assert first.dtype == np.float32
    assert first[10, 4] == np.float32(2**24 + 1)  # rounded, as float32 must
    for dtype in ("int64", "float64", "int32"):
        exact = read_stored(path, cache_dir=cache_dir, dtype=dtype)
        assert_X_equal(exact.X, X, dtype=dtype)  # no warning: warnings are errors here
        assert exact.X[90, 19] == 2**31 - 1


def test_gap_above_uint16(roundtrip, assert_X_equal):
    """A cell whose next expressed gene is more than 65535 genes away (gap exceptions)."""
    n_genes = 70_010
    rows = [0, 0, 0, 1, 1, 2]
    cols = [0, 65_536 + 5, n_genes - 1, 3, n_genes - 2, 66_000]
    X = sparse.csr_matrix((np.arange(1, 7, dtype=np.int32), (rows, cols)), shape=(3, n_genes))
    got, _ = roundtrip(ad.AnnData(X=X), reorder_genes=False)
    assert_X_equal(got.X, X)
