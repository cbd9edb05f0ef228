"""Input checks of encode_tile, the writer's exception policy, and decode_tile on malformed tiles."""

from __future__ import annotations

import struct
import tracemalloc
import zlib
from functools import cache
from typing import TYPE_CHECKING

import numpy as np
import pytest
import zstandard

import deltacells
import deltacells.codec._decode
import deltacells.codec._encode
from deltacells import FormatError
from deltacells.errors import ExceptionPolicyError, UnsupportedPlatformError

if TYPE_CHECKING:
    from collections.abc import Callable

NAME = "tiles/tile_000042.dct"
MAX_COUNT = 2**31 - 1
U16_MAX = 65535

HEADER = struct.Struct("<8sIIQQIIQQII")
HEADER_FIELDS = (
    "magic",
    "version",
    "flags",
    "n_cells",
    "nnz",
    "n_genes",
    "n_chunks",
    "indptr_off",
    "total_size",
    "crc32",
    "reserved",
)
CHUNK = struct.Struct("<12Q")
CHUNK_FIELDS = (
    "cell_lo",
    "cell_hi",
    "nnz_lo",
    "nnz_hi",
    "gaps_off",
    "gaps_len",
    "vals_off",
    "vals_len",
    "vexc_off",
    "vexc_len",
    "gexc_off",
    "gexc_len",
)
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


# --------------------------------------------------------------------------------------------------------------------
# tile surgery: every helper leaves a tile whose CRC-32 is right, so that the check under test is the one reached


def fix_crc(blob: bytes | bytearray) -> bytes:
    """``blob`` with the header field crc32 recomputed over bytes ``[64:]``."""
    out = bytearray(blob)
    struct.pack_into("<I", out, 56, zlib.crc32(out[64:]))
    return bytes(out)


def read_header(blob: bytes) -> dict[str, int | bytes]:
    """The header fields of ``blob``."""
    return dict(zip(HEADER_FIELDS, HEADER.unpack_from(blob, 0), strict=True))


def patch_header(blob: bytes, **fields: int) -> bytes:
    """``blob`` with header fields replaced (and the CRC fixed)."""
    values = read_header(blob) | fields
    out = bytearray(blob)
    HEADER.pack_into(out, 0, *(values[f] for f in HEADER_FIELDS))
    return fix_crc(out)


def read_chunk(blob: bytes, c: int) -> dict[str, int]:
    """The chunk-table entry of chunk ``c``."""
    return dict(zip(CHUNK_FIELDS, CHUNK.unpack_from(blob, 64 + 96 * c), strict=True))


def patch_chunk(blob: bytes, c: int, **fields: int) -> bytes:
    """``blob`` with fields of chunk ``c``'s entry replaced (and the CRC fixed)."""
    values = read_chunk(blob, c) | fields
    out = bytearray(blob)
    CHUNK.pack_into(out, 64 + 96 * c, *(values[f] for f in CHUNK_FIELDS))
    return fix_crc(out)


def patch_indptr(blob: bytes, cell: int, value: int) -> bytes:
    """``blob`` with ``indptr[cell]`` replaced (and the CRC fixed)."""
    out = bytearray(blob)
    struct.pack_into("<q", out, int(read_header(blob)["indptr_off"]) + 8 * cell, value)
    return fix_crc(out)


def get_stream(blob: bytes, c: int, kind: str) -> bytes:
    """The bytes of stream ``kind`` (gaps, vals, vexc, gexc) of chunk ``c``."""
    entry = read_chunk(blob, c)
    return blob[entry[f"{kind}_off"] : entry[f"{kind}_off"] + entry[f"{kind}_len"]]


def replace_stream(blob: bytes, c: int, kind: str, stream: bytes) -> bytes:
    """``blob`` with stream ``kind`` of chunk ``c`` moved to new bytes appended at the (8-aligned) end.

    The old bytes stay as padding (readers allow padding between streams); offset, length, total_size and CRC are
    updated.
    """
    offset = (len(blob) + 7) // 8 * 8
    out = blob + bytes(offset - len(blob)) + stream
    out = patch_chunk(out, c, **{f"{kind}_off": offset, f"{kind}_len": len(stream)})
    return patch_header(out, total_size=len(out))


def compress(content: bytes, *, content_size: bool = True) -> bytes:
    """One zstd frame holding ``content``."""
    return zstandard.ZstdCompressor(level=3, write_content_size=content_size).compress(content)


def decompress(frame: bytes) -> bytes:
    """The content of one zstd frame."""
    return zstandard.ZstdDecompressor().decompress(frame)


def rewrite_content(blob: bytes, c: int, kind: str, change: Callable[[bytes], bytes]) -> bytes:
    """``blob`` with the decompressed content of a stream changed and re-compressed (content size included)."""
    return replace_stream(blob, c, kind, compress(change(decompress(get_stream(blob, c, kind)))))


def to_values(planes: bytes) -> np.ndarray:
    """Byte planes (all low bytes, then all high bytes) to uint16 values."""
    raw = np.frombuffer(planes, dtype=np.uint8)
    n = raw.size // 2
    return raw[:n].astype(np.uint16) | (raw[n:].astype(np.uint16) << 8)


def to_planes(values: np.ndarray) -> bytes:
    """uint16 values to byte planes."""
    return np.asarray(values, dtype="<u2").view(np.uint8).reshape(-1, 2).T.tobytes()


def set_value(position: int, value: int) -> Callable[[bytes], bytes]:
    """A content change that sets the uint16 at ``position`` of a byte-plane stream."""

    def change(planes: bytes) -> bytes:
        values = to_values(planes)
        values[position] = value
        return to_planes(values)

    return change


def exceptions(positions: list[int], payloads: list[int]) -> bytes:
    """Exception frame content: uint32 positions, then uint32 payloads."""
    return np.array(positions + payloads, dtype="<u4").tobytes()


def with_content_size(frame: bytes, size: int) -> bytes:
    """``frame`` with its header rewritten to declare ``size`` content bytes (8-byte Frame_Content_Size field)."""
    assert frame[:4] == ZSTD_MAGIC
    descriptor = frame[4]
    single_segment = descriptor >> 5 & 1
    pos = 5 if single_segment else 6
    window = frame[5:pos] or bytes([10 << 3])  # a 1 MiB window where the frame had none (single segment)
    dict_id_size = (0, 1, 2, 4)[descriptor & 3]
    dict_id = frame[pos : pos + dict_id_size]
    pos += dict_id_size + (single_segment, 2, 4, 8)[descriptor >> 6]
    new_descriptor = 0xC0 | (descriptor & 0x07)  # 8-byte content size, not single segment; checksum/dict flags kept
    patched = ZSTD_MAGIC + bytes([new_descriptor]) + window + dict_id + struct.pack("<Q", size) + frame[pos:]
    assert zstandard.get_frame_parameters(patched).content_size == size
    return patched


# --------------------------------------------------------------------------------------------------------------------
# the tile that the malformed cases start from


def make_csr(cells: list[list[tuple[int, int]]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR arrays from per-cell ``(gene, count)`` lists."""
    indptr = np.concatenate(([0], np.cumsum([len(cell) for cell in cells]))).astype(np.int64)
    indices = np.array([g for cell in cells for g, _ in cell], dtype=np.int64)
    data = np.array([v for cell in cells for _, v in cell], dtype=np.int64)
    return indptr, indices, data


BASE_GENES = 200_000


@cache
def base_arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """40 cells; cell 0 has two gap exceptions and two value exceptions, cell 25 one of each."""
    rng = np.random.default_rng(11)
    cells = [[(3, U16_MAX), (70_000, 70_000), (140_000, MAX_COUNT), (140_001, 1)]]
    for _ in range(39):
        genes = np.sort(rng.choice(500, int(rng.integers(0, 12)), replace=False))
        cells.append(list(zip(genes.tolist(), rng.integers(1, 20, genes.size).tolist(), strict=True)))
    cells[25].append((150_000, 80_000))
    return make_csr(cells)


@cache
def base_tile() -> bytes:
    """The encoded base tile (4 chunks)."""
    return deltacells.encode_tile(*base_arrays(), BASE_GENES, n_chunks=4, level=3, name=NAME)


def chunk_n(blob: bytes, c: int) -> int:
    """Nonzeros of chunk ``c``."""
    entry = read_chunk(blob, c)
    return entry["nnz_hi"] - entry["nnz_lo"]


def later_position_in_cell(blob: bytes, c: int) -> int:
    """A position within chunk ``c`` that is not the first nonzero of its cell."""
    indptr, _, _ = base_arrays()
    entry = read_chunk(blob, c)
    for cell in range(entry["cell_lo"], entry["cell_hi"]):
        if indptr[cell + 1] - indptr[cell] >= 2:
            return int(indptr[cell] + 1 - entry["nnz_lo"])
    msg = "base tile has no cell with two nonzeros in this chunk"
    raise AssertionError(msg)


def test_base_tile_shape() -> None:
    """The base tile has what the malformed cases rely on: 4 chunks, exception frames in chunk 0."""
    blob = base_tile()
    assert read_header(blob)["n_chunks"] == 4
    entry = read_chunk(blob, 0)
    assert entry["vexc_len"] > 0
    assert entry["gexc_len"] > 0
    assert np.frombuffer(decompress(get_stream(blob, 0, "gexc")), "<u4").tolist() == [1, 2, 69_997 - U16_MAX, 4_465]


def _assert_base(tile: deltacells.DecodedTile) -> None:
    indptr, indices, data = base_arrays()
    np.testing.assert_array_equal(tile.indptr, indptr)
    np.testing.assert_array_equal(tile.indices, indices)
    np.testing.assert_array_equal(tile.data, data)
    assert tile.n_genes == BASE_GENES


@pytest.mark.parametrize("kind", ["gaps", "vals", "vexc", "gexc"])
def test_surgery_keeps_valid_tiles_valid(kind: str) -> None:
    """The helpers alone (moving a stream, re-compressing it, patching nothing) leave a tile that decodes as before."""
    blob = base_tile()
    _assert_base(deltacells.decode_tile(fix_crc(blob), name=NAME))
    _assert_base(deltacells.decode_tile(patch_header(blob), name=NAME))
    _assert_base(deltacells.decode_tile(patch_chunk(blob, 0), name=NAME))
    _assert_base(deltacells.decode_tile(replace_stream(blob, 0, kind, get_stream(blob, 0, kind)), name=NAME))
    _assert_base(deltacells.decode_tile(rewrite_content(blob, 0, kind, lambda content: content), name=NAME))
    frame = get_stream(blob, 0, kind)
    size = zstandard.get_frame_parameters(frame).content_size
    _assert_base(deltacells.decode_tile(replace_stream(blob, 0, kind, with_content_size(frame, size)), name=NAME))


# --------------------------------------------------------------------------------------------------------------------
# encoder input errors

GOOD = {
    "indptr": np.array([0, 2, 2, 5]),
    "indices": np.array([1, 4, 0, 3, 7]),
    "data": np.array([5, 1, 2, 3, 70_000]),
    "n_genes": 8,
}
ENC_NAME = "tiles/tile_000007.dct"


def _with(**changes: object) -> dict[str, object]:
    return GOOD | changes


def test_good_input_encodes() -> None:
    """The input the error cases start from is valid."""
    tile = deltacells.decode_tile(deltacells.encode_tile(**GOOD, name=ENC_NAME))
    np.testing.assert_array_equal(tile.indices, GOOD["indices"])
    np.testing.assert_array_equal(tile.data, GOOD["data"])


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"data": np.array([5.0, 1, 2, 3, 70_000])}, ["data", "integer dtype", "float64"]),
        ({"data": np.array([5.5, 1, 2, 3, 70_000])}, ["data", "integer dtype"]),
        ({"data": np.array([True, True, True, True, True])}, ["data", "integer dtype"]),
        ({"indices": np.array([1.0, 4, 0, 3, 7])}, ["indices", "integer dtype"]),
        ({"indptr": np.array([0.0, 2, 2, 5])}, ["indptr", "integer dtype"]),
    ],
    ids=["data_float", "data_fractional", "data_bool", "indices_float", "indptr_float"],
)
def test_encoder_rejects_non_integer_dtypes(changes: dict[str, object], words: list[str]) -> None:
    """Non-integer arrays raise TypeError naming the array."""
    with pytest.raises(TypeError) as info:
        deltacells.encode_tile(**_with(**changes), name=ENC_NAME)
    for word in [ENC_NAME, *words]:
        assert word in str(info.value)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"data": np.array([5, 0, 2, 3, 7])}, ["count 0", "nonzero 1", "[1, 2^31 - 1]"]),
        ({"data": np.array([5, 1, -3, 3, 7])}, ["count -3", "nonzero 2"]),
        ({"data": np.array([5, 1, 2, 3, 2**31])}, ["count 2147483648", "nonzero 4"]),
        ({"data": np.array([5, 1, 2, 3, 2**64 - 1], dtype=np.uint64)}, ["count 18446744073709551615", "nonzero 4"]),
        ({"indices": np.array([1, 4, 0, 3, 8])}, ["gene index 8", "nonzero 4", "[0, 8)"]),
        ({"indices": np.array([1, 4, -1, 3, 7])}, ["gene index -1", "nonzero 2"]),
        ({"indices": np.array([4, 1, 0, 3, 7])}, ["cell 0", "not strictly increasing"]),
        ({"indices": np.array([1, 4, 0, 3, 3])}, ["cell 2", "not strictly increasing"]),
        ({"indices": np.array([1, 4, 3, 3, 7])}, ["cell 2", "not strictly increasing"]),
        ({"indptr": np.array([1, 2, 2, 5])}, ["indptr", "start with 0"]),
        ({"indptr": np.array([], dtype=np.int64)}, ["indptr", "start with 0"]),
        ({"indptr": np.array([0, 3, 2, 5])}, ["indptr", "non-decreasing"]),
        ({"indptr": np.array([0, 2, 2, 4])}, ["indptr ends at 4", "5 indices", "5 values"]),
        ({"indptr": np.array([0, 2, 2, 6])}, ["indptr ends at 6"]),
        ({"data": np.array([5, 1, 2, 3])}, ["indptr ends at 5", "4 values"]),
        ({"indices": np.array([[1, 4, 0, 3, 7]])}, ["indices", "one-dimensional"]),
        ({"n_genes": 0}, ["n_genes is 0"]),
        ({"n_genes": 2**31 + 1}, ["n_genes is 2147483649"]),
    ],
    ids=[
        "count_zero",
        "count_negative",
        "count_2_31",
        "count_u64_max",
        "index_is_n_genes",
        "index_negative",
        "unsorted",
        "duplicate",
        "duplicate_at_cell_start",
        "indptr_not_at_0",
        "indptr_empty",
        "indptr_decreasing",
        "indptr_end_short",
        "indptr_end_long",
        "data_short",
        "indices_2d",
        "n_genes_0",
        "n_genes_too_large",
    ],
)
def test_encoder_rejects_invalid_values(changes: dict[str, object], words: list[str]) -> None:
    """Invalid count matrices raise ValueError (not FormatError) naming the tile and what is wrong."""
    with pytest.raises(ValueError) as info:  # noqa: PT011 - the message is checked below
        deltacells.encode_tile(**_with(**changes), name=ENC_NAME)
    assert not isinstance(info.value, FormatError)
    for word in [ENC_NAME, *words]:
        assert word in str(info.value)


def test_encoder_accepts_largest_values() -> None:
    """The bounds themselves are valid: count 2^31 - 1, gene n_genes - 1, n_genes 2^31."""
    blob = deltacells.encode_tile(np.array([0, 2]), np.array([0, 2**31 - 1]), np.array([MAX_COUNT, 1]), 2**31)
    tile = deltacells.decode_tile(blob)
    assert tile.indices.tolist() == [0, 2**31 - 1]
    assert tile.data.tolist() == [MAX_COUNT, 1]
    assert tile.n_genes == 2**31


@pytest.mark.parametrize("n_chunks", [0, -1])
def test_encoder_rejects_n_chunks_below_one(n_chunks: int) -> None:
    """n_chunks < 1 is refused with a ValueError naming it (instead of writing an unreadable tile)."""
    with pytest.raises(ValueError, match="n_chunks"):
        deltacells.encode_tile(**GOOD, n_chunks=n_chunks, name=ENC_NAME)


# --------------------------------------------------------------------------------------------------------------------
# exception policy (DECISIONS.md 7)


def _value_exception_tile(n_cells: int, per_cell: int, n_big: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    indptr = np.arange(n_cells + 1, dtype=np.int64) * per_cell
    indices = np.tile(np.arange(per_cell, dtype=np.int64), n_cells)
    data = np.ones(n_cells * per_cell, dtype=np.int64)
    data[np.linspace(0, data.size - 1, n_big).astype(np.int64)] = 70_000
    assert np.count_nonzero(data > U16_MAX) == n_big
    return indptr, indices, data


@pytest.mark.parametrize(
    ("n_cells", "per_cell", "limit"),
    [(100, 20, 1024), (4000, 100, 2000)],
    ids=["floor_1024", "nnz_over_200"],
)
def test_policy_value_exceptions(n_cells: int, per_cell: int, limit: int) -> None:
    """More than max(1024, nnz // 200) counts above 65535 is refused; exactly the limit is accepted."""
    arrays = _value_exception_tile(n_cells, per_cell, limit)
    tile = deltacells.decode_tile(deltacells.encode_tile(*arrays, per_cell, level=1, name=NAME))
    np.testing.assert_array_equal(tile.data, arrays[2])
    with pytest.raises(ExceptionPolicyError) as info:
        deltacells.encode_tile(*_value_exception_tile(n_cells, per_cell, limit + 1), per_cell, level=1, name=NAME)
    assert isinstance(info.value, ValueError)
    assert not isinstance(info.value, FormatError)
    message = str(info.value)
    for word in [NAME, f"{limit + 1} count exceptions", f"limit of {limit}", "raw counts"]:
        assert word in message


def _gap_exception_tile(n_cells: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    indptr = np.arange(n_cells + 1, dtype=np.int64) * 2
    indices = np.tile(np.array([0, 100_000], dtype=np.int64), n_cells)
    return indptr, indices, np.ones(2 * n_cells, dtype=np.int64)


def test_policy_gap_exceptions() -> None:
    """More than max(1024, nnz // 200) gaps above 65535 is refused, naming the tile; the limit itself is accepted."""
    arrays = _gap_exception_tile(1024)
    tile = deltacells.decode_tile(deltacells.encode_tile(*arrays, 200_000, level=1, name=NAME))
    np.testing.assert_array_equal(tile.indices, arrays[1])
    with pytest.raises(ExceptionPolicyError) as info:
        deltacells.encode_tile(*_gap_exception_tile(1025), 200_000, level=1, name=NAME)
    for word in [NAME, "1025 gap exceptions", "limit of 1024"]:
        assert word in str(info.value)


def test_decoder_has_no_exception_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The policy is the writer's: a tile beyond it is still a valid tile and decodes."""
    arrays = _value_exception_tile(100, 20, 1500)
    monkeypatch.setattr(deltacells.codec._encode, "exception_limit", lambda _nnz: 10**9)
    blob = deltacells.encode_tile(*arrays, 20, level=1, name=NAME)
    monkeypatch.undo()
    np.testing.assert_array_equal(deltacells.decode_tile(blob, name=NAME).data, arrays[2])


# --------------------------------------------------------------------------------------------------------------------
# big-endian hosts


def test_big_endian_host_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a big-endian host decode_tile refuses with UnsupportedPlatformError, before looking at the bytes."""
    blob = base_tile()
    monkeypatch.setattr(deltacells.codec._decode, "HOST_BYTEORDER", "big")
    for data in (blob, b"", b"not a tile"):
        with pytest.raises(UnsupportedPlatformError) as info:
            deltacells.decode_tile(data, name=NAME)
        assert not isinstance(info.value, ValueError)
        assert "big-endian" in str(info.value)
    monkeypatch.undo()
    _assert_base(deltacells.decode_tile(blob, name=NAME))


# --------------------------------------------------------------------------------------------------------------------
# malformed tiles


def _no_content_size(kind: str) -> Callable[[bytes], bytes]:
    def mutate(blob: bytes) -> bytes:
        frame = compress(decompress(get_stream(blob, 0, kind)), content_size=False)
        assert zstandard.get_frame_parameters(frame).content_size == zstandard.CONTENTSIZE_UNKNOWN
        return replace_stream(blob, 0, kind, frame)

    return mutate


def _huge_claim(kind: str, size: int) -> Callable[[bytes], bytes]:
    return lambda blob: replace_stream(blob, 0, kind, with_content_size(get_stream(blob, 0, kind), size))


def _exception_content(kind: str, content: Callable[[int], bytes]) -> Callable[[bytes], bytes]:
    """Replace chunk 0's exception frame by one holding ``content(n)`` (``n`` = the chunk's nonzeros)."""
    return lambda blob: replace_stream(blob, 0, kind, compress(content(chunk_n(blob, 0))))


def _extra_data(extra: Callable[[bytes], bytes]) -> Callable[[bytes], bytes]:
    def mutate(blob: bytes) -> bytes:
        frame = get_stream(blob, 0, "gaps")
        return replace_stream(blob, 0, "gaps", frame + extra(frame))

    return mutate


def _gexc_past_n_genes(blob: bytes) -> bytes:
    # Cell 0's genes 3, 70000, 140000, 140001 are stored as prefix sums 3, 65538, 131073, 131074: with
    # n_genes = 140001 the stored gaps stay in range and only the gap exceptions make gene 140001 reach n_genes.
    return patch_header(blob, n_genes=140_001)


MALFORMED: dict[str, tuple[Callable[[bytes], bytes], list[str]]] = {
    # frames
    **{
        f"no_content_size_{kind}": (_no_content_size(kind), [f"chunk 0 {kind}", "content size"])
        for kind in ("gaps", "vals", "vexc", "gexc")
    },
    **{
        f"huge_claim_{kind}": (_huge_claim(kind, 2**40), [f"chunk 0 {kind}", "claims 1099511627776 bytes"])
        for kind in ("gaps", "vals", "vexc", "gexc")
    },
    "huge_claim_2_64_minus_3": (_huge_claim("vals", 2**64 - 3), ["chunk 0 vals", "claims"]),
    "claim_2n_plus_2": (
        lambda blob: replace_stream(
            blob, 0, "gaps", with_content_size(get_stream(blob, 0, "gaps"), 2 * chunk_n(blob, 0) + 2)
        ),
        ["chunk 0 gaps", "declares", "requires"],
    ),
    "vexc_size_not_multiple_of_8": (
        _exception_content("vexc", lambda _n: exceptions([1], [70_000]) + b"\0\0\0\0"),
        ["chunk 0 vexc frame", "8 * k"],
    ),
    "gexc_size_not_multiple_of_8": (
        _exception_content("gexc", lambda _n: exceptions([1, 2], [4_462, 4_465]) + b"\1"),
        ["chunk 0 gexc frame", "8 * k"],
    ),
    "vexc_k_above_n": (
        _exception_content("vexc", lambda n: exceptions(list(range(n + 1)), [70_000] * (n + 1))),
        ["chunk 0 vexc frame", "k <= "],
    ),
    "gexc_k_above_n": (
        _exception_content("gexc", lambda n: exceptions(list(range(n + 1)), [1] * (n + 1))),
        ["chunk 0 gexc frame", "k <= "],
    ),
    "extra_garbage_in_stream": (_extra_data(lambda _frame: b"\x01\x02\x03\x04\x05"), ["chunk 0 gaps", "zstd frame"]),
    "extra_frame_in_stream": (_extra_data(lambda frame: frame), ["chunk 0 gaps", "zstd frame"]),
    "extra_skippable_frame_in_stream": (
        _extra_data(lambda _frame: struct.pack("<II", 0x184D2A50, 4) + b"skip"),
        ["chunk 0 gaps", "zstd frame"],
    ),
    "extra_zeros_in_stream": (_extra_data(lambda _frame: bytes(8)), ["chunk 0 gaps", "zstd frame"]),
    "frame_cut_short": (
        lambda blob: patch_chunk(blob, 0, gaps_len=read_chunk(blob, 0)["gaps_len"] - 1),
        ["chunk 0 gaps", "zstd frame"],
    ),
    "not_a_frame": (lambda blob: replace_stream(blob, 1, "vals", b"\0" * 32), ["chunk 1 vals", "not a zstd frame"]),
    # header
    "n_chunks_zero": (lambda blob: patch_header(blob, n_chunks=0), ["n_chunks is 0"]),
    "n_chunks_huge": (lambda blob: patch_header(blob, n_chunks=2**32 - 1), ["n_chunks"]),
    "n_cells_2_60": (lambda blob: patch_header(blob, n_cells=2**60), ["n_cells"]),
    "n_cells_2_64_minus_1": (lambda blob: patch_header(blob, n_cells=2**64 - 1), ["n_cells"]),
    "nnz_2_63": (lambda blob: patch_header(blob, nnz=2**63), ["nnz"]),
    "nnz_2_64_minus_1": (lambda blob: patch_header(blob, nnz=2**64 - 1), ["nnz"]),
    "nnz_plus_1": (lambda blob: patch_header(blob, nnz=int(read_header(blob)["nnz"]) + 1), ["nnz"]),
    "n_genes_2_31_plus_1": (lambda blob: patch_header(blob, n_genes=2**31 + 1), ["n_genes"]),
    "reserved_nonzero": (lambda blob: patch_header(blob, reserved=1), ["reserved"]),
    "total_size_too_large": (
        lambda blob: patch_header(blob, total_size=int(read_header(blob)["total_size"]) + 8),
        ["total_size"],
    ),
    "indptr_off_past_end": (lambda blob: patch_header(blob, indptr_off=(len(blob) + 7) // 8 * 8), ["n_cells"]),
    "indptr_not_at_0": (lambda blob: patch_indptr(blob, 0, 1), ["indptr[0]"]),
    "indptr_negative_step": (lambda blob: patch_indptr(blob, 3, -1), ["indptr"]),
    # chunk table
    "chunk_0_not_at_0": (lambda blob: patch_chunk(blob, 0, cell_lo=1), ["chunk 0 starts"]),
    "chunk_cells_reversed": (
        lambda blob: patch_chunk(
            patch_chunk(blob, 1, cell_hi=read_chunk(blob, 1)["cell_lo"] - 1),
            2,
            cell_lo=read_chunk(blob, 1)["cell_lo"] - 1,
        ),
        ["chunk 1"],
    ),
    "vexc_out_of_bounds": (lambda blob: patch_chunk(blob, 0, vexc_len=10**9), ["chunk 0 vexc stream", "past the end"]),
    "gaps_offset_wraps": (
        lambda blob: patch_chunk(blob, 0, gaps_off=2**64 - 8, gaps_len=16),
        ["chunk 0 gaps stream", "past the end"],
    ),
    "vals_in_header": (lambda blob: patch_chunk(blob, 0, vals_off=8), ["chunk 0 vals stream", "overlaps"]),
    "gaps_len_zero": (lambda blob: patch_chunk(blob, 2, gaps_len=0), ["chunk 2", "empty gaps stream"]),
    # stream contents
    "gap_zero_after_first": (
        lambda blob: rewrite_content(blob, 1, "gaps", set_value(later_position_in_cell(blob, 1), 0)),
        ["chunk 1 gaps", "gap of 0"],
    ),
    "count_zero": (lambda blob: rewrite_content(blob, 2, "vals", set_value(3, 0)), ["chunk 2", "vals", "count of 0"]),
    "gene_reaches_n_genes": (
        lambda blob: patch_header(blob, n_genes=int(base_arrays()[1][base_arrays()[1] < 1000].max())),
        ["n_genes"],
    ),
    "gexc_pushes_past_n_genes": (_gexc_past_n_genes, ["chunk 0 gexc frame", "n_genes", "nonzero 3"]),
    "vexc_not_escaped": (
        lambda blob: rewrite_content(blob, 0, "vals", set_value(1, 7)),
        ["chunk 0 vexc frame", "65535"],
    ),
    "gexc_not_escaped": (
        lambda blob: rewrite_content(blob, 0, "gaps", set_value(1, 7)),
        ["chunk 0 gexc frame", "65535"],
    ),
    "vexc_payload_2_31": (
        _exception_content("vexc", lambda _n: exceptions([0, 1], [70_000, 2**31])),
        ["chunk 0 vexc frame", "payload"],
    ),
    "vexc_payload_65535": (
        _exception_content("vexc", lambda _n: exceptions([0, 1], [65_535, 70_000])),
        ["chunk 0 vexc frame", "payload"],
    ),
    "gexc_payload_n_genes": (
        _exception_content("gexc", lambda _n: exceptions([1, 2], [BASE_GENES, 4_465])),
        ["chunk 0 gexc frame", "payload"],
    ),
    "gexc_position_n": (
        _exception_content("gexc", lambda n: exceptions([1, n], [4_462, 4_465])),
        ["chunk 0 gexc frame", "position"],
    ),
    "vexc_positions_decreasing": (
        _exception_content("vexc", lambda _n: exceptions([1, 0], [70_000, 70_000])),
        ["chunk 0 vexc frame", "increasing"],
    ),
}


@pytest.mark.parametrize("case", list(MALFORMED), ids=list(MALFORMED))
def test_malformed_tile(case: str) -> None:
    """Each malformed tile raises FormatError naming the tile and the field at fault (never another exception)."""
    mutate, words = MALFORMED[case]
    blob = mutate(base_tile())
    assert blob != base_tile()
    header = read_header(blob)
    assert header["crc32"] == zlib.crc32(blob[64:]), "the CRC is fixed so that the intended check is reached"
    with pytest.raises(FormatError) as info:
        deltacells.decode_tile(blob, name=NAME)
    message = str(info.value)
    assert message.startswith(f"{NAME}: ")
    for word in words:
        assert word in message


@pytest.mark.parametrize(
    ("cell", "genes"),
    [(0, [0, 50]), (1, [50]), (2, [0, 100_000])],
    ids=["later_gene", "first_gene", "via_gap_exception"],
)
def test_gene_index_equal_to_n_genes(cell: int, genes: list[int]) -> None:
    """The largest gene index equal to n_genes is refused, however it is reached; n_genes one above is fine."""
    cells = [[(0, 1), (4, 2)], [(3, 3)], [(2, 1), (3, 1)]]
    cells[cell] = [(g, 7) for g in genes]
    indptr, indices, data = make_csr(cells)
    blob = deltacells.encode_tile(indptr, indices, data, genes[-1] + 1, n_chunks=1, name=NAME)
    np.testing.assert_array_equal(deltacells.decode_tile(blob).indices, indices)
    with pytest.raises(FormatError, match="n_genes") as info:
        deltacells.decode_tile(patch_header(blob, n_genes=genes[-1]), name=NAME)
    assert f"(at nonzero {indptr[cell + 1] - 1})" in str(info.value)
    assert ("gexc" in str(info.value)) == (genes[-1] > U16_MAX)


def test_bad_crc_is_reported() -> None:
    """Without the CRC fix, a changed payload byte is caught by the CRC check first."""
    blob = bytearray(base_tile())
    blob[-1] ^= 0x40
    with pytest.raises(FormatError, match="crc32"):
        deltacells.decode_tile(bytes(blob), name=NAME)


def test_consistent_huge_claim_allocates_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tile whose header, indptr and chunk table all agree on 2^27 nonzeros, with tiny frames claiming 2^28 bytes,
    is refused before any output is allocated (by numpy, which tracemalloc sees, or mapped, which it does not)."""
    from deltacells import _memory

    mapped: list[int] = []
    monkeypatch.setattr(_memory, "_mapping", lambda nbytes: mapped.append(nbytes))
    n = 2**27
    blob = deltacells.encode_tile(np.array([0, 1]), np.array([0]), np.array([1]), 10, level=3, name=NAME)
    blob = patch_indptr(patch_header(blob, nnz=n), 1, n)
    blob = patch_chunk(blob, 0, nnz_hi=n)
    for kind in ("gaps", "vals"):
        blob = replace_stream(blob, 0, kind, with_content_size(get_stream(blob, 0, kind), 2 * n))
    tracemalloc.start()
    try:
        with pytest.raises(FormatError) as info:
            deltacells.decode_tile(blob, name=NAME)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "chunk 0 gaps stream" in str(info.value)
    assert f"claims {2 * n} bytes" in str(info.value)
    assert peak < 16 * 2**20, f"decoding a {len(blob)}-byte tile allocated {peak} bytes"
    assert not mapped, f"decoding a {len(blob)}-byte tile mapped {mapped} bytes"


# --------------------------------------------------------------------------------------------------------------------
# fuzzing


def assert_valid_csr(tile: deltacells.DecodedTile) -> None:
    """``tile`` is a well-formed CSR count matrix."""
    assert tile.indptr.dtype == np.int64
    assert tile.indices.dtype == np.int32
    assert tile.data.dtype == np.int32
    assert 1 <= tile.n_genes <= 2**31
    nnz = tile.indices.size
    assert tile.data.size == nnz
    assert tile.indptr[0] == 0
    assert tile.indptr[-1] == nnz
    assert np.all(np.diff(tile.indptr) >= 0)
    assert np.all(tile.indices >= 0)
    assert np.all(tile.indices < tile.n_genes)
    assert np.all(tile.data >= 1)
    same_cell = np.ones(max(nnz - 1, 0), dtype=bool)
    starts = tile.indptr[1:-1]
    same_cell[starts[(starts > 0) & (starts < nnz)] - 1] = False
    assert np.all(np.diff(tile.indices)[same_cell] > 0)


def _decode_or_error(blob: bytes, name: str) -> deltacells.DecodedTile | FormatError:
    try:
        return deltacells.decode_tile(blob, name=name)
    except FormatError as exc:
        return exc


def test_fuzz_mutations() -> None:
    """300 random byte changes and truncations: each decodes to a valid CSR matrix or raises FormatError."""
    rng = np.random.default_rng(20240607)
    indptr, indices, data = base_arrays()
    blob = deltacells.encode_tile(
        indptr[:13], indices[: indptr[12]], data[: indptr[12]], BASE_GENES, n_chunks=3, level=1
    )
    assert read_chunk(blob, 0)["vexc_len"]
    assert read_chunk(blob, 0)["gexc_len"]
    errors = decoded = 0
    for i in range(300):
        fix = i % 2 == 1
        mutated = bytearray(blob)
        if rng.random() < 0.75:
            position = int(rng.integers(0, len(blob)))
            mutated[position] ^= int(rng.integers(1, 256))
            what = f"byte {position} changed"
        else:
            position = int(rng.integers(0, len(blob)))
            del mutated[position:]
            what = f"cut to {position} bytes"
            if fix and position >= 64:
                struct.pack_into("<Q", mutated, 48, position)
        if fix and len(mutated) >= 64:
            mutated = bytearray(fix_crc(mutated))
        what += ", CRC fixed" if fix else ""
        try:
            outcome = _decode_or_error(bytes(mutated), "fuzzed")
        except Exception as exc:  # any exception but FormatError is the failure under test: say which case
            exc.add_note(f"fuzz case {i}: {what}")
            raise
        if isinstance(outcome, FormatError):
            assert "fuzzed" in str(outcome), what
            errors += 1
            continue
        decoded += 1
        assert_valid_csr(outcome)
        if not fix:
            assert "byte" in what, f"{what}: decoded although truncated"
            assert position < 56 or 60 <= position < 64, f"{what}: the CRC-32 missed a change"
    assert errors >= 150, f"only {errors} of 300 mutations were refused ({decoded} decoded)"


# --------------------------------------------------------------------------------------------------------------------
# layouts the writer never makes but readers must accept (DECISIONS.md 3)


def build_tile(n_genes: int, indptr: np.ndarray, chunks: list[tuple[int, int, dict[str, bytes]]]) -> bytes:
    """A tile from scratch: ``chunks`` are ``(cell_lo, cell_hi, frames)`` with frames keyed by stream kind."""
    indptr = np.asarray(indptr, dtype="<i8")
    table_end = 64 + 96 * len(chunks)
    indptr_off = (table_end + 7) // 8 * 8
    out = bytearray(indptr_off)
    out += indptr.tobytes()
    entries = []
    for cell_lo, cell_hi, frames in chunks:
        entry = {"cell_lo": cell_lo, "cell_hi": cell_hi, "nnz_lo": int(indptr[cell_lo]), "nnz_hi": int(indptr[cell_hi])}
        for kind in ("gaps", "vals", "vexc", "gexc"):
            entry[f"{kind}_off"] = entry[f"{kind}_len"] = 0
            if kind in frames:
                out += bytes(-len(out) % 8)
                entry[f"{kind}_off"], entry[f"{kind}_len"] = len(out), len(frames[kind])
                out += frames[kind]
        entries.append(entry)
    for c, entry in enumerate(entries):
        CHUNK.pack_into(out, 64 + 96 * c, *(entry[f] for f in CHUNK_FIELDS))
    n_cells, nnz = len(indptr) - 1, int(indptr[-1])
    HEADER.pack_into(out, 0, b"DELTACEL", 2, 0, n_cells, nnz, n_genes, len(chunks), indptr_off, len(out), 0, 0)
    return fix_crc(out)


def chunk_frames(blob: bytes, c: int) -> dict[str, bytes]:
    """The frames of chunk ``c`` of an encoded tile."""
    entry = read_chunk(blob, c)
    return {kind: get_stream(blob, c, kind) for kind in ("gaps", "vals", "vexc", "gexc") if entry[f"{kind}_len"]}


EMPTY_FRAMES = {"gaps": compress(b""), "vals": compress(b"")}


def test_builder_reproduces_encoder() -> None:
    """build_tile lays a tile out exactly as the writer does (so the cases below differ only where they say)."""
    blob = base_tile()
    indptr, _, _ = base_arrays()
    chunks = [(read_chunk(blob, c)["cell_lo"], read_chunk(blob, c)["cell_hi"], chunk_frames(blob, c)) for c in range(4)]
    assert build_tile(BASE_GENES, indptr, chunks) == blob


def test_reader_accepts_empty_chunks() -> None:
    """Chunks with cell_lo == cell_hi (and n = 0, two empty frames) may appear anywhere."""
    blob = base_tile()
    indptr, _, _ = base_arrays()
    chunks = [(read_chunk(blob, c)["cell_lo"], read_chunk(blob, c)["cell_hi"], chunk_frames(blob, c)) for c in range(4)]
    at_0, at_2, at_end = (0, 0, EMPTY_FRAMES), (chunks[1][1], chunks[1][1], EMPTY_FRAMES), (40, 40, EMPTY_FRAMES)
    padded = build_tile(BASE_GENES, indptr, [at_0, *chunks[:2], at_2, *chunks[2:], at_end])
    assert read_header(padded)["n_chunks"] == 7
    _assert_base(deltacells.decode_tile(padded, name=NAME))


def test_reader_accepts_zero_cells_with_empty_chunk() -> None:
    """A tile without cells may still have (empty) chunks."""
    tile = deltacells.decode_tile(build_tile(5, np.array([0]), [(0, 0, EMPTY_FRAMES)]), name=NAME)
    assert tile.shape == (0, 5)
    assert tile.nnz == 0


def test_empty_chunk_needs_both_frames() -> None:
    """Even a chunk with n = 0 must have its gaps and vals frames."""
    blob = build_tile(5, np.array([0, 0]), [(0, 1, {"gaps": compress(b"")})])
    with pytest.raises(FormatError, match="empty vals stream"):
        deltacells.decode_tile(blob, name=NAME)


def test_parallel_decode_reports_format_errors() -> None:
    """A broken chunk of a tile large enough to decode on several threads still raises FormatError."""
    rng = np.random.default_rng(5)
    mask = rng.random((2500, 1000)) < 0.1
    rows, cols = np.nonzero(mask)
    indptr = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=2500)))).astype(np.int64)
    blob = deltacells.encode_tile(indptr, cols, rng.integers(1, 10, cols.size), 1000, level=1, name=NAME)
    assert read_header(blob)["nnz"] >= 200_000, "must exceed the decoder's parallel threshold"
    broken = rewrite_content(blob, 5, "vals", set_value(100, 0))
    for threads in (1, 2, 4, None):
        with pytest.raises(FormatError, match=r"chunk 5 .*count of 0"):
            deltacells.decode_tile(broken, name=NAME, threads=threads)
