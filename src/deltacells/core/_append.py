"""Appending cells to a dataset, committed atomically (docs/format.md, decision 17; the protocol is ``_commit``'s).

The last tile, if partial, is completed with the first new cells, as docs/format.md requires (every tile but the
last holds ``tile_size`` cells): it is decoded, and its rows are written again, followed by the new ones,
as the first tile of the append. Everything the append writes goes under a staging prefix first; the commit
is one conditional write of the manifest. The cost of an append is that of its own cells plus one tile and
one obs shard of the dataset, whatever the dataset's size (the obs names are read once, to keep them unique).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from deltacells.core._commit import begin_version, check_conditional_writes, reading_store, writer_lock
from deltacells.core._listed import listed_objects_problems
from deltacells.errors import CommitConflictError, FormatError, InvalidValueError
from deltacells.format import (
    Manifest,
    decode_checked_tile,
    first_problem_raises,
    tile_path,
)
from deltacells.storage import BaseStore
from deltacells.tiles import TileWriter, permute_columns

if TYPE_CHECKING:
    import pandas as pd
    from scipy import sparse

__all__ = ["AppendRequest", "append_cells"]

#: Attempts after a lost commit, unless the caller says otherwise.
DEFAULT_COMMIT_RETRIES = 10


@dataclass
class AppendRequest:
    """What an append adds: the new cells' rows (any number of passes), their genes' places, their obs.

    Attributes
    ----------
    n_cells
        New cells.
    blocks
        Called once per attempt: the new rows, in blocks of any size, in the source's columns.
    columns
        ``columns[j]`` is the dataset's (stored) column of source column ``j``: a permutation.
    obs
        The new cells' obs (their names in the index), or ``None`` for a dataset without obs.
    extras
        Called once per attempt with the staging store, the dataset's manifest and the new commit's version:
        writes the new cells' other elements and returns the manifest's new ``metadata`` and the paths written;
        ``None``: nothing to write.
    """

    n_cells: int
    blocks: Callable[[], Iterable[Any]]
    columns: np.ndarray
    obs: pd.DataFrame | None = None
    extras: Callable[[BaseStore, Manifest, int], tuple[dict[str, Any], list[str]]] | None = None


def append_cells(
    store: BaseStore,
    request: AppendRequest,
    *,
    threads: int | None = None,
    commit_retries: int = DEFAULT_COMMIT_RETRIES,
    progress: Callable[[int], None] | None = None,
    single_writer: bool = False,
) -> Manifest:
    """Append cells to the dataset at ``store`` and commit them; retry after a lost commit.

    Parameters
    ----------
    store
        The dataset's root.
    request
        The cells to add.
    threads
        Tiles encoded at once.
    commit_retries
        Times to start again after another writer committed first (0: raise at once). Each attempt waits a
        random, growing delay, re-reads the dataset and writes the append again.
    progress
        Called with the number of rows written, as they are.
    single_writer
        Only one process ever appends to the dataset: skip the proof that an object store honours conditional
        writes (``check_conditional_writes``).

    Returns
    -------
    Manifest
        The grown dataset's manifest.

    Raises
    ------
    CommitConflictError
        If every attempt lost its commit to another writer; the dataset holds their cells, none of these.
    StorageError
        If the store's server does not honour conditional writes (and not ``single_writer``); nothing is changed.
    ValueError, TypeError
        For cells that do not fit the dataset (naming what differs); nothing is changed.
    """
    if not single_writer:
        check_conditional_writes(store)
    attempt = 0
    while True:
        try:
            with writer_lock(store):
                return _append_once(store, request, threads=threads, progress=progress)
        except CommitConflictError as exc:
            if attempt >= commit_retries:
                msg = (
                    f"{store.url}: another writer committed first, {attempt + 1} time(s); these cells were not "
                    "added (the dataset holds the other writers' cells). Call again, or raise commit_retries"
                )
                raise CommitConflictError(msg) from exc
            attempt += 1
            time.sleep(random.uniform(0, min(2.0, 0.05 * 2**attempt)))


def _append_once(
    store: BaseStore, request: AppendRequest, *, threads: int | None, progress: Callable[[int], None] | None
) -> Manifest:
    with begin_version(store) as new:
        base = new.base
        columns = np.asarray(request.columns)
        if columns.shape != (base.n_genes,):
            msg = f"the new cells have {columns.shape[0]} genes; the dataset has {base.n_genes}"
            raise InvalidValueError(msg)
        if base.has_obs and request.obs is None:
            msg = "the dataset has obs: the new cells need theirs"
            raise InvalidValueError(msg)
        if request.n_cells == 0:  # nothing to add: no new version (a commit would only rewrite the manifest)
            return base
        _check_listed_objects(store, base)
        try:
            manifest, objects = _stage(store, new.target, base, request, new.number, threads, progress)
        except FormatError as exc:  # the last tile or shard read changed under us: another writer committed
            if not new.base_changed():
                raise
            msg = f"{store.url}: another writer committed first (while this append read {exc})"
            raise CommitConflictError(msg) from exc
        new.commit(manifest, objects)
    return new.settle()


def _check_listed_objects(store: BaseStore, base: Manifest) -> None:
    """Refuse to grow a dataset whose listed tiles or obs shards are missing or (on a local disk) resized.

    An append reads only the last tile and the obs shards it rewrites (checked whole as they are read); what it
    relies on of the others is that they are there as the manifest lists them: one listing of ``tiles/`` and
    of ``obs/`` (and a ``stat`` each on a local disk). Their contents are ``deltacells validate``'s to check.
    """
    problems = listed_objects_problems(store, base)
    if problems:
        shown = "; ".join(f"{p.object}: {p.message}" for p in problems[:3])
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        msg = (
            f"{store.url}: not appending to a damaged dataset: {shown}{more}; nothing was written. "
            "Run `deltacells validate` on it"
        )
        raise FormatError(msg)


def _stage(
    store: BaseStore,
    target: BaseStore,
    base: Manifest,
    request: AppendRequest,
    version: int,
    threads: int | None,
    progress: Callable[[int], None] | None,
) -> tuple[Manifest, list[str]]:
    """Write the append's objects under ``target``; return the grown manifest (no commit entry yet) and the paths."""
    reader = reading_store(store, base)
    n_tiles = base.n_tiles
    partial = n_tiles > 0 and int(base.tile_cells[-1]) < base.tile_size
    first_tile = n_tiles - 1 if partial else n_tiles
    tiles = TileWriter(
        target, base.n_genes, tile_size=base.tile_size, n_chunks=base.n_chunks, level=base.zstd_level,
        columns=request.columns, threads=threads, first_tile=first_tile,
    )  # fmt: skip
    try:
        if partial:
            tiles.append(tiles.prepare(_last_tile_in_source_columns(reader, base, request.columns)))
        added = 0
        for block in request.blocks():
            before = tiles.n_cells
            tiles.write(block)
            if progress is not None:
                progress(tiles.n_cells - before)
            added += tiles.n_cells - before
        new = tiles.finish()
    except BaseException:
        tiles.abort()
        raise
    if added != request.n_cells:
        msg = f"the new cells' blocks held {added} rows, not {request.n_cells}"
        raise InvalidValueError(msg)
    tile_cells = np.concatenate([base.tile_cells[:first_tile], new.tile_cells])
    objects = [tile_path(i) for i in range(first_tile, first_tile + len(new.tile_cells))]
    obs_fields: dict[str, Any] = {}
    if base.has_obs and request.obs is not None:
        from deltacells.obs import append_obs

        if len(request.obs) != request.n_cells:
            msg = f"obs has {len(request.obs)} rows for {request.n_cells} new cells"
            raise InvalidValueError(msg)
        obs_fields, obs_paths = append_obs(reader, target, base, request.obs, tile_cells)
        objects += obs_paths
    metadata = base.metadata
    if request.extras is not None:
        metadata, extras_paths = request.extras(target, base, version)
        objects += extras_paths
    manifest = replace(
        base,
        n_cells=int(tile_cells.sum()),
        tile_cells=tile_cells,
        tile_nnz=np.concatenate([base.tile_nnz[:first_tile], new.tile_nnz]),
        tile_bytes=np.concatenate([base.tile_bytes[:first_tile], new.tile_bytes]),
        metadata=metadata,
        **obs_fields,
    )
    return manifest, objects


def _last_tile_in_source_columns(store: BaseStore, base: Manifest, columns: np.ndarray) -> sparse.csr_matrix:
    """The dataset's last tile (checked against the manifest), its columns put back in the source's order."""
    last = base.n_tiles - 1
    blob = store.read(tile_path(last))
    decoded = first_problem_raises(decode_checked_tile(blob, last, base.to_fields(), url=store.url), store.url)
    assert decoded is not None
    csr = decoded.to_csr()
    inverse = np.empty_like(columns)
    inverse[columns] = np.arange(columns.shape[0], dtype=columns.dtype)
    return permute_columns(csr, inverse.astype(np.int32)) if csr.nnz else csr
