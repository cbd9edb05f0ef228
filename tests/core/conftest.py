"""Shared fixtures for the dataset tests: random count matrices, a small-dataset writer and oracle checks."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
from scipy import sparse

from deltacells.core import DatasetWriter


def _make_counts(
    n_cells: int,
    n_genes: int,
    *,
    density: float = 0.25,
    seed: int = 0,
    max_count: int = 40,
    empty_fraction: float = 0.2,
) -> sparse.csr_matrix:
    """A random int64 CSR count matrix (canonical: sorted indices, no zeros), some rows empty."""
    if n_cells == 0:
        return sparse.csr_matrix((0, n_genes), dtype=np.int64)
    rng = np.random.default_rng(seed)
    m = sparse.random(
        n_cells, n_genes, density=density, format="csr", rng=rng, data_rvs=lambda k: rng.integers(1, max_count + 1, k)
    ).astype(np.int64)
    keep = (rng.random(n_cells) >= empty_fraction).astype(np.int64)
    m = sparse.csr_matrix(m.multiply(keep[:, None]), dtype=np.int64)
    m.eliminate_zeros()
    m.sort_indices()
    return m


def _write(
    path: str | Path, matrix: Any, *, block_rows: int | None = None, level: int = 1, **options: Any
) -> str | Path:
    """Write ``matrix`` with a TileWriter in blocks of ``block_rows`` rows (default: one block)."""
    n_rows = matrix.shape[0]
    step = block_rows or max(1, n_rows)
    if n_rows == 0:  # no block to learn the counts' dtype from (docs/format.md, decision 9): say it
        options.setdefault("counts_dtype", matrix.dtype)
    with DatasetWriter(path, matrix.shape[1], level=level, **options) as writer:
        for lo in range(0, n_rows, step):
            writer.write(matrix[lo : lo + step])
    return path


@pytest.fixture(scope="session")
def make_counts() -> Callable[..., sparse.csr_matrix]:
    """Factory ``make_counts(n_cells, n_genes, *, density, seed, max_count, empty_fraction)``."""
    return _make_counts


@pytest.fixture
def write_dataset(tmp_path: Path) -> Callable[..., Path]:
    """Factory ``write_dataset(matrix, *, path=None, block_rows=None, level=1, **TileWriter options) -> path``."""
    counter = itertools.count()

    def write(matrix: Any, *, path: str | Path | None = None, **options: Any) -> Path:
        target = tmp_path / f"ds{next(counter)}" if path is None else path
        return _write(target, matrix, **options)

    return write


@pytest.fixture(scope="module")
def write_module_dataset(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """Like ``write_dataset`` but for module-scoped fixtures (each call gets a fresh directory)."""

    def write(matrix: Any, **options: Any) -> Path:
        return _write(tmp_path_factory.mktemp("ds") / "data", matrix, **options)

    return write


@pytest.fixture
def memory_url() -> Iterator[str]:
    """A fresh ``memory://`` URL, removed from the in-memory filesystem afterwards."""
    name = f"deltacells-test-{uuid.uuid4().hex}"
    yield f"memory://{name}/ds"
    fs = fsspec.filesystem("memory")
    if fs.exists(f"/{name}"):
        fs.rm(f"/{name}", recursive=True)


def _assert_csr_equals(result: Any, expected: np.ndarray, dtype: Any = None) -> None:
    """``result`` is a canonical scipy CSR matrix of ``dtype`` whose dense form is ``expected``.

    ``dtype`` defaults to ``expected``'s: the dtype a dataset written from it reads in (docs/format.md, decision 9).
    """
    dtype = expected.dtype if dtype is None else dtype
    assert isinstance(result, sparse.csr_matrix)
    assert result.shape == expected.shape
    assert result.dtype == np.dtype(dtype)
    assert result.indptr.shape == (expected.shape[0] + 1,)
    assert result.indptr[0] == 0
    assert result.indptr[-1] == result.nnz == result.indices.shape[0] == result.data.shape[0]
    assert np.all(result.data != 0), "explicit zeros in the result"
    for r in range(result.shape[0]):
        row = result.indices[result.indptr[r] : result.indptr[r + 1]]
        assert np.all(np.diff(row) > 0), f"indices of row {r} are not strictly increasing"
    np.testing.assert_array_equal(result.toarray(), expected.astype(np.dtype(dtype)))


@pytest.fixture(scope="session")
def assert_csr_equals() -> Callable[..., None]:
    """``assert_csr_equals(result, expected_dense, dtype=None)`` (default: ``expected_dense``'s dtype)."""
    return _assert_csr_equals
