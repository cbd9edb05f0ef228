"""``deltacells validate``: fetch, decode and check every object of a dataset; list every problem."""

from __future__ import annotations

import json

import click

from deltacells._numbers import format_size, parse_age
from deltacells.cli._options import parse_storage_options, storage_option


@click.command(short_help="Fetch, decode and check every object of a dataset.")
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@click.option(
    "-j", "--jobs", type=click.IntRange(min=1), default=None, help="Tiles checked at once (default: the usable CPUs)."
)
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@click.option(
    "--remove-staging",
    is_flag=True,
    help="First remove what killed writers left at the root (staging prefixes no commit names) that is "
    "older than --older-than.",
)
@click.option(
    "--older-than",
    "older_than",
    default="1d",
    show_default=True,
    metavar="AGE",
    help="With --remove-staging: how long ago a prefix's newest object must have been written, in seconds, or "
    "with m, h or d after the number for minutes, hours or days. "
    "A live writer writes to its prefix until it commits; 0 removes every one, only safe when no writer runs.",
)
@storage_option("PATH")
@click.pass_context
def validate(
    ctx: click.Context,
    path: str,
    as_json: bool,
    jobs: int | None,
    quiet: bool,
    remove_staging: bool,
    older_than: str,
    storage_options: str | None,
) -> None:
    """Check every object of the dataset at PATH; list every problem found.

    Every tile is fetched and decoded (CRC-32 and every rule of the format) and compared with the
    manifest; obs shards are checked against their sizes and SHA-256s, the schema and the tiles; the
    obs fingerprint is recomputed; gene order and var files are checked against n_genes. The exit
    status is 0 when nothing is wrong, 1 otherwise.

    What killed writers left at the root (staging prefixes of appends or overwrites that no commit
    names) is listed with its age; it is not a problem of the dataset, and --remove-staging removes
    it (on a local disk the next writer does too).
    """
    from deltacells.validate import remove_staging as remove
    from deltacells.validate import validate_dataset

    options = parse_storage_options(storage_options)
    removed = []
    if remove_staging:
        try:
            age = parse_age(older_than)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--older-than") from exc
        removed = remove(path, older_than=age, storage_options=options)
    report = validate_dataset(path, storage_options=options, progress=not (quiet or as_json), threads=jobs)
    if as_json:
        click.echo(json.dumps({**report.to_dict(), "removed_staging": [s.to_dict() for s in removed]}, indent=2))
        ctx.exit(0 if report.ok else 1)
    for stale in removed:
        click.echo(f"removed {stale.describe()}")
    for stale in report.staging:
        click.echo(
            f"note: not part of the dataset: {stale.describe()}, left by a writer killed before it committed "
            f"(or running now); remove with `deltacells validate {path} --remove-staging [--older-than AGE]`",
            err=True,
        )
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
