"""``anndata.zarr``: the manifest's entry, the group present, each element it lists readable and of the right shape."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from deltacells.format import EXTRAS_NAME, MANIFEST_NAME, ManifestFields, collect, extras_of, is_raw_varm
from deltacells.io import open_extras, stored_shape

if TYPE_CHECKING:
    from deltacells.format import Extras
    from deltacells.storage import BaseStore
    from deltacells.validate._report import Collector


def check_extras(store: BaseStore, fields: ManifestFields, found: Collector) -> None:
    """The elements ``anndata.zarr`` holds, against the manifest's entry and the dataset's cells and genes.

    Each element listed must be in the group (its own metadata, not only the consolidated copy), readable
    (arrays are not read whole)
    and of the shape its place says: ``n_cells`` rows for obsm, obsp (both axes), layers and X, the genes of X
    for varm, varp (both axes) and the columns of layers and X, the tiles' genes for raw's varm.
    """
    extras = collect(extras_of(fields.metadata or {}), found)
    if extras is None:
        return
    try:
        group = open_extras(store, extras, consolidated=False)  # each element's own metadata, not the copy
    except Exception as exc:  # a validator reports: a missing or unreadable group is a problem, not a crash
        found.add(
            EXTRAS_NAME, f"cannot be opened as the zarr group {MANIFEST_NAME} names ({type(exc).__name__}: {exc})"
        )
        return
    n_cells, n_genes = fields.n_cells, fields.n_genes
    appended = sum(n for _, n in extras.parts)
    if n_cells is not None and appended >= n_cells:
        found.add(MANIFEST_NAME, f"metadata.deltacells.anndata.parts hold {appended} cells of the {n_cells}")
        return
    tile_genes = n_genes
    if extras.counts == "raw":  # the tiles hold raw's genes: X and its elements have the AnnData's own
        n_genes = _length(group, "var", found)
    base_cells = None if n_cells is None else n_cells - appended
    for path in extras.elements:
        expected = (tile_genes,) if is_raw_varm(path) else _expected_shape(path, extras, base_cells, n_genes)
        _check_element(group, path, expected, found)
    for part, part_cells in extras.parts:  # each append's per-cell elements, in a group of their own
        try:
            part_group = open_extras(store, extras, consolidated=False, group=f"{EXTRAS_NAME}/{part}")
        except Exception as exc:
            found.add(f"{EXTRAS_NAME}/{part}", f"cannot be opened as a zarr group ({type(exc).__name__}: {exc})")
            continue
        for path in extras.per_cell:
            shape = _expected_shape(path, extras, part_cells, n_genes)
            _check_element(part_group, path, shape, found, where=f"{EXTRAS_NAME}/{part}/{path}")


def _expected_shape(path: str, extras: Extras, n_cells: int | None, n_genes: int | None) -> tuple[Any, ...] | None:
    """The shape the element at ``path`` must have (``None`` in a place: any size), or ``None`` to check none."""
    place = path.partition("/")[0]
    return {
        "obsm": (n_cells,),
        "obsp": (n_cells, n_cells),
        "varm": (n_genes,),
        "varp": (n_genes, n_genes),
        "layers": (n_cells, n_genes),
        "X": (n_cells, n_genes),
        "var": (n_genes,),
        "raw": None,
        "uns": None,
    }[place]


def _check_element(
    group: Any, path: str, expected: tuple[Any, ...] | None, found: Collector, *, where: str | None = None
) -> None:
    where = where or f"{EXTRAS_NAME}/{path}"
    try:
        element = group[path]
        shape = stored_shape(element)
    except KeyError:
        found.add(where, f"missing, but {MANIFEST_NAME} lists it in metadata.deltacells.anndata.elements")
        return
    except Exception as exc:
        found.add(where, f"cannot be read ({type(exc).__name__}: {exc})")
        return
    if path == "raw":
        _check_raw(group, found)
        return
    if expected is None or shape is None:
        return
    if any(want is not None and got != want for got, want in zip(shape, expected, strict=False)):
        found.add(where, f"has shape {shape}, where the dataset's (or its part's) cells and genes give {expected}")


def _check_raw(group: Any, found: Collector) -> None:
    """raw: an X with one row per cell and one column per row of raw's var."""
    try:
        x_shape, var_shape = stored_shape(group["raw/X"]), stored_shape(group["raw/var"])
    except Exception as exc:
        found.add(f"{EXTRAS_NAME}/raw", f"cannot be read ({type(exc).__name__}: {exc})")
        return
    if x_shape is not None and var_shape is not None and x_shape[1] != var_shape[0]:
        found.add(f"{EXTRAS_NAME}/raw", f"X has {x_shape[1]} columns for {var_shape[0]} genes in var")


def _length(group: Any, path: str, found: Collector) -> int | None:
    try:
        shape = stored_shape(group[path])
    except Exception as exc:
        found.add(f"{EXTRAS_NAME}/{path}", f"cannot be read ({type(exc).__name__}: {exc})")
        return None
    return None if shape is None else shape[0]
