"""The sidecar files: ``gene_order.npy``, ``var_names.txt`` and ``var.parquet`` against ``n_genes``."""

from __future__ import annotations

import io

import numpy as np

from deltacells.storage import Store
from deltacells.validate._access import present, read_object
from deltacells.validate._manifest import Expected
from deltacells.validate._report import Collector, error_message


def check_sidecars(store: Store, expected: Expected, found: Collector) -> None:
    """Check the flagged sidecar files that are present (a missing one is reported by the listing)."""
    n_genes = expected.n_genes
    if expected.flags.get("gene_order.npy") and present(store, "gene_order.npy"):
        blob = read_object(store, "gene_order.npy", found)
        if blob is not None:
            _check_gene_order(blob, n_genes, found)
    if expected.flags.get("var_names.txt") and present(store, "var_names.txt"):
        blob = read_object(store, "var_names.txt", found)
        if blob is not None:
            try:
                names = blob.decode("utf-8").split("\n")
            except UnicodeDecodeError as exc:
                found.add("var_names.txt", f"not UTF-8 text ({exc})")
            else:
                if names and names[-1] == "":
                    names.pop()
                if n_genes is not None and len(names) != n_genes:
                    found.add("var_names.txt", f"has {len(names)} lines (gene names) for n_genes = {n_genes}")
    if expected.flags.get("var.parquet") and present(store, "var.parquet"):
        blob = read_object(store, "var.parquet", found)
        if blob is not None:
            import pyarrow as pa
            import pyarrow.parquet as pq

            try:
                table = pq.read_table(pa.BufferReader(blob))
            except Exception as exc:  # anything pyarrow raises means unreadable
                found.add("var.parquet", f"not a readable parquet table ({error_message(exc)})")
            else:
                if n_genes is not None and table.num_rows != n_genes:
                    found.add("var.parquet", f"has {table.num_rows} rows for n_genes = {n_genes}")


def _check_gene_order(blob: bytes, n_genes: int | None, found: Collector) -> None:
    name = "gene_order.npy"
    try:
        order = np.load(io.BytesIO(blob), allow_pickle=False)
    except Exception as exc:  # np.load raises many kinds for bad bytes
        found.add(name, f"not a readable .npy array ({error_message(exc)})")
        return
    if order.dtype != np.dtype("<i4"):
        found.add(name, f"has dtype {order.dtype.str}, the format requires little-endian int32 (<i4)")
    if n_genes is None:
        return
    if order.shape != (n_genes,):
        found.add(name, f"has shape {order.shape}, expected ({n_genes},) (one entry per gene)")
    elif order.dtype.kind not in "iu" or not np.array_equal(np.sort(order), np.arange(n_genes)):
        found.add(name, f"is not a permutation of 0 .. {n_genes - 1}")
