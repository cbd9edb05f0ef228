"""The rules of the optional files beside the tiles: ``gene_order.npy``, ``var_names.txt``, ``var.parquet``."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import numpy as np

from deltacells.format._names import GENE_ORDER_NAME, VAR_NAMES_NAME, VAR_TABLE_NAME
from deltacells.format._problems import Checker, Problem, problem_from_error

if TYPE_CHECKING:
    from collections.abc import Callable

    import pyarrow as pa

__all__ = ["GENE_ORDER_DTYPE", "check_gene_order", "check_var_names", "check_var_table"]

#: docs/format.md: ``gene_order.npy`` is an int32 array (all integers of the format are little-endian).
GENE_ORDER_DTYPE = np.dtype("<i4")


def check_gene_order(blob: bytes, n_genes: int | None) -> Checker[np.ndarray | None]:
    """``gene_order.npy``: a little-endian int32 permutation of the column numbers; returns it."""
    try:
        order = np.load(io.BytesIO(blob), allow_pickle=False)
    except Exception as exc:  # np.load raises many kinds for bad bytes
        yield Problem(GENE_ORDER_NAME, f"not a readable .npy array ({problem_from_error('', exc).message})")
        return None
    ok = True
    if order.dtype != GENE_ORDER_DTYPE:
        yield Problem(GENE_ORDER_NAME, f"has dtype {order.dtype.str}, the format requires little-endian int32 (<i4)")
        ok = False
    if n_genes is None:
        return None
    if order.shape != (n_genes,):
        yield Problem(GENE_ORDER_NAME, f"has shape {order.shape}, expected ({n_genes},) (one entry per gene)")
        return None
    if order.dtype.kind not in "iu" or not _is_permutation(order):
        yield Problem(GENE_ORDER_NAME, f"is not a permutation of 0 .. {n_genes - 1}")
        return None
    return order.astype(np.int32) if ok else None


def _is_permutation(order: np.ndarray) -> bool:
    """Whether integer ``order`` holds each of ``0 .. len(order) - 1`` once: one pass, no sort."""
    n = order.shape[0]
    if n == 0:
        return True
    if int(order.min()) < 0 or int(order.max()) >= n:
        return False
    seen = np.zeros(n, dtype=bool)
    seen[order] = True
    return bool(seen.all())


def check_var_names(blob: bytes, n_genes: int | None) -> Checker[list[str] | None]:
    """``var_names.txt``: UTF-8, one name per line, ``n_genes`` lines; returns the names."""
    try:
        names = blob.decode("utf-8").split("\n")
    except UnicodeDecodeError as exc:
        yield Problem(VAR_NAMES_NAME, f"not UTF-8 text ({exc})")
        return None
    if names and names[-1] == "":
        names.pop()
    if n_genes is not None and len(names) != n_genes:
        yield Problem(VAR_NAMES_NAME, f"has {len(names)} lines (gene names) for n_genes = {n_genes}")
        return None
    return names


def check_var_table(
    blob: bytes, n_genes: int | None, *, columns: Callable[[pa.Schema], list[str] | None] | None = None
) -> Checker[pa.Table | None]:
    """``var.parquet``: a readable parquet table with ``n_genes`` rows; returns it.

    ``columns``: given the table's schema, the only columns to read (None: all), for a reader that wants one
    column (a collection's gene keys) and not the cost of the others.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        # Not read_table (it loads pyarrow.dataset); no thread pool: a gene table is small, and pyarrow threads
        # still running at interpreter exit can abort the process (apache/arrow#34314).
        parquet = pq.ParquetFile(pa.BufferReader(blob))
        wanted = None if columns is None else columns(parquet.schema_arrow)
        table = parquet.read(columns=wanted, use_threads=False)
    except Exception as exc:  # anything pyarrow raises means unreadable
        yield Problem(VAR_TABLE_NAME, f"not a readable parquet table ({problem_from_error('', exc).message})")
        return None
    if n_genes is not None and table.num_rows != n_genes:
        yield Problem(VAR_TABLE_NAME, f"has {table.num_rows} rows for n_genes = {n_genes}")
        return None
    return table
