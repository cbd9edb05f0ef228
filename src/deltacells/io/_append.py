"""``write_deltacells(adata, path, append=True)``: cells added after a dataset's (docs/format.md, decision 17).

Genes are matched by name to the dataset's (any order; the dataset's gene order and var stay as they are), the
counts must fit the dtype the dataset records (:func:`check_counts_fit`), obs columns are matched by name and kind
(``deltacells.obs._append``), the per-cell elements beside the tiles grow by a part of their own
(``deltacells.io._extras_parts``); the commit is ``deltacells.core._append``'s.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from deltacells._sparse import issparse
from deltacells.core import AppendRequest, append_cells, open_dataset
from deltacells.errors import InvalidValueError
from deltacells.io._extras_parts import part_writer, stored_extras

if TYPE_CHECKING:
    import anndata as ad

    from deltacells.format import Manifest
    from deltacells.io._sources import MatrixSource
    from deltacells.storage import BaseStore

__all__ = ["append_anndata"]


def append_anndata(
    adata: ad.AnnData,
    store: BaseStore,
    *,
    source: MatrixSource,
    obs: pd.DataFrame,
    var: pd.DataFrame,
    counts: str,
    elements: dict[str, Any] | None,
    block_rows: int,
    obsp: str,
    threads: int | None,
    commit_retries: int,
    single_writer: bool = False,
    bar: Any,
) -> Manifest:
    """Append ``adata``'s cells (the counts of ``source``) to the dataset at ``store``; see ``write_deltacells``.

    Raises
    ------
    ValueError
        For genes, obs columns or elements that differ from the dataset's (naming the differences).
    CommitConflictError
        If other writers committed first every time.
    """
    dataset = open_dataset(store)
    stored = _stored_gene_names(dataset)
    columns = gene_columns(stored, pd.Index(var.index.astype(str)))

    extras_writer = None
    if elements is not None:
        extras_writer = part_writer(dataset.manifest, counts, elements, n_cells=source.n_rows, obsp=obsp)
    elif stored_extras(dataset.manifest) is not None:
        msg = (
            f"{store.url} stores the AnnData's other elements beside the tiles; an append with extras=False would "
            "leave them short of the new cells: append with extras=True"
        )
        raise InvalidValueError(msg)

    recorded = dataset.recorded_dtype
    given = getattr(source.matrix, "dtype", None)
    needs_check = recorded is not None and not (given is not None and np.can_cast(given, recorded, "safe"))

    def blocks() -> Iterator[Any]:
        bar.reset(total=source.n_rows)
        for block in source.blocks(block_rows):
            if needs_check:
                assert recorded is not None  # needs_check says so
                check_counts_fit(block, recorded, store.url)
            yield block

    request = AppendRequest(
        n_cells=source.n_rows,
        blocks=blocks,
        columns=columns,
        obs=obs if dataset.manifest.has_obs else None,
        extras=extras_writer,
    )
    return append_cells(
        store, request, threads=threads, commit_retries=commit_retries, progress=bar.update, single_writer=single_writer
    )


def check_counts_fit(block: Any, dtype: np.dtype, url: str) -> None:
    """Raise unless ``dtype`` (a dataset's recorded dtype, what it reads in) holds every count of ``block`` exactly.

    A dataset keeps the dtype it was written in (docs/format.md, decision 9): an append of counts of another dtype is
    taken when that dtype holds them (int64 counts into an int32 dataset, int32 ones into a float32 dataset
    below 2^24), else refused before the append is committed.

    Raises
    ------
    InvalidValueError
        For a count the dtype cannot hold, naming it.
    """
    values = block.data if issparse(block) else np.asarray(block)
    if values.size == 0 or values.dtype.kind not in "iuf":
        return  # nothing to hold, or not counts at all (which the writer refuses with its own message)
    held = values.astype(dtype)
    bad = np.flatnonzero((held != values).reshape(-1))
    if bad.size:
        value = values.reshape(-1)[bad[0]]
        msg = (
            f"{url} holds counts of dtype {dtype} (the dtype it was written in, which reads give), and the new "
            f"cells' counts ({values.dtype}) include {value}, which {dtype} cannot hold exactly: write the dataset "
            "again in a wider dtype first (read_deltacells(path, dtype='int32' or 'int64') and write_deltacells)"
        )
        raise InvalidValueError(msg)


def gene_columns(stored: pd.Index, given: pd.Index) -> np.ndarray:
    """``columns[j]``: the dataset's column of the new cells' gene ``j``, matched by name.

    Raises
    ------
    InvalidValueError
        If the two gene sets differ (listing the differences) or a name is not unique.
    """
    if not given.is_unique or not stored.is_unique:
        which = "the new cells'" if not given.is_unique else "the dataset's"
        dup = given if not given.is_unique else stored
        msg = (
            f"{which} gene names are not unique (e.g. {dup[dup.duplicated()].unique()[:3].tolist()}); genes are "
            "matched by name in an append, which needs unique names"
        )
        raise InvalidValueError(msg)
    columns = stored.get_indexer(given)
    if len(given) != len(stored) or (columns < 0).any():
        missing = stored.difference(given)
        extra = given.difference(stored)
        msg = (
            f"the new cells' genes differ from the dataset's: {len(missing)} of the dataset's are missing "
            f"(e.g. {missing[:5].tolist()}), {len(extra)} are not in the dataset (e.g. {extra[:5].tolist()}); "
            "an append needs the same genes, in any order (subset or reindex the AnnData first, e.g. "
            "adata[:, genes] or anndata.concat(..., join='outer'))"
        )
        raise InvalidValueError(msg)
    return columns.astype(np.int32)


def _stored_gene_names(dataset: Any) -> pd.Index:
    from deltacells.io._frames import read_gene_keys

    names = read_gene_keys(dataset, None)
    assert names is not None
    return names
