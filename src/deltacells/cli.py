"""The ``deltacells`` command line: ``convert``, ``info``, ``validate`` and ``demo``.

Errors the user can act on (a missing input, an existing output, data that are not counts, a malformed
dataset...) are printed as one line, ``error: <message>``, on stderr, with exit status 1; no traceback.
Warnings are printed as ``warning: <message>``.

``deltacells info --json`` prints one JSON object (see :func:`dataset_info` for its keys); ``deltacells
validate --json`` prints :meth:`deltacells.validate.ValidationReport.to_dict`.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from deltacells import __version__
from deltacells.errors import FormatError

if TYPE_CHECKING:
    import anndata as ad

    from deltacells.dataset import Dataset

#: Version of the JSON object printed by ``deltacells info --json``.
INFO_JSON_VERSION = 1

#: Input formats ``deltacells convert`` reads (``auto`` guesses from the path).
INPUT_FORMATS = ("auto", "h5ad", "zarr", "10x-h5", "10x-mtx", "loom", "deltacells")

_USER_ERRORS = (FormatError, FileExistsError, FileNotFoundError, ValueError, TypeError, KeyError, OSError, ImportError)


class CLIError(click.ClickException):
    """An error reported as one line, ``error: <message>``, with exit status 1."""

    def show(self, file: Any = None) -> None:
        """Print ``error: <message>`` to stderr."""
        click.echo(f"error: {self.format_message()}", err=True, file=file)


def _error_message(exc: BaseException) -> str:
    # str(KeyError) would quote the message.
    text = exc.args[0] if isinstance(exc, KeyError) and exc.args and isinstance(exc.args[0], str) else str(exc)
    if isinstance(exc, ImportError) and getattr(exc, "name", None):
        text = f"{text} (install the package {exc.name!r} to read this format)"
    return " ".join(text.split("\n")).strip() or type(exc).__name__


class _Group(click.Group):
    """A group whose commands report user errors as ``error: <message>`` and warnings as ``warning: ...``."""

    def invoke(self, ctx: click.Context) -> Any:
        with _cli_warnings():
            try:
                return super().invoke(ctx)
            except _USER_ERRORS as exc:
                raise CLIError(_error_message(exc)) from exc


@contextlib.contextmanager
def _cli_warnings() -> Iterator[None]:
    """Show warnings once each as ``warning: <message>`` on stderr (deprecations of libraries hidden)."""

    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        click.echo(f"warning: {message}", err=True)

    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=PendingDeprecationWarning)
        warnings.filterwarnings("ignore", category=FutureWarning)  # API changes: for programmers, not for the CLI
        warnings.showwarning = show
        yield


def _storage_options(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        options = json.loads(text)
    except json.JSONDecodeError as exc:
        msg = f"--storage-options must be a JSON object, e.g. '{{\"anon\": true}}' ({exc})"
        raise click.BadParameter(msg) from exc
    if not isinstance(options, dict):
        msg = "--storage-options must be a JSON object, e.g. '{\"anon\": true}'"
        raise click.BadParameter(msg)
    return options


def _storage_option(what: str) -> Any:
    return click.option(
        "--storage-options",
        "storage_options",
        metavar="JSON",
        default=None,
        help=f"fsspec options for a remote {what}, as a JSON object (e.g. '{{\"anon\": true}}').",
    )


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="deltacells")
def main() -> None:
    """Store, inspect and read single-cell count matrices as deltacells datasets.

    Run "deltacells COMMAND --help" for the options of a command.
    """


# ====================================================================== convert


@main.command(short_help="Convert h5ad, zarr, 10x h5/mtx or loom to a dataset.")
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
    "--n-chunks", type=click.IntRange(min=1), default=8, show_default=True, help="Chunks per tile (parallel decoding)."
)
@click.option(
    "--level",
    type=click.IntRange(1, 22),
    default=19,
    show_default=True,
    help="zstd level: higher is smaller and slower to write, not slower to read.",
)
@click.option("--layer", default=None, help="Write this layer instead of X.")
@click.option("--raw", is_flag=True, help="Write raw.X (with raw.var) instead of X.")
@click.option(
    "--no-reorder-genes",
    is_flag=True,
    help="Keep the input gene order (by default genes are sorted by decreasing total counts: smaller, faster).",
)
@click.option(
    "--obs-columns",
    multiple=True,
    metavar="NAMES",
    help="obs columns to store: comma-separated and/or repeated (default: all). The cell names are always stored.",
)
@click.option("--no-obs", is_flag=True, help="Store no obs column (only the cell names).")
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
    "-j", "--jobs", type=click.IntRange(min=1), default=None, help="Threads encoding tiles (default: the usable CPUs)."
)
@click.option("-q", "--quiet", is_flag=True, help="No progress bar (the summary is still printed).")
@_storage_option("OUT")
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
    max_categories: int,
    obs_tiles_per_file: int,
    overwrite: bool,
    jobs: int | None,
    quiet: bool,
    storage_options: str | None,
) -> None:
    """Convert IN (h5ad, zarr, 10x h5, 10x mtx directory, loom or deltacells) to a dataset at OUT.

    h5ad is read backed (streamed, never loaded whole), zarr lazily; 10x and loom files are read with
    scanpy / anndata. OUT is a directory or an fsspec URL. A summary (sizes, bytes per nonzero, ratio to
    the input, time) is printed at the end.
    """
    import tempfile

    from deltacells.io import write_deltacells

    if not source.exists():
        msg = f"{source}: no such file or directory"
        raise FileNotFoundError(msg)
    fmt = detect_format(source) if input_format == "auto" else input_format
    columns = _parse_obs_columns(obs_columns, no_obs=no_obs)
    options = _storage_options(storage_options)
    t0 = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="deltacells-convert-") as tmp, read_input(source, fmt, tmp) as adata:
            t_open = time.perf_counter() - t0
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
            )
    except _USER_ERRORS as exc:
        raise CLIError(_in_cli_terms(_error_message(exc))) from exc
    elapsed = time.perf_counter() - t0
    from deltacells.dataset import open_dataset

    dataset = open_dataset(out, storage_options=options)
    _check_gene_names(dataset, gene_names)
    _print_convert_summary(dataset, source, fmt, elapsed, t_open)


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
    order = dataset.gene_order()
    want = expected if order is None else [expected[j] for j in order]
    if names != want:
        with contextlib.suppress(OSError):
            dataset.store.remove("manifest.json")
        msg = (
            f"{dataset.store.url}: the gene names written do not match the input's (a bug in deltacells; "
            "please report it); the dataset was left without its manifest.json"
        )
        raise CLIError(msg)


#: How write_deltacells' messages name its arguments, and the options that set them.
_CLI_TERMS = (
    ("pass overwrite=True", "pass --overwrite"),
    ("layer='counts' or raw=True", "--layer counts or --raw"),
    ("pass either layer= or raw=True", "pass either --layer or --raw"),
    ("raw=True but", "--raw but"),
    ("obs_columns [", "--obs-columns ["),
)


def _in_cli_terms(message: str) -> str:
    for api, option in _CLI_TERMS:
        message = message.replace(api, option)
    return message


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
    total = tiles + obs + _sidecar_bytes(dataset)
    in_size = _input_size(source)
    per_nnz = f"{tiles / m.nnz:.2f} bytes per nonzero in the tiles" if m.nnz else "no nonzeros"
    if in_size >= total:
        ratio = f"{in_size / max(total, 1):.1f}x smaller than the input"
    else:
        ratio = f"{total / max(in_size, 1):.1f}x the size of the input"
    obs_part = f"; obs in {_plural(m.n_obs_shards, 'shard')}" if m.has_obs else ""
    click.echo(f"converted   {source} ({fmt}, {_size(in_size)}) -> {dataset.store.url}")
    click.echo(f"cells       {m.n_cells:,}")
    click.echo(f"genes       {m.n_genes:,}{'' if m.has_gene_order else ' (input order kept)'}")
    click.echo(f"nonzeros    {m.nnz:,}")
    click.echo(
        f"tiles       {_plural(m.n_tiles, 'tile')} of up to {m.tile_size:,} cells, {m.n_chunks} chunks each, "
        f"zstd level {m.zstd_level}{obs_part}"
    )
    click.echo(
        f"written     {_size(total)}: tiles {_size(tiles)}, obs {_size(obs)}, other files {_size(total - tiles - obs)}"
    )
    click.echo(f"size        {per_nnz}; {ratio} ({_size(in_size)})")
    click.echo(
        f"time        {elapsed:.1f} s ({m.n_cells / max(elapsed, 1e-9):,.0f} cells/s): opening the input "
        f"{t_open:.1f} s, converting {elapsed - t_open:.1f} s"
    )


def _sidecar_bytes(dataset: Dataset) -> int:
    """Sizes of the manifest, gene order, var and obs schema files that are present."""
    total = 0
    for name in ("manifest.json", "gene_order.npy", "var_names.txt", "var.parquet", "obs/schema.json"):
        with contextlib.suppress(OSError):
            total += dataset.store.size(name)
    return total


def _input_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'s' if n != 1 else ''}"


def _size(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"


_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def detect_format(path: Path) -> str:
    """Guess the input format of ``path`` from its name and contents.

    Returns
    -------
    str
        One of ``h5ad``, ``zarr``, ``10x-h5``, ``10x-mtx``, ``loom``, ``deltacells``.

    Raises
    ------
    ValueError
        When the format cannot be told (pass ``--format``).
    """
    name = path.name.lower()
    if path.is_dir():
        entries = {p.name for p in path.iterdir()}
        if "manifest.json" in entries:
            return "deltacells"
        if entries & {".zgroup", "zarr.json", ".zattrs"} or name.endswith(".zarr"):
            return "zarr"
        if entries & {"matrix.mtx", "matrix.mtx.gz"}:
            return "10x-mtx"
        msg = (
            f"{path}: cannot tell the format of this directory (not zarr, not a 10x matrix.mtx directory, not a "
            "deltacells dataset); pass --format"
        )
        raise ValueError(msg)
    if name.endswith(".h5ad"):
        return "h5ad"
    if name.endswith(".loom"):
        return "loom"
    if name in ("matrix.mtx", "matrix.mtx.gz"):
        return "10x-mtx"
    with path.open("rb") as f:
        is_hdf5 = f.read(8) == _HDF5_SIGNATURE
    if is_hdf5 or name.endswith((".h5", ".hdf5")):
        return _sniff_hdf5(path)
    msg = f"{path}: cannot tell the format of this file from its name or contents; pass --format"
    raise ValueError(msg)


def _sniff_hdf5(path: Path) -> str:
    """h5ad, 10x h5 (v3 ``/matrix`` or a legacy genome group) or loom, from the groups inside."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            keys = set(f.keys())
            encoding = f.attrs.get("encoding-type", "")
            if isinstance(encoding, bytes):
                encoding = encoding.decode()
            if encoding == "anndata" or "X" in keys or {"obs", "var"} <= keys:
                return "h5ad"
            if "matrix" in keys and isinstance(f["matrix"], h5py.Group):
                return "10x-h5" if "barcodes" in f["matrix"] else "loom"
            if any(isinstance(f[k], h5py.Group) and "barcodes" in f[k] for k in keys):
                return "10x-h5"
    except OSError as exc:
        msg = f"{path}: not a readable HDF5 file ({exc})"
        raise ValueError(msg) from exc
    msg = f"{path}: an HDF5 file that is neither h5ad, 10x h5 nor loom; pass --format"
    raise ValueError(msg)


@contextlib.contextmanager
def read_input(path: Path, fmt: str, tmp: str | os.PathLike[str]) -> Iterator[ad.AnnData]:
    """Open ``path`` as an AnnData, as lazily as its format allows; close it afterwards.

    Parameters
    ----------
    path
        The input.
    fmt
        Its format (one of :data:`INPUT_FORMATS` but ``auto``).
    tmp
        A scratch directory (the obs cache of a deltacells input).
    """
    import anndata as ad

    if fmt == "h5ad":
        adata = ad.read_h5ad(path, backed="r")
        try:
            yield _csc_in_memory(adata)
        finally:
            with contextlib.suppress(Exception):
                adata.file.close()
    elif fmt == "zarr":
        yield _read_zarr_lazily(path)
    elif fmt == "10x-h5":
        import scanpy as sc

        yield sc.read_10x_h5(path)
    elif fmt == "10x-mtx":
        import scanpy as sc

        yield sc.read_10x_mtx(path if path.is_dir() else path.parent)
    elif fmt == "loom":
        try:
            import loompy  # noqa: F401 - anndata reads loom through it
        except ImportError as exc:
            msg = "reading loom files needs the package loompy (pip install loompy)"
            raise ImportError(msg) from exc
        yield ad.io.read_loom(path)
    elif fmt == "deltacells":
        from deltacells.io import read_deltacells, restore_gene_order

        adata = read_deltacells(path, cache_dir=Path(tmp) / "obs-cache", dtype="int32")
        # Back to the source's gene order, so that the new gene_order.npy refers to it too.
        yield restore_gene_order(adata) if "gene_order" in adata.uns.get("deltacells", {}) else adata
    else:
        msg = f"unknown input format {fmt!r}; choose one of {', '.join(INPUT_FORMATS[1:])}"
        raise ValueError(msg)


def _csc_in_memory(adata: ad.AnnData) -> ad.AnnData:
    """A backed CSC X is read by columns: reading it in row blocks would read it whole each time."""
    from anndata.abc import CSCDataset

    if isinstance(adata.X, CSCDataset):
        from deltacells.errors import warn

        warn("X is stored as CSC (by genes), which cannot be streamed by cells; reading it into memory")
        return adata.to_memory()
    return adata


def _read_zarr_lazily(path: Path) -> ad.AnnData:
    """A zarr AnnData with X, layers and raw.X left on disk (sparse ones as backed datasets) and the rest in memory."""
    import anndata as ad
    import zarr

    group = zarr.open(str(path), mode="r")
    # anndata writes absent elements (e.g. no raw) as arrays of encoding "null".
    keys = {k for k in group.keys() if group[k].attrs.get("encoding-type") != "null"}  # noqa: SIM118 - zarr groups
    if "obs" not in keys or "var" not in keys:
        msg = f"{path}: a zarr store without obs and var groups is not an AnnData"
        raise ValueError(msg)

    def lazy(element: Any) -> Any:
        encoding = element.attrs.get("encoding-type", "")
        if encoding == "csr_matrix":
            return ad.io.sparse_dataset(element)
        if encoding == "csc_matrix":
            return ad.io.read_elem(element)  # by genes: cannot be streamed by cells
        if encoding == "array":
            return element
        return ad.io.read_elem(element)

    kwargs: dict[str, Any] = {
        "obs": ad.io.read_elem(group["obs"]),
        "var": ad.io.read_elem(group["var"]),
        "X": lazy(group["X"]) if "X" in keys else None,
    }
    for name in ("obsm", "varm", "obsp", "varp", "uns"):
        if name in keys:
            kwargs[name] = ad.io.read_elem(group[name])
    if "layers" in keys:
        layers = group["layers"]
        kwargs["layers"] = {k: lazy(layers[k]) for k in layers.keys()}  # noqa: SIM118 - zarr groups
    adata = ad.AnnData(**kwargs)
    if "raw" in keys:
        raw = group["raw"]
        adata.raw = ad.AnnData(X=lazy(raw["X"]), obs=adata.obs[[]], var=ad.io.read_elem(raw["var"]))
    return adata


# ====================================================================== info


def dataset_info(path: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """What ``deltacells info --json`` prints: a summary of a dataset, from its manifest and small files.

    No tile is decoded and no obs column is localized (the obs columns come from ``obs/schema.json``).

    Returns
    -------
    dict
        A JSON-ready object with these keys (``info_version`` 1; keys are only ever added):

        * ``info_version`` (1), ``path``, ``format`` (``"deltacells-dataset"``), ``version`` (2);
        * ``n_cells``, ``n_genes``, ``n_tiles``, ``tile_size``, ``n_chunks``, ``zstd_level``, ``nnz``,
          ``density`` (nonzeros / cells x genes);
        * ``tile_bytes`` (sum of the tiles), ``obs_bytes`` (sum of the obs shards), ``other_bytes`` (manifest
          and sidecar files), ``total_bytes``, ``bytes_per_nonzero`` (``tile_bytes / nnz``, null without
          nonzeros);
        * ``has_gene_order``, ``has_var_names``, ``has_var_table``, ``has_obs``;
        * ``var``: null, or ``{"n_rows", "columns": [{"name", "arrow_type"}]}`` from ``var.parquet``
          (index excluded);
        * ``obs``: null, or ``{"n_shards", "tiles_per_file", "fingerprint", "has_index", "columns":
          [{"name", "kind", "arrow_type", "n_categories", "ordered"}]}`` (``_index``, the cell names, excluded;
          ``n_categories`` is null except for kind ``category``);
        * ``metadata``: the manifest's free-form metadata.
    """
    from deltacells.dataset import open_dataset

    dataset = open_dataset(path, storage_options=storage_options)
    m = dataset.manifest
    tile_bytes = int(m.tile_bytes.sum())
    obs_bytes = int(sum(m.obs_shard_bytes))
    other = _sidecar_bytes(dataset)
    cells_genes = m.n_cells * m.n_genes
    return {
        "info_version": INFO_JSON_VERSION,
        "path": dataset.store.url,
        "format": "deltacells-dataset",
        "version": 2,
        "n_cells": m.n_cells,
        "n_genes": m.n_genes,
        "n_tiles": m.n_tiles,
        "tile_size": m.tile_size,
        "n_chunks": m.n_chunks,
        "zstd_level": m.zstd_level,
        "nnz": m.nnz,
        "density": m.nnz / cells_genes if cells_genes else 0.0,
        "tile_bytes": tile_bytes,
        "obs_bytes": obs_bytes,
        "other_bytes": other,
        "total_bytes": tile_bytes + obs_bytes + other,
        "bytes_per_nonzero": tile_bytes / m.nnz if m.nnz else None,
        "has_gene_order": m.has_gene_order,
        "has_var_names": m.has_var_names,
        "has_var_table": m.has_var_table,
        "has_obs": m.has_obs,
        "var": _var_info(dataset),
        "obs": _obs_info(dataset),
        "metadata": m.metadata,
    }


def _var_info(dataset: Dataset) -> dict[str, Any] | None:
    if not dataset.manifest.has_var_table:
        return None
    import pyarrow as pa
    import pyarrow.parquet as pq

    where = f"{dataset.store.url}/var.parquet"
    try:
        parquet = pq.ParquetFile(pa.BufferReader(dataset.store.read("var.parquet")))
        schema = parquet.schema_arrow
    except (pa.ArrowException, OSError) as exc:
        msg = f"{where}: not a readable parquet table ({exc})"
        raise FormatError(msg) from exc
    index_columns: set[str] = set()
    pandas_meta = (schema.metadata or {}).get(b"pandas")
    if pandas_meta:
        with contextlib.suppress(ValueError, TypeError):
            index_columns = {c for c in json.loads(pandas_meta).get("index_columns", []) if isinstance(c, str)}
    columns = [{"name": f.name, "arrow_type": str(f.type)} for f in schema if f.name not in index_columns]
    return {"n_rows": parquet.metadata.num_rows, "columns": columns}


def _obs_info(dataset: Dataset) -> dict[str, Any] | None:
    m = dataset.manifest
    if not m.has_obs:
        return None
    from deltacells.obs import INDEX_COLUMN, SCHEMA_NAME, ObsSchema

    schema = ObsSchema.from_json(dataset.store.read(SCHEMA_NAME), where=f"{dataset.store.url}/{SCHEMA_NAME}")
    columns = [
        {
            "name": c.name,
            "kind": c.kind,
            "arrow_type": c.arrow_type,
            "n_categories": len(c.categories) if c.categories is not None else None,
            "ordered": c.ordered,
        }
        for c in schema.columns
        if c.name != INDEX_COLUMN
    ]
    return {
        "n_shards": m.n_obs_shards,
        "tiles_per_file": m.obs_tiles_per_file,
        "fingerprint": m.obs_fingerprint,
        "has_index": schema.has_index,
        "columns": columns,
    }


@main.command(short_help="Summarise a dataset (--json for scripts).")
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (documented in deltacells.cli).")
@_storage_option("PATH")
def info(path: str, as_json: bool, storage_options: str | None) -> None:
    """Summarise the dataset at PATH: shape, tiles, sizes, gene order, var, obs columns, metadata.

    Only the manifest and the small files are read: no tile is decoded and no obs column is fetched.
    With --json, one JSON object with the keys info_version, path, format, version, n_cells, n_genes,
    n_tiles, tile_size, n_chunks, zstd_level, nnz, density, tile_bytes, obs_bytes, other_bytes,
    total_bytes, bytes_per_nonzero, has_gene_order, has_var_names, has_var_table, has_obs, var, obs and
    metadata (see deltacells.cli.dataset_info).
    """
    _require_local_exists(path)
    doc = dataset_info(path, storage_options=_storage_options(storage_options))
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    for line in _info_lines(doc):
        click.echo(line)


def _require_local_exists(path: str) -> None:
    if "://" not in path and not Path(path).exists():
        msg = f"{path}: no such file or directory"
        raise FileNotFoundError(msg)


def _info_lines(doc: dict[str, Any]) -> list[str]:
    n_tiles, tile_size = doc["n_tiles"], doc["tile_size"]
    per_nnz = f" ({doc['bytes_per_nonzero']:.2f} bytes per nonzero)" if doc["bytes_per_nonzero"] is not None else ""
    lines = [
        f"{doc['path']}",
        f"  format      {doc['format']} version {doc['version']}",
        f"  cells       {doc['n_cells']:,}",
        f"  genes       {doc['n_genes']:,}",
        f"  tiles       {_plural(n_tiles, 'tile')} of up to {tile_size:,} cells, {doc['n_chunks']} chunks each, "
        f"zstd level {doc['zstd_level']}",
        f"  nonzeros    {doc['nnz']:,} ({100 * doc['density']:.2f}% of the entries)",
        f"  stored      {_size(doc['total_bytes'])}: tiles {_size(doc['tile_bytes'])}{per_nnz}, "
        f"obs {_size(doc['obs_bytes'])}, other files {_size(doc['other_bytes'])}",
        "  gene order  "
        + ("genes sorted by decreasing total counts (gene_order.npy)" if doc["has_gene_order"] else "input order"),
    ]
    var = doc["var"]
    var_parts = []
    if var is not None:
        cols = ", ".join(f"{c['name']} ({c['arrow_type']})" for c in var["columns"]) or "no columns"
        var_parts.append(f"var.parquet, {var['n_rows']:,} rows: {cols}")
    if doc["has_var_names"]:
        var_parts.append("var_names.txt")
    lines.append("  var         " + ("; ".join(var_parts) if var_parts else "none (genes are named 0 .. n-1)"))
    obs = doc["obs"]
    if obs is None:
        lines.append("  obs         none")
    else:
        n_cols = len(obs["columns"])
        what = f"{n_cols} column{'s' if n_cols != 1 else ''}"
        if obs["has_index"]:
            what = f"cell names and {what}" if n_cols else "cell names only"
        lines.append(
            f"  obs         {what} in {_plural(obs['n_shards'], 'shard')} ({obs['tiles_per_file']:,} tiles per "
            f"shard), fingerprint {obs['fingerprint']}"
        )
        width = max((len(c["name"]) for c in obs["columns"]), default=0)
        for c in obs["columns"]:
            what = c["kind"]
            if c["kind"] == "category":
                what += f", {c['n_categories']:,} categories{' (ordered)' if c['ordered'] else ''}"
            elif c["kind"] == "numeric":
                what += f", {c['arrow_type']}"
            lines.append(f"                {c['name']:<{width}}  {what}")
    lines.append(f"  metadata    {json.dumps(doc['metadata'])}")
    return lines


# ====================================================================== validate


@main.command(short_help="Fetch, decode and check every object of a dataset.")
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@click.option(
    "-j", "--jobs", type=click.IntRange(min=1), default=None, help="Tiles checked at once (default: the usable CPUs)."
)
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@_storage_option("PATH")
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
        path, storage_options=_storage_options(storage_options), progress=not (quiet or as_json), threads=jobs
    )
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
        ctx.exit(0 if report.ok else 1)
    checked = (
        f"{report.tiles_checked:,} of {report.n_tiles:,} tiles ({report.nnz_checked:,} nonzeros, "
        f"{_size(report.bytes_checked)}) and {report.shards_checked:,} of {report.n_shards:,} obs shards checked"
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


# ====================================================================== demo


@main.command(short_help="Generate data, convert, read back, subset, run scanpy; report.")
@click.option("--cells", "n_cells", type=click.IntRange(min=1), default=10_000, show_default=True, help="Cells.")
@click.option("--genes", "n_genes", type=click.IntRange(min=20), default=6_000, show_default=True, help="Genes.")
@click.option("--tile-size", type=click.IntRange(min=1), default=2048, show_default=True, help="Cells per tile.")
@click.option("--level", type=click.IntRange(1, 22), default=19, show_default=True, help="zstd level.")
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
    data read back is checked to be identical to what was generated.
    """
    from deltacells._demo import DemoMismatchError, run_demo

    try:
        run_demo(
            n_cells=n_cells,
            n_genes=n_genes,
            tile_size=tile_size,
            level=level,
            out=out,
            seed=seed,
            threads=jobs,
            echo=click.echo,
        )
    except DemoMismatchError as exc:
        raise CLIError(str(exc)) from exc


if __name__ == "__main__":  # pragma: no cover
    main()
