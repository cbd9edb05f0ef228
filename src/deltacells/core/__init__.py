"""Datasets: opening one (or several as one, a collection) and reading any cells; writing one, manifest last."""

from __future__ import annotations

from typing import TYPE_CHECKING

from deltacells._lazy import lazy_names
from deltacells.core._collection import Collection
from deltacells.core._commit import PendingCommitStore, read_for_commit, writer_lock
from deltacells.core._dataset import Dataset
from deltacells.core._dtypes import UNRECORDED_DTYPE, promoted_dtype
from deltacells.core._follow import STALE_ERRORS, manifest_changed
from deltacells.core._indexing import normalize_rows
from deltacells.core._listed import listed_objects_problems, sizes_checked
from deltacells.core._open import open_dataset
from deltacells.core._output import check_output, holds_dataset
from deltacells.core._rows import RowSource
from deltacells.core._sizes import sidecar_bytes
from deltacells.core._writer import DatasetWriter

if TYPE_CHECKING:
    from deltacells.core._append import AppendRequest, append_cells
    from deltacells.core._collection_obs import CollectionObs

__all__ = [
    "Collection",
    "CollectionObs",
    "Dataset",
    "DatasetWriter",
    "RowSource",
    "open_dataset",
    "sidecar_bytes",
    # the dtype reads give: float32 for a dataset that records none; several datasets' as anndata.concat's
    "UNRECORDED_DTYPE",
    "promoted_dtype",
    # rows as users give them, checked and made an index array or a slice
    "normalize_rows",
    # writing: where a dataset may be written; appending cells to one
    "AppendRequest",
    "append_cells",
    "check_output",
    "holds_dataset",
    # the tiles and obs shards a manifest lists, there (and of their sizes, on a local disk)
    "listed_objects_problems",
    "sizes_checked",
    # reading a dataset whose append is pending (its commit not rolled forward yet); one appended to since opened
    "PendingCommitStore",
    "STALE_ERRORS",
    # the current manifest with its version tag and commit entry; the writer lock (a local disk's)
    "read_for_commit",
    "writer_lock",
    "manifest_changed",
]

#: Names whose module importing the package does not load (appends, a collection's obs): it loads on first use.
_LAZY = {
    "AppendRequest": "deltacells.core._append",
    "append_cells": "deltacells.core._append",
    "CollectionObs": "deltacells.core._collection_obs",  # a collection's obs: loads pandas and pyarrow
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
