"""Deep validation of a dataset: every object fetched, decoded and checked against the manifest.

:func:`validate_dataset` is what ``deltacells validate`` runs. Unlike reading, which stops at the first
problem, it collects every problem it finds (the object at fault and what is wrong with it) and returns
them in a :class:`ValidationReport`; it never raises for a malformed dataset.

What is checked (FORMAT.md, DECISIONS.md):

* ``manifest.json``: present, JSON, the right format and version, every field and the counts consistent
  with each other. When the strict parse fails, the fields that can still be read are used for the
  checks below, so that one bad count does not hide the state of the tiles.
* tiles: each one fetched and decoded with every rule of the format checked (header, CRC-32, chunk
  table, frames, gene range...), its size against ``tile_bytes``, and its cells, nonzeros and
  ``n_genes`` against ``tile_cells``, ``tile_nnz`` and ``n_genes``; tile files the manifest does not
  list are reported too.
* obs: ``obs/schema.json`` parsed; ``obs_fingerprint`` recomputed from the schema text, ``tile_cells``
  and the manifest's shard SHA-256s; each shard's size and SHA-256 against the manifest, its columns
  and Arrow types against the schema, one row group per tile with ``tile_cells[t]`` rows, every row
  group readable and every category code within its vocabulary.
* sidecars: the ``has_*`` flags against the files present; ``gene_order.npy`` an ``int32`` permutation
  of ``0 .. n_genes - 1``; ``var_names.txt`` UTF-8 with ``n_genes`` lines; ``var.parquet`` readable with
  ``n_genes`` rows.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from deltacells.dataset._manifest import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST_NAME,
    Manifest,
    _bool,
    _int,
    _int_list,
    _parse_obs_fields,
    obs_shard_path,
    tile_path,
)
from deltacells.errors import FormatError
from deltacells.storage import Store

__all__ = ["Problem", "ValidationReport", "validate_dataset"]

_TILE_FILE = re.compile(r"^tile_(\d{6,})\.dct$")
_SHARD_FILE = re.compile(r"^obs_(\d{4,})\.parquet$")
_SIDECAR_FLAGS = {
    "gene_order.npy": "has_gene_order",
    "var_names.txt": "has_var_names",
    "var.parquet": "has_var_table",
    "obs/schema.json": "has_obs",
}


@dataclass(frozen=True)
class Problem:
    """One problem found in a dataset.

    Attributes
    ----------
    object
        The object at fault, relative to the dataset root (``"manifest.json"``, ``"tiles/tile_000003.dct"``,
        ``"obs/obs_0001.parquet"``...).
    message
        What is wrong with it.
    """

    object: str
    message: str

    def __str__(self) -> str:
        return f"{self.object}: {self.message}"


@dataclass
class ValidationReport:
    """What :func:`validate_dataset` found.

    Attributes
    ----------
    path
        The dataset checked (as given).
    problems
        Every problem found, in the order of the checks: manifest, files present (flags, stray tiles and
        shards), sidecar contents, tiles (in tile order), obs.
    n_tiles
        Tiles the manifest lists (0 when it cannot be read).
    n_shards
        obs shards the manifest lists.
    tiles_checked
        Tiles fetched and decoded (whether or not they had a problem).
    shards_checked
        obs shards fetched and checked.
    nnz_checked
        Nonzeros decoded from the tiles.
    bytes_checked
        Bytes of the tiles read.
    """

    path: str
    problems: list[Problem] = field(default_factory=list)
    n_tiles: int = 0
    n_shards: int = 0
    tiles_checked: int = 0
    shards_checked: int = 0
    nnz_checked: int = 0
    bytes_checked: int = 0

    @property
    def ok(self) -> bool:
        """Whether no problem was found."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict (what ``deltacells validate --json`` prints)."""
        return {
            "path": self.path,
            "ok": self.ok,
            "n_tiles": self.n_tiles,
            "n_shards": self.n_shards,
            "tiles_checked": self.tiles_checked,
            "shards_checked": self.shards_checked,
            "nnz_checked": self.nnz_checked,
            "bytes_checked": self.bytes_checked,
            "problems": [{"object": p.object, "message": p.message} for p in self.problems],
        }

    def __str__(self) -> str:
        head = (
            f"{self.path}: {self.tiles_checked} of {self.n_tiles} tiles and {self.shards_checked} of "
            f"{self.n_shards} obs shards checked, "
        )
        if self.ok:
            return head + "no problems"
        lines = [head + f"{len(self.problems)} problem{'s' if len(self.problems) != 1 else ''}:"]
        lines += [f"  {p}" for p in self.problems]
        return "\n".join(lines)


@dataclass
class _Expected:
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
        for values in (self.tile_cells, self.tile_bytes, self.tile_nnz):
            if values is not None:
                return int(values.shape[0])
        return 0

    @property
    def n_shards(self) -> int:
        return 0 if self.obs_shard_bytes is None else len(self.obs_shard_bytes)

    @classmethod
    def from_manifest(cls, m: Manifest) -> _Expected:
        return cls(
            n_genes=m.n_genes,
            tile_cells=m.tile_cells,
            tile_nnz=m.tile_nnz,
            tile_bytes=m.tile_bytes,
            flags={name: getattr(m, flag) for name, flag in _SIDECAR_FLAGS.items()},
            obs_tiles_per_file=m.obs_tiles_per_file if m.has_obs else None,
            obs_shard_bytes=m.obs_shard_bytes if m.has_obs else None,
            obs_shard_sha256=m.obs_shard_sha256 if m.has_obs else None,
            obs_fingerprint=m.obs_fingerprint if m.has_obs else None,
        )


class _Collector:
    """The problems found so far: deduplicated, with the object's name stripped from messages."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self._seen: set[tuple[str, str]] = set()

    def add(self, obj: str, message: str | BaseException) -> None:
        text = _message(message)
        prefix = f"{obj}: "
        while text.startswith(prefix):
            text = text[len(prefix) :]
        key = (obj, text)
        if key not in self._seen:
            self._seen.add(key)
            self.problems.append(Problem(obj, text))


def _message(error: str | BaseException) -> str:
    if isinstance(error, str):
        return error
    if isinstance(error, FormatError):
        return str(error)
    text = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def validate_dataset(
    path: str | os.PathLike[str],
    *,
    storage_options: dict[str, Any] | None = None,
    progress: bool = False,
    threads: int | None = None,
) -> ValidationReport:
    """Check every object of a dataset against the format and its manifest, collecting every problem.

    Parameters
    ----------
    path
        Local directory or fsspec URL of the dataset.
    storage_options
        fsspec options for ``path``.
    progress
        Show a progress bar over the tiles (and the obs shards).
    threads
        Tiles fetched and decoded at once (default: the usable CPUs).

    Returns
    -------
    ValidationReport
        ``report.ok`` is true when nothing is wrong; ``report.problems`` lists every problem found, each
        with the object at fault and a message. A dataset that cannot be read at all (no manifest, a
        manifest that is not JSON or not this format) gives one problem, not an exception.

    Examples
    --------
    >>> import deltacells
    >>> from deltacells.datasets import synthetic_counts
    >>> from deltacells.validate import validate_dataset
    >>> deltacells.write_deltacells(synthetic_counts(300, 100), "val.deltacells", progress=False, overwrite=True)
    >>> validate_dataset("val.deltacells").ok
    True
    """
    from deltacells._threads import default_threads

    url = os.fspath(path)
    report = ValidationReport(path=url)
    found = _Collector()
    try:
        store = Store(path, storage_options)
        expected = _check_manifest(store, found)
    except Exception as exc:  # a validator reports, it does not crash (e.g. a bad URL)
        found.add(MANIFEST_NAME, exc)
        expected = None
    if expected is not None:
        report.n_tiles, report.n_shards = expected.n_tiles, expected.n_shards
        _check_listing(store, expected, found)
        _check_sidecars(store, expected, found)
        n_threads = default_threads() if threads is None else max(1, int(threads))
        _check_tiles(store, expected, found, report, threads=n_threads, progress=progress)
        _check_obs(store, expected, found, report, progress=progress)
    report.problems = found.problems
    return report


# ---------------------------------------------------------------------- manifest


def _check_manifest(store: Store, found: _Collector) -> _Expected | None:
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
        found.add(MANIFEST_NAME, f"cannot be read ({_message(exc)})")
        return None
    try:
        doc = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        found.add(MANIFEST_NAME, f"not valid JSON ({exc})")
        return None
    try:
        return _Expected.from_manifest(Manifest.from_dict(doc, where=MANIFEST_NAME))
    except FormatError as exc:
        found.add(MANIFEST_NAME, exc)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME or doc.get("version") != FORMAT_VERSION:
        return None  # not this format: nothing else can be interpreted
    return _lenient_manifest(doc, found)


def _lenient_manifest(doc: dict[str, Any], found: _Collector) -> _Expected:
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
    flags = {name: get(_bool, flag) for name, flag in _SIDECAR_FLAGS.items()}
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

    expected = _Expected(n_genes=n_genes, tile_cells=tile_cells, tile_nnz=tile_nnz, tile_bytes=tile_bytes, flags=flags)
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


# ---------------------------------------------------------------------- files present


def _check_listing(store: Store, expected: _Expected, found: _Collector) -> None:
    """Files the manifest does not account for: tiles and shards beyond its counts, sidecars it denies."""
    root = _listdir(store, "")
    obs_dir = _listdir(store, "obs") if "obs" in root else set()
    for name, flag in _SIDECAR_FLAGS.items():
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
        for entry in sorted(_listdir(store, "tiles") if "tiles" in root else ()):
            match = _TILE_FILE.match(entry)
            if match and int(match.group(1)) >= n_tiles:
                found.add(f"tiles/{entry}", f"not listed in manifest.json ({n_tiles} tiles)")
    if expected.obs_shard_bytes is not None or not expected.flags.get("obs/schema.json", True):
        for entry in sorted(obs_dir):
            match = _SHARD_FILE.match(entry)
            if match and int(match.group(1)) >= n_shards:
                found.add(f"obs/{entry}", f"not listed in manifest.json ({n_shards} obs shards)")


def _listdir(store: Store, name: str) -> set[str]:
    try:
        return store.listdir(name)
    except Exception:  # listing is a courtesy; the reads below report what matters
        return set()


def _read(store: Store, name: str, found: _Collector) -> bytes | None:
    """The bytes of ``name``, or None after recording why they cannot be had."""
    try:
        return store.read(name)
    except FileNotFoundError:
        found.add(name, "missing")
    except Exception as exc:
        found.add(name, f"cannot be read ({_message(exc)})")
    return None


# ---------------------------------------------------------------------- sidecars


def _check_sidecars(store: Store, expected: _Expected, found: _Collector) -> None:
    n_genes = expected.n_genes
    if expected.flags.get("gene_order.npy") and _present(store, "gene_order.npy"):
        blob = _read(store, "gene_order.npy", found)
        if blob is not None:
            _check_gene_order(blob, n_genes, found)
    if expected.flags.get("var_names.txt") and _present(store, "var_names.txt"):
        blob = _read(store, "var_names.txt", found)
        if blob is not None:
            try:
                names = blob.decode("utf-8").split("\n")
            except UnicodeDecodeError as exc:
                found.add("var_names.txt", f"not UTF-8 text ({exc})")
            else:
                if names and names[-1] == "":
                    names.pop()
                if n_genes is not None and len(names) != n_genes:
                    found.add("var_names.txt", f"has {len(names)} lines (gene names) for n_genes = {n_genes}")
    if expected.flags.get("var.parquet") and _present(store, "var.parquet"):
        blob = _read(store, "var.parquet", found)
        if blob is not None:
            import pyarrow as pa
            import pyarrow.parquet as pq

            try:
                table = pq.read_table(pa.BufferReader(blob))
            except Exception as exc:  # anything pyarrow raises means unreadable
                found.add("var.parquet", f"not a readable parquet table ({_message(exc)})")
            else:
                if n_genes is not None and table.num_rows != n_genes:
                    found.add("var.parquet", f"has {table.num_rows} rows for n_genes = {n_genes}")


def _present(store: Store, name: str) -> bool:
    try:
        return store.exists(name)
    except Exception:
        return True  # let the read report it


def _check_gene_order(blob: bytes, n_genes: int | None, found: _Collector) -> None:
    name = "gene_order.npy"
    try:
        order = np.load(io.BytesIO(blob), allow_pickle=False)
    except Exception as exc:  # np.load raises many kinds for bad bytes
        found.add(name, f"not a readable .npy array ({_message(exc)})")
        return
    if order.dtype != np.dtype("<i4"):
        found.add(name, f"has dtype {order.dtype.str}, the format requires little-endian int32 (<i4)")
    if n_genes is None:
        return
    if order.shape != (n_genes,):
        found.add(name, f"has shape {order.shape}, expected ({n_genes},) (one entry per gene)")
    elif order.dtype.kind not in "iu" or not np.array_equal(np.sort(order), np.arange(n_genes)):
        found.add(name, f"is not a permutation of 0 .. {n_genes - 1}")


# ---------------------------------------------------------------------- tiles


@dataclass
class _TileResult:
    problems: list[tuple[str, str]]
    read: bool = False
    nnz: int = 0
    size: int = 0


def _check_tile(store: Store, tile: int, expected: _Expected) -> _TileResult:
    """Fetch, decode and compare one tile with the manifest (runs on a pool thread)."""
    from deltacells.codec import decode_tile

    name = tile_path(tile)
    result = _TileResult(problems=[])
    sink = _Collector()
    blob = _read(store, name, sink)
    if blob is not None:
        result.read, result.size = True, len(blob)
        if expected.tile_bytes is not None and len(blob) != expected.tile_bytes[tile]:
            sink.add(
                name,
                f"size is {len(blob)} bytes but manifest.json field tile_bytes[{tile}] says "
                f"{expected.tile_bytes[tile]}",
            )
        try:
            decoded = decode_tile(blob, name=name, threads=1)
        except Exception as exc:  # FormatError normally; anything else is reported too
            sink.add(name, exc)
        else:
            result.nnz = decoded.nnz
            checks = (
                ("tile_cells", f"[{tile}]", decoded.n_cells, expected.tile_cells),
                ("tile_nnz", f"[{tile}]", decoded.nnz, expected.tile_nnz),
            )
            for field_name, index, got, want in checks:
                if want is not None and got != want[tile]:
                    what = "cells" if field_name == "tile_cells" else "nonzeros"
                    sink.add(name, f"holds {got} {what} but manifest.json field {field_name}{index} says {want[tile]}")
            if expected.n_genes is not None and decoded.n_genes != expected.n_genes:
                sink.add(
                    name,
                    f"header field n_genes is {decoded.n_genes} but manifest.json field n_genes is {expected.n_genes}",
                )
    result.problems = [(p.object, p.message) for p in sink.problems]
    return result


def _check_tiles(
    store: Store, expected: _Expected, found: _Collector, report: ValidationReport, *, threads: int, progress: bool
) -> None:
    n_tiles = expected.n_tiles
    if not n_tiles:
        return
    from tqdm.auto import tqdm

    bar = tqdm(total=n_tiles, unit="tiles", desc="tiles", disable=not progress, dynamic_ncols=True)
    try:
        for result in _run_tiles(store, expected, threads):
            for obj, message in result.problems:
                found.add(obj, message)
            report.tiles_checked += result.read
            report.nnz_checked += result.nnz
            report.bytes_checked += result.size
            bar.update(1)
    finally:
        bar.close()


def _run_tiles(store: Store, expected: _Expected, threads: int) -> Iterator[_TileResult]:
    """Results in tile order, with at most a few tiles in flight per thread."""
    n_tiles = expected.n_tiles
    if threads <= 1:
        for tile in range(n_tiles):
            yield _check_tile(store, tile, expected)
        return
    window = 4 * threads
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="deltacells-validate") as pool:
        pending: list[Future[_TileResult]] = []
        next_tile = 0
        try:
            while next_tile < n_tiles or pending:
                while next_tile < n_tiles and len(pending) < window:
                    pending.append(pool.submit(_check_tile, store, next_tile, expected))
                    next_tile += 1
                yield pending.pop(0).result()
        finally:
            for future in pending:
                future.cancel()


# ---------------------------------------------------------------------- obs


def _check_obs(
    store: Store, expected: _Expected, found: _Collector, report: ValidationReport, *, progress: bool
) -> None:
    from deltacells.obs import SCHEMA_NAME, ObsSchema, obs_fingerprint

    if not expected.flags.get("obs/schema.json"):
        return
    schema = None
    if _present(store, SCHEMA_NAME):
        blob = _read(store, SCHEMA_NAME, found)
        if blob is not None:
            try:
                text = blob.decode("utf-8")
            except UnicodeDecodeError as exc:
                found.add(SCHEMA_NAME, f"not UTF-8 text ({exc})")
            else:
                try:
                    schema = ObsSchema.from_json(text, where=SCHEMA_NAME)
                except FormatError as exc:
                    found.add(SCHEMA_NAME, exc)
                if (
                    expected.obs_fingerprint is not None
                    and expected.tile_cells is not None
                    and expected.obs_shard_sha256 is not None
                ):
                    digest = obs_fingerprint(text, expected.tile_cells.tolist(), expected.obs_shard_sha256)
                    if digest != expected.obs_fingerprint:
                        found.add(
                            MANIFEST_NAME,
                            f"field obs_fingerprint is {expected.obs_fingerprint}, but obs/schema.json, tile_cells "
                            f"and obs_shard_sha256 hash to {digest}; the obs schema or these fields were changed "
                            "after writing",
                        )
    if not expected.n_shards:
        return
    from tqdm.auto import tqdm

    bar = tqdm(total=expected.n_shards, unit="shards", desc="obs shards", disable=not progress, dynamic_ncols=True)
    try:
        for shard in range(expected.n_shards):
            report.shards_checked += _check_shard(store, expected, schema, shard, found)
            bar.update(1)
    finally:
        bar.close()


def _check_shard(store: Store, expected: _Expected, schema: Any, shard: int, found: _Collector) -> bool:
    """Check one obs shard; return whether it could be read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = obs_shard_path(shard)
    blob = _read(store, name, found)
    if blob is None:
        return False
    assert expected.obs_shard_bytes is not None and expected.obs_shard_sha256 is not None
    if len(blob) != expected.obs_shard_bytes[shard]:
        found.add(
            name,
            f"size is {len(blob)} bytes but manifest.json field obs_shard_bytes[{shard}] says "
            f"{expected.obs_shard_bytes[shard]}",
        )
    digest = hashlib.sha256(blob).hexdigest()
    if digest != expected.obs_shard_sha256[shard]:
        found.add(
            name,
            f"SHA-256 is {digest} but manifest.json field obs_shard_sha256[{shard}] says "
            f"{expected.obs_shard_sha256[shard]}; the shard was modified or damaged",
        )
    try:
        parquet = pq.ParquetFile(pa.BufferReader(blob))
        metadata = parquet.metadata
        arrow_schema = parquet.schema_arrow
    except Exception as exc:  # anything pyarrow raises means unreadable
        found.add(name, f"not a readable parquet file ({_message(exc)})")
        return True

    layout_ok = True
    if schema is not None:
        if arrow_schema.names != schema.names:
            found.add(name, f"columns are {arrow_schema.names}, but obs/schema.json lists {schema.names}")
            layout_ok = False
        for column in schema.columns:
            if column.name in arrow_schema.names:
                got = arrow_schema.field(column.name).type
                if got != column.pa_type:
                    found.add(
                        name,
                        f"column {column.name!r} has Arrow type {got}, but obs/schema.json says {column.arrow_type}",
                    )
                    layout_ok = False

    per_file = expected.obs_tiles_per_file or 1
    tiles = range(shard * per_file, min((shard + 1) * per_file, expected.n_tiles))
    if metadata.num_row_groups != len(tiles):
        found.add(
            name,
            f"has {metadata.num_row_groups} row groups, expected {len(tiles)} (one per tile, tiles "
            f"{tiles.start} .. {tiles.stop - 1})",
        )
    for group in range(min(metadata.num_row_groups, len(tiles))):
        tile = tiles[group]
        rows = metadata.row_group(group).num_rows
        if expected.tile_cells is not None and rows != expected.tile_cells[tile]:
            found.add(
                name,
                f"row group {group} (tile {tile}) has {rows} rows, but manifest.json field "
                f"tile_cells[{tile}] is {int(expected.tile_cells[tile])}",
            )
        _check_row_group(parquet, group, tile, schema if layout_ok else None, name, found)
    return True


def _check_row_group(parquet: Any, group: int, tile: int, schema: Any, name: str, found: _Collector) -> None:
    """Read one row group whole; check its category codes against the vocabularies."""
    from deltacells.obs._decode import check_codes

    try:
        table = parquet.read_row_group(group, use_threads=False)
    except Exception as exc:  # anything pyarrow raises means unreadable
        found.add(name, f"row group {group} (tile {tile}) cannot be read ({_message(exc)})")
        return
    if schema is None:
        return
    for column in schema.columns:
        if column.kind != "category":
            continue
        try:
            check_codes(column, table.column(column.name), f"{name} row group {group} (tile {tile})")
        except FormatError as exc:
            found.add(name, exc)
