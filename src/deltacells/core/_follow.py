"""Readers that survive appends: a reader of an older version goes on after an append rewrote its last tile.

An append only adds cells (docs/format.md, decision 17): every tile but the last is left as it was, and the
last, if it was partial, is rewritten with the new cells after the old ones. A reader that opened the
dataset before then and reads that tile finds an object that disagrees with its manifest (its size, its
cells). :func:`follow_append` then reads the manifest again and, if it *extends* the reader's (the same
genes and layout, the same tiles before the last, at least the cells of the last), reads the rewritten tile
as the new version names it (through its staging prefix while that commit is pending), checks it whole,
keeps its first cells (those the reader knows: the same rows, as the append decoded and wrote them again),
and holds them, encoded again, in memory in front of the reader's store
(``TileReader.hold_in_memory``). The reader then goes on with the same answers for the
cells it knew, on every read path, and never meets that object again: later appends rewrite only tiles it
does not know.

:func:`manifest_changed` tells whether the manifest is not the one a reader opened: the test an opening
reader makes before it tries again after an error (an append landed while it read obs or var).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from deltacells.codec import encode_tile
from deltacells.core._commit import PendingCommitStore, reading_store
from deltacells.errors import FormatError, MissingObjectError
from deltacells.format import MANIFEST_NAME, Manifest, tile_path
from deltacells.storage import OverlayStore
from deltacells.tiles import TileReader

if TYPE_CHECKING:
    from deltacells.storage import BaseStore

__all__ = ["STALE_ERRORS", "follow_append", "manifest_changed", "retried_after_appends"]

#: What a read of an object an append rewrote raises (a size, a hash or cells that disagree; an object moved).
STALE_ERRORS = (FormatError, MissingObjectError)

#: Times a read is tried again after following appends (each try follows every append landed meanwhile).
FOLLOW_ATTEMPTS = 8

T = TypeVar("T")

_lock = threading.Lock()  # one follow at a time in a process (the first does the work, the others find it done)


def root_store(store: BaseStore) -> BaseStore:
    """The dataset's root under a reader's wrappers (a pending commit's view, a tile held in memory)."""
    while isinstance(store, (OverlayStore, PendingCommitStore)):
        store = store.store
    return store


def current_manifest(store: BaseStore) -> Manifest | None:
    """The manifest the dataset has now (None if it cannot be read, or breaks a rule: nothing to follow)."""
    root = root_store(store)
    try:
        text = root.read(MANIFEST_NAME)
        return Manifest.from_json(text, where=f"{root.url.rstrip('/')}/{MANIFEST_NAME}")
    except STALE_ERRORS:
        return None


def manifest_changed(store: BaseStore, manifest: Manifest) -> bool:
    """Whether the dataset's manifest is no longer ``manifest`` (a commit landed, or was finished, since)."""
    now = current_manifest(store)
    return now is not None and now.to_dict() != manifest.to_dict()


def extends(new: Manifest, old: Manifest) -> bool:
    """Whether ``new`` is ``old`` with cells appended: the same genes and layout, ``old``'s tiles then more cells.

    Every tile of ``old`` but the last is in ``new`` as it was (cells, nonzeros, bytes); the last holds at least
    as many cells and nonzeros in ``new``.
    """
    n = old.n_tiles
    if n == 0 or new.n_tiles < n:
        return False
    layout = ("n_genes", "tile_size", "has_gene_order", "has_var_names", "has_var_table", "has_obs")
    if any(getattr(new, name) != getattr(old, name) for name in layout):
        return False
    same = all(
        np.array_equal(getattr(new, name)[: n - 1], getattr(old, name)[: n - 1])
        for name in ("tile_cells", "tile_nnz", "tile_bytes")
    )
    return same and bool(new.tile_cells[n - 1] >= old.tile_cells[n - 1] and new.tile_nnz[n - 1] >= old.tile_nnz[n - 1])


def follow_append(reader: TileReader, manifest: Manifest) -> bool:
    """After a read failed: if an append rewrote ``manifest``'s last tile, hold the reader's version of it.

    Parameters
    ----------
    reader
        The tiles of the dataset as ``manifest`` (the reader's) has them.
    manifest
        The manifest the reader opened.

    Returns
    -------
    bool
        Whether the reader now reads the last tile from memory, as its version had it (a read that failed
        may be tried again); False when no append explains the failure (the error stands).

    Raises
    ------
    FormatError, MissingObjectError
        If the rewritten tile itself is broken or missing (named by the newer version).
    """
    last = manifest.n_tiles - 1
    if last < 0 or int(manifest.tile_cells[last]) >= manifest.tile_size:
        return False  # a full last tile: no append rewrites a tile this reader knows
    with _lock:
        if reader.holds_in_memory(last):
            return True  # another thread of this process followed first
        for _ in range(FOLLOW_ATTEMPTS):
            new = current_manifest(reader.store)
            if new is None or not extends(new, manifest) or new.to_dict() == manifest.to_dict():
                return False
            if all(getattr(new, f)[last] == getattr(manifest, f)[last] for f in ("tile_cells", "tile_bytes")):
                return False  # the last tile is as the reader knows it: the failure is not the append's
            newer = TileReader(reading_store(root_store(reader.store), new), new, cache_bytes=0, threads=reader.threads)
            try:
                tile = newer.get(last)
            except STALE_ERRORS:
                if manifest_changed(reader.store, new):
                    continue  # yet another append rewrote it meanwhile: follow that one
                raise
            kept = int(manifest.tile_cells[last])
            nnz = int(tile.indptr[kept])
            if nnz != int(manifest.tile_nnz[last]):
                return False  # not the reader's cells: not an append of this dataset
            blob = encode_tile(
                tile.indptr[: kept + 1], tile.indices[:nnz], tile.data[:nnz], manifest.n_genes,
                n_chunks=manifest.n_chunks, level=1, name=tile_path(last),
            )  # fmt: skip
            reader.hold_in_memory(last, blob)
            return True
    return False


def retried_after_appends(read: Callable[[], T], reader: TileReader, manifest: Manifest) -> T:
    """``read()``, tried once more after :func:`follow_append` when an append explains its failure.

    Once the reader holds its last tile in memory no append can change what it reads: an error then stands.
    """
    held = reader.holds_in_memory(manifest.n_tiles - 1)
    try:
        return read()
    except STALE_ERRORS:
        if held or not follow_append(reader, manifest):
            raise
    return read()
