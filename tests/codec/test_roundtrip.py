"""Round trips through the tile codec: decode(encode(m)) == m, chunk boundaries, threads, writer layout."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

import deltacells
import deltacells.codec._decode
import deltacells.codec._encode
from deltacells.codec import chunk_boundaries, work_units

if TYPE_CHECKING:
    from types import ModuleType

MAX_COUNT = 2**31 - 1
U16_MAX = 65535
HEADER = struct.Struct("<8sIIQQIIQQII")

PROPERTY = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class Csr(NamedTuple):
    """A count matrix in CSR form, as encode_tile takes it."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    n_genes: int


def make_csr(cells: list[list[tuple[int, int]]], n_genes: int) -> Csr:
    """Build a Csr from per-cell ``(gene, count)`` lists (genes increasing within a cell)."""
    indptr = np.zeros(len(cells) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(cell) for cell in cells], dtype=np.int64)
    indices = np.array([g for cell in cells for g, _ in cell], dtype=np.int64)
    data = np.array([v for cell in cells for _, v in cell], dtype=np.int64)
    return Csr(indptr, indices, data, n_genes)


def random_csr(rng: np.random.Generator, n_cells: int, n_genes: int, density: float, *, big: float = 0.0) -> Csr:
    """A random count matrix; ``big`` is the fraction of counts drawn from ``65536 .. 2^31 - 1``."""
    mask = rng.random((n_cells, n_genes)) < density
    rows, cols = np.nonzero(mask)
    counts = rng.geometric(0.3, rows.size).astype(np.int64)
    large = rng.random(rows.size) < big
    counts[large] = rng.integers(U16_MAX + 1, MAX_COUNT + 1, int(large.sum()))
    indptr = np.zeros(n_cells + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n_cells), out=indptr[1:])
    return Csr(indptr, cols.astype(np.int64), counts, n_genes)


def encode(m: Csr, **options: object) -> bytes:
    """Encode ``m`` (level 1 unless given)."""
    options.setdefault("level", 1)
    return deltacells.encode_tile(m.indptr, m.indices, m.data, m.n_genes, **options)


def assert_decodes_to(blob: bytes, m: Csr, **options: object) -> deltacells.DecodedTile:
    """Decode ``blob`` and check it gives exactly ``m``."""
    tile = deltacells.decode_tile(blob, **options)
    assert tile.indptr.dtype == np.int64
    assert tile.indices.dtype == np.int32
    assert tile.data.dtype == np.int32
    np.testing.assert_array_equal(tile.indptr, np.asarray(m.indptr).astype(np.int64), strict=True)
    np.testing.assert_array_equal(tile.indices, np.asarray(m.indices).astype(np.int32), strict=True)
    np.testing.assert_array_equal(tile.data, np.asarray(m.data).astype(np.int32), strict=True)
    assert tile.n_genes == m.n_genes
    assert tile.n_cells == len(m.indptr) - 1
    assert tile.nnz == len(m.indices)
    return tile


def gaps_of(m: Csr) -> np.ndarray:
    """The per-cell gaps FORMAT.md stores (first gap of a cell = its first gene)."""
    indices = np.asarray(m.indices, dtype=np.int64)
    gaps = np.diff(indices, prepend=0)
    starts = np.asarray(m.indptr[:-1], dtype=np.int64)[np.diff(m.indptr) > 0]
    gaps[starts] = indices[starts]
    return gaps


def chunk_table(blob: bytes) -> np.ndarray:
    """The chunk table of ``blob`` as ``(n_chunks, 12)`` integers."""
    n_chunks = HEADER.unpack_from(blob, 0)[6]
    return np.frombuffer(blob, dtype="<u8", count=12 * n_chunks, offset=64).reshape(n_chunks, 12).astype(np.int64)


def describe(m: Csr, n_chunks: int) -> None:
    """Record which edge cases an example covers (shown by ``--hypothesis-show-statistics``)."""
    n_cells = len(m.indptr) - 1
    big_gaps = gaps_of(m) > U16_MAX
    cell_of = np.repeat(np.arange(n_cells), np.diff(np.asarray(m.indptr, dtype=np.int64)))
    event(f"n_cells == 0: {n_cells == 0}")
    event(f"empty cell: {bool(np.any(np.diff(m.indptr) == 0))}")
    event(f"n_genes == 1: {m.n_genes == 1}")
    event(f"n_chunks > n_cells: {n_chunks > n_cells}")
    event(f"gap exception: {bool(big_gaps.any())}")
    event(f"several gap exceptions in a cell: {bool(np.any(np.bincount(cell_of[big_gaps]) >= 2))}")
    event(f"count exception: {bool(np.any(np.asarray(m.data, dtype=np.int64) > U16_MAX))}")
    event(f"count 65535: {bool(np.any(np.asarray(m.data, dtype=np.int64) == U16_MAX))}")
    event(f"count 2^31 - 1: {bool(np.any(np.asarray(m.data, dtype=np.int64) == MAX_COUNT))}")


# --------------------------------------------------------------------------------------------------------------------
# strategies

SPECIAL_GENES = [0, 1, 65_534, 65_535, 65_536, 65_537, 131_070, 131_071, 2**31 - 1]
SPECIAL_GAPS = [65_534, 65_535, 65_536, 65_537, 131_071, 200_000]
SPECIAL_COUNTS = [1, 65_534, 65_535, 65_536, 65_537, MAX_COUNT - 1, MAX_COUNT]


@st.composite
def count_matrices(draw: st.DrawFn, max_cells: int = 20, max_cell_nnz: int = 10) -> Csr:
    """Random CSR count matrices, biased towards the edges of the format (uint16 limits, exceptions, empty cells)."""
    kind = draw(st.sampled_from(["one", "small", "large", "large", "large", "special"]))
    gene_counts = {
        "one": st.just(1),
        "small": st.integers(1, 40),
        "large": st.integers(65_537, 400_000),
        "special": st.sampled_from([65_535, 65_536, 65_537, 2**31]),
    }
    n_genes = draw(gene_counts[kind])
    n_cells = draw(st.integers(0, max_cells))
    first_gene = st.one_of(st.just(0), st.integers(0, n_genes - 1), st.sampled_from(SPECIAL_GENES))
    gap = st.one_of(st.integers(1, 3), st.integers(1, 400), st.sampled_from(SPECIAL_GAPS), st.integers(1, n_genes))
    count = st.one_of(
        st.integers(1, 8), st.integers(1, U16_MAX), st.sampled_from(SPECIAL_COUNTS), st.integers(1, MAX_COUNT)
    )
    cells = []
    for _ in range(n_cells):
        size = draw(st.one_of(st.just(0), st.integers(0, max_cell_nnz)))
        if size == 0:
            cells.append([])
            continue
        genes = [draw(first_gene) % n_genes]
        for step in draw(st.lists(gap, min_size=size - 1, max_size=size - 1)):
            if genes[-1] + step >= n_genes:
                break
            genes.append(genes[-1] + step)
        values = draw(st.lists(count, min_size=len(genes), max_size=len(genes)))
        cells.append(list(zip(genes, values, strict=True)))
    m = make_csr(cells, n_genes)
    indptr_dtype = draw(st.sampled_from([np.int64, np.int32, np.uint64]))
    indices_dtype = draw(st.sampled_from([np.int64, np.int32, np.uint32]))
    data_dtype = draw(st.sampled_from([np.int64, np.int32, np.uint32, np.uint64]))
    return Csr(m.indptr.astype(indptr_dtype), m.indices.astype(indices_dtype), m.data.astype(data_dtype), n_genes)


@st.composite
def indptrs(draw: st.DrawFn) -> np.ndarray:
    """Row pointers with empty cells, uniform cells and a few heavy ones."""
    cell_nnz = st.one_of(st.just(0), st.integers(0, 5), st.integers(0, 2000))
    sizes = draw(st.lists(cell_nnz, max_size=300))
    return np.concatenate(([0], np.cumsum(sizes, dtype=np.int64))).astype(np.int64)


SEVERAL_GAP_EXCEPTIONS = make_csr(
    [
        [(0, 1), (65_536, 2), (131_072, 65_535), (300_000, 65_536)],
        [],
        [(299_999, MAX_COUNT)],
        [(70_000, 3), (70_001, 4)],
    ],
    300_001,
)
EMPTY_CELLS = make_csr([[], [], [], []], 5)
ZERO_CELLS = make_csr([], 7)
ONE_GENE = make_csr([[(0, 65_535)], [], [(0, 65_536)], [(0, MAX_COUNT)]], 1)
MAX_GENES = make_csr([[(0, 1), (2**31 - 1, 2)], [(2**31 - 1, MAX_COUNT)], [(65_535, 1), (2**31 - 2, 9)]], 2**31)


# --------------------------------------------------------------------------------------------------------------------
# round trips


@PROPERTY
@given(m=count_matrices(), n_chunks=st.one_of(st.integers(1, 8), st.integers(1, 40)))
@example(m=SEVERAL_GAP_EXCEPTIONS, n_chunks=1)
@example(m=SEVERAL_GAP_EXCEPTIONS, n_chunks=3)
@example(m=EMPTY_CELLS, n_chunks=8)
@example(m=ZERO_CELLS, n_chunks=8)
@example(m=ONE_GENE, n_chunks=2)
@example(m=MAX_GENES, n_chunks=2)
def test_roundtrip(m: Csr, n_chunks: int) -> None:
    """decode(encode(m)) gives back m exactly, with min(n_chunks, n_cells) chunks."""
    describe(m, n_chunks)
    blob = encode(m, n_chunks=n_chunks)
    header = HEADER.unpack(blob[:64])
    n_cells = len(m.indptr) - 1
    assert header[6] == min(n_chunks, n_cells)
    assert (header[3], header[4], header[5]) == (n_cells, len(m.indices), m.n_genes)
    assert header[8] == len(blob)
    assert_decodes_to(blob, m, threads=1)


@PROPERTY
@given(m=count_matrices(), n_chunks=st.integers(1, 12))
@example(m=SEVERAL_GAP_EXCEPTIONS, n_chunks=2)
def test_writer_layout(m: Csr, n_chunks: int) -> None:
    """The writer lays streams out as DECISIONS.md 3 and 4 say, with exception frames exactly where needed."""
    blob = encode(m, n_chunks=n_chunks)
    table = chunk_table(blob)
    indptr = np.asarray(m.indptr, dtype=np.int64)
    bounds = chunk_boundaries(indptr, n_chunks)
    np.testing.assert_array_equal(table[:, 0], bounds[:-1])
    np.testing.assert_array_equal(table[:, 1], bounds[1:])
    np.testing.assert_array_equal(table[:, 2], indptr[bounds[:-1]])
    np.testing.assert_array_equal(table[:, 3], indptr[bounds[1:]])
    gaps = gaps_of(m)
    data = np.asarray(m.data, dtype=np.int64)
    indptr_off = HEADER.unpack_from(blob, 0)[7]
    assert indptr_off == (64 + 96 * len(table) + 7) // 8 * 8
    expected_next = (indptr_off + 8 * len(indptr) + 7) // 8 * 8
    for c, row in enumerate(table):
        lo, hi = int(row[2]), int(row[3])
        has_vexc = bool(np.any(data[lo:hi] > U16_MAX))
        has_gexc = bool(np.any(gaps[lo:hi] > U16_MAX))
        assert (row[9] > 0) == has_vexc, f"chunk {c}: vexc frame present iff a count is above 65535"
        assert (row[11] > 0) == has_gexc, f"chunk {c}: gexc frame present iff a gap is above 65535"
        for off, length in ((row[4], row[5]), (row[6], row[7]), (row[8], row[9]), (row[10], row[11])):
            if length == 0:
                assert off == 0, "absent exception frames have offset 0"
                continue
            assert off == expected_next, "streams follow each other in order, 8-byte aligned"
            expected_next = (int(off + length) + 7) // 8 * 8
    if len(table):
        last_end = max(int(row[o] + row[o + 1]) for row in table for o in (4, 6, 8, 10) if row[o + 1])
        assert len(blob) == last_end
    else:
        assert len(blob) == indptr_off + 8 * len(indptr)


@PROPERTY
@given(m=count_matrices(max_cells=12, max_cell_nnz=6), n_chunks=st.integers(1, 6))
def test_threads_identical(m: Csr, n_chunks: int) -> None:
    """threads=1 and threads=None encode to the same bytes and decode to the same arrays."""
    blob = encode(m, n_chunks=n_chunks, threads=1)
    assert encode(m, n_chunks=n_chunks, threads=None) == blob
    one = assert_decodes_to(blob, m, threads=1)
    default = assert_decodes_to(blob, m, threads=None)
    for field in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(one, field), getattr(default, field), strict=True)


# --------------------------------------------------------------------------------------------------------------------
# chunk boundaries


@settings(max_examples=200, deadline=None, database=None)
@given(indptr=indptrs(), n_chunks=st.one_of(st.integers(1, 10), st.integers(1, 400)))
@example(indptr=np.array([0], dtype=np.int64), n_chunks=8)
@example(indptr=np.array([0, 0, 0, 0, 0, 10], dtype=np.int64), n_chunks=4)
@example(indptr=np.array([0, 100, 100, 100, 100], dtype=np.int64), n_chunks=4)
def test_chunk_boundaries(indptr: np.ndarray, n_chunks: int) -> None:
    """Boundaries start at 0, end at n_cells, increase strictly, and give chunks of roughly equal nonzeros."""
    bounds = chunk_boundaries(indptr, n_chunks)
    n_cells = len(indptr) - 1
    k = min(n_chunks, n_cells)
    assert bounds.dtype == np.int64
    assert len(bounds) == k + 1
    assert bounds[0] == 0
    assert bounds[-1] == n_cells
    assert np.all(np.diff(bounds) > 0), "every chunk holds at least one cell"
    if k:
        chunk_nnz = np.diff(indptr[bounds])
        max_cell = int(np.diff(indptr).max())
        assert chunk_nnz.max() <= indptr[-1] / k + max_cell, "no chunk exceeds its share by more than one cell"


def test_chunk_boundaries_balanced() -> None:
    """With many small cells, every chunk is within one cell of nnz / n_chunks."""
    rng = np.random.default_rng(7)
    for n_chunks in (2, 3, 8, 13):
        sizes = rng.integers(0, 20, 5000)
        indptr = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        bounds = chunk_boundaries(indptr, n_chunks)
        chunk_nnz = np.diff(indptr[bounds])
        assert len(chunk_nnz) == n_chunks
        assert np.all(np.abs(chunk_nnz - indptr[-1] / n_chunks) <= sizes.max() + 1), chunk_nnz


def test_chunk_boundaries_more_chunks_than_cells() -> None:
    """Asking for more chunks than cells gives one cell per chunk."""
    indptr = np.array([0, 5, 5, 9], dtype=np.int64)
    np.testing.assert_array_equal(chunk_boundaries(indptr, 8), [0, 1, 2, 3])
    np.testing.assert_array_equal(chunk_boundaries(indptr, 1), [0, 3])


# --------------------------------------------------------------------------------------------------------------------
# explicit cases at the default level


def test_docstring_example() -> None:
    """The example of decode_tile's docstring, at the default level."""
    m = Csr(np.array([0, 2, 2, 3]), np.array([1, 4, 0]), np.array([5, 1, 70000]), 6)
    tile = assert_decodes_to(deltacells.encode_tile(*m), m)
    assert tile.shape == (3, 6)
    np.testing.assert_array_equal(
        tile.to_csr().toarray(), np.array([[0, 5, 0, 0, 1, 0], [0] * 6, [70000, 0, 0, 0, 0, 0]], dtype=np.float32)
    )
    assert tile.to_csr().dtype == np.float32


@pytest.mark.parametrize(
    "m",
    [SEVERAL_GAP_EXCEPTIONS, EMPTY_CELLS, ZERO_CELLS, ONE_GENE, MAX_GENES],
    ids=["several_gap_exceptions", "empty_cells", "zero_cells", "one_gene", "max_genes"],
)
@pytest.mark.parametrize("n_chunks", [1, 2, 8])
def test_default_level_edge_cases(m: Csr, n_chunks: int) -> None:
    """Edge-case matrices round-trip at the default zstd level."""
    assert_decodes_to(deltacells.encode_tile(*m, n_chunks=n_chunks), m)


def test_default_level_random_with_exceptions() -> None:
    """A realistic tile with a few large counts and far genes round-trips at the default level."""
    rng = np.random.default_rng(1)
    m = random_csr(rng, 300, 400, 0.05, big=0.01)
    far = m.indices.copy()
    far[::97] += 100_000  # genes far beyond the others: gaps above 65535 (the cell's first gap or a later one)
    for c in range(len(m.indptr) - 1):
        far[m.indptr[c] : m.indptr[c + 1]].sort()
    m = Csr(m.indptr, far, m.data, 500_000)
    blob = deltacells.encode_tile(*m)
    table = chunk_table(blob)
    assert np.count_nonzero(table[:, 9]) > 0, "the test needs value exceptions"
    assert np.count_nonzero(table[:, 11]) > 0, "the test needs gap exceptions"
    assert_decodes_to(blob, m)


def test_encoding_is_deterministic_and_level_independent() -> None:
    """The same input encodes to the same bytes; other levels give other bytes with the same content."""
    m = random_csr(np.random.default_rng(2), 200, 300, 0.1)
    default = deltacells.encode_tile(*m)
    assert deltacells.encode_tile(*m) == default
    archive = deltacells.encode_tile(*m, level="archive")
    fast = deltacells.encode_tile(*m, level=1)
    assert len(fast) > len(archive)
    assert_decodes_to(default, m)
    assert_decodes_to(archive, m)
    assert_decodes_to(fast, m)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int16, np.uint32, np.int32, np.uint64, np.int64])
def test_input_dtypes(dtype: type) -> None:
    """Any integer dtype that holds the values is accepted for indices and data."""
    m = random_csr(np.random.default_rng(3), 20, 100, 0.2)
    cast = Csr(m.indptr.astype(np.int32), m.indices.astype(dtype), m.data.astype(dtype), m.n_genes)
    assert_decodes_to(encode(cast), m)


def test_indices_may_decrease_across_cells() -> None:
    """Only within a cell must genes increase; the next cell starts afresh."""
    m = make_csr([[(5, 1), (9, 2)], [(0, 3)], [(9, 4)], [(1, 5), (2, 6)]], 10)
    assert_decodes_to(encode(m, n_chunks=1), m)


def test_large_tile_parallel_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tile big enough for the parallel encoder and decoder gives the same bytes and arrays as one thread."""
    submitted = {"encode": 0, "decode": 0}

    def spy(module: ModuleType, key: str) -> None:
        real = module.shared_pool

        class Pool:
            def submit(self, *args: object) -> object:
                submitted[key] += 1
                return real().submit(*args)

        monkeypatch.setattr(module, "shared_pool", Pool)

    spy(deltacells.codec._encode, "encode")
    spy(deltacells.codec._decode, "decode")
    m = random_csr(np.random.default_rng(4), 3000, 2000, 0.05, big=0.0005)
    assert len(m.indices) >= 200_000, "must exceed the decoder's parallel threshold"
    blob = encode(m, threads=1)
    assert submitted == {"encode": 0, "decode": 0}
    assert encode(m, threads=4) == blob
    assert encode(m, threads=None) == blob
    assert submitted["encode"] > 0, "the parallel encoder was not exercised"
    assert_decodes_to(blob, m, threads=1)
    assert submitted["decode"] == 0
    for threads in (2, 4, None):
        assert_decodes_to(blob, m, threads=threads)
    assert submitted["decode"] > 0, "the parallel decoder was not exercised"


def test_work_units_group_small_chunks() -> None:
    """Consecutive chunks share a task until their nonzeros reach the bound; a large chunk is a task alone."""
    counts = [40, 40, 40, 150, 10, 0, 99, 1]
    table = np.zeros((len(counts), 12), dtype=np.uint64)
    table[:, deltacells.codec.NNZ_HI] = np.cumsum(counts)
    table[1:, deltacells.codec.NNZ_LO] = table[:-1, deltacells.codec.NNZ_HI]
    assert work_units(table, np.arange(8), min_nnz=100) == [[0, 1, 2], [3], [4, 5, 6], [7]]
    assert work_units(table, np.array([0, 3, 4, 7]), min_nnz=100) == [[0, 3], [4, 7]]
    assert work_units(table, np.arange(8), min_nnz=1) == [[0], [1], [2], [3], [4], [5, 6], [7]]  # 5 is empty
    assert work_units(table, np.arange(8), min_nnz=10**6) == [list(range(8))]
    assert work_units(table, np.arange(0)) == []


def test_many_small_chunks_decode_in_few_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A finely chunked tile decodes in tasks of about WORK_UNIT_NNZ nonzeros each, to the same arrays."""
    tasks: list[object] = []
    real = deltacells.codec._decode.shared_pool

    class Pool:
        def submit(self, *args: object) -> object:
            tasks.append(args[1])  # the chunks of the task
            return real().submit(*args)

    monkeypatch.setattr(deltacells.codec._decode, "shared_pool", Pool)
    m = random_csr(np.random.default_rng(5), 3000, 2000, 0.05)
    blob = encode(m, n_chunks=64, threads=1)
    assert_decodes_to(blob, m, threads=2)
    nnz = len(m.indices)
    assert nnz > 2 * deltacells.codec.WORK_UNIT_NNZ
    assert 2 <= len(tasks) <= -(-nnz // deltacells.codec.WORK_UNIT_NNZ)  # not 64 tasks
    assert sorted(c for task in tasks for c in task) == list(range(64))  # every chunk once
