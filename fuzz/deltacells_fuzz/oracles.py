"""The oracles: run one input through its target and check the property (see :mod:`deltacells_fuzz.cli`).

An oracle is called with the input's bytes and returns its *outcome*: ``"ok"``, or the template of the
:class:`~deltacells.errors.FormatError` it raised (the name of the check that fired, numbers removed). It
raises :class:`PropertyViolation` when the result breaks the property, and lets any other exception of
the target through: both are findings.

deltacells is imported when an oracle is made, never at import time: the atheris worker must import it
itself, inside its instrumentation hook.
"""

from __future__ import annotations

import re
import tracemalloc
from collections.abc import Callable
from typing import Any

from ._tilebytes import declared_frame_bytes, tile_budget, u
from .targets import MAX_DECLARED, NOJIT_MAX_DECLARED

#: Kinds of obs columns (``FORMAT.md``, "Obs"), restated here so that the oracle does not take the rule
#: from the implementation under test.
OBS_KINDS = ("category", "numeric", "bool", "string")

#: Arrow types of category codes, by the largest code they hold (``FORMAT.md``, "Obs").
CATEGORY_CODE_MAX = {"int8": 2**7 - 1, "int16": 2**15 - 1, "int32": 2**31 - 1}


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
    """Run ``call`` with warnings as errors; return its result or exception and the memory it took at its peak.

    That is tracemalloc's peak, plus the large arrays the package maps itself (``deltacells._memory``), which
    tracemalloc does not see: counted as they are mapped, as if all were still held at the peak.
    """
    import warnings

    from deltacells import _memory

    mapped: list[int] = []
    real_mapping = _memory._mapping

    def counted_mapping(nbytes: int) -> Any:
        mapped.append(nbytes)
        return real_mapping(nbytes)

    if not tracemalloc.is_tracing():
        tracemalloc.start(1)
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    result: Any = None
    error: BaseException | None = None
    _memory._mapping = counted_mapping
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            result = call()
    except Exception as exc:
        error = exc
    finally:
        _memory._mapping = real_mapping
    peak = tracemalloc.get_traced_memory()[1] - before + sum(mapped)
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


class ManifestOracle:
    """``Manifest.from_json`` returns a manifest whose invariants hold exactly, or raises FormatError."""

    name = "fuzz/manifest.json"

    def __init__(self) -> None:
        import deltacells
        from deltacells import Manifest

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
        from deltacells.format import ObsSchema

        self.deltacells = deltacells
        self.schema = ObsSchema
        self.code_max = CATEGORY_CODE_MAX
        self.kinds = OBS_KINDS

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
