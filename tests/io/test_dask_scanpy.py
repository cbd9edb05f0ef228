"""scanpy's preprocessing on ``read_deltacells(path, chunks="tiles")``: X a dask array of CSR blocks.

Each call runs once on the dask X and once on the same AnnData in memory; the results (obs and var columns,
X once computed, the PCA) must agree; so must the rest of the pipeline (neighbors, umap, leiden) after the PCA.
docs/user-guide/reading.md, "scanpy on a dask X", lists what is pinned here. Last, ``read_obs`` on such an AnnData.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
from scipy import sparse

import deltacells
from deltacells.datasets import synthetic_counts
from deltacells.errors import InvalidValueError

da = pytest.importorskip("dask.array")
sc = pytest.importorskip("scanpy")

N_CELLS, N_GENES, TILE_SIZE = 2000, 500, 256
GUIDE = Path(__file__).parents[2] / "docs" / "user-guide" / "reading.md"


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2000 cells in 8 tiles of 256 (the last 208)."""
    out = tmp_path_factory.mktemp("dask_scanpy") / "cells.deltacells"
    deltacells.write_deltacells(synthetic_counts(N_CELLS, N_GENES, seed=0), out, tile_size=TILE_SIZE, progress=False)
    return out


@pytest.fixture(autouse=True)
def synchronous():
    import dask

    with dask.config.set(scheduler="synchronous"):
        yield


def normalized(adata: ad.AnnData) -> None:
    sc.pp.normalize_total(adata)
    sc.pp.log1p(adata)


def scale(adata: ad.AnnData) -> None:
    normalized(adata)
    # scanpy warns that zero-centering densifies sparse X, in memory as on dask: X becomes dense (expected)
    with pytest.warns(UserWarning, match="zero-centering a sparse array/matrix densifies it"):
        sc.pp.scale(adata)


#: Each call, after the steps it needs (normalize_total and log1p before hvg, scale and pca).
CALLS: dict[str, Callable[[ad.AnnData], None]] = {
    "calculate_qc_metrics": lambda adata: sc.pp.calculate_qc_metrics(adata, inplace=True),
    "filter_cells": lambda adata: sc.pp.filter_cells(adata, min_genes=200),  # drops about a fifth of the cells
    "filter_genes": lambda adata: sc.pp.filter_genes(adata, min_cells=200),  # drops about a fifth of the genes
    "normalize_total": sc.pp.normalize_total,
    "log1p": sc.pp.log1p,
    "hvg_seurat": lambda adata: (normalized(adata), sc.pp.highly_variable_genes(adata, flavor="seurat")),
    "hvg_cell_ranger": lambda adata: (normalized(adata), sc.pp.highly_variable_genes(adata, flavor="cell_ranger")),
    "scale": scale,
    "scale_zero_center_false": lambda adata: (normalized(adata), sc.pp.scale(adata, zero_center=False)),
    "pca": lambda adata: (normalized(adata), sc.pp.pca(adata, n_comps=10)),
}


def assert_same_columns(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert list(got.index) == list(expected.index)
    assert list(got.columns) == list(expected.columns)
    for column in expected.columns:
        g, e = got[column], expected[column]
        if e.dtype.kind in "biuf":
            assert g.dtype.kind == e.dtype.kind, column
            np.testing.assert_allclose(g.to_numpy(float), e.to_numpy(float), rtol=1e-4, atol=1e-5, err_msg=column)
        else:
            np.testing.assert_array_equal(g.astype(str).to_numpy(), e.astype(str).to_numpy(), err_msg=column)


def dense(x) -> np.ndarray:
    return x.toarray() if sparse.issparse(x) else np.asarray(x)


def _scanpy_before(release: str) -> bool:
    from importlib.metadata import version

    from packaging.version import Version

    return Version(version("scanpy")) < Version(release)


#: The calls scanpy 1.11 makes on csr_array X, in memory as on dask blocks (it barely takes csr_array X).
SCANPY_1_11_CSR_ARRAY = frozenset({"filter_cells", "filter_genes"})

#: The calls that start with normalize_total, which on scanpy 1.11 with a csr_array X in memory allocates without
#: bound (its (n, 1) sums broadcast against the sparse matrix: 2,000 x 500 cells took a process past 23 GB until the
#: kernel killed it). Not run there: scanpy's limitation, which no assertion of ours could observe.
SCANPY_1_11_CSR_ARRAY_UNBOUNDED = frozenset(
    {"normalize_total", "hvg_seurat", "hvg_cell_ranger", "scale", "scale_zero_center_false", "pca"}
)


def _cases() -> list:
    cases = []
    for call in CALLS:
        cases.append(pytest.param(call, False, id=f"{call}-csr_matrix"))
        marks: tuple | pytest.MarkDecorator = ()
        if _scanpy_before("1.12") and call in SCANPY_1_11_CSR_ARRAY_UNBOUNDED:
            marks = pytest.mark.skip(reason="scanpy 1.11's normalize_total on a csr_array X allocates without bound")
        elif _scanpy_before("1.12") and call not in SCANPY_1_11_CSR_ARRAY:
            marks = pytest.mark.xfail(
                # Not dask's nor deltacells' doing: in memory, log1p raises ("return arrays must be of ArrayType")
                # and calculate_qc_metrics ("setting an array element with a sequence"), as on the dask X.
                raises=(TypeError, ValueError, NotImplementedError, ImportError, pytest.fail.Exception),
                reason="scanpy 1.11 does not support csr_array X (dask blocks or in memory)",
                strict=True,
            )
        cases.append(pytest.param(call, True, id=f"{call}-csr_array", marks=marks))
    return cases


@pytest.mark.parametrize(("call", "sparse_array"), _cases())
def test_scanpy_call_on_dask_x(path, tmp_path, call, sparse_array):
    with ad.settings.override(use_sparse_array_on_read=sparse_array):
        adata = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache", chunks="tiles")
        memory = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache").to_memory()
    cls = sparse.csr_array if sparse_array else sparse.csr_matrix
    assert isinstance(adata.X, da.Array) and isinstance(adata.X._meta, cls) and type(memory.X) is cls
    CALLS[call](memory)
    CALLS[call](adata)

    assert isinstance(adata.X, da.Array)  # X stays a dask array
    assert adata.shape == memory.shape
    if call == "filter_cells":
        assert adata.n_obs < N_CELLS  # the filter did drop cells
    if call == "filter_genes":
        assert adata.n_vars < N_GENES
    assert_same_columns(adata.obs, memory.obs)
    assert_same_columns(adata.var, memory.var)
    X = adata.X.compute()
    assert isinstance(X, type(memory.X))  # the blocks' class (a subclass of scipy's), or ndarray after scale
    np.testing.assert_allclose(dense(X), dense(memory.X), rtol=1e-4, atol=1e-5)

    if call == "pca":
        assert isinstance(adata.obsm["X_pca"], da.Array)
        got, expected = adata.obsm["X_pca"].compute(), memory.obsm["X_pca"]
        assert got.shape == expected.shape == (N_CELLS, 10)
        signs = np.sign((got * expected).sum(axis=0))  # each component is defined up to its sign
        assert (signs != 0).all()
        np.testing.assert_allclose(got * signs, expected, rtol=1e-3, atol=1e-3)
        np.testing.assert_allclose(dense(adata.varm["PCs"]) * signs, memory.varm["PCs"], rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(
            np.asarray(adata.uns["pca"]["variance_ratio"]), memory.uns["pca"]["variance_ratio"], rtol=1e-4
        )


# ---------------------------------------------------------------------- neighbors, umap, leiden

PIPELINE_CELLS, PIPELINE_GENES, PIPELINE_TILE = 400, 300, 64
N_NEIGHBORS = 10


@pytest.fixture(scope="module")
def small_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """400 cells of six cell types in 7 tiles of 64 (the last 16)."""
    out = tmp_path_factory.mktemp("dask_scanpy_pipeline") / "cells.deltacells"
    source = synthetic_counts(PIPELINE_CELLS, PIPELINE_GENES, seed=0)
    deltacells.write_deltacells(source, out, tile_size=PIPELINE_TILE, progress=False)
    return out


def _to_pca(adata: ad.AnnData) -> None:
    normalized(adata)
    sc.pp.pca(adata, n_comps=10)


@pytest.fixture(scope="module")
def pca_pair(small_path: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[ad.AnnData, ad.AnnData]:
    """``(dask X, in memory)`` after normalize_total, log1p and pca (copy before changing them)."""
    import dask

    cache = tmp_path_factory.mktemp("dask_scanpy_pipeline_cache")
    adata = deltacells.read_deltacells(small_path, cache_dir=cache, chunks="tiles")
    memory = deltacells.read_deltacells(small_path, cache_dir=cache).to_memory()
    with dask.config.set(scheduler="synchronous"):
        _to_pca(adata)
    _to_pca(memory)
    assert isinstance(adata.obsm["X_pca"], da.Array)  # scanpy leaves the PCA of a dask X a dask array
    return adata, memory


@pytest.fixture(scope="module")
def neighbors_pair(pca_pair: tuple[ad.AnnData, ad.AnnData]) -> tuple[ad.AnnData, ad.AnnData]:
    """``pca_pair`` after ``sc.pp.neighbors`` (copy before changing them)."""
    import dask

    adata, memory = (a.copy() for a in pca_pair)
    with dask.config.set(scheduler="synchronous"):
        sc.pp.neighbors(adata, n_neighbors=N_NEIGHBORS, random_state=0)
    sc.pp.neighbors(memory, n_neighbors=N_NEIGHBORS, random_state=0)
    return adata, memory


def assert_same_neighbors(got: ad.AnnData, expected: ad.AnnData) -> None:
    """The same kNN graph: each cell's neighbours (a few ties may differ), distances and connectivities close.

    The PCAs differ by float32 rounding (and each component's sign, to which distances are blind).
    """
    distances, expected_distances = got.obsp["distances"].tocsr(), expected.obsp["distances"].tocsr()
    assert distances.shape == expected_distances.shape == (got.n_obs, got.n_obs)
    same = [
        set(distances[i].indices) == set(expected_distances[i].indices) for i in range(got.n_obs)
    ]  # observed: every cell (scanpy 1.11 and 1.12)
    assert np.mean(same) >= 0.99, f"{got.n_obs - sum(same)} cells have other neighbours"
    rows = np.flatnonzero(same)
    np.testing.assert_allclose(
        dense(distances[rows]), dense(expected_distances[rows]), rtol=1e-3, atol=1e-3
    )  # observed: 4e-5 at most
    np.testing.assert_allclose(
        dense(got.obsp["connectivities"][rows]), dense(expected.obsp["connectivities"][rows]), atol=1e-3
    )  # observed: 1e-4 at most
    assert got.uns["neighbors"]["params"] == expected.uns["neighbors"]["params"]


@pytest.mark.parametrize("pca", ["dask", "computed"])
def test_neighbors_on_dask_x(pca_pair, pca):
    """``sc.pp.neighbors`` takes the dask ``obsm["X_pca"]`` as it is; computing it first (``"computed"``) also works."""
    adata, memory = (a.copy() for a in pca_pair)
    if pca == "computed":
        adata.obsm["X_pca"] = adata.obsm["X_pca"].compute()
    sc.pp.neighbors(adata, n_neighbors=N_NEIGHBORS, random_state=0)
    sc.pp.neighbors(memory, n_neighbors=N_NEIGHBORS, random_state=0)
    assert isinstance(adata.X, da.Array)
    assert isinstance(adata.obsm["X_pca"], da.Array if pca == "dask" else np.ndarray)  # left as it was
    assert sparse.issparse(adata.obsp["distances"]) and sparse.issparse(adata.obsp["connectivities"])
    assert_same_neighbors(adata, memory)


def test_umap_on_dask_x(neighbors_pair):
    """``sc.tl.umap`` runs on the dask-X AnnData; it reads only the kNN graph (and the PCA), never X.

    The embedding is not compared with the in-memory one: UMAP's stochastic gradient descent, even with the same
    ``random_state``, turns the 1e-4 differences of the two graphs (float32 PCAs) into different layouts (a
    coordinate moves by up to ~10). Given the same graph it is the same embedding to the bit, and both
    embeddings separate the cell types alike.
    """
    from sklearn.metrics import silhouette_score

    adata, memory = (a.copy() for a in neighbors_pair)
    sc.tl.umap(adata, random_state=0)
    sc.tl.umap(memory, random_state=0)
    embedding = adata.obsm["X_umap"]
    assert isinstance(embedding, np.ndarray) and embedding.shape == (PIPELINE_CELLS, 2)
    assert np.isfinite(embedding).all()
    assert isinstance(adata.X, da.Array)

    same_graph = memory.copy()  # the in-memory AnnData with the dask run's graph and PCA
    same_graph.obsp["connectivities"] = adata.obsp["connectivities"].copy()
    same_graph.obsp["distances"] = adata.obsp["distances"].copy()
    same_graph.obsm["X_pca"] = np.asarray(adata.obsm["X_pca"])
    sc.tl.umap(same_graph, random_state=0)
    np.testing.assert_array_equal(embedding, same_graph.obsm["X_umap"])

    cell_types = adata.obs["cell_type"].to_numpy()
    got, expected = silhouette_score(embedding, cell_types), silhouette_score(memory.obsm["X_umap"], cell_types)
    assert expected > 0.5  # observed: 0.69
    assert abs(got - expected) < 0.1  # observed: 0.002 (scanpy 1.11), 0.008 (scanpy 1.12)


def test_leiden_on_dask_x(neighbors_pair):
    """``sc.tl.leiden`` with igraph's implementation (scanpy's future default) gives the in-memory partition."""
    pytest.importorskip("igraph")  # flavor="igraph" needs python-igraph only, not leidenalg
    from sklearn.metrics import adjusted_rand_score

    adata, memory = (a.copy() for a in neighbors_pair)
    options = {"flavor": "igraph", "n_iterations": 2, "directed": False, "random_state": 0}
    sc.tl.leiden(adata, **options)
    sc.tl.leiden(memory, **options)
    assert isinstance(adata.X, da.Array)
    assert isinstance(adata.obs["leiden"].dtype, pd.CategoricalDtype)
    assert adata.obs["leiden"].nunique() > 1  # observed: 7 clusters
    assert adjusted_rand_score(adata.obs["leiden"], memory.obs["leiden"]) == 1.0
    # the clusters follow the cell types (a sanity check of the graph, observed: 0.79)
    assert adjusted_rand_score(adata.obs["leiden"], adata.obs["cell_type"]) > 0.5


#: The rest of the pipeline, as the guide's table names it (:func:`documented_name`).
PIPELINE = ("neighbors", "umap", "leiden/igraph")


# ---------------------------------------------------------------------- read_obs


@pytest.mark.parametrize(
    ("lazy_obs", "obs_names"),
    [
        pytest.param(False, True, id="obs"),
        pytest.param(False, False, id="obs-numbered"),
        pytest.param(True, True, id="lazy_obs"),
    ],
)
def test_read_obs_of_a_dask_x_anndata(small_path, tmp_path, lazy_obs, obs_names):
    """``read_obs`` adds columns to an AnnData read with ``chunks="tiles"``, before and after scanpy's calls."""
    cache = tmp_path / "cache"
    expected = deltacells.read_deltacells(small_path, cache_dir=cache, obs_names=obs_names).obs
    adata = deltacells.read_deltacells(
        small_path, cache_dir=cache, chunks="tiles", obs_columns=[], lazy_obs=lazy_obs, obs_names=obs_names
    )
    assert isinstance(adata.X, da.Array) and list(adata.obs.columns) == []
    frame = deltacells.read_obs(adata, ["cell_type"])
    assert isinstance(frame, pd.DataFrame) and list(frame.columns) == ["cell_type"]
    np.testing.assert_array_equal(frame["cell_type"].to_numpy(), expected["cell_type"].to_numpy())
    assert list(frame.index) == list(adata.obs_names)
    assert list(adata.obs.columns) == ["cell_type"]  # added in place (lazily to a lazy obs)
    assert isinstance(adata.X, da.Array)

    normalized(adata)  # X is now computed from the dataset's blocks, still for all its cells
    assert deltacells.read_obs(adata, ["donor"])["donor"].tolist() == expected["donor"].tolist()
    mask = (expected["cell_type"] == "type_B").to_numpy()
    view = adata[mask]
    assert view.is_view
    assert deltacells.read_obs(view, ["pct_mito"])["pct_mito"].tolist() == expected["pct_mito"][mask].tolist()


@pytest.mark.parametrize("lazy_obs", [False, True])
def test_read_obs_refuses_a_subset_copy(small_path, tmp_path, lazy_obs):
    """A copy of some cells keeps a dask X computed from the whole dataset's blocks: read_obs cannot map its rows."""
    adata = deltacells.read_deltacells(small_path, cache_dir=tmp_path / "cache", chunks="tiles", lazy_obs=lazy_obs)
    for subset in (adata[: PIPELINE_CELLS // 2].copy(), adata[::-1].copy()):  # fewer cells; all, reordered
        assert isinstance(subset.X, da.Array)
        with pytest.raises(InvalidValueError, match="not the 400 cells of"):
            deltacells.read_obs(subset, ["donor"])


def test_read_obs_refuses_another_dask_x():
    adata = ad.AnnData(X=da.zeros((3, 2), chunks=(2, 2)))
    with pytest.raises(TypeError, match="not read with deltacells.read_deltacells"):
        deltacells.read_obs(adata)


# ---------------------------------------------------------------------- the guide's table


def documented_name(call: str) -> str:
    """The guide's name for a key of :data:`CALLS`: ``"scale"``, ``"highly_variable_genes/seurat"``..."""
    if call.startswith("hvg_"):
        return "highly_variable_genes/" + call.removeprefix("hvg_")
    return call.removesuffix("_zero_center_false")


def test_the_guide_says_every_call_works() -> None:
    """The guide's table "scanpy on a dask X" (csr_matrix blocks): every call works on scanpy 1.11 and 1.12.

    neighbors, umap and leiden are there too (``test_*_on_dask_x`` above).
    """
    text = GUIDE.read_text(encoding="utf-8")
    section = text[text.index("### scanpy on a dask X") :]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 4 and cells[0] not in ("Call", "---"):
            name, flavor = re.match(r'`sc\.(?:pp|tl)\.(\w+)\(adata(?:, flavor="(\w+)")?', cells[0]).groups()
            rows[name if flavor is None else f"{name}/{flavor}"] = cells[1:3]
        elif rows and not line.startswith("|"):
            break
    assert set(rows) == {documented_name(call) for call in CALLS} | set(PIPELINE)
    for name, (v111, v112) in rows.items():
        assert v111.startswith("works") and v112.startswith("works"), name
