"""deltacells against its peers: bytes, conversion, full reads, random subsets, open time and peak memory.

The peers are other ways to keep the same count matrix, each measured on the same data in the same run:

- anndata's h5ad, with gzip, lzf or no compression, read into memory (``read_h5ad``) or backed
  (``read_h5ad(backed="r")``, rows read on demand);
- anndata's zarr store, read into memory (``read_zarr``) or lazily (``anndata.experimental.read_lazy``);
- TileDB-SOMA (``tiledbsoma.io.from_anndata``; reads with ``Experiment.axis_query`` to scipy);
- zstd alone on deltacells' own frames: every stream of the tiles read is decompressed and nothing else is
  done, the floor under deltacells' decoder.

Data: the real Visium CytAssist matrix (``../shared/data/visium-cytassist``, 2,898 x 19,465) and matrices of
100,000 or 1,000,000 cells made by drawing its cells with replacement (``--sizes visium,100k,1M``; the default
leaves 1M out, it is big on a 24 GB machine). Every store is converted from the same AnnData, loaded in memory
from an uncompressed h5ad; deltacells is written by ``write_deltacells`` with its defaults.

Every measure runs in a fresh interpreter, after a warm-up (imports, numba kernels, a first small read), with
the operating system's page cache warm (the files were just written): conversion time and peak memory; full
read into memory with 1 and 2 threads (where a peer has no thread setting the 2-thread figure is "n/a");
random subsets of 0.1%, 1% and 10% of the cells (sorted random row numbers, the same for every reader); open
time; and the peak resident set size while scanning the whole matrix in blocks of rows. Peak memory is read
from ``VmHWM`` after resetting it (``/proc/self/clear_refs``), above the process's baseline after the warm-up.
Timed reads are repeated in ``--rounds`` interleaved rounds (every reader once per round, in turn) and the
best is kept; ratios to deltacells come from the same run. Every read is checked (nonzeros and sum) against
the source matrix.

A peer whose package is missing is reported as skipped, so ``--quick`` runs in the plain dev environment;
``nox -s bench_peers`` installs all of them (``benchmarks/peers-requirements.txt``; never runtime
dependencies).

Usage::

    python benchmarks/bench_peers.py --quick                          # visium only, one round (CI)
    python benchmarks/bench_peers.py --json docs/_data/peers.json --plots docs/_static/peers
    python benchmarks/bench_peers.py --sizes visium,100k,1M --workdir /tmp/peers --keep
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from _record import output_path
from _rss import reset_peak, status, trim
from _visium import VISIUM, resampled_rows

if TYPE_CHECKING:
    from collections.abc import Iterator

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = VISIUM
SIZES = {"visium": None, "100k": 100_000, "1M": 1_000_000}
FRACTIONS = (0.001, 0.01, 0.1)

#: store -> (packages it needs, how it is written)
STORES: dict[str, tuple[str, ...]] = {
    "deltacells": (),
    "h5ad-gzip": ("h5py",),
    "h5ad-lzf": ("h5py",),
    "h5ad-none": ("h5py",),
    "zarr": ("zarr",),
    "tiledbsoma": ("tiledbsoma",),
}

#: reader -> store it reads, packages it needs, kind ("lazy": opens without reading X; "memory": reads it
#: all), whether it has a thread setting
READERS: dict[str, dict[str, Any]] = {
    "deltacells": {"store": "deltacells", "needs": (), "kind": "lazy", "threads": True},
    "zstd alone": {"store": "deltacells", "needs": ("zstandard",), "kind": "floor", "threads": True},
    "h5ad-gzip memory": {"store": "h5ad-gzip", "needs": ("h5py",), "kind": "memory", "threads": False},
    "h5ad-gzip backed": {"store": "h5ad-gzip", "needs": ("h5py",), "kind": "lazy", "threads": False},
    "h5ad-lzf memory": {"store": "h5ad-lzf", "needs": ("h5py",), "kind": "memory", "threads": False},
    "h5ad-lzf backed": {"store": "h5ad-lzf", "needs": ("h5py",), "kind": "lazy", "threads": False},
    "h5ad-none memory": {"store": "h5ad-none", "needs": ("h5py",), "kind": "memory", "threads": False},
    "h5ad-none backed": {"store": "h5ad-none", "needs": ("h5py",), "kind": "lazy", "threads": False},
    "zarr memory": {"store": "zarr", "needs": ("zarr",), "kind": "memory", "threads": True},
    "zarr lazy": {"store": "zarr", "needs": ("zarr", "xarray"), "kind": "lazy", "threads": True},
    "tiledbsoma": {"store": "tiledbsoma", "needs": ("tiledbsoma",), "kind": "lazy", "threads": True},
}

STORE_SUFFIX = {"deltacells": ".deltacells", "zarr": ".zarr", "tiledbsoma": ".soma"}


def store_path(workdir: Path, size: str, store: str) -> Path:
    return workdir / f"{size}-{store}{STORE_SUFFIX.get(store, '.h5ad')}"


def missing(packages: tuple[str, ...]) -> list[str]:
    return [p for p in packages if importlib.util.find_spec(p) is None]


# ============================================================================================ measuring tools


class Peak:
    """The peak RSS of a block of code, above the RSS when it began (after a trim)."""

    def __enter__(self) -> Peak:
        trim()
        self.baseline = status("VmRSS")
        self.reset = reset_peak()
        return self

    def __exit__(self, *exc: object) -> None:
        self.peak = status("VmHWM")
        self.above = self.peak - self.baseline

    def result(self) -> dict[str, Any]:
        return {"baseline_rss": self.baseline, "peak_rss": self.peak, "peak_above_baseline": self.above}


def _check(X: Any, expected: dict[str, Any], what: str) -> dict[str, Any]:
    """nnz and sum of a scipy matrix against the expected ones; an ``error`` entry where they differ."""
    nnz, total = int(X.nnz), float(np.asarray(X.data, dtype=np.float64).sum())
    out = {"nnz": nnz, "sum": total}
    if (
        X.shape != tuple(expected["shape"])
        or nnz != expected["nnz"]
        or abs(total - expected["sum"]) > 1e-6 * max(1.0, abs(expected["sum"]))
    ):
        out["error"] = f"{what}: got shape {X.shape}, nnz {nnz}, sum {total}; expected {expected}"
    return out


# ============================================================================================ the readers
#
# Each reader is a set of functions run inside the child process: open(path, threads) -> handle (lazy
# readers), full(path, threads) -> scipy CSR (open and read everything), subset(handle, idx) -> CSR,
# rows(handle, lo, hi) -> CSR (for the scan), and warm(path, threads) (imports, JIT, a first small read).


def _set_threads(threads: int) -> None:
    """Thread settings read from the environment, set before anything is imported."""
    for name in ("DELTACELLS_THREADS", "NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = str(threads)


def _csr(X: Any, threads: int = 1) -> Any:
    """A scipy ``csr_matrix`` of ``X`` (a dask array is computed first, on ``threads`` threads)."""
    from scipy import sparse

    if hasattr(X, "compute"):  # read_lazy's X is a dask array of sparse chunks
        X = X.compute(scheduler="threads", num_workers=threads)
    return X if isinstance(X, sparse.csr_matrix) else sparse.csr_matrix(X)


class DeltacellsReader:
    def __init__(self, threads: int, cache_dir: str) -> None:
        self.threads, self.cache_dir = threads, cache_dir

    def open(self, path: str) -> Any:
        import deltacells

        return deltacells.read_deltacells(path, threads=self.threads, cache_dir=self.cache_dir)

    def full(self, path: str) -> Any:
        return self.open(path).X.to_memory()

    def subset(self, adata: Any, idx: np.ndarray) -> Any:
        return adata[idx].X

    def rows(self, adata: Any, lo: int, hi: int) -> Any:
        return adata.X[lo:hi]

    def warm(self, path: str) -> None:
        self.open(path).X[:10]
        from deltacells._kernel_loading import load_compiled_kernels

        load_compiled_kernels()  # a small read runs numpy's versions while numba's kernels load: wait for them


class FloorReader:
    """zstd alone: read deltacells' tile objects and decompress every stream of them, nothing more."""

    def __init__(self, threads: int) -> None:
        self.threads = threads

    def open(self, path: str) -> Any:
        import deltacells

        return deltacells.open_dataset(path, threads=self.threads)

    def _decompress(self, ds: Any, tiles: Any) -> Any:
        from concurrent.futures import ThreadPoolExecutor

        import zstandard

        from deltacells.codec._layout import (  # the tile layout: header, then a table of stream offsets
            CELL_HI,
            CELL_LO,
            GAPS_LEN,
            GAPS_OFF,
            GEXC_LEN,
            GEXC_OFF,
            VALS_LEN,
            VALS_OFF,
            VEXC_LEN,
            VEXC_OFF,
            TileHeader,
            read_chunk_table,
        )
        from deltacells.format._names import tile_path

        streams = ((GAPS_OFF, GAPS_LEN), (VALS_OFF, VALS_LEN), (VEXC_OFF, VEXC_LEN), (GEXC_OFF, GEXC_LEN))

        def one(work: tuple[int, np.ndarray | None]) -> tuple[int, int]:
            tile, cells = work
            view = memoryview(ds.store.read(tile_path(int(tile))))
            header = TileHeader.unpack(view)
            dctx = zstandard.ZstdDecompressor()
            out = 0
            for row in read_chunk_table(view, header):
                if cells is not None and not np.any((cells >= row[CELL_LO]) & (cells < row[CELL_HI])):
                    continue  # no cell wanted in this chunk: deltacells does not decode it either
                for off, length in streams:
                    if row[length]:
                        lo = int(row[off])
                        out += len(dctx.decompress(view[lo : lo + int(row[length])]))
            return header.nnz, out

        if self.threads > 1:
            with ThreadPoolExecutor(self.threads) as pool:
                done = list(pool.map(one, tiles))
        else:
            done = [one(t) for t in tiles]
        return FloorResult(ds.shape, sum(d[0] for d in done), sum(d[1] for d in done))

    def full(self, path: str) -> Any:
        ds = self.open(path)
        return self._decompress(ds, [(t, None) for t in range(ds.n_tiles)])

    def subset(self, ds: Any, idx: np.ndarray) -> Any:
        """The chunks that hold the cells (deltacells decodes no other chunk of a tile for a subset)."""
        tiles, local = ds.tile_of(idx)
        bounds = np.flatnonzero(np.diff(tiles)) + 1
        work = [(int(t[0]), c) for t, c in zip(np.split(tiles, bounds), np.split(local, bounds), strict=True)]
        return self._decompress(ds, work)

    def warm(self, path: str) -> None:
        self._decompress(self.open(path), [(0, None)])


class FloorResult:
    """What zstd alone gives: bytes, not a matrix (the checks skip it)."""

    def __init__(self, shape: tuple[int, int], nnz: int, nbytes: int) -> None:
        self.shape, self.tile_nnz, self.nbytes = shape, nnz, nbytes


class H5adReader:
    def __init__(self, backed: bool) -> None:
        self.backed = backed

    def open(self, path: str) -> Any:
        import anndata as ad

        return ad.read_h5ad(path, backed="r" if self.backed else None)

    def full(self, path: str) -> Any:
        import anndata as ad

        if self.backed:
            adata = self.open(path)
            X = _csr(adata.X.to_memory())
            adata.file.close()
            return X
        return _csr(ad.read_h5ad(path).X)

    def subset(self, adata: Any, idx: np.ndarray) -> Any:
        return _csr(adata[idx].X)

    def rows(self, adata: Any, lo: int, hi: int) -> Any:
        return _csr(adata.X[lo:hi])

    def warm(self, path: str) -> None:
        import anndata as ad

        adata = ad.read_h5ad(path, backed="r")
        _csr(adata.X[:10])
        adata.file.close()


class ZarrReader:
    def __init__(self, lazy: bool, threads: int) -> None:
        import zarr

        self.lazy, self.threads = lazy, threads
        zarr.config.set({"threading.max_workers": threads})
        with contextlib.suppress(Exception):  # blosc has threads of its own, where the store uses it
            import numcodecs.blosc

            numcodecs.blosc.set_nthreads(threads)

    def open(self, path: str) -> Any:
        import anndata as ad

        if self.lazy:
            from anndata.experimental import read_lazy

            return read_lazy(path)
        return ad.read_zarr(path)

    def full(self, path: str) -> Any:
        import anndata as ad

        if self.lazy:
            return _csr(self.open(path).X, self.threads)
        return _csr(ad.read_zarr(path).X)

    def subset(self, adata: Any, idx: np.ndarray) -> Any:
        return _csr(adata.X[idx], self.threads)

    def rows(self, adata: Any, lo: int, hi: int) -> Any:
        return _csr(adata.X[lo:hi], self.threads)

    def warm(self, path: str) -> None:
        from anndata.experimental import read_lazy

        _csr(read_lazy(path).X[:10], self.threads)


class SomaReader:
    def __init__(self, threads: int) -> None:
        self.threads = threads

    def context(self) -> Any:
        import tiledbsoma

        config = {
            "sm.compute_concurrency_level": str(self.threads),
            "sm.io_concurrency_level": str(self.threads),
            "soma.compute_concurrency_level": str(self.threads),
        }
        return tiledbsoma.SOMATileDBContext(tiledb_config=config)

    def open(self, path: str) -> Any:
        import tiledbsoma

        return tiledbsoma.Experiment.open(path, context=self.context())

    def _query(self, exp: Any, obs_coords: Any) -> Any:
        """``axis_query`` on cells, its X to a scipy CSR (rows in the order of the query's cells)."""
        import tiledbsoma
        from scipy import sparse

        n_genes = int(exp.ms["RNA"].var.count)
        with exp.axis_query("RNA", obs_query=tiledbsoma.AxisQuery(coords=(obs_coords,))) as query:
            table = query.X("data").tables().concat()
            rows = query.indexer.by_obs(table["soma_dim_0"])
            cols = table["soma_dim_1"].to_numpy()
            data = table["soma_data"].to_numpy()
            n = query.n_obs
        return sparse.csr_matrix((data, (rows, cols)), shape=(n, n_genes))

    def full(self, path: str) -> Any:
        import tiledbsoma.io

        with self.open(path) as exp:
            return _csr(tiledbsoma.io.to_anndata(exp, measurement_name="RNA", X_layer_name="data").X)

    def subset(self, exp: Any, idx: np.ndarray) -> Any:
        return self._query(exp, idx)

    def rows(self, exp: Any, lo: int, hi: int) -> Any:
        return self._query(exp, slice(lo, hi - 1))  # SOMA slices include their end

    def warm(self, path: str) -> None:
        with self.open(path) as exp:
            self._query(exp, slice(0, 9))


def make_reader(name: str, threads: int, cache_dir: str) -> Any:
    if name == "deltacells":
        return DeltacellsReader(threads, cache_dir)
    if name == "zstd alone":
        return FloorReader(threads)
    if name.startswith("h5ad"):
        return H5adReader(backed=name.endswith("backed"))
    if name.startswith("zarr"):
        return ZarrReader(lazy=name.endswith("lazy"), threads=threads)
    if name == "tiledbsoma":
        return SomaReader(threads)
    msg = f"unknown reader {name!r}"
    raise ValueError(msg)


def _close(handle: Any) -> None:
    for attr in ("file",):  # a backed AnnData's h5py file
        with contextlib.suppress(Exception):
            getattr(handle, attr).close()
    with contextlib.suppress(Exception):
        if hasattr(handle, "close") and not hasattr(handle, "X"):
            handle.close()


# ============================================================================================ child tasks


def _write(store: str, adata: Any, out: Path) -> None:
    if out.is_dir():
        shutil.rmtree(out)
    elif out.exists():
        out.unlink()
    if store == "deltacells":
        import deltacells

        deltacells.write_deltacells(adata, out, progress=False, overwrite=True)  # the defaults: zstd level...
    elif store.startswith("h5ad"):
        compression = store.removeprefix("h5ad-")
        adata.write_h5ad(out, compression=None if compression == "none" else compression)
    elif store == "zarr":
        adata.write_zarr(out)
    elif store == "tiledbsoma":
        import tiledbsoma.io

        tiledbsoma.io.from_anndata(str(out), adata, measurement_name="RNA", X_layer_name="data")
    else:
        msg = f"unknown store {store!r}"
        raise ValueError(msg)


def task_convert(spec: dict[str, Any]) -> dict[str, Any]:
    """Convert the source h5ad (loaded in memory first, not timed) into one store, after a warm-up (imports,
    numba kernels: a write of the first 10 cells)."""
    import anndata as ad

    store, out = spec["store"], Path(spec["out"])
    backed = spec.get("convert_from") == "backed"
    adata = ad.read_h5ad(spec["source"], backed="r" if backed else None)
    warm = out.with_name(out.name + ".warm-up")
    _write(store, adata[:10].to_memory() if backed else adata[:10].copy(), warm)
    shutil.rmtree(warm) if warm.is_dir() else warm.unlink()
    with Peak() as peak:
        began = time.perf_counter()
        _write(store, adata, out)
        seconds = time.perf_counter() - began
    return {"seconds": seconds, **peak.result()}


def task_read(spec: dict[str, Any]) -> dict[str, Any]:
    """Open, full read and subsets of one reader with one thread count, after a warm-up."""
    reader = make_reader(spec["reader"], spec["threads"], spec["cache_dir"])
    path, expected, repeats = spec["path"], spec["expected"], spec["repeats"]
    reader.warm(path)
    result: dict[str, Any] = {"errors": []}
    if spec["kind"] == "lazy":
        times = []
        for _ in range(repeats):
            began = time.perf_counter()
            handle = reader.open(path)
            times.append(time.perf_counter() - began)
            _close(handle)
        result["open_s"] = min(times)
    times = []
    for r in range(repeats):
        with Peak() as peak:
            began = time.perf_counter()
            X = reader.full(path)
            times.append(time.perf_counter() - began)
        if r == 0:
            result["full_peak"] = peak.result()
            if not isinstance(X, FloorResult):
                check = _check(X, expected["full"], "full read")
                result["full_check"] = check
                if "error" in check:
                    result["errors"].append(check["error"])
        del X
    result["full_s"] = min(times)
    if spec["kind"] != "memory":
        result["subset_s"] = {}
        for key, idx_file in spec["subsets"].items():
            idx = np.load(idx_file)
            times = []
            for r in range(repeats):
                handle = reader.open(path)  # a fresh one: no tile or chunk cached from the last repeat
                began = time.perf_counter()
                X = reader.subset(handle, idx)
                times.append(time.perf_counter() - began)
                if r == 0 and not isinstance(X, FloorResult):
                    check = _check(X, expected["subsets"][key], f"subset {key}")
                    if "error" in check:
                        result["errors"].append(check["error"])
                del X
                _close(handle)
            result["subset_s"][key] = min(times)
    return result


def task_scan(spec: dict[str, Any]) -> dict[str, Any]:
    """Peak RSS while reading the whole matrix in blocks of rows (memory readers: all of it, then blocks)."""
    reader = make_reader(spec["reader"], spec["threads"], spec["cache_dir"])
    path, n, block = spec["path"], spec["n_cells"], spec["block_rows"]
    reader.warm(path)
    nnz, total = 0, 0.0
    with Peak() as peak:
        began = time.perf_counter()
        handle = reader.open(path)
        for lo in range(0, n, block):
            X = reader.rows(handle, lo, min(n, lo + block))
            nnz += int(X.nnz)
            total += float(np.asarray(X.data, dtype=np.float64).sum())
            del X
        seconds = time.perf_counter() - began
    result = {"seconds": seconds, **peak.result(), "errors": []}
    expected = spec["expected"]
    if nnz != expected["nnz"] or abs(total - expected["sum"]) > 1e-6 * max(1.0, abs(expected["sum"])):
        result["errors"].append(f"scan: nnz {nnz}, sum {total}; expected {expected}")
    _close(handle)
    return result


def child_main(spec: dict[str, Any]) -> dict[str, Any]:
    import warnings

    warnings.filterwarnings("ignore")
    if spec["task"] == "batch":
        return {"results": [child_main(one) for one in spec["specs"]]}
    task = {"convert": task_convert, "read": task_read, "scan": task_scan}[spec["task"]]
    try:
        return task(spec)
    except Exception as exc:  # reported, not raised: one peer failing must not stop the others
        return {"failed": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}


def run_child(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One task in a fresh interpreter (threads set in its environment before any import)."""
    env = dict(os.environ)
    threads = spec.get("threads", 2)
    for name in ("DELTACELLS_THREADS", "NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = str(threads)
    env["PYTHONWARNINGS"] = "ignore"
    command = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
    try:
        out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"failed": f"timed out after {timeout:.0f} s"}
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        return {"failed": f"exit status {out.returncode}", "traceback": out.stderr[-4000:]}
    return json.loads(lines[-1])


# ============================================================================================ the data


def load_visium(path: Path) -> Any:
    import anndata as ad
    import scanpy as sc

    adata = sc.read_10x_mtx(path)
    from scipy import sparse

    X = sparse.csr_matrix(adata.X, dtype=np.float32)
    X.sort_indices()
    return ad.AnnData(X=X, obs=adata.obs[[]], var=adata.var[[]])


def make_source(workdir: Path, size: str, base: Any, seed: int) -> dict[str, Any]:
    """The source h5ad (uncompressed) of one size, and its figures; reused when it is already there."""
    import anndata as ad

    source = workdir / f"{size}-source.h5ad"
    info_file = workdir / f"{size}-source.json"
    if source.exists() and info_file.exists():
        return json.loads(info_file.read_text())
    n_cells = SIZES[size]
    if n_cells is None:
        adata = base
    else:
        rows = resampled_rows(base.n_obs, n_cells, seed)
        adata = ad.AnnData(X=base.X[rows], var=base.var)
        adata.obs_names = [f"{name}-{i}" for i, name in enumerate(base.obs_names[rows])]
    adata.write_h5ad(source)
    X = adata.X
    per_cell = np.diff(X.indptr)
    info = {
        "size": size,
        "source": str(source),
        "n_cells": int(X.shape[0]),
        "n_genes": int(X.shape[1]),
        "nnz": int(X.nnz),
        "sum": float(X.data.sum(dtype=np.float64)),
        "nnz_per_cell_mean": float(per_cell.mean()),
        "nnz_per_cell_median": float(np.median(per_cell)),
        "density": float(X.nnz / (X.shape[0] * X.shape[1])),
        "resampled": n_cells is not None,
        "seed": seed if n_cells is not None else None,
    }
    # the random subsets: sorted row numbers, the same for every reader, and what they must give
    rng = np.random.default_rng(seed + 1)
    info["subsets"] = {}
    for fraction in FRACTIONS:
        k = max(1, round(fraction * info["n_cells"]))
        idx = np.sort(rng.choice(info["n_cells"], size=k, replace=False))
        idx_file = workdir / f"{size}-subset-{fraction}.npy"
        np.save(idx_file, idx)
        sub = X[idx]
        info["subsets"][str(fraction)] = {
            "file": str(idx_file),
            "cells": int(k),
            "shape": [int(k), info["n_genes"]],
            "nnz": int(sub.nnz),
            "sum": float(sub.data.sum(dtype=np.float64)),
        }
    info_file.write_text(json.dumps(info, indent=1))
    del adata, X
    trim()
    return info


def dir_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def x_bytes(store: str, path: Path) -> int | None:
    """Bytes of the count matrix alone (no obs, var or metadata)."""
    try:
        if store == "deltacells":
            return dir_bytes(path / "tiles")
        if store.startswith("h5ad"):
            import h5py

            with h5py.File(path, "r") as f:
                return sum(int(f["X"][k].id.get_storage_size()) for k in ("data", "indices", "indptr"))
        if store == "zarr":
            return dir_bytes(path / "X")
        if store == "tiledbsoma":
            return dir_bytes(path / "ms" / "RNA" / "X" / "data")
    except Exception:
        return None
    return None


def store_details(store: str, path: Path) -> dict[str, Any]:
    """What each store was written with (deltacells: its manifest's settings; zarr: its codecs)."""
    out: dict[str, Any] = {}
    with contextlib.suppress(Exception):
        if store == "deltacells":
            manifest = json.loads((path / "manifest.json").read_text())
            out = {k: manifest.get(k) for k in ("zstd_level", "tile_size", "n_chunks", "format_version")}
            out["n_tiles"] = manifest.get("n_tiles", len(manifest.get("tile_cells", []) or []))
            out = {k: v for k, v in out.items() if v is not None}
        elif store == "zarr":
            import zarr

            data = zarr.open_group(str(path), mode="r")["X"]["data"]
            out = {"zarr_format": data.metadata.zarr_format, "codecs": str(data.compressors)[:200]}
            out["chunks"] = list(data.chunks)
        elif store.startswith("h5ad"):
            import h5py

            with h5py.File(path, "r") as f:
                d = f["X"]["data"]
                out = {"compression": d.compression, "chunks": list(d.chunks) if d.chunks else None}
    return out


# ============================================================================================ the run


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["memory_bytes"] = int(line.split()[1]) * 1024
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    gb = info.get("memory_bytes", 0) / 2**30
    info["label"] = f"{info['system']}, {info['usable_cpus']} cores, {gb:.0f} GB, Python {info['python']}"
    return info


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in ("deltacells", "anndata", "h5py", "zarr", "tiledbsoma", "zstandard", "numpy", "scipy", "numba"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def ratio(peer: Any, ours: Any) -> float | None:
    if isinstance(peer, (int, float)) and isinstance(ours, (int, float)) and ours > 0:
        return peer / ours
    return None


def best(old: Any, new: Any) -> Any:
    if isinstance(old, (int, float)) and isinstance(new, (int, float)):
        return min(old, new)
    return new if old is None else old


def merge_read(into: dict[str, Any], result: dict[str, Any]) -> None:
    """Keep the best time of each measure over the rounds (the first round's memory figures)."""
    for key in ("open_s", "full_s"):
        if key in result:
            into[key] = best(into.get(key), result[key])
    for key, value in result.get("subset_s", {}).items():
        into.setdefault("subset_s", {})[key] = best(into.get("subset_s", {}).get(key), value)
    for key in ("full_peak", "full_check"):
        if key in result and key not in into:
            into[key] = result[key]
    into.setdefault("errors", []).extend(e for e in result.get("errors", []) if e not in into["errors"])


def execute(specs: list[dict[str, Any]], args: argparse.Namespace) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Run the tasks, each in a fresh interpreter, yielding ``(spec, result)`` as each ends; with ``--batch``,
    those of one reader (or all the conversions) in one interpreter, in turn (faster: for ``--quick``, whose
    figures do not matter)."""
    if not args.batch:
        for spec in specs:
            yield spec, run_child(spec, args.timeout)
        return
    groups: dict[str, list[dict[str, Any]]] = {}
    for spec in specs:
        groups.setdefault(spec.get("reader", spec["task"]), []).append(spec)
    for members in groups.values():
        batch = {"task": "batch", "specs": members, "threads": max(args.threads)}
        out = run_child(batch, args.timeout * len(members))
        for k, spec in enumerate(members):
            yield spec, out if "failed" in out else out["results"][k]


def run_size(size: str, info: dict[str, Any], args: argparse.Namespace, workdir: Path, log: Any) -> dict[str, Any]:
    stores: dict[str, dict[str, Any]] = {}
    specs = []
    for store, needs in STORES.items():
        if store not in args.stores:
            continue
        lacking = missing(needs)
        if lacking:
            stores[store] = {"status": f"skipped: {', '.join(lacking)} not installed"}
            log(f"  {store:12s} skipped ({', '.join(lacking)} not installed)")
            continue
        out = store_path(workdir, size, store)
        spec = {
            "task": "convert",
            "store": store,
            "out": str(out),
            "source": info["source"],
            "convert_from": args.convert_from,
            "threads": max(args.threads),
        }
        specs += [spec] * max(1, args.convert_repeats)
    conversions: dict[str, dict[str, Any]] = {}
    for spec, result in execute(specs, args):
        conversion = conversions.get(spec["store"])
        if conversion is not None and "failed" in conversion:
            continue
        if conversion is None or "failed" in result:
            conversions[spec["store"]] = result
        else:  # the best time of the repeats; the peak memory of the first
            conversion["seconds"] = min(conversion["seconds"], result["seconds"])
    for store, conversion in conversions.items():
        out = store_path(workdir, size, store)
        if "failed" in conversion:
            stores[store] = {"status": f"error: {conversion['failed']}", "traceback": conversion.get("traceback")}
            log(f"  {store:12s} FAILED: {conversion['failed']}\n{conversion.get('traceback', '')}")
            continue
        total, xb = dir_bytes(out), x_bytes(store, out)
        stores[store] = {
            "status": "ok",
            "bytes": total,
            "x_bytes": xb,
            "x_bytes_per_nnz": xb / info["nnz"] if xb else None,
            "bytes_per_nnz": total / info["nnz"],
            "convert_s": conversion["seconds"],
            "convert_peak_rss": conversion["peak_rss"],
            "convert_peak_above_baseline": conversion["peak_above_baseline"],
            "details": store_details(store, out),
        }
        s = stores[store]
        log(
            f"  {store:12s} {total / 1e6:9.2f} MB ({xb / info['nnz'] if xb else float('nan'):5.2f} B/nnz in X)  "
            f"convert {s['convert_s']:7.2f} s  peak +{s['convert_peak_above_baseline'] / 2**20:7.0f} MB"
        )

    readers: dict[str, dict[str, Any]] = {}
    plan: list[tuple[str, int]] = []
    for name, spec in READERS.items():
        if name not in args.readers:
            continue
        lacking = missing(spec["needs"])
        store_status = stores.get(spec["store"], {}).get("status", "skipped: store not written")
        if lacking:
            readers[name] = {"status": f"skipped: {', '.join(lacking)} not installed"}
        elif store_status != "ok":
            readers[name] = {"status": f"skipped: store {spec['store']} {store_status}"}
        else:
            readers[name] = {"status": "ok", "store": spec["store"], "kind": spec["kind"], "threads": {}}
            for threads in args.threads:
                if threads == 1 or spec["threads"]:
                    readers[name]["threads"][str(threads)] = {}
                    plan.append((name, threads))
                else:
                    readers[name]["threads"][str(threads)] = "n/a"
    expected = {
        "full": {"shape": [info["n_cells"], info["n_genes"]], "nnz": info["nnz"], "sum": info["sum"]},
        "subsets": dict(info["subsets"].items()),
    }
    subsets = {k: v["file"] for k, v in info["subsets"].items()}
    cache_dir = str(workdir / "obs-cache")
    specs = []
    for round_ in range(args.rounds):
        order = plan if round_ % 2 == 0 else plan[::-1]  # interleaved, and each reader first in turn
        for name, threads in order:
            spec = READERS[name]
            specs.append({
                "task": "read",
                "reader": name,
                "kind": spec["kind"],
                "threads": threads,
                "round": round_ + 1,
                "path": str(store_path(workdir, size, spec["store"])),
                "expected": expected,
                "subsets": subsets,
                "repeats": args.repeats,
                "cache_dir": cache_dir,
            })  # fmt: skip
    # peak memory while scanning in blocks of rows, once, with the most threads
    block = args.block_rows or max(256, -(-info["n_cells"] // 10))
    for name, entry in readers.items():
        if entry["status"] != "ok" or READERS[name]["kind"] == "floor":
            continue
        spec = READERS[name]
        specs.append({
            "task": "scan",
            "reader": name,
            "threads": max(args.threads) if spec["threads"] else 1,
            "path": str(store_path(workdir, size, spec["store"])),
            "n_cells": info["n_cells"],
            "block_rows": block,
            "expected": expected["full"],
            "cache_dir": cache_dir,
        })  # fmt: skip
    for spec, result in execute(specs, args):
        name, threads, entry = spec["reader"], spec["threads"], readers[spec["reader"]]
        if spec["task"] == "scan":
            if "failed" in result:
                entry["scan"] = {"status": f"error: {result['failed']}", "traceback": result.get("traceback")}
                log(f"  scan {name} FAILED: {result['failed']}\n{result.get('traceback', '')}")
                continue
            entry["scan"] = {**result, "threads": threads, "block_rows": block}
            log(
                f"  scan {name:18s} peak +{result['peak_above_baseline'] / 2**20:7.1f} MB "
                f"({result['seconds']:.2f} s)" + (f"  ERRORS {result['errors']}" if result["errors"] else "")
            )
            continue
        if "failed" in result:
            entry["status"] = f"error: {result['failed']}"
            entry["traceback"] = result.get("traceback")
            log(f"  read {name} ({threads} threads) FAILED: {result['failed']}\n{result.get('traceback', '')}")
            continue
        merge_read(entry["threads"][str(threads)], result)
        subs = " ".join(f"{float(k):g}:{v * 1e3:8.1f}" for k, v in result.get("subset_s", {}).items())
        log(
            f"  round {spec['round']} {name:18s} {threads}t  full {result['full_s']:7.3f} s  "
            f"open {result.get('open_s', float('nan')) * 1e3:7.1f} ms  subsets ms {subs}"
            + (f"  ERRORS {result['errors']}" if result.get("errors") else "")
        )
    return {"data": info, "stores": stores, "readers": readers, "ratios": ratios(stores, readers)}


def ratios(stores: dict[str, Any], readers: dict[str, Any]) -> dict[str, Any]:
    """Each peer's figure divided by deltacells' (above 1: deltacells smaller, faster or leaner)."""
    out: dict[str, Any] = {"stores": {}, "readers": {}}
    ours = stores.get("deltacells", {})
    for name, s in stores.items():
        if name == "deltacells" or s.get("status") != "ok" or ours.get("status") != "ok":
            continue
        out["stores"][name] = {
            k: ratio(s.get(k), ours.get(k)) for k in ("bytes", "x_bytes", "convert_s", "convert_peak_above_baseline")
        }
    mine = readers.get("deltacells", {})
    if mine.get("status") != "ok":
        return out
    for name, r in readers.items():
        if name == "deltacells" or r.get("status") != "ok":
            continue
        entry: dict[str, Any] = {}
        for threads, slot in r["threads"].items():
            base = mine["threads"].get(threads)
            if not isinstance(slot, dict) or not isinstance(base, dict):
                continue
            entry[f"full_s@{threads}"] = ratio(slot.get("full_s"), base.get("full_s"))
            entry[f"open_s@{threads}"] = ratio(slot.get("open_s"), base.get("open_s"))
            for key, value in slot.get("subset_s", {}).items():
                entry[f"subset_{key}_s@{threads}"] = ratio(value, base.get("subset_s", {}).get(key))
        scan, base_scan = r.get("scan", {}), mine.get("scan", {})
        entry["scan_peak_above_baseline"] = ratio(scan.get("peak_above_baseline"), base_scan.get("peak_above_baseline"))
        out["readers"][name] = {k: v for k, v in entry.items() if v is not None}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="visium,100k", help="among visium, 100k, 1M (default: visium,100k)")
    parser.add_argument("--quick", action="store_true", help="visium only, one round (for CI: the code cannot rot)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the visium-cytassist 10x mtx folder")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of timed reads (best kept)")
    parser.add_argument("--repeats", type=int, default=2, help="repeats of each timed read within a round")
    parser.add_argument("--convert-repeats", type=int, default=1)
    parser.add_argument(
        "--convert-from",
        choices=("memory", "backed"),
        default="memory",
        help="convert from the source AnnData in memory (default) or backed (h5ad opened with backed='r': "
        "tiledbsoma then ingests in pieces; needed for 1M cells on a 24 GB machine)",
    )
    parser.add_argument("--threads", default="1,2", help="thread counts for reads (default: 1,2)")
    parser.add_argument("--block-rows", type=int, default=0, help="rows per block in the scan (default: n/10)")
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--readers", default=",".join(READERS))
    parser.add_argument("--batch", action="store_true", help="one interpreter per reader, not per measure")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds for one child process")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the data here (reused between runs)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary working directory")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--plots", type=Path, default=None, help="write the PNG charts to this folder")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        spec = json.loads(args.child)
        _set_threads(spec.get("threads", 2))
        print(json.dumps(child_main(spec), default=str))
        return 0

    if args.quick:
        args.sizes, args.rounds, args.repeats, args.batch = "visium", 1, 1, True
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    unknown = [s for s in sizes if s not in SIZES]
    if unknown:
        parser.error(f"unknown sizes {unknown}; choose among {list(SIZES)}")
    args.threads = sorted({int(t) for t in args.threads.split(",")})
    args.stores = [s for s in args.stores.split(",") if s]
    args.readers = [r for r in args.readers.split(",") if r]
    if not (args.data / "matrix.mtx.gz").exists() and not (args.data / "matrix.mtx").exists():
        parser.error(f"no 10x matrix in {args.data} (--data)")

    began = time.perf_counter()
    started = datetime.datetime.now(datetime.UTC)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="deltacells-bench-peers-"))
    workdir.mkdir(parents=True, exist_ok=True)

    def log(message: str) -> None:
        print(message, flush=True)

    info = machine()
    log(f"machine: {info['label']} ({info.get('cpu', '?')}); load {os.getloadavg()}")
    log(f"versions: {versions()}")
    report: dict[str, Any] = {
        "schema": 1,
        "started": started.isoformat(timespec="seconds"),
        "machine": info,
        "versions": versions(),
        "settings": {
            "sizes": sizes,
            "quick": args.quick,
            "rounds": args.rounds,
            "repeats": args.repeats,
            "convert_repeats": args.convert_repeats,
            "convert_from": args.convert_from,
            "threads": args.threads,
            "batch": args.batch,
            "fractions": list(FRACTIONS),
            "seed": args.seed,
        },
        "load_before": os.getloadavg(),
        "sizes": {},
    }
    try:
        base = load_visium(args.data)
        for size in sizes:
            data = make_source(workdir, size, base, args.seed)
            log(
                f"\n{size}: {data['n_cells']:,} cells x {data['n_genes']:,} genes, {data['nnz']:,} nonzeros "
                f"({data['nnz_per_cell_mean']:.0f} per cell on average, median {data['nnz_per_cell_median']:.0f})"
            )
            report["sizes"][size] = run_size(size, data, args, workdir, log)
            zstd = report["sizes"][size]["stores"].get("deltacells", {}).get("details", {}).get("zstd_level")
            report.setdefault("deltacells", {})["zstd_level"] = zstd
    finally:
        if args.workdir is None and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        elif args.keep:
            log(f"kept {workdir}")
    report["load_after"] = os.getloadavg()
    report["duration_s"] = time.perf_counter() - began
    errors = collect_errors(report)
    report["errors"] = errors
    log(f"\n{summary(report)}")
    if args.json:
        args.json = output_path(args.json, quick=args.quick)  # a --quick run never replaces docs/_data's
        args.json.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(report, indent=1, default=str).replace(f"{workdir}{os.sep}", "")  # no local paths
        args.json.write_text(text + "\n")
        log(f"wrote {args.json}")
    if args.plots:
        args.plots = output_path(args.plots, quick=args.quick)
        if missing(("matplotlib",)):
            log("no plots: matplotlib is not installed")
        else:
            sys.path.insert(0, str(HERE))
            from _peers.plots import plot_all  # benchmarks/_peers/plots.py

            for written in plot_all(report, args.plots):
                log(f"wrote {written}")
    log(f"done in {report['duration_s']:.0f} s")
    if errors:
        log("ERRORS:\n" + "\n".join(errors))
        return 1
    return 0


def collect_errors(report: dict[str, Any]) -> list[str]:
    """Wrong results and failures (a skipped peer is not an error)."""
    out = []
    for size, entry in report["sizes"].items():
        for name, s in entry["stores"].items():
            if str(s.get("status", "")).startswith("error"):
                out.append(f"{size} {name}: {s['status']}")
        for name, r in entry["readers"].items():
            if str(r.get("status", "")).startswith("error"):
                out.append(f"{size} {name}: {r['status']}")
            for slot in r.get("threads", {}).values():
                if isinstance(slot, dict):
                    out.extend(f"{size} {name}: {e}" for e in slot.get("errors", []))
            scan = r.get("scan", {})
            if str(scan.get("status", "")).startswith("error"):
                out.append(f"{size} {name} scan: {scan['status']}")
            out.extend(f"{size} {name}: {e}" for e in scan.get("errors", []))
    return out


def _fmt(value: Any, scale: float = 1.0, spec: str = ".3g") -> str:
    return format(value * scale, spec) if isinstance(value, (int, float)) else "n/a"


def summary(report: dict[str, Any]) -> str:
    """The figures as a markdown table per size (times best of the rounds)."""
    lines = [f"Machine: {report['machine']['label']}"]
    for size, entry in report["sizes"].items():
        d = entry["data"]
        lines.append(
            f"\n### {size}: {d['n_cells']:,} cells x {d['n_genes']:,} genes, {d['nnz']:,} nonzeros "
            f"({d['nnz_per_cell_mean']:.0f}/cell)\n"
        )
        lines.append("| store | MB | B/nnz (X) | convert s | convert peak MB |")
        lines.append("|---|---:|---:|---:|---:|")
        for name, s in entry["stores"].items():
            if s.get("status") != "ok":
                lines.append(f"| {name} | {s.get('status')} | | | |")
                continue
            lines.append(
                f"| {name} | {_fmt(s['bytes'], 1e-6)} | {_fmt(s['x_bytes_per_nnz'])} | {_fmt(s['convert_s'])} | "
                f"{_fmt(s['convert_peak_above_baseline'], 2**-20, '.0f')} |"
            )
        keys = [str(f) for f in FRACTIONS]
        head = " | ".join(f"{float(k) * 100:g}% ms" for k in keys)
        lines.append(f"\n| reader | threads | open ms | full s | full peak MB | {head} | scan peak MB |")
        lines.append("|---|---:|---:|---:|---:|" + "---:|" * len(keys) + "---:|")
        for name, r in entry["readers"].items():
            if r.get("status") != "ok":
                lines.append(f"| {name} | {r.get('status')} |" + " |" * (5 + len(keys)))
                continue
            scan = r.get("scan", {}).get("peak_above_baseline")
            for threads, slot in r["threads"].items():
                if not isinstance(slot, dict):
                    lines.append(f"| {name} | {threads} |" + " n/a |" * (4 + len(keys)))
                    continue
                subs = " | ".join(_fmt(slot.get("subset_s", {}).get(k), 1e3) for k in keys)
                peak = slot.get("full_peak", {}).get("peak_above_baseline")
                lines.append(
                    f"| {name} | {threads} | {_fmt(slot.get('open_s'), 1e3)} | {_fmt(slot.get('full_s'))} | "
                    f"{_fmt(peak, 2**-20, '.0f')} | {subs} | {_fmt(scan, 2**-20, '.0f')} |"
                )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
