"""Decoding some chunks of a tile from byte ranges: parse_prefix, TilePrefix, decode_chunks.

The oracle is ``decode_tile``: every row of a decoded chunk must equal the full decode's row, every other row must
be empty, and every fault the full decoder finds without the CRC-32 must be found from the ranges too.
"""

from __future__ import annotations

import pickle
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import deltacells
import deltacells.codec._partial
from deltacells import FormatError
from deltacells.codec import (
    DecodedTile,
    PrefixTooShortError,
    TileHeader,
    TilePrefix,
    decode_chunks,
    decode_tile,
    parse_prefix,
    prefix_size,
)
from deltacells.errors import DeltaCellsError, InvalidTypeError, InvalidValueError, OutOfRangeError

U16_MAX = 65535
MAX_COUNT = 2**31 - 1
HEADER = struct.Struct("<8sIIQQIIQQII")
KINDS = ("gaps", "vals", "vexc", "gexc")
CONFORMANCE = Path(__file__).parents[2].parent / "shared" / "conformance"

# ---------------------------------------------------------------------- helpers


def random_tile(
    seed: int,
    n_cells: int,
    n_genes: int,
    *,
    max_len: int = 40,
    empty: float = 0.2,
    big_counts: float = 0.0,
    far_genes: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A random count matrix in CSR form.

    ``empty``: fraction of empty cells; ``big_counts``: fraction of counts above 65535 (value exceptions);
    ``far_genes``: fraction of cells whose genes are spread over the whole gene range (gap exceptions when
    ``n_genes > 65536``).
    """
    rng = np.random.default_rng(seed)
    rows_indices, rows_data = [], []
    for _ in range(n_cells):
        length = 0 if rng.random() < empty else int(rng.integers(1, max_len + 1))
        span = n_genes if rng.random() < far_genes else min(n_genes, 3 * max_len)
        genes = np.unique(rng.integers(0, span, length))
        counts = rng.geometric(0.3, genes.size).astype(np.int64)
        large = rng.random(genes.size) < big_counts
        counts[large] = rng.integers(U16_MAX, MAX_COUNT + 1, int(large.sum()))
        rows_indices.append(genes)
        rows_data.append(counts)
    indptr = np.zeros(n_cells + 1, dtype=np.int64)
    np.cumsum([g.size for g in rows_indices], out=indptr[1:])
    indices = np.concatenate([np.empty(0, np.int64), *rows_indices])
    data = np.concatenate([np.empty(0, np.int64), *rows_data])
    return indptr, indices, data


def chunk_table(blob: bytes) -> np.ndarray:
    """The chunk table of ``blob`` as ``uint64[n_chunks, 12]``."""
    n_chunks = HEADER.unpack_from(blob, 0)[6]
    return np.frombuffer(blob, dtype="<u8", count=12 * n_chunks, offset=64).reshape(n_chunks, 12)


def fetch_prefix(blob: bytes, guess: int, *, name: str = "tile") -> tuple[TilePrefix, int]:
    """What a ranged reader does: fetch ``guess`` bytes, fetch more if told to. Returns the prefix and the fetches."""
    want, fetches = min(guess, len(blob)), 0
    while True:
        fetches += 1
        try:
            return parse_prefix(blob[:want], object_size=len(blob), name=name), fetches
        except PrefixTooShortError as exc:
            needed = exc.needed
        assert needed > want, "a refetch must ask for more bytes than it had"
        want = needed


def pieces_for(blob: bytes, prefix: TilePrefix, chunks: object, **options: int) -> list[tuple[int, bytes]]:
    """The byte pieces a ranged reader fetches for ``chunks``."""
    return [(start, blob[start:end]) for start, end in prefix.frame_ranges(chunks, **options)]


def expected_partial(full: DecodedTile, prefix: TilePrefix, chunks: np.ndarray) -> DecodedTile:
    """The full decode with the rows of the chunks not in ``chunks`` emptied (the oracle of decode_chunks)."""
    keep = np.zeros(full.n_cells, dtype=bool)
    for c in chunks:
        keep[int(prefix.table[c, 0]) : int(prefix.table[c, 1])] = True
    lengths = np.where(keep, np.diff(full.indptr), 0)
    indptr = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    mask = np.repeat(keep, np.diff(full.indptr))
    return DecodedTile(indptr, full.indices[mask], full.data[mask], full.n_genes)


def assert_partial(tile: DecodedTile, full: DecodedTile, prefix: TilePrefix, chunks: np.ndarray) -> None:
    """``tile`` is ``full`` with only the rows of ``chunks``, row by row."""
    want = expected_partial(full, prefix, np.asarray(chunks))
    np.testing.assert_array_equal(tile.indptr, want.indptr, strict=True)
    np.testing.assert_array_equal(tile.indices, want.indices, strict=True)
    np.testing.assert_array_equal(tile.data, want.data, strict=True)
    assert tile.n_genes == full.n_genes
    assert tile.shape == full.shape
    assert tile.complete == (len(set(np.asarray(chunks).tolist())) == prefix.n_chunks)
    assert tile.inexact_in_float32 == bool(want.data.size and want.data.max() > 2**24)
    for r in range(full.n_cells):  # row by row, as the reader uses them
        got = slice(tile.indptr[r], tile.indptr[r + 1])
        if tile.indptr[r + 1] > tile.indptr[r]:
            ref = slice(full.indptr[r], full.indptr[r + 1])
            np.testing.assert_array_equal(tile.indices[got], full.indices[ref])
            np.testing.assert_array_equal(tile.data[got], full.data[ref])


def with_empty_chunk(blob: bytes, after: int) -> bytes:
    """``blob`` re-laid out with a chunk of no cells inserted after chunk ``after`` (a valid tile, CRC fixed).

    The reference writer never makes such a chunk; the format allows it.
    """
    _, _, _, n_cells, nnz, n_genes, n_chunks, indptr_off, _, _, _ = HEADER.unpack_from(blob, 0)
    table = chunk_table(blob)
    indptr = blob[indptr_off : indptr_off + 8 * (n_cells + 1)]
    entries = []
    for c in range(n_chunks):
        row = table[c]
        frames = {k: blob[int(row[4 + 2 * i]) : int(row[4 + 2 * i] + row[5 + 2 * i])] for i, k in enumerate(KINDS)}
        entries.append((row[:4].tolist(), frames))
        if c == after:
            frame = zstandard.ZstdCompressor(level=3, write_content_size=True).compress(b"")  # the writer's frame
            empty = {"gaps": frame, "vals": frame, "vexc": b"", "gexc": b""}
            entries.append(([row[1], row[1], row[3], row[3]], empty))
    k = len(entries)
    new_indptr_off = 64 + 96 * k
    pos = (new_indptr_off + len(indptr) + 7) // 8 * 8
    new_table = np.zeros((k, 12), dtype="<u8")
    parts = []
    for c, (bounds, frames) in enumerate(entries):
        new_table[c, :4] = bounds
        for i, kind in enumerate(KINDS):
            if frames[kind]:
                new_table[c, 4 + 2 * i : 6 + 2 * i] = (pos, len(frames[kind]))
                parts.append((pos, frames[kind]))
                pos = (pos + len(frames[kind]) + 7) // 8 * 8
    total = parts[-1][0] + len(parts[-1][1])
    out = bytearray(total)
    out[64 : 64 + new_table.nbytes] = new_table.tobytes()
    out[new_indptr_off : new_indptr_off + len(indptr)] = indptr
    for offset, frame in parts:
        out[offset : offset + len(frame)] = frame
    crc = zlib.crc32(out[64:])
    HEADER.pack_into(out, 0, b"DELTACEL", 2, 0, n_cells, nnz, n_genes, k, new_indptr_off, total, crc, 0)
    return bytes(out)


def patch_table(blob: bytes, c: int, column: int, value: int) -> bytes:
    """``blob`` with one chunk-table field changed (CRC left stale: ranged reads cannot check it)."""
    out = bytearray(blob)
    struct.pack_into("<Q", out, 64 + 96 * c + 8 * column, value)
    return bytes(out)


# ---------------------------------------------------------------------- round trips against decode_tile

#: (seed, n_cells, n_genes, n_chunks, options for random_tile)
CASES = {
    "one_chunk": (1, 30, 500, 1, {}),
    "eight_chunks": (2, 400, 2000, 8, {}),
    "many_chunks": (3, 120, 300, 40, {"empty": 0.5}),
    "chunk_per_cell": (4, 12, 50, 12, {"empty": 0.4}),
    "all_empty": (5, 20, 10, 4, {"empty": 1.0}),
    "one_gene": (6, 50, 1, 5, {"max_len": 1}),
    "value_exceptions": (7, 300, 1000, 6, {"big_counts": 0.02}),
    "gap_exceptions": (8, 300, 200_000, 6, {"far_genes": 0.3, "big_counts": 0.01}),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> tuple[str, bytes, DecodedTile, int]:
    seed, n_cells, n_genes, n_chunks, options = CASES[request.param]
    indptr, indices, data = random_tile(seed, n_cells, n_genes, **options)
    blob = deltacells.encode_tile(indptr, indices, data, n_genes, n_chunks=n_chunks, level=1, threads=1)
    return request.param, blob, decode_tile(blob, threads=1), min(n_chunks, n_cells)


def test_cases_exercise_what_they_claim(case: tuple[str, bytes, DecodedTile, int]) -> None:
    """The generated tiles hold what the round trips are meant to cover."""
    label, blob, full, n_chunks = case
    table = chunk_table(blob)
    assert table.shape[0] == n_chunks
    if label == "chunk_per_cell":
        assert np.any(table[:, 3] == table[:, 2]), "a chunk with zero nonzeros"
    if label in ("value_exceptions", "gap_exceptions"):
        assert np.any(table[:, 9] > 0), "value exceptions (vexc)"
        assert full.data.max() > 2**24
    if label == "gap_exceptions":
        assert np.any(table[:, 11] > 0), "gap exceptions (gexc)"
    assert np.any(np.diff(full.indptr) == 0), "empty cells"


def test_prefix_of_our_writer(case: tuple[str, bytes, DecodedTile, int]) -> None:
    """prefix_size is exactly what our writer's prefix needs: one fetch, and the arrays are checked copies."""
    _, blob, full, n_chunks = case
    size = prefix_size(full.n_cells, n_chunks)
    prefix, fetches = fetch_prefix(blob, size)
    assert fetches == 1
    assert prefix.nbytes_needed == size
    assert prefix.n_cells == full.n_cells and prefix.n_chunks == n_chunks
    assert prefix.header.total_size == len(blob)
    np.testing.assert_array_equal(prefix.indptr, full.indptr, strict=True)
    np.testing.assert_array_equal(prefix.table, chunk_table(blob))
    assert prefix.indptr.dtype == np.int64 and prefix.table.dtype == np.uint64
    assert prefix.indptr.base is None and prefix.table.base is None  # copies: the fetched bytes can go
    assert not prefix.indptr.flags.writeable and not prefix.table.flags.writeable
    # The expected shape, when given, must match.
    parse_prefix(blob[:size], object_size=len(blob), n_cells=full.n_cells, n_chunks=n_chunks)
    # A prefix travels to workers with the rest of a reader.
    again = pickle.loads(pickle.dumps(prefix))
    assert again.header == prefix.header and again.frame_ranges(range(n_chunks)) == prefix.frame_ranges(range(n_chunks))


def test_every_chunk_alone_and_all(case: tuple[str, bytes, DecodedTile, int]) -> None:
    """Each chunk on its own, and all of them, against the full decode."""
    _, blob, full, n_chunks = case
    prefix, _ = fetch_prefix(blob, prefix_size(full.n_cells, n_chunks))
    for c in range(n_chunks):
        assert_partial(decode_chunks(prefix, pieces_for(blob, prefix, [c]), [c]), full, prefix, [c])
    everything = np.arange(n_chunks)
    tile = decode_chunks(prefix, pieces_for(blob, prefix, everything), everything)
    assert_partial(tile, full, prefix, everything)
    assert tile.complete


def test_random_subsets(case: tuple[str, bytes, DecodedTile, int]) -> None:
    """Random subsets of chunks (in any order, with repeats), pieces as a list or a dict, exact or merged ranges."""
    label, blob, full, n_chunks = case
    prefix, _ = fetch_prefix(blob, prefix_size(full.n_cells, n_chunks))
    rng = np.random.default_rng(len(label))
    for i in range(6):
        chunks = rng.choice(n_chunks, int(rng.integers(1, n_chunks + 1)), replace=True)
        pieces = pieces_for(blob, prefix, chunks, max_gap=[0, 4096, 10**9][i % 3])
        given_pieces = dict(pieces) if i % 2 else pieces[::-1]
        tile = decode_chunks(prefix, given_pieces, chunks)
        assert_partial(tile, full, prefix, np.unique(chunks))
        if len(np.unique(chunks)) < n_chunks:
            assert not tile.complete


def test_cells_to_chunks_to_rows(case: tuple[str, bytes, DecodedTile, int]) -> None:
    """The reader's path: cells -> chunks -> ranges -> rows of exactly those cells, as decode_tile gives them."""
    _, blob, full, n_chunks = case
    prefix, _ = fetch_prefix(blob, prefix_size(full.n_cells, n_chunks))
    rng = np.random.default_rng(0)
    cells = rng.choice(full.n_cells, min(5, full.n_cells), replace=False)
    chunks = prefix.chunks_for_cells(cells)
    tile = decode_chunks(prefix, pieces_for(blob, prefix, chunks), chunks)
    csr, ref = tile.to_csr(np.int64)[cells], full.to_csr(np.int64)[cells]
    assert (csr != ref).nnz == 0
    # Requesting only what was asked for: every chunk holds one of the cells.
    for c in chunks:
        assert np.any((cells >= prefix.table[c, 0]) & (cells < prefix.table[c, 1]))


PROPERTY = settings(
    max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


@PROPERTY
@given(
    seed=st.integers(0, 2**32 - 1),
    n_cells=st.integers(1, 60),
    n_chunks=st.integers(1, 10),
    big_genes=st.booleans(),
    data=st.data(),
)
def test_property_partial_rows_equal_full_rows(
    seed: int, n_cells: int, n_chunks: int, big_genes: bool, data: st.DataObject
) -> None:
    """For any tile and any subset of its chunks, decode_chunks gives the full decode's rows of those chunks."""
    n_genes = 150_000 if big_genes else 200
    indptr, indices, values = random_tile(seed, n_cells, n_genes, max_len=8, far_genes=0.5, big_counts=0.05)
    blob = deltacells.encode_tile(indptr, indices, values, n_genes, n_chunks=n_chunks, level=1, threads=1)
    full = decode_tile(blob, threads=1)
    k = min(n_chunks, n_cells)
    prefix, _ = fetch_prefix(blob, prefix_size(n_cells, k))
    chunks = np.array(data.draw(st.lists(st.integers(0, k - 1), min_size=0, max_size=k)), dtype=np.int64)
    tile = decode_chunks(prefix, pieces_for(blob, prefix, chunks), chunks)
    assert_partial(tile, full, prefix, np.unique(chunks))


def test_no_chunks() -> None:
    """Decoding no chunk gives the tile's shape with every row empty (no pieces needed)."""
    indptr, indices, data = random_tile(9, 40, 100)
    blob = deltacells.encode_tile(indptr, indices, data, 100, n_chunks=4, level=1)
    prefix = parse_prefix(blob, object_size=len(blob))
    tile = decode_chunks(prefix, [], [])
    assert tile.shape == (40, 100) and tile.nnz == 0 and not tile.complete
    assert tile.indptr.tolist() == [0] * 41
    assert prefix.frame_ranges([]) == [] and prefix.frame_bytes([]) == 0
    assert prefix.chunks_for_cells([]).tolist() == []


def test_zero_cell_tile() -> None:
    """A tile with no cells has no chunks: its prefix is the whole object, and decoding nothing is complete."""
    blob = deltacells.encode_tile(np.zeros(1, np.int64), np.empty(0, np.int64), np.empty(0, np.int64), 7)
    assert len(blob) == prefix_size(0, 0)
    prefix = parse_prefix(blob, object_size=len(blob))
    tile = decode_chunks(prefix, {}, np.empty(0, np.int64))
    assert tile.shape == (0, 7) and tile.complete


def test_threads_use_the_shared_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """With threads > 1 and enough nonzeros the chunks decode on the shared pool, to the same arrays."""
    submitted = []
    real = deltacells.codec._partial.shared_pool

    class Pool:
        def submit(self, *args: object) -> object:
            submitted.append(args[0])
            return real().submit(*args)

    monkeypatch.setattr(deltacells.codec._partial, "shared_pool", Pool)
    monkeypatch.setattr(deltacells.codec._partial, "_PARALLEL_MIN_NNZ", 100)  # a small tile takes the parallel path
    monkeypatch.setattr(deltacells.codec._decode, "WORK_UNIT_NNZ", 1)  # a task per chunk
    indptr, indices, data = random_tile(10, 200, 1000, big_counts=0.01)
    blob = deltacells.encode_tile(indptr, indices, data, 1000, n_chunks=8, level=1)
    full = decode_tile(blob, threads=1)
    prefix = parse_prefix(blob, object_size=len(blob))
    chunks = np.array([1, 2, 5, 7])
    pieces = pieces_for(blob, prefix, chunks)
    assert_partial(decode_chunks(prefix, pieces, chunks), full, prefix, chunks)
    assert submitted == []  # threads=1 is the default
    for threads in (2, None):
        assert_partial(decode_chunks(prefix, pieces, chunks, threads=threads), full, prefix, chunks)
    assert len(submitted) == 2 * len(chunks)
    submitted.clear()
    monkeypatch.setattr(deltacells.codec._decode, "WORK_UNIT_NNZ", 10**9)  # the chunks are one task: no pool
    assert_partial(decode_chunks(prefix, pieces, chunks, threads=2), full, prefix, chunks)
    assert submitted == []


def test_decoded_tile_keeps_complete() -> None:
    """copy() and freeze() keep the complete flag; decode_tile's tiles are complete."""
    indptr, indices, data = random_tile(11, 30, 100)
    blob = deltacells.encode_tile(indptr, indices, data, 100, n_chunks=3, level=1)
    assert decode_tile(blob).complete
    prefix = parse_prefix(blob, object_size=len(blob))
    tile = decode_chunks(prefix, pieces_for(blob, prefix, [1]), [1])
    copied = tile.copy()
    assert copied.complete is False
    np.testing.assert_array_equal(copied.indptr, tile.indptr)
    frozen = copied.freeze()
    assert frozen.complete is False and not frozen.data.flags.writeable


# ---------------------------------------------------------------------- ranges and chunks


@pytest.fixture(scope="module")
def eight() -> tuple[bytes, TilePrefix]:
    """A tile of 8 chunks, some with exception frames."""
    indptr, indices, data = random_tile(12, 400, 200_000, far_genes=0.2, big_counts=0.01)
    blob = deltacells.encode_tile(indptr, indices, data, 200_000, n_chunks=8, level=1)
    return blob, parse_prefix(blob[: prefix_size(400, 8)], object_size=len(blob))


def _frames(prefix: TilePrefix, c: int) -> list[tuple[int, int]]:
    row = prefix.table[c]
    return [(int(row[4 + 2 * i]), int(row[4 + 2 * i] + row[5 + 2 * i])) for i in range(4) if row[5 + 2 * i]]


def test_frame_ranges_merge_contiguous_chunks(eight: tuple[bytes, TilePrefix]) -> None:
    """Consecutive chunks give one range even with max_gap=0 (frames are adjacent but for alignment padding)."""
    _, prefix = eight
    assert any(prefix.table[:, 9] > 0) and any(prefix.table[:, 11] > 0)
    for lo, hi in ((0, 8), (2, 5), (3, 4), (7, 8)):
        frames = [f for c in range(lo, hi) for f in _frames(prefix, c)]
        want = [(min(s for s, _ in frames), max(e for _, e in frames))]
        assert prefix.frame_ranges(range(lo, hi), max_gap=0) == want
        assert prefix.frame_ranges(list(range(lo, hi))[::-1]) == want
    everything = prefix.frame_ranges(range(8))
    assert everything == [(prefix.nbytes_needed + (-prefix.nbytes_needed) % 8, prefix.header.total_size)]


def test_frame_ranges_gaps(eight: tuple[bytes, TilePrefix]) -> None:
    """Chunks apart are fetched apart unless the bytes between them are fewer than max_gap."""
    _, prefix = eight
    first, last = _frames(prefix, 1), _frames(prefix, 6)
    between = last[0][0] - first[-1][1]
    assert between > 64
    assert prefix.frame_ranges([6, 1], max_gap=between) == [(first[0][0], first[-1][1]), (last[0][0], last[-1][1])]
    assert prefix.frame_ranges([6, 1], max_gap=between + 1) == [(first[0][0], last[-1][1])]
    assert prefix.frame_ranges([1, 6, 1], max_gap=0) == prefix.frame_ranges([1, 6], max_gap=0)


def test_frame_bytes(eight: tuple[bytes, TilePrefix]) -> None:
    """frame_bytes is the sum of the chunks' frame lengths; all chunks are the object minus prefix and padding."""
    _, prefix = eight
    for chunks in ([0], [2, 3], [1, 6], range(8)):
        assert prefix.frame_bytes(chunks) == sum(e - s for c in set(chunks) for s, e in _frames(prefix, c))
        assert prefix.frame_bytes(chunks) <= sum(e - s for s, e in prefix.frame_ranges(chunks))
    total = prefix.frame_bytes(range(8))
    assert prefix.header.total_size - prefix.nbytes_needed - 8 * (4 * 8 + 1) <= total < prefix.header.total_size


def test_chunks_for_cells_at_boundaries(eight: tuple[bytes, TilePrefix]) -> None:
    """A chunk's first and last cells are in it; the cells just outside are in its neighbours."""
    _, prefix = eight
    for c in range(8):
        lo, hi = int(prefix.table[c, 0]), int(prefix.table[c, 1])
        assert prefix.chunks_for_cells([lo]).tolist() == [c]
        assert prefix.chunks_for_cells(np.array([hi - 1])).tolist() == [c]
        assert prefix.chunks_for_cells([lo, hi - 1, lo]).tolist() == [c]
        if c:
            assert prefix.chunks_for_cells([lo - 1, lo]).tolist() == [c - 1, c]
    assert prefix.chunks_for_cells(np.arange(400, dtype=np.uint32)).tolist() == list(range(8))
    assert prefix.chunks_for_cells([399, 0]).tolist() == [0, 7]


def test_chunks_for_cells_skip_chunks_without_cells() -> None:
    """A chunk with cell_lo == cell_hi (allowed by the format) is never needed."""
    indptr, indices, data = random_tile(13, 30, 100, empty=0.0)
    blob = with_empty_chunk(deltacells.encode_tile(indptr, indices, data, 100, n_chunks=3, level=1), after=0)
    full = decode_tile(blob)  # a valid tile
    prefix = parse_prefix(blob, object_size=len(blob))
    table = prefix.table
    assert table.shape[0] == 4 and table[1, 0] == table[1, 1]
    boundary = int(table[1, 0])
    assert prefix.chunks_for_cells([boundary - 1]).tolist() == [0]
    assert prefix.chunks_for_cells([boundary]).tolist() == [2]
    assert prefix.chunks_for_cells(np.arange(30)).tolist() == [0, 2, 3]
    chunks = prefix.chunks_for_cells(np.arange(30))
    tile = decode_chunks(prefix, pieces_for(blob, prefix, chunks), chunks)
    assert_partial(tile, full, prefix, chunks)
    # Decoding the cell-less chunk too (its frames are checked) is complete and changes nothing.
    tile = decode_chunks(prefix, pieces_for(blob, prefix, range(4)), range(4))
    assert tile.complete
    np.testing.assert_array_equal(tile.indices, full.indices)


def test_numbers_out_of_range_or_not_integers(eight: tuple[bytes, TilePrefix]) -> None:
    blob, prefix = eight
    with pytest.raises(OutOfRangeError, match="cell 400"):
        prefix.chunks_for_cells([0, 400])
    with pytest.raises(OutOfRangeError, match="cell -1"):
        prefix.chunks_for_cells([-1])
    with pytest.raises(OutOfRangeError, match="chunk 8"):
        prefix.frame_ranges([8])
    with pytest.raises(OutOfRangeError, match="chunk 9"):
        decode_chunks(prefix, pieces_for(blob, prefix, range(8)), [0, 9])
    with pytest.raises(InvalidTypeError, match="integers"):
        prefix.chunks_for_cells(np.array([1.5]))
    with pytest.raises(InvalidTypeError, match="integers"):
        prefix.frame_bytes([True])


# ---------------------------------------------------------------------- short prefixes, sizes and missing pieces


def test_prefix_too_short_says_what_it_needs() -> None:
    """A prefix guessed too small (more cells than assumed) raises PrefixTooShortError with the size to fetch."""
    indptr, indices, data = random_tile(14, 300, 100)
    blob = deltacells.encode_tile(indptr, indices, data, 100, n_chunks=4, level=1)
    needed = prefix_size(300, 4)
    for got in (0, 10, 63, 64, prefix_size(100, 4), needed - 1):
        with pytest.raises(PrefixTooShortError) as info:
            parse_prefix(blob[:got], object_size=len(blob), name="t.dct")
        assert info.value.needed == (64 if got < 64 else needed)
        assert info.value.got == got
        assert not isinstance(info.value, ValueError)  # not a FormatError: the object is fine
        assert isinstance(info.value, DeltaCellsError)
        assert "t.dct" in str(info.value) and str(info.value.needed) in str(info.value)
    again = pickle.loads(pickle.dumps(info.value))
    assert (again.needed, again.got, str(again)) == (info.value.needed, info.value.got, str(info.value))
    assert fetch_prefix(blob, prefix_size(100, 4))[1] == 2
    assert fetch_prefix(blob, 1)[1] == 3  # 1 -> 64 -> needed
    assert parse_prefix(blob[:needed], object_size=len(blob)).nbytes_needed == needed


def test_object_size_disagreeing_with_total_size() -> None:
    """total_size must equal the object size the caller knows: a FormatError naming total_size."""
    indptr, indices, data = random_tile(15, 50, 100)
    blob = deltacells.encode_tile(indptr, indices, data, 100, n_chunks=2, level=1)
    head = blob[: prefix_size(50, 2)]
    for size in (len(blob) + 8, len(blob) - 1, len(head)):
        with pytest.raises(FormatError, match="total_size") as info:
            parse_prefix(head, object_size=size, name="tile_7.dct")
        assert "tile_7.dct" in str(info.value)
    with pytest.raises(FormatError, match="shorter than the 64-byte header"):
        parse_prefix(blob[:40], object_size=40)
    with pytest.raises(InvalidValueError, match="object of"):
        parse_prefix(blob, object_size=len(blob) - 8)


def test_expected_shape() -> None:
    """n_cells / n_chunks the caller expects must be the header's."""
    indptr, indices, data = random_tile(16, 50, 100)
    blob = deltacells.encode_tile(indptr, indices, data, 100, n_chunks=2, level=1)
    with pytest.raises(FormatError, match="header field n_cells is 50, expected 60"):
        parse_prefix(blob, object_size=len(blob), n_cells=60)
    with pytest.raises(FormatError, match="header field n_chunks is 2, expected 8"):
        parse_prefix(blob, object_size=len(blob), n_chunks=8)


def test_header_claims_checked_before_fetching_or_allocating() -> None:
    """A header claiming more than the object holds is a FormatError, never a request for more bytes."""
    indptr, indices, data = random_tile(17, 50, 100)
    blob = bytearray(deltacells.encode_tile(indptr, indices, data, 100, n_chunks=2, level=1))
    struct.pack_into("<Q", blob, 16, 10**15)  # n_cells
    with pytest.raises(FormatError, match="n_cells"):
        parse_prefix(bytes(blob[:64]), object_size=len(blob))
    struct.pack_into("<Q", blob, 16, 50)
    struct.pack_into("<I", blob, 36, 10**6)  # n_chunks
    with pytest.raises(FormatError, match="n_chunks"):
        parse_prefix(bytes(blob[:64]), object_size=len(blob))


def test_header_unpack_against_object_size() -> None:
    """TileHeader.unpack(prefix, object_size=N) checks the fields against N, not against the bytes it is given."""
    indptr, indices, data = random_tile(19, 50, 100)
    blob = deltacells.encode_tile(indptr, indices, data, 100, n_chunks=2, level=1)
    size = len(blob)
    whole = TileHeader.unpack(blob)
    assert TileHeader.unpack(blob[:64], object_size=size) == whole
    assert TileHeader.unpack(memoryview(blob)[: prefix_size(50, 2)], object_size=size) == whole
    assert TileHeader.unpack(blob, object_size=size) == whole
    with pytest.raises(FormatError, match="total_size is .* but the object has 64 bytes"):
        TileHeader.unpack(blob[:64])  # without object_size the 64 bytes are the whole object
    with pytest.raises(FormatError, match=f"t.dct: header field total_size is {size} but the object has {size - 8}"):
        TileHeader.unpack(blob[:64], object_size=size - 8, name="t.dct")

    past = bytearray(blob[:64])
    struct.pack_into("<Q", past, 16, size)  # n_cells: the indptr would end past the object
    with pytest.raises(FormatError, match=rf"n_cells is {size}; its indptr would end past the object \({size} bytes"):
        TileHeader.unpack(bytes(past), object_size=size)
    past = bytearray(blob[:64])
    struct.pack_into("<I", past, 36, size // 96)  # n_chunks: the chunk table would end past the object
    with pytest.raises(FormatError, match=rf"n_chunks is {size // 96}; the chunk table would end past the object"):
        TileHeader.unpack(memoryview(past), object_size=size)
    past = bytearray(blob[:64])
    struct.pack_into("<Q", past, 40, -(-(size - 8 * 50) // 8) * 8)  # indptr_off: 51 entries from there end past it
    with pytest.raises(FormatError, match="n_cells is 50; its indptr would end past the object"):
        TileHeader.unpack(bytes(past), object_size=size)

    with pytest.raises(FormatError, match="40 bytes is shorter than the 64-byte header"):
        TileHeader.unpack(blob[:40], object_size=40)
    with pytest.raises(InvalidValueError, match="40 bytes given"):
        TileHeader.unpack(blob[:40], object_size=size)


def test_frame_range_outside_the_object() -> None:
    """A frame reaching past object_size is a FormatError from the prefix (before anything is fetched)."""
    indptr, indices, data = random_tile(18, 50, 100)
    blob = deltacells.encode_tile(indptr, indices, data, 100, n_chunks=4, level=1)
    table = chunk_table(blob)
    for column, field in ((5, "gaps"), (7, "vals")):
        bad = patch_table(blob, 2, column, len(blob))
        with pytest.raises(FormatError, match=f"chunk 2 {field} stream .* runs past the end of the object"):
            parse_prefix(bad[: prefix_size(50, 4)], object_size=len(bad))
    bad = patch_table(blob, 1, 4, len(blob) + int(table[1, 5]))  # gaps_off past the end
    with pytest.raises(FormatError, match="chunk 1 gaps stream"):
        parse_prefix(bad, object_size=len(bad))
    bad = patch_table(blob, 3, 9, 16)  # a vexc frame that is not there: vexc_off 0 + 16 overlaps the header
    with pytest.raises(FormatError, match="chunk 3 vexc stream at offset 0 overlaps the header"):
        parse_prefix(bad, object_size=len(bad))


def test_pieces_missing_a_frame(eight: tuple[bytes, TilePrefix]) -> None:
    """Pieces that do not hold every frame of the chunks are the caller's bug: a clear ValueError, not FormatError."""
    blob, prefix = eight
    pieces = pieces_for(blob, prefix, [3], max_gap=0)
    assert len(pieces) == 1
    (start, piece), frames = pieces[0], _frames(prefix, 3)
    cases = {
        "nothing": [],
        "other chunk": pieces_for(blob, prefix, [4]),
        "cut short": [(start, piece[:-1])],
        "cut at the start": [(start + 1, piece[1:])],
        "gaps frame only": [(start, blob[frames[0][0] : frames[0][1]])],
    }
    for label, fetched in cases.items():
        with pytest.raises(InvalidValueError, match=r"t\.dct: chunk 3 .*none of the pieces") as info:
            decode_chunks(prefix, fetched, [3], name="t.dct")
        assert not isinstance(info.value, FormatError), label
        assert "frame_ranges" in str(info.value)
    # Frames split over several overlapping or exact pieces are fine.
    split = [(s, blob[s:e]) for s, e in frames] + [(start, piece[:10])]
    decode_chunks(prefix, split, [3])
    with pytest.raises(InvalidValueError, match="not inside the object"):
        decode_chunks(prefix, [(len(blob) - 4, b"12345678")], [3])
    with pytest.raises(InvalidValueError, match="not inside the object"):
        decode_chunks(prefix, [(-1, b"1")], [3])


def test_faults_in_decoded_chunks_only(eight: tuple[bytes, TilePrefix]) -> None:
    """A damaged frame is found when its chunk is decoded; the other chunks decode (no CRC to tell)."""
    blob, prefix = eight
    full = decode_tile(blob)
    s, e = _frames(prefix, 5)[1]  # chunk 5 vals
    bad = blob[:s] + b"\0" * (e - s) + blob[e:]
    with pytest.raises(FormatError, match="crc32"):
        decode_tile(bad)
    with pytest.raises(FormatError, match="t.dct: chunk 5 vals stream: not a zstd frame"):
        decode_chunks(prefix, pieces_for(bad, prefix, [4, 5]), [4, 5], name="t.dct")
    tile = decode_chunks(prefix, pieces_for(bad, prefix, [4, 6]), [4, 6])
    assert_partial(tile, full, prefix, np.array([4, 6]))


# ---------------------------------------------------------------------- conformance vectors

#: Invalid vectors whose fault only the CRC-32 catches in general (a damaged payload byte): ranged reads cannot
#: check the CRC, so their prefix parses and the chunks whose frames the damage missed decode without error.
#: (In crc_mismatch the flipped byte lies in a zstd frame, which zstd itself finds corrupt when that chunk is
#: decoded: at most one chunk may fail, and not on CRC grounds.)
CRC_ONLY = {"crc_mismatch"}


def _conformance(kind: str) -> list[Path]:
    return sorted((CONFORMANCE / kind).glob("*.dct")) if (CONFORMANCE / kind).is_dir() else []


needs_conformance = pytest.mark.skipif(
    not (CONFORMANCE / "valid").is_dir() or not (CONFORMANCE / "invalid").is_dir(),
    reason=f"conformance vectors not found at {CONFORMANCE}",
)


@needs_conformance
@pytest.mark.parametrize("path", _conformance("valid"), ids=lambda p: p.stem)
def test_conformance_valid_from_ranges(path: Path) -> None:
    """A valid vector decodes to its expected arrays from its prefix and the frame ranges of all chunks."""
    blob = path.read_bytes()
    with np.load(path.with_suffix(".npz")) as npz:
        expected = {key: npz[key] for key in ("indptr", "indices", "data", "n_genes")}
    n_cells = expected["indptr"].shape[0] - 1
    prefix, fetches = fetch_prefix(blob, prefix_size(n_cells, min(8, n_cells)), name=path.name)
    if path.stem == "extra_padding":
        assert fetches == 2, "indptr_off past the chunk table: the guessed prefix is too short"
    chunks = np.arange(prefix.n_chunks)
    tile = decode_chunks(prefix, pieces_for(blob, prefix, chunks), chunks, name=path.name)
    np.testing.assert_array_equal(tile.indptr, expected["indptr"], strict=True)
    np.testing.assert_array_equal(tile.indices, expected["indices"], strict=True)
    np.testing.assert_array_equal(tile.data, expected["data"], strict=True)
    assert tile.n_genes == int(expected["n_genes"]) and tile.complete
    full = decode_tile(blob)
    for c in range(prefix.n_chunks):
        assert_partial(decode_chunks(prefix, pieces_for(blob, prefix, [c]), [c]), full, prefix, [c])


def _partial_outcome(blob: bytes, name: str) -> tuple[str | None, dict[int, str]]:
    """The prefix's error (or None), and the error of each chunk decoded alone (only chunks that fail)."""
    try:
        prefix, _ = fetch_prefix(blob, 72, name=name)
    except FormatError as exc:
        return str(exc), {}
    failing = {}
    for c in range(prefix.n_chunks):
        try:
            decode_chunks(prefix, pieces_for(blob, prefix, [c]), [c], name=name)
        except FormatError as exc:
            failing[c] = str(exc)
    return None, failing


@needs_conformance
@pytest.mark.parametrize("path", _conformance("invalid"), ids=lambda p: p.stem)
def test_conformance_invalid_from_ranges(path: Path) -> None:
    """An invalid vector is rejected from ranges with decode_tile's very message, unless only the CRC can tell."""
    blob = path.read_bytes()
    name = f"conformance/{path.name}"
    with pytest.raises(FormatError) as info:
        decode_tile(blob, name=name)
    full_message = str(info.value)
    prefix_error, failing = _partial_outcome(blob, name)
    if path.stem in CRC_ONLY:
        assert "crc32" in full_message
        assert prefix_error is None, "a CRC-only fault must not stop the prefix"
        prefix, _ = fetch_prefix(blob, 72)
        assert len(failing) <= 1 < prefix.n_chunks, "one damaged byte spoils at most one chunk"
        assert not any("CRC-32" in message or "crc32" in message for message in failing.values())
        return
    assert prefix_error is not None or failing, f"{path.stem}: not rejected from ranges"
    if prefix_error is not None:
        assert prefix_error == full_message
        return
    # Decoding every chunk checks exactly what decode_tile checks, in its order, but the CRC.
    prefix, _ = fetch_prefix(blob, 72)
    chunks = np.arange(prefix.n_chunks)
    with pytest.raises(FormatError) as info:
        decode_chunks(prefix, pieces_for(blob, prefix, chunks), chunks, name=name)
    assert str(info.value) == full_message
    assert failing[min(failing)] == full_message
    # ... and the chunks the fault is not in decode (a reader of other cells is not stopped by it).
    for c in sorted(set(chunks.tolist()) - set(failing)):
        decode_chunks(prefix, pieces_for(blob, prefix, [c]), [c])


@needs_conformance
def test_conformance_crc_only_vectors_listed() -> None:
    """The invalid vectors that ranged reading does not reject as decode_tile does are exactly CRC_ONLY."""
    differ = set()
    for path in _conformance("invalid"):
        blob = path.read_bytes()
        with pytest.raises(FormatError) as info:
            decode_tile(blob, name=path.name)
        prefix_error, failing = _partial_outcome(blob, path.name)
        if prefix_error != str(info.value) and (not failing or failing[min(failing)] != str(info.value)):
            differ.add(path.stem)
    assert differ == CRC_ONLY


# ---------------------------------------------------------------------- whole objects, chunk sets and merging


def test_decoders_say_which_chunks_they_hold(case: tuple[str, bytes, DecodedTile, int]) -> None:
    """decode_tile and decode_chunks set chunk_bounds (the table's cell_lo, then n_cells) and chunk_mask."""
    _, blob, full, n_chunks = case
    bounds = np.append(chunk_table(blob)[:, 0], full.n_cells).astype(np.int64)
    np.testing.assert_array_equal(full.chunk_bounds, bounds, strict=True)
    assert full.chunk_mask.tolist() == [True] * n_chunks and full.n_chunks_decoded == n_chunks
    prefix = parse_prefix(blob, object_size=len(blob))
    np.testing.assert_array_equal(prefix.chunk_bounds, bounds, strict=True)
    tile = decode_chunks(prefix, [(0, blob)], [n_chunks - 1])
    assert np.flatnonzero(tile.chunk_mask).tolist() == [n_chunks - 1] and tile.n_chunks_decoded == 1
    lo = int(bounds[n_chunks - 1])
    cells = np.arange(lo, full.n_cells)
    assert full.holds(None) and full.holds(cells) and tile.holds(cells) and tile.holds(cells[::-1])
    assert tile.holds(np.empty(0, np.int64))
    if n_chunks > 1 and lo > 0:
        assert not tile.holds(None) and not tile.holds(np.array([lo - 1, lo]))


def test_parse_tile_is_parse_prefix_plus_the_crc(case: tuple[str, bytes, DecodedTile, int]) -> None:
    """parse_tile of a whole object gives the prefix, and decode_chunks of it (one piece) the full decode's rows."""
    _, blob, full, n_chunks = case
    prefix = deltacells.codec._partial.parse_tile(blob, name="t.dct")
    np.testing.assert_array_equal(prefix.indptr, full.indptr)
    rng = np.random.default_rng(n_chunks)
    for _ in range(3):
        chunks = np.unique(rng.choice(n_chunks, int(rng.integers(1, n_chunks + 1))))
        assert_partial(decode_chunks(prefix, [(0, blob)], chunks), full, prefix, chunks)


@pytest.mark.parametrize("offset", [-1, 64, 200, -20])
def test_parse_tile_checks_the_crc(eight: tuple[bytes, TilePrefix], offset: int) -> None:
    """A same-size corruption anywhere in the payload (a chunk nobody decodes too) fails the CRC-32 first."""
    blob = bytearray(eight[0])
    blob[offset] ^= 0x5A
    with pytest.raises(FormatError, match=r"t\.dct: CRC-32"):
        deltacells.codec._partial.parse_tile(bytes(blob), name="t.dct")


@pytest.mark.parametrize(
    ("change", "match"),
    [
        pytest.param(lambda b: b[:-1], "total_size", id="truncated"),
        pytest.param(lambda b: b"XELTACEL" + b[8:], "magic", id="magic"),
        pytest.param(lambda b: b[:40] + struct.pack("<Q", 12) + b[48:], "indptr_off", id="indptr-off"),
    ],
)
def test_parse_tile_checks_the_header(eight: tuple[bytes, TilePrefix], change: object, match: str) -> None:
    with pytest.raises(FormatError, match=match):
        deltacells.codec._partial.parse_tile(change(eight[0]), name="t.dct")


def test_parse_tile_checks_the_table_and_indptr_like_decode_tile() -> None:
    """A chunk table that disagrees with the indptr (CRC fixed) is refused, as decode_tile refuses it."""
    indptr, indices, data = random_tile(21, 50, 100, empty=0.0)
    blob = bytearray(patch_table(deltacells.encode_tile(indptr, indices, data, 100, n_chunks=4, level=1), 1, 2, 3))
    struct.pack_into("<I", blob, 56, zlib.crc32(blob[64:]))
    for decode in (decode_tile, deltacells.codec._partial.parse_tile):
        with pytest.raises(FormatError, match="chunk 1"):
            decode(bytes(blob), name="t.dct")


def _decode_some(blob: bytes, chunks: object) -> DecodedTile:
    prefix = parse_prefix(blob, object_size=len(blob))
    return decode_chunks(prefix, [(0, blob)], chunks)


def test_merge_partial_is_the_decode_of_the_union(case: tuple[str, bytes, DecodedTile, int]) -> None:
    """Merging decodings of two chunk sets gives the decoding of their union, row for row."""
    label, blob, full, n_chunks = case
    merge = deltacells.codec._partial.merge_partial
    prefix = parse_prefix(blob, object_size=len(blob))
    rng = np.random.default_rng(len(label) + 7)
    for _ in range(6):
        a = rng.choice(n_chunks, int(rng.integers(0, n_chunks + 1)))
        b = rng.choice(n_chunks, int(rng.integers(0, n_chunks + 1)))
        merged = merge(_decode_some(blob, a), _decode_some(blob, b))
        union = np.union1d(a, b).astype(np.int64)
        assert_partial(merged, full, prefix, union)
        assert np.flatnonzero(merged.chunk_mask).tolist() == union.tolist()
        np.testing.assert_array_equal(merged.chunk_bounds, full.chunk_bounds)
    halves = merge(_decode_some(blob, range(0, n_chunks, 2)), _decode_some(blob, range(1, n_chunks, 2)))
    assert halves.complete and halves.holds(None)
    np.testing.assert_array_equal(halves.indptr, full.indptr, strict=True)
    np.testing.assert_array_equal(halves.indices, full.indices, strict=True)
    np.testing.assert_array_equal(halves.data, full.data, strict=True)


def test_merge_partial_returns_a_tile_that_holds_the_other() -> None:
    """No copy when one tile holds every chunk of the other (a complete one holds them all)."""
    merge = deltacells.codec._partial.merge_partial
    indptr, indices, data = random_tile(22, 80, 100)
    blob = deltacells.encode_tile(indptr, indices, data, 100, n_chunks=8, level=1)
    small, large, full = _decode_some(blob, [2]), _decode_some(blob, [1, 2, 5]), decode_tile(blob)
    assert merge(small, large) is large and merge(large, small) is large
    assert merge(full, small) is full and merge(small, full) is full
    assert merge(small, _decode_some(blob, [2])) is small
    assert not merge(small, _decode_some(blob, [3])).complete


def test_merge_partial_keeps_the_float32_flag() -> None:
    merge = deltacells.codec._partial.merge_partial
    indptr, indices, data = random_tile(23, 300, 1000, big_counts=0.02)
    blob = deltacells.encode_tile(indptr, indices, data, 1000, n_chunks=6, level=1)
    tiles = [_decode_some(blob, [c]) for c in range(6)]
    flags = [t.inexact_in_float32 for t in tiles]
    assert any(flags)
    for a in range(6):
        for b in range(6):
            assert merge(tiles[a], tiles[b]).inexact_in_float32 == (flags[a] or flags[b])


def test_merge_partial_refuses_other_tiles() -> None:
    merge = deltacells.codec._partial.merge_partial
    indptr, indices, data = random_tile(24, 40, 100)
    four = deltacells.encode_tile(indptr, indices, data, 100, n_chunks=4, level=1)
    five = deltacells.encode_tile(indptr, indices, data, 100, n_chunks=5, level=1)
    with pytest.raises(InvalidValueError, match="same tile"):
        merge(_decode_some(four, [0]), _decode_some(five, [1]))
    bare = DecodedTile(np.zeros(41, np.int64), np.empty(0, np.int32), np.empty(0, np.int32), 100, complete=False)
    with pytest.raises(InvalidValueError, match="chunk_bounds"):
        merge(bare, _decode_some(four, [1]))
    assert not bare.holds(np.array([0])) and bare.n_chunks_decoded == 0


def test_copy_and_freeze_keep_the_chunk_set() -> None:
    indptr, indices, data = random_tile(25, 30, 100)
    tile = _decode_some(deltacells.encode_tile(indptr, indices, data, 100, n_chunks=3, level=1), [1])
    copied = tile.copy()
    np.testing.assert_array_equal(copied.chunk_mask, tile.chunk_mask)
    np.testing.assert_array_equal(copied.chunk_bounds, tile.chunk_bounds)
    assert not np.shares_memory(copied.chunk_mask, tile.chunk_mask)
    frozen = copied.freeze()
    assert not frozen.chunk_mask.flags.writeable and not frozen.chunk_bounds.flags.writeable
