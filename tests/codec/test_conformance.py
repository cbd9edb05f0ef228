"""The tile codec against the shared conformance vectors (made by an independent implementation of FORMAT.md)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import deltacells
from deltacells import FormatError

CONFORMANCE = (Path(__file__).parents[2] / ".." / "shared" / "conformance").resolve()

if not (CONFORMANCE / "valid").is_dir() or not (CONFORMANCE / "invalid").is_dir():
    pytest.skip(
        f"conformance vectors not found at {CONFORMANCE} (expected ../shared/conformance beside the project root)",
        allow_module_level=True,
    )

VALID = sorted((CONFORMANCE / "valid").glob("*.dct"))
INVALID = sorted((CONFORMANCE / "invalid").glob("*.dct"))

#: The field each invalid vector breaks, as its FormatError message must name it (FORMAT.md via CASES.md).
#: Vectors not listed here are still checked for FormatError and the object name.
EXPECTED_FIELD = {
    "bad_magic": "magic",
    "version_3": "version",
    "unknown_flags": "flags",
    "truncated": "total_size",
    "trailing_bytes": "total_size",
    "short_header": "header",
    "crc_mismatch": "crc32",
    "indptr_off_unaligned": "indptr_off",
    "indptr_off_in_table": "indptr_off",
    "nnz_mismatch": "nnz",
    "n_genes_zero": "n_genes",
    "n_genes_too_small": "n_genes",
    "indptr_decreasing": "indptr",
    "chunks_not_contiguous": "contiguous",
    "chunk_disagrees_indptr": "indptr",
    "stream_out_of_bounds": "gaps stream",
    "frame_wrong_size": "gaps stream",
    "not_a_zstd_frame": "vals stream",
    "vexc_position_out_of_range": "vexc",
    "vexc_positions_not_increasing": "vexc",
    "vexc_payload_small": "vexc",
    "gexc_pushes_past_n_genes": "gexc",
    "gexc_payload_zero": "gexc",
}


def _ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def _expected(path: Path) -> dict[str, np.ndarray]:
    with np.load(path.with_suffix(".npz")) as npz:
        return {key: npz[key] for key in ("indptr", "indices", "data", "n_genes")}


def _assert_tile_equals(tile: deltacells.DecodedTile, expected: dict[str, np.ndarray]) -> None:
    assert tile.indptr.dtype == np.int64
    assert tile.indices.dtype == np.int32
    assert tile.data.dtype == np.int32
    np.testing.assert_array_equal(tile.indptr, expected["indptr"], strict=True)
    np.testing.assert_array_equal(tile.indices, expected["indices"], strict=True)
    np.testing.assert_array_equal(tile.data, expected["data"], strict=True)
    assert tile.n_genes == int(expected["n_genes"])


def _listed_cases() -> dict[str, set[str]]:
    cases: dict[str, set[str]] = {"valid": set(), "invalid": set()}
    for line in (CONFORMANCE / "CASES.md").read_text().splitlines():
        match = re.match(r"^\|\s*(valid|invalid)\s*\|\s*([A-Za-z0-9_]+)\s*\|", line)
        if match:
            cases[match.group(1)].add(match.group(2))
    return cases


def test_vectors_present() -> None:
    """Every vector listed in CASES.md is on disk (and nothing unlisted), each valid one with its .npz."""
    cases = _listed_cases()
    assert {p.stem for p in VALID} == cases["valid"]
    assert {p.stem for p in INVALID} == cases["invalid"]
    assert all(p.with_suffix(".npz").is_file() for p in VALID)
    assert len(VALID) >= 9
    assert len(INVALID) >= 23


@pytest.mark.parametrize("path", VALID, ids=_ids(VALID))
def test_valid_vector_decodes(path: Path) -> None:
    """A valid vector decodes to exactly its .npz arrays."""
    tile = deltacells.decode_tile(path.read_bytes(), name=path.name)
    _assert_tile_equals(tile, _expected(path))
    assert tile.shape == (tile.indptr.shape[0] - 1, tile.n_genes)


@pytest.mark.parametrize("path", VALID, ids=_ids(VALID))
@pytest.mark.parametrize("threads", [1, 2])
def test_valid_vector_threads(path: Path, threads: int) -> None:
    """Decoding with an explicit thread count gives the same arrays."""
    tile = deltacells.decode_tile(path.read_bytes(), name=path.name, threads=threads)
    _assert_tile_equals(tile, _expected(path))


@pytest.mark.parametrize("path", VALID, ids=_ids(VALID))
def test_valid_vector_buffer_types(path: Path) -> None:
    """bytearray and memoryview inputs decode like bytes."""
    blob = path.read_bytes()
    expected = _expected(path)
    _assert_tile_equals(deltacells.decode_tile(bytearray(blob), name=path.name), expected)
    _assert_tile_equals(deltacells.decode_tile(memoryview(blob), name=path.name), expected)


@pytest.mark.parametrize("path", VALID, ids=_ids(VALID))
def test_valid_vector_to_csr(path: Path) -> None:
    """``to_csr`` gives the expected matrix with the requested dtype."""
    expected = _expected(path)
    csr = deltacells.decode_tile(path.read_bytes(), name=path.name).to_csr(np.int64)
    assert csr.dtype == np.int64
    assert csr.shape == (expected["indptr"].shape[0] - 1, int(expected["n_genes"]))
    np.testing.assert_array_equal(csr.indptr, expected["indptr"])
    np.testing.assert_array_equal(csr.indices, expected["indices"])
    np.testing.assert_array_equal(csr.data, expected["data"])


@pytest.mark.parametrize("path", INVALID, ids=_ids(INVALID))
@pytest.mark.parametrize("threads", [None, 1, 2])
def test_invalid_vector_raises(path: Path, threads: int | None) -> None:
    """An invalid vector raises FormatError naming the object (never another exception)."""
    name = f"conformance/{path.name}"
    with pytest.raises(FormatError) as info:
        deltacells.decode_tile(path.read_bytes(), name=name, threads=threads)
    assert isinstance(info.value, ValueError)
    assert name in str(info.value)


@pytest.mark.parametrize("path", INVALID, ids=_ids(INVALID))
def test_invalid_vector_names_field(path: Path) -> None:
    """The error message names the field the vector breaks."""
    field = EXPECTED_FIELD.get(path.stem)
    if field is None:
        pytest.skip(f"no expected field recorded for new vector {path.stem}")
    with pytest.raises(FormatError) as info:
        deltacells.decode_tile(path.read_bytes(), name=path.name)
    assert field.lower() in str(info.value).lower()


@pytest.mark.parametrize("path", VALID, ids=_ids(VALID))
@pytest.mark.parametrize("n_chunks", [1, 8])
def test_valid_vector_reencodes(path: Path, n_chunks: int) -> None:
    """Re-encoding a valid vector's arrays with encode_tile and decoding gives them back."""
    expected = _expected(path)
    n_genes = int(expected["n_genes"])
    blob = deltacells.encode_tile(expected["indptr"], expected["indices"], expected["data"], n_genes, n_chunks=n_chunks)
    assert blob[:8] == b"DELTACEL"
    _assert_tile_equals(deltacells.decode_tile(blob, name=path.name), expected)
