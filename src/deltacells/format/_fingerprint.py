"""The obs fingerprint (docs/format.md, decision 1): what keys the local cache of obs columns."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

__all__ = ["obs_fingerprint"]


def obs_fingerprint(schema_text: str, tile_cells: Iterable[int], shard_sha256: Iterable[str]) -> str:
    """The first 24 hex characters of the SHA-256 of the canonical JSON of schema, tile cells and shard hashes.

    Parameters
    ----------
    schema_text
        The exact text of ``obs/schema.json``.
    tile_cells
        Cells per tile.
    shard_sha256
        The hex SHA-256 of each shard, in shard order.
    """
    doc = {
        "schema": schema_text,
        "tile_cells": [int(x) for x in tile_cells],
        "shards": [str(x) for x in shard_sha256],
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:24]
