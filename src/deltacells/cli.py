"""The ``deltacells`` command line."""

from __future__ import annotations

from pathlib import Path

import click

from deltacells import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="deltacells")
def main() -> None:
    """Store, inspect and read single-cell count matrices as deltacells datasets."""


@main.command()
@click.option("--cells", "n_cells", default=10_000, show_default=True, help="Cells to generate.")
@click.option("--genes", "n_genes", default=6_000, show_default=True, help="Genes to generate.")
@click.option("--tile-size", default=2048, show_default=True, help="Cells per tile.")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Keep the dataset here (default: a temporary directory).",
)
@click.option("--seed", default=0, show_default=True, help="Seed of the generator.")
def demo(n_cells: int, n_genes: int, tile_size: int, out: Path | None, seed: int) -> None:
    """Generate a realistic count matrix, write it as a dataset, read it back and report."""
    from deltacells._demo import run_demo

    run_demo(n_cells=n_cells, n_genes=n_genes, tile_size=tile_size, out=out, seed=seed, echo=click.echo)


if __name__ == "__main__":  # pragma: no cover
    main()
