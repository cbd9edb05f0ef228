"""``manifest.json``: the dataset's table of contents: its rules, and the :class:`Manifest` model.

docs/format.md, "manifest.json": readers must reject a manifest whose format or version they do not understand
or whose counts are inconsistent. :func:`check_manifest` yields every problem and returns what could be read
(:class:`ManifestFields`); :meth:`Manifest.from_dict` raises the first problem.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from deltacells._json import parse_json
from deltacells.errors import FormatError
from deltacells.format._names import MANIFEST_NAME, OBS_SCHEMA_NAME, SIDECAR_FLAGS
from deltacells.format._problems import Checker, Problem

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "Manifest", "ManifestFields", "check_manifest", "check_manifest_text"]

FORMAT_NAME = "deltacells-dataset"
FORMAT_VERSION = 2
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_FINGERPRINT = re.compile(r"^[0-9a-f]{24}$")
_OBS_FIELDS = ("obs_tiles_per_file", "obs_shard_bytes", "obs_shard_sha256", "obs_fingerprint")
_MAX_INT64 = 2**63 - 1


@dataclass
class ManifestFields:
    """What a manifest promises, as far as it could be read (``None``: missing or malformed).

    ``files`` maps each optional file (``"gene_order.npy"``...) to its ``has_*`` flag.
    """

    n_cells: int | None = None
    n_genes: int | None = None
    tile_size: int | None = None
    tile_cells: np.ndarray | None = None
    tile_nnz: np.ndarray | None = None
    tile_bytes: np.ndarray | None = None
    n_chunks: int | None = None
    zstd_level: int | None = None
    files: dict[str, bool | None] = field(default_factory=dict)
    metadata: dict[str, Any] | None = None
    obs_tiles_per_file: int | None = None
    obs_shard_bytes: tuple[int, ...] | None = None
    obs_shard_sha256: tuple[str, ...] | None = None
    obs_fingerprint: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def n_tiles(self) -> int:
        """Tiles the manifest lists (from whichever per-tile field could be read; 0 if none)."""
        for values in (self.tile_cells, self.tile_bytes, self.tile_nnz):
            if values is not None:
                return int(values.shape[0])
        return 0

    @property
    def n_shards(self) -> int:
        """Obs shards the manifest lists (0 when unknown or without obs)."""
        return 0 if self.obs_shard_bytes is None else len(self.obs_shard_bytes)


def check_manifest_text(text: str | bytes) -> Checker[ManifestFields | None]:
    """Check the text of ``manifest.json``: JSON first, then :func:`check_manifest`."""
    try:
        doc = parse_json(text, where=MANIFEST_NAME)
    except FormatError as exc:
        yield Problem(MANIFEST_NAME, str(exc).removeprefix(f"{MANIFEST_NAME}: "))
        return None
    return (yield from check_manifest(doc))


def check_manifest(doc: Any) -> Checker[ManifestFields | None]:
    """Check a decoded manifest against docs/format.md; return every field that could be read.

    Yields a problem for an unknown format or version (and then stops: nothing else can be interpreted),
    a missing or mistyped field, and counts that disagree with each other.
    """
    if not isinstance(doc, dict):
        yield _problem(f"must hold a JSON object, not {type(doc).__name__}")
        return None
    fmt = doc.get("format")
    if fmt != FORMAT_NAME:
        yield _problem(f"field format is {fmt!r}, expected {FORMAT_NAME!r} (not a deltacells dataset)")
        return None
    version = doc.get("version")
    if type(version) is not int or version != FORMAT_VERSION:
        yield _problem(f"field version is {version!r}; this reader understands version {FORMAT_VERSION} only")
        return None

    f = ManifestFields()
    f.n_cells = yield from _int(doc, "n_cells", minimum=0, maximum=_MAX_INT64)
    f.n_genes = yield from _int(doc, "n_genes", minimum=1, maximum=2**31)
    f.tile_size = yield from _int(doc, "tile_size", minimum=1)
    f.tile_cells = yield from _int_list(doc, "tile_cells", minimum=0)
    length = None if f.tile_cells is None else int(f.tile_cells.shape[0])
    f.tile_nnz = yield from _int_list(doc, "tile_nnz", minimum=0, length=length)
    f.tile_bytes = yield from _int_list(doc, "tile_bytes", minimum=64, length=length)
    f.n_chunks = yield from _int(doc, "n_chunks", minimum=0)
    f.zstd_level = yield from _int(doc, "zstd_level", minimum=-(2**31))
    yield from _check_counts(f)
    for name, flag in SIDECAR_FLAGS.items():
        f.files[name] = yield from _bool(doc, flag)
    if "metadata" not in doc:
        yield _problem("required field metadata is missing")
    elif not isinstance(doc["metadata"], dict):
        yield _problem(f"field metadata must be a JSON object, not {type(doc['metadata']).__name__}")
    else:
        f.metadata = doc["metadata"]
    if f.files[OBS_SCHEMA_NAME] and f.tile_cells is not None:
        yield from _check_obs_fields(doc, f)
    known = {"format", "version", *Manifest.__dataclass_fields__, *SIDECAR_FLAGS.values()} - {"extra"}
    f.extra = {k: v for k, v in doc.items() if k not in known}
    return f


def _problem(message: str) -> Problem:
    return Problem(MANIFEST_NAME, message)


def _check_counts(f: ManifestFields) -> Checker[None]:
    """The per-tile lists against each other and against n_cells, tile_size and n_genes."""
    if f.tile_cells is None:
        return
    tile_cells, n_tiles = f.tile_cells, int(f.tile_cells.shape[0])
    if f.n_cells is not None:
        total = sum(int(x) for x in tile_cells)  # Python ints: an int64 sum could wrap around
        if total != f.n_cells:
            yield _problem(f"field tile_cells sums to {total} but field n_cells is {f.n_cells}")
    if f.tile_size is not None and n_tiles:
        wrong = np.flatnonzero(tile_cells[:-1] != f.tile_size)
        if wrong.size:
            i = int(wrong[0])
            more = f" (and {wrong.size - 1} more tiles)" if wrong.size > 1 else ""
            yield _problem(
                f"field tile_cells[{i}] is {tile_cells[i]}; every tile but the last holds "
                f"tile_size = {f.tile_size} cells{more}"
            )
        if not 1 <= tile_cells[-1] <= f.tile_size:
            yield _problem(
                f"field tile_cells[{n_tiles - 1}] (the last tile) is {tile_cells[-1]}, must be 1 .. "
                f"tile_size = {f.tile_size}"
            )
    if f.tile_nnz is not None and f.n_genes is not None:
        big = np.flatnonzero(f.tile_nnz > tile_cells.astype(np.float64) * f.n_genes)
        if big.size:
            i = int(big[0])
            yield _problem(f"field tile_nnz[{i}] is {f.tile_nnz[i]}, more than tile_cells * n_genes")


def _check_obs_fields(doc: dict[str, Any], f: ManifestFields) -> Checker[None]:
    assert f.tile_cells is not None
    n_tiles = int(f.tile_cells.shape[0])
    missing = [k for k in _OBS_FIELDS if k not in doc]
    if missing:
        yield _problem(f"has_obs is true but field(s) {', '.join(missing)} are missing")
        return
    per_file = yield from _int(doc, "obs_tiles_per_file", minimum=1)
    if per_file is None:
        return
    n_shards = -(-n_tiles // per_file)
    shard_bytes = yield from _int_list(doc, "obs_shard_bytes", minimum=1, length=n_shards)
    sha = doc["obs_shard_sha256"]
    sha_ok = isinstance(sha, list) and len(sha) == n_shards
    if not sha_ok:
        yield _problem(f"field obs_shard_sha256 must list {n_shards} shards ({n_tiles} tiles, {per_file} per file)")
    else:
        for i, digest in enumerate(sha):
            if not isinstance(digest, str) or not _SHA256.match(digest):
                yield _problem(f"field obs_shard_sha256[{i}] is {digest!r}, not 64 lowercase hex characters")
                sha_ok = False
                break
    fingerprint = doc["obs_fingerprint"]
    if not isinstance(fingerprint, str) or not _FINGERPRINT.match(fingerprint):
        yield _problem(f"field obs_fingerprint is {fingerprint!r}, not 24 lowercase hex characters")
        fingerprint = None
    if shard_bytes is None or not sha_ok or fingerprint is None:
        return
    f.obs_tiles_per_file = per_file
    f.obs_shard_bytes = tuple(int(x) for x in shard_bytes)
    f.obs_shard_sha256 = tuple(sha)
    f.obs_fingerprint = fingerprint


def _int(doc: dict[str, Any], name: str, *, minimum: int, maximum: int | None = None) -> Checker[int | None]:
    if name not in doc:
        yield _problem(f"required field {name} is missing")
        return None
    value = doc[name]
    if not isinstance(value, int) or isinstance(value, bool):
        yield _problem(f"field {name} must be an integer, not {value!r}")
        return None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"{minimum} .. {maximum}" if maximum is not None else f">= {minimum}"
        yield _problem(f"field {name} is {value}, must be {bound}")
        return None
    return value


def _int_list(doc: dict[str, Any], name: str, *, minimum: int, length: int | None = None) -> Checker[np.ndarray | None]:
    if name not in doc:
        yield _problem(f"required field {name} is missing")
        return None
    value = doc[name]
    if not isinstance(value, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        yield _problem(f"field {name} must be a list of integers")
        return None
    if length is not None and len(value) != length:
        yield _problem(f"field {name} has {len(value)} entries, expected {length} (one per tile or shard)")
        return None
    bad = next((i for i, x in enumerate(value) if x < minimum or x > _MAX_INT64), None)
    if bad is not None:
        yield _problem(f"field {name}[{bad}] is {value[bad]}, must be >= {minimum}")
        return None
    return np.asarray(value, dtype=np.int64).reshape(-1)


def _bool(doc: dict[str, Any], name: str) -> Checker[bool | None]:
    if name not in doc:
        yield _problem(f"required field {name} is missing")
        return None
    value = doc[name]
    if not isinstance(value, bool):
        yield _problem(f"field {name} must be true or false, not {value!r}")
        return None
    return value


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

    def __post_init__(self) -> None:
        for name in ("tile_cells", "tile_nnz", "tile_bytes"):
            values = np.array(getattr(self, name), dtype=np.int64).reshape(-1)
            values.flags.writeable = False  # shared by every reader of the manifest
            object.__setattr__(self, name, values)

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
        starts: np.ndarray = self.limits - self.tile_cells
        return starts

    @property
    def nnz(self) -> int:
        """Stored nonzeros of the whole dataset."""
        return int(self.tile_nnz.sum())

    @property
    def n_obs_shards(self) -> int:
        """Number of obs shards (0 without obs)."""
        return len(self.obs_shard_bytes)

    @classmethod
    def from_json(cls, text: str | bytes, *, where: str = MANIFEST_NAME) -> Manifest:
        """Parse and check the text of ``manifest.json``.

        Raises
        ------
        FormatError
            Naming ``where`` and the field at fault (see :meth:`from_dict`).
        """
        return cls.from_dict(parse_json(text, where=where), where=where)

    @classmethod
    def from_dict(cls, doc: Any, *, where: str = MANIFEST_NAME) -> Manifest:
        """Check a decoded manifest and build a :class:`Manifest`.

        Raises
        ------
        FormatError
            Naming ``where`` and the field at fault, for an unknown format or version, a missing or
            mistyped field, or counts that disagree with each other.
        """
        checker = check_manifest(doc)
        try:
            problem = next(checker)
        except StopIteration as stop:
            fields: ManifestFields = stop.value
        else:
            checker.close()
            msg = f"{where}: {problem.message}"
            raise FormatError(msg)
        return cls.from_fields(fields)

    @classmethod
    def from_fields(cls, f: ManifestFields) -> Manifest:
        """The manifest of fields that passed :func:`check_manifest` without a problem."""
        assert f.n_cells is not None and f.n_genes is not None and f.tile_size is not None
        assert f.tile_cells is not None and f.tile_nnz is not None and f.tile_bytes is not None
        assert f.n_chunks is not None and f.zstd_level is not None and f.metadata is not None
        flags: dict[str, Any] = {flag: bool(f.files[name]) for name, flag in SIDECAR_FLAGS.items()}
        obs: dict[str, Any] = {}
        if f.files.get(OBS_SCHEMA_NAME):
            obs = {
                "obs_tiles_per_file": f.obs_tiles_per_file,
                "obs_shard_bytes": f.obs_shard_bytes,
                "obs_shard_sha256": f.obs_shard_sha256,
                "obs_fingerprint": f.obs_fingerprint,
            }
        return cls(
            n_cells=f.n_cells,
            n_genes=f.n_genes,
            tile_size=f.tile_size,
            tile_cells=f.tile_cells,
            tile_nnz=f.tile_nnz,
            tile_bytes=f.tile_bytes,
            n_chunks=f.n_chunks,
            zstd_level=f.zstd_level,
            metadata=f.metadata,
            extra=f.extra,
            **flags,
            **obs,
        )

    def to_fields(self) -> ManifestFields:
        """The manifest as :class:`ManifestFields` (what the checkers of the other objects take)."""
        return ManifestFields(
            n_cells=self.n_cells,
            n_genes=self.n_genes,
            tile_size=self.tile_size,
            tile_cells=self.tile_cells,
            tile_nnz=self.tile_nnz,
            tile_bytes=self.tile_bytes,
            n_chunks=self.n_chunks,
            zstd_level=self.zstd_level,
            files=dict(self.expected_files()),
            metadata=self.metadata,
            obs_tiles_per_file=self.obs_tiles_per_file if self.has_obs else None,
            obs_shard_bytes=self.obs_shard_bytes if self.has_obs else None,
            obs_shard_sha256=self.obs_shard_sha256 if self.has_obs else None,
            obs_fingerprint=self.obs_fingerprint if self.has_obs else None,
            extra=self.extra,
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
