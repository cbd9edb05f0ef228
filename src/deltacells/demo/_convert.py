"""The demo's conversion: :func:`~deltacells.write_deltacells`, and what the dataset weighs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from deltacells._threads import default_threads
from deltacells.core import open_dataset, sidecar_bytes
from deltacells.demo._clock import Stopwatch
from deltacells.demo._report import Converted
from deltacells.io import write_deltacells

if TYPE_CHECKING:
    from pathlib import Path

    import anndata as ad

__all__ = ["convert"]


def convert(
    adata: ad.AnnData,
    path: Path,
    *,
    tile_size: int,
    level: int,
    threads: int | None,
    overwrite: bool,
    metadata: dict[str, Any],
) -> Converted:
    """Write ``adata`` as a dataset at ``path`` (genes by decreasing totals) and measure it."""
    with Stopwatch() as watch:
        write_deltacells(
            adata,
            path,
            tile_size=tile_size,
            level=level,
            metadata=metadata,
            overwrite=overwrite,
            threads=threads,
            progress=False,
        )
    dataset = open_dataset(path)
    m = dataset.manifest
    tile_bytes = int(m.tile_bytes.sum())
    return Converted(
        path=str(path),
        n_tiles=m.n_tiles,
        tile_size=m.tile_size,
        level=level,
        threads=default_threads() if threads is None else threads,
        total_bytes=tile_bytes + int(sum(m.obs_shard_bytes)) + sidecar_bytes(dataset),
        tile_bytes=tile_bytes,
        seconds=watch.seconds,
    )
