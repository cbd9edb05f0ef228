"""The demo's comparison of whole reads: the same result both ways, warmed up, taken in turn, best of several.

Both sides make what an analysis starts from, an in-memory AnnData with X, obs and var:
``read_deltacells(path).to_memory()`` against ``anndata.read_h5ad`` of the same AnnData written as a gzip h5ad.
Each is run once untimed first (the files in the page cache, the kernels and libraries loaded), then the two are
timed in turn, ``rounds`` times (A B A B...), so that a burst of other work on the machine slows both alike,
and the best time of each is kept: the least disturbed one. How much of a CPU the h5ad read had (it runs on one
thread: CPU time over wall time, near 1 on an idle machine) is recorded beside them, since timings taken while
other work runs are noisy, and more so for the dataset's reads, which want every CPU.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from deltacells._threads import default_threads
from deltacells.demo._clock import Stopwatch
from deltacells.demo._report import ReadComparison
from deltacells.io import read_deltacells

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["DEFAULT_ROUNDS", "compare_whole_reads"]

#: Timed rounds of each read (after one untimed call of each).
DEFAULT_ROUNDS = 5


def compare_whole_reads(
    path: Path, h5ad: Path, *, cache_dir: Path, threads: int | None, rounds: int = DEFAULT_ROUNDS
) -> ReadComparison:
    """Time a whole read into memory of the dataset at ``path`` and of the gzip h5ad ``h5ad``, in turn.

    Parameters
    ----------
    path
        The dataset (its obs already localized into ``cache_dir``).
    h5ad
        The same AnnData as a gzip h5ad.
    cache_dir
        The dataset's obs cache.
    threads
        Threads decoding the tiles (default: the usable CPUs).
    rounds
        Timed rounds of each read.

    Returns
    -------
    ReadComparison
        The best time of each, the rounds, the threads and usable CPUs, and the share of a CPU the h5ad read had.
    """
    import anndata

    def ours() -> None:
        read_deltacells(path, cache_dir=cache_dir, threads=threads).to_memory()

    def theirs() -> None:
        anndata.read_h5ad(h5ad)

    ours()  # untimed: the files in the page cache, everything each read needs loaded
    theirs()
    best = {"deltacells": float("inf"), "h5ad": float("inf")}
    h5ad_cpu = h5ad_wall = 0.0
    for _ in range(rounds):
        for name, read in (("deltacells", ours), ("h5ad", theirs)):
            cpu = time.process_time()
            with Stopwatch() as watch:
                read()
            best[name] = min(best[name], watch.seconds)
            if name == "h5ad":
                h5ad_cpu += time.process_time() - cpu
                h5ad_wall += watch.seconds
    return ReadComparison(
        rounds=rounds,
        deltacells_seconds=best["deltacells"],
        h5ad_seconds=best["h5ad"],
        threads=default_threads() if threads is None else threads,
        usable_cpus=_usable_cpus(),
        h5ad_cpu_share=h5ad_cpu / h5ad_wall if h5ad_wall > 0 else 1.0,
    )


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1
