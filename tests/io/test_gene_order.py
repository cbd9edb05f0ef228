"""Genes in the order they were written, by default (DECISIONS.md 13), and ``gene_order="stored"`` as an option."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest
from scipy import sparse

import deltacells
from deltacells.datasets import synthetic_counts
from deltacells.errors import DeltaCellsWarning, InvalidValueError


@pytest.fixture
def written(tmp_path):
    src = synthetic_counts(400, 60, seed=5)
    src.obs["only_x"] = pd.Categorical(["x"] * src.n_obs, categories=["z", "x", "y"])
    src.obs["ranked"] = pd.Categorical(["lo", "hi"] * (src.n_obs // 2), categories=["lo", "hi"], ordered=True)
    path = tmp_path / "ds"
    deltacells.write_deltacells(src, path, tile_size=64, progress=False)
    return src, path


def test_default_is_the_source_order(written, tmp_path, assert_X_equal):
    src, path = written
    got = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache")
    assert list(got.var_names) == list(src.var_names)
    assert_X_equal(got.X, src.X)  # each row's columns sorted, as in the source
    assert got.X.to_memory().has_canonical_format
    genes = [3, 0, 59]
    np.testing.assert_array_equal(got[:, genes].X.toarray(), src[:, genes].X.toarray())
    assert got.X[5, 7] == src.X[5, 7]


def test_stored_order_is_an_option(written, tmp_path, assert_X_equal):
    src, path = written
    got = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache", gene_order="stored")
    order = np.asarray(got.X.dataset.gene_permutation())
    assert got.X.dataset.gene_order == "stored"
    assert list(got.var_names) == list(src.var_names[order])
    assert_X_equal(got.X, src.X[:, order])  # rows sorted, as stored


def test_restore_keeps_categories_exactly(written, tmp_path):
    src, path = written
    stored = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache", gene_order="stored")
    restored = deltacells.restore_gene_order(stored)
    for adata in (stored, restored, restored.to_memory()):
        assert list(adata.obs["only_x"].cat.categories) == ["z", "x", "y"]
        assert adata.obs["ranked"].cat.ordered
    assert list(restored.var_names) == list(src.var_names)
    order = stored.X.dataset.gene_permutation()
    memory = deltacells.restore_gene_order(stored[:50].to_memory(), gene_order=order)  # in memory: order given
    assert list(memory.var_names) == list(src.var_names)
    # a subset of cells drops unused categories as anndata does for any AnnData; restoring changes nothing more
    assert list(memory.obs["only_x"].cat.categories) == list(src[:50].copy().obs["only_x"].cat.categories)


def test_to_memory_owns_its_data(written, tmp_path):
    _, path = written
    got = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache", gene_order="stored")
    memory = deltacells.restore_gene_order(got).to_memory()
    assert not memory.is_view
    memory.X[0, 0] = 12345
    assert memory.X[0, 0] == 12345


def test_pickled_x_keeps_the_order(written, tmp_path):
    src, path = written
    got = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache")
    clone = pickle.loads(pickle.dumps(got.X))
    np.testing.assert_array_equal(clone[:20].toarray(), src.X[:20].toarray())


def test_dataset_level(written):
    src, path = written
    dataset = deltacells.open_dataset(path)
    assert dataset.gene_order == "stored"
    original = dataset.with_gene_order("original")
    assert original.with_gene_order("original") is original
    assert (original.read_rows(np.array([399, 0, 3])) != sparse.csr_matrix(src.X[[399, 0, 3]])).nnz == 0
    with pytest.raises(InvalidValueError, match="gene_order must be one of 'original', 'stored'"):
        dataset.with_gene_order("sorted")


@pytest.fixture
def conformance(shared_dir):
    root = shared_dir / "conformance" / "datasets"
    if not (root / "complete").is_dir():
        pytest.skip(f"conformance datasets not found at {root}")
    return root


def test_conformance_dataset_reads_as_its_expected_matrix(conformance, cache_dir, assert_X_equal):
    """``complete.expected.npz`` holds X in the original column order: the default read gives exactly it."""
    adata = deltacells.read_deltacells(conformance / "complete", cache_dir=cache_dir)
    with np.load(conformance / "complete.expected.npz") as npz:
        X = sparse.csr_matrix((npz["X_data"], npz["X_indices"], npz["X_indptr"]), shape=tuple(npz["shape"]))
    assert_X_equal(adata.X, X, np.float32)  # it records no dtype: read as float32 (decision 9)
    expected_var = pd.read_parquet(conformance / "complete.expected_var.parquet")
    pd.testing.assert_frame_equal(adata.var, expected_var, check_index_type=False)


def test_writer_warns_on_duplicate_gene_names(tmp_path):
    src = synthetic_counts(50, 6)
    src.var_names = ["a", "b", "a", "c", "d", "e"]
    with pytest.warns(DeltaCellsWarning, match="var_names are not unique"):
        deltacells.write_deltacells(src, tmp_path / "ds", progress=False)
    with pytest.warns(UserWarning, match="not unique"):  # anndata's own warning, as for any AnnData
        got = deltacells.read_deltacells(tmp_path / "ds", cache_dir=tmp_path / "cache")
    assert list(got.var_names) == ["a", "b", "a", "c", "d", "e"]  # the same genes under the same names
    np.testing.assert_array_equal(got.X[:, 2].toarray(), src.X[:, 2].toarray())
