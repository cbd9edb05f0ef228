"""The objects beside the tiles: flags against the files present, stray tiles and shards, sidecar contents."""

from __future__ import annotations

from typing import TYPE_CHECKING

from deltacells.format import (
    GENE_ORDER_NAME,
    OBS_DIR,
    TILES_DIR,
    VAR_NAMES_NAME,
    VAR_TABLE_NAME,
    ManifestFields,
    check_flags,
    check_gene_order,
    check_stray_objects,
    check_var_names,
    check_var_table,
    collect,
)
from deltacells.validate._access import list_entries, read_object

if TYPE_CHECKING:
    from deltacells.storage import BaseStore
    from deltacells.validate._report import Collector

_SIDECAR_CHECKS = {GENE_ORDER_NAME: check_gene_order, VAR_NAMES_NAME: check_var_names, VAR_TABLE_NAME: check_var_table}


def check_files(store: BaseStore, fields: ManifestFields, found: Collector) -> None:
    """Flags against the files present (one listing per directory), stray objects, then each sidecar."""
    root = list_entries(store, "")
    obs = list_entries(store, OBS_DIR) if OBS_DIR in root else []
    tiles = list_entries(store, TILES_DIR) if TILES_DIR in root else []
    collect(check_flags(fields, root, obs), found)
    collect(check_stray_objects(fields, tiles, obs), found)
    for name, check in _SIDECAR_CHECKS.items():
        if fields.files.get(name) and name in root:
            blob = read_object(store, name, found)
            if blob is not None:
                collect(check(blob, fields.n_genes), found)
