#!/usr/bin/env python
"""Bounded, structure-aware fuzzing of the deltacells decoders.

Targets
-------
``tile``
    :func:`deltacells.decode_tile`, with numba's bounds checking forced on (``NUMBA_BOUNDSCHECK=1``, own
    cache directory), so that an out-of-range index in a kernel raises instead of corrupting memory.
``tile-nojit``
    The same with ``NUMBA_DISABLE_JIT=1``: the kernels run as Python, so atheris also sees their branches.
``manifest``
    :meth:`deltacells.Manifest.from_json`.
``schema``
    :meth:`deltacells.obs.ObsSchema.from_json`.

Property checked on every input: the call returns a valid result (for a tile, a CSR matrix with int64
``indptr`` that starts at 0, never decreases and ends at nnz, int32 ``indices`` in ``[0, n_genes)``
increasing within each cell, int32 ``data >= 1``, agreeing with the header and re-encodable; for a
manifest or schema, an object whose invariants hold with exact integers and that survives a JSON round
trip) or raises :class:`deltacells.FormatError` naming the object -- no other exception, no crash, no hang
(per-input timeout), and no allocation beyond what the input justifies (see :func:`tile_budget`).

Engines
-------
``atheris``
    Coverage-guided (libFuzzer) with a structure-aware custom mutator; needs ``pip install atheris``.
``random``
    No dependency: the same mutators, guided by the *outcome* of each input (an input that reaches a new
    check -- a new error message template -- joins the pool of parents). Deterministic for a seed.
``auto``
    atheris when importable, else random.

Every input runs in a worker subprocess. An input that fails the property is saved to ``--corpus-out``
(default ``tests/reliability/corpus``) as ``<target>-<signature>-<sha1>.<ext>``, one per signature; a
worker killed by a signal or by the per-input timeout has its last input saved by the supervisor.

Examples
--------
``python fuzz/fuzz_decode.py --seconds 120``
    Fuzz for two minutes, shares of the time per target.
``python fuzz/fuzz_decode.py --replay tests/reliability/corpus/*``
    Run the oracles on saved inputs (exit status 1 if any still fails).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import hashlib
import json
import math
import os
import random
import re
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import tracemalloc
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = ROOT / "tests" / "reliability" / "corpus"
CONFORMANCE = ROOT.parent / "shared" / "conformance"

TARGETS = ("tile", "tile-nojit", "manifest", "schema")
WEIGHTS = {"tile": 0.5, "tile-nojit": 0.1, "manifest": 0.2, "schema": 0.2}
EXTENSIONS = {"tile": "dct", "tile-nojit": "dct", "manifest": "json", "schema": "json"}

#: Inputs whose frames declare more than this many bytes in all are not decoded (counted as skipped):
#: decoding them is legitimate (see :func:`tile_budget`) but slow, and tells nothing new.
MAX_DECLARED = 64 * 2**20
NOJIT_MAX_DECLARED = 64 * 2**10

#: Modules numba compiles: never rewritten by atheris's instrumentation while the JIT is on.
JIT_MODULES = ("deltacells.codec._kernels", "deltacells.dataset._gather")

_HEADER = struct.Struct("<8sIIQQIIQQII")
_HEADER_FIELDS = {
    "version": (8, 4),
    "flags": (12, 4),
    "n_cells": (16, 8),
    "nnz": (24, 8),
    "n_genes": (32, 4),
    "n_chunks": (36, 4),
    "indptr_off": (40, 8),
    "total_size": (48, 8),
    "crc32": (56, 4),
    "reserved": (60, 4),
}
_STREAMS = ("gaps", "vals", "vexc", "gexc")
_EXTREMES = (
    0, 1, 2, 7, 8, 64, 255, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1,
)  # fmt: skip


# ====================================================================================================== environment


def target_environment(target: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a worker for ``target`` runs in (numba bounds checks on, or the JIT off).

    Parameters
    ----------
    target
        One of :data:`TARGETS`.
    base
        The environment to start from (default: this process's).

    Returns
    -------
    dict
        The environment variables.
    """
    env = dict(os.environ if base is None else base)
    cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "deltacells-fuzz" / "numba-boundscheck"
    if target == "tile-nojit":
        env["NUMBA_DISABLE_JIT"] = "1"
    else:
        env["NUMBA_BOUNDSCHECK"] = "1"
        env["NUMBA_CACHE_DIR"] = str(cache)  # kernels compiled with bounds checks, never mixed with the others
    env.setdefault("DELTACELLS_THREADS", "2")
    return env


# ====================================================================================================== tiles


def u(blob: bytes | bytearray, offset: int, width: int) -> int:
    """The little-endian unsigned integer of ``width`` bytes at ``offset`` (0 past the end)."""
    if offset + width > len(blob):
        return 0
    return int.from_bytes(blob[offset : offset + width], "little")


def put(blob: bytearray, offset: int, width: int, value: int) -> None:
    """Store ``value`` (masked to ``width`` bytes) at ``offset`` if it fits."""
    if offset + width <= len(blob):
        blob[offset : offset + width] = (value % (1 << (8 * width))).to_bytes(width, "little")


def fix_tile(blob: bytes | bytearray) -> bytes:
    """``blob`` with header fields ``total_size`` and ``crc32`` made right (as a writer would)."""
    out = bytearray(blob)
    if len(out) >= 64:
        put(out, 48, 8, len(out))
        put(out, 56, 4, zlib.crc32(memoryview(out)[64:]))
    return bytes(out)


def n_table_chunks(blob: bytes | bytearray) -> int:
    """Chunk-table entries that the header declares and that lie inside ``blob``."""
    return min(u(blob, 36, 4), max(0, (len(blob) - 64) // 96))


def chunk_field(blob: bytes | bytearray, c: int, k: int) -> int:
    """Field ``k`` (0 .. 11) of chunk ``c``'s table entry."""
    return u(blob, 64 + 96 * c + 8 * k, 8)


def stream_span(blob: bytes | bytearray, c: int, kind: str) -> tuple[int, int] | None:
    """``(offset, length)`` of stream ``kind`` of chunk ``c`` if it is non-empty and inside ``blob``."""
    k = 4 + 2 * _STREAMS.index(kind)
    off, length = chunk_field(blob, c, k), chunk_field(blob, c, k + 1)
    if length == 0 or off > len(blob) or length > len(blob) - off:
        return None
    return off, length


def declared_frame_bytes(blob: bytes | bytearray) -> int:
    """What the frames of ``blob`` can justify: the sum of the content sizes they declare.

    Only frames the chunk table points at, that lie inside the blob, that declare their content size, and
    whose declared size a frame of their length can physically hold (zstd expands at most 32768-fold plus
    one 128 KiB block: the decoder refuses larger claims before allocating) are counted.
    """
    import zstandard

    total = 0
    for c in range(n_table_chunks(blob)):
        for kind in _STREAMS:
            span = stream_span(blob, c, kind)
            if span is None:
                continue
            off, length = span
            try:
                size = zstandard.get_frame_parameters(bytes(blob[off : off + length])).content_size
            except zstandard.ZstdError:
                continue
            if size in (zstandard.CONTENTSIZE_UNKNOWN, zstandard.CONTENTSIZE_ERROR):
                continue
            if size <= length * 32768 + 131072:
                total += size
    return total


def tile_budget(blob: bytes | bytearray, declared: int | None = None) -> int:
    """The most ``decode_tile(blob)`` may allocate (tracemalloc peak), in bytes.

    ``64 * len(blob) + 3 * D + 1 MiB``, where ``D`` is :func:`declared_frame_bytes`:

    * the output arrays take ``8 * nnz`` bytes; the decoder may believe ``nnz`` only once every chunk's gaps
      and vals frames declare ``2 * n`` bytes each, so ``8 * nnz = 2 * (gaps + vals declared) <= 2 * D``;
    * the decompressed frames (all chunks may decode at once on threads) take at most ``D``;
    * everything else is proportional to bytes that are in the blob: the indptr copy
      (``8 * (n_cells + 1) <= len``), masks and indices over cells or chunks; ``64 * len`` is a generous
      cap that still catches any allocation sized by a header field that no bytes back (``nnz``, ``n_cells``
      and ``n_chunks`` can claim up to ``2^64``);
    * 1 MiB of fixed overhead (error messages, the thread pool, numba dispatch).
    """
    d = declared_frame_bytes(blob) if declared is None else declared
    return 64 * len(blob) + 3 * d + 2**20


class PropertyViolation(AssertionError):
    """An input for which the target broke the property (not an exception of the target itself)."""

    def __init__(self, *, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


def _template(message: str) -> str:
    """An error message without its numbers: the name of the check that fired."""
    text = re.sub(r"0x[0-9a-f]+|\d+", "#", message)
    text = re.sub(r"b'.*?'|'[^']*'", "'…'", text)
    return text[:110]


def _measure(call: Callable[[], Any]) -> tuple[Any, BaseException | None, int]:
    """Run ``call`` with warnings as errors; return its result or exception and its tracemalloc peak."""
    import warnings

    if not tracemalloc.is_tracing():
        tracemalloc.start(1)
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    result: Any = None
    error: BaseException | None = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            result = call()
    except Exception as exc:
        error = exc
    peak = tracemalloc.get_traced_memory()[1] - before
    return result, error, peak


class TileOracle:
    """Decode a tile and check the property; :meth:`__call__` returns the outcome (``ok`` or a check name)."""

    name = "fuzz/tiles/tile_000000.dct"

    def __init__(self, max_declared: int = MAX_DECLARED) -> None:
        import numpy as np

        import deltacells
        from deltacells.codec import ExceptionPolicyError

        self.max_declared = max_declared

        self.np = np
        self.deltacells = deltacells
        self.policy_error = ExceptionPolicyError
        self.max_peak_ratio = 0.0
        self.max_peak = 0
        self.skipped = 0
        self.transient = 0  # allocations above the bound that a second run did not repeat

    def __call__(self, blob: bytes) -> str:
        """Check ``blob``; raise the target's unexpected exception or a :class:`PropertyViolation`."""
        declared = declared_frame_bytes(blob)
        if declared > self.max_declared:
            self.skipped += 1
            return "skipped (frames declare more than the fuzzing cap)"
        budget = tile_budget(blob, declared)
        tile, error, peak = _measure(lambda: self.deltacells.decode_tile(blob, name=self.name))
        if peak > budget:
            # Confirm on a second run: what a decoder allocates for an input is deterministic, but the first
            # execution of a code path can allocate for other reasons (numba loading a kernel only errors
            # reach, atheris's coverage instrumentation); those do not happen twice.
            self.transient += 1
            tile, error, peak = _measure(lambda: self.deltacells.decode_tile(blob, name=self.name))
        self.max_peak = max(self.max_peak, peak)
        self.max_peak_ratio = max(self.max_peak_ratio, peak / budget)
        if peak > budget:
            raise PropertyViolation(
                kind="allocation",
                detail=f"decode_tile allocated {peak} bytes (tracemalloc peak) for a {len(blob)}-byte tile whose "
                f"frames declare {declared} bytes; the bound is {budget}",
            )
        if error is not None:
            if not isinstance(error, self.deltacells.FormatError):
                raise error
            if self.name not in str(error):
                raise PropertyViolation(kind="message", detail=f"the FormatError does not name the tile: {error}")
            return _template(str(error).replace(self.name, "", 1))
        self.check(blob, tile)
        return "ok"

    def check(self, blob: bytes, tile: Any) -> None:
        """The decoded tile is a valid CSR matrix that agrees with the header and survives re-encoding."""
        np = self.np
        indptr, indices, data = tile.indptr, tile.indices, tile.data

        def require(condition: Any, tag: str, what: str) -> None:
            if not bool(condition):
                raise PropertyViolation(kind="csr-" + tag, detail=what)

        require(
            indptr.dtype == np.int64 and indices.dtype == np.int32 and data.dtype == np.int32,
            "dtypes",
            "int64 indptr, int32 indices and data",
        )
        require(indptr.ndim == 1 and indptr.shape[0] >= 1 and indptr[0] == 0, "indptr-start", "indptr[0] is 0")
        require(indices.shape == data.shape and indptr[-1] == indices.shape[0], "indptr-end", "indptr[-1] == nnz")
        require(np.all(indptr[1:] >= indptr[:-1]), "indptr-order", "indptr non-decreasing")
        require(1 <= tile.n_genes <= 2**31, "n_genes", "1 <= n_genes <= 2^31")
        require(tile.n_cells == u(blob, 16, 8) and tile.nnz == u(blob, 24, 8), "header", "agrees with the header")
        require(tile.n_genes == u(blob, 32, 4), "header-genes", "n_genes agrees with the header")
        if tile.nnz:
            require(indices.min() >= 0 and indices.max() < tile.n_genes, "index-range", "0 <= indices < n_genes")
            require(data.min() >= 1, "counts", "data >= 1")
            steps = np.diff(indices.astype(np.int64))
            first = np.zeros(indices.shape[0], dtype=bool)
            first[indptr[:-1][indptr[:-1] < indptr[1:]]] = True
            require(np.all(steps[~first[1:]] > 0), "index-order", "indices increase within each cell")
        require(
            tile.inexact_in_float32 == bool(tile.nnz and data.max() > 2**24), "float32-flag", "inexact_in_float32 flag"
        )
        if tile.nnz <= 2_000_000:
            try:
                again = self.deltacells.encode_tile(indptr, indices, data, tile.n_genes, n_chunks=3, level=1)
            except self.policy_error:
                return  # the writer's policy, not a format rule: the decoder has none (DECISIONS.md 7)
            back = self.deltacells.decode_tile(again)
            require(
                np.array_equal(back.indptr, indptr)
                and np.array_equal(back.indices, indices)
                and np.array_equal(back.data, data),
                "re-encode",
                "re-encoding the decoded tile gives it back",
            )


# ====================================================================================================== JSON


class ManifestOracle:
    """``Manifest.from_json`` returns a manifest whose invariants hold exactly, or raises FormatError."""

    name = "fuzz/manifest.json"

    def __init__(self) -> None:
        import deltacells
        from deltacells.dataset import Manifest

        self.deltacells = deltacells
        self.manifest = Manifest

    def __call__(self, text: bytes) -> str:
        """Check ``text``."""
        manifest, error, _ = _measure(lambda: self.manifest.from_json(text, where=self.name))
        if error is not None:
            if not isinstance(error, self.deltacells.FormatError):
                raise error
            if self.name not in str(error):
                raise PropertyViolation(kind="message", detail=f"the FormatError does not name the file: {error}")
            return _template(str(error))
        self.check(manifest)
        return "ok"

    def check(self, m: Any) -> None:
        """Invariants of an accepted manifest, with Python integers (no wrap-around)."""

        def require(condition: Any, tag: str, what: str) -> None:
            if not bool(condition):
                raise PropertyViolation(kind="manifest-" + tag, detail=what)

        cells = [int(x) for x in m.tile_cells]
        nnz = [int(x) for x in m.tile_nnz]
        sizes = [int(x) for x in m.tile_bytes]
        require(
            len(cells) == len(nnz) == len(sizes) == m.n_tiles,
            "per-tile-lists",
            "one entry per tile in every per-tile list",
        )
        require(sum(cells) == m.n_cells, "n_cells-sum", f"sum(tile_cells) = {sum(cells)} == n_cells = {m.n_cells}")
        require(all(c == m.tile_size for c in cells[:-1]), "tile-size", "every tile but the last holds tile_size cells")
        require(not cells or 1 <= cells[-1] <= m.tile_size, "last-tile", "the last tile holds 1 .. tile_size cells")
        require(1 <= m.n_genes <= 2**31, "n_genes", "1 <= n_genes <= 2^31")
        require(
            all(0 <= z <= c * m.n_genes for z, c in zip(nnz, cells, strict=True)),
            "tile-nnz",
            "tile_nnz <= cells * genes",
        )
        require(all(s >= 64 for s in sizes), "tile-bytes", "tile_bytes >= 64")
        limits, total = [], 0
        for c in cells:
            total += c
            limits.append(total)
        require(
            [int(x) for x in m.limits] == limits, "limits", "limits are the exact cumulative sums of tile_cells (int64)"
        )
        if m.has_obs:
            per_file = int(m.obs_tiles_per_file)
            shards = -(-len(cells) // per_file)
            require(
                len(m.obs_shard_bytes) == len(m.obs_shard_sha256) == shards, "obs-shards", "one entry per obs shard"
            )
        again = self.manifest.from_json(m.to_json())
        require(again.to_dict() == m.to_dict(), "round-trip", "to_json / from_json round trip")


class SchemaOracle:
    """``ObsSchema.from_json`` returns a schema whose invariants hold, or raises FormatError."""

    name = "fuzz/obs/schema.json"

    def __init__(self) -> None:
        import deltacells
        from deltacells.obs import ObsSchema
        from deltacells.obs._schema import CATEGORY_ARROW_TYPES, KINDS

        self.deltacells = deltacells
        self.schema = ObsSchema
        self.code_max = CATEGORY_ARROW_TYPES
        self.kinds = KINDS

    def __call__(self, text: bytes) -> str:
        """Check ``text``."""
        schema, error, _ = _measure(lambda: self.schema.from_json(text, where=self.name))
        if error is not None:
            if not isinstance(error, self.deltacells.FormatError):
                raise error
            if self.name not in str(error):
                raise PropertyViolation(kind="message", detail=f"the FormatError does not name the file: {error}")
            return _template(str(error))
        self.check(schema)
        return "ok"

    def check(self, s: Any) -> None:
        """Invariants of an accepted schema."""

        def require(condition: Any, tag: str, what: str) -> None:
            if not bool(condition):
                raise PropertyViolation(kind="schema-" + tag, detail=what)

        require(len(set(s.names)) == len(s.names), "unique-names", "unique column names")
        for column in s.columns:
            require(isinstance(column.name, str) and column.kind in self.kinds, "name-kind", "name and kind")
            _ = column.pa_type
            if column.kind == "category":
                cats = column.categories
                require(
                    isinstance(cats, tuple) and len(set(cats)) == len(cats), "unique-categories", "unique categories"
                )
                require(len({type(c) for c in cats}) <= 1, "category-types", "categories of one type")
                require(len(cats) - 1 <= self.code_max[column.arrow_type], "code-type", "codes fit the arrow type")
            else:
                require(
                    column.categories is None and not column.ordered, "vocabulary", "only categories have a vocabulary"
                )
        _ = s.arrow_schema()
        require(self.schema.from_json(s.to_json()) == s, "round-trip", "to_json / from_json round trip")


def make_oracle(target: str) -> Callable[[bytes], str]:
    """The oracle of ``target``."""
    if target == "tile-nojit":
        return TileOracle(NOJIT_MAX_DECLARED)  # Python kernels: keep each input quick
    if target == "tile":
        return TileOracle()
    return ManifestOracle() if target == "manifest" else SchemaOracle()


# ====================================================================================================== seeds


def tile_seeds() -> list[bytes]:
    """Valid tiles: the conformance vectors, a real dataset's tiles, and tiles made to reach every path."""
    import numpy as np

    import deltacells

    seeds = [p.read_bytes() for p in sorted((CONFORMANCE / "valid").glob("*.dct"))]
    tiles = CONFORMANCE / "datasets" / "complete" / "tiles"
    seeds += [p.read_bytes() for p in sorted(tiles.glob("*.dct"))[-2:]]
    rng = np.random.default_rng(1)

    def encode(rows: list[list[tuple[int, int]]], n_genes: int, n_chunks: int) -> bytes:
        indptr = np.cumsum([0] + [len(r) for r in rows])
        indices = np.array([g for r in rows for g, _ in r], dtype=np.int64)
        data = np.array([v for r in rows for _, v in r], dtype=np.int64)
        return deltacells.encode_tile(indptr, indices, data, n_genes, n_chunks=n_chunks, level=3)

    # value and gap exceptions (and a count above 2^24), several chunks, empty cells
    rows = []
    for _ in range(24):
        genes = np.sort(rng.choice(200_000, size=int(rng.integers(0, 12)), replace=False))
        rows.append([(int(g), int(rng.choice([1, 2, 3, 70_000, 2**25]))) for g in genes])
    seeds.append(encode(rows, 200_000, 3))
    # a cell of more than 32767 nonzeros (the int64 prefix sum), genes up to 2^31 - 1
    seeds.append(encode([[(g, 1 + g % 3) for g in range(0, 80_000, 2)], [(2**31 - 1, 5)]], 2**31, 1))
    # more than 200,000 nonzeros in 8 chunks (the threaded path); compresses to a few kilobytes
    seeds.append(encode([[(g, 1 + (g % 7 == 0)) for g in range(1000)] for _ in range(250)], 1000, 8))
    # one gene, one cell
    seeds.append(encode([[(0, 1)]], 1, 1))
    return seeds


def manifest_seeds() -> list[bytes]:
    """Manifests of the conformance datasets and a few made here."""
    seeds = [p.read_bytes() for p in sorted((CONFORMANCE / "datasets").glob("*/manifest.json"))]
    plain = {
        "format": "deltacells-dataset",
        "version": 2,
        "n_cells": 5,
        "n_genes": 3,
        "tile_size": 2,
        "tile_cells": [2, 2, 1],
        "tile_nnz": [1, 6, 0],
        "tile_bytes": [200, 300, 100],
        "n_chunks": 8,
        "zstd_level": 19,
        "has_gene_order": False,
        "has_var_names": False,
        "has_var_table": False,
        "has_obs": True,
        "obs_tiles_per_file": 2,
        "obs_shard_bytes": [10, 20],
        "obs_shard_sha256": ["0" * 64, "a" * 64],
        "obs_fingerprint": "b" * 24,
        "metadata": {"source": "fuzz", "nested": [1, {"a": None}]},
    }
    seeds.append(json.dumps(plain).encode())
    empty = {**plain, "n_cells": 0, "tile_cells": [], "tile_nnz": [], "tile_bytes": [], "has_obs": False}
    seeds.append(json.dumps(empty, indent=1).encode())
    return seeds


def schema_seeds() -> list[bytes]:
    """The conformance schema and schemas with every kind, type and option."""
    seeds = [p.read_bytes() for p in sorted((CONFORMANCE / "datasets").glob("*/obs/schema.json"))][:2]
    columns = [
        {"name": "_index", "kind": "string", "arrow_type": "string", "categories": None},
        {"name": "ct", "kind": "category", "arrow_type": "int8", "categories": ["T", "B", "NK"]},
        {"name": "grade", "kind": "category", "arrow_type": "int8", "categories": [1, 2, 3], "ordered": True},
        {"name": "dose", "kind": "category", "arrow_type": "int16", "categories": [0.5, 1.5]},
        {"name": "flagc", "kind": "category", "arrow_type": "int8", "categories": [True, False]},
        {"name": "n", "kind": "numeric", "arrow_type": "int64", "categories": None, "pandas_dtype": "Int64"},
        {"name": "x", "kind": "numeric", "arrow_type": "float", "categories": None},
        {"name": "ok", "kind": "bool", "arrow_type": "bool", "categories": None},
        {"name": "empty", "kind": "category", "arrow_type": "int32", "categories": []},
    ]
    seeds.append(json.dumps({"format": "deltacells-obs", "version": 1, "columns": columns}, indent=1).encode())
    seeds.append(json.dumps({"format": "deltacells-obs", "version": 1, "columns": []}).encode())
    return seeds


def seeds_for(target: str) -> list[bytes]:
    """The seed inputs of ``target``."""
    if target == "tile-nojit":
        return [s for s in tile_seeds() if declared_frame_bytes(s) <= NOJIT_MAX_DECLARED]
    if target == "tile":
        return tile_seeds()
    return manifest_seeds() if target == "manifest" else schema_seeds()


# ====================================================================================================== mutators


class TileMutator:
    """Structure-aware mutations of tiles; the CRC (and total_size) are made right half of the time."""

    def __init__(self, donors: list[bytes]) -> None:
        import zstandard

        self.zstd = zstandard
        self.donors = donors
        self.ops: list[tuple[Callable[[bytearray, random.Random], bytearray], int]] = [
            (self.bit_flips, 4),
            (self.interesting_bytes, 2),
            (self.truncate, 3),
            (self.extend, 1),
            (self.header_field, 5),
            (self.chunk_field, 6),
            (self.chunk_boundary, 3),
            (self.indptr_entry, 4),
            (self.splice, 2),
            (self.transplant_frame, 3),
            (self.frame_content, 7),
            (self.frame_size_claim, 3),
            (self.grow_last_chunk, 1),
        ]
        self._choices = [op for op, weight in self.ops for _ in range(weight)]

    def mutate(self, data: bytes, rng: random.Random, *, fix: bool | None = None) -> bytes:
        """One to three mutations of ``data``, then (if ``fix``, else with probability 1/2) the CRC fixed."""
        buf = bytearray(data)
        for _ in range(rng.choice((1, 1, 1, 2, 2, 3))):
            buf = rng.choice(self._choices)(buf, rng)
        if fix if fix is not None else rng.random() < 0.5:
            return fix_tile(buf)
        return bytes(buf)

    def crossover(self, a: bytes, b: bytes, rng: random.Random) -> bytes:
        """A splice of two tiles."""
        return self._splice(bytearray(a), b, rng)

    # --------------------------------------------------------------------------------- bytes

    def bit_flips(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Flip 1 .. 8 bits, half of the time within the header, chunk table and indptr."""
        if not buf:
            return bytearray(rng.randbytes(rng.randrange(1, 128)))
        dense = min(len(buf), 64 + 96 * n_table_chunks(buf) + 8 * min(u(buf, 16, 8) + 1, 64))
        for _ in range(rng.randrange(1, 9)):
            i = rng.randrange(dense if rng.random() < 0.5 else len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        return buf

    def interesting_bytes(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Set a run of bytes to 0x00, 0x01, 0x7f, 0x80 or 0xff."""
        if buf:
            i = rng.randrange(len(buf))
            buf[i : i + rng.randrange(1, 9)] = bytes([rng.choice((0, 1, 0x7F, 0x80, 0xFF))]) * rng.randrange(1, 9)
        return buf

    def truncate(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Cut the tile, often at or next to a section or stream boundary."""
        marks = [64, 64 + 96 * n_table_chunks(buf), u(buf, 40, 8)]
        for c in range(n_table_chunks(buf)):
            for kind in _STREAMS:
                span = stream_span(buf, c, kind)
                if span:
                    marks += [span[0], span[0] + span[1]]
        cut = rng.choice(marks) + rng.choice((-1, 0, 0, 1)) if rng.random() < 0.6 else rng.randrange(len(buf) + 1)
        return buf[: max(0, min(cut, len(buf)))]

    def extend(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Append trailing bytes."""
        return buf + (bytes(rng.randrange(1, 65)) if rng.random() < 0.5 else rng.randbytes(rng.randrange(1, 65)))

    def _value(self, rng: random.Random, current: int, width: int, size: int) -> int:
        choice = rng.random()
        if choice < 0.5:
            return rng.choice(_EXTREMES)
        if choice < 0.8:
            return current + rng.choice((-8, -1, 1, 8))
        if choice < 0.9:
            return size + rng.choice((-8, -1, 0, 1, 8))
        return rng.randrange(1 << (8 * width))

    # --------------------------------------------------------------------------------- structure

    def header_field(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Set a header field to an extreme (0, 1, 2^31, 2^32 - 1, 2^63, 2^64 - 1...) or a neighbour."""
        if len(buf) < 64:
            buf += bytes(64 - len(buf))
        name = rng.choice(list(_HEADER_FIELDS))
        off, width = _HEADER_FIELDS[name]
        put(buf, off, width, self._value(rng, u(buf, off, width), width, len(buf)))
        return buf

    def chunk_field(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Set a chunk-table field to an extreme, a neighbour, or the value of another field."""
        n = n_table_chunks(buf)
        if n == 0:
            return self.header_field(buf, rng)
        c, k = rng.randrange(n), rng.randrange(12)
        at = 64 + 96 * c + 8 * k
        if rng.random() < 0.2:
            value = chunk_field(buf, rng.randrange(n), rng.randrange(12))  # e.g. two streams at one offset
        else:
            value = self._value(rng, u(buf, at, 8), 8, len(buf))
        put(buf, at, 8, value)
        return buf

    def chunk_boundary(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Move the boundary between two chunks (cells or nonzeros) on both sides, keeping them contiguous."""
        n = n_table_chunks(buf)
        if n < 2:
            return self.chunk_field(buf, rng)
        c = rng.randrange(n - 1)
        k = rng.choice((1, 3))  # cell_hi / cell_lo or nnz_hi / nnz_lo
        delta = rng.choice((-2, -1, 1, 2, 1000))
        value = chunk_field(buf, c, k) + delta
        put(buf, 64 + 96 * c + 8 * k, 8, value)
        put(buf, 64 + 96 * (c + 1) + 8 * (k - 1), 8, value)
        return buf

    def indptr_entry(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Change an indptr entry: an extreme, a neighbour, a copy of the next one (empty cell), or a swap."""
        off, n_cells = u(buf, 40, 8), u(buf, 16, 8)
        count = min(n_cells + 1, max(0, (len(buf) - off) // 8)) if off < len(buf) else 0
        if count == 0:
            return self.header_field(buf, rng)
        i = rng.randrange(count)
        at = off + 8 * i
        choice = rng.random()
        if choice < 0.3 and i + 1 < count:
            put(buf, at, 8, u(buf, at + 8, 8))
        elif choice < 0.45 and count > 1:
            j = rng.randrange(count)
            a, b = u(buf, at, 8), u(buf, off + 8 * j, 8)
            put(buf, at, 8, b)
            put(buf, off + 8 * j, 8, a)
        else:
            put(buf, at, 8, self._value(rng, u(buf, at, 8), 8, len(buf)))
        return buf

    def splice(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Splice with another tile (a seed)."""
        return bytearray(self._splice(buf, rng.choice(self.donors), rng))

    def _splice(self, a: bytearray, b: bytes, rng: random.Random) -> bytes:
        choice = rng.random()
        if choice < 0.3:  # the header of one, the rest of the other
            return bytes(a[:64]) + b[64:]
        if choice < 0.5 and n_table_chunks(a) and n_table_chunks(b):  # one chunk entry from the other tile
            ca, cb = rng.randrange(n_table_chunks(a)), rng.randrange(n_table_chunks(b))
            out = bytearray(a)
            out[64 + 96 * ca : 64 + 96 * (ca + 1)] = b[64 + 96 * cb : 64 + 96 * (cb + 1)]
            return bytes(out)
        cut = rng.randrange(min(len(a), len(b)) + 1)
        if rng.random() < 0.5:
            cut -= cut % 8
        return bytes(a[:cut]) + b[cut:]

    def _frames(self, buf: bytearray) -> list[tuple[int, str, int, int]]:
        return [
            (c, kind, *span)
            for c in range(n_table_chunks(buf))
            for kind in _STREAMS
            if (span := stream_span(buf, c, kind)) is not None
        ]

    def _repoint(self, buf: bytearray, c: int, kind: str, frame: bytes) -> bytearray:
        """Append ``frame`` (8-aligned) and point stream ``kind`` of chunk ``c`` at it."""
        start = len(buf) + (-len(buf) % 8)
        out = buf + bytes(start - len(buf)) + frame
        k = 4 + 2 * _STREAMS.index(kind)
        put(out, 64 + 96 * c + 8 * k, 8, start)
        put(out, 64 + 96 * c + 8 * (k + 1), 8, len(frame))
        return out

    def transplant_frame(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Point a stream of this tile at a frame taken from another tile (or another stream of this one)."""
        targets = [(c, kind) for c in range(n_table_chunks(buf)) for kind in _STREAMS]
        donor = bytearray(rng.choice(self.donors) if rng.random() < 0.6 else buf)
        frames = self._frames(donor)
        if not targets or not frames:
            return self.bit_flips(buf, rng)
        c, kind = rng.choice(targets)
        _, _, off, length = rng.choice(frames)
        return self._repoint(buf, c, kind, bytes(donor[off : off + length]))

    def frame_content(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Decompress a frame, change its content (values, planes, exception positions...), compress it again."""
        frames = self._frames(buf)
        if not frames:
            return self.chunk_field(buf, rng)
        c, kind, off, length = rng.choice(frames)
        frame = bytes(buf[off : off + length])
        try:
            size = self.zstd.get_frame_parameters(frame).content_size
            if size > 1 << 24:  # also CONTENTSIZE_UNKNOWN / ERROR (2^64 - 1, 2^64 - 2)
                return self.bit_flips(buf, rng)
            content = bytearray(self.zstd.ZstdDecompressor().decompress(frame))
        except self.zstd.ZstdError:
            return self.bit_flips(buf, rng)
        op = rng.randrange(7)
        if op == 0 and content:  # byte flips
            for _ in range(rng.randrange(1, 5)):
                content[rng.randrange(len(content))] ^= 1 << rng.randrange(8)
        elif op == 1 and len(content) >= 2:  # one uint16 of a byte-plane stream
            n = len(content) // 2
            i = rng.randrange(n)
            value = rng.choice((0, 1, 2, 255, 256, 32768, 65534, 65535))
            content[i], content[n + i] = value & 0xFF, value >> 8
        elif op == 2 and len(content) >= 8:  # one uint32 of an exception frame (position or payload)
            i = rng.randrange(len(content) // 4)
            n = chunk_field(buf, c, 3) - chunk_field(buf, c, 2)
            value = rng.choice((0, 1, 65535, 65536, 2**24 + 1, 2**31 - 1, 2**31, 2**32 - 1, n - 1, n, n + 1))
            content[4 * i : 4 * i + 4] = (value % 2**32).to_bytes(4, "little")
        elif op == 3 and len(content) >= 16:  # two exception positions swapped or made equal
            k = len(content) // 8
            i, j = rng.randrange(k), rng.randrange(k)
            a, b = content[4 * i : 4 * i + 4], content[4 * j : 4 * j + 4]
            content[4 * i : 4 * i + 4] = b
            if rng.random() < 0.5:
                content[4 * j : 4 * j + 4] = a
        elif op == 4:  # one size off
            delta = rng.choice((-8, -2, -1, 1, 2, 8))
            content = content[:delta] if delta < 0 else content + bytes(delta)
        elif op == 5:
            content = bytearray(bytes([rng.choice((0, 0xFF, 0x01))]) * len(content))
        else:  # a plane swapped: high bytes first
            half = len(content) // 2
            content = content[half:] + content[:half]
        frame = self.zstd.ZstdCompressor(level=1, write_content_size=rng.random() < 0.9).compress(bytes(content))
        return self._repoint(buf, c, kind, frame)

    def frame_size_claim(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Change the content size a frame declares (its header field), or replace it by a compressible bomb."""
        frames = self._frames(buf)
        if not frames:
            return self.chunk_field(buf, rng)
        c, kind, off, length = rng.choice(frames)
        if rng.random() < 0.3:
            size = rng.choice((2**20, 2**24, 2**26, 2**27 + 8))
            frame = self.zstd.ZstdCompressor(level=1).compress(bytes(size))
            return self._repoint(buf, c, kind, frame)
        frame = bytearray(buf[off : off + length])
        if len(frame) < 6 or frame[:4] != b"\x28\xb5\x2f\xfd":
            return self.bit_flips(buf, rng)
        fhd = frame[4]
        single = (fhd >> 5) & 1
        fcs_width = (1 if single else 0, 2, 4, 8)[fhd >> 6]
        at = 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3]
        if fcs_width == 0 or at + fcs_width > len(frame):
            return self.bit_flips(buf, rng)
        current = u(frame, at, fcs_width) + (256 if fcs_width == 2 else 0)
        value = rng.choice((0, 2, current - 2, current + 2, current * 2, 2**31, 2**32 - 1, 2**63, 2**64 - 1))
        put(frame, at, fcs_width, value - (256 if fcs_width == 2 else 0))
        buf[off : off + length] = frame
        return buf

    def grow_last_chunk(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Give the last cell up to millions more nonzeros, consistently (large but valid, or nearly so)."""
        n = n_table_chunks(buf)
        n_cells = u(buf, 16, 8)
        if n == 0 or n_cells == 0 or u(buf, 40, 8) + 8 * (n_cells + 1) > len(buf):
            return self.header_field(buf, rng)
        extra = rng.choice((1, 1000, 40_000, 2**20, 4 * 2**20))
        c = n - 1
        lo, hi = chunk_field(buf, c, 2), chunk_field(buf, c, 3) + extra
        put(buf, 64 + 96 * c + 24, 8, hi)
        put(buf, 24, 8, u(buf, 24, 8) + extra)
        put(buf, u(buf, 40, 8) + 8 * n_cells, 8, u(buf, u(buf, 40, 8) + 8 * n_cells, 8) + extra)
        count = max(0, hi - lo)
        if count > 8 * 2**20:  # an earlier mutation made the chunk huge already
            return self.header_field(buf, rng)
        ones = bytes([1]) * count + bytes(count)  # gaps of 1 (or values of 1): low plane 1, high plane 0
        frame = self.zstd.ZstdCompressor(level=1).compress(ones)
        buf = self._repoint(buf, c, "gaps", frame)
        return self._repoint(buf, c, "vals", frame)


_JSON_VALUES: tuple[Any, ...] = (
    0, 1, -1, 2, 3, 64, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1, -(2**63), 10**30,
    0.0, -0.0, 0.5, 1.0, 2.0, 1e308, math.nan, math.inf, True, False, None, "", "x", "0", "é", "\ud800",
    "int8", "int16", "int32", "int64", "float", "double", "bool", "string", "category", "numeric", "uint64",
    "deltacells-dataset", "deltacells-obs", [], {}, [0], [None], [[]], {"a": 1},
)  # fmt: skip
_RAW_JSON = (
    "1" * 5000,
    "-" + "9" * 4400,
    "[" * 5000 + "]" * 5000,
    "[" * 100_000,  # deeper than the C recursion limit of Python 3.12+ too
    '{"a":' * 3000 + "0" + "}" * 3000,
    "1e99999",
    "-0",
    "18446744073709551616",
    '"\\ud800"',
    "NaN",
    "-Infinity",
)
_KEYS = (
    "format", "version", "n_cells", "n_genes", "tile_size", "tile_cells", "tile_nnz", "tile_bytes", "n_chunks",
    "zstd_level", "has_gene_order", "has_var_names", "has_var_table", "has_obs", "obs_tiles_per_file",
    "obs_shard_bytes", "obs_shard_sha256", "obs_fingerprint", "metadata", "columns", "name", "kind", "arrow_type",
    "categories", "ordered", "pandas_dtype",
)  # fmt: skip
_PLACEHOLDER = "\x00fuzz-raw\x00"


class JsonMutator:
    """Mutations of JSON documents.

    Values set to extremes or other types, keys dropped or added, lists resized, structurally consistent
    manifests with extreme sizes, raw text (huge numbers, deep nesting), byte-level changes of the text.
    """

    def __init__(self, donors: list[bytes]) -> None:
        self.donors = donors

    def mutate(self, data: bytes, rng: random.Random) -> bytes:
        """One to three mutations of ``data``."""
        for _ in range(rng.choice((1, 1, 2, 3))):
            data = self._once(data, rng)
        return data

    def crossover(self, a: bytes, b: bytes, rng: random.Random) -> bytes:
        """Graft a value of ``b`` into ``a``."""
        try:
            doc, other = json.loads(a), json.loads(b)
        except (ValueError, RecursionError):
            return a[: rng.randrange(len(a) + 1)] + b[rng.randrange(len(b) + 1) :]
        slots = list(_slots(doc))
        if not slots:
            return a
        container, key = rng.choice(slots)
        container[key] = _pick_node(other, rng)
        return json.dumps(doc).encode()

    def _once(self, data: bytes, rng: random.Random) -> bytes:
        if rng.random() < 0.2:
            return self._bytes(data, rng)
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError):
            return self._bytes(data, rng)
        raw = None
        op = rng.randrange(8)
        slots = list(_slots(doc))
        if op == 0 and slots:
            container, key = rng.choice(slots)
            container[key] = rng.choice(_JSON_VALUES)
        elif op == 1 and slots:
            container, key = rng.choice(slots)
            container[key] = _PLACEHOLDER
            raw = rng.choice(_RAW_JSON)
        elif op == 2 and slots:
            container, key = rng.choice(slots)
            container[key] = _derived(doc, rng)
        elif op == 3:
            dicts = [d for d in _nodes(doc) if isinstance(d, dict)]
            if dicts:
                d = rng.choice(dicts)
                if d and rng.random() < 0.5:
                    del d[rng.choice(list(d))]
                else:
                    d[rng.choice(_KEYS)] = rng.choice(_JSON_VALUES)
        elif op == 4:
            lists = [x for x in _nodes(doc) if isinstance(x, list)]
            if lists:
                _resize(rng.choice(lists), rng)
        elif op == 5 and isinstance(doc, dict) and "tile_cells" in doc:
            _consistent_manifest(doc, rng)
        elif op == 6 and isinstance(doc, dict) and isinstance(doc.get("columns"), list):
            doc["columns"].append(_column(rng))
        elif slots:
            container, key = rng.choice(slots)
            container[key] = _pick_node(json.loads(rng.choice(self.donors)), rng)
        text = json.dumps(doc, indent=rng.choice((None, 1)), ensure_ascii=rng.random() < 0.8)
        if raw is not None:
            text = text.replace(json.dumps(_PLACEHOLDER), raw, 1)
        return text.encode("utf-8", "surrogatepass")

    def _bytes(self, data: bytes, rng: random.Random) -> bytes:
        buf = bytearray(data)
        op = rng.randrange(4)
        if op == 0 and buf:
            for _ in range(rng.randrange(1, 5)):
                buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:
            i = rng.randrange(len(buf))
            del buf[i : i + rng.randrange(1, 16)]
        elif op == 2:
            i = rng.randrange(len(buf) + 1)
            buf[i:i] = rng.choice(_RAW_JSON).encode()[: rng.choice((8, 64, 100_000))]
        else:
            buf = buf[: rng.randrange(len(buf) + 1)]
        return bytes(buf)


def _nodes(doc: Any) -> Iterable[Any]:
    stack = [doc]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node[:50])


def _slots(doc: Any) -> Iterable[tuple[Any, Any]]:
    for node in _nodes(doc):
        if isinstance(node, dict):
            yield from ((node, k) for k in node)
        elif isinstance(node, list):
            yield from ((node, i) for i in range(min(len(node), 50)))


def _pick_node(doc: Any, rng: random.Random) -> Any:
    return rng.choice(list(_nodes(doc)))


def _derived(doc: Any, rng: random.Random) -> Any:
    """An integer derived from the document: sums (exact and wrapped to int64) and lengths of its lists."""
    lists = [x for x in _nodes(doc) if isinstance(x, list) and all(type(v) is int for v in x)]
    if not lists:
        return rng.choice(_JSON_VALUES)
    values = rng.choice(lists)
    total = sum(values)
    wrapped = (total + 2**63) % 2**64 - 2**63
    return rng.choice((total, wrapped, len(values), total + 1, max(values, default=0)))


def _resize(values: list[Any], rng: random.Random) -> None:
    op = rng.randrange(5)
    if op == 0:
        del values[rng.randrange(len(values) + 1) :]
    elif op == 1 and values:
        values.extend([rng.choice(values)] * rng.choice((1, 2, 100, 10_000)))
    elif op == 2:
        values.reverse()
    elif op == 3 and values:
        fill = rng.choice(_JSON_VALUES)
        values[:] = [fill] * len(values)
    else:
        rng.shuffle(values)


def _consistent_manifest(doc: dict[str, Any], rng: random.Random) -> None:
    """Per-tile lists that agree with each other, with extreme tile sizes (where sums overflow int64)."""
    size = rng.choice((1, 2, 3, 2**31, 2**32, 2**61, 2**62, 2**63 - 1))
    k = rng.randrange(1, 5)
    last = rng.choice((1, 2, size))
    cells = [size] * (k - 1) + [last]
    doc["tile_size"] = size
    doc["tile_cells"] = cells
    doc["tile_nnz"] = [rng.choice((0, 1)) for _ in cells]
    doc["tile_bytes"] = [64] * k
    total = sum(cells)
    doc["n_cells"] = rng.choice((total, (total + 2**63) % 2**64 - 2**63, total % 2**64))
    if doc.get("has_obs"):
        per_file = rng.choice((1, 2, 1000))
        shards = -(-k // per_file)
        doc["obs_tiles_per_file"] = per_file
        doc["obs_shard_bytes"] = [1] * shards
        doc["obs_shard_sha256"] = ["0" * 64] * shards


def _column(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(("category", "numeric", "bool", "string"))
    arrow = {"category": ("int8", "int16", "int32"), "numeric": ("int64", "double", "float", "uint8")}.get(
        kind, (kind,)
    )
    column: dict[str, Any] = {"name": rng.choice(("a", "b", "_index", "x y")), "kind": kind}
    column["arrow_type"] = rng.choice(arrow)
    vocabularies = (["a", "b"], [1, 2], [0.5], [True], list(range(130)), ["a", "a"], [1, "a"])
    column["categories"] = rng.choice(vocabularies) if kind == "category" else None
    if rng.random() < 0.3:
        column[rng.choice(("ordered", "pandas_dtype"))] = rng.choice(_JSON_VALUES)
    return column


def make_mutator(target: str, donors: list[bytes]) -> TileMutator | JsonMutator:
    """The mutator of ``target``."""
    return TileMutator(donors) if target.startswith("tile") else JsonMutator(donors)


# ====================================================================================================== findings


def signature(target: str, error: BaseException) -> str:
    """What identifies a failure: the exception type and the innermost deltacells function it came through."""
    if isinstance(error, PropertyViolation):
        return f"property-{error.kind}"
    where = "unknown"
    for frame in traceback.extract_tb(error.__traceback__):
        # comprehension frames exist before Python 3.12 only (PEP 709): name the function around them
        if "deltacells" in frame.filename and "fuzz_decode" not in frame.filename and not frame.name.startswith("<"):
            where = frame.name
    return f"{type(error).__name__}-{where}"


def corpus_name(target: str, sig: str, data: bytes) -> str:
    """File name of a saved input: ``<target>-<signature>-<sha1[:12]>.<ext>``."""
    slug = re.sub(r"[^A-Za-z0-9_]+", "_", sig).strip("_")[:60]
    return f"{target}-{slug}-{hashlib.sha1(data).hexdigest()[:12]}.{EXTENSIONS[target]}"


def target_of(path: Path) -> str:
    """The target a corpus file belongs to (from its name)."""
    for target in sorted(TARGETS, key=len, reverse=True):
        if path.name.startswith(target + "-"):
            return target
    msg = f"{path.name}: corpus files are named <target>-<signature>-<hash>.<ext>, target one of {TARGETS}"
    raise ValueError(msg)


def known_signatures(directory: Path) -> set[str]:
    """``target-slug`` prefixes of the inputs already in a corpus directory."""
    known = set()
    for path in directory.glob("*-*-*.*"):
        with contextlib.suppress(ValueError):
            target_of(path)
            known.add(path.name.rsplit("-", 1)[0])
    return known


# ====================================================================================================== random engine


def warm_up(oracle: Callable[[bytes], str], seeds: list[bytes]) -> None:
    """Run every seed twice (numba compiles or loads the kernels the first time) and check that none fails.

    Raises
    ------
    RuntimeError
        If a seed fails the property: the harness, not the target, would be at fault.
    """
    for data in seeds:
        with contextlib.suppress(Exception):
            oracle(data)
    for i, data in enumerate(seeds):
        try:
            oracle(data)
        except Exception as exc:
            msg = f"seed {i} fails its oracle: {type(exc).__name__}: {exc}"
            raise RuntimeError(msg) from exc


def _status(path: Path | None, stats: dict[str, Any]) -> None:
    if path is not None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(stats))
        os.replace(tmp, path)


def random_worker(
    target: str,
    seconds: float,
    seed: int,
    corpus_out: Path,
    *,
    current: Path | None = None,
    status: Path | None = None,
    timeout: float = 10.0,
    min_execs: int = 0,
) -> dict[str, Any]:
    """Fuzz ``target`` for ``seconds`` (after warming up) in this process; return the statistics.

    Parameters
    ----------
    target
        One of :data:`TARGETS`.
    seconds
        Fuzzing time.
    seed
        Seed of the mutations (the run is deterministic for a seed, up to how many inputs fit in the time).
    corpus_out
        Where failing inputs are saved.
    current
        A file that holds the input being run (read by the supervisor if this process dies).
    status
        A file where the statistics are written every second.
    timeout
        Seconds one input may take before the process dumps its stack and exits.
    min_execs
        Run at least this many inputs whatever the time.

    Returns
    -------
    dict
        Inputs executed, time, outcomes (checks reached), findings.
    """
    faulthandler.enable()
    rng = random.Random(seed)
    oracle = make_oracle(target)
    seeds = seeds_for(target)
    mutator = make_mutator(target, seeds)
    pool = list(seeds)
    outcomes: Counter[str] = Counter()
    harness_errors: Counter[str] = Counter()
    findings: dict[str, dict[str, Any]] = {}
    known = known_signatures(DEFAULT_CORPUS) | known_signatures(corpus_out)
    corpus_out.mkdir(parents=True, exist_ok=True)
    fd = os.open(current, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644) if current else None
    warm_up(oracle, seeds)
    if isinstance(oracle, TileOracle):  # the figures of the warm-up include numba's compilation
        oracle.max_peak = oracle.max_peak_ratio = oracle.skipped = oracle.transient = 0
    admit = 2 * max(len(x) for x in seeds) + 65536  # keep the parents small: mutations stack and grow inputs
    stats: dict[str, Any] = {"target": target, "engine": "random", "seed": seed, "execs": 0, "seconds": 0.0}
    _status(status, stats)  # the supervisor knows that warming up went well
    start = last_status = time.monotonic()
    deadline = start + seconds
    execs = 0
    while time.monotonic() < deadline or execs < min_execs:
        parent = rng.choice(pool)
        try:
            cross = rng.random() < 0.1
            data = mutator.crossover(parent, rng.choice(pool), rng) if cross else mutator.mutate(parent, rng)
        except Exception as exc:  # a bug of the harness: count it, do not let it stop the run
            harness_errors[f"{type(exc).__name__}: {exc}"[:200]] += 1
            continue
        if fd is not None:
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        faulthandler.dump_traceback_later(timeout, exit=True)
        try:
            outcome = oracle(data)
        except Exception as exc:
            sig = signature(target, exc)
            outcome = f"FINDING {sig}"
            entry = findings.get(sig)
            if entry is None:
                name = corpus_name(target, sig, data)
                new = name.rsplit("-", 1)[0] not in known
                if new:
                    (corpus_out / name).write_bytes(data)
                findings[sig] = entry = {
                    "signature": sig,
                    "file": str(corpus_out / name) if new else None,
                    "known": not new,
                    "message": f"{type(exc).__name__}: {exc}"[:300],
                    "count": 0,
                }
            entry["count"] += 1
        finally:
            faulthandler.cancel_dump_traceback_later()
        execs += 1
        if outcome not in outcomes and len(pool) < 2000 and len(data) <= admit:
            pool.append(data)  # a new outcome: this input reached a check no parent had reached
        outcomes[outcome] += 1
        now = time.monotonic()
        if now - last_status > 1.0:
            last_status = now
            stats.update(execs=execs, seconds=now - start, findings=list(findings.values()))
            _status(status, stats)
    stats.update(
        execs=execs,
        seconds=time.monotonic() - start,
        outcomes=dict(outcomes.most_common()),
        findings=list(findings.values()),
        pool=len(pool),
        harness_errors=dict(harness_errors),
    )
    if isinstance(oracle, TileOracle):
        stats.update(
            skipped=oracle.skipped,
            transient=oracle.transient,
            max_peak=oracle.max_peak,
            max_peak_to_bound=oracle.max_peak_ratio,
        )
    _status(status, stats)
    return stats


# ====================================================================================================== atheris engine


def atheris_worker(
    target: str, seconds: float, seed: int, corpus_out: Path, *, timeout: float, rss_limit_mb: int
) -> None:
    """Run libFuzzer (through atheris) on ``target`` with the structure-aware mutator; never returns."""
    import atheris

    exclude = [] if os.environ.get("NUMBA_DISABLE_JIT") == "1" else list(JIT_MODULES)
    with atheris.instrument_imports(include=["deltacells"], exclude=exclude):
        import deltacells  # (instrumented for coverage)
        import deltacells.obs  # noqa: F401  (imported lazily by the package: instrument it too)
    oracle = make_oracle(target)
    seeds = seeds_for(target)
    warm_up(oracle, seeds)  # numba compiles (or loads) the kernels now, not inside a measured input
    mutator = make_mutator(target, seeds)
    findings: dict[str, int] = {}
    known = known_signatures(DEFAULT_CORPUS) | known_signatures(corpus_out)
    corpus_out.mkdir(parents=True, exist_ok=True)
    counts = {"execs": 0}

    def test_one_input(data: bytes) -> None:
        counts["execs"] += 1
        before = getattr(oracle, "transient", 0)
        try:
            oracle(data)
        except Exception as exc:
            sig = signature(target, exc)
            if sig not in findings:
                name = corpus_name(target, sig, data)
                if name.rsplit("-", 1)[0] not in known:
                    (corpus_out / name).write_bytes(data)
                    print(f"FINDING {sig} -> {corpus_out / name}: {type(exc).__name__}: {exc}"[:400], flush=True)
                else:
                    print(f"KNOWN {sig}: {type(exc).__name__}: {exc}"[:300], flush=True)
            findings[sig] = findings.get(sig, 0) + 1
        if getattr(oracle, "transient", 0) != before:
            print(f"TRANSIENT {oracle.transient}", flush=True)  # an allocation above the bound, not repeated

    def custom_mutator(data: bytes, max_size: int, mutation_seed: int) -> bytes:
        rng = random.Random(mutation_seed)
        if rng.random() < 0.25:
            out = atheris.Mutate(data, max_size)
            if target.startswith("tile") and rng.random() < 0.5:
                out = fix_tile(out)
        else:
            out = mutator.mutate(data, rng)
        return out[:max_size]

    def custom_crossover(a: bytes, b: bytes, max_size: int, mutation_seed: int) -> bytes:
        return mutator.crossover(a, b, random.Random(mutation_seed))[:max_size]

    corpus_dir = Path(tempfile.mkdtemp(prefix=f"fuzz-{target}-"))
    for i, s in enumerate(seeds):
        (corpus_dir / f"seed{i:03d}").write_bytes(s)
    args = [
        sys.argv[0],
        str(corpus_dir),
        f"-max_total_time={max(1, round(seconds))}",
        f"-timeout={max(1, round(timeout))}",
        f"-rss_limit_mb={rss_limit_mb}",
        f"-artifact_prefix={corpus_out}/{target}-",
        f"-seed={seed + 1}",
        "-max_len=1048576",
        "-print_final_stats=1",
    ]
    atheris.Setup(args, test_one_input, custom_mutator=custom_mutator, custom_crossover=custom_crossover)
    atheris.Fuzz()


# ====================================================================================================== supervisor


def _run_worker(command: list[str], env: dict[str, str], limit: float) -> tuple[int, str]:
    with tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, env=env, stdout=err, stderr=subprocess.STDOUT, text=True)
        try:
            code = process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
        err.seek(0)
        return code, err.read()


def supervise(
    target: str,
    seconds: float,
    seed: int,
    corpus_out: Path,
    *,
    engine: str,
    timeout: float,
    rss_limit_mb: int,
    min_execs: int = 0,
) -> dict[str, Any]:
    """Fuzz ``target`` in worker subprocesses for ``seconds``, restarting a worker that dies."""
    workdir = Path(tempfile.mkdtemp(prefix=f"fuzz-{target}-"))
    current, status = workdir / "current", workdir / "status.json"
    env = target_environment(target)
    total: dict[str, Any] = {
        "target": target,
        "engine": engine,
        "execs": 0,
        "seconds": 0.0,
        "findings": [],
        "outcomes": {},
        "restarts": 0,
    }
    known = known_signatures(DEFAULT_CORPUS) | known_signatures(corpus_out)
    left = seconds
    attempt = 0
    while (left > 0.5 or attempt == 0) and attempt < 20:  # one worker at least (--min-execs)
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            target,
            "--seconds",
            f"{left:.2f}",
            "--seed",
            str(seed + 1000 * attempt),
            "--corpus-out",
            str(corpus_out),
            "--engine",
            engine,
            "--timeout",
            str(timeout),
            "--rss-limit-mb",
            str(rss_limit_mb),
            "--min-execs",
            str(min_execs if attempt == 0 else 0),
            "--current",
            str(current),
            "--status",
            str(status),
        ]
        status.unlink(missing_ok=True)
        began = time.monotonic()
        code, output = _run_worker(command, env, left + 300 + 4 * timeout)
        wall = time.monotonic() - began
        stats = json.loads(status.read_text()) if status.exists() else {}
        total["execs"] += int(stats.get("execs", 0))
        total["seconds"] += float(stats.get("seconds", 0.0))
        total["findings"] += stats.get("findings", [])
        for key, value in stats.get("outcomes", {}).items():
            total["outcomes"][key] = total["outcomes"].get(key, 0) + value
        for key in ("skipped", "transient", "max_peak", "max_peak_to_bound", "pool"):
            if key in stats:
                total[key] = max(total.get(key, 0), stats[key])
        if engine == "atheris":
            total.update(_libfuzzer_stats(output))
            total["findings"] += [
                {"signature": line.split()[1], "file": line.split()[3].rstrip(":"), "known": False, "message": line}
                for line in output.splitlines()
                if line.startswith("FINDING ")
            ]
            total["findings"] += [
                {"signature": line.split()[1].rstrip(":"), "file": None, "known": True, "message": line}
                for line in output.splitlines()
                if line.startswith("KNOWN ")
            ]
            artifacts = re.findall(r"Test unit written to (\S+)", output)
            total["findings"] += [
                {"signature": "libfuzzer-" + Path(a).name.split("-")[1], "file": a, "known": False, "message": ""}
                for a in artifacts
            ]
            total["seconds"] += wall
            transient = [int(line.split()[1]) for line in output.splitlines() if line.startswith("TRANSIENT ")]
            total["transient"] = total.get("transient", 0) + max(transient, default=0)
            if code == 0 or not artifacts:
                if code != 0:
                    total["worker_error"] = output[-3000:]
                break
        elif code == 0:
            break
        elif not stats or (code > 0 and "Timeout (" not in output):
            total["worker_error"] = output[-3000:]  # a problem of the harness (or of its start), not a finding
            break
        else:  # killed by a signal (a crash), or by faulthandler after --timeout seconds on one input (a hang)
            kind = "timeout" if "Timeout (" in output else f"signal{-code}"
            data = current.read_bytes() if current.exists() else b""
            sig = f"crash-{kind}"
            name = corpus_name(target, sig, data)
            new = name.rsplit("-", 1)[0] not in known
            if new:
                corpus_out.mkdir(parents=True, exist_ok=True)
                (corpus_out / name).write_bytes(data)
            total["findings"].append(
                {"signature": sig, "file": str(corpus_out / name), "known": not new, "message": output[-1500:]}
            )
            total["restarts"] += 1
        left = seconds - total["seconds"]
        attempt += 1
    return total


def _libfuzzer_stats(output: str) -> dict[str, Any]:
    stats: dict[str, Any] = {}
    for line in output.splitlines():
        match = re.search(r"cov: (\d+) ft: (\d+) corp: (\d+)/", line)
        if match:
            stats.update(edges=int(match[1]), features=int(match[2]), corpus_units=int(match[3]))
        match = re.match(r"stat::(\w+):\s+(\d+)", line)
        if match:
            stats[match[1]] = int(match[2])
    if "number_of_executed_units" in stats:
        stats["libfuzzer_execs"] = stats["number_of_executed_units"]
    return stats


# ====================================================================================================== replay


def replay(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Run the oracle of each saved input; ``ok`` is False when the property still fails."""
    results = []
    oracles: dict[str, Callable[[bytes], str]] = {}
    for path in paths:
        target = target_of(path)
        oracle = oracles.get(target)
        if oracle is None:
            oracle = oracles[target] = make_oracle(target)
        data = path.read_bytes()
        faulthandler.dump_traceback_later(60, exit=True)
        try:
            outcome = oracle(data)
            results.append({"file": path.name, "target": target, "ok": True, "outcome": outcome})
        except Exception as exc:
            results.append(
                {
                    "file": path.name,
                    "target": target,
                    "ok": False,
                    "signature": signature(target, exc),
                    "outcome": f"{type(exc).__name__}: {exc}"[:500],
                }
            )
        finally:
            faulthandler.cancel_dump_traceback_later()
    return results


# ====================================================================================================== main


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="fuzzing time in all (default 120)")
    parser.add_argument("--targets", default=None, help=f"comma-separated, of {', '.join(TARGETS)}")
    parser.add_argument("--engine", choices=("auto", "atheris", "random"), default="auto")
    parser.add_argument("--jobs", type=int, default=1, help="workers per target, run at once (different seeds)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--corpus-out", type=Path, default=DEFAULT_CORPUS, help="where failing inputs are saved")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per input before it counts as a hang")
    parser.add_argument("--rss-limit-mb", type=int, default=4096)
    parser.add_argument("--min-execs", type=int, default=0, help="random engine: at least this many inputs")
    parser.add_argument("--json", type=Path, default=None, help="write the statistics here")
    parser.add_argument("--replay", type=Path, nargs="*", default=None, help="run the oracles on saved inputs")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--current", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--status", type=Path, default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _engine(name: str) -> str:
    if name != "auto":
        return name
    try:
        import atheris  # noqa: F401
    except ImportError:
        return "random"
    return "atheris"


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit status (1 if a new failing input was found)."""
    args = _parse(argv)
    if args.worker:
        if args.engine == "atheris":
            atheris_worker(
                args.worker, args.seconds, args.seed, args.corpus_out, timeout=args.timeout,
                rss_limit_mb=args.rss_limit_mb,
            )  # fmt: skip
            return 0
        with contextlib.suppress(ValueError, OSError):
            import resource

            limit = args.rss_limit_mb * 2**20
            resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
        random_worker(
            args.worker, args.seconds, args.seed, args.corpus_out, current=args.current, status=args.status,
            timeout=args.timeout, min_execs=args.min_execs,
        )  # fmt: skip
        return 0
    if args.replay is not None:
        results = replay(args.replay)
        print(json.dumps(results, indent=1))
        return int(any(not r["ok"] for r in results))

    engine = _engine(args.engine)
    default = [t for t in TARGETS if engine == "atheris" or t != "tile-nojit"]
    targets = args.targets.split(",") if args.targets else default
    unknown = set(targets) - set(TARGETS)
    if unknown:
        print(f"unknown targets {sorted(unknown)}; choose among {TARGETS}", file=sys.stderr)
        return 2
    weights = {t: WEIGHTS[t] for t in targets}
    scale = sum(weights.values())
    report: dict[str, Any] = {"engine": engine, "seconds": args.seconds, "jobs": args.jobs, "targets": {}}
    began = time.monotonic()
    from concurrent.futures import ThreadPoolExecutor

    for target in targets:
        share = args.seconds * weights[target] / scale
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            runs = list(
                pool.map(
                    lambda job, t=target, s=share: supervise(
                        t, s, args.seed + 7919 * job, args.corpus_out, engine=engine, timeout=args.timeout,
                        rss_limit_mb=args.rss_limit_mb, min_execs=args.min_execs,
                    ),
                    range(args.jobs),
                )
            )  # fmt: skip
        merged = runs[0]
        for other in runs[1:]:
            for key in ("execs", "restarts", "libfuzzer_execs", "transient"):
                merged[key] = merged.get(key, 0) + other.get(key, 0)
            merged["findings"] += other["findings"]
            for key, value in other.get("outcomes", {}).items():
                merged["outcomes"][key] = merged["outcomes"].get(key, 0) + value
            for key in ("edges", "features", "corpus_units", "max_peak", "max_peak_to_bound", "skipped"):
                if key in other:
                    merged[key] = max(merged.get(key, 0), other[key])
        merged["seconds_per_job"] = share
        report["targets"][target] = merged
    report["wall_seconds"] = time.monotonic() - began
    _print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    new = [f for t in report["targets"].values() for f in t["findings"] if not f.get("known")]
    errors = [t for t in report["targets"].values() if "worker_error" in t]
    return 1 if new or errors else 0


def _print_report(report: dict[str, Any]) -> None:
    print(f"engine {report['engine']}, {report['jobs']} job(s) per target, {report['wall_seconds']:.1f} s wall")
    for target, stats in report["targets"].items():
        execs = stats.get("libfuzzer_execs") or stats["execs"]
        seconds = max(stats.get("seconds", 0.0), 1e-9)
        line = f"  {target:10s} {execs:9d} inputs"
        if report["engine"] == "random":
            line += f" ({execs / seconds:,.0f}/s)"
            line += f", {len(stats.get('outcomes', {}))} distinct outcomes (checks reached)"
        else:
            line += f", cov {stats.get('edges', '?')} edges / {stats.get('features', '?')} features"
            line += f", corpus {stats.get('corpus_units', '?')}"
        if "max_peak_to_bound" in stats:
            line += f", peak/bound {stats['max_peak_to_bound']:.3f}"
        if stats.get("transient"):
            line += f", {stats['transient']} first-run allocation(s) above the bound not repeated"
        print(line)
        for finding in stats["findings"]:
            tag = "known" if finding.get("known") else "NEW"
            print(f"    {tag} {finding['signature']}: {finding.get('file') or ''}")
            if not finding.get("known"):
                print("      " + str(finding.get("message", ""))[:300].replace("\n", "\n      "))
        if "worker_error" in stats:
            print("    worker error:\n" + stats["worker_error"])


if __name__ == "__main__":
    sys.exit(main())
