"""The numpy versions of the decoder's kernels give what the compiled kernels give, on valid and broken input.

They serve the reads a process makes before numba's kernels are loaded (``deltacells._kernel_loading``); on
broken input they must find every problem the kernels find (the kernel then says which and where).
"""

from __future__ import annotations

import numpy as np
import pytest

from deltacells.codec import (
    CELL_HI,
    CELL_LO,
    CHUNK_ENTRY_SIZE,
    HEADER_SIZE,
    NNZ_HI,
    NNZ_LO,
    _codes,
    _kernels,
    _vectorised,
    check_tile_bytes,
    encode_tile,
)

#: Columns of the chunk table that the codec does not name (docs/format.md, "Chunk table").
GAPS_OFF, GAPS_LEN, VEXC_OFF, VEXC_LEN = 4, 5, 8, 9


def planes(numbers: np.ndarray) -> np.ndarray:
    """16-bit numbers as the format's two byte planes (the low bytes, then the high bytes)."""
    numbers = numbers.astype(np.int64)
    return np.concatenate([numbers & 255, numbers >> 8]).astype(np.uint8)


def chunk(rng: np.random.Generator, lengths: list[int], n_genes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(gaps, vals, indptr)`` of cells with ``lengths`` nonzeros: distinct sorted genes, counts 1..65534."""
    genes = [np.sort(rng.choice(n_genes, n, replace=False)) for n in lengths]
    gaps = np.concatenate([np.diff(g, prepend=0) for g in genes]) if genes else np.zeros(0, np.int64)
    counts = rng.integers(1, 65535, size=gaps.shape[0])
    indptr = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    return planes(gaps), planes(counts), indptr


def decode_both(gaps, vals, indptr, n_genes, columns=None, dtype=np.float32, lo=0, hi=None):
    hi = indptr.shape[0] - 1 if hi is None else hi
    n = int(indptr[hi] - indptr[lo])
    results = []
    for implementation in (_kernels, _vectorised):
        out = (np.full(n, -7, np.int32), np.full(n, -7, dtype))
        code, pos = implementation.decode_chunk(gaps, vals, indptr, lo, hi, int(indptr[lo]), n_genes, *out, columns)
        results.append((int(code), int(pos), *out))
    return results


@pytest.mark.parametrize("lengths", [[3, 0, 5, 1], [0, 0], [1], [40_000, 2], [300] * 20, []])
@pytest.mark.parametrize("mapped", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float64, np.int64])
def test_valid_chunks_decode_the_same(lengths: list[int], mapped: bool, dtype: type) -> None:
    rng = np.random.default_rng(len(lengths))
    n_genes = 60_000
    gaps, vals, indptr = chunk(rng, lengths, n_genes)
    columns = rng.permutation(n_genes).astype(np.int32) if mapped else None
    compiled, vectorised = decode_both(gaps, vals, indptr, n_genes, columns, dtype)
    assert compiled[:2] == vectorised[:2] == (_codes.OK, 0)
    np.testing.assert_array_equal(compiled[2], vectorised[2])
    np.testing.assert_array_equal(compiled[3], vectorised[3])
    assert vectorised[3].dtype == dtype


def test_a_chunk_in_the_middle_of_a_tile_decodes_the_same() -> None:
    rng = np.random.default_rng(5)
    gaps_all, vals_all, indptr = chunk(rng, [4, 6, 0, 3, 8, 2], 500)
    n, lo, hi = int(indptr[-1]), 2, 5  # cells 2..4: nonzeros 10..20
    a, b = int(indptr[lo]), int(indptr[hi])
    gaps = np.concatenate([gaps_all[a:b], gaps_all[n + a : n + b]])
    vals = np.concatenate([vals_all[a:b], vals_all[n + a : n + b]])
    compiled, vectorised = decode_both(gaps, vals, indptr, 500, lo=lo, hi=hi)
    assert compiled[:2] == vectorised[:2] == (_codes.OK, 0)
    np.testing.assert_array_equal(compiled[2], vectorised[2])


def _broken(kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    rng = np.random.default_rng(11)
    n_genes = 1000
    lengths = [5, 7, 0, 6]
    genes = [np.sort(rng.choice(n_genes, k, replace=False)) for k in lengths]
    gaps = np.concatenate([np.diff(g, prepend=0) for g in genes])
    counts = rng.integers(1, 100, size=gaps.shape[0])
    if kind == "zero gap":
        gaps[8] = 0  # inside cell 1
    elif kind == "gene too far":
        gaps[11] += n_genes  # cell 1's last gene
    elif kind == "far only in its last cell":
        gaps[-1] = n_genes
    elif kind == "zero count":
        counts[13] = 0
    indptr = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    return planes(gaps), planes(counts), indptr, n_genes


@pytest.mark.parametrize("kind", ["zero gap", "gene too far", "far only in its last cell", "zero count"])
def test_broken_chunks_report_the_same_problem(kind: str) -> None:
    gaps, vals, indptr, n_genes = _broken(kind)
    compiled, vectorised = decode_both(gaps, vals, indptr, n_genes)
    assert compiled[0] != _codes.OK
    assert vectorised[:2] == compiled[:2]


def test_a_first_gap_of_zero_is_gene_zero() -> None:
    gaps, vals, indptr = planes(np.array([0, 3, 0, 1])), planes(np.array([1, 2, 3, 4])), np.array([0, 2, 4])
    compiled, vectorised = decode_both(gaps, vals, indptr.astype(np.int64), 10)
    assert vectorised[:2] == compiled[:2] == (_codes.OK, 0)
    np.testing.assert_array_equal(vectorised[2], [0, 3, 0, 1])


# ---------------------------------------------------------------------- the chunk table


def _table_case() -> tuple[np.ndarray, np.ndarray, tuple[np.uint64, ...]]:
    rng = np.random.default_rng(2)
    n_cells = 50
    lengths = rng.integers(0, 30, size=n_cells)
    indptr = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    indices = np.concatenate([np.sort(rng.choice(100, k, replace=False)) for k in lengths]).astype(np.int32)
    data = rng.integers(1, 70_000, size=indices.shape[0]).astype(np.int32)  # some value exceptions
    tile = check_tile_bytes(encode_tile(indptr, indices, data, 100, n_chunks=4))
    sizes = (tile.header.n_cells, tile.header.nnz, tile.header.total_size)
    min_offset = HEADER_SIZE + CHUNK_ENTRY_SIZE * tile.header.n_chunks
    return tile.table.copy(), tile.indptr, (*(np.uint64(s) for s in sizes), np.uint64(min_offset))


def test_a_valid_table_passes_both() -> None:
    table, indptr, sizes = _table_case()
    assert _kernels.chunk_table_ok(table, indptr, *sizes) and _vectorised.chunk_table_ok(table, indptr, *sizes)
    assert _vectorised.chunk_table_ok(table[:0], indptr, *sizes)


@pytest.mark.parametrize(
    ("row", "column", "change"),
    [
        (0, CELL_LO, 1),
        (1, CELL_LO, 1),
        (2, CELL_HI, -1),
        (3, CELL_HI, 1),
        (1, NNZ_LO, 1),
        (3, NNZ_HI, 1),
        (0, GAPS_LEN, None),  # a required stream missing
        (1, GAPS_OFF, 10**9),  # beyond the object
        (2, GAPS_OFF, -(10**6)),  # into the header
        (0, VEXC_OFF, 10**9),  # an exception frame beyond the object (if present)
        (3, VEXC_LEN, 10**9),
    ],
)
def test_a_broken_table_fails_both(row: int, column: int, change: int | None) -> None:
    table, indptr, sizes = _table_case()
    if change is None:
        table[row, column] = 0
    else:
        table[row, column] = np.uint64(max(int(table[row, column]) + change, 0))
    expected = bool(_kernels.chunk_table_ok(table, indptr, *sizes))
    assert _vectorised.chunk_table_ok(table, indptr, *sizes) == expected
    if column not in (VEXC_OFF,):
        assert not expected


# ---------------------------------------------------------------------- sorting rows


@pytest.mark.parametrize("n_columns", [7, 300, 19_465, 100_000])
def test_rows_sort_the_same(n_columns: int) -> None:
    rng = np.random.default_rng(n_columns)
    lengths = [0, 1, 2, min(50, n_columns), 7, 0, min(200, n_columns)]
    indices = np.concatenate([rng.choice(n_columns, k, replace=False) for k in lengths]).astype(np.int32)
    indptr = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64) + 5  # an offset of 5
    data = rng.random(indices.shape[0]).astype(np.float32)
    results = []
    for implementation in (_kernels, _vectorised):
        i, d = indices.copy(), data.copy()
        implementation.sort_rows(indptr, 1, len(lengths), 5, i, d, n_columns)
        results.append((i, d))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])
    first_row = slice(0, lengths[0])
    np.testing.assert_array_equal(results[1][0][first_row], indices[first_row])  # row 0 left as it was
