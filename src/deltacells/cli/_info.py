"""``deltacells info``: a summary of a dataset from its manifest and small files (``--json`` for scripts)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from deltacells._numbers import format_size, plural
from deltacells.cli._errors import CLIError, error_message
from deltacells.cli._inputs import detect_format
from deltacells.cli._options import parse_storage_options, storage_option
from deltacells.errors import DatasetNotFoundError, FormatError
from deltacells.format import (
    INDEX_COLUMN,
    MANIFEST_NAME,
    OBS_SCHEMA_NAME,
    VAR_NAMES_NAME,
    VAR_TABLE_NAME,
    first_problem_raises,
)

if TYPE_CHECKING:
    from deltacells.core import Dataset

#: Version of the JSON object printed by ``deltacells info --json``.
INFO_JSON_VERSION = 1


def dataset_info(path: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """What ``deltacells info --json`` prints: a summary of a dataset, from its manifest and small files.

    No tile is decoded and no obs column is localized (the obs columns come from ``obs/schema.json``). The tiles
    and obs shards the manifest lists are checked to be there (one listing of each folder) and, on a local disk,
    to have the sizes it records; their contents are not read (``deltacells validate`` reads every byte).

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
        * ``anndata``: null, or what ``anndata.zarr`` holds (the AnnData's other elements, docs/format.md, decision 15):
          ``{"counts", "elements": [{"path", "shape", "bytes"}]}``, ``counts`` saying where the tiles' matrix
          was (``"X"``, ``"raw"``, ``"layers/<name>"``), ``bytes`` an element's uncompressed size (its metadata
          only is read);
        * ``metadata``: the manifest's free-form metadata;
        * ``problems``: the tiles and obs shards the manifest lists that are missing or (``sizes_checked``) of
          another size, as ``[{"object", "message"}]`` (empty: none); ``sizes_checked``: whether sizes were
          compared (on a local disk).
    """
    from deltacells.core import listed_objects_problems, open_dataset, sidecar_bytes, sizes_checked

    dataset = open_dataset(path, storage_options=storage_options)
    m = dataset.manifest
    tile_bytes = int(m.tile_bytes.sum())
    obs_bytes = int(sum(m.obs_shard_bytes))
    other = sidecar_bytes(dataset)
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
        "anndata": _extras_info(dataset),
        "metadata": m.metadata,
        "problems": [{"object": p.object, "message": p.message} for p in listed_objects_problems(dataset.store, m)],
        "sizes_checked": sizes_checked(dataset.store),
    }


def _extras_info(dataset: Dataset) -> dict[str, Any] | None:
    from deltacells.format import extras_of

    extras = first_problem_raises(extras_of(dataset.manifest.metadata), dataset.store.url)
    if extras is None:
        return None
    from deltacells.io import open_extras, stored_bytes, stored_shape

    group = open_extras(dataset.store, extras)
    elements = []
    for path in extras.elements:
        element = group[path]
        shape = stored_shape(element)
        elements.append({"path": path, "shape": None if shape is None else list(shape), "bytes": stored_bytes(element)})
    return {"counts": extras.counts, "elements": elements}


def _var_info(dataset: Dataset) -> dict[str, Any] | None:
    if not dataset.manifest.has_var_table:
        return None
    table = dataset.var_table()
    assert table is not None
    schema = table.schema
    index_columns: set[str] = set()
    pandas_meta = (schema.metadata or {}).get(b"pandas")
    if pandas_meta:
        with contextlib.suppress(ValueError, TypeError):
            index_columns = {c for c in json.loads(pandas_meta).get("index_columns", []) if isinstance(c, str)}
    columns = [{"name": f.name, "arrow_type": str(f.type)} for f in schema if f.name not in index_columns]
    return {"n_rows": table.num_rows, "columns": columns}


def _obs_info(dataset: Dataset) -> dict[str, Any] | None:
    m = dataset.manifest
    if not m.has_obs:
        return None
    from deltacells.format import ObsSchema

    schema = ObsSchema.from_json(dataset.store.read(OBS_SCHEMA_NAME), where=f"{dataset.store.url}/{OBS_SCHEMA_NAME}")
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


@click.command(short_help="Summarise a dataset (--json for scripts).")
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (documented in deltacells.cli).")
@storage_option("PATH")
def info(path: str, as_json: bool, storage_options: str | None) -> None:
    """Summarise the dataset at PATH: shape, tiles, sizes, gene order, var, obs columns, metadata.

    Only the manifest and the small files are read: no tile is decoded and no obs column is fetched.
    The tiles and obs shards the manifest lists are checked to be there and, on a local disk, to have the
    sizes it records: the exit status is 1 if one is not (the problems are listed), 0 otherwise. Their
    contents are not read: "deltacells validate PATH" decodes and checks every byte.

    With --json, one JSON object with the keys info_version, path, format, version, n_cells, n_genes,
    n_tiles, tile_size, n_chunks, zstd_level, nnz, density, tile_bytes, obs_bytes, other_bytes,
    total_bytes, bytes_per_nonzero, has_gene_order, has_var_names, has_var_table, has_obs, var, obs,
    anndata, metadata, problems and sizes_checked (see deltacells.cli.dataset_info).
    """
    _require_local_exists(path)
    try:
        doc = dataset_info(path, storage_options=parse_storage_options(storage_options))
    except FormatError as exc:
        if isinstance(exc, DatasetNotFoundError):
            raise
        msg = f"{error_message(exc)}; deltacells validate {path} lists every problem of the dataset"
        raise CLIError(msg) from exc
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    else:
        for line in _info_lines(doc):
            click.echo(line)
    problems = doc["problems"]
    if problems:
        msg = (
            f"{path} is damaged: {plural(len(problems), 'problem')} with the tiles and obs shards its manifest "
            f"lists; deltacells validate {path} checks every object"
        )
        raise CLIError(msg)


def _require_local_exists(path: str) -> None:
    """A local ``path`` must be a directory; a file or an AnnData store is pointed to ``deltacells convert``.

    Raises
    ------
    CLIError
        If ``path`` is local and missing, a file, or a directory of another format (zarr, 10x mtx).
    """
    if "://" in path:
        return
    local = Path(path)
    if not local.exists():
        msg = f"{path}: no such file or directory"
        raise CLIError(msg)
    if local.is_dir() and (local / MANIFEST_NAME).exists():
        return
    fmt = _input_format(local)
    if fmt is not None:
        msg = (
            f"{path} is {_INPUT_KINDS[fmt]}, not a deltacells dataset (a directory with a {MANIFEST_NAME}); "
            f"convert it with: deltacells convert {path} OUT"
        )
        raise CLIError(msg)
    if local.is_file():
        msg = (
            f"{path} is a file, not a deltacells dataset (a directory with a {MANIFEST_NAME}); "
            "deltacells convert makes one from an h5ad, zarr, 10x h5, 10x mtx or loom input"
        )
        raise CLIError(msg)
    # A directory of no known format: open_dataset says that it has no manifest.json.


#: How ``info`` names the inputs of ``convert`` that it is given instead of a dataset.
_INPUT_KINDS = {
    "h5ad": "an h5ad file",
    "zarr": "a zarr store",
    "10x-h5": "a 10x h5 file",
    "10x-mtx": "a 10x mtx matrix",
    "loom": "a loom file",
}


def _input_format(path: Path) -> str | None:
    """The input format of ``convert`` that ``path`` has (not ``deltacells``), or None when none is told."""
    try:
        fmt = detect_format(path)
    except (CLIError, OSError):
        return None
    return fmt if fmt in _INPUT_KINDS else None


def _info_lines(doc: dict[str, Any]) -> list[str]:
    n_tiles, tile_size = doc["n_tiles"], doc["tile_size"]
    per_nnz = f" ({doc['bytes_per_nonzero']:.2f} bytes per nonzero)" if doc["bytes_per_nonzero"] is not None else ""
    lines = [
        f"{doc['path']}",
        f"  format      {doc['format']} version {doc['version']}",
        f"  cells       {doc['n_cells']:,}",
        f"  genes       {doc['n_genes']:,}",
        f"  tiles       {plural(n_tiles, 'tile')} of up to {tile_size:,} cells, {doc['n_chunks']} chunks each, "
        f"zstd level {doc['zstd_level']}",
        f"  nonzeros    {doc['nnz']:,} ({100 * doc['density']:.2f}% of the entries)",
        f"  stored      {format_size(doc['total_bytes'])}: tiles {format_size(doc['tile_bytes'])}{per_nnz}, "
        f"obs {format_size(doc['obs_bytes'])}, other files {format_size(doc['other_bytes'])}",
        "  gene order  "
        + ("genes sorted by decreasing total counts (gene_order.npy)" if doc["has_gene_order"] else "input order"),
    ]
    var = doc["var"]
    var_parts = []
    if var is not None:
        cols = ", ".join(f"{c['name']} ({c['arrow_type']})" for c in var["columns"]) or "no columns"
        var_parts.append(f"{VAR_TABLE_NAME}, {var['n_rows']:,} rows: {cols}")
    if doc["has_var_names"]:
        var_parts.append(VAR_NAMES_NAME)
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
            f"  obs         {what} in {plural(obs['n_shards'], 'shard')} ({obs['tiles_per_file']:,} tiles per "
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
    extras = doc["anndata"]
    if extras is not None:
        total = sum(e["bytes"] for e in extras["elements"])
        lines.append(
            f"  anndata     {plural(len(extras['elements']), 'element')} in anndata.zarr ({format_size(total)} "
            f"uncompressed); the tiles hold {extras['counts']}"
        )
        width = max((len(e["path"]) for e in extras["elements"]), default=0)
        for e in extras["elements"]:
            shape = " x ".join(f"{n:,}" for n in e["shape"]) if e["shape"] else ""
            lines.append(f"                {e['path']:<{width}}  {shape}")
    lines.append(f"  metadata    {json.dumps(doc['metadata'])}")
    return lines + _checked_lines(doc)


#: Problems ``info`` lists; the rest are counted.
_PROBLEMS_SHOWN = 10


def _checked_lines(doc: dict[str, Any]) -> list[str]:
    """What was checked (and what was not: the contents), then the problems found, if any."""
    n_shards = doc["obs"]["n_shards"] if doc["obs"] is not None else 0
    objects = plural(doc["n_tiles"], "tile") + (f" and {plural(n_shards, 'obs shard')}" if n_shards else "")
    sizes = ", of the sizes it records" if doc["sizes_checked"] else ""
    lines = [
        f"  checked     the manifest and small files; its {objects} are there{sizes}",
        f"              (their contents are not read: deltacells validate {doc['path']} decodes and checks every byte)",
    ]
    problems = doc["problems"]
    for k, problem in enumerate(problems[:_PROBLEMS_SHOWN]):
        lines.append(f"{'  problems    ' if k == 0 else ' ' * 14}{problem['object']}: {problem['message']}")
    if len(problems) > _PROBLEMS_SHOWN:
        lines.append(f"{' ' * 14}... and {len(problems) - _PROBLEMS_SHOWN} more")
    return lines
