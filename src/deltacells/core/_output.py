"""Where a dataset is written: what is there already, and replacing an old dataset only once the new one is complete.

An overwrite never destroys the old dataset before the new one exists: the new dataset is written under a
staging prefix inside the root (``.deltacells-staging-<hex>/``) while the old one stays readable, and
:func:`swap_in` replaces it only when the new one is complete. The swap removes the old manifest first and
moves the new manifest in last, so that at no moment does the root hold a manifest with objects of the other
dataset: a process killed during the swap leaves a root without a manifest (an unfinished dataset, which
readers refuse), never a mix that looks complete.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import TYPE_CHECKING

from deltacells.errors import OutputExistsError
from deltacells.format import APPEND_PREFIX, DATASET_ENTRIES, LOCK_NAME, MANIFEST_NAME, STAGING_PREFIX, TILES_DIR

if TYPE_CHECKING:
    from deltacells.storage import BaseStore

__all__ = ["check_output", "clear_unfinished", "holds_dataset", "new_staging_prefix", "swap_in"]


def is_ours(entry: str) -> bool:
    """A dataset entry, a staging prefix, or the temporary file of a killed writer (``<entry>.<hex>.tmp``)."""
    if entry in DATASET_ENTRIES or entry == LOCK_NAME or entry.startswith((STAGING_PREFIX, APPEND_PREFIX)):
        return True
    stem, _, suffix = entry.rpartition(".")
    return suffix == "tmp" and stem.rpartition(".")[0] in DATASET_ENTRIES


def holds_dataset(store: BaseStore) -> bool:
    """Whether the root holds a complete dataset (a manifest)."""
    return MANIFEST_NAME in store.list()


def check_output(store: BaseStore, *, overwrite: bool) -> None:
    """Refuse to clobber an existing dataset (or files that are not a dataset) unless asked to.

    Raises
    ------
    FileExistsError
        If the root is a file; holds a dataset, complete or not, and ``overwrite`` is false; or holds
        files that are not a dataset.
    """
    local = store.local_path("") if store.is_local else None
    if local is not None and os.path.exists(local) and not os.path.isdir(local):
        msg = f"{store.url} exists and is not a directory; choose another output path"
        raise OutputExistsError(msg)
    present = store.list()
    if not present:
        return
    ours = all(is_ours(entry) for entry in present)
    if not overwrite:
        if MANIFEST_NAME in present:
            what = "a deltacells dataset"
        else:
            what = "an unfinished deltacells dataset" if ours else "other files"
        msg = f"{store.url} already holds {what}; pass overwrite=True to replace it, or choose another path"
        raise OutputExistsError(msg)
    if not ours and TILES_DIR not in present and MANIFEST_NAME not in present:
        msg = f"{store.url} holds files that are not a deltacells dataset; refusing to overwrite them"
        raise OutputExistsError(msg)


def clear_unfinished(store: BaseStore) -> None:
    """Remove what an unfinished dataset left at the root (no manifest there: nothing readable is lost)."""
    for entry in store.list():
        if is_ours(entry):
            store.delete(entry)


def remove_stale_staging(store: BaseStore, *, keep: str | None = None) -> None:
    """Remove staging prefixes that killed writers (overwrites or appends) left (all but ``keep``)."""
    for entry in store.list():
        if entry.startswith((STAGING_PREFIX, APPEND_PREFIX)) and entry != keep:
            with contextlib.suppress(OSError):
                store.delete(entry)


def new_staging_prefix() -> str:
    """A fresh staging prefix inside the root."""
    return f"{STAGING_PREFIX}{uuid.uuid4().hex}"


def swap_in(store: BaseStore, staging: str) -> None:
    """Replace the dataset at the root with the complete one under ``staging``; remove the staging prefix.

    The old manifest goes first and the new one comes last (see the module docstring).
    """
    store.delete(MANIFEST_NAME)
    staged = set(store.list(staging))
    for entry in DATASET_ENTRIES[1:]:
        store.delete(entry)
        if entry in staged:
            store.move(f"{staging}/{entry}", entry)
    store.move(f"{staging}/{MANIFEST_NAME}", MANIFEST_NAME)
    store.delete(staging)
