"""``format_report``: a demo report as the lines ``deltacells demo`` prints."""

from __future__ import annotations

from deltacells.demo._report import (
    Converted,
    DemoReport,
    FullRead,
    Generated,
    H5adWritten,
    Opened,
    ScanpyRun,
    SubsetRead,
    WarmUp,
)

__all__ = ["format_report"]


def format_report(report: DemoReport) -> list[str]:
    """The lines that describe ``report`` to a person, one or more per step, then a summary.

    Each line starts with the step's name in a column of 12 characters (``generated``, ``h5ad``,
    ``wrote``, ``opened``, ``warm-up``, ``read all``, ``subset``, ``scanpy``, ``summary``).

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
        *(_subset(s) for s in report.subsets),
        *_scanpy(report.scanpy),
        _summary(report),
    ]


def _generated(g: Generated) -> str:
    return (
        f"generated   {g.n_cells:,} cells x {g.n_genes:,} genes, {g.nnz:,} nonzeros ({100 * g.density:.1f}% dense), "
        f"obs {list(g.obs_columns)}, var {list(g.var_columns)} ({g.seconds:.1f} s)"
    )


def _h5ad(h: H5adWritten) -> str:
    return (
        f"h5ad        the same AnnData as h5ad (gzip): {_mb(h.bytes)} ({h.seconds:.1f} s to write, "
        f"{h.read_seconds * 1000:.0f} ms to read whole with anndata.read_h5ad)"
    )


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
        f"read all    {r.tiles_decoded} tiles decoded in {_ms(r.seconds)} ({_mega(r.nnz / r.seconds)} M nonzeros/s; "
        f"{_ms(r.seconds_again)}, {_mega(r.nnz / r.seconds_again)} M/s when repeated); "
        f"identical to the source: {r.identical} (X {r.same_x}, obs {r.same_obs}, var {r.same_var})"
    )


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
    c, h = report.converted, report.h5ad
    return (
        f"summary     {report.bytes_per_nonzero:.2f} bytes per nonzero; {_mb(c.total_bytes)} against "
        f"{_mb(h.bytes)} as gzip h5ad ({report.ratio_vs_h5ad:.1f}x smaller); write "
        f"{report.write_cells_per_s:,.0f} cells/s (zstd level {c.level}); full read "
        f"{_mega(report.read_nnz_per_s)} M nonzeros/s (after the warm-up): {report.full_read.seconds * 1000:.0f} ms, "
        f"against {h.read_seconds * 1000:.0f} ms for anndata.read_h5ad of the gzip h5ad (which also reads obs and var)"
    )


def _mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms"


def _mega(per_second: float) -> str:
    return f"{per_second / 1e6:,.0f}"
