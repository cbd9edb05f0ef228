"""The lazy X honours anndata's contract for backed sparse matrices, checked against an h5ad-backed X."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anndata as ad
import h5py
import numpy as np
import pytest
from scipy import sparse

import deltacells
from deltacells.datasets import synthetic_counts
from deltacells.errors import InvalidTypeError, InvalidValueError, OutOfRangeError
from deltacells.io import TiledCSRDataset

N_CELLS, N_GENES, TILE = 40, 8, 16  # three tiles, the last one of 8 cells

HAS_SPARSE_ARRAY_SETTING = hasattr(ad.settings, "use_sparse_array_on_read")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[ad.AnnData, Path, Path]:
    """The source AnnData, and it written as a deltacells dataset and as an h5ad file."""
    root = tmp_path_factory.mktemp("contract")
    source = synthetic_counts(N_CELLS, N_GENES, seed=3)
    deltacells.write_deltacells(source, root / "data", tile_size=TILE, progress=False)
    source.write_h5ad(root / "data.h5ad")
    return source, root / "data", root / "data.h5ad"


@pytest.fixture
def lazy(files, tmp_path) -> ad.AnnData:
    """The dataset read lazily, in the stored gene order (compared with h5ad below, which has the same)."""
    return deltacells.read_deltacells(files[1], cache_dir=tmp_path / "cache", gene_order="original")


@pytest.fixture
def backed(files) -> Iterator[ad.AnnData]:
    """The reference: anndata's own backed sparse X."""
    adata = ad.read_h5ad(files[2], backed="r")
    yield adata
    adata.file.close()


@pytest.fixture
def both(lazy, backed) -> dict[str, ad.AnnData]:
    return {"deltacells": lazy, "h5ad": backed}


@pytest.fixture
def sparse_array_setting() -> Iterator[None]:
    """Turn ``use_sparse_array_on_read`` on for one test."""
    if not HAS_SPARSE_ARRAY_SETTING:
        pytest.skip("anndata < 0.11 has no use_sparse_array_on_read")
    before = ad.settings.use_sparse_array_on_read
    ad.settings.use_sparse_array_on_read = True
    yield
    ad.settings.use_sparse_array_on_read = before


def test_backed_reference_types(lazy, backed):
    assert isinstance(lazy.X, TiledCSRDataset)
    assert isinstance(backed.X, ad.abc.CSRDataset)
    assert lazy.shape == backed.shape == (N_CELLS, N_GENES)


# ---------------------------------------------------------------------- 1. csr_array on read


@pytest.mark.parametrize("index", [slice(2, 30), [5, 1, 20], np.arange(N_CELLS) % 3 == 0, (slice(None), [1, 3])])
def test_sparse_array_on_read(both, sparse_array_setting, index):
    for name, adata in both.items():
        got = adata.X[index]
        assert isinstance(got, sparse.csr_array), (name, type(got))
    np.testing.assert_array_equal(both["deltacells"].X[index].toarray(), both["h5ad"].X[index].toarray())
    for name, adata in both.items():
        assert isinstance(adata.X.to_memory(), sparse.csr_array), name
        assert isinstance(adata.to_memory().X, sparse.csr_array), name


def test_sparse_matrix_by_default(both):
    if HAS_SPARSE_ARRAY_SETTING:
        assert not ad.settings.use_sparse_array_on_read
    for name, adata in both.items():
        assert isinstance(adata.X[3:9], sparse.csr_matrix), name
        assert isinstance(adata.X.to_memory(), sparse.csr_matrix), name
        assert isinstance(adata.to_memory().X, sparse.csr_matrix), name


# ---------------------------------------------------------------------- 2. numpy conversion


def test_np_asarray_refuses(lazy, backed):
    # anndata's own backed X does not convert either: numpy wraps it in a 0-d object array.
    reference = np.asarray(backed.X)
    assert reference.shape == ()
    assert reference.dtype == object
    for convert in (np.asarray, np.array, lambda x: np.array([x, x]), lambda x: np.asarray(x, dtype=np.float32)):
        with pytest.raises(InvalidTypeError, match=r"\.to_memory\(\)"):
            convert(lazy.X)


def test_anndata_utils_asarray_densifies(files, lazy, backed):
    # anndata.utils.asarray loads anndata's backed datasets: ours too.
    expected = np.asarray(files[0].X.toarray(), dtype=np.float32)
    np.testing.assert_array_equal(ad.utils.asarray(backed.X), expected)
    got = ad.utils.asarray(lazy.X)
    assert isinstance(got, np.ndarray)
    assert got.shape == (N_CELLS, N_GENES)
    np.testing.assert_array_equal(got, expected)


# ---------------------------------------------------------------------- 3. transpose


def test_transpose_fails_like_backed(both):
    for adata in both.values():
        with pytest.raises(ValueError, match="Cannot transpose"):
            adata.transpose()
        with pytest.raises(ValueError, match="Cannot transpose"):
            adata.T  # noqa: B018
    with pytest.raises(InvalidValueError, match=r"\.to_memory\(\)"):
        both["deltacells"].X.T  # noqa: B018
    mem = both["deltacells"].to_memory()
    assert mem.transpose().shape == (N_GENES, N_CELLS)


# ---------------------------------------------------------------------- 4. read-only attributes


@pytest.mark.parametrize("attribute", ["group", "shape", "dtype"])
def test_attributes_cannot_be_set(both, attribute):
    for name, adata in both.items():
        with pytest.raises(AttributeError):
            setattr(adata.X, attribute, None)
        assert getattr(adata.X, attribute, "absent") is not None, name


def test_other_attributes_cannot_be_set(lazy):
    for attribute in ("backend", "format", "dataset", "nnz", "anything"):
        with pytest.raises(AttributeError, match="read-only"):
            setattr(lazy.X, attribute, None)
    assert lazy.X.backend == "deltacells"
    assert lazy.X.format == "csr"


# ---------------------------------------------------------------------- 5. bad indices


BAD_INDICES = {
    "float": 1.5,
    "None": None,
    "string": "a",
    "float column": (slice(None), 1.5),
    "sparse 2-D mask": sparse.csr_matrix(np.arange(N_CELLS) % 2 == 0),
    "row out of range": N_CELLS + 5,
    "column out of range": (slice(None), N_GENES + 1),
    "column list out of range": (slice(None), [0, N_GENES + 1]),
}


@pytest.mark.parametrize(("case", "index"), BAD_INDICES.items(), ids=BAD_INDICES.keys())
def test_bad_index_raises_index_error(both, case, index):
    # anndata 0.13 raises a TypeError from deep inside for an int row out of range (0.12 an IndexError).
    reference_error = (IndexError, TypeError) if case == "row out of range" else IndexError
    with pytest.raises(reference_error):
        both["h5ad"].X[index]
    with pytest.raises(OutOfRangeError):
        both["deltacells"].X[index]


def test_sparse_1d_mask_selects_rows(both):
    if not hasattr(sparse, "csr_array") or sparse.csr_array(np.ones(3, dtype=bool)).ndim != 1:
        pytest.skip("this scipy has no 1-D sparse arrays")
    mask = sparse.csr_array(np.arange(N_CELLS) % 2 == 0)
    got, expected = (adata.X[mask] for adata in (both["deltacells"], both["h5ad"]))
    np.testing.assert_array_equal(got.toarray(), expected.toarray())


def test_column_out_of_range_message(lazy):
    with pytest.raises(OutOfRangeError, match=rf"column {N_GENES + 1} is out of range for {N_GENES} columns"):
        lazy.X[:, N_GENES + 1]
    with pytest.raises(OutOfRangeError, match=rf"column {N_GENES} is out of range for {N_GENES} columns"):
        lazy.X[:, [0, N_GENES]]
    with pytest.raises(OutOfRangeError, match=rf"column {N_GENES} is out of range for {N_GENES} columns"):
        lazy.X[0, N_GENES]
    with pytest.raises(OutOfRangeError, match=rf"does not match {N_GENES} columns"):
        lazy.X[:, np.ones(N_GENES + 1, dtype=bool)]
    with pytest.raises(OutOfRangeError, match=rf"row {N_CELLS} is out of range for {N_CELLS} rows"):
        lazy.X[N_CELLS]


# ---------------------------------------------------------------------- 6. __sizeof__


def _arrays_bytes(matrix: sparse.csr_matrix) -> int:
    return int(matrix.data.nbytes + matrix.indices.nbytes + matrix.indptr.nbytes)


def test_sizeof_with_disk(files, both):
    # with_disk=True counts X as anndata counts its backed arrays: the bytes of the CSR arrays once in memory.
    backed, lazy = both["h5ad"], both["deltacells"]
    assert backed.__sizeof__(with_disk=True) > backed.__sizeof__()
    in_memory = _arrays_bytes(lazy.X.to_memory())
    assert in_memory == _arrays_bytes(files[0].X)  # the matrix written: the same dtypes, the same arrays
    assert lazy.__sizeof__(with_disk=True) == lazy.__sizeof__() - object.__sizeof__(lazy.X) + in_memory
    assert lazy.X.__sizeof__() == object.__sizeof__(lazy.X)  # outside AnnData.__sizeof__(with_disk=True)
    assert "with_disk" in TiledCSRDataset.__doc__


def test_sizeof_with_disk_is_that_of_the_anndata_read_into_memory(files, lazy):
    # anndata's test_backed_sizeof: the size with the data on disk is the size in memory, obs and var included
    # (reading var must not leave a hash table cached in its index that anndata's reader does not build).
    in_memory = ad.read_h5ad(files[2])
    assert lazy.__sizeof__(with_disk=True) == in_memory.__sizeof__()
    assert lazy.var.index.memory_usage(deep=True) == in_memory.var.index.memory_usage(deep=True)


def test_sizeof_with_disk_counts_a_lazy_layer_too(lazy):
    in_memory = _arrays_bytes(lazy.X.to_memory())
    lazy.layers["counts"] = lazy.X
    assert lazy.__sizeof__(with_disk=True) == lazy.__sizeof__() + 2 * (in_memory - object.__sizeof__(lazy.X))


# ---------------------------------------------------------------------- 6b. anndata's test helpers


def test_assert_equal_compares_a_lazy_x(files, lazy, backed):
    from anndata.tests.helpers import assert_equal

    expected = files[0].X
    assert_equal(lazy.X, expected)
    assert_equal(lazy.X, expected.toarray())
    assert_equal(expected, lazy.X)
    assert_equal(lazy.X, backed.X)
    assert_equal(backed.X, lazy.X)
    assert_equal(lazy.X, lazy.X, exact=True)
    changed = expected.copy()
    changed.data[0] += 1
    with pytest.raises(AssertionError):
        assert_equal(lazy.X, changed)
    with pytest.raises(AssertionError):
        assert_equal(changed, lazy.X)


def test_assert_equal_compares_an_anndata_with_a_lazy_x(files, lazy):
    from anndata.tests.helpers import assert_equal

    memory = lazy.to_memory()
    assert_equal(lazy.X, memory.X)
    assert_equal(lazy, memory)


@pytest.mark.parametrize(
    "imports",
    [
        "import deltacells, sys\nassert 'anndata.tests.helpers' not in sys.modules\nimport anndata.tests.helpers",
        "import anndata.tests.helpers\nimport deltacells",
    ],
    ids=["deltacells first", "helpers first"],
)
def test_assert_equal_registered_whichever_is_imported_first(imports):
    """In a fresh interpreter: registered once anndata's test helpers are imported (``import deltacells`` does not)."""
    code = f"""{imports}
from anndata.tests.helpers import assert_equal
from deltacells.io import TiledCSRDataset
assert TiledCSRDataset in assert_equal.registry
"""
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


# ---------------------------------------------------------------------- 7. write_h5ad(as_dense=...)


@pytest.mark.parametrize("as_dense", [("X",), "X"])
def test_write_h5ad_as_dense(files, both, tmp_path, as_dense):
    for name, adata in both.items():
        path = tmp_path / f"{name}.h5ad"
        adata.write_h5ad(path, as_dense=as_dense)
        with h5py.File(path, "r") as f:
            assert isinstance(f["X"], h5py.Dataset), name
            assert f["X"].attrs["encoding-type"] == "array", name
            assert f["X"].shape == (N_CELLS, N_GENES)
        back = ad.read_h5ad(path)
        assert isinstance(back.X, np.ndarray), name
        np.testing.assert_array_equal(back.X, files[0].X.toarray(), err_msg=name)


def test_write_h5ad_sparse_without_as_dense(files, lazy, tmp_path):
    path = tmp_path / "sparse.h5ad"
    lazy.write_h5ad(path)
    with h5py.File(path, "r") as f:
        assert f["X"].attrs["encoding-type"] == "csr_matrix"
    back = ad.read_h5ad(path)
    np.testing.assert_array_equal(back.X.toarray(), files[0].X.toarray())


def test_write_h5ad_as_dense_in_blocks(files, lazy, tmp_path, monkeypatch):
    from deltacells.io import _anndata_hooks

    monkeypatch.setattr(_anndata_hooks, "DENSE_BLOCK_BYTES", 3 * N_GENES * 4)  # three rows at a time
    path = tmp_path / "blocks.h5ad"
    lazy.write_h5ad(path, as_dense=("X",), compression="gzip")
    with h5py.File(path, "r") as f:
        assert f["X"].compression == "gzip"
    np.testing.assert_array_equal(ad.read_h5ad(path).X, files[0].X.toarray())


def test_zarr_is_sparse(files, lazy, tmp_path):
    path = tmp_path / "data.zarr"
    lazy.write_zarr(path)
    back = ad.read_zarr(path)
    assert sparse.issparse(back.X)
    np.testing.assert_array_equal(back.X.toarray(), files[0].X.toarray())


# ---------------------------------------------------------------------- 8. to_memory owns its data


def _root(arr: np.ndarray) -> np.ndarray:
    while isinstance(arr.base, np.ndarray):
        arr = arr.base
    return arr


def _assert_owns(matrix, name: str) -> None:
    for part in ("data", "indices", "indptr"):
        arr = getattr(matrix, part)
        # A view of nothing larger than itself: no slice of a shared buffer or a cached tile.
        assert _root(arr).nbytes == arr.nbytes, (name, part)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.float64])
def test_to_memory_owns_its_data(files, tmp_path, dtype):
    lazy = deltacells.read_deltacells(files[1], cache_dir=tmp_path / "cache", dtype=dtype, gene_order="stored")
    first = lazy.X.to_memory()
    rows = lazy.X[0:TILE]  # leaves the first tile in the cache
    second = lazy.X.to_memory()
    for matrix, name in ((first, "to_memory"), (second, "to_memory after a read"), (rows, "X[rows]")):
        _assert_owns(matrix, name)
    for part in ("data", "indices", "indptr"):
        assert not np.shares_memory(getattr(first, part), getattr(second, part)), part
        assert not np.shares_memory(getattr(rows, part), getattr(second, part)), part
    expected = second.toarray()
    first.data[:] = 99
    first.indices[:] = 0
    np.testing.assert_array_equal(lazy.X.to_memory().toarray(), expected)
    np.testing.assert_array_equal(lazy.X[0:TILE].toarray(), expected[:TILE])


def test_adata_to_memory_owns_its_data(lazy, sparse_array_setting):
    mem = lazy.to_memory().X
    assert isinstance(mem, sparse.csr_array)
    _assert_owns(mem, "AnnData.to_memory")
    expected = lazy.X.to_memory().toarray()
    mem.data[:] = -1
    np.testing.assert_array_equal(lazy.X.to_memory().toarray(), expected)
