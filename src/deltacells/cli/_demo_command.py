"""``deltacells demo``: generate data, convert, read back, subset, run scanpy, and report."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from deltacells import _kernel_loading
from deltacells.cli._errors import CLIError, on_interrupt
from deltacells.cli._options import level_option


@click.command(short_help="Generate data, convert, read back, subset, run scanpy; report.")
@click.option("--cells", "n_cells", type=click.IntRange(min=1), default=10_000, show_default=True, help="Cells.")
@click.option("--genes", "n_genes", type=click.IntRange(min=20), default=6_000, show_default=True, help="Genes.")
@click.option("--tile-size", type=click.IntRange(min=1), default=2048, show_default=True, help="Cells per tile.")
@level_option()
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Keep the dataset here, with its obs cache beside it (default: a temporary directory, removed).",
)
@click.option("--seed", default=0, show_default=True, help="Seed of the generator.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Threads (default: the usable CPUs).")
def demo(n_cells: int, n_genes: int, tile_size: int, level: int, out: Path | None, seed: int, jobs: int | None) -> None:
    """Generate realistic counts, convert them, read them back lazily, subset, run scanpy, and report.

    The report gives the size (bytes per nonzero, and against the same AnnData as a gzip h5ad), the
    writing speed, the full-read speed, the tiles decoded by each subset, and what a short scanpy
    pipeline (QC metrics, normalisation, log1p, highly variable genes, PCA) found on one subset. The
    data read back is checked to be identical to what was generated. The report is printed at the end;
    a progress bar of the steps is shown meanwhile on stderr when it is a terminal.
    """
    from deltacells.demo import DemoMismatchError, format_report, run_demo

    if _kernel_loading.kernels_to_compile():  # said before the wait, not after it
        click.echo(
            "note: the first run on this machine compiles deltacells' decoding kernels first (once: later runs, "
            "of the demo or of anything else, load them from numba's cache)",
            err=True,
        )
    on_interrupt(
        "nothing is kept (its temporary directory is removed)"
        if out is None
        else f"{out} holds a complete dataset or none (a write is all or nothing); its temporary files are removed"
    )
    try:
        report = run_demo(
            n_cells=n_cells,
            n_genes=n_genes,
            tile_size=tile_size,
            level=level,
            out=out,
            seed=seed,
            threads=jobs,
            progress=sys.stderr.isatty(),
        )
    except DemoMismatchError as exc:
        raise CLIError(str(exc)) from exc
    for line in format_report(report):
        click.echo(line)
