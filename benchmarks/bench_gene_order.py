"""What reading genes in their original order costs, against the stored order and against anndata's formats.

``read_deltacells`` gives genes in the order they were written (DECISIONS.md 13): each stored column number
is mapped back through ``gene_order.npy`` while rows are decoded, and each row's columns are then sorted (a
radix sort per row), as scipy's canonical CSR has them. This measures, in one run on one machine, a full
read into a float32 CSR from the page cache, on 1 core and on 2 (every thread of the process pinned to them,
``benchmarks/_cpus.py``; deltacells told as many threads), best of ``--repeat`` rounds that interleave:

* ``zstd alone`` on the same frames (every gaps and vals frame decompressed, one thread): the floor; and
  ``zstd alone, into one buffer``, the same frames decompressed into one reused buffer, as the decoder does
  (``decompress()`` returns fresh memory for each frame, whose cost depends on the allocator's state: the
  floor is the smaller of the two);
* ``deltacells, stored order``: ``open_dataset(path, threads=k).read_rows()``;
* ``deltacells, original order``: ``open_dataset(path, threads=k).with_gene_order("original").read_rows()``,
  X alone as the stored order's line reads it;
* ``deltacells, original order (default)``: ``read_deltacells(path, threads=k).X.to_memory()``, the AnnData
  path (opening it too: var, obs names), as anndata's lines below read theirs;
* ``h5ad (uncompressed)``, ``zarr`` (anndata's defaults) and ``h5ad (gzip)``: ``anndata.read_h5ad/zarr(path).X``.

Matrices: the real Visium CytAssist matrix (2,898 x 19,465) and 100,000 of its cells drawn with replacement
(37 M nonzeros). Then why rows are sorted: ``sc.pp.normalize_total`` on the original-order matrix with its
rows left as mapped, against sorted. Usage::

    python benchmarks/bench_gene_order.py --json docs/_data/gene-order.json   # about 4 minutes
    python benchmarks/bench_gene_order.py --quick                               # CI: 20,000 cells, 2 rounds
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import scanpy as sc
import zstandard
from _cpus import pinned, usable
from _frames import dataset_frames
from _record import now, write_json
from _visium import VISIUM, resampled_rows
from scipy import sparse

import deltacells
from deltacells.format import tile_path

#: The contenders, in the order of the table.
CONTENDERS = (
    "zstd alone (floor)",
    "zstd alone, into one buffer",
    "deltacells, stored order",
    "deltacells, original order",
    "deltacells, original order (default)",
    "h5ad (uncompressed)",
    "zarr",
    "h5ad (gzip)",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--cells", type=int, default=100_000, help="cells of the resampled matrix")
    parser.add_argument("--quick", action="store_true", help="20,000 resampled cells, 2 rounds")
    parser.add_argument("--json", type=Path, help="write the results here (docs/_data/gene-order.json)")
    args = parser.parse_args()
    started = now()
    repeat = 2 if args.quick else args.repeat
    visium = sc.read_10x_mtx(VISIUM)
    visium.X = sparse.csr_matrix(visium.X, dtype=np.float32)
    n_cells = 20_000 if args.quick else args.cells
    resampled = visium[resampled_rows(visium.n_obs, n_cells)].copy()
    resampled.obs_names = [f"cell-{i}" for i in range(n_cells)]
    matrices = {
        "visium": (visium, f"Visium CytAssist ({visium.n_obs:,} x {visium.n_vars:,}, real)"),
        "resampled": (resampled, f"{n_cells:,} Visium cells drawn with replacement ({resampled.X.nnz:,} nonzeros)"),
    }
    doc: dict[str, Any] = {"repeat": repeat, "contenders": list(CONTENDERS), "matrices": {}}
    for key, (adata, label) in matrices.items():
        doc["matrices"][key] = measure(adata, label, repeat)
    write_json(args.json, doc, started=started, quick=args.quick)


def measure(adata: ad.AnnData, label: str, repeat: int) -> dict[str, Any]:
    """Every contender on ``adata``, on 1 core and on 2; and ``normalize_total`` on unsorted and sorted rows."""
    cpus = usable()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        deltacells.write_deltacells(adata, root / "ds", progress=False)
        adata.write_h5ad(root / "none.h5ad")
        adata.write_h5ad(root / "gzip.h5ad", compression="gzip")
        adata.write_zarr(root / "x.zarr")
        frames = _frames(root / "ds")
        cache = root / "obs-cache"
        result: dict[str, Any] = {"label": label, "n_cells": adata.n_obs, "nnz": int(adata.X.nnz), "cores": {}}
        for cores in (1, 2):
            if len(cpus) < cores:
                continue
            with pinned(cpus[:cores]):  # every thread of the process (the shared pool's too), not the caller alone
                result["cores"][str(cores)] = best_of(_contenders(root, frames, cache, threads=cores), repeat)
        result["normalize_total_ms"] = _downstream(root / "ds", repeat)
    _print(result)
    return result


def _contenders(root: Path, frames: list[bytes], cache: Path, threads: int) -> dict[str, Callable[[], object]]:
    dctx = zstandard.ZstdDecompressor()

    def zstd_alone() -> None:
        for frame in frames:
            dctx.decompress(frame)

    sizes = [zstandard.frame_content_size(frame) for frame in frames]
    buffer = bytearray(max(sizes, default=0))

    def zstd_into_one_buffer() -> None:
        for frame, size in zip(frames, sizes, strict=True):
            dctx.stream_reader(frame, read_size=len(frame)).readinto(memoryview(buffer)[:size])

    def stored() -> object:
        return deltacells.open_dataset(root / "ds", tile_cache_bytes=0, threads=threads).read_rows()

    def original_x() -> object:
        dataset = deltacells.open_dataset(root / "ds", tile_cache_bytes=0, threads=threads)
        return dataset.with_gene_order("original").read_rows()

    def original() -> object:
        adata = deltacells.read_deltacells(
            root / "ds", obs_columns=[], obs_names=False, cache_dir=cache, tile_cache_bytes=0, threads=threads
        )
        return adata.X.to_memory()

    return {
        "zstd alone (floor)": zstd_alone,
        "zstd alone, into one buffer": zstd_into_one_buffer,
        "deltacells, stored order": stored,
        "deltacells, original order": original_x,
        "deltacells, original order (default)": original,
        "h5ad (uncompressed)": lambda: ad.read_h5ad(root / "none.h5ad").X,
        "zarr": lambda: ad.read_zarr(root / "x.zarr").X,
        "h5ad (gzip)": lambda: ad.read_h5ad(root / "gzip.h5ad").X,
    }


def best_of(contenders: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Seconds of each contender, best of ``repeat`` rounds after one to warm up; rounds interleave them."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for round_ in range(repeat + 1):
        for name, run in contenders.items():
            began = time.perf_counter()
            result = run()
            spent = time.perf_counter() - began
            del result
            if round_:
                times[name].append(spent)
    return {name: min(values) for name, values in times.items()}


def _frames(path: Path) -> list[bytes]:
    """Every gaps and vals frame of the dataset's tiles (what zstd alone decompresses)."""
    return dataset_frames([(path / tile_path(i)).read_bytes() for i in range(deltacells.open_dataset(path).n_tiles)])


def _downstream(path: Path, repeat: int) -> dict[str, float]:
    """``sc.pp.normalize_total`` on the original-order matrix, its rows left as mapped against sorted (ms)."""
    dataset = deltacells.open_dataset(path)
    stored = dataset.read_rows(slice(None))
    columns = np.empty(dataset.n_genes, dtype=stored.indices.dtype)
    columns[dataset.gene_permutation()] = np.arange(dataset.n_genes, dtype=stored.indices.dtype)
    unsorted = sparse.csr_matrix((stored.data, columns[stored.indices], stored.indptr), shape=stored.shape)
    unsorted.has_sorted_indices = False
    canonical = dataset.with_gene_order("original").read_rows(slice(None))
    spent: dict[str, float] = {}
    for name, matrix in (("rows unsorted", unsorted), ("rows sorted", canonical)):
        times = []
        for _ in range(max(2, repeat // 2)):
            one = ad.AnnData(X=matrix.copy())
            began = time.perf_counter()
            sc.pp.normalize_total(one)
            times.append(time.perf_counter() - began)
        spent[name] = min(times) * 1000
    return spent


def _print(result: dict[str, Any]) -> None:
    print(f"full read into CSR, {result['label']}, page cache, best of the rounds:")
    for cores, times in result["cores"].items():
        stored = times["deltacells, stored order"]
        print(f"  {cores} core(s)")
        for name, seconds in times.items():
            print(f"    {name:40s} {seconds * 1000:8.1f} ms   {seconds / stored:5.2f}x stored")
    if {"1", "2"} <= set(result["cores"]):
        one, two = result["cores"]["1"], result["cores"]["2"]
        default = "deltacells, original order (default)"
        print(f"  2 cores against 1, default read: {one[default] / two[default]:.2f}x")
    print("sc.pp.normalize_total on the original-order matrix (ms):", result["normalize_total_ms"])


if __name__ == "__main__":
    main()
