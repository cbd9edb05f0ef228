"""``manifest.json``: the dataset's table of contents, parsed, checked and written.

FORMAT.md, "manifest.json": readers must reject a manifest whose format or version
they do not understand or whose counts are inconsistent; every such check lives in
:meth:`Manifest.from_dict`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from deltacells._json import parse_json
from deltacells.errors import FormatError

FORMAT_NAME = "deltacells-dataset"
FORMAT_VERSION = 2
MANIFEST_NAME = "manifest.json"
#: The optional files of a dataset (relative paths), each with the manifest flag that says whether it exists.
SIDECAR_FLAGS = {
    "gene_order.npy": "has_gene_order",
    "var_names.txt": "has_var_names",
    "var.parquet": "has_var_table",
    "obs/schema.json": "has_obs",
}
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_FINGERPRINT = re.compile(r"^[0-9a-f]{24}$")
_WHERE = MANIFEST_NAME


def tile_path(index: int) -> str:
    """Relative path of tile ``index``: ``tiles/tile_000123.dct``."""
    return f"tiles/tile_{index:06d}.dct"


def obs_shard_path(index: int) -> str:
    """Relative path of obs shard ``index``: ``obs/obs_0004.parquet``."""
    return f"obs/obs_{index:04d}.parquet"


@dataclass(frozen=True, eq=False)
class Manifest:
    """The parsed contents of ``manifest.json``.

    Per-tile lists are held as numpy arrays; :attr:`limits` is the cumulative sum of
    :attr:`tile_cells`, so cell ``c`` lives in tile ``searchsorted(limits, c, "right")``.
    """

    n_cells: int
    n_genes: int
    tile_size: int
    tile_cells: np.ndarray
    tile_nnz: np.ndarray
    tile_bytes: np.ndarray
    n_chunks: int
    zstd_level: int
    has_gene_order: bool = False
    has_var_names: bool = False
    has_var_table: bool = False
    has_obs: bool = False
    obs_tiles_per_file: int | None = None
    obs_shard_bytes: tuple[int, ...] = ()
    obs_shard_sha256: tuple[str, ...] = ()
    obs_fingerprint: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def n_tiles(self) -> int:
        """Number of tiles."""
        return int(self.tile_cells.shape[0])

    @property
    def limits(self) -> np.ndarray:
        """``int64[n_tiles]``: the end (exclusive) of each tile in global cell indices."""
        return np.cumsum(self.tile_cells, dtype=np.int64)

    @property
    def starts(self) -> np.ndarray:
        """``int64[n_tiles]``: the first global cell index of each tile."""
        return self.limits - self.tile_cells

    @property
    def nnz(self) -> int:
        """Stored nonzeros of the whole dataset."""
        return int(self.tile_nnz.sum())

    @property
    def n_obs_shards(self) -> int:
        """Number of obs shards (0 without obs)."""
        return len(self.obs_shard_bytes)

    @classmethod
    def from_json(cls, text: str | bytes, *, where: str = _WHERE) -> Manifest:
        """Parse and check the text of ``manifest.json``."""
        return cls.from_dict(parse_json(text, where=where), where=where)

    @classmethod
    def from_dict(cls, doc: Any, *, where: str = _WHERE) -> Manifest:
        """Check a decoded manifest and build a :class:`Manifest`.

        Raises
        ------
        FormatError
            Naming the field at fault, for an unknown format or version, a missing
            or mistyped field, or counts that disagree with each other.
        """
        if not isinstance(doc, dict):
            msg = f"{where}: must hold a JSON object, not {type(doc).__name__}"
            raise FormatError(msg)
        fmt = doc.get("format")
        if fmt != FORMAT_NAME:
            msg = f"{where}: field format is {fmt!r}, expected {FORMAT_NAME!r} (not a deltacells dataset)"
            raise FormatError(msg)
        version = doc.get("version")
        if type(version) is not int or version != FORMAT_VERSION:
            msg = f"{where}: field version is {version!r}; this reader understands version {FORMAT_VERSION} only"
            raise FormatError(msg)

        n_cells = _int(doc, "n_cells", where, minimum=0, maximum=2**63 - 1)
        n_genes = _int(doc, "n_genes", where, minimum=1, maximum=2**31)
        tile_size = _int(doc, "tile_size", where, minimum=1)
        tile_cells = _int_list(doc, "tile_cells", where, minimum=0)
        n_tiles = tile_cells.shape[0]
        tile_nnz = _int_list(doc, "tile_nnz", where, minimum=0, length=n_tiles)
        tile_bytes = _int_list(doc, "tile_bytes", where, minimum=64, length=n_tiles)
        n_chunks = _int(doc, "n_chunks", where, minimum=0)
        zstd_level = _int(doc, "zstd_level", where, minimum=-(2**31))

        total = sum(int(x) for x in tile_cells)  # Python ints: an int64 sum could wrap around
        if total != n_cells:
            msg = f"{where}: field tile_cells sums to {total} but field n_cells is {n_cells}"
            raise FormatError(msg)
        if n_tiles:
            wrong = np.flatnonzero(tile_cells[:-1] != tile_size)
            if wrong.size:
                i = int(wrong[0])
                msg = (
                    f"{where}: field tile_cells[{i}] is {tile_cells[i]}; every tile but the last holds "
                    f"tile_size = {tile_size} cells"
                )
                raise FormatError(msg)
            if not 1 <= tile_cells[-1] <= tile_size:
                msg = (
                    f"{where}: field tile_cells[{n_tiles - 1}] (the last tile) is {tile_cells[-1]}, "
                    f"must be 1 .. tile_size = {tile_size}"
                )
                raise FormatError(msg)
        big = np.flatnonzero(tile_nnz > tile_cells.astype(np.float64) * n_genes)
        if big.size:
            i = int(big[0])
            msg = f"{where}: field tile_nnz[{i}] is {tile_nnz[i]}, more than tile_cells * n_genes"
            raise FormatError(msg)

        flags = {
            name: _bool(doc, name, where) for name in ("has_gene_order", "has_var_names", "has_var_table", "has_obs")
        }
        if "metadata" not in doc:
            msg = f"{where}: required field metadata is missing"
            raise FormatError(msg)
        metadata = doc["metadata"]
        if not isinstance(metadata, dict):
            msg = f"{where}: field metadata must be a JSON object, not {type(metadata).__name__}"
            raise FormatError(msg)

        obs: dict[str, Any] = {}
        if flags["has_obs"]:
            obs = _parse_obs_fields(doc, n_tiles, where)

        known = {f for f in cls.__dataclass_fields__ if f != "extra"} | {"format", "version"}
        extra = {k: v for k, v in doc.items() if k not in known}
        return cls(
            n_cells=n_cells,
            n_genes=n_genes,
            tile_size=tile_size,
            tile_cells=tile_cells,
            tile_nnz=tile_nnz,
            tile_bytes=tile_bytes,
            n_chunks=n_chunks,
            zstd_level=zstd_level,
            metadata=metadata,
            extra=extra,
            **flags,
            **obs,
        )

    def to_dict(self) -> dict[str, Any]:
        """The manifest as a JSON-ready dict (format and version first)."""
        doc: dict[str, Any] = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "n_cells": self.n_cells,
            "n_genes": self.n_genes,
            "tile_size": self.tile_size,
            "tile_cells": [int(x) for x in self.tile_cells],
            "tile_nnz": [int(x) for x in self.tile_nnz],
            "tile_bytes": [int(x) for x in self.tile_bytes],
            "n_chunks": self.n_chunks,
            "zstd_level": self.zstd_level,
            "has_gene_order": self.has_gene_order,
            "has_var_names": self.has_var_names,
            "has_var_table": self.has_var_table,
            "has_obs": self.has_obs,
        }
        if self.has_obs:
            doc["obs_tiles_per_file"] = self.obs_tiles_per_file
            doc["obs_shard_bytes"] = list(self.obs_shard_bytes)
            doc["obs_shard_sha256"] = list(self.obs_shard_sha256)
            doc["obs_fingerprint"] = self.obs_fingerprint
        doc["metadata"] = self.metadata
        doc.update(self.extra)
        return doc

    def to_json(self) -> str:
        """The text written to ``manifest.json``."""
        return json.dumps(self.to_dict(), indent=1) + "\n"

    def expected_files(self) -> dict[str, bool]:
        """Which optional files the flags say exist, by relative path."""
        return {name: getattr(self, flag) for name, flag in SIDECAR_FLAGS.items()}


def _parse_obs_fields(doc: dict[str, Any], n_tiles: int, where: str) -> dict[str, Any]:
    missing = [
        k for k in ("obs_tiles_per_file", "obs_shard_bytes", "obs_shard_sha256", "obs_fingerprint") if k not in doc
    ]
    if missing:
        msg = f"{where}: has_obs is true but field(s) {', '.join(missing)} are missing"
        raise FormatError(msg)
    per_file = _int(doc, "obs_tiles_per_file", where, minimum=1)
    n_shards = -(-n_tiles // per_file)
    shard_bytes = _int_list(doc, "obs_shard_bytes", where, minimum=1, length=n_shards)
    sha = doc["obs_shard_sha256"]
    if not isinstance(sha, list) or len(sha) != n_shards:
        msg = f"{where}: field obs_shard_sha256 must list {n_shards} shards ({n_tiles} tiles, {per_file} per file)"
        raise FormatError(msg)
    for i, digest in enumerate(sha):
        if not isinstance(digest, str) or not _SHA256.match(digest):
            msg = f"{where}: field obs_shard_sha256[{i}] is {digest!r}, not 64 lowercase hex characters"
            raise FormatError(msg)
    fingerprint = doc["obs_fingerprint"]
    if not isinstance(fingerprint, str) or not _FINGERPRINT.match(fingerprint):
        msg = f"{where}: field obs_fingerprint is {fingerprint!r}, not 24 lowercase hex characters"
        raise FormatError(msg)
    return {
        "obs_tiles_per_file": per_file,
        "obs_shard_bytes": tuple(int(x) for x in shard_bytes),
        "obs_shard_sha256": tuple(sha),
        "obs_fingerprint": fingerprint,
    }


def _int(doc: dict[str, Any], name: str, where: str, *, minimum: int, maximum: int | None = None) -> int:
    if name not in doc:
        msg = f"{where}: required field {name} is missing"
        raise FormatError(msg)
    value = doc[name]
    if not isinstance(value, int) or isinstance(value, bool):
        msg = f"{where}: field {name} must be an integer, not {value!r}"
        raise FormatError(msg)
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"{minimum} .. {maximum}" if maximum is not None else f">= {minimum}"
        msg = f"{where}: field {name} is {value}, must be {bound}"
        raise FormatError(msg)
    return value


def _int_list(doc: dict[str, Any], name: str, where: str, *, minimum: int, length: int | None = None) -> np.ndarray:
    if name not in doc:
        msg = f"{where}: required field {name} is missing"
        raise FormatError(msg)
    value = doc[name]
    if not isinstance(value, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        msg = f"{where}: field {name} must be a list of integers"
        raise FormatError(msg)
    if length is not None and len(value) != length:
        msg = f"{where}: field {name} has {len(value)} entries, expected {length} (one per tile or shard)"
        raise FormatError(msg)
    if any(x < minimum or x >= 2**63 for x in value):
        i = next(i for i, x in enumerate(value) if x < minimum or x >= 2**63)
        msg = f"{where}: field {name}[{i}] is {value[i]}, must be >= {minimum}"
        raise FormatError(msg)
    return np.asarray(value, dtype=np.int64).reshape(-1)


def _bool(doc: dict[str, Any], name: str, where: str) -> bool:
    if name not in doc:
        msg = f"{where}: required field {name} is missing"
        raise FormatError(msg)
    value = doc[name]
    if not isinstance(value, bool):
        msg = f"{where}: field {name} must be true or false, not {value!r}"
        raise FormatError(msg)
    return value
