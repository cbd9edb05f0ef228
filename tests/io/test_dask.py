"""``read_deltacells(path, chunks=...)`` and ``X.to_dask()``: X as a dask array of CSR blocks of whole tiles.

DECISIONS.md 14: ``chunks=None`` is the lazy X, ``"tiles"`` one block per tile, an int blocks of about that many
cells in whole tiles; ``"auto"`` (``to_dask()``'s default) blocks of whole tiles of about dask's
``array.chunk-size`` of decoded CSR. Blocks are what ``TiledCSRDataset.to_memory()`` gives for their rows; their
tasks pickle to the store's URL and options, so dask.distributed workers in other processes read the tiles themselves.
"""

from __future__ import annotations

import io
import pickle
from collections import OrderedDict
from pathlib import Path

import anndata as ad
import numpy as np
import pytest
from scipy import sparse

import deltacells
import deltacells.core as dataset_module
from deltacells.core import Dataset
from deltacells.datasets import synthetic_counts
from deltacells.errors import FormatError, InvalidTypeError, InvalidValueError
from deltacells.io import TiledCSRDataset, _dask
from deltacells.io._dask import source_of
from deltacells.io._dask_blocks import block_class

da = pytest.importorskip("dask.array")

N_CELLS, N_GENES, TILE_SIZE = 500, 40, 64
TILE_CELLS = (64,) * 7 + (52,)


@pytest.fixture(scope="module")
def source() -> ad.AnnData:
    return synthetic_counts(N_CELLS, N_GENES, seed=3)


@pytest.fixture(scope="module")
def path(source: ad.AnnData, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """500 cells in 8 tiles of 64 (the last 52), genes reordered by the writer (the default)."""
    out = tmp_path_factory.mktemp("dask") / "cells.deltacells"
    deltacells.write_deltacells(source, out, tile_size=TILE_SIZE, progress=False)
    return out


def read(path: Path, tmp_path: Path, **options) -> ad.AnnData:
    return deltacells.read_deltacells(path, cache_dir=tmp_path / "cache", **options)


def assert_same_csr(got, expected) -> None:
    """The same class (a dask block is a subclass), dtype, shape and arrays (column order within rows included)."""
    assert isinstance(got, type(expected))
    assert got.dtype == expected.dtype
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got.indptr, expected.indptr)
    np.testing.assert_array_equal(got.indices, expected.indices)
    np.testing.assert_array_equal(got.data, expected.data)


# ---------------------------------------------------------------------- chunks=


def test_default_and_none_give_the_lazy_x(path, tmp_path):
    assert isinstance(read(path, tmp_path).X, TiledCSRDataset)
    assert isinstance(read(path, tmp_path, chunks=None).X, TiledCSRDataset)


def test_tiles_gives_one_block_per_tile(path, tmp_path):
    adata = read(path, tmp_path, chunks="tiles")
    X = adata.X
    assert isinstance(X, da.Array)
    assert X.shape == (N_CELLS, N_GENES)
    assert X.chunks == (TILE_CELLS, (N_GENES,))
    assert X.dtype == np.int32  # the dtype written (docs/format.md, decision 9)
    assert isinstance(X._meta, sparse.csr_matrix)
    assert X._meta.shape == (0, 0) and X._meta.dtype == np.int32
    assert source_of(adata.X).gene_order == "original"


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        (64, TILE_CELLS),  # one tile
        (10, TILE_CELLS),  # less than a tile: still one tile per block
        (1, TILE_CELLS),
        (np.int64(100), (128, 128, 128, 116)),  # 1.56 tiles: 2
        (95, TILE_CELLS),  # 1.48 tiles: 1
        (96, (128, 128, 128, 116)),  # 1.5 tiles: rounded up
        (200, (192, 192, 116)),  # 3.1 tiles: 3
        (10_000, (N_CELLS,)),  # more than the dataset: one block
    ],
)
def test_int_gives_whole_tiles(path, tmp_path, chunks, expected):
    X = read(path, tmp_path, chunks=chunks).X
    assert X.chunks == (expected, (N_GENES,))
    assert sum(expected) == N_CELLS


def _tile_bytes(path: Path, dtype) -> np.ndarray:
    """What each tile decodes to in ``dtype``: int32 indices and the values per nonzero, an int64 row pointer a cell."""
    manifest = deltacells.open_dataset(path).manifest
    return np.asarray(manifest.tile_nnz) * (4 + np.dtype(dtype).itemsize) + 8 * np.asarray(manifest.tile_cells)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("parts", [1, 2, 3, 4, 8])
def test_auto_blocks_are_whole_tiles_of_about_the_chunk_size(path, tmp_path, dtype, parts):
    """dask's array.chunk-size a fraction of the whole: that many blocks, of whole tiles, as equal as tiles allow."""
    import dask

    sizes = _tile_bytes(path, dtype)
    target = int(np.ceil(sizes.sum() / parts))
    with dask.config.set({"array.chunk-size": f"{target}B"}):
        X = read(path, tmp_path, chunks="auto", dtype=dtype).X
    rows = X.chunks[0]
    assert len(rows) == parts
    ends = np.cumsum(rows)
    tile_ends = np.cumsum(TILE_CELLS)
    assert set(ends.tolist()) <= set(tile_ends.tolist())  # blocks end where tiles end
    block_bytes = np.add.reduceat(sizes, np.searchsorted(tile_ends, np.concatenate(([0], ends[:-1])), side="right"))
    assert block_bytes.sum() == sizes.sum()
    assert block_bytes.max() <= target + sizes.max()  # at most a tile beyond the share
    assert_same_csr(X.compute(), read(path, tmp_path, dtype=dtype).X.to_memory())


def test_auto_block_of_one_tile_when_tiles_exceed_the_chunk_size(path, tmp_path):
    import dask

    with dask.config.set({"array.chunk-size": "1B"}):
        X = read(path, tmp_path, chunks="auto").X
    assert X.chunks == (TILE_CELLS, (N_GENES,))
    assert X.name == read(path, tmp_path, chunks="tiles").X.name  # the same blocks: the same keys


def test_auto_follows_dask_default_chunk_size(path, tmp_path):
    from deltacells.io._dask import dask_chunk_bytes

    assert dask_chunk_bytes() == 128 * 2**20  # dask's default (tests do not configure it)
    assert read(path, tmp_path, chunks="auto").X.chunks == ((N_CELLS,), (N_GENES,))


@pytest.mark.parametrize("chunks", ["Auto", "Tiles", "", 0, -1, np.int32(0)])
def test_bad_chunk_values(path, tmp_path, chunks):
    with pytest.raises(InvalidValueError, match="chunks must be None"):
        read(path, tmp_path, chunks=chunks)


@pytest.mark.parametrize("chunks", [1.5, 64.0, True, False, (64,), ((64,) * 8, (40,)), {0: 64}, b"tiles"])
def test_bad_chunk_types(path, tmp_path, chunks):
    with pytest.raises(InvalidTypeError, match="chunks must be None"):
        read(path, tmp_path, chunks=chunks)


def test_bad_chunks_fail_before_opening(tmp_path):
    with pytest.raises(InvalidValueError, match="chunks must be"):
        deltacells.read_deltacells(tmp_path / "missing", cache_dir=tmp_path / "cache", chunks="tile")


def test_to_dask(path, tmp_path):
    lazy = read(path, tmp_path).X
    X = lazy.to_dask(chunks="tiles")
    assert X.chunks == (TILE_CELLS, (N_GENES,))
    assert X.name == read(path, tmp_path, chunks="tiles").X.name  # the same blocks: the same keys
    assert X.name == lazy.to_dask(chunks=64).name  # an int of one tile: the same blocks again
    assert lazy.to_dask().chunks == ((N_CELLS,), (N_GENES,))  # "auto": far less than 128 MiB, one block
    assert lazy.to_dask().name == read(path, tmp_path, chunks="auto").X.name
    assert lazy.to_dask(chunks=128).chunks == ((128, 128, 128, 116), (N_GENES,))
    assert lazy.astype(np.float32).to_dask().dtype == np.float32
    assert lazy.astype(np.float32).to_dask().name != X.name
    with pytest.raises(InvalidValueError, match="None gives no dask array"):
        lazy.to_dask(chunks=None)
    with pytest.raises(InvalidTypeError):
        lazy.to_dask(chunks=1.0)


# ---------------------------------------------------------------------- blocks


@pytest.mark.parametrize("sparse_array", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.float64])
def test_blocks_are_what_to_memory_gives(path, tmp_path, sparse_array, dtype):
    with ad.settings.override(use_sparse_array_on_read=sparse_array):
        lazy = read(path, tmp_path, dtype=dtype).X
        X = read(path, tmp_path, dtype=dtype, chunks=100).X
        expected = lazy.to_memory()
    cls = sparse.csr_array if sparse_array else sparse.csr_matrix
    assert type(X._meta) is block_class(sparse_array=sparse_array) and isinstance(X._meta, cls)
    assert X._meta.shape == (0, 0) and X._meta.dtype == dtype
    assert X.dtype == dtype
    assert type(expected) is cls
    start = 0
    for k, rows in enumerate(X.chunks[0]):
        block = X.blocks[k].compute()
        assert_same_csr(block, cls(lazy[start : start + rows]))
        start += rows
    assert_same_csr(X.compute(), expected)


@pytest.mark.parametrize("gene_order", ["original", "stored"])
def test_compute_equals_to_memory(path, tmp_path, source, gene_order):
    lazy = read(path, tmp_path, gene_order=gene_order)
    adata = read(path, tmp_path, gene_order=gene_order, chunks="tiles")
    order = np.asarray(lazy.X.dataset.gene_permutation())
    assert not np.array_equal(order, np.arange(N_GENES))  # the writer did reorder the genes
    assert list(adata.var_names) == list(lazy.var_names)
    expected = lazy.X.to_memory()
    assert_same_csr(adata.X.compute(), expected)
    columns = np.arange(N_GENES) if gene_order == "original" else order
    np.testing.assert_array_equal(adata.X.compute().toarray(), source.X[:, columns].toarray())


def test_subsetting_cells_and_genes(path, tmp_path):
    lazy = read(path, tmp_path)
    adata = read(path, tmp_path, chunks="tiles")
    mask = (adata.obs["cell_type"] == "type_A").to_numpy()
    view = adata[mask, ::3]
    assert view.is_view
    assert isinstance(view.X, da.Array)
    assert view.shape == (int(mask.sum()), len(range(0, N_GENES, 3)))
    expected = lazy[mask, ::3].X
    np.testing.assert_array_equal(view.X.compute().toarray(), expected.toarray())
    in_memory = view.to_memory()
    assert sparse.issparse(in_memory.X)
    np.testing.assert_array_equal(in_memory.X.toarray(), expected.toarray())
    assert list(in_memory.obs_names) == list(lazy[mask].obs_names)


def test_written_back_and_gene_order_restored(path, tmp_path, source):
    stored = read(path, tmp_path, gene_order="stored", chunks="tiles")
    restored = deltacells.restore_gene_order(stored)
    assert isinstance(restored.X, da.Array)
    assert list(restored.var_names) == list(source.var_names)
    np.testing.assert_array_equal(restored.X.compute().toarray(), source.X.toarray())
    out = tmp_path / "again.deltacells"
    deltacells.write_deltacells(read(path, tmp_path, chunks=128), out, tile_size=100, progress=False)
    np.testing.assert_array_equal(read(out, tmp_path).X.to_memory().toarray(), source.X.toarray())


def test_empty_selection(path, tmp_path):
    adata = read(path, tmp_path, chunks="tiles")
    assert adata[np.zeros(N_CELLS, dtype=bool)].X.compute().shape == (0, N_GENES)


# ---------------------------------------------------------------------- tasks and processes


class _Recorder(pickle.Pickler):
    """A pickler that records the type of every object it pickles (beyond the builtin containers and scalars)."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.types: set[type] = set()

    def reducer_override(self, obj):
        self.types.add(type(obj))
        return NotImplemented


def test_tasks_are_small_and_hold_no_data(path, tmp_path):
    X = read(path, tmp_path, chunks="tiles").X
    graph = dict(X.__dask_graph__())
    assert len(graph) == len(TILE_CELLS)
    for task in graph.values():
        recorder = _Recorder(buffer := io.BytesIO())
        recorder.dump(task)
        assert len(buffer.getvalue()) < 10_000
        held = {t for t in recorder.types if issubclass(t, (np.ndarray, sparse.spmatrix, sparse.sparray, Dataset))}
        assert not held, held
        assert str(path).encode() in buffer.getvalue()  # it names the dataset instead
    assert len(pickle.dumps(graph)) < 10_000 * len(graph)


@pytest.mark.parametrize("gene_order", ["original", "stored"])
def test_a_fresh_process_opens_the_dataset_once(path, tmp_path, monkeypatch, gene_order):
    """Blocks run where nothing is open (a worker): the dataset is opened once, and reused for the next blocks."""
    from dask.local import get_sync

    X = read(path, tmp_path, gene_order=gene_order, chunks="tiles").X
    lazy = read(path, tmp_path, gene_order=gene_order).X
    monkeypatch.setattr(_dask, "_open", OrderedDict())
    opened = []
    real = dataset_module.open_dataset

    def counting(*args, **kwargs):
        opened.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(dataset_module, "open_dataset", counting)
    graph = pickle.loads(pickle.dumps(dict(X.__dask_graph__())))  # as a worker gets the tasks
    blocks = get_sync(graph, X.__dask_keys__())
    starts = np.cumsum((0, *TILE_CELLS))
    for k, (block,) in enumerate(blocks):
        assert_same_csr(block, lazy[starts[k] : starts[k + 1]])
    assert len(opened) == 1
    (dataset,) = _dask._open.values()
    assert dataset.gene_order == gene_order


def test_an_overwritten_dataset_is_refused(source, tmp_path, monkeypatch):
    out = tmp_path / "ds"
    deltacells.write_deltacells(source, out, tile_size=TILE_SIZE, progress=False)
    X = read(out, tmp_path, chunks="tiles").X
    deltacells.write_deltacells(source[:300], out, tile_size=TILE_SIZE, progress=False, overwrite=True)
    monkeypatch.setattr(_dask, "_open", OrderedDict())  # as a worker that has not opened it yet
    with pytest.raises(FormatError, match="overwritten"):
        X.blocks[0].compute(scheduler="sync")


def test_on_a_cluster_of_processes(path, tmp_path, client):
    lazy = read(path, tmp_path)
    expected = lazy.X.to_memory()
    X = read(path, tmp_path, chunks="tiles").X

    def column_sums(block):  # dask's own X.sum(axis=0) needs keepdims=, which scipy.sparse lacks (dask#11880)
        return np.asarray(block.sum(axis=0), dtype=np.float64).reshape(1, -1)

    sums = X.map_blocks(
        column_sums, chunks=((1,) * X.numblocks[0], (N_GENES,)), dtype=np.float64, meta=np.empty((0, 0))
    )
    np.testing.assert_array_equal(client.compute(sums.sum(axis=0)).result(), np.asarray(expected.sum(axis=0))[0])
    assert_same_csr(client.compute(X).result(), expected)

    def opened_here() -> int:
        from deltacells.io import _dask

        return len(_dask._open)

    workers = client.run(opened_here)
    assert len(workers) == 2
    assert all(n <= 1 for n in workers.values())  # each opened the dataset once at most
    assert sum(workers.values()) >= 1


@pytest.fixture(scope="module")
def atlas(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ad.AnnData]:
    """A small atlas: 4,000 cells of a few nonzeros in 125 tiles of 32 (blocks of many tiles each)."""
    adata = synthetic_counts(4000, 80, mean_library_size=8.0, seed=5)
    out = tmp_path_factory.mktemp("atlas") / "atlas.deltacells"
    deltacells.write_deltacells(adata, out, tile_size=32, progress=False)
    return out, adata


def _reductions(X):
    return {
        "sum0": X.sum(axis=0),
        "sum1": X.sum(axis=1),
        "mean0": X.mean(axis=0),
        "mean1": X.mean(axis=1),
        "sum": X.sum(),
        "max0": X.max(axis=0),
    }


def _assert_reductions(got: dict, expected) -> None:
    want = {
        "sum0": np.asarray(expected.sum(axis=0)).ravel(),
        "sum1": np.asarray(expected.sum(axis=1)).ravel(),
        "mean0": np.asarray(expected.mean(axis=0)).ravel(),
        "mean1": np.asarray(expected.mean(axis=1)).ravel(),
        "sum": expected.sum(),
        "max0": expected.max(axis=0).toarray().ravel(),
    }
    for name, value in want.items():
        np.testing.assert_allclose(np.asarray(got[name]).ravel(), value, rtol=1e-5, err_msg=name)  # scipy: float32 sums


@pytest.mark.parametrize("chunks", ["auto", "tiles", 1000])
def test_reductions_of_blocks_of_many_tiles_threaded(atlas, tmp_path, chunks):
    """dask's own X.sum / X.mean (the blocks' reductions take keepdims) on the threaded scheduler."""
    import dask

    path, _ = atlas
    expected = read(path, tmp_path).X.to_memory()
    with dask.config.set({"array.chunk-size": "60kB"}):  # the atlas decodes to about 300 kB: 5 blocks
        X = read(path, tmp_path, chunks=chunks).X
    if chunks == "auto":
        assert 3 <= X.numblocks[0] <= 6 and all(rows % 32 == 0 for rows in X.chunks[0][:-1])
    got = dask.compute(_reductions(X), scheduler="threads")[0]
    _assert_reductions(got, expected)
    assert_same_csr(X.compute(scheduler="threads"), expected)


def test_reductions_of_blocks_of_many_tiles_on_a_cluster(atlas, tmp_path, client):
    import dask

    path, _ = atlas
    expected = read(path, tmp_path).X.to_memory()
    with dask.config.set({"array.chunk-size": "60kB"}):
        X = read(path, tmp_path, chunks="auto").X
    assert X.numblocks[0] > 2
    _assert_reductions(client.compute(_reductions(X)).result(), expected)
    assert_same_csr(client.compute(X).result(), expected)


def test_row_sums_of_a_block_keep_dims_and_dtype():
    """A block's row sums (what X.sum(axis=1) and X.mean(axis=1) ask of each block), as scipy's, dims kept."""
    matrix = sparse.random(50, 7, density=0.3, format="csr", random_state=0, dtype=np.float32)
    for cls in (block_class(sparse_array=False), block_class(sparse_array=True)):
        block = cls(matrix)
        for dtype in (None, np.float64):
            got = np.sum(block, axis=1, keepdims=True, dtype=dtype)
            want = np.asarray(matrix.sum(axis=1, dtype=dtype)).reshape(-1, 1)
            assert got.shape == (50, 1) and got.dtype == want.dtype
            np.testing.assert_allclose(got, want, rtol=1e-6)
        ints = cls(matrix.astype(np.int32))
        assert np.sum(ints, axis=1, keepdims=True).dtype == np.asarray(matrix.astype(np.int32).sum(axis=1)).dtype


# ---------------------------------------------------------------------- scanpy


def _scanpy_before(release: str) -> bool:
    from importlib.metadata import version

    from packaging.version import Version

    return Version(version("scanpy")) < Version(release)


@pytest.mark.parametrize(
    "sparse_array",
    [
        False,
        pytest.param(
            True,
            marks=pytest.mark.xfail(
                _scanpy_before("1.12"),
                raises=ValueError,
                reason="scanpy 1.11 does not support csr_array X: its normalize_total fails in memory",
                strict=True,
            ),
        ),
    ],
)
def test_scanpy_normalize_and_log1p(path, tmp_path, sparse_array):
    sc = pytest.importorskip("scanpy")
    with ad.settings.override(use_sparse_array_on_read=sparse_array):
        adata = read(path, tmp_path, chunks="tiles")
        memory = read(path, tmp_path).to_memory()
    sc.pp.normalize_total(adata, target_sum=1e4)
    sc.pp.log1p(adata)
    sc.pp.normalize_total(memory, target_sum=1e4)
    sc.pp.log1p(memory)
    assert isinstance(adata.X, da.Array)
    got = adata.X.compute()
    assert isinstance(got, sparse.csr_array if sparse_array else sparse.csr_matrix)
    np.testing.assert_allclose(got.toarray(), memory.X.toarray(), rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------- the user guide's example


def test_user_guide_example(tmp_path, client):
    """docs/user-guide/reading.md, "As a dask array" (its dask examples are not run at docs build), on the cluster."""
    sc = pytest.importorskip("scanpy")
    path = tmp_path / "cells.deltacells"
    synthetic_counts(3000, 1000, seed=0).write_deltacells(path, tile_size=512, progress=False)
    adata = sc.read_deltacells(path, cache_dir=tmp_path / "cache", chunks="tiles", threads=1)
    assert repr(adata.X) == (
        "dask.array<read-deltacells, shape=(3000, 1000), dtype=int32, chunksize=(512, 1000), "
        "chunktype=deltacells.CSRMatrixBlock>"
    )
    assert adata.X.chunks[0] == (512, 512, 512, 512, 512, 440)
    assert sc.read_deltacells(path, cache_dir=tmp_path / "cache", chunks=1000).X.chunks[0] == (1024, 1024, 952)
    assert sc.read_deltacells(path, cache_dir=tmp_path / "cache", chunks="auto").X.chunks[0] == (3000,)
    memory = adata.to_memory()  # the in-memory pipeline, for comparison
    sc.pp.normalize_total(adata, target_sum=1e4)
    sc.pp.log1p(adata)
    type_b = adata[adata.obs["cell_type"] == "type_B"].X.compute()
    assert isinstance(type_b, sparse.csr_matrix) and type_b.shape == (501, 1000)
    sc.pp.normalize_total(memory, target_sum=1e4)
    sc.pp.log1p(memory)
    expected = memory[memory.obs["cell_type"] == "type_B"].X
    np.testing.assert_allclose(type_b.toarray(), expected.toarray(), rtol=1e-6, atol=1e-6)
