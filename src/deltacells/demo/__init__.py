"""The end-to-end demo behind ``deltacells demo``: the package's main job, on generated data.

Generate a realistic count matrix (with obs and var), convert it with :func:`~deltacells.write_deltacells`,
read it back lazily with :func:`~deltacells.read_deltacells`, check that it is identical to the source,
subset cells (by an obs category, a random 1% sample, a run of consecutive cells) counting the tiles
decoded, run a short scanpy pipeline on one subset, and measure sizes and speeds.

:func:`run_demo` runs the steps and returns a :class:`DemoReport` of what they measured; it prints
nothing. :func:`format_report` turns a report into the lines ``deltacells demo`` prints.

One module per job: the steps, each returning its measurements, in ``_generate`` (the AnnData and its
gzip h5ad), ``_convert`` (writing the dataset), ``_read`` (reading it back: all of it, then subsets),
``_head_to_head`` (the whole read into memory against the gzip h5ad's, fairly) and ``_scanpy`` (the analysis);
``_report`` (the dataclasses of measurements), ``_compare`` (equality of matrices and frames), ``_clock``
(timing), ``_run`` (:func:`run_demo`), ``_format`` (:func:`format_report`).

The speeds it prints are the machine's and the generated data's: the one against the gzip h5ad is measured
fairly (the same AnnData made in memory both ways, warmed up, in turn, best of several), but other data give
other ratios (the documentation's come from ``benchmarks/bench_decode.py`` on a 10x Visium matrix).
"""

from __future__ import annotations

from deltacells.demo._format import format_report
from deltacells.demo._report import (
    Converted,
    DemoReport,
    FullRead,
    Generated,
    H5adWritten,
    Opened,
    ReadComparison,
    ScanpyRun,
    SubsetRead,
    WarmUp,
)
from deltacells.demo._run import run_demo
from deltacells.errors import DemoMismatchError

__all__ = [
    "DemoMismatchError",
    "DemoReport",
    "format_report",
    "run_demo",
    # the measurements of each step
    "Converted",
    "FullRead",
    "Generated",
    "H5adWritten",
    "Opened",
    "ReadComparison",
    "ScanpyRun",
    "SubsetRead",
    "WarmUp",
]
