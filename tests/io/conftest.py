"""Shared fixtures of the AnnData / scanpy integration tests: writing and reading back, and oracle checks.

Every dataset is written under ``tmp_path`` and read with ``cache_dir`` under ``tmp_path``; as a safety net
``$DELTACELLS_CACHE`` points at a per-test directory that must stay empty (a test that forgets
``cache_dir=`` fails instead of filling the user's ``~/.cache``).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
from filelock import FileLock
from scipy import sparse

import deltacells
from deltacells.io import TiledCSRDataset

#: The steering repository's shared folder (conformance vectors, real data), beside the project root.
SHARED = Path(__file__).resolve().parents[3] / "shared"

HERE = Path(__file__).resolve().parent

#: Warnings that anndata / zarr emit from their own code with the versions we support; they are not


@pytest.fixture(autouse=True)
def _no_default_cache(no_default_cache: None) -> None:
    """Every test here must pass ``cache_dir=`` (see ``tests/conftest.py``)."""


# ---------------------------------------------------------------------- oracles


def canonical_csr(matrix: Any, dtype: Any = np.float32) -> sparse.csr_matrix:
    """``matrix`` (sparse, dense, view) as a canonical CSR matrix of ``dtype``: sorted indices, no zeros."""
    if isinstance(matrix, TiledCSRDataset):
        matrix = matrix.to_memory()
    csr = sparse.csr_matrix(matrix) if sparse.issparse(matrix) else sparse.csr_matrix(np.asarray(matrix))
    csr = csr.astype(dtype, copy=True)
    csr.sum_duplicates()
    csr.eliminate_zeros()
    csr.sort_indices()
    return csr


def _assert_X_equal(got: Any, expected: Any, dtype: Any = None, *, sorted_indices: bool = True) -> None:
    """``got`` is a CSR matrix of ``dtype`` (default: ``expected``'s, as a round trip gives) equal to ``expected``.

    Without explicit zeros.

    With ``sorted_indices`` its column indices must also be sorted within each row (whole rows read from
    a dataset are); scipy itself leaves them unsorted after selecting columns in another order.
    """
    if isinstance(got, TiledCSRDataset):
        got = got.to_memory()
    if dtype is None:
        dtype = expected.dtype
    if not sorted_indices:
        got = got.copy()
        got.sort_indices()
    assert sparse.issparse(got), f"expected a sparse matrix, got {type(got).__name__}"
    assert got.format == "csr", f"expected CSR, got {got.format}"
    assert got.dtype == np.dtype(dtype), f"dtype {got.dtype}, expected {np.dtype(dtype)}"
    assert got.shape == tuple(expected.shape), f"shape {got.shape}, expected {expected.shape}"
    want = canonical_csr(expected, dtype)
    np.testing.assert_array_equal(np.asarray(got.indptr), want.indptr, err_msg="indptr differs")
    np.testing.assert_array_equal(np.asarray(got.indices), want.indices, err_msg="indices differ")
    np.testing.assert_array_equal(np.asarray(got.data), want.data, err_msg="values differ")


def _assert_obs_equal(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    """Same columns, values, dtypes and categories; the same index labels, as a string index (name not compared).

    The index dtype is not compared exactly: like anndata's own h5ad round trip, an ``object`` index comes
    back with the default string dtype of the pandas that reads it (``str`` in pandas 3).
    """
    assert list(got.index) == [str(x) for x in expected.index]
    assert pd.api.types.is_string_dtype(got.index.dtype), got.index.dtype
    # The name of the obs index is not stored (see test_obs_index_name): not compared here.
    pd.testing.assert_frame_equal(got, expected, check_index_type=False, check_names=False)
    assert list(got.columns) == list(expected.columns)


@pytest.fixture(scope="session")
def assert_X_equal() -> Callable[..., None]:
    """``assert_X_equal(got, expected, dtype=None, *, sorted_indices=True)`` (see ``_assert_X_equal``)."""
    return _assert_X_equal


@pytest.fixture(scope="session")
def assert_obs_equal() -> Callable[[pd.DataFrame, pd.DataFrame], None]:
    """``assert_obs_equal(got, expected)``: obs frames equal (dtypes, categories, missing values, labels)."""
    return _assert_obs_equal


# ---------------------------------------------------------------------- data and round trips


def random_counts(
    n_cells: int, n_genes: int, *, density: float = 0.2, max_count: int = 30, seed: int = 0
) -> sparse.csr_matrix:
    """A random int32 CSR count matrix with some empty cells."""
    rng = np.random.default_rng(seed)
    m = sparse.random(
        n_cells, n_genes, density=density, format="csr", rng=rng, data_rvs=lambda k: rng.integers(1, max_count + 1, k)
    ).astype(np.int32)
    if n_cells > 3:
        m = sparse.csr_matrix(m.multiply((rng.random(n_cells) > 0.1)[:, None]), dtype=np.int32)
    m.eliminate_zeros()
    return m


@pytest.fixture(scope="session")
def make_counts() -> Callable[..., sparse.csr_matrix]:
    """``make_counts(n_cells, n_genes, *, density=0.2, max_count=30, seed=0)``: random int32 CSR counts."""
    return random_counts


@pytest.fixture(scope="session")
def small_adata() -> ad.AnnData:
    """A synthetic 300 x 50 AnnData (int32 CSR counts, categorical and numeric obs); copy before changing it."""
    from deltacells.datasets import synthetic_counts

    return synthetic_counts(300, 50, seed=11)


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    """The obs cache of this test (not created until something is localized)."""
    return tmp_path / "cache"


@pytest.fixture
def new_path(tmp_path: Path) -> Callable[[str], Path]:
    """``new_path(stem)``: a fresh, not yet existing path under tmp_path."""
    counter = itertools.count()

    def make(stem: str = "ds") -> Path:
        return tmp_path / f"{stem}{next(counter)}"

    return make


@pytest.fixture
def roundtrip(new_path: Callable[[str], Path], cache_dir: Path) -> Callable[..., tuple[ad.AnnData, Path]]:
    """``roundtrip(adata, *, read=None, **write_options) -> (read_back, path)``.

    Writes with :func:`deltacells.write_deltacells` (``progress=False`` unless given) to a fresh directory
    and reads it back with :func:`deltacells.read_deltacells` (``cache_dir`` of this test, genes in the stored
    order so that the tests can check it, plus ``read``); ``tests/io/test_gene_order.py`` checks the default.
    """

    def run(adata: ad.AnnData, *, read: dict[str, Any] | None = None, **options: Any) -> tuple[ad.AnnData, Path]:
        path = new_path("ds")
        options.setdefault("progress", False)
        deltacells.write_deltacells(adata, path, **options)
        read_options = {"cache_dir": cache_dir, "gene_order": "stored", **(read or {})}
        return deltacells.read_deltacells(path, **read_options), path

    return run


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The shared folder beside the project root (``../shared``): conformance vectors and real data."""
    return SHARED


# ---------------------------------------------------------------------- an atlas above the lazy-obs threshold

#: Above this many cells ``read_deltacells`` gives a lazy obs by default (as its docstring and the user guide's
#: "Atlases" page say).
LAZY_OBS_MIN_CELLS = 1_000_000

#: Cells: just above :data:`LAZY_OBS_MIN_CELLS`, so obs is lazy with the defaults.
ATLAS_CELLS = LAZY_OBS_MIN_CELLS + 48_576
ATLAS_GENES = 12
ATLAS_TILE_SIZE = 8192
ATLAS_CELL_TYPES = ["B cell", "T cell", "NK cell", "monocyte", "platelet", "never used"]  # the last has no cell
ATLAS_BUILD_VERSION = 1


def build_atlas(root: Path) -> None:
    """Write the atlas under ``root`` (its counts, the obs it was written from, a marker of completion)."""
    rng = np.random.default_rng(27)
    nnz_per_cell = rng.integers(0, 7, size=ATLAS_CELLS)
    indptr = np.zeros(ATLAS_CELLS + 1, dtype=np.int64)
    np.cumsum(nnz_per_cell, out=indptr[1:])
    # Each cell's genes: distinct, sorted (a random permutation's first k, sorted), counts 1..30.
    keys = rng.random((ATLAS_CELLS, ATLAS_GENES)).argsort(axis=1)
    take = np.arange(ATLAS_GENES)[None, :] < nnz_per_cell[:, None]
    indices = np.sort(np.where(take, keys, ATLAS_GENES), axis=1)
    indices = indices[indices < ATLAS_GENES].astype(np.int32)
    data = rng.integers(1, 31, size=indptr[-1]).astype(np.int32)
    X = sparse.csr_matrix((data, indices, indptr), shape=(ATLAS_CELLS, ATLAS_GENES))
    codes = rng.integers(0, len(ATLAS_CELL_TYPES) - 1, size=ATLAS_CELLS)
    obs = pd.DataFrame(
        {
            "cell_type": pd.Categorical.from_codes(codes, categories=ATLAS_CELL_TYPES),
            "donor": pd.Categorical.from_codes(rng.integers(0, 3, size=ATLAS_CELLS), categories=["d1", "d2", "d3"]),
            "n_counts": np.asarray(X.sum(axis=1)).ravel().astype(np.int64),
            "score": rng.random(ATLAS_CELLS).astype(np.float32),
            "is_doublet": rng.random(ATLAS_CELLS) < 0.05,
        },
        index=pd.Index([f"cell_{i:07d}" for i in range(ATLAS_CELLS)]),
    )
    var = pd.DataFrame(
        {"gene_ids": [f"ENSG{i:05d}" for i in range(ATLAS_GENES)]}, index=[f"gene_{i}" for i in range(ATLAS_GENES)]
    )
    adata = ad.AnnData(X=X, obs=obs, var=var)
    deltacells.write_deltacells(adata, root / "atlas.deltacells", tile_size=ATLAS_TILE_SIZE, progress=False)
    (root / "done.json").write_text(json.dumps({"version": ATLAS_BUILD_VERSION}))


@pytest.fixture(scope="session")
def atlas_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An atlas just above the lazy-obs threshold, built by the first xdist worker that asks (the others wait).

    1,048,576 cells, 12 genes, obs of every kind (a categorical with a category no cell has, numbers,
    booleans, stored names): what ``tests/io/test_atlas_idioms.py`` runs the everyday idioms on.
    """
    root = tmp_path_factory.getbasetemp().parent / "atlas-idioms"
    root.mkdir(exist_ok=True)
    with FileLock(str(root / "build.lock")):
        done = root / "done.json"
        if not done.exists() or json.loads(done.read_text()).get("version") != ATLAS_BUILD_VERSION:
            build_atlas(root)
    return root / "atlas.deltacells"
