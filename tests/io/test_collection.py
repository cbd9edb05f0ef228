"""Several datasets read as one (DECISIONS.md 16), compared with ``anndata.concat`` of the in-memory datasets.

Three datasets with different gene sets and gene orders (one written with ``reorder_genes=False``), different
obs columns and categories: every read of the collection (whole, ranges across the datasets' edges, repeats,
unsorted cells, masks, dask blocks on a cluster of processes) must equal the same read of
``anndata.concat(..., join=join, label="dataset")``.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
from anndata.tests.helpers import assert_equal
from scipy import sparse

import deltacells
from deltacells.datasets import synthetic_counts
from deltacells.errors import InvalidValueError, UnknownKeyError

GENES = np.array([f"G{i:03d}" for i in range(90)])
N_CELLS = (420, 300, 190)


def _study(n: int, genes: np.ndarray, seed: int, name: str) -> ad.AnnData:
    adata = synthetic_counts(n, genes.shape[0], seed=seed)
    adata.var_names = genes
    adata.var["ensembl"] = [f"ENSG{int(g[1:]):05d}" for g in genes]
    adata.obs_names = [f"{name}-{i}" for i in range(n)]
    return adata


@pytest.fixture(scope="module")
def studies(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, ad.AnnData], list[Path]]:
    """Three studies as AnnDatas and as datasets: genes overlapping by about two thirds, each in its own order."""
    rng = np.random.default_rng(7)
    a = _study(N_CELLS[0], rng.permutation(GENES[:60]), 1, "a")
    b = _study(N_CELLS[1], rng.permutation(GENES[12:80]), 2, "b")
    c = _study(N_CELLS[2], GENES[5:72].copy(), 3, "c")  # written with reorder_genes=False
    b.obs = b.obs.drop(columns=["pct_mito"])  # a column the others have
    c.obs["cell_type"] = c.obs["cell_type"].cat.rename_categories(lambda x: f"c_{x}")  # other categories
    root = tmp_path_factory.mktemp("collection")
    paths = []
    for name, adata, reorder in (("a", a, True), ("b", b, True), ("c", c, False)):
        path = root / f"{name}.deltacells"
        deltacells.write_deltacells(adata, path, progress=False, tile_size=64, reorder_genes=reorder)
        paths.append(path)
    return {"a": a, "b": b, "c": c}, paths


def _expected(studies: dict[str, ad.AnnData], join: str) -> ad.AnnData:
    return ad.concat(studies, join=join, label="dataset")


@pytest.mark.parametrize("join", ["inner", "outer"])
def test_every_read_matches_anndata_concat(studies, tmp_path: Path, join: str) -> None:
    adatas, paths = studies
    expected = _expected(adatas, join)
    got = deltacells.read_deltacells(paths, join=join, cache_dir=tmp_path / "cache")
    assert isinstance(got.X, deltacells.TiledCSRDataset)
    assert got.shape == expected.shape
    assert list(got.var_names) == list(expected.var_names)
    pd.testing.assert_frame_equal(got.obs, expected.obs)
    want = sparse.csr_matrix(expected.X, dtype=np.float32)
    rng = np.random.default_rng(0)
    n = got.n_obs
    edges = np.cumsum(N_CELLS)
    indexes = [
        slice(None),
        slice(edges[0] - 30, edges[1] + 20),  # across two edges
        slice(3, n, 7),
        np.array([n - 1, 0, edges[0], edges[0] - 1, edges[1], 5, 5]),  # unsorted, repeats, both sides of edges
        rng.choice(n, 250),  # interleaved datasets
        np.sort(rng.choice(n, 300, replace=False)),
        rng.random(n) < 0.3,
        -np.arange(1, 40),
    ]
    for index in indexes:
        matrix = got.X[index]
        assert (matrix != want[index]).nnz == 0, index
        assert matrix.has_canonical_format
        check = matrix.copy()
        check.sort_indices()
        np.testing.assert_array_equal(check.indices, matrix.indices)  # the flag is true
    cells = rng.choice(n, 120, replace=False)
    genes = rng.choice(got.n_vars, 10, replace=False)
    memory = got[cells, genes].to_memory()
    expected_view = expected[cells, genes].copy()
    assert memory.X.dtype == expected_view.X.dtype  # the datasets' dtypes promoted, as anndata.concat does
    assert_equal(memory, expected_view)


def test_columns_are_mapped_by_the_kernels_without_dense_blocks(studies, tmp_path: Path) -> None:
    """Each dataset reads into the join's columns itself: a member is a Dataset with mapped columns."""
    _, paths = studies
    got = deltacells.read_deltacells(paths, join="inner", cache_dir=tmp_path / "cache")
    collection = got.X.dataset
    assert isinstance(collection, deltacells.core.Collection)
    assert [member.n_genes for member in collection.members] == [got.n_vars] * 3
    assert all(member.drops_genes for member in collection.members)  # each has genes the others lack
    outer = deltacells.read_deltacells(paths, join="outer", cache_dir=tmp_path / "cache").X.dataset
    assert not any(member.drops_genes for member in outer.members)


def test_keys_label_index_unique_and_var_key(studies, tmp_path: Path) -> None:
    adatas, paths = studies
    got = deltacells.read_deltacells(
        paths, keys=["x", "y", "z"], label="study", index_unique="-", var_key="ensembl", cache_dir=tmp_path / "c"
    )
    expected = ad.concat(dict(zip("xyz", adatas.values(), strict=True)), label="study", index_unique="-")
    assert list(got.obs["study"].cat.categories) == ["x", "y", "z"]
    assert list(got.obs_names) == list(expected.obs_names)
    ensembl = [f"ENSG{int(g[1:]):05d}" for g in expected.var_names]
    assert list(got.var_names) == ensembl
    assert (got.X[:] != sparse.csr_matrix(expected.X, dtype=np.float32)).nnz == 0
    assert deltacells.io.read_options_of(got.X).keys == ("x", "y", "z")  # what a loader over it labels cells with
    assert dict(got.uns) == {}
    default = deltacells.read_deltacells(paths, label=None, cache_dir=tmp_path / "c")
    assert "dataset" not in default.obs
    named = deltacells.read_deltacells(paths, cache_dir=tmp_path / "c")
    assert list(named.obs["dataset"].cat.categories) == ["a", "b", "c"]  # folder names, without .deltacells


@pytest.mark.parametrize("join", ["inner", "outer"])
@pytest.mark.parametrize("index_unique", [None, "-"])
def test_a_lazy_obs_and_an_eager_one_give_what_anndata_concat_gives(
    studies, tmp_path: Path, join: str, index_unique
) -> None:
    """Above the threshold (here: asked for) obs is lazy over the datasets' caches; below it a pandas frame."""
    adatas, paths = studies
    concatenated = ad.concat(adatas, join=join, label="dataset", index_unique=index_unique)
    expected = concatenated.obs
    options = {"join": join, "index_unique": index_unique, "cache_dir": tmp_path / "cache"}
    eager = deltacells.read_deltacells(paths, lazy_obs=False, **options)
    lazy = deltacells.read_deltacells(paths, lazy_obs=True, **options)
    assert isinstance(eager.obs, pd.DataFrame)
    assert not isinstance(lazy.obs, pd.DataFrame)
    pd.testing.assert_frame_equal(eager.obs, expected)
    assert list(lazy.obs.columns) == list(expected.columns)
    assert dict(lazy.obs.dtypes) == dict(expected.dtypes)
    for column in expected.columns:
        pd.testing.assert_series_equal(lazy.obs[column], expected[column], check_index=False)
    cells = np.random.default_rng(2).choice(eager.n_obs, 80, replace=False)
    memory, in_memory = lazy[cells].to_memory(), eager[cells].to_memory()
    pd.testing.assert_frame_equal(memory.obs, in_memory.obs)
    pd.testing.assert_frame_equal(memory.obs, concatenated[cells].copy().obs)  # unused categories dropped
    assert (memory.X != in_memory.X).nnz == 0
    mask = (lazy.obs["dataset"] == "b").to_numpy()
    assert list(lazy[mask].obs_names) == list(eager[mask].obs_names)
    names = list(eager.obs_names[[5, N_CELLS[0] + 3, sum(N_CELLS) - 1]])
    assert list(lazy[names].obs_names) == names  # found by name across the datasets


def test_obs_columns_asked_for(studies, tmp_path: Path) -> None:
    _, paths = studies
    got = deltacells.read_deltacells(paths, join="outer", obs_columns=["pct_mito"], cache_dir=tmp_path / "c")
    assert list(got.obs.columns) == ["pct_mito", "dataset"]
    assert got.obs["pct_mito"].iloc[N_CELLS[0] : N_CELLS[0] + N_CELLS[1]].isna().all()  # b has none
    for lazy in (False, True):
        with pytest.raises(UnknownKeyError, match="no dataset of the collection has obs column"):
            deltacells.read_deltacells(paths, obs_columns=["nope"], cache_dir=tmp_path / "c", lazy_obs=lazy)
    lazy = deltacells.read_deltacells(
        paths, join="outer", obs_columns=["pct_mito"], cache_dir=tmp_path / "c", lazy_obs=True
    )
    assert list(lazy.obs.columns) == ["pct_mito", "dataset"]


def test_a_merged_dataset_and_pickles(studies, tmp_path: Path) -> None:
    adatas, paths = studies
    got = deltacells.read_deltacells(paths, join="outer", cache_dir=tmp_path / "cache")
    deltacells.write_deltacells(got, tmp_path / "merged", progress=False)
    merged = deltacells.read_deltacells(tmp_path / "merged", cache_dir=tmp_path / "cache")
    expected = _expected(adatas, "outer")
    assert list(merged.var_names) == list(expected.var_names)
    assert (merged.X[:] != sparse.csr_matrix(expected.X, dtype=np.float32)).nnz == 0
    pd.testing.assert_series_equal(merged.obs["dataset"], expected.obs["dataset"])
    clone = pickle.loads(pickle.dumps(got.X))
    assert (clone[::5] != got.X[::5]).nnz == 0


def test_dask_blocks_on_a_cluster(studies, tmp_path: Path, client) -> None:
    adatas, paths = studies
    got = deltacells.read_deltacells(paths, join="inner", chunks=128, cache_dir=tmp_path / "cache")
    expected = sparse.csr_matrix(_expected(adatas, "inner").X, dtype=np.float32)
    blocks = got.X.chunks[0]
    assert sum(blocks) == got.n_obs
    assert np.isin(np.cumsum(N_CELLS)[:-1], np.cumsum(blocks)).all()  # no block holds two datasets' cells
    computed = client.compute(got.X).result()
    assert (sparse.csr_matrix(computed) != expected).nnz == 0
    totals = client.compute(got.X.sum(axis=0)).result()
    np.testing.assert_allclose(np.asarray(totals).ravel(), np.asarray(expected.sum(axis=0)).ravel())


def test_mismatches_are_clear_errors(studies, tmp_path: Path) -> None:
    adatas, paths = studies
    cache = tmp_path / "cache"
    with pytest.raises(InvalidValueError, match="join must be one of 'inner', 'outer', got 'left'"):
        deltacells.read_deltacells(paths, join="left", cache_dir=cache)
    with pytest.raises(InvalidValueError, match="keys names 2 datasets"):
        deltacells.read_deltacells(paths, keys=["x", "y"], cache_dir=cache)
    with pytest.raises(InvalidValueError, match="share a name"):
        deltacells.read_deltacells([paths[0], paths[0]], cache_dir=cache)
    with pytest.raises(UnknownKeyError, match="no var column 'symbol'"):
        deltacells.read_deltacells(paths, var_key="symbol", cache_dir=cache)
    other = adatas["a"][:, :10].copy()
    other.var_names = [f"X{i}" for i in range(10)]
    deltacells.write_deltacells(other, tmp_path / "other", progress=False)
    with pytest.raises(InvalidValueError, match="no gene in common"):
        deltacells.read_deltacells([paths[0], tmp_path / "other"], cache_dir=cache)
    repeated = adatas["b"][:, :10].copy()
    repeated.var["ensembl"] = "ENSG0"
    deltacells.write_deltacells(repeated, tmp_path / "repeated", progress=False)
    with pytest.raises(InvalidValueError, match="'repeated': its values of var column 'ensembl' repeat"):
        deltacells.read_deltacells([paths[0], tmp_path / "repeated"], var_key="ensembl", cache_dir=cache)
    with pytest.raises(InvalidValueError, match="gene_order='stored' is for one dataset"):
        deltacells.read_deltacells(paths, gene_order="stored", cache_dir=cache)
    with pytest.raises(InvalidValueError, match="one per dataset"):
        deltacells.read_deltacells(paths, storage_options=[{}, {}], cache_dir=cache)
    with pytest.raises(InvalidValueError, match="merge must be one of None, 'same'"):
        deltacells.read_deltacells(paths, merge="all", cache_dir=cache)
    with pytest.raises(TypeError, match="a collection of datasets: read it again"):
        deltacells.read_obs(deltacells.read_deltacells(paths, obs_columns=[], cache_dir=cache), ["donor"])


# ---------------------------------------------------------------------- the training loader


def _dataset_of_cells(cells: np.ndarray) -> np.ndarray:
    return np.searchsorted(np.cumsum(N_CELLS), cells, side="right")


@pytest.mark.parametrize("join", ["inner", "outer"])
def test_loader_gives_each_cell_once_across_ranks(studies, tmp_path: Path, join: str) -> None:
    adatas, paths = studies
    expected = _expected(adatas, join)
    want = sparse.csr_matrix(expected.X, dtype=np.float32)
    seen = []
    for rank in range(3):
        loader = deltacells.CellLoader(
            paths, batch_size=50, join=join, rank=rank, world_size=3, block_size=16, buffer_size=200,
            obs_columns=["cell_type", "dataset", "pct_mito"], cache_dir=tmp_path / "cache",
        )  # fmt: skip
        assert loader.n_genes == expected.n_vars
        categories = loader.obs_categories
        assert categories["dataset"] == ("a", "b", "c")
        assert categories["cell_type"] == tuple(expected.obs["cell_type"].cat.categories)
        for batch in loader:
            assert (want[batch.index] != batch.X).nnz == 0
            codes = batch.obs["cell_type"]
            np.testing.assert_array_equal(
                np.asarray(categories["cell_type"])[codes], expected.obs["cell_type"].to_numpy()[batch.index]
            )
            np.testing.assert_array_equal(batch.obs["dataset"], _dataset_of_cells(batch.index))
            mito = expected.obs["pct_mito"].to_numpy()[batch.index] if join == "outer" else None
            if mito is not None:
                np.testing.assert_array_equal(batch.obs["pct_mito"], mito)  # NaN where b lacks it
            seen.append(batch.index)
    cells = np.concatenate(seen)
    np.testing.assert_array_equal(np.sort(cells), np.arange(sum(N_CELLS)))  # each cell once per epoch
    mixed = deltacells.CellLoader(paths, batch_size=100, block_size=8, cache_dir=tmp_path / "cache")
    assert max(len(np.unique(_dataset_of_cells(b.index))) for b in mixed) > 1  # batches mix the datasets


def test_loader_resumes_and_reads_an_anndata_view(studies, tmp_path: Path) -> None:
    _, paths = studies
    options = {"batch_size": 40, "block_size": 16, "buffer_size": 120, "cache_dir": tmp_path / "cache"}
    loader = deltacells.CellLoader(paths, **options)
    loader.set_epoch(2)
    full = [batch.index for batch in loader]
    first = deltacells.CellLoader(paths, **options)
    first.set_epoch(2)
    run = iter(first)
    for _ in range(5):
        next(run)
    state = first.state_dict()
    resumed = deltacells.CellLoader(paths, **options)
    resumed.load_state_dict(state)
    rest = [batch.index for batch in resumed]
    assert len(rest) == len(full) - 5
    for a, b in zip(rest, full[5:], strict=True):
        np.testing.assert_array_equal(a, b)
    adata = deltacells.read_deltacells(paths, cache_dir=tmp_path / "cache")
    view = adata[adata.obs["dataset"] != "b"]
    from_view = deltacells.CellLoader(view, batch_size=64, obs_columns=["dataset"])
    cells = np.concatenate([batch.index for batch in from_view])
    np.testing.assert_array_equal(np.sort(cells), np.flatnonzero(adata.obs["dataset"].to_numpy() != "b"))


def test_weights_give_the_asked_proportions(studies, tmp_path: Path) -> None:
    _, paths = studies
    weights = np.array([1.0, 1.0, 2.0])
    counts = np.zeros(3)
    for epoch in range(4):
        loader = deltacells.CellLoader(
            paths, batch_size=64, block_size=8, weights=weights, cache_dir=tmp_path / "cache", seed=3
        )
        loader.set_epoch(epoch)
        cells = np.concatenate([batch.index for batch in loader])
        assert cells.shape[0] == sum(N_CELLS)  # an epoch keeps its size
        counts += np.bincount(_dataset_of_cells(cells), minlength=3)
    np.testing.assert_allclose(counts / counts.sum(), weights / weights.sum(), atol=0.01)
    # the whole epoch (910 cells) from the small dataset c (190 cells): each of its cells comes about 4.8 times
    small = deltacells.CellLoader(paths, batch_size=64, weights=[0, 0, 1], cache_dir=tmp_path / "cache")
    cells = np.concatenate([batch.index for batch in small])
    assert set(_dataset_of_cells(cells).tolist()) == {2}
    assert cells.shape[0] == sum(N_CELLS)
    assert np.unique(cells).shape[0] == N_CELLS[2]
    assert np.bincount(cells - sum(N_CELLS[:2])).min() >= 4
    with pytest.raises(InvalidValueError, match="one per dataset"):
        deltacells.CellLoader(paths, weights=[1, 2], cache_dir=tmp_path / "cache")
    with pytest.raises(InvalidValueError, match="for a collection"):
        deltacells.CellLoader(paths[0], weights=[1], cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("join", ["inner", "outer"])
def test_the_genes_orders_that_decide_the_join(tmp_path: Path, join: str) -> None:
    """Only the orders that can change pandas' join are read, and the genes come as anndata.concat gives them.

    The same genes in the same original order (a union keeps it), in another order (a union sorts them), and a
    subset; each dataset's stored order (by decreasing counts) differs from its original one.
    """
    rng = np.random.default_rng(11)
    genes = rng.permutation(GENES[:30])
    same = _study(80, genes, 1, "same")
    again = _study(60, genes.copy(), 2, "again")
    shuffled = _study(70, rng.permutation(genes), 3, "shuffled")
    fewer = _study(50, rng.permutation(genes[:20]), 4, "fewer")
    paths = {}
    for name, adata in (("same", same), ("again", again), ("shuffled", shuffled), ("fewer", fewer)):
        paths[name] = tmp_path / name
        deltacells.write_deltacells(adata, paths[name], progress=False, tile_size=32)
        assert list(deltacells.open_dataset(paths[name]).var_names()) != list(adata.var_names)  # stored order differs
    studies = {"same": same, "again": again, "shuffled": shuffled, "fewer": fewer}
    for names in (["same", "again"], ["same", "shuffled"], ["same", "again", "fewer"], ["fewer", "same", "again"]):
        expected = ad.concat({n: studies[n] for n in names}, join=join, label="dataset")
        got = deltacells.read_deltacells([paths[n] for n in names], join=join, cache_dir=tmp_path / "cache")
        assert list(got.var_names) == list(expected.var_names), names
        assert (got.X[:] != sparse.csr_matrix(expected.X, dtype=np.float32)).nnz == 0


def test_a_large_collection_opens_with_the_garbage_collector_paused(
    studies: tuple[dict[str, ad.AnnData], list[Path]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """From ``PAUSE_COLLECTOR_DATASETS`` datasets on, the cyclic collector is off while a collection opens, and
    as it was after (on again; off, if the caller had turned it off)."""
    import gc

    from deltacells.io import _collection

    _, paths = studies
    monkeypatch.setattr(_collection, "PAUSE_COLLECTOR_DATASETS", 2)
    seen: list[bool] = []
    joined = _collection._joined
    monkeypatch.setattr(_collection, "_joined", lambda *args: (seen.append(gc.isenabled()), joined(*args))[1])
    assert gc.isenabled()
    deltacells.read_deltacells(paths, cache_dir=tmp_path)
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        deltacells.read_deltacells(paths, cache_dir=tmp_path)
        assert not gc.isenabled()
    finally:
        gc.enable()
    monkeypatch.setattr(_collection, "PAUSE_COLLECTOR_DATASETS", len(paths) + 1)
    deltacells.read_deltacells(paths, cache_dir=tmp_path)
    assert seen == [False, False, True]
