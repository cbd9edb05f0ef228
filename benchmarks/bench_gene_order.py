"""What reading genes in their original order costs: a full read in stored order against the default.

``read_deltacells`` gives genes in the order they were written (DECISIONS.md 13): each stored column number
is mapped back through ``gene_order.npy`` while rows are copied. This measures, in one run on one machine,
open + full read into CSR (``X.to_memory()``, float32, warm page cache, best of ``--repeat`` rounds that
interleave the variants) with

* ``stored``: genes as stored (rows sorted);
* ``original``: the default, rows marked unsorted (``has_sorted_indices = False``);
* ``original, sorted rows``: the same with every row's columns sorted (the alternative that was rejected).

Usage::

    python benchmarks/bench_gene_order.py                      # synthetic 30,000 x 5,000
    python benchmarks/bench_gene_order.py --visium ../shared/data/visium-cytassist
    python benchmarks/bench_gene_order.py --quick
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import anndata as ad
import numpy as np
import scanpy as sc
from scipy import sparse

import deltacells
from deltacells.datasets import synthetic_counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--visium", type=Path, help="the 10x matrix directory (../shared/data/visium-cytassist)")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="a small matrix, 2 repeats")
    args = parser.parse_args()
    repeat = 2 if args.quick else args.repeat
    if args.visium:
        adata, label = sc.read_10x_mtx(args.visium), "Visium CytAssist (2,898 x 19,465, real)"
    else:
        n_cells, n_genes = (3000, 1000) if args.quick else (30_000, 5000)
        adata, label = synthetic_counts(n_cells, n_genes, seed=0), f"synthetic {n_cells:,} x {n_genes:,}"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ds"
        deltacells.write_deltacells(adata, path, progress=False, level=3)
        cache = Path(tmp) / "cache"
        variants = {"stored": "stored", "original (default, rows sorted)": "original"}
        times: dict[str, list[float]] = {name: [] for name in variants}
        for round_ in range(repeat + 1):  # rounds interleave the variants, so that load on the machine hits all alike
            for name, order in variants.items():
                t0 = time.perf_counter()
                deltacells.read_deltacells(
                    path, gene_order=order, obs_columns=[], obs_names=False, cache_dir=cache, tile_cache_bytes=0
                ).X.to_memory()
                if round_:  # the first round warms up
                    times[name].append(time.perf_counter() - t0)
        results = {name: min(values) for name, values in times.items()}
        # Why rows are sorted: scanpy's arithmetic on the same matrix with each row's columns left as mapped
        # (what reading in the original order gave before rows were sorted) against sorted.
        dataset = deltacells.open_dataset(path)
        stored = dataset.read_rows(slice(None))
        columns = np.empty(dataset.n_genes, dtype=stored.indices.dtype)
        columns[dataset.gene_order()] = np.arange(dataset.n_genes, dtype=stored.indices.dtype)
        unsorted = sparse.csr_matrix((stored.data, columns[stored.indices], stored.indptr), shape=stored.shape)
        unsorted.has_sorted_indices = False
        canonical = dataset.with_gene_order("original").read_rows(slice(None))
        downstream = {}
        for name, matrix in (("rows unsorted", unsorted), ("rows sorted", canonical)):
            spent = []
            for _ in range(max(2, repeat // 2)):
                one = ad.AnnData(X=matrix.copy())
                t0 = time.perf_counter()
                sc.pp.normalize_total(one)
                spent.append(time.perf_counter() - t0)
            downstream[name] = min(spent)
    nnz = int(adata.X.nnz)
    print(f"open + full read into CSR, {label}, {nnz:,} nonzeros, best of {repeat}:")
    for name, seconds in results.items():
        print(f"  {name:32s} {seconds * 1000:8.1f} ms   {seconds / results['stored']:5.2f}x stored")
    print("sc.pp.normalize_total on the original-order matrix:")
    for name, seconds in downstream.items():
        print(f"  {name:32s} {seconds * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
