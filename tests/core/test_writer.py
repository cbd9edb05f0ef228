"""TileWriter: blocks in any shape and format, count checks, gene order, overwrite rules, abort, the manifest."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import sparse

import deltacells
from deltacells import FormatError
from deltacells.core import DatasetWriter, open_dataset
from deltacells.storage import FsspecStore
from deltacells.tiles import DEFAULT_LEVEL, DEFAULT_N_CHUNKS, DEFAULT_TILE_SIZE, to_count_csr

N_CELLS, N_GENES, TILE = 53, 11, 8


@pytest.fixture(scope="module")
def counts(make_counts) -> sparse.csr_matrix:
    """53 cells x 11 genes, int64 CSR, some empty rows."""
    return make_counts(N_CELLS, N_GENES, density=0.3, seed=11)


def _files(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` by relative name; the manifest without the dtype of the blocks written."""
    files = {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}
    manifest = json.loads(files["manifest.json"])
    manifest["metadata"].get("deltacells", {}).pop("dtype", None)  # the blocks' dtype (test_the_blocks_dtype_...)
    files["manifest.json"] = json.dumps(manifest).encode()
    return files


def _write_blocks(path: Any, blocks: list[Any], n_genes: int, **options: Any) -> None:
    options.setdefault("level", 1)
    with DatasetWriter(path, n_genes, **options) as writer:
        for block in blocks:
            writer.write(block)


@pytest.fixture(scope="module")
def reference(counts, tmp_path_factory) -> dict[str, bytes]:
    """The files of ``counts`` written as one block."""
    path = tmp_path_factory.mktemp("reference") / "ds"
    _write_blocks(path, [counts], N_GENES, tile_size=TILE)
    return _files(path)


# ---------------------------------------------------------------------------------------------- blocks


def test_reference_dataset(reference, counts, tmp_path, assert_csr_equals):
    assert sorted(reference) == ["manifest.json"] + [f"tiles/tile_{i:06d}.dct" for i in range(7)]
    path = tmp_path / "ds"
    path.mkdir()
    for name, data in reference.items():
        (path / name).parent.mkdir(exist_ok=True)
        (path / name).write_bytes(data)
    assert_csr_equals(open_dataset(path).read_rows(dtype=np.int64), counts.toarray(), np.int64)


@pytest.mark.parametrize(
    "sizes",
    [
        pytest.param([1] * N_CELLS, id="one-row-blocks"),
        pytest.param([3, 17, 1, 20, 12], id="uneven"),
        pytest.param([25, 28], id="bigger-than-a-tile"),
        pytest.param([8] * 6 + [5], id="tile-aligned"),
        pytest.param([0, 10, 0, 43, 0], id="with-empty-blocks"),
        pytest.param([52, 1], id="last-row-alone"),
    ],
)
def test_block_sizes_give_identical_datasets(tmp_path, counts, reference, sizes):
    bounds = np.concatenate(([0], np.cumsum(sizes)))
    assert bounds[-1] == N_CELLS
    blocks = [counts[lo:hi] for lo, hi in itertools.pairwise(bounds)]
    _write_blocks(tmp_path / "ds", blocks, N_GENES, tile_size=TILE)
    assert _files(tmp_path / "ds") == reference


@pytest.mark.parametrize("threads", [1, 3])
def test_threads_give_identical_datasets(tmp_path, counts, reference, threads):
    _write_blocks(tmp_path / "ds", [counts[:30], counts[30:]], N_GENES, tile_size=TILE, threads=threads)
    assert _files(tmp_path / "ds") == reference


@pytest.mark.parametrize(
    "convert",
    [
        pytest.param(lambda m: m.toarray(), id="dense-int64"),
        pytest.param(lambda m: m.toarray().astype(np.uint16), id="dense-uint16"),
        pytest.param(lambda m: m.toarray().astype(np.int8), id="dense-int8"),
        pytest.param(lambda m: m.toarray().astype(np.float64), id="dense-float64"),
        pytest.param(lambda m: m.toarray().astype(np.float32), id="dense-float32"),
        pytest.param(lambda m: np.asfortranarray(m.toarray()), id="dense-fortran"),
        pytest.param(lambda m: m.toarray().tolist(), id="nested-lists"),
        pytest.param(lambda m: m.tocsc(), id="csc"),
        pytest.param(lambda m: m.tocoo(), id="coo"),
        pytest.param(lambda m: m.astype(np.float32), id="csr-float32"),
        pytest.param(lambda m: m.astype(np.int32), id="csr-int32"),
        pytest.param(lambda m: m.astype(np.uint32).tocsc(), id="csc-uint32"),
        pytest.param(lambda m: sparse.csr_array(m), id="csr-array"),
        pytest.param(lambda m: sparse.coo_array(m.astype(np.float64)), id="coo-array-float"),
        pytest.param(lambda m: m.tolil(), id="lil"),
    ],
)
def test_block_formats_give_identical_datasets(tmp_path, counts, reference, convert):
    blocks = [convert(counts[:20]), convert(counts[20:])]
    _write_blocks(tmp_path / "ds", blocks, N_GENES, tile_size=TILE)
    assert _files(tmp_path / "ds") == reference
    given = blocks[0].dtype if hasattr(blocks[0], "dtype") else np.asarray(blocks[0]).dtype
    assert open_dataset(tmp_path / "ds").dtype == given  # what reads give (docs/format.md, decision 9)


def test_the_blocks_dtype_is_recorded_promoted_or_as_given(tmp_path, counts):
    _write_blocks(tmp_path / "a", [counts[:20].astype(np.int16), counts[20:].astype(np.uint16)], N_GENES)
    assert open_dataset(tmp_path / "a").manifest.metadata == {"deltacells": {"dtype": "int32"}}  # numpy's promotion
    _write_blocks(tmp_path / "b", [counts.astype(np.int64)], N_GENES, counts_dtype="float64")
    assert open_dataset(tmp_path / "b").dtype == np.float64
    _write_blocks(tmp_path / "c", [counts.toarray().astype(np.float16)], N_GENES)
    assert open_dataset(tmp_path / "c").dtype == np.float32  # scipy's sparse matrices have no float16
    with pytest.raises(TypeError, match="counts_dtype must be an integer or floating dtype"):
        DatasetWriter(tmp_path / "d", N_GENES, counts_dtype="complex64")
    DatasetWriter(tmp_path / "e", N_GENES).close()  # no block: no dtype known, the dataset reads as float32
    assert open_dataset(tmp_path / "e").recorded_dtype is None and open_dataset(tmp_path / "e").dtype == np.float32


def test_canonicalisation(tmp_path, assert_csr_equals):
    # Row 0: explicit zero; row 1: duplicates summed (2 + 3), unsorted; row 2: duplicates summing to 0; row 3: empty.
    data = np.array([4, 0, 7, 3, 9, 2, 5, 0, 0, 1], dtype=np.int64)
    indices = np.array([1, 3, 5, 4, 0, 4, 2, 2, 6, 0], dtype=np.int64)
    indptr = np.array([0, 3, 7, 9, 9, 10])
    block = sparse.csr_matrix((data, indices, indptr), shape=(5, 7))
    expected = np.zeros((5, 7), dtype=np.int64)
    expected[0, [1, 5]] = [4, 7]
    expected[1, [0, 2, 4]] = [9, 5, 5]
    expected[4, 0] = 1
    _write_blocks(tmp_path / "ds", [block], 7, tile_size=2)
    ds = open_dataset(tmp_path / "ds")
    assert ds.manifest.tile_nnz.tolist() == [5, 0, 1]
    assert_csr_equals(ds.read_rows(dtype=np.int64), expected, np.int64)


def test_coo_duplicates_and_zeros(tmp_path, assert_csr_equals):
    rows = np.array([0, 0, 0, 1, 1, 2])
    cols = np.array([2, 2, 0, 1, 1, 3])
    vals = np.array([1.0, 2.0, 0.0, 0.0, 0.0, 6.0])
    block = sparse.coo_matrix((vals, (rows, cols)), shape=(3, 4))
    _write_blocks(tmp_path / "ds", [block], 4)
    ds = open_dataset(tmp_path / "ds")
    assert ds.manifest.tile_nnz.tolist() == [2]
    assert_csr_equals(ds.read_rows(), np.array([[0, 0, 3, 0], [0, 0, 0, 0], [0, 0, 0, 6]]), np.float64)


def test_to_count_csr_output_is_canonical_int32():
    block = sparse.csr_matrix(
        (np.array([2.0, 1.0, 0.0, 3.0]), np.array([3, 1, 2, 1]), np.array([0, 3, 4])), shape=(2, 4)
    )
    out = to_count_csr(block, n_genes=4)
    assert out.dtype == np.int32
    assert out.has_canonical_format
    assert out.indices.tolist() == [1, 3, 1]
    assert out.data.tolist() == [1, 2, 3]


def test_write_does_not_modify_the_input(tmp_path):
    block = sparse.csr_matrix(
        (np.array([1, 0, 2], dtype=np.int32), np.array([0, 1, 2], dtype=np.int32), np.array([0, 2, 3], dtype=np.int32)),
        shape=(2, 3),
    )
    assert block.has_canonical_format
    before = block.toarray()
    _write_blocks(tmp_path / "ds", [block], 3)
    assert block.indptr.tolist() == [0, 2, 3]
    assert block.indices.tolist() == [0, 1, 2]
    np.testing.assert_array_equal(block.toarray(), before)


# ---------------------------------------------------------------------------------------------- bad values


def _block_with(value: Any, dtype: Any) -> np.ndarray:
    block = np.ones((6, 5), dtype=dtype)
    block[2, 3] = value
    return block


@pytest.mark.parametrize(
    ("value", "dtype", "problem"),
    [
        pytest.param(0.5, np.float64, "not a whole number", id="fraction"),
        pytest.param(1e-9, np.float64, "not a whole number", id="tiny-fraction"),
        pytest.param(2.5, np.float32, "not a whole number", id="fraction-float32"),
        pytest.param(np.nan, np.float64, "not a whole number", id="nan"),
        pytest.param(np.inf, np.float64, "not a whole number", id="inf"),
        pytest.param(-np.inf, np.float32, "not a whole number", id="-inf"),
        pytest.param(-1, np.int64, r"outside \[0, 2\^31 - 1\]", id="negative-int"),
        pytest.param(-1, np.int8, r"outside \[0, 2\^31 - 1\]", id="negative-int8"),
        pytest.param(-3.0, np.float64, r"outside \[0, 2\^31 - 1\]", id="negative-float"),
        pytest.param(2**31, np.int64, r"outside \[0, 2\^31 - 1\]", id="2^31"),
        pytest.param(2**63, np.uint64, r"outside \[0, 2\^31 - 1\]", id="2^63-uint64"),
        pytest.param(3e9, np.float64, r"outside \[0, 2\^31 - 1\]", id="3e9-float"),
    ],
)
@pytest.mark.parametrize("as_sparse", [False, True], ids=["dense", "csr"])
def test_bad_counts_rejected(tmp_path, value, dtype, problem, as_sparse):
    bad = _block_with(value, dtype)
    blocks = [sparse.csr_matrix(bad) if as_sparse else bad]
    path = tmp_path / "ds"
    with pytest.raises(ValueError, match=rf"cell 2, gene 3 .*{problem}") as info:
        _write_blocks(path, blocks, 5, tile_size=2)
    assert "layer=" in str(info.value)
    assert "raw=" in str(info.value)
    assert not (path / "manifest.json").exists()
    assert not (path / "tiles").exists()


def test_bad_count_in_a_later_block_aborts(tmp_path):
    path = tmp_path / "ds"
    with pytest.raises(ValueError, match=r"gene 3 .*not a whole number"):
        _write_blocks(path, [np.ones((5, 5)), _block_with(0.5, np.float64)], 5, tile_size=2)
    assert not (path / "manifest.json").exists()
    assert not (path / "tiles").exists()


def test_bad_count_in_a_later_block_names_the_global_cell(tmp_path):
    with pytest.raises(ValueError, match=r"cell 7, gene 3 "):
        _write_blocks(tmp_path / "ds", [np.ones((5, 5)), _block_with(0.5, np.float64)], 5, tile_size=2, threads=1)


def test_n_cells_counts_rows_received(tmp_path):
    writer = DatasetWriter(tmp_path / "ds", 3, tile_size=2, level=1, threads=1)
    counted = []
    for rows in (5, 1, 4):
        writer.write(np.ones((rows, 3)))
        counted.append(writer.n_cells)
    writer.close()
    assert counted == [5, 6, 10]


def test_bad_count_names_source_gene(tmp_path):
    # Errors name the column of the user's matrix, not the reordered output column.
    with pytest.raises(ValueError, match=r"cell 2, gene 3 "):
        _write_blocks(tmp_path / "ds", [_block_with(0.25, np.float64)], 5, gene_order=np.array([4, 3, 2, 1, 0]))


def test_bad_count_without_context_manager_leaves_writer_usable(tmp_path, assert_csr_equals):
    writer = DatasetWriter(tmp_path / "ds", 5, tile_size=4, level=1)
    writer.write(np.ones((3, 5)))
    with pytest.raises(ValueError, match="cell 5, gene 3"):
        writer.write(_block_with(-1, np.int64))
    assert writer.n_cells == 3
    writer.write(np.full((2, 5), 2))
    writer.close()
    expected = np.vstack([np.ones((3, 5)), np.full((2, 5), 2)])
    assert_csr_equals(open_dataset(tmp_path / "ds").read_rows(), expected)


def test_first_offending_cell_is_named():
    with pytest.raises(ValueError, match=r"cell 0, gene 0 "):
        to_count_csr(np.array([[-1.0, 0.0], [0.0, 0.5]]))


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(np.ones((2, 5), dtype=np.complex128), id="complex-dense"),
        pytest.param(sparse.csr_matrix(np.ones((2, 5), dtype=np.complex64)), id="complex-sparse"),
        pytest.param(np.ones((2, 5), dtype=bool), id="bool-dense"),
        pytest.param(sparse.csr_matrix(np.ones((2, 5), dtype=bool)), id="bool-sparse"),
    ],
)
def test_bad_dtype_rejected(tmp_path, block):
    with pytest.raises(TypeError, match=r"integer or float dtype.*layer="):
        _write_blocks(tmp_path / "ds", [block], 5)
    assert not (tmp_path / "ds" / "manifest.json").exists()


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(np.ones((2, 5), dtype=object), id="object"),
        pytest.param(np.full((2, 5), "1"), id="str"),
    ],
)
def test_object_dtype_rejected_with_type_error(tmp_path, block):
    with pytest.raises(TypeError, match=r"dtype.*layer="):
        _write_blocks(tmp_path / "ds", [block], 5)


@pytest.mark.parametrize(
    ("block", "match"),
    [
        pytest.param(np.ones((3, 6)), "6 columns, expected 5", id="dense-too-wide"),
        pytest.param(sparse.csr_matrix((3, 4)), "4 columns, expected 5", id="sparse-too-narrow"),
        pytest.param(np.ones(5), "two-dimensional", id="1d"),
        pytest.param(np.ones((2, 2, 5)), "two-dimensional", id="3d"),
    ],
)
def test_wrong_shape_rejected(tmp_path, block, match):
    with pytest.raises(ValueError, match=match):
        _write_blocks(tmp_path / "ds", [np.ones((2, 5)), block], 5)
    assert not (tmp_path / "ds" / "manifest.json").exists()


@pytest.mark.parametrize(
    ("options", "match"),
    [
        pytest.param({"n_genes": 0}, "n_genes", id="no-genes"),
        pytest.param({"n_genes": 2**31 + 1}, "n_genes", id="too-many-genes"),
        pytest.param({"tile_size": 0}, "tile_size", id="tile_size-0"),
        pytest.param({"n_chunks": 0}, "n_chunks", id="n_chunks-0"),
        pytest.param({"gene_order": np.array([0, 1, 2, 2, 4])}, "gene_order", id="gene_order-repeat"),
        pytest.param({"gene_order": np.arange(4)}, "gene_order", id="gene_order-short"),
        pytest.param({"gene_order": np.arange(5.0)}, "gene_order", id="gene_order-float"),
        pytest.param({"gene_order": np.arange(1, 6)}, "gene_order", id="gene_order-out-of-range"),
        pytest.param({"var_names": ["a", "b"]}, "var_names", id="var_names-short"),
        pytest.param({"var_names": ["a", "b", "c\nd", "e", "f"]}, "line break", id="var_names-newline"),
        pytest.param({"var_names": ["a", "b", "c", "d\r", "e"]}, "line break", id="var_names-cr"),
    ],
)
def test_bad_options_rejected_before_anything_is_written(tmp_path, options, match):
    arguments = {"n_genes": 5, **options}
    n_genes = arguments.pop("n_genes")
    with pytest.raises(ValueError, match=match):
        DatasetWriter(tmp_path / "ds", n_genes, **arguments)
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize(
    "metadata",
    [
        pytest.param({"a": object()}, id="object"),
        pytest.param({"a": {1, 2}}, id="set"),
        pytest.param({"a": np.int64(3)}, id="numpy-int"),
        pytest.param([1, 2], id="list"),
        pytest.param("text", id="str"),
    ],
)
def test_bad_metadata_rejected(tmp_path, metadata):
    with pytest.raises(TypeError, match="metadata"):
        DatasetWriter(tmp_path / "ds", 5, metadata=metadata)
    assert not (tmp_path / "ds").exists()


# ---------------------------------------------------------------------------------------------- gene order


def test_gene_order_applied(tmp_path, counts, assert_csr_equals):
    order = np.random.default_rng(4).permutation(N_GENES)
    names = [f"gene-{i}-é" for i in range(N_GENES)]
    path = tmp_path / "ds"
    _write_blocks(path, [counts[:13], counts[13:]], N_GENES, tile_size=TILE, gene_order=order, var_names=names)
    ds = open_dataset(path)
    assert_csr_equals(ds.read_rows(dtype=np.int64), counts.toarray()[:, order], np.int64)
    assert ds.manifest.has_gene_order
    assert ds.manifest.has_var_names
    stored = np.load(path / "gene_order.npy", allow_pickle=False)
    assert stored.dtype == np.dtype("<i4")
    np.testing.assert_array_equal(stored, order)
    np.testing.assert_array_equal(ds.gene_permutation(), order)
    lines = (path / "var_names.txt").read_text(encoding="utf-8").split("\n")
    assert lines == [names[i] for i in order] + [""]
    assert ds.var_names() == [names[i] for i in order]


def test_gene_order_list_and_identity(tmp_path, counts, reference):
    path = tmp_path / "ds"
    _write_blocks(path, [counts], N_GENES, tile_size=TILE, gene_order=list(range(N_GENES)))
    files = _files(path)
    assert files.keys() == reference.keys() | {"gene_order.npy"}
    assert {k: v for k, v in files.items() if k.startswith("tiles/")} == {
        k: v for k, v in reference.items() if k.startswith("tiles/")
    }


def test_no_gene_order_keeps_names_in_source_order(tmp_path, counts, assert_csr_equals):
    names = np.array([f"g{i}" for i in range(N_GENES)])
    path = tmp_path / "ds"
    _write_blocks(path, [counts], N_GENES, tile_size=TILE, var_names=names)
    ds = open_dataset(path)
    assert not (path / "gene_order.npy").exists()
    assert ds.gene_permutation() is None
    assert ds.var_names() == names.tolist()
    assert_csr_equals(ds.read_rows(), counts.toarray())


def test_gene_order_with_wide_matrix(tmp_path, assert_csr_equals):
    n_genes = 70_000
    order = np.random.default_rng(0).permutation(n_genes)
    dense_rows = [[0, 69_999], [5, 40_000, 65_536], [], [69_998]]
    rows, cols = zip(*[(r, c) for r, cs in enumerate(dense_rows) for c in cs], strict=True)
    block = sparse.csr_matrix((np.arange(1, len(rows) + 1), (rows, cols)), shape=(4, n_genes))
    _write_blocks(tmp_path / "ds", [block], n_genes, gene_order=order)
    result = open_dataset(tmp_path / "ds").read_rows(dtype=np.int64)
    assert (result != block[:, order]).nnz == 0


# ---------------------------------------------------------------------------------------------- overwrite


def _small(path: Any, rows: int = 7, **options: Any) -> None:
    _write_blocks(path, [np.ones((rows, 3), dtype=np.int64)], 3, tile_size=2, **options)


def test_existing_dataset_needs_overwrite(tmp_path):
    path = tmp_path / "ds"
    _small(path)
    before = _files(path)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        DatasetWriter(path, 3)
    assert _files(path) == before


def test_overwrite_replaces_dataset(tmp_path, assert_csr_equals):
    path = tmp_path / "ds"
    _small(path, rows=9, gene_order=np.array([2, 0, 1]), var_names=["a", "b", "c"])
    assert len(list((path / "tiles").iterdir())) == 5
    _write_blocks(path, [np.full((3, 3), 4)], 3, tile_size=2, overwrite=True)
    assert sorted(_files(path)) == ["manifest.json", "tiles/tile_000000.dct", "tiles/tile_000001.dct"]
    ds = open_dataset(path)  # the old gene_order.npy / var_names.txt are gone, so the flags agree
    assert ds.shape == (3, 3)
    assert ds.gene_permutation() is None
    assert_csr_equals(ds.read_rows(), np.full((3, 3), 4))


def test_unfinished_dataset(tmp_path):
    path = tmp_path / "ds"
    _small(path)
    (path / "manifest.json").unlink()
    with pytest.raises(FileExistsError, match="unfinished"):
        DatasetWriter(path, 3)
    _small(path, rows=1, overwrite=True)
    assert open_dataset(path).n_cells == 1


@pytest.mark.parametrize("overwrite", [False, True])
def test_unrelated_files_are_never_overwritten(tmp_path, overwrite):
    path = tmp_path / "precious"
    path.mkdir()
    (path / "notes.txt").write_text("keep me")
    (path / "data").mkdir()
    with pytest.raises(FileExistsError, match="not a deltacells dataset|other files"):
        DatasetWriter(path, 3, overwrite=overwrite)
    assert (path / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in path.iterdir()) == ["data", "notes.txt"]


@pytest.mark.parametrize("overwrite", [False, True])
def test_path_is_a_file(tmp_path, overwrite):
    path = tmp_path / "file"
    path.write_text("x")
    with pytest.raises(FileExistsError, match="not a directory"):
        DatasetWriter(path, 3, overwrite=overwrite)
    assert path.read_text() == "x"


def test_empty_directory_is_fine(tmp_path):
    path = tmp_path / "empty"
    path.mkdir()
    _small(path)
    assert open_dataset(path).n_cells == 7


def test_overwrite_rules_on_memory(memory_url):
    _small(memory_url)
    with pytest.raises(FileExistsError):
        DatasetWriter(memory_url, 3)
    _small(memory_url, rows=2, overwrite=True)
    ds = open_dataset(memory_url)
    assert ds.shape == (2, 3)
    assert FsspecStore(memory_url).list("tiles") == ["tile_000000.dct"]


# ---------------------------------------------------------------------------------------------- abort


class Boom(Exception):
    pass


def _write_then_fail(path: Any) -> None:
    with DatasetWriter(path, 3, tile_size=2, level=1, gene_order=[1, 0, 2], var_names=["a", "b", "c"]) as writer:
        writer.write(np.ones((9, 3)))
        msg = "failure in the caller's loop"
        raise Boom(msg)


def test_exception_in_context_aborts(tmp_path):
    path = tmp_path / "ds"
    with pytest.raises(Boom):
        _write_then_fail(path)
    assert not path.exists()  # the writer made the folder: it goes too
    with pytest.raises(FormatError, match="no manifest"):
        open_dataset(path)
    path.mkdir()  # a folder that was there before stays, empty
    with pytest.raises(Boom):
        _write_then_fail(path)
    assert path.is_dir() and list(path.iterdir()) == []


def test_exception_in_context_aborts_on_memory(memory_url):
    with pytest.raises(Boom):
        _write_then_fail(memory_url)
    store = FsspecStore(memory_url)
    assert not store.exists("manifest.json")
    assert not store.exists("tiles")
    assert store.list() == []


def test_abort_then_write_again(tmp_path):
    path = tmp_path / "ds"
    writer = DatasetWriter(path, 3, tile_size=2, level=1)
    writer.write(np.ones((5, 3)))
    writer.abort()
    assert not (path / "tiles").exists()
    with pytest.raises(ValueError, match="closed"):
        writer.write(np.ones((1, 3)))
    writer.abort()  # a second abort is harmless
    _small(path)  # no leftovers: the path is free again
    assert open_dataset(path).n_cells == 7


def test_abort_after_close_keeps_the_dataset(tmp_path):
    path = tmp_path / "ds"
    writer = DatasetWriter(path, 3, tile_size=2, level=1)
    writer.write(np.ones((5, 3)))
    first = writer.close()
    assert writer.close() is first
    writer.abort()
    assert open_dataset(path).n_cells == 5
    with pytest.raises(ValueError, match="closed"):
        writer.write(np.ones((1, 3)))


def test_close_after_failed_write_writes_no_manifest(tmp_path):
    path = tmp_path / "ds"
    block = np.ones((10, 600), dtype=np.int64)
    block[:2] = 70_000  # tile 0: 1200 counts above 65535, more than the policy allows
    writer = DatasetWriter(path, 600, tile_size=2, level=1, threads=1)
    with pytest.raises(ValueError, match="exceptions"):
        writer.write(block)
    with contextlib.suppress(ValueError):
        writer.close()
    assert not (path / "manifest.json").exists()


# ---------------------------------------------------------------------------------------------- manifest


def test_manifest_written_last(tmp_path, monkeypatch):
    names: list[str] = []
    original = FsspecStore.write

    def recording(self, name, data):
        names.append(name)
        return original(self, name, data)

    monkeypatch.setattr(FsspecStore, "write", recording)
    path = tmp_path / "ds"
    _write_blocks(
        path, [np.ones((5, 4)), np.ones((9, 4))], 4, tile_size=3, gene_order=[3, 2, 1, 0], var_names=list("abcd")
    )
    assert names[-1] == "manifest.json"
    assert names.count("manifest.json") == 1
    assert sorted(names[:-1]) == ["gene_order.npy"] + [f"tiles/tile_{i:06d}.dct" for i in range(5)] + ["var_names.txt"]
    assert not [p for p in path.rglob("*") if p.name.endswith(".tmp")]


def test_manifest_fields(tmp_path, counts):
    path = tmp_path / "ds"
    metadata = {"source": "test", "nested": {"list": [1, 2.5, None, True], "text": "ünïcode"}, "empty": {}}
    with DatasetWriter(path, N_GENES, tile_size=TILE, n_chunks=3, level=2, metadata=metadata) as writer:
        writer.write(counts)
    returned = writer.manifest
    ds = open_dataset(path)
    m = ds.manifest
    assert m.to_dict() == returned.to_dict()
    doc = json.loads((path / "manifest.json").read_text())
    assert doc["format"] == "deltacells-dataset"
    assert doc["version"] == 2
    assert doc["metadata"] == {**metadata, "deltacells": {"dtype": str(counts.dtype)}}  # the blocks' dtype beside
    assert (m.n_cells, m.n_genes, m.tile_size, m.n_chunks, m.zstd_level) == (N_CELLS, N_GENES, TILE, 3, 2)
    assert m.tile_cells.tolist() == [8] * 6 + [5]
    assert (m.has_gene_order, m.has_var_names, m.has_var_table, m.has_obs) == (False, False, False, False)
    bounds = np.arange(0, N_CELLS + TILE, TILE).clip(max=N_CELLS)
    for t in range(m.n_tiles):
        blob = (path / "tiles" / f"tile_{t:06d}.dct").read_bytes()
        assert len(blob) == m.tile_bytes[t]
        tile = deltacells.decode_tile(blob)
        assert tile.n_cells == m.tile_cells[t]
        assert tile.nnz == m.tile_nnz[t] == counts[bounds[t] : bounds[t + 1]].nnz
        assert tile.n_genes == N_GENES
    assert m.nnz == counts.nnz


def test_metadata_is_copied(tmp_path):
    metadata = {"a": [1]}
    writer = DatasetWriter(tmp_path / "ds", 2, metadata=metadata, level=1)
    metadata["a"].append(2)
    writer.close()
    assert open_dataset(tmp_path / "ds").manifest.metadata == {"a": [1]}


def test_default_options(tmp_path, counts, assert_csr_equals):
    path = tmp_path / "ds"
    with DatasetWriter(path, N_GENES) as writer:
        writer.write(counts)
    m = open_dataset(path).manifest
    assert m.zstd_level == DEFAULT_LEVEL
    assert m.n_chunks == DEFAULT_N_CHUNKS == 24
    assert m.tile_size == DEFAULT_TILE_SIZE == 2048
    assert m.tile_cells.tolist() == [N_CELLS]
    assert m.metadata == {"deltacells": {"dtype": str(counts.dtype)}}
    assert_csr_equals(open_dataset(path).read_rows(), counts.toarray())


def test_zero_cell_dataset(tmp_path):
    path = tmp_path / "ds"
    with DatasetWriter(path, 6, level=1, var_names=list("abcdef")) as writer:
        writer.write(np.zeros((0, 6)))
    ds = open_dataset(path)
    assert ds.shape == (0, 6)
    assert ds.n_tiles == 0
    assert ds.manifest.tile_cells.tolist() == []
    result = ds.read_rows()
    assert isinstance(result, sparse.csr_matrix)
    assert result.shape == (0, 6)
    assert result.nnz == 0
    assert ds.read_rows(np.zeros(0, dtype=bool)).shape == (0, 6)
    assert ds.var_names() == list("abcdef")


def test_zero_cell_dataset_without_any_write(tmp_path):
    writer = DatasetWriter(tmp_path / "ds", 2, level=1)
    manifest = writer.close()
    assert manifest.n_cells == 0
    assert open_dataset(tmp_path / "ds").read_rows().shape == (0, 2)


def test_big_counts_and_big_gaps_round_trip(tmp_path, assert_csr_equals):
    n_genes = 200_000
    cells = [[0, 199_999], [5, 70_000, 150_000], [], [199_999], [65_535, 65_536, 131_077], [131_071]]
    values = [1, 70_000, 2, 3, 2**31 - 1, 4, 5, 65_535, 65_536, 7]
    rows, cols = zip(*[(r, c) for r, cs in enumerate(cells) for c in cs], strict=True)
    block = sparse.csr_matrix((np.array(values, dtype=np.int64), (rows, cols)), shape=(len(cells), n_genes))
    path = tmp_path / "ds"
    _write_blocks(path, [block[:1], block[1:]], n_genes, tile_size=4, n_chunks=2)
    ds = open_dataset(path)
    assert ds.manifest.tile_nnz.tolist() == [6, 4]
    expected = block.toarray()
    for dtype in (np.int64, np.int32, np.float64):
        assert_csr_equals(ds.read_rows(dtype=dtype), expected, dtype)
    assert_csr_equals(ds.read_rows([5, 4], dtype=np.float32), expected[[5, 4]], np.float32)  # tile 1: none above 2^24


# ---------------------------------------------------------------------------------------------- exception policy


def _write_in_context(path: Any, blocks: list[Any], n_genes: int, **options: Any) -> None:
    _write_blocks(path, blocks, n_genes, **options)


@pytest.mark.parametrize(
    ("tile_size", "threads"),
    [
        pytest.param(2048, None, id="last-tile"),
        pytest.param(2, 1, id="early-tile-one-thread"),
        pytest.param(2, 2, id="early-tile-two-threads"),
    ],
)
def test_too_many_count_exceptions(tmp_path, tile_size, threads):
    block = np.ones((12, 600), dtype=np.int64)
    block[:2] = 70_000  # 1200 counts above 65535 in the first two cells
    path = tmp_path / "ds"
    with pytest.raises(ValueError, match=r"tile_000000\.dct: 1200 count exceptions .*limit of 1024.*layer="):
        _write_in_context(path, [block[:4], block[4:]], 600, tile_size=tile_size, threads=threads)
    assert not (path / "manifest.json").exists()
    assert not (path / "tiles").exists()


def test_too_many_gap_exceptions(tmp_path):
    n_genes = 100_000
    block = sparse.csr_matrix(
        (np.ones(1100, dtype=np.int64), (np.arange(1100), np.full(1100, 70_000))), shape=(1100, n_genes)
    )
    path = tmp_path / "ds"
    with pytest.raises(ValueError, match=r"1100 gap exceptions"):
        _write_in_context(path, [block], n_genes)
    assert not (path / "manifest.json").exists()


def test_exception_limit_is_inclusive(tmp_path, assert_csr_equals):
    block = np.ones((4, 512), dtype=np.int64)
    block[:2] = 65_536  # exactly 1024 count exceptions: allowed
    path = tmp_path / "ds"
    _write_blocks(path, [block], 512)
    assert_csr_equals(open_dataset(path).read_rows(dtype=np.int64), block, np.int64)
    block[2, 0] = 65_536  # 1025: refused
    with pytest.raises(ValueError, match="1025 count exceptions"):
        _write_in_context(tmp_path / "other", [block], 512)


def test_gene_order_npy_is_plain_int32(tmp_path):
    path = tmp_path / "ds"
    _small(path, gene_order=np.array([2, 0, 1], dtype=np.int64))
    raw = (path / "gene_order.npy").read_bytes()
    array = np.load(io.BytesIO(raw), allow_pickle=False)
    assert array.dtype.str == "<i4"
    assert array.tolist() == [2, 0, 1]
