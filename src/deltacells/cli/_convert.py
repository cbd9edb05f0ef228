"""``deltacells convert``: an h5ad, zarr, 10x h5/mtx, loom or deltacells input to a dataset, with a summary."""

from __future__ import annotations

import contextlib
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from deltacells._numbers import format_size, plural
from deltacells._version import __version__
from deltacells.cli._errors import CLIError, error_message, is_user_error, on_interrupt
from deltacells.cli._inputs import INPUT_FORMATS, detect_format, read_input
from deltacells.cli._options import io_concurrency_option, level_option, parse_storage_options, storage_option
from deltacells.codec import DEFAULT_N_CHUNKS
from deltacells.format import MANIFEST_NAME

if TYPE_CHECKING:
    from deltacells.core import Dataset


@click.command(short_help="Convert h5ad, zarr, 10x h5/mtx or loom to a dataset.")
@click.argument("source", metavar="IN", type=click.Path(path_type=Path))
@click.argument("out", metavar="OUT")
@click.option(
    "--format",
    "input_format",
    type=click.Choice(INPUT_FORMATS),
    default="auto",
    show_default=True,
    help="Format of IN (auto: from its name and contents).",
)
@click.option("--tile-size", type=click.IntRange(min=1), default=2048, show_default=True, help="Cells per tile.")
@click.option(
    "--n-chunks",
    type=click.IntRange(min=1),
    default=DEFAULT_N_CHUNKS,
    show_default=True,
    help="Chunks per tile: the unit of ranged reads from object storage and of parallel decoding.",
)
@level_option()
@click.option("--layer", default=None, help="Write this layer instead of X.")
@click.option("--raw", is_flag=True, help="Write raw.X (with raw.var) instead of X.")
@click.option(
    "--no-reorder-genes",
    is_flag=True,
    help=(
        "Store genes in the input order (by default they are stored by decreasing total counts; "
        "reads give the input order back either way)."
    ),
)
@click.option(
    "--obs-columns",
    multiple=True,
    metavar="NAMES",
    help="obs columns to store: comma-separated and/or repeated (default: all). The cell names are always stored.",
)
@click.option("--no-obs", is_flag=True, help="Store no obs column (only the cell names).")
@click.option(
    "--no-extras",
    is_flag=True,
    help="Store the counts, obs and var only (by default obsm, varm, obsp, varp, uns, other layers and raw too).",
)
@click.option(
    "--max-categories",
    type=click.IntRange(min=0),
    default=20_000,
    show_default=True,
    help="Categorical obs columns with more categories are stored as strings.",
)
@click.option(
    "--obs-tiles-per-file",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="Tiles (parquet row groups) per obs shard.",
)
@click.option("--overwrite", is_flag=True, help="Replace an existing dataset at OUT.")
@click.option(
    "--append",
    is_flag=True,
    help="Add IN's cells after those of the dataset at OUT (genes matched by name; the dataset's settings apply).",
)
@click.option(
    "--obsp",
    type=click.Choice(["refuse", "block_diagonal"]),
    default="refuse",
    show_default=True,
    help="With --append: refuse per-cell graphs (obsp), or add the new cells' as blocks of their own.",
)
@click.option(
    "-j", "--jobs", type=click.IntRange(min=1), default=None, help="Threads encoding tiles (default: the usable CPUs)."
)
@click.option("-q", "--quiet", is_flag=True, help="No progress bar (the summary is still printed).")
@storage_option("OUT")
@io_concurrency_option("uploads")
def convert(
    source: Path,
    out: str,
    input_format: str,
    tile_size: int,
    n_chunks: int,
    level: int,
    layer: str | None,
    raw: bool,
    no_reorder_genes: bool,
    obs_columns: tuple[str, ...],
    no_obs: bool,
    no_extras: bool,
    max_categories: int,
    obs_tiles_per_file: int,
    overwrite: bool,
    append: bool,
    obsp: str,
    jobs: int | None,
    quiet: bool,
    storage_options: str | None,
    io_concurrency: int | None,
) -> None:
    """Convert IN (h5ad, zarr, 10x h5, 10x mtx directory, loom or deltacells) to a dataset at OUT.

    h5ad is read backed (X streamed, never loaded whole), zarr lazily; 10x and loom files are read with
    scanpy / anndata. Everything else the input holds (obsm, varm, obsp, varp, uns, other layers, raw) is
    stored beside the tiles, unless --no-extras. With --append, IN's cells are added after those of the dataset
    at OUT, in one atomic commit. OUT is a directory or an fsspec URL. A summary (sizes,
    bytes per nonzero, ratio to the input, time) is printed at the end.
    """
    import tempfile

    from deltacells.io import write_deltacells

    if not source.exists():
        msg = f"{source}: no such file or directory"
        raise CLIError(msg)
    fmt = detect_format(source) if input_format == "auto" else input_format
    columns = _parse_obs_columns(obs_columns, no_obs=no_obs)
    options = parse_storage_options(storage_options)
    t0 = time.perf_counter()
    counts_hint: str | None = None
    on_interrupt(_what_a_stopped_write_leaves(source, out, append=append, overwrite=overwrite))
    try:
        with tempfile.TemporaryDirectory(prefix="deltacells-convert-") as tmp, read_input(source, fmt, tmp) as adata:
            t_open = time.perf_counter() - t0
            # anndata 0.13 lists X among the layers, as None.
            # keys(): anndata annotates Layers.__iter__ as returning a key, not an iterator
            layer_names = [str(k) for k in adata.layers.keys() if k is not None]  # noqa: SIM118
            has_raw = adata.raw is not None
            if raw and not has_raw:
                msg = f"{source}: --raw, but the input has no raw (no raw.X){_layers_clause(layer_names)}"
                raise CLIError(msg)
            counts_hint = _counts_hint(layer_names, has_raw=has_raw, layer=layer, raw=raw)
            gene_names = [str(name) for name in (adata.raw.var_names if raw else adata.var_names)]
            write_deltacells(
                adata,
                out,
                layer=layer,
                raw=raw,
                reorder_genes=not no_reorder_genes,
                tile_size=tile_size,
                n_chunks=n_chunks,
                level=level,
                obs_columns=columns,
                max_categories=max_categories,
                obs_tiles_per_file=obs_tiles_per_file,
                metadata={"source": source.name, "source_format": fmt, "converted_by": f"deltacells {__version__}"},
                overwrite=overwrite,
                threads=jobs,
                progress=not quiet,
                storage_options=options,
                io_concurrency=io_concurrency,
                extras=not no_extras,
                append=append,
                obsp=obsp,
            )
    except CLIError:
        raise
    except Exception as exc:
        if not is_user_error(exc):
            raise
        raise CLIError(_in_cli_terms(error_message(exc), counts_hint)) from exc
    elapsed = time.perf_counter() - t0
    on_interrupt(f"{out} was written whole, only its summary was not printed")
    from deltacells.core import open_dataset

    dataset = open_dataset(out, storage_options=options)
    if not append:  # an append keeps the dataset's genes, matched by name
        _check_gene_names(dataset, gene_names)
    _print_convert_summary(dataset, source, fmt, elapsed, t_open)


def _what_a_stopped_write_leaves(source: Path, out: str, *, append: bool, overwrite: bool) -> str:
    """What a conversion stopped by Ctrl-C leaves at ``out``: a write is all or nothing (``DatasetWriter.abort``)."""
    if append:
        return (
            f"the dataset at {out} has all of {source}'s cells or none of them (an append is one atomic commit; "
            f"deltacells info {out} tells how many cells it has)"
        )
    if overwrite:
        return f"the dataset at {out} is as it was (an overwrite replaces it only once the new one is complete)"
    return f"{out} was not written (what had been written is removed); run the same command again"


def _check_gene_names(dataset: Dataset, expected: list[str]) -> None:
    """The gene names written must be the input's (in the dataset's order): a cheap end-to-end check.

    Raises
    ------
    CLIError
        After removing the manifest (so that no reader accepts the dataset), if they are not.
    """
    names = dataset.var_names()
    if names is None:
        return
    order = dataset.gene_permutation()
    want = expected if order is None else [expected[j] for j in order]
    if names != want:
        with contextlib.suppress(OSError):
            dataset.store.delete(MANIFEST_NAME)
        msg = (
            f"{dataset.store.url}: the gene names written do not match the input's (a bug in deltacells; "
            "please report it); the dataset was left without its manifest.json"
        )
        raise CLIError(msg)


#: How write_deltacells' messages name its arguments, and the options that set them.
_CLI_TERMS = (
    ("pass overwrite=True", "pass --overwrite"),
    (
        "append=True adds cells to the dataset and overwrite=True replaces it",
        "--append adds cells and --overwrite replaces the dataset",
    ),
    ("pass obsp='block_diagonal'", "pass --obsp block_diagonal"),
    ("append with extras=False", "append with --no-extras"),
    ("write it with extras=False", "convert it with --no-extras"),
    ("pass either layer= or raw=True", "pass either --layer or --raw"),
    ("raw=True but", "--raw but"),
    ("obs_columns [", "--obs-columns ["),
)

#: The part of the not-counts messages (deltacells.tiles.to_count_csr) that tells Python users where the raw
#: counts may be; the command line replaces it with the options that this input allows.
_COUNTS_HINT = re.compile(r"pass the raw counts instead \(with write_deltacells:[^)]*\)")


def _in_cli_terms(message: str, counts_hint: str | None = None) -> str:
    """``message`` of write_deltacells with its arguments named as the options that set them.

    Parameters
    ----------
    message
        The error message.
    counts_hint
        What to suggest instead of the library's hint about raw counts (see :func:`_counts_hint`); ``None``
        keeps the library's.
    """
    if counts_hint is not None:
        message = _COUNTS_HINT.sub(lambda _: f"pass the raw counts instead ({counts_hint})", message)
    for api, option in _CLI_TERMS:
        message = message.replace(api, option)
    return message


def _counts_hint(layer_names: list[str], *, has_raw: bool, layer: str | None, raw: bool) -> str:
    """Where else the raw counts may be, as options: the input's other layers (by name), its raw, its X.

    Parameters
    ----------
    layer_names
        The input's layers.
    has_raw
        Whether the input has a raw.
    layer, raw
        The matrix being converted (``--layer`` / ``--raw``); it is not suggested again.
    """
    options = [f"--layer {name}" for name in layer_names if name != layer]
    if has_raw and not raw:
        options.append("--raw")
    if layer is not None or raw:
        options.append("X, without --layer or --raw")
    if not options:
        return "the input has no layers and no raw; convert the file that holds its raw counts"
    if len(options) == 1:
        return f"e.g. {options[0]}"
    return f"e.g. {', '.join(options[:-1])} or {options[-1]}"


def _layers_clause(layer_names: list[str]) -> str:
    if not layer_names:
        return " and no layers"
    return f"; its layers: {', '.join(layer_names)} (--layer NAME)"


def _parse_obs_columns(values: tuple[str, ...], *, no_obs: bool) -> list[str] | None:
    if no_obs:
        if values:
            msg = "pass either --obs-columns or --no-obs, not both"
            raise click.UsageError(msg)
        return []
    if not values:
        return None
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def _print_convert_summary(dataset: Dataset, source: Path, fmt: str, elapsed: float, t_open: float) -> None:
    m = dataset.manifest
    tiles = int(m.tile_bytes.sum())
    obs = int(sum(m.obs_shard_bytes))
    from deltacells.core import sidecar_bytes

    total = tiles + obs + sidecar_bytes(dataset)
    in_size = _input_size(source)
    per_nnz = f"{tiles / m.nnz:.2f} bytes per nonzero in the tiles" if m.nnz else "no nonzeros"
    if in_size >= total:
        ratio = f"{in_size / max(total, 1):.1f}x smaller than the input"
    else:
        ratio = f"{total / max(in_size, 1):.1f}x the size of the input"
    obs_part = f"; obs in {plural(m.n_obs_shards, 'shard')}" if m.has_obs else ""
    click.echo(f"converted   {source} ({fmt}, {format_size(in_size)}) -> {dataset.store.url}")
    click.echo(f"cells       {m.n_cells:,}")
    click.echo(f"genes       {m.n_genes:,}{'' if m.has_gene_order else ' (input order kept)'}")
    click.echo(f"nonzeros    {m.nnz:,}")
    click.echo(
        f"tiles       {plural(m.n_tiles, 'tile')} of up to {m.tile_size:,} cells, {m.n_chunks} chunks each, "
        f"zstd level {m.zstd_level}{obs_part}"
    )
    click.echo(
        f"written     {format_size(total)}: tiles {format_size(tiles)}, obs {format_size(obs)}, "
        f"other files {format_size(total - tiles - obs)}"
    )
    click.echo(f"size        {per_nnz}; {ratio} ({format_size(in_size)})")
    click.echo(
        f"time        {elapsed:.1f} s ({m.n_cells / max(elapsed, 1e-9):,.0f} cells/s): opening the input "
        f"{t_open:.1f} s, converting {elapsed - t_open:.1f} s"
    )


def _input_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
