"""The tiles and obs shards a manifest lists are there: what ``deltacells info`` checks, and an append before it adds.

Cheap on any store: one listing of ``tiles/`` and one of ``obs/``. On a local disk each object's size is also
compared with the manifest's (a ``stat`` each); on object storage that would be a request per object, so it is
not. The contents are never read: ``deltacells validate`` decodes and checks every byte.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deltacells.errors import MissingObjectError
from deltacells.format import (
    MANIFEST_NAME,
    OBS_DIR,
    TILES_DIR,
    Problem,
    check_tile_size,
    collect,
    missing_tile,
    obs_shard_path,
    tile_path,
)

if TYPE_CHECKING:
    from deltacells.format import Manifest
    from deltacells.storage import BaseStore

__all__ = ["listed_objects_problems", "sizes_checked"]


def sizes_checked(store: BaseStore) -> bool:
    """Whether :func:`listed_objects_problems` compares sizes too (on a local disk), not only presence."""
    return store.is_local


def listed_objects_problems(store: BaseStore, manifest: Manifest) -> list[Problem]:
    """The tiles and obs shards ``manifest`` lists that are missing, or (on a local disk) of another size.

    Parameters
    ----------
    store
        The dataset's root (read through a pending commit's staging prefix where it has one).
    manifest
        Its manifest.

    Returns
    -------
    list of Problem
        In tile order, then shard order; empty when every listed object is there (with its size).
    """
    fields = manifest.to_fields()
    with_sizes = sizes_checked(store)
    problems: list[Problem] = []
    tiles = _entries(store, TILES_DIR) if manifest.n_tiles else set()
    for tile in range(manifest.n_tiles):
        if tile_path(tile).rpartition("/")[2] not in tiles:
            problems.append(missing_tile(tile, fields))
        elif with_sizes:
            collect(check_tile_size(store.size(tile_path(tile)), tile, fields), problems.append)
    shard_bytes = manifest.obs_shard_bytes
    shards = _entries(store, OBS_DIR) if shard_bytes else set()
    for shard, expected in enumerate(shard_bytes):
        name = obs_shard_path(shard)
        if name.rpartition("/")[2] not in shards:
            problems.append(Problem(name, "missing", MissingObjectError))
        elif with_sizes and (size := store.size(name)) != expected:
            message = f"size is {size} bytes but {MANIFEST_NAME} field obs_shard_bytes[{shard}] says {expected}"
            problems.append(Problem(name, message))
    return problems


def _entries(store: BaseStore, directory: str) -> set[str]:
    """The names directly under ``directory`` (none when it does not exist)."""
    try:
        return set(store.list(directory))
    except FileNotFoundError:
        return set()
