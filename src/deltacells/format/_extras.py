"""The rest of an AnnData beside the tiles (docs/format.md, decision 15): ``anndata.zarr`` and its manifest entry.

The tiles hold one count matrix, obs and var sit in their own files; every other element of the AnnData a
dataset was written from (obsm, varm, obsp, varp, uns, the layers not in the tiles, raw, and X when the
counts came from a layer or raw) is written with anndata's element writer into the zarr group
``anndata.zarr`` at the root, before the manifest. The manifest's free-form ``metadata`` names it, so that a
reader that knows only the format ignores it::

    "metadata": {"deltacells": {"anndata": {
        "zarr_format": 2,
        "counts": "layers/counts",
        "elements": ["X", "layers/log1p", "obsm/X_pca", "obsp/connectivities", "raw", "uns", "varm/PCs"]
    }}}

An append (docs/format.md, decision 17) adds the new cells' per-cell elements (obsm, obsp) as a *part*: a group of
its own at ``anndata.zarr/parts/<version>``, listed in ``"parts": [{"group": "parts/000001", "n_cells": 5000}]``
(after the base group's cells, in order); obsm rows are the parts' rows one after the other, obsp the
block-diagonal matrix of the parts'.

``counts`` says where the tiles' matrix was in the AnnData (``"X"``, ``"raw"`` or ``"layers/<name>"``), and
``elements`` the paths written in the group: ``X``, ``var`` (the AnnData's own var, when the tiles hold raw's
genes), ``raw`` and ``uns`` whole, ``<mapping>/<key>`` for each key of obsm, varm, obsp, varp and layers, and
``raw/varm/<key>`` for each key of raw's varm when the tiles hold raw's counts (rows: the tiles' genes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final, Literal

from deltacells.format._names import MANIFEST_NAME
from deltacells.format._problems import Checker, Problem

__all__ = [
    "EXTRAS_FORMAT",
    "MAPPINGS",
    "PER_CELL",
    "RAW_VARM",
    "WHOLE",
    "Extras",
    "check_extras",
    "extras_of",
    "is_raw_varm",
]

#: The zarr format of ``anndata.zarr``: 2, whose consolidated metadata (``.zmetadata``) opens the group in one read.
EXTRAS_FORMAT: Final = 2

#: The AnnData mappings whose keys are elements of their own (``obsm/X_pca``).
MAPPINGS = ("obsm", "varm", "obsp", "varp", "layers")

#: The mappings whose elements have a row per cell and grow with an append (obsp: block-diagonally).
PER_CELL = ("obsm", "obsp")

#: The elements written whole.
WHOLE = ("X", "var", "raw", "uns")

#: Where raw's varm goes when the tiles hold raw's counts (raw itself is not written then): ``raw/varm/<key>``.
RAW_VARM = "raw/varm"

_WHERE = f"{MANIFEST_NAME} field metadata.deltacells.anndata"


@dataclass(frozen=True)
class Extras:
    """What ``anndata.zarr`` holds, as the manifest says.

    Attributes
    ----------
    counts
        Where the tiles' matrix was in the AnnData: ``"X"``, ``"raw"`` or ``"layers/<name>"``.
    elements
        The paths of the elements written in the group.
    zarr_format
        The group's zarr format.
    """

    counts: str
    elements: tuple[str, ...]
    zarr_format: Literal[2] = EXTRAS_FORMAT
    parts: tuple[tuple[str, int], ...] = ()

    @property
    def per_cell(self) -> list[str]:
        """The elements with a row per cell that an append grows (obsm, obsp)."""
        return [path for path in self.elements if path.partition("/")[0] in PER_CELL]

    @property
    def counts_layer(self) -> str | None:
        """The layer the tiles' matrix came from, or ``None``."""
        return self.counts.partition("/")[2] if self.counts.startswith("layers/") else None

    @property
    def raw_varm_keys(self) -> list[str]:
        """The keys of raw's varm written (``raw/varm/<key>``), in order: only when the tiles hold raw's counts."""
        return [path.removeprefix(f"{RAW_VARM}/") for path in self.elements if is_raw_varm(path)]

    def keys(self, mapping: str) -> list[str]:
        """The keys of ``mapping`` (``"obsm"``...) that were written, in order."""
        return [path.partition("/")[2] for path in self.elements if path.partition("/")[0] == mapping and "/" in path]

    def to_dict(self) -> dict[str, Any]:
        """The manifest's entry (``metadata["deltacells"]["anndata"]``)."""
        entry: dict[str, Any] = {"zarr_format": self.zarr_format, "counts": self.counts}
        entry["elements"] = list(self.elements)
        if self.parts:
            entry["parts"] = [{"group": group, "n_cells": n} for group, n in self.parts]
        return entry


def extras_of(metadata: Any) -> Checker[Extras | None]:
    """The :class:`Extras` a manifest's ``metadata`` names, ``None`` when it names none; problems if malformed."""
    entry = metadata.get("deltacells", {}) if isinstance(metadata, dict) else {}
    entry = entry.get("anndata") if isinstance(entry, dict) else None
    if entry is None:
        return None
    extras = yield from check_extras(entry)
    return extras


def check_extras(entry: Any) -> Checker[Extras | None]:
    """The manifest's entry for ``anndata.zarr``: its zarr format, where the counts were, the element paths."""
    if not isinstance(entry, dict):
        yield Problem(MANIFEST_NAME, f"{_WHERE} is not a JSON object")
        return None
    zarr_format, counts, elements = entry.get("zarr_format"), entry.get("counts"), entry.get("elements")
    if zarr_format != EXTRAS_FORMAT:
        yield Problem(MANIFEST_NAME, f"{_WHERE}.zarr_format is {zarr_format!r}; this reader knows {EXTRAS_FORMAT}")
        return None
    if not isinstance(counts, str) or not (counts in ("X", "raw") or _is_mapping_path(counts, ("layers",))):
        yield Problem(MANIFEST_NAME, f"{_WHERE}.counts is {counts!r}, not 'X', 'raw' or 'layers/<name>'")
        return None
    if not isinstance(elements, list) or not all(isinstance(e, str) for e in elements):
        yield Problem(MANIFEST_NAME, f"{_WHERE}.elements is not a list of element paths")
        return None
    bad = [
        e
        for e in elements
        if e not in WHOLE and not _is_mapping_path(e, MAPPINGS) and not (counts == "raw" and is_raw_varm(e))
    ]
    if bad:
        yield Problem(MANIFEST_NAME, f"{_WHERE}.elements has paths that are no AnnData element: {bad[:5]}")
        return None
    if counts in elements or len(set(elements)) != len(elements):
        yield Problem(MANIFEST_NAME, f"{_WHERE}.elements lists the tiles' matrix {counts!r} or a path twice")
        return None
    parts = entry.get("parts", [])
    if not isinstance(parts, list) or not all(
        isinstance(p, dict)
        and isinstance(p.get("group"), str)
        and re.fullmatch(r"parts/[0-9]{6}", p["group"])
        and isinstance(p.get("n_cells"), int)
        and not isinstance(p.get("n_cells"), bool)
        and p["n_cells"] >= 1
        for p in parts
    ):
        yield Problem(MANIFEST_NAME, f"{_WHERE}.parts is not a list of {{'group': 'parts/NNNNNN', 'n_cells': n}}")
        return None
    return Extras(
        counts=counts,
        elements=tuple(elements),
        zarr_format=zarr_format,
        parts=tuple((p["group"], p["n_cells"]) for p in parts),
    )


def is_raw_varm(path: str) -> bool:
    """Whether ``path`` is an element of raw's varm (``raw/varm/<key>``)."""
    key = path.removeprefix(f"{RAW_VARM}/")
    return key != path and key != "" and "/" not in key


def _is_mapping_path(path: str, mappings: tuple[str, ...]) -> bool:
    mapping, _, key = path.partition("/")
    return mapping in mappings and key != "" and "/" not in key
