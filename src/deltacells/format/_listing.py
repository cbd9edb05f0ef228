"""The objects present against the manifest: optional files its flags deny or miss, tiles and shards beyond it."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from deltacells.errors import MissingObjectError
from deltacells.format._names import MANIFEST_NAME, OBS_DIR, SIDECAR_FLAGS, TILES_DIR
from deltacells.format._problems import Checker, Problem

if TYPE_CHECKING:
    from collections.abc import Collection

    from deltacells.format._manifest import ManifestFields

__all__ = ["check_flags", "check_stray_objects", "missing_promised"]

_TILE_FILE = re.compile(r"^tile_(\d{6,})\.dct$")
_SHARD_FILE = re.compile(r"^obs_(\d{4,})\.parquet$")


def _present(name: str, root: Collection[str], obs: Collection[str]) -> bool:
    directory, _, base = name.rpartition("/")
    return base in obs if directory == OBS_DIR else name in root


def missing_promised(name: str) -> Problem:
    """The problem of object ``name``, which a ``has_*`` flag of the manifest promises, being absent."""
    return Problem(name, f"missing, but {MANIFEST_NAME} field {SIDECAR_FLAGS[name]} is true", MissingObjectError)


def check_flags(fields: ManifestFields, root: Collection[str], obs: Collection[str]) -> Checker[None]:
    """The ``has_*`` flags against the entries of the root and of ``obs/`` (one listing each)."""
    for name, flag in SIDECAR_FLAGS.items():
        flagged = fields.files.get(name)
        if flagged is None:
            continue
        here = _present(name, root, obs)
        if flagged and not here:
            yield missing_promised(name)
        elif here and not flagged:
            yield Problem(name, f"present, but {MANIFEST_NAME} field {flag} is false")


def check_stray_objects(fields: ManifestFields, tiles: Collection[str], obs: Collection[str]) -> Checker[None]:
    """Tile and shard files numbered beyond what the manifest lists (entries of ``tiles/`` and ``obs/``)."""
    n_tiles, n_shards = fields.n_tiles, fields.n_shards
    if fields.tile_cells is not None or fields.tile_bytes is not None:
        for entry in sorted(tiles):
            match = _TILE_FILE.match(entry)
            if match and int(match.group(1)) >= n_tiles:
                yield Problem(f"{TILES_DIR}/{entry}", f"not listed in {MANIFEST_NAME} ({n_tiles} tiles)")
    if fields.obs_shard_bytes is not None or not fields.files.get(f"{OBS_DIR}/schema.json", True):
        for entry in sorted(obs):
            match = _SHARD_FILE.match(entry)
            if match and int(match.group(1)) >= n_shards:
                yield Problem(f"{OBS_DIR}/{entry}", f"not listed in {MANIFEST_NAME} ({n_shards} obs shards)")
