"""The per-cell elements beside the tiles across appends: each append's part written, and the parts read as one.

An append (docs/format.md, decision 17) writes the new cells' obsm and obsp elements into a group of their own,
``anndata.zarr/parts/<version>`` (``deltacells.format._extras``), so that no object of the dataset's existing
elements is rewritten and an append costs what its own cells do. Reading puts the parts together: obsm's rows
one after the other (dask's concatenation when an element is read lazily), obsp's graphs block-diagonally
(no edge between cells of different appends: the caller asked for that with ``obsp="block_diagonal"``).
The other elements (uns, varm, varp, ...) are the dataset's; the layers, raw and an X beside the tiles are
per-cell too, and an append refuses a dataset that holds them (see :func:`part_writer`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from deltacells._checks import check_choice
from deltacells.errors import InvalidValueError
from deltacells.format import EXTRAS_NAME, PER_CELL, Extras, Manifest, extras_of, first_problem_raises, is_raw_varm

if TYPE_CHECKING:
    from deltacells.storage import BaseStore

__all__ = ["OBSP_CHOICES", "part_writer", "stored_extras"]

#: What an append does with obsp (per-cell graphs): refuse them, or grow them block-diagonally.
OBSP_CHOICES = ("refuse", "block_diagonal")

#: Elements with a row per cell that an append cannot grow (they would need the genes' order of the append).
_NOT_GROWN = ("X", "raw", "layers")


def stored_extras(manifest: Manifest) -> Extras | None:
    """What the manifest says ``anndata.zarr`` holds (``None``: nothing).

    Raises
    ------
    FormatError
        If the entry is malformed.
    """
    return first_problem_raises(extras_of(manifest.metadata), "")


def part_writer(
    manifest: Manifest, counts: str, elements: dict[str, Any], *, n_cells: int, obsp: str
) -> Callable[[BaseStore, Manifest, int], tuple[dict[str, Any], list[str]]] | None:
    """The ``extras`` step of an append: check the new cells' elements against the dataset's, then write them.

    Returns ``None`` when the dataset stores no other elements and the new cells have no per-cell ones.

    Raises
    ------
    InvalidValueError
        If the per-cell elements differ from the dataset's (listing the differences), if the counts are not
        where they were, if the dataset holds per-cell elements an append cannot grow (layers, raw, an X
        beside the tiles), or if there are graphs (obsp) and ``obsp`` is not ``"block_diagonal"``.
    """
    check_choice("obsp", obsp, OBSP_CHOICES)
    base = stored_extras(manifest)
    given = sorted(path for path in elements if path.partition("/")[0] in PER_CELL)
    if base is None:
        if given:
            msg = (
                f"the dataset stores no other elements of the AnnData, but the new cells have {given}: append "
                "with extras=False (they are not stored), or rewrite the dataset with them"
            )
            raise InvalidValueError(msg)
        return None
    _check_growable(base, counts)
    stored = sorted(base.per_cell)
    if stored != given:
        missing = [p for p in stored if p not in given]
        extra = [p for p in given if p not in stored]
        msg = (
            f"the new cells' per-cell elements differ from the dataset's: missing {missing}, not in the dataset "
            f"{extra}; an append grows the dataset's obsm and obsp, so the new cells need the same keys"
        )
        raise InvalidValueError(msg)
    if any(path.startswith("obsp/") for path in stored) and obsp != "block_diagonal":
        msg = (
            f"the dataset stores per-cell graphs ({[p for p in stored if p.startswith('obsp/')]}), which an append "
            "cannot join to the new cells' without recomputing them; pass obsp='block_diagonal' to add the new "
            "cells' graphs as blocks of their own (no edge between old and new cells), or recompute the graphs "
            "on the whole dataset and rewrite it"
        )
        raise InvalidValueError(msg)
    for path in given:
        rows = _rows(elements[path])
        if rows is not None and rows != n_cells:
            msg = f"adata.{path} has {rows} rows for {n_cells} cells"
            raise InvalidValueError(msg)
    if not given:
        return None
    new_elements = {path: elements[path] for path in given}

    def write(target: BaseStore, base_manifest: Manifest, version: int) -> tuple[dict[str, Any], list[str]]:
        from deltacells.io._extras import write_extras

        current = stored_extras(base_manifest)
        assert current is not None
        group = f"parts/{version:06d}"
        path = f"{EXTRAS_NAME}/{group}"
        write_extras(target, counts, new_elements, group_path=path)
        grown = dataclasses.replace(current, parts=(*current.parts, (group, n_cells)))
        metadata = dict(base_manifest.metadata)
        metadata["deltacells"] = {**metadata.get("deltacells", {}), "anndata": grown.to_dict()}
        return metadata, [path]

    return write


def _check_growable(base: Extras, counts: str) -> None:
    if counts != base.counts:
        msg = (
            f"the dataset's counts came from adata.{base.counts.replace('/', '.')}, the new cells' from "
            f"adata.{counts.replace('/', '.')}: append with the same layer= / raw= as the dataset was written with"
        )
        raise InvalidValueError(msg)
    blocked = [path for path in base.elements if path.partition("/")[0] in _NOT_GROWN and not is_raw_varm(path)]
    if blocked:
        msg = (
            f"the dataset stores {blocked} beside the tiles, which have a row per cell and which an append does "
            "not grow yet; rewrite the dataset (anndata.concat of it and the new cells, then write_deltacells) "
            "or write it with extras=False to append"
        )
        raise InvalidValueError(msg)


def _rows(value: Any) -> int | None:
    shape = getattr(value, "shape", None)
    return int(shape[0]) if shape else None
