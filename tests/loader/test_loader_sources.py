"""What a ``CellLoader`` reads from each kind of source, and the sources and settings it refuses.

AnnDatas from ``read_deltacells`` (a collection's, one written from raw, views of rows and of every gene), cell
selections within a view, an empty selection; and the errors: a dask-backed AnnData, ``gene_order="stored"`` for
a collection, weights for a dataset with no selected cell, obs asked of a dataset without obs, a torch output
without torch, a state whose position is past the epoch. The oracle is the AnnData written.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anndata as ad
import numpy as np
import pytest
from scipy import sparse

import deltacells
from deltacells import Batch, CellLoader, DatasetWriter
from deltacells.datasets import synthetic_counts
from deltacells.errors import InvalidTypeError, InvalidValueError

N_CELLS, N_GENES, TILE = 300, 30, 64


@pytest.fixture(autouse=True)
def _no_default_cache(no_default_cache: None) -> None:
    """Every test here passes ``cache_dir=``."""


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[ad.AnnData, Path]:
    adata = synthetic_counts(N_CELLS, N_GENES, seed=21)
    path = tmp_path_factory.mktemp("sources") / "cells.deltacells"
    deltacells.write_deltacells(adata, path, tile_size=TILE, progress=False)
    return adata, path


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[ad.AnnData], list[Path]]:
    """Two datasets of the same genes (a collection), of 150 and 90 cells."""
    root = tmp_path_factory.mktemp("collection")
    parts, paths = [], []
    for i, n in enumerate((150, 90)):
        adata = synthetic_counts(n, N_GENES, seed=30 + i)
        adata.obs_names = adata.obs_names + f"-{i}"
        deltacells.write_deltacells(adata, root / f"part{i}", tile_size=TILE, progress=False)
        parts.append(adata)
        paths.append(root / f"part{i}")
    return parts, paths


def _dense(matrix) -> np.ndarray:
    return np.asarray(matrix.toarray() if sparse.issparse(matrix) else matrix, dtype=np.float32)


def _all(load: CellLoader) -> tuple[np.ndarray, np.ndarray]:
    """Every batch's cells and rows, ordered by cell."""
    batches = list(load)
    index = np.concatenate([b.index for b in batches]) if batches else np.zeros(0, dtype=np.int64)
    rows = np.vstack([_dense(b.X) for b in batches]) if batches else np.zeros((0, load.n_genes), np.float32)
    order = np.argsort(index)
    return index[order], rows[order]


def test_a_collection_anndata_reads_its_datasets_cells(two, tmp_path: Path) -> None:
    parts, paths = two
    adata = deltacells.read_deltacells(paths, keys=["a", "b"], cache_dir=tmp_path / "cache")
    load = CellLoader(adata, batch_size=64, obs_columns=["dataset"], seed=1)
    assert (load.n_cells, load.n_genes) == (240, N_GENES)
    assert load.obs_categories == {"dataset": ("a", "b")}
    index, rows = _all(load)
    np.testing.assert_array_equal(index, np.arange(240))
    expected = np.vstack([_dense(p.X) for p in parts])[:, np.argsort(adata.var_names)]
    np.testing.assert_array_equal(rows[:, np.argsort(adata.var_names)], expected)
    names = np.concatenate([load.obs_frame(b)["dataset"].to_numpy() for b in load])
    assert sorted(set(names)) == ["a", "b"] and (names == "a").sum() == 150


def test_a_view_of_a_collection_anndata_selects_its_cells(two, tmp_path: Path) -> None:
    _, paths = two
    adata = deltacells.read_deltacells(paths, cache_dir=tmp_path / "cache")
    load = CellLoader(adata[140:160], batch_size=8, shuffle=False)
    index, rows = _all(load)
    np.testing.assert_array_equal(index, np.arange(140, 160))
    np.testing.assert_array_equal(rows, _dense(adata[140:160].X))


def test_a_collection_has_no_stored_gene_order(two, tmp_path: Path) -> None:
    _, paths = two
    with pytest.raises(InvalidValueError, match="gene_order='stored' is for one dataset"):
        CellLoader(paths, gene_order="stored", cache_dir=tmp_path / "cache")


def test_a_weighted_dataset_none_of_whose_cells_is_selected(two, tmp_path: Path) -> None:
    _, paths = two
    with pytest.raises(InvalidValueError, match=r"dataset\(s\) \[1\] have a weight but none of their cells"):
        CellLoader(paths, cells=slice(0, 150), weights=[1, 1], cache_dir=tmp_path / "cache")
    load = CellLoader(paths, cells=slice(0, 150), weights=[1, 0], cache_dir=tmp_path / "cache", batch_size=50)
    index, _ = _all(load)
    assert index.max() < 150


def test_a_weighted_loader_resumes_where_its_state_says(two, tmp_path: Path) -> None:
    _, paths = two

    def make() -> CellLoader:
        return CellLoader(paths, batch_size=20, block_size=8, weights=[3, 1], seed=5, cache_dir=tmp_path / "cache")

    first = make()
    whole = [b.index.copy() for b in first]
    partial = make()
    taken = iter(partial)
    for _ in range(4):
        next(taken)
    state = partial.state_dict()
    taken.close()
    resumed = make()
    resumed.load_state_dict(state)
    rest = [b.index for b in resumed]
    assert len(rest) == len(whole) - 4
    for got, want in zip(rest, whole[4:], strict=True):
        np.testing.assert_array_equal(got, want)
    other = CellLoader(paths, batch_size=20, block_size=8, weights=[1, 3], seed=5, cache_dir=tmp_path / "cache")
    with pytest.raises(InvalidValueError, match="other settings"):
        other.load_state_dict(state)  # the weights are part of what fixes the batches


def test_an_anndata_written_from_raw_gives_raws_genes(tmp_path: Path) -> None:
    adata = synthetic_counts(120, N_GENES, seed=8)
    adata.raw = adata.copy()
    adata = adata[:, :10].copy()  # X has fewer genes than raw, whose counts the tiles hold
    path = tmp_path / "raw.deltacells"
    deltacells.write_deltacells(adata, path, raw=True, tile_size=TILE, progress=False)
    read = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache")
    load = CellLoader(read[:, :5], batch_size=50)  # a view selects X's genes, not raw's: the counts are all raw's
    assert load.n_genes == N_GENES
    index, rows = _all(load)
    np.testing.assert_array_equal(index, np.arange(120))
    np.testing.assert_array_equal(rows, _dense(adata.raw.X))


def test_a_view_of_every_gene_reads_every_gene_and_cells_select_within_the_view(written, tmp_path: Path) -> None:
    adata, path = written
    read = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache")
    view = read[100:200, list(range(N_GENES))]  # all genes, by index: no gene selection
    load = CellLoader(view, batch_size=32, cells=slice(10, 30))
    assert (load.n_cells, load.n_genes) == (20, N_GENES)
    index, rows = _all(load)
    np.testing.assert_array_equal(index, np.arange(110, 130))  # cell numbers of the dataset
    np.testing.assert_array_equal(rows, _dense(adata.X[110:130]))
    genes = CellLoader(read[:, [3, 1]], batch_size=N_CELLS, shuffle=False)
    assert genes.n_genes == 2
    np.testing.assert_array_equal(_dense(next(iter(genes)).X), _dense(adata.X)[:, [3, 1]])


def test_a_dask_backed_anndata_is_refused_with_what_to_pass(written, tmp_path: Path) -> None:
    _, path = written
    lazy = deltacells.read_deltacells(path, chunks=100, cache_dir=tmp_path / "cache")
    with pytest.raises(InvalidTypeError, match="lazy X \\(chunks=None\\).*pass the dataset's path instead"):
        CellLoader(lazy)


def test_an_empty_selection_gives_no_batch(written, tmp_path: Path) -> None:
    _, path = written
    load = CellLoader(path, cells=np.zeros(0, dtype=np.int64), cache_dir=tmp_path / "cache")
    assert (load.n_cells, len(load)) == (0, 0)
    assert list(load) == []


def test_obs_columns_of_a_dataset_without_obs(tmp_path: Path) -> None:
    path = tmp_path / "bare.deltacells"
    with DatasetWriter(path, N_GENES, tile_size=TILE) as writer:  # no obs given: the dataset has no obs shards
        writer.write(sparse.csr_matrix(_dense(synthetic_counts(100, N_GENES).X)))
    assert deltacells.open_dataset(path).manifest.n_obs_shards == 0
    with pytest.raises(InvalidValueError, match=r"obs_columns \['cell_type'\] were asked for, but .* has no obs"):
        CellLoader(path, obs_columns=["cell_type"], cache_dir=tmp_path / "cache")


def test_a_torch_output_without_torch_says_what_to_install(written, tmp_path: Path, monkeypatch) -> None:
    _, path = written
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch fails, as when it is not installed
    for output in ("torch", "torch_sparse"):
        with pytest.raises(ImportError, match=f"output='{output}' needs torch, which is not installed"):
            CellLoader(path, output=output, cache_dir=tmp_path / "cache")


def test_a_state_past_the_epoch_is_refused(written, tmp_path: Path) -> None:
    _, path = written
    load = CellLoader(path, batch_size=100, cache_dir=tmp_path / "cache")
    state = load.state_dict()
    with pytest.raises(InvalidValueError, match=r"batches_done must be 0 \.\. 3, got 4"):
        load.load_state_dict({**state, "batches_done": 4})
    load.load_state_dict({**state, "batches_done": 3})  # the epoch's end: accepted
    assert load.state_dict()["batches_done"] == 3


def test_a_state_saved_at_the_epochs_end_resumes_to_no_batch(written, tmp_path: Path) -> None:
    """A checkpoint taken after the last batch of an epoch: the resumed loader's iteration gives nothing."""
    _, path = written
    load = CellLoader(path, batch_size=100, cache_dir=tmp_path / "cache")
    assert len(list(load)) == 3
    state = load.state_dict()
    assert state["batches_done"] == 3
    resumed = CellLoader(path, batch_size=100, cache_dir=tmp_path / "cache")
    resumed.load_state_dict(state)
    assert list(resumed) == []


def test_repr_and_pinning_a_scipy_batch(written, tmp_path: Path) -> None:
    _, path = written
    load = CellLoader(path, batch_size=128, shuffle=False, cache_dir=tmp_path / "cache")
    assert repr(load) == (
        f"CellLoader({load.dataset.url!r}, n_cells={N_CELLS}, batch_size=128, shuffle=False, output='scipy', rank=0/1)"
    )
    batch = next(iter(load))
    pinned = batch.pin_memory()  # what a DataLoader with pin_memory=True calls: scipy matrices stay as they are
    assert isinstance(pinned, Batch)
    assert pinned.X is batch.X and pinned.index is batch.index and pinned.obs is batch.obs
    assert len(pinned) == 128


def test_unshuffled_weights_repeat_the_smaller_dataset_in_order(two, tmp_path: Path) -> None:
    """Equal weights over 150 and 90 cells: 120 of each per epoch; the second's come round again, in order."""
    parts, paths = two
    load = CellLoader(paths, batch_size=40, shuffle=False, weights=[1, 1], cache_dir=tmp_path / "cache")
    batches = list(load)
    index = np.concatenate([b.index for b in batches])
    assert index.shape[0] == 240
    first, second = index[index < 150], index[index >= 150] - 150
    assert first.shape[0] == second.shape[0] == 120
    assert np.unique(first).shape[0] == 120  # a subset of the larger dataset, each cell once
    np.testing.assert_array_equal(np.unique(second), np.arange(90))  # every cell of the smaller one...
    np.testing.assert_array_equal(second[:90], np.arange(90))  # ...in dataset order, then again from the start
    np.testing.assert_array_equal(second[90:], np.arange(30))
    rows = np.vstack([_dense(b.X) for b in batches])
    np.testing.assert_array_equal(rows[index >= 150], _dense(parts[1].X)[second])
