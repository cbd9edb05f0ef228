"""The files present against the manifest: sidecars its flags deny or miss, tiles and shards beyond its counts."""

from __future__ import annotations

import re

from deltacells.dataset._manifest import SIDECAR_FLAGS
from deltacells.storage import Store
from deltacells.validate._access import listdir
from deltacells.validate._manifest import Expected
from deltacells.validate._report import Collector

_TILE_FILE = re.compile(r"^tile_(\d{6,})\.dct$")
_SHARD_FILE = re.compile(r"^obs_(\d{4,})\.parquet$")


def check_listing(store: Store, expected: Expected, found: Collector) -> None:
    """Files the manifest does not account for: tiles and shards beyond its counts, sidecars it denies."""
    root = listdir(store, "")
    obs_dir = listdir(store, "obs") if "obs" in root else set()
    for name, flag in SIDECAR_FLAGS.items():
        flagged = expected.flags.get(name)
        if flagged is None:
            continue
        present = (name.split("/", 1)[1] in obs_dir) if name.startswith("obs/") else (name in root)
        if flagged and not present:
            found.add(name, f"missing, but manifest.json field {flag} is true")
        elif present and not flagged:
            found.add(name, f"present, but manifest.json field {flag} is false")
    n_tiles, n_shards = expected.n_tiles, expected.n_shards
    if expected.tile_cells is not None or expected.tile_bytes is not None:
        for entry in sorted(listdir(store, "tiles") if "tiles" in root else ()):
            match = _TILE_FILE.match(entry)
            if match and int(match.group(1)) >= n_tiles:
                found.add(f"tiles/{entry}", f"not listed in manifest.json ({n_tiles} tiles)")
    if expected.obs_shard_bytes is not None or not expected.flags.get("obs/schema.json", True):
        for entry in sorted(obs_dir):
            match = _SHARD_FILE.match(entry)
            if match and int(match.group(1)) >= n_shards:
                found.add(f"obs/{entry}", f"not listed in manifest.json ({n_shards} obs shards)")
