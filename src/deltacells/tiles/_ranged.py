"""Ranged reads: a sparse subset of a tile on object storage, read as byte ranges into a partial tile.

A tile is read whole by default: one request for its ``tile_bytes`` (plus one byte, so that a longer object
shows), checked in full (its CRC-32 included), decoded and cached. When only a few of a tile's cells are
wanted from remote storage, most of those bytes are wasted; a ranged read instead fetches the tile's prefix
(header, chunk table and indptr, :func:`~deltacells.codec.prefix_size` bytes: one request, a second if
another writer laid the tile out otherwise), then only the frames of the chunks that hold the wanted cells
(:meth:`~deltacells.codec.TilePrefix.frame_ranges`: close frames merged into one request), and decodes
those chunks alone. The result is a *partial* tile (``complete`` is false: the cells of the chunks not
read are empty), cached like any other. When the cache already holds a partial decoding of the tile, the
chunks it holds are not fetched again, and the result is the union of both. Only
:meth:`~deltacells.tiles.TileReader.iter_tiles` given ``rows`` (the cells wanted of each tile, which a
dataset passes for the tiles it does not want whole) reads in ranges.

The rule (:func:`ranged_read_pays`, with the cache test of
:meth:`~deltacells.tiles.TileReader.reads_ranged`): a tile is read in ranges only

* on remote storage (on a local disk a tile is always read whole: one read is cheap);
* for at least one wanted cell, of a tile cut in more than one chunk (``min(n_chunks, n_cells) > 1``);
* when the cache does not hold the wanted cells already (a cached tile costs nothing);
* when the bytes expected to move are at most :data:`RANGED_MAX_SHARE` of the tile: the prefix, plus the
  tile's size times the expected share of chunks the wanted cells touch: ``1 - (1 - 1 / n_chunks) ** n_rows``
  for ``n_rows`` cells spread at random, less for runs of consecutive cells (a training loader's blocks:
  about their length in chunks, plus one per run).

Otherwise the tile is fetched whole; it is checked whole (its CRC-32 included), and still only the chunks
holding the wanted cells are decoded (:meth:`~deltacells.tiles.TileReader.get`). The threshold weighs what
a ranged read gives up: a second round trip (prefix, then frames) and the CRC-32 (it covers the whole
object, so cannot be checked; every other rule of the format is, for what is read).
"""

from __future__ import annotations

import functools
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from deltacells.codec import PrefixTooShortError, decode_chunks, merge_partial, parse_prefix, prefix_size
from deltacells.errors import MissingObjectError
from deltacells.format import check_tile, first_problem_raises, missing_tile, tile_path

if TYPE_CHECKING:
    from deltacells.codec import DecodedTile, TilePrefix
    from deltacells.format import Manifest, ManifestFields
    from deltacells.storage import BaseStore

__all__ = [
    "RANGED_MAX_SHARE",
    "HeaderCounts",
    "RangedFetch",
    "chunks_to_decode",
    "decode_ranged",
    "ranged_read_pays",
    "submit_ranged_fetch",
]

#: A tile of remote storage is read in ranges (its header, chunk table and indptr, then only the frames of the
#: chunks holding the requested cells) when the bytes expected to move are at most this share of the
#: tile; otherwise it is fetched whole (one request, and it can be cached).
RANGED_MAX_SHARE = 0.5


class RangedFetch(NamedTuple):
    """What a ranged fetch brings: the parsed prefix, the fetched frames and the chunks they hold."""

    prefix: TilePrefix
    #: Bytes of the object by their absolute start offset (the ranges of ``prefix.frame_ranges(chunks)``).
    pieces: dict[int, bytes]
    #: Sorted chunk numbers holding the wanted cells (those of ``held`` left out): the chunks to decode.
    chunks: np.ndarray
    #: A partial decoding of the tile whose chunks were not fetched again (None: nothing skipped).
    held: DecodedTile | None = None


class HeaderCounts(NamedTuple):
    """What :func:`~deltacells.format.check_tile` compares with the manifest, from a tile's header."""

    n_cells: int
    nnz: int
    n_genes: int


def ranged_read_pays(
    store: BaseStore, manifest: Manifest, tile: int, n_rows: int, *, cells: np.ndarray | None = None
) -> bool:
    """Whether ``n_rows`` cells of ``tile`` are better read in ranges than whole (the cache aside).

    Parameters
    ----------
    store
        The dataset's store (only remote storage is read in ranges).
    manifest
        Its manifest (the tile's cells and bytes, the chunks per tile).
    tile
        The tile number.
    n_rows
        How many of its cells are wanted.
    cells
        The tile-local cells wanted, when known: runs of consecutive cells touch fewer chunks than as many
        cells spread at random.

    Returns
    -------
    bool
        True on remote storage, for ``n_rows > 0`` cells of a tile of more than one chunk, when the prefix
        plus the expected share of the chunks those cells touch is at most :data:`RANGED_MAX_SHARE` of the
        tile's bytes. The share is the smaller of two estimates: for cells spread at random,
        ``1 - (1 - 1 / n_chunks) ** n_rows``; for ``cells`` in ``r`` runs of consecutive cells,
        ``(n_rows / cells_per_chunk + r) / n_chunks`` (each run covers its length in chunks, plus one it
        straddles).
    """
    if store.is_local or n_rows <= 0:
        return False
    n_cells = int(manifest.tile_cells[tile])
    n_chunks = min(int(manifest.n_chunks), n_cells)
    if n_chunks <= 1:
        return False

    size = int(manifest.tile_bytes[tile])
    touched = 1.0 - (1.0 - 1.0 / n_chunks) ** n_rows  # expected share of the chunks
    if cells is not None and len(cells) == n_rows:
        ordered = np.sort(np.asarray(cells, dtype=np.int64))
        runs = 1 + int(np.count_nonzero(np.diff(ordered) != 1))
        touched = min(touched, (n_rows * n_chunks / n_cells + runs) / n_chunks)
    return prefix_size(n_cells, n_chunks) + touched * size <= RANGED_MAX_SHARE * size


def chunks_to_decode(
    prefix: TilePrefix, needed: np.ndarray, held: DecodedTile | None
) -> tuple[np.ndarray, DecodedTile | None]:
    """The chunks of ``needed`` that ``held`` (a cached decoding of the tile, or None) lacks, and ``held``.

    ``held`` is dropped (returned as None, every needed chunk kept) unless its chunk boundaries are the
    prefix's: a decoding of an object since rewritten is not merged with the new one.
    """
    if (
        held is None
        or held.chunk_mask is None
        or held.chunk_bounds is None
        or not np.array_equal(held.chunk_bounds, prefix.chunk_bounds)
    ):
        return needed, None
    return needed[~held.chunk_mask[needed]], held


def submit_ranged_fetch(
    store: BaseStore,
    manifest: Manifest,
    tile: int,
    rows: np.ndarray,
    *,
    held: DecodedTile | None = None,
    prefix: TilePrefix | None = None,
) -> Future[RangedFetch]:
    """Start reading the prefix of ``tile``, then the frames of the chunks that hold ``rows`` (and ``held`` lacks).

    Chained through callbacks (never blocking the thread that completes a request, which on an
    asynchronous filesystem is the event loop's).

    Parameters
    ----------
    store
        The dataset's store (its requests run on ``store.submit_read``).
    manifest
        Its manifest (the tile's size and cells, the chunks per tile: the size of the first request).
    tile
        The tile number.
    rows
        The tile-local cells wanted.
    held
        A partial decoding of the tile (from the cache): its chunks are not fetched (when its chunk
        boundaries are the prefix's), and :func:`decode_ranged` merges it in.
    prefix
        The tile's prefix, parsed before (by a reader that keeps them): only the frames are fetched.

    Returns
    -------
    concurrent.futures.Future
        Of the :class:`RangedFetch`; it fails with the first error of any request or of the prefix's checks.
    """
    name = tile_path(tile)
    size = int(manifest.tile_bytes[tile])
    n_cells = int(manifest.tile_cells[tile])
    where = _where(store, tile)
    out: Future[RangedFetch] = Future()
    lock = threading.Lock()

    def fail(exc: BaseException) -> None:
        with lock:
            if not out.done():
                out.set_exception(exc)

    def on_prefix(request: Future[bytes]) -> None:
        try:
            prefix = parse_prefix(request.result(), object_size=size, name=where, n_cells=n_cells)
        except PrefixTooShortError as short:
            store.submit_read(name, 0, short.needed).add_done_callback(on_prefix)
            return
        except BaseException as exc:
            fail(exc)
            return
        fetch_frames(prefix)

    def fetch_frames(prefix: TilePrefix) -> None:
        try:
            chunks, skip = chunks_to_decode(prefix, prefix.chunks_for_cells(rows), held)
            ranges = prefix.frame_ranges(chunks)
        except BaseException as exc:
            fail(exc)
            return
        pieces: dict[int, bytes] = {}
        if not ranges:
            out.set_result(RangedFetch(prefix, pieces, chunks, skip))
            return
        for start, end in ranges:
            store.submit_read(name, start, end).add_done_callback(
                functools.partial(
                    on_piece, start=start, prefix=prefix, pieces=pieces, chunks=chunks, skip=skip, n=len(ranges)
                )
            )

    def on_piece(
        request: Future[bytes],
        start: int,
        prefix: TilePrefix,
        pieces: dict[int, bytes],
        chunks: np.ndarray,
        skip: DecodedTile | None,
        n: int,
    ) -> None:
        try:
            data = request.result()
        except BaseException as exc:
            fail(exc)
            return
        with lock:
            if out.done():
                return
            pieces[start] = data
            if len(pieces) == n:
                out.set_result(RangedFetch(prefix, pieces, chunks, skip))

    if prefix is not None:
        fetch_frames(prefix)
        return out
    want = min(size, prefix_size(n_cells, min(int(manifest.n_chunks), n_cells)))
    store.submit_read(name, 0, want).add_done_callback(on_prefix)
    return out


def decode_ranged(tile: int, fetched: Future[RangedFetch], *, store: BaseStore, fields: ManifestFields) -> DecodedTile:
    """Decode the chunks a ranged fetch brought: a partial tile, checked against the manifest.

    Parameters
    ----------
    tile
        The tile number.
    fetched
        The fetch of :func:`submit_ranged_fetch` (waited for).
    store
        The dataset's store (its URL names the tile in errors).
    fields
        The manifest's fields (the header's cells, nonzeros and genes are checked against them).

    Returns
    -------
    DecodedTile
        The tile with only the fetched chunks' cells filled (``complete`` false unless they and the
        ``held`` tile's make every chunk), merged with the fetch's ``held`` tile, frozen (read-only arrays).

    Raises
    ------
    MissingObjectError
        If the tile's object is not there.
    FormatError
        If what was read breaks a rule of the format or disagrees with the manifest.
    """
    try:
        prefix, pieces, chunks, held = fetched.result()
    except MissingObjectError as exc:
        raise missing_tile(tile, fields).to_exception(store.url) from exc
    header = prefix.header
    counts = HeaderCounts(header.n_cells, header.nnz, header.n_genes)
    first_problem_raises(check_tile(counts, tile, fields), store.url)
    decoded = decode_chunks(prefix, pieces, chunks, name=_where(store, tile), threads=1)
    return (decoded if held is None else merge_partial(held, decoded)).freeze()


def _where(store: BaseStore, tile: int) -> str:
    """The tile's object, named for error messages."""
    return f"{store.url.rstrip('/')}/{tile_path(tile)}"
