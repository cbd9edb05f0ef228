"""The tiles: each one fetched and decoded on a pool thread with every rule checked, in tile order."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from deltacells.format import ManifestFields, Problem, collect, decode_checked_tile, missing_tile, tile_path
from deltacells.validate._report import Collector

if TYPE_CHECKING:
    from deltacells.storage import BaseStore
    from deltacells.validate._report import ValidationReport


@dataclass
class _TileResult:
    problems: list[Problem] = field(default_factory=list)
    read: bool = False
    nnz: int = 0
    size: int = 0


def _check_tile(store: BaseStore, tile: int, fields: ManifestFields) -> _TileResult:
    """Fetch, decode and check one tile against the manifest (runs on a pool thread)."""
    sink = Collector()
    result = _TileResult()
    try:
        blob = store.read(tile_path(tile))
    except FileNotFoundError:
        sink(missing_tile(tile, fields))
        blob = None
    except Exception as exc:  # a validator reports, it does not crash
        sink.add(tile_path(tile), exc)
        blob = None
    if blob is not None:
        result.read, result.size = True, len(blob)
        decoded = collect(decode_checked_tile(blob, tile, fields, url=store.url, threads=1), sink)
        if decoded is not None:
            result.nnz = decoded.nnz
        elif fields.tile_nnz is not None:
            result.nnz = int(fields.tile_nnz[tile])  # what the manifest says the damaged tile holds
    elif fields.tile_nnz is not None:
        result.nnz = int(fields.tile_nnz[tile])
    result.problems = sink.problems
    return result


def check_tiles(
    store: BaseStore, fields: ManifestFields, found: Collector, report: ValidationReport, *, threads: int,
    progress: bool,
) -> None:  # fmt: skip
    """Fetch, decode and check every tile (``threads`` at once); count what was checked in ``report``."""
    n_tiles = fields.n_tiles
    if not n_tiles:
        return
    from tqdm.auto import tqdm

    bar = tqdm(total=n_tiles, unit="tiles", desc="tiles", disable=not progress, dynamic_ncols=True)
    try:
        for result in _run_tiles(store, fields, threads):
            for problem in result.problems:
                found(problem)
            report.tiles_checked += result.read
            report.nnz_checked += result.nnz
            report.bytes_checked += result.size
            bar.update(1)
    finally:
        bar.close()


def _run_tiles(store: BaseStore, fields: ManifestFields, threads: int) -> Iterator[_TileResult]:
    """Results in tile order, with at most a few tiles in flight per thread."""
    n_tiles = fields.n_tiles
    if threads <= 1:
        for tile in range(n_tiles):
            yield _check_tile(store, tile, fields)
        return
    window = 4 * threads
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="deltacells-validate") as pool:
        pending: list[Future[_TileResult]] = []
        next_tile = 0
        try:
            while next_tile < n_tiles or pending:
                while next_tile < n_tiles and len(pending) < window:
                    pending.append(pool.submit(_check_tile, store, next_tile, fields))
                    next_tile += 1
                yield pending.pop(0).result()
        finally:
            for future in pending:
                future.cancel()
