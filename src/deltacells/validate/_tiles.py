"""The tiles: each one fetched and decoded on a pool thread, and compared with the manifest."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from deltacells.dataset._manifest import tile_path
from deltacells.storage import Store
from deltacells.validate._access import read_object
from deltacells.validate._manifest import Expected
from deltacells.validate._report import Collector, ValidationReport


@dataclass
class _TileResult:
    problems: list[tuple[str, str]]
    read: bool = False
    nnz: int = 0
    size: int = 0


def _check_tile(store: Store, tile: int, expected: Expected) -> _TileResult:
    """Fetch, decode and compare one tile with the manifest (runs on a pool thread)."""
    from deltacells.codec import decode_tile

    name = tile_path(tile)
    result = _TileResult(problems=[])
    sink = Collector()
    blob = read_object(store, name, sink)
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


def check_tiles(
    store: Store, expected: Expected, found: Collector, report: ValidationReport, *, threads: int, progress: bool
) -> None:
    """Fetch, decode and check every tile (``threads`` at once); count what was checked in ``report``."""
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


def _run_tiles(store: Store, expected: Expected, threads: int) -> Iterator[_TileResult]:
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
