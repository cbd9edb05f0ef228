"""``format_report``: a demo report as the lines ``deltacells demo`` prints."""

from __future__ import annotations

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

__all__ = ["format_report"]


def format_report(report: DemoReport) -> list[str]:
    """The lines that describe ``report`` to a person, one or more per step, then a summary.

    Each line starts with the step's name in a column of 12 characters (``generated``, ``h5ad``,
    ``wrote``, ``opened``, ``warm-up``, ``read all``, ``vs h5ad``, ``subset``, ``scanpy``, ``summary``, ``note``), or
    with spaces where a step goes on.

    Parameters
    ----------
    report
        What :func:`~deltacells.demo.run_demo` measured.

    Returns
    -------
    list of str
        The lines, without line breaks.
    """
    return [
        _generated(report.generated),
        _h5ad(report.h5ad),
        _converted(report.converted, report),
        _opened(report.opened),
        _warm_up(report.warm_up),
        _full_read(report.full_read),
        *_comparison(report.comparison),
        *(_subset(s) for s in report.subsets),
        *_scanpy(report.scanpy),
        _summary(report),
        _note(),
    ]


def _generated(g: Generated) -> str:
    return (
        f"generated   {g.n_cells:,} cells x {g.n_genes:,} genes, {g.nnz:,} nonzeros ({100 * g.density:.1f}% dense), "
        f"obs {list(g.obs_columns)}, var {list(g.var_columns)} ({g.seconds:.1f} s)"
    )


def _h5ad(h: H5adWritten) -> str:
    return f"h5ad        the same AnnData as h5ad (gzip): {_mb(h.bytes)} ({h.seconds:.1f} s to write)"


def _converted(c: Converted, report: DemoReport) -> str:
    return (
        f"wrote       {c.path} with write_deltacells: {c.n_tiles} tiles of {c.tile_size:,} cells, zstd level "
        f"{c.level}, {c.threads} thread{'s' if c.threads != 1 else ''}; {_mb(c.total_bytes)} in all (tiles "
        f"{_mb(c.tile_bytes)}, {report.bytes_per_nonzero:.2f} bytes per nonzero); {c.seconds:.1f} s, "
        f"{report.write_cells_per_s:,.0f} cells/s"
    )


def _opened(o: Opened) -> str:
    return (
        f"opened      read_deltacells: {o.n_obs:,} x {o.n_vars:,} AnnData, X lazy ({o.tiles_decoded} tiles "
        f"decoded), obs localized into {o.cache_dir} ({_ms(o.seconds)})"
    )


def _warm_up(w: WarmUp) -> str:
    return (
        f"warm-up     first reads (numpy's versions of the kernels while numba's load in the background), then the "
        f"compiled decoding kernels loaded: {_ms(w.seconds)} (once a process, left out of the timings below)"
    )


def _full_read(r: FullRead) -> str:
    return (
        f"read all    X[:] of the lazy AnnData: {r.tiles_decoded} tiles decoded in "
        f"{_ms(r.seconds)} ({_mega(r.nnz / r.seconds)} M nonzeros/s; "
        f"{_ms(r.seconds_again)}, {_mega(r.nnz / r.seconds_again)} M/s when repeated); "
        f"identical to the source: {r.identical} (X {r.same_x}, obs {r.same_obs}, var {r.same_var})"
    )


def _comparison(c: ReadComparison) -> list[str]:
    threads = f"{c.threads} thread{'s' if c.threads != 1 else ''}"
    quiet = (
        f"the h5ad reads had {c.h5ad_cpu_share:.0%} of a CPU: other work took the machine's CPUs meanwhile, so these "
        "timings are noisy (run the demo again on a quiet machine)"
        if c.busy
        else f"the h5ad reads had {c.h5ad_cpu_share:.0%} of a CPU: nothing else slowed them"
    )
    return [
        f"vs h5ad     the whole AnnData into memory (X, obs and var), each read once untimed, then {c.rounds} times "
        "each in turn, best time kept:",
        f"              read_deltacells(path).to_memory()    {_ms(c.deltacells_seconds)} ({threads}, "
        f"{c.usable_cpus} usable CPU{'s' if c.usable_cpus != 1 else ''})",
        f"              anndata.read_h5ad(gzip h5ad)         {_ms(c.h5ad_seconds)} (one thread): deltacells "
        f"{c.speedup:.2f}x as fast",
        f"              {quiet}",
    ]


def _subset(s: SubsetRead) -> str:
    return (
        f"subset      {s.label}: {s.n_cells:,} cells from {s.tiles_decoded} of {s.n_tiles} tiles in "
        f"{_ms(s.seconds)}; identical: {s.identical}"
    )


def _scanpy(s: ScanpyRun) -> list[str]:
    t = s.seconds
    return [
        f"scanpy      on the subset {s.label} ({s.n_cells:,} cells x {s.n_genes:,} genes, from to_memory()); "
        f"warm-up on a few cells first, for scanpy's own first-call compilation: {s.warm_up_seconds:.1f} s",
        f"              calculate_qc_metrics   median per cell: {s.median_counts:,.0f} counts, "
        f"{s.median_genes:,.0f} genes, {s.median_pct_mito:.1f}% mitochondrial ({_ms(t['calculate_qc_metrics'])})",
        f"              normalize_total, log1p ({_ms(t['normalize_total+log1p'])})",
        f"              highly_variable_genes  {s.n_highly_variable:,} genes ({_ms(t['highly_variable_genes'])})",
        f"              pca                    {s.n_comps} components, {100 * s.explained_variance:.1f}% of the "
        f"variance of the highly variable genes ({_ms(t['pca'])})",
    ]


def _summary(report: DemoReport) -> str:
    c, h, g = report.converted, report.h5ad, report.generated
    return (
        f"summary     on these generated counts ({g.n_cells:,} cells x {g.n_genes:,} genes, {100 * g.density:.1f}% "
        f"nonzero): {report.bytes_per_nonzero:.2f} bytes per nonzero; {_mb(c.total_bytes)} against {_mb(h.bytes)} "
        f"as gzip h5ad ({report.ratio_vs_h5ad:.1f}x smaller); write {report.write_cells_per_s:,.0f} cells/s (zstd "
        f"level {c.level}); the whole AnnData into memory {report.comparison.speedup:.2f}x as fast as from the gzip "
        f"h5ad (best of {report.comparison.rounds})"
    )


def _note() -> str:
    return (
        "note        sizes and speeds depend on the data and the machine: the documentation's figures come from "
        "benchmarks/bench_decode.py on a real 10x Visium matrix (and cells resampled from it), on the machine its "
        "performance page describes; other data, other ratios"
    )


def _mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms"


def _mega(per_second: float) -> str:
    return f"{per_second / 1e6:,.0f}"
