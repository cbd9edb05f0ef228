"""The rules of a tile against the manifest: its size, cells, nonzeros and genes (docs/format.md, decision 5)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from deltacells.errors import FormatError, MissingObjectError
from deltacells.format._names import MANIFEST_NAME, tile_path
from deltacells.format._problems import Checker, Problem, problem_from_error, reopen_hint

if TYPE_CHECKING:
    from deltacells.codec import CheckedTile, DecodedTile
    from deltacells.format._manifest import ManifestFields

__all__ = ["check_tile", "check_tile_size", "check_tile_bytes_against", "decode_checked_tile", "missing_tile"]


class TileCounts(Protocol):
    """What :func:`check_tile` compares with the manifest: a decoded or checked tile, or a tile's header counts."""

    @property
    def n_cells(self) -> int:
        """Cells (rows) of the tile."""

    @property
    def nnz(self) -> int:
        """Stored nonzeros of the tile."""

    @property
    def n_genes(self) -> int:
        """Genes (columns) of the tile."""


def missing_tile(tile: int, fields: ManifestFields) -> Problem:
    """The problem of a tile the manifest lists that is not there."""
    return Problem(tile_path(tile), f"tile {tile} of {fields.n_tiles} is missing from the dataset", MissingObjectError)


def check_tile_size(size: int, tile: int, fields: ManifestFields) -> Checker[None]:
    """A tile's size in bytes against ``tile_bytes[tile]``."""
    if fields.tile_bytes is not None and size != fields.tile_bytes[tile]:
        yield Problem(
            tile_path(tile),
            f"size is {size} bytes but {MANIFEST_NAME} field tile_bytes[{tile}] says {fields.tile_bytes[tile]}"
            f"{reopen_hint(tile, fields.tile_bytes)}",
        )


def check_tile(decoded: TileCounts, tile: int, fields: ManifestFields) -> Checker[None]:
    """A decoded tile's cells, nonzeros and ``n_genes`` against the manifest."""
    name = tile_path(tile)
    for field, what, got, want in (
        ("tile_cells", "cells", decoded.n_cells, fields.tile_cells),
        ("tile_nnz", "nonzeros", decoded.nnz, fields.tile_nnz),
    ):
        if want is not None and got != want[tile]:
            yield Problem(
                name,
                f"holds {got} {what} but {MANIFEST_NAME} field {field}[{tile}] says {want[tile]}"
                f"{reopen_hint(tile, want)}",
            )
    if fields.n_genes is not None and decoded.n_genes != fields.n_genes:
        yield Problem(
            name, f"header field n_genes is {decoded.n_genes} but {MANIFEST_NAME} field n_genes is {fields.n_genes}"
        )


def decode_checked_tile(
    blob: bytes | memoryview, tile: int, fields: ManifestFields, *, url: str = "", threads: int | None = 1
) -> Checker[DecodedTile | None]:
    """Check a tile's bytes against the manifest, decode them (every rule of the tile layout) and check the result.

    ``url`` (the dataset's) only locates the tile in the decoder's messages, which the problems drop again.
    """
    from deltacells.codec import decode_tile

    name = tile_path(tile)
    yield from check_tile_size(len(blob), tile, fields)
    try:
        decoded = decode_tile(blob, name=f"{url.rstrip('/')}/{name}" if url else name, threads=threads)
    except FormatError as exc:
        yield problem_from_error(name, exc, url=url or None)
        return None
    problems = list(check_tile(decoded, tile, fields))
    yield from problems
    return None if problems else decoded


def check_tile_bytes_against(
    blob: bytes | memoryview, tile: int, fields: ManifestFields, *, url: str = ""
) -> Checker[CheckedTile | None]:
    """Check a whole tile's bytes, short of decoding them, and its header against the manifest.

    Its size against ``tile_bytes``, then what :func:`~deltacells.codec._decode.check_tile_bytes` checks
    (header, CRC-32, indptr, chunk table, frame sizes), then the header's cells, nonzeros and genes against
    the manifest (:func:`check_tile`). Returns the checked tile, ready to be decoded into slices of an
    output whose sizes came from the manifest.
    """
    from deltacells.codec import check_tile_bytes

    name = tile_path(tile)
    yield from check_tile_size(len(blob), tile, fields)
    try:
        checked = check_tile_bytes(blob, name=f"{url.rstrip('/')}/{name}" if url else name)
    except FormatError as exc:
        yield problem_from_error(name, exc, url=url or None)
        return None
    problems = list(check_tile(checked, tile, fields))
    yield from problems
    return None if problems else checked
