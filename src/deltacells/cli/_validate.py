"""``deltacells validate``: fetch, decode and check every object of a dataset; list every problem."""

from __future__ import annotations

import json

import click

from deltacells.cli._format import format_size
from deltacells.cli._options import parse_storage_options, storage_option


@click.command(short_help="Fetch, decode and check every object of a dataset.")
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@click.option(
    "-j", "--jobs", type=click.IntRange(min=1), default=None, help="Tiles checked at once (default: the usable CPUs)."
)
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@storage_option("PATH")
@click.pass_context
def validate(
    ctx: click.Context, path: str, as_json: bool, jobs: int | None, quiet: bool, storage_options: str | None
) -> None:
    """Check every object of the dataset at PATH; list every problem found.

    Every tile is fetched and decoded (CRC-32 and every rule of the format) and compared with the
    manifest; obs shards are checked against their sizes and SHA-256s, the schema and the tiles; the
    obs fingerprint is recomputed; gene order and var files are checked against n_genes. The exit
    status is 0 when nothing is wrong, 1 otherwise.
    """
    from deltacells.validate import validate_dataset

    report = validate_dataset(
        path, storage_options=parse_storage_options(storage_options), progress=not (quiet or as_json), threads=jobs
    )
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
        ctx.exit(0 if report.ok else 1)
    checked = (
        f"{report.tiles_checked:,} of {report.n_tiles:,} tiles ({report.nnz_checked:,} nonzeros, "
        f"{format_size(report.bytes_checked)}) and {report.shards_checked:,} of {report.n_shards:,} obs shards checked"
    )
    if report.ok:
        click.echo(f"ok: {path}: {checked}, no problems")
        return
    n = len(report.problems)
    click.echo(f"{path}: {checked}; {n} problem{'s' if n != 1 else ''}:")
    for problem in report.problems:
        click.echo(f"  {problem}")
    click.echo(f"error: {path} is not a valid deltacells dataset ({n} problem{'s' if n != 1 else ''})", err=True)
    ctx.exit(1)
