"""The demo's reading: open lazily, warm up, read all of X, read subsets of cells; each checked."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from deltacells._kernel_loading import load_compiled_kernels
from deltacells.core import Dataset
from deltacells.demo._clock import Stopwatch
from deltacells.demo._compare import same_frame, same_matrix
from deltacells.demo._report import FullRead, Opened, SubsetRead, WarmUp
from deltacells.io import TiledCSRDataset, read_deltacells

if TYPE_CHECKING:
    from pathlib import Path

    import anndata as ad
    import pandas as pd

__all__ = ["choose_subsets", "open_lazily", "read_all", "read_subset", "warm_up"]


def _lazy_x(back: ad.AnnData) -> tuple[TiledCSRDataset, Dataset]:
    """``back.X``, the lazy matrix of a dataset opened by :func:`open_lazily`, and its dataset."""
    x = back.X
    assert isinstance(x, TiledCSRDataset) and isinstance(x.dataset, Dataset)  # one path, no chunks=
    return x, x.dataset


def _in_memory_frame(frame: object) -> pd.DataFrame:
    """``frame`` (an AnnData's obs or var), which the demo's AnnData hold in memory, as a pandas DataFrame."""
    import pandas as pd

    assert isinstance(frame, pd.DataFrame)  # a lazy obs comes only with lazy_obs=True
    return frame


def open_lazily(path: Path, *, cache_dir: Path, threads: int | None) -> tuple[ad.AnnData, Opened]:
    """Open the dataset with :func:`~deltacells.read_deltacells`: X lazy, no tile cache, obs localized.

    Returns
    -------
    tuple
        The AnnData (its ``X.dataset`` counts the tiles decoded), and what opening it took.
    """
    with Stopwatch() as watch:
        back = read_deltacells(path, cache_dir=cache_dir, tile_cache_bytes=0, threads=threads)
    opened = Opened(
        n_obs=back.n_obs,
        n_vars=back.n_vars,
        tiles_decoded=_lazy_x(back)[1].tiles_decoded,
        cache_dir=str(cache_dir),
        seconds=watch.seconds,
    )
    return back, opened


def warm_up(back: ad.AnnData) -> WarmUp:
    """Read a cell, a few scattered cells in reverse order, and one whole tile; wait for the compiled kernels.

    numba's kernels load on a background thread from the open on (compiled, the first time on a machine), and
    reads run numpy versions of them until then; the timings of the reads that follow are those of the compiled
    kernels, loaded for every way of reading (each way of gathering rows has its own, and a range of whole tiles
    decodes straight into its output with another).
    """
    n = back.n_obs
    x, dataset = _lazy_x(back)
    with Stopwatch() as watch:
        x[0]
        x[np.arange(0, n, max(1, n // 16))[::-1]]
        x[: int(dataset.manifest.tile_cells[0])]
        load_compiled_kernels()
        x[np.arange(0, n, max(1, n // 16))[::-1]]
        x[: int(dataset.manifest.tile_cells[0])]
    return WarmUp(seconds=watch.seconds)


def read_all(back: ad.AnnData, source: ad.AnnData, expected_x: Any) -> FullRead:
    """Read all of X (twice, to time a repeat) and compare X, obs and var with the source.

    Parameters
    ----------
    back
        The dataset read back lazily.
    source
        The AnnData that was written.
    expected_x
        The source's X (genes in its own order, as they are read back).
    """
    x, lazy = _lazy_x(back)
    before = lazy.tiles_decoded
    with Stopwatch() as first:
        full = x[:]
    tiles_decoded = lazy.tiles_decoded - before
    with Stopwatch() as again:
        x[:]
    return FullRead(
        nnz=int(full.nnz),
        tiles_decoded=tiles_decoded,
        seconds=first.seconds,
        seconds_again=again.seconds,
        same_x=same_matrix(full, expected_x),
        same_obs=same_frame(_in_memory_frame(back.obs), _in_memory_frame(source.obs)),
        same_var=same_frame(_in_memory_frame(back.var), _in_memory_frame(source.var)),
    )


def choose_subsets(back: ad.AnnData, *, tile_size: int, seed: int) -> list[tuple[str, Any]]:
    """Three subsets of cells, as ``(label, index)``: the commonest cell type, a random 1%, consecutive cells."""
    n_cells = back.n_obs
    cell_type = back.obs["cell_type"].value_counts().index[0]
    mask = (back.obs["cell_type"] == cell_type).to_numpy()
    rng = np.random.default_rng(seed)
    sample = np.sort(rng.choice(n_cells, size=max(1, n_cells // 100), replace=False))
    run = min(1000, tile_size, n_cells)
    return [
        (f"cell_type == {cell_type!r}", mask),
        ("a random 1% sample", sample),
        (f"cells 0:{run:,} (consecutive)", slice(0, run)),
    ]


def read_subset(back: ad.AnnData, label: str, index: Any, expected_x: Any) -> tuple[ad.AnnData, SubsetRead]:
    """Read the cells ``index`` into memory, counting the tiles decoded, and compare X with the source.

    Returns
    -------
    tuple
        The subset in memory, and what reading it took.
    """
    lazy = _lazy_x(back)[1]
    before = lazy.tiles_decoded
    with Stopwatch() as watch:
        sub = back[index].to_memory()
    read = SubsetRead(
        label=label,
        n_cells=sub.n_obs,
        tiles_decoded=lazy.tiles_decoded - before,
        n_tiles=lazy.n_tiles,
        seconds=watch.seconds,
        identical=same_matrix(sub.X, expected_x[index]),
    )
    return sub, read
