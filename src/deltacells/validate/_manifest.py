"""``manifest.json``: what it promises (:class:`Expected`), from the strict parse or, when that fails, leniently.

When the strict parse fails, every field that can still be read on its own is used for the other checks, so
that one bad count does not hide the state of the tiles.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from deltacells.dataset._manifest import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST_NAME,
    SIDECAR_FLAGS,
    Manifest,
    _bool,
    _int,
    _int_list,
    _parse_obs_fields,
)
from deltacells.errors import FormatError
from deltacells.storage import Store
from deltacells.validate._report import Collector, error_message


@dataclass
class Expected:
    """What the manifest promises, as far as it could be read (``None``: unknown)."""

    n_genes: int | None = None
    tile_cells: np.ndarray | None = None
    tile_nnz: np.ndarray | None = None
    tile_bytes: np.ndarray | None = None
    flags: dict[str, bool | None] = field(default_factory=dict)
    obs_tiles_per_file: int | None = None
    obs_shard_bytes: tuple[int, ...] | None = None
    obs_shard_sha256: tuple[str, ...] | None = None
    obs_fingerprint: str | None = None

    @property
    def n_tiles(self) -> int:
        """Tiles the manifest lists (from whichever per-tile field could be read; 0 if none)."""
        for values in (self.tile_cells, self.tile_bytes, self.tile_nnz):
            if values is not None:
                return int(values.shape[0])
        return 0

    @property
    def n_shards(self) -> int:
        """Number of obs shards the manifest lists (0 when unknown)."""
        return 0 if self.obs_shard_bytes is None else len(self.obs_shard_bytes)

    @classmethod
    def from_manifest(cls, m: Manifest) -> Expected:
        """What a manifest that passed the strict parse promises."""
        return cls(
            n_genes=m.n_genes,
            tile_cells=m.tile_cells,
            tile_nnz=m.tile_nnz,
            tile_bytes=m.tile_bytes,
            flags={name: getattr(m, flag) for name, flag in SIDECAR_FLAGS.items()},
            obs_tiles_per_file=m.obs_tiles_per_file if m.has_obs else None,
            obs_shard_bytes=m.obs_shard_bytes if m.has_obs else None,
            obs_shard_sha256=m.obs_shard_sha256 if m.has_obs else None,
            obs_fingerprint=m.obs_fingerprint if m.has_obs else None,
        )


def check_manifest(store: Store, found: Collector) -> Expected | None:
    """Parse the manifest; return what it promises (leniently if the strict parse fails) or None."""
    import json

    try:
        text = store.read(MANIFEST_NAME)
    except FileNotFoundError:
        try:
            exists = store.exists("")
        except Exception:
            exists = True
        what = (
            "missing: this is not a deltacells dataset, or one whose writing did not finish (the manifest is "
            "written last)"
            if exists
            else f"missing: {store.url} does not exist"
        )
        found.add(MANIFEST_NAME, what)
        return None
    except Exception as exc:
        found.add(MANIFEST_NAME, f"cannot be read ({error_message(exc)})")
        return None
    try:
        doc = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        found.add(MANIFEST_NAME, f"not valid JSON ({exc})")
        return None
    try:
        return Expected.from_manifest(Manifest.from_dict(doc, where=MANIFEST_NAME))
    except FormatError as exc:
        found.add(MANIFEST_NAME, exc)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME or doc.get("version") != FORMAT_VERSION:
        return None  # not this format: nothing else can be interpreted
    return _lenient_manifest(doc, found)


def _lenient_manifest(doc: dict[str, Any], found: Collector) -> Expected:
    """Every field that can be read on its own, and every inconsistency between them."""
    where = MANIFEST_NAME

    def get(parse: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return parse(doc, *args, where, **kwargs)
        except FormatError as exc:
            found.add(MANIFEST_NAME, exc)
            return None

    n_cells = get(_int, "n_cells", minimum=0)
    n_genes = get(_int, "n_genes", minimum=1, maximum=2**31)
    tile_size = get(_int, "tile_size", minimum=1)
    tile_cells = get(_int_list, "tile_cells", minimum=0)
    length = None if tile_cells is None else int(tile_cells.shape[0])
    tile_nnz = get(_int_list, "tile_nnz", minimum=0, length=length)
    tile_bytes = get(_int_list, "tile_bytes", minimum=64, length=length)
    get(_int, "n_chunks", minimum=0)
    get(_int, "zstd_level", minimum=-(2**31))
    flags = {name: get(_bool, flag) for name, flag in SIDECAR_FLAGS.items()}
    if "metadata" not in doc:
        found.add(MANIFEST_NAME, "required field metadata is missing")
    elif not isinstance(doc["metadata"], dict):
        found.add(MANIFEST_NAME, f"field metadata must be a JSON object, not {type(doc['metadata']).__name__}")

    if tile_cells is not None:
        n_tiles = int(tile_cells.shape[0])
        total = int(tile_cells.sum())
        if n_cells is not None and total != n_cells:
            found.add(MANIFEST_NAME, f"field tile_cells sums to {total} but field n_cells is {n_cells}")
        if tile_size is not None and n_tiles:
            wrong = np.flatnonzero(tile_cells[:-1] != tile_size)
            if wrong.size:
                i = int(wrong[0])
                more = f" (and {wrong.size - 1} more tiles)" if wrong.size > 1 else ""
                found.add(
                    MANIFEST_NAME,
                    f"field tile_cells[{i}] is {tile_cells[i]}; every tile but the last holds "
                    f"tile_size = {tile_size} cells{more}",
                )
            if not 1 <= tile_cells[-1] <= tile_size:
                found.add(
                    MANIFEST_NAME,
                    f"field tile_cells[{n_tiles - 1}] (the last tile) is {tile_cells[-1]}, must be 1 .. "
                    f"tile_size = {tile_size}",
                )
        if tile_nnz is not None and n_genes is not None:
            big = np.flatnonzero(tile_nnz > tile_cells.astype(np.float64) * n_genes)
            if big.size:
                i = int(big[0])
                found.add(MANIFEST_NAME, f"field tile_nnz[{i}] is {tile_nnz[i]}, more than tile_cells * n_genes")

    expected = Expected(n_genes=n_genes, tile_cells=tile_cells, tile_nnz=tile_nnz, tile_bytes=tile_bytes, flags=flags)
    if flags["obs/schema.json"] and tile_cells is not None:
        try:
            obs = _parse_obs_fields(doc, int(tile_cells.shape[0]), where)
        except FormatError as exc:
            found.add(MANIFEST_NAME, exc)
        else:
            expected.obs_tiles_per_file = obs["obs_tiles_per_file"]
            expected.obs_shard_bytes = obs["obs_shard_bytes"]
            expected.obs_shard_sha256 = obs["obs_shard_sha256"]
            expected.obs_fingerprint = obs["obs_fingerprint"]
    return expected
