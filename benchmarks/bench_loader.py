"""Training loaders: shuffled batches of cells per second, and how random those batches are.

``deltacells.CellLoader`` against the loaders a training script would otherwise use, in the same run, on the
same cells, on this machine:

- **annbatch** (``annbatch.Loader`` over its own store: ``DatasetCollection.add_adatas``, which writes a
  pre-shuffled, sharded zarr copy; the loader's defaults: chunks of 512 cells, 32 of them preloaded);
- **scDataset** over a backed h5ad (``BlockShuffling(block_size=16)``, ``fetch_factor=16``: 4,096 cells a
  fetch, as its documentation's example);
- **tiledbsoma-ml** (``ExperimentDataset`` over a TileDB-SOMA experiment written by
  ``tiledbsoma.io.from_anndata``; its defaults: IO batches of 65,536 cells, shuffle chunks of 64);
- **naive**: ``adata[random batch].X`` on a backed h5ad, a fresh random batch each time;
- **deltacells** with its default knobs (blocks of one chunk of a tile, windows of 16,384 cells), with whole
  tiles (``block_size=tile_size``), in the stored gene order (no column map, no sort of each row), and over a
  grid of ``block_size`` x ``buffer_size``.

Every loader yields batches of ``--batch-size`` cells (256) with the label of each cell (an obs column); each
batch's X is made a ``scipy.sparse`` CSR matrix of float32 (what deltacells' ``output="scipy"``, annbatch,
scDataset over h5ad and tiledbsoma-ml's ``return_sparse_X`` give), so the work is the same. A loader runs in
a fresh interpreter, is built, gives ``--warmup`` batches (not timed), then is timed over ``--batches``
batches (or ``--max-seconds``, whichever comes first): cells/s. Rounds are interleaved; the best is kept.
deltacells is also read from a moto S3 server on 127.0.0.1 behind the test suite's recording proxy with
``--latency`` (30 ms) added to every request (as ``bench_object_storage.py``), and so is TileDB-SOMA.

Data: ``--cells`` cells drawn with replacement from the Visium CytAssist matrix (19,465 genes, about 370
nonzeros per cell; ``../shared/data/visium-cytassist`` or ``$DELTACELLS_VISIUM``), with a categorical obs
column ``sample`` constant over runs of consecutive cells (``--samples`` runs of equal length), as an atlas
written sample by sample: batches of consecutive cells hold one sample, truly random ones hold all of them.

Shuffle quality: for each loader, the per-batch frequency of each sample; its spread (standard deviation
over batches, root mean square over samples) against that of truly random batches (``np.random.permutation``
cut into batches; 1.0 is uniform random sampling), and the number of distinct samples per batch. For the
deltacells grid it is computed from the epoch's plan (every batch of an epoch, no data read), which the timed
runs check against the labels the loader actually gave; so is that of the default blocks and windows in tile
groups (``--group-tiles``: the blocks of groups of that many tiles shuffled together, object storage's default
being 64 tiles), what fetching each tile once an epoch from a bucket costs in mixing.

Peers live in benchmark environments only (``nox -s bench_loader``; ``benchmarks/loader-requirements.txt``):
torch's CPU build (scDataset, tiledbsoma-ml) is on Python 3.11 here and annbatch needs 3.12 or later, so
each loader runs in the first interpreter (this one, then each ``--python``) that has its packages; a loader
with none is skipped with a message. ``deltacells (py3.x)`` is deltacells in annbatch's interpreter, for a
comparison on the same Python.

Usage::

    python benchmarks/bench_loader.py --quick                       # tiny, the peers installed (CI)
    nox -s bench_loader -- --json docs/_data/loader.json --plots docs/_static/loader   # the full run
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
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
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from _record import output_path
from _steal import cpu_ticks, steal_share
from _visium import VISIUM, resampled_rows

HERE = Path(__file__).resolve().parent
LABEL = "sample"

#: loader -> the packages its child needs and the store it reads
LOADERS: dict[str, dict[str, Any]] = {
    "deltacells": {"needs": ("deltacells",), "store": "deltacells"},
    "annbatch": {"needs": ("annbatch", "zarr"), "store": "annbatch"},
    "scDataset": {"needs": ("scdataset", "torch", "anndata"), "store": "h5ad"},
    "tiledbsoma-ml": {"needs": ("tiledbsoma_ml", "tiledbsoma", "torch"), "store": "tiledbsoma"},
    "naive": {"needs": ("anndata", "h5py"), "store": "h5ad"},
}
#: store -> packages its conversion needs
STORES: dict[str, tuple[str, ...]] = {
    "deltacells": ("deltacells",),
    "annbatch": ("annbatch", "zarr"),
    "tiledbsoma": ("tiledbsoma",),
}
PROBE = (
    "deltacells",
    "anndata",
    "h5py",
    "zarr",
    "zarrs",
    "annbatch",
    "scdataset",
    "torch",
    "tiledbsoma",
    "tiledbsoma_ml",
    "s3fs",
    "matplotlib",
)


# ============================================================================================ children


def _codes(values: Any, categories: list[str]) -> np.ndarray:
    """Integer codes of labels given as codes, strings or a pandas categorical (a Series or an array)."""
    import pandas as pd

    values = getattr(values, "values", values)  # a Series: its array
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        return values.astype(np.int64)
    return np.asarray(pd.Categorical(np.asarray(values, dtype=object), categories=categories).codes, dtype=np.int64)


def _csr(X: Any) -> Any:
    """A float32 scipy CSR matrix of a batch (the loaders' batches already are, mostly)."""
    from scipy import sparse

    if isinstance(X, sparse.csr_matrix) and X.dtype == np.float32:
        return X
    return sparse.csr_matrix(X, dtype=np.float32)


def _epochs_deltacells(spec: dict[str, Any]) -> Any:
    import deltacells

    loader = deltacells.CellLoader(
        spec["path"],
        batch_size=spec["batch_size"],
        shuffle=True,
        seed=spec["seed"],
        obs_columns=[LABEL],
        block_size=spec.get("block_size"),
        buffer_size=spec.get("buffer_size"),
        group_tiles=spec.get("group_tiles"),
        gene_order=spec.get("gene_order"),
        storage_options=spec.get("storage_options"),
        cache_dir=spec["cache_dir"],
    )
    spec["_info"] = {
        "block_size": loader.block_size, "buffer_size": loader.buffer_size, "group_tiles": loader.group_tiles,
        "prefetch": loader.prefetch,
    }  # fmt: skip

    def epoch(k: int) -> Any:
        loader.set_epoch(k)
        for batch in loader:
            yield batch.X, batch.obs[LABEL]
        # the most whole tiles held at once by tile groups (object storage), and their mean bytes
        held = loader._tiles_held_peak
        spec["_info"]["tiles_held_peak"] = held
        spec["_info"]["tiles_held_peak_mib"] = held * float(np.mean(loader.dataset.manifest.tile_bytes)) / 2**20

    return epoch


def _epochs_annbatch(spec: dict[str, Any]) -> Any:
    import zarr

    if importlib.util.find_spec("zarrs") is not None:  # what annbatch asks for on a local file system
        zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"})
    from annbatch import DatasetCollection, Loader

    kwargs = {k: spec[k] for k in ("chunk_size", "preload_nchunks") if spec.get(k)}
    rng = np.random.default_rng(spec["seed"])
    loader = Loader(batch_size=spec["batch_size"], shuffle=True, rng=rng, preload_to_gpu=False, **kwargs)
    loader.use_collection(DatasetCollection(spec["path"], mode="r"))
    spec["_info"] = {"zarrs": importlib.util.find_spec("zarrs") is not None, **kwargs}

    def epoch(k: int) -> Any:  # its sampler draws a new order from rng each time
        for out in loader:
            yield out["X"], out["obs"][LABEL]

    return epoch


def _epochs_scdataset(spec: dict[str, Any]) -> Any:
    import anndata as ad
    from scdataset import BlockShuffling, scDataset

    adata = ad.read_h5ad(spec["path"], backed="r")
    labels = adata.obs[LABEL].cat.codes.to_numpy()

    def fetch(collection: Any, indices: np.ndarray) -> tuple[Any, np.ndarray]:
        return collection[indices].X, labels[indices]

    def batch(data: tuple[Any, np.ndarray], indices: np.ndarray) -> tuple[Any, np.ndarray]:
        return data[0][indices], data[1][indices]

    block, factor = spec.get("block_size", 16), spec.get("fetch_factor", 16)
    dataset = scDataset(
        adata,
        BlockShuffling(block_size=block),
        batch_size=spec["batch_size"],
        fetch_factor=factor,
        fetch_callback=fetch,
        batch_callback=batch,
        seed=spec["seed"],
    )
    spec["_info"] = {"block_size": block, "fetch_factor": factor}
    return lambda k: iter(dataset)  # each iteration is the next epoch


def _epochs_soma(spec: dict[str, Any]) -> Any:
    import tiledbsoma
    from tiledbsoma_ml import ExperimentDataset

    context = tiledbsoma.SOMATileDBContext(tiledb_config=spec.get("tiledb_config") or {})
    exp = tiledbsoma.Experiment.open(spec["path"], context=context)  # open until the process ends
    dataset = ExperimentDataset(
        exp.axis_query("RNA"),
        layer_name="data",
        obs_column_names=[LABEL],
        batch_size=spec["batch_size"],
        shuffle=True,
        seed=spec["seed"],
        return_sparse_X=True,
    )
    spec["_info"] = {"io_batch_size": dataset.io_batch_size, "shuffle_chunk_size": dataset.shuffle_chunk_size}

    def epoch(k: int) -> Any:
        dataset.set_epoch(k)
        for X, obs in dataset:
            yield X, obs[LABEL]

    return epoch


def _epochs_naive(spec: dict[str, Any]) -> Any:
    import anndata as ad

    adata = ad.read_h5ad(spec["path"], backed="r")
    labels = adata.obs[LABEL].cat.codes.to_numpy()
    size = spec["batch_size"]

    def epoch(k: int) -> Any:
        order = np.random.default_rng((spec["seed"], k)).permutation(adata.n_obs)
        for lo in range(0, adata.n_obs, size):
            idx = np.sort(order[lo : lo + size])  # backed h5ad reads rows in increasing order
            yield adata[idx].X, labels[idx]

    return epoch


#: loader -> a function of the run's spec that makes the loader and returns ``epoch(k)``, an iterator over the
#: batches of epoch ``k`` as ``(X, labels)``
EPOCHS = {
    "deltacells": _epochs_deltacells,
    "annbatch": _epochs_annbatch,
    "scDataset": _epochs_scdataset,
    "tiledbsoma-ml": _epochs_soma,
    "naive": _epochs_naive,
}


def task_load(spec: dict[str, Any]) -> dict[str, Any]:
    """Make a loader, take ``warmup`` batches of epoch 0, then time the whole of epoch 1: cells/s.

    The imports come first (they are not the loader's cost); the warm-up takes the one-time costs (opening,
    caches, JIT); the timed epoch counts from asking for its first batch to its last one, so a loader's reads
    ahead (windows, preloads, IO batches) are inside it. It stops early after ``batches`` batches (0: no limit)
    or ``max_seconds``.
    """
    categories = spec["categories"]
    for module in ("anndata", "pandas", "scipy.sparse", *LOADERS[spec["loader"]]["needs"]):
        importlib.import_module(module)  # CellLoader imports anndata when it is made: a training script has it
    began = time.perf_counter()
    epoch = EPOCHS[spec["loader"]](spec)
    made = time.perf_counter() - began
    warm = epoch(0)
    first = None
    for k, (X, _) in enumerate(warm):
        _csr(X)
        if first is None:
            first = time.perf_counter() - began
        if k + 1 >= spec["warmup"]:
            break
    with contextlib.suppress(Exception):
        warm.close()  # a generator: its loader stops its threads
    labels: list[Any] = []
    cells = nnz = 0
    complete = True
    timed = epoch(1)
    ticks = cpu_ticks()
    t0 = time.perf_counter()
    for k, (X, label) in enumerate(timed):
        X = _csr(X)
        if X.shape != (len(label), spec["n_genes"]):
            msg = f"batch {k}: X of shape {X.shape} for {len(label)} labels and {spec['n_genes']} genes"
            raise AssertionError(msg)
        labels.append(label)
        cells += X.shape[0]
        nnz += int(X.nnz)
        if (spec["batches"] and k + 1 >= spec["batches"]) or time.perf_counter() - t0 > spec["max_seconds"]:
            complete = cells == spec["n_cells"]
            break
    seconds = time.perf_counter() - t0
    stolen = steal_share(ticks, cpu_ticks())
    with contextlib.suppress(Exception):
        timed.close()
    counts = [np.bincount(_codes(lab, categories), minlength=len(categories)).tolist() for lab in labels]
    return {
        "cells_per_s": cells / seconds,
        "seconds": seconds,
        "batches_timed": len(labels),
        "cells_timed": cells,
        "epoch_complete": complete and cells == spec["n_cells"],
        "nnz": nnz,
        "make_s": made,
        "first_batch_s": first,
        "counts": counts,
        "short_batches": [k for k, c in enumerate(counts[:-1]) if sum(c) != spec["batch_size"]],
        "settings": spec.get("_info", {}),
        "steal": stolen,  # the share of the machine's CPU time the hypervisor gave to others (None: unknown)
    }


def task_convert(spec: dict[str, Any]) -> dict[str, Any]:
    """Write one store from the source h5ad (the AnnData loaded in memory first, not timed; annbatch reads the
    h5ad itself, as its ``add_adatas`` does)."""
    import anndata as ad

    store, src, out = spec["store"], spec["source"], Path(spec["out"])
    if out.exists():
        shutil.rmtree(out)
    began = time.perf_counter()
    if store == "deltacells":
        import deltacells

        adata = ad.read_h5ad(src)
        began = time.perf_counter()
        deltacells.write_deltacells(adata, out, progress=False, obs_columns=[LABEL])
    elif store == "tiledbsoma":
        import tiledbsoma.io

        adata = ad.read_h5ad(src)
        began = time.perf_counter()
        tiledbsoma.io.from_anndata(str(out), adata, measurement_name="RNA", X_layer_name="data")
    elif store == "annbatch":
        from annbatch import DatasetCollection

        DatasetCollection(str(out)).add_adatas([src], shuffle=True, rng=np.random.default_rng(spec["seed"]))
    else:
        msg = f"unknown store {store!r}"
        raise ValueError(msg)
    return {"seconds": time.perf_counter() - began}


def child_main(spec: dict[str, Any]) -> dict[str, Any]:
    import warnings

    warnings.filterwarnings("ignore")
    try:
        return {"convert": task_convert, "load": task_load}[spec["task"]](spec)
    except Exception as exc:  # reported, not raised: one peer failing must not stop the others
        return {"failed": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}


def run_child(python: str, spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    command = [python, str(Path(__file__).resolve()), "--child", f.name]
    try:
        out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"failed": f"timed out after {timeout:.0f} s"}
    finally:
        os.unlink(f.name)
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        return {"failed": f"exit status {out.returncode}", "traceback": out.stderr[-4000:]}
    return json.loads(lines[-1])


# ============================================================================================ interpreters


def probe(python: str) -> dict[str, Any]:
    """The Python version of an interpreter and the versions of the packages it has (None: missing)."""
    code = (
        "import importlib.metadata as m, importlib.util as u, json, platform\n"
        f"names = {PROBE!r}\n"
        "def v(n):\n"
        "    if u.find_spec(n) is None: return None\n"
        "    try: return m.version(n.replace('_', '-'))\n"
        "    except m.PackageNotFoundError: return '?'\n"
        "print(json.dumps({'python': platform.python_version(), 'packages': {n: v(n) for n in names}}))\n"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False, timeout=120)
    if out.returncode != 0:
        return {"python": None, "packages": {}, "error": out.stderr[-500:]}
    return json.loads(out.stdout)


def pick(interpreters: dict[str, dict[str, Any]], needs: tuple[str, ...]) -> str | None:
    for python, info in interpreters.items():
        if all(info["packages"].get(n) for n in needs):
            return python
    return None


# ============================================================================================ data


def make_data(args: argparse.Namespace, workdir: Path, log: Any) -> tuple[dict[str, Any], Any]:
    """The source h5ad (uncompressed: what scDataset and the naive loop read, and every store is made from)."""
    import anndata as ad
    import pandas as pd
    import scanpy as sc
    from scipy import sparse

    base = sc.read_10x_mtx(args.data)
    X = sparse.csr_matrix(base.X, dtype=np.float32)
    rows = resampled_rows(X.shape[0], args.cells, args.seed)
    X = X[rows]
    X.sort_indices()
    n_samples = max(1, min(args.samples, args.cells))
    run = -(-args.cells // n_samples)
    categories = [f"s{k:03d}" for k in range(n_samples)]
    codes = np.arange(args.cells) // run
    obs = pd.DataFrame(
        {LABEL: pd.Categorical.from_codes(codes, categories=categories)},
        index=pd.Index([f"c{i}" for i in range(args.cells)]),
    )
    adata = ad.AnnData(X=X, obs=obs, var=pd.DataFrame(index=base.var_names))
    source = workdir / "source.h5ad"
    began = time.perf_counter()
    adata.write_h5ad(source)
    write_s = time.perf_counter() - began
    info = {
        "n_cells": int(X.shape[0]),
        "n_genes": int(X.shape[1]),
        "nnz": int(X.nnz),
        "nnz_per_cell": float(X.nnz / X.shape[0]),
        "samples": n_samples,
        "cells_per_sample": run,
        "categories": categories,
        "source": str(source),
        "h5ad_write_s": write_s,
    }
    log(
        f"data: {info['n_cells']:,} cells x {info['n_genes']:,} genes, {info['nnz']:,} nonzeros "
        f"({info['nnz_per_cell']:.0f} per cell), {n_samples} samples of {run:,} consecutive cells"
    )
    return info, adata


def dir_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# ============================================================================================ shuffle quality


def batch_counts(codes: np.ndarray, n_labels: int, batch_size: int) -> np.ndarray:
    """``int[n_batches, n_labels]``: the cells of each label in each full batch of a stream of label codes."""
    n = codes.shape[0] // batch_size
    rows = np.repeat(np.arange(n), batch_size)
    flat = np.bincount(rows * n_labels + codes[: n * batch_size], minlength=n * n_labels)
    return flat.reshape(n, n_labels)


def quality(counts: Any, batch_size: int) -> dict[str, Any]:
    """The spread of the per-batch frequency of each label (std over batches, RMS over labels), the number of
    distinct labels per batch, and the largest share of one label in a batch (mean over batches)."""
    counts = np.asarray(counts, dtype=np.float64)
    counts = counts[counts.sum(1) == batch_size]  # full batches only
    freq = counts / batch_size
    return {
        "batches": int(counts.shape[0]),
        "spread": float(np.sqrt(np.mean(freq.std(axis=0) ** 2))),
        "distinct": float((counts > 0).sum(1).mean()),
        "top_share": float(freq.max(1).mean()),
    }


def _block_order(block: int | str) -> float:
    """Blocks by size, one chunk (about ``tile_size / n_chunks`` cells, 256 here) among them."""
    return 256.5 if block == "chunk" else float(block)


def _block_label(block: int | str) -> str:
    return "one chunk" if block == "chunk" else f"{block:,}"


def plan_codes(
    path: str,
    labels: np.ndarray,
    block: int | str,
    buffer: int,
    batch_size: int,
    seed: int,
    epoch: int = 0,
    group_tiles: int = 0,
) -> np.ndarray:
    """The label of every cell of an epoch of a ``CellLoader``, in the order it yields them (from its plan)."""
    import deltacells

    loader = deltacells.CellLoader(
        path, batch_size=batch_size, seed=seed, block_size=block, buffer_size=buffer, group_tiles=group_tiles
    )
    loader.set_epoch(epoch)
    plan = loader._plan()  # the epoch's plan: which cells each batch holds, drawn from the seed (no data read)
    parts = [loader._source.cell_numbers(plan.window(a, b).positions) for a, b in plan.windows()]
    return labels[np.concatenate(parts)]


def shuffle_grid(
    path: str, labels: np.ndarray, n_labels: int, args: argparse.Namespace
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """Shuffle quality from the plan: the grid of ``block_size`` x ``buffer_size``; tile groups; random batches."""
    grid = []
    for block in args.block_sizes:
        for buffer in args.buffer_sizes:
            codes = plan_codes(path, labels, block, buffer, args.batch_size, args.seed)
            grid.append({
                "block_size": block,
                "buffer_size": buffer,
                **quality(batch_counts(codes, n_labels, args.batch_size), args.batch_size),
            })  # fmt: skip
    groups = []
    for group in args.group_tiles:  # the default blocks and windows, in tile groups (object storage's default: 64)
        codes = plan_codes(path, labels, "chunk", args.group_buffer, args.batch_size, args.seed, group_tiles=group)
        groups.append({
            "block_size": "chunk",
            "buffer_size": args.group_buffer,
            "group_tiles": group,
            **quality(batch_counts(codes, n_labels, args.batch_size), args.batch_size),
        })  # fmt: skip
    rng = np.random.default_rng(args.seed)
    randoms = [
        quality(batch_counts(labels[rng.permutation(labels.shape[0])], n_labels, args.batch_size), args.batch_size)
        for _ in range(5)
    ]
    random = {k: float(np.mean([r[k] for r in randoms])) for k in randoms[0]}
    return grid, groups, random


# ============================================================================================ S3


def start_s3(latency: float) -> tuple[Any, Any, str, list[str]]:
    """moto's S3 server and the recording proxies (none, ``latency``) in a process of their own."""
    sys.path.insert(0, str(HERE.parent))  # the test suite's servers (tests/servers)
    from bench_object_storage import start_servers

    return start_servers(latency)


def soma_s3_config(endpoint: str) -> dict[str, str]:
    host = endpoint.removeprefix("http://").rstrip("/")
    return {
        "vfs.s3.endpoint_override": host,
        "vfs.s3.scheme": "http",
        "vfs.s3.use_virtual_addressing": "false",
        "vfs.s3.region": "us-east-1",
        "vfs.s3.aws_access_key_id": "testing",
        "vfs.s3.aws_secret_access_key": "testing",
    }


# ============================================================================================ the run


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["memory_gb"] = round(int(line.split()[1]) / 2**20)
    info["label"] = f"{platform.system()}, {info['cpus']} cores, {info.get('memory_gb', '?')} GB"
    return info


STORE_NAMES = {"deltacells": "cells.deltacells", "annbatch": "annbatch.zarr", "tiledbsoma": "cells.soma"}


def write_stores(
    data: dict[str, Any], interpreters: dict[str, Any], workdir: Path, args: argparse.Namespace, log: Any
) -> tuple[dict[str, Any], dict[str, str]]:
    """Each store written from the source h5ad in a fresh interpreter that has its package: time and bytes."""
    stores: dict[str, dict[str, Any]] = {
        "h5ad": {"status": "ok", "seconds": data["h5ad_write_s"], "bytes": dir_bytes(Path(data["source"]))}
    }
    paths = {"h5ad": data["source"]}
    wanted = {LOADERS[name]["store"] for name in args.loaders}
    for store, needs in STORES.items():
        if store not in wanted:
            continue
        python = pick(interpreters, needs)
        if python is None:
            stores[store] = {"status": f"skipped: no interpreter with {', '.join(needs)}"}
            log(f"store {store}: skipped (no interpreter has {', '.join(needs)})")
            continue
        out = workdir / STORE_NAMES[store]
        spec = {"task": "convert", "store": store, "source": data["source"], "out": str(out), "seed": args.seed}
        result = run_child(python, spec, args.timeout)
        if "failed" in result:
            stores[store] = {"status": f"error: {result['failed']}", "traceback": result.get("traceback")}
            log(f"store {store}: FAILED {result['failed']}\n{result.get('traceback', '')}")
            continue
        stores[store] = {"status": "ok", "seconds": result["seconds"], "bytes": dir_bytes(out)}
        paths[store] = str(out)
        log(f"store {store:10s} {result['seconds']:7.1f} s  {stores[store]['bytes'] / 2**20:8.1f} MiB")
    return stores, paths


def s3_places(adata: Any, paths: dict[str, str], args: argparse.Namespace, log: Any) -> tuple[Any, dict[str, Any]]:
    """The S3 server (with its latency proxy), deltacells and TileDB-SOMA copied into a bucket of it."""
    import s3fs

    import deltacells

    sys.path.insert(0, str(HERE.parent))
    from tests.servers.s3 import S3Server

    server = start_s3(args.latency)
    s3 = S3Server()  # for its storage options and client only: the server runs in the other process
    s3._endpoint_url = server[2]
    proxy = server[3][1]
    bucket = s3.make_bucket(f"loader-{uuid.uuid4().hex[:8]}")
    entry: dict[str, Any] = {"storage_options": s3.storage_options(proxy)}
    if "deltacells" in paths:
        url = f"s3://{bucket}/{STORE_NAMES['deltacells']}"
        began = time.perf_counter()
        deltacells.write_deltacells(
            adata, url, progress=False, obs_columns=[LABEL], storage_options=s3.storage_options()
        )
        log(f"S3: deltacells written in {time.perf_counter() - began:.1f} s")
        entry["deltacells"] = url
    if "tiledbsoma" in paths:  # TileDB arrays are files: the local experiment, copied
        fs = s3fs.S3FileSystem(**s3.storage_options())
        fs.put(paths["tiledbsoma"], f"{bucket}/{STORE_NAMES['tiledbsoma']}", recursive=True)
        entry["tiledbsoma"] = f"s3://{bucket}/{STORE_NAMES['tiledbsoma']}"
        entry["tiledb_config"] = soma_s3_config(proxy)
    return server, {f"S3 + {args.latency * 1e3:g} ms": entry}


def plan_runs(
    paths: dict[str, str], places: dict[str, Any], interpreters: dict[str, Any], args: argparse.Namespace, log: Any
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The timed runs: each loader (deltacells with several settings) on each place it can read."""
    runs: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    tile = 2048
    with contextlib.suppress(Exception):
        tile = int(json.loads((Path(paths["deltacells"]) / "manifest.json").read_text())["tile_size"])
    settings: list[tuple[str, dict[str, Any]]] = [
        ("deltacells", {}),
        ("deltacells, whole tiles", {"block_size": tile}),
        ("deltacells, stored gene order", {"gene_order": "stored"}),  # no column map, rows not sorted again
    ]
    if args.grid_throughput:
        settings += [
            (f"deltacells, block {block}, buffer {buffer}", {"block_size": block, "buffer_size": buffer, "grid": True})
            for block in args.block_sizes
            for buffer in args.buffer_sizes
        ]
    for name in args.loaders:
        needs, store = LOADERS[name]["needs"], LOADERS[name]["store"]
        python = pick(interpreters, needs)
        if python is None:
            skipped[name] = f"skipped: no interpreter with {', '.join(needs)}"
        elif store not in paths:
            skipped[name] = "skipped: its store was not written"
        if name in skipped:
            log(f"{name}: {skipped[name]}")
            continue
        common = {"loader": name, "python": python}
        if name != "deltacells":
            runs.append({"name": name, "place": "local disk", "path": paths[store], **common})
            for place, entry in places.items():
                if name == "tiledbsoma-ml" and "tiledbsoma" in entry:
                    soma = {"path": entry["tiledbsoma"], "tiledb_config": entry["tiledb_config"]}
                    runs.append({"name": name, "place": place, **soma, **common})
            continue
        for label, extra in settings:
            runs.append({"name": label, "place": "local disk", "path": paths[store], "check": True, **common, **extra})
        for place, entry in places.items():
            if "deltacells" in entry:
                for label, extra in settings[:3]:
                    runs.append({
                        "name": label, "place": place, "path": entry["deltacells"], "check": True,
                        "storage_options": entry["storage_options"], **common, **extra,
                    })  # fmt: skip
        # deltacells on annbatch's Python too: a comparison on the same interpreter
        for other, info in interpreters.items():
            if other != python and "annbatch" in args.loaders and pick({other: info}, ("annbatch", "deltacells")):
                if args.quick:
                    break
                version = info["python"].rsplit(".", 1)[0]
                runs.append({"name": f"deltacells (py{version})", "place": "local disk", "path": paths[store],
                             "loader": name, "python": other})  # fmt: skip
    return runs, skipped


def time_runs(
    runs: list[dict[str, Any]], base: dict[str, Any], interpreters: dict[str, Any], args: argparse.Namespace, log: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    """Every run in a fresh interpreter, in interleaved rounds (every other round reversed); the best is kept."""
    results: dict[tuple[str, str], dict[str, Any]] = {}
    for round_ in range(args.rounds):
        for run in runs if round_ % 2 == 0 else runs[::-1]:
            if round_ and run.get("grid"):
                continue  # the grid's settings are timed once (for the trade-off plot)
            name, place = run["name"], run["place"]
            spec = {**base, **{k: v for k, v in run.items() if k not in ("name", "place", "python", "check", "grid")}}
            result = run_child(run["python"], spec, args.timeout)
            python = interpreters[run["python"]]["python"]
            entry = results.setdefault((name, place), {"name": name, "place": place, "python": python})
            entry["check"] = run.get("check", False)
            head = f"round {round_ + 1} {name:<38s} {place:<12s}"
            if "failed" in result:
                entry.setdefault("errors", []).append(result["failed"])
                log(f"{head} FAILED {result['failed']}\n{result.get('traceback', '')}")
                continue
            log(
                f"{head} {result['cells_per_s']:>10,.0f} cells/s ({result['batches_timed']} batches"
                f"{'' if result['epoch_complete'] else ', a part of the epoch'}; first batch after "
                f"{result['first_batch_s']:.2f} s), load {os.getloadavg()[0]:.1f}{_stolen(result.get('steal'))}"
            )
            entry.setdefault("rounds_cells_per_s", []).append(result["cells_per_s"])  # the best is kept below
            if result["short_batches"]:
                entry.setdefault("errors", []).append(f"short batches at {result['short_batches'][:5]}")
            if result["epoch_complete"] and result["nnz"] != base["nnz"]:
                entry.setdefault("errors", []).append(f"an epoch gave {result['nnz']} nonzeros, not {base['nnz']}")
            if entry.get("cells_per_s") is None or result["cells_per_s"] > entry["cells_per_s"]:
                counts = result.pop("counts")
                entry.update(result)
                entry["quality"] = quality(counts, args.batch_size)
                entry["_counts"] = counts
    return results


def _stolen(share: float | None) -> str:
    """``", 12% stolen"``: the CPU time the hypervisor took during a timing, for the log (nothing if unknown)."""
    return "" if share is None else f", {share:.0%} of the CPU time stolen"


def check_plans(results: dict[Any, dict[str, Any]], path: str, labels: np.ndarray, n_labels: int, args: Any) -> None:
    """The labels of deltacells' batches must be those of its plan (which the shuffle-quality grid uses)."""
    for entry in results.values():
        counts = entry.pop("_counts", None)
        if counts is None or not entry.pop("check", False):
            continue
        used = entry.get("settings", {})
        codes = plan_codes(
            path, labels, used["block_size"], used["buffer_size"], args.batch_size, args.seed, epoch=1,
            group_tiles=used.get("group_tiles", 0),
        )  # fmt: skip
        expected = batch_counts(codes, n_labels, args.batch_size)[: len(counts)]
        if not np.array_equal(expected, np.asarray(counts)[: expected.shape[0]]):
            entry.setdefault("errors", []).append("the labels of its batches differ from those of its plan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=200_000)
    parser.add_argument("--samples", type=int, default=40, help="runs of consecutive cells with one label each")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--batches", type=int, default=0, help="timed batches per run (0: the rest of the epoch)")
    parser.add_argument("--warmup", type=int, default=10, help="batches taken before the timing starts")
    parser.add_argument("--max-seconds", type=float, default=60, help="stop a timed run after this long")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds of timed runs (best kept)")
    parser.add_argument("--block-sizes", default="16,64,chunk,2048", help="cells, or 'chunk' (the default)")
    parser.add_argument("--buffer-sizes", default="2048,8192,16384,32768")
    parser.add_argument("--group-tiles", default="8,16,32,64", help="tile groups whose shuffle quality is reported")
    parser.add_argument("--group-buffer", type=int, default=16384, help="buffer_size of the tile-group rows")
    parser.add_argument(
        "--grid-throughput",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time every setting of the grid (else only the default and whole tiles)",
    )
    parser.add_argument("--latency", type=float, default=0.03, help="seconds added to each S3 request")
    parser.add_argument("--s3", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--loaders", default=",".join(LOADERS))
    parser.add_argument("--python", action="append", default=[], help="another interpreter for the peers")
    parser.add_argument("--data", type=Path, default=VISIUM)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="tiny: 16,000 cells, one round, a small grid (CI)")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--workdir", type=Path, default=None, help="keep the stores here")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--plots", type=Path, default=None, help="write the PNG charts to this folder")
    parser.add_argument(
        "--replot", type=Path, default=None, help="redraw the charts of this JSON report into --plots (no run)"
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.replot:
        for path in plot(json.loads(args.replot.read_text()), args.plots or Path("docs/_static/loader")):
            print(f"wrote {path}")
        return 0

    if args.child:
        spec = json.loads(Path(args.child).read_text())
        print(json.dumps(child_main(spec), default=str))
        return 0

    command = "python benchmarks/bench_loader.py " + " ".join(argv if argv is not None else sys.argv[1:])
    command = command.replace(f"{HERE.parent}{os.sep}", "")  # paths in the repository, relative to it
    if args.quick:
        args.cells, args.samples, args.warmup, args.rounds = 16_000, 16, 3, 1
        args.max_seconds, args.grid_throughput = 10, False
        args.block_sizes, args.buffer_sizes = "64,chunk,2048", "2048,8192"
        args.group_tiles, args.group_buffer = "2,4", 2048  # 8 tiles
    args.warmup = max(1, args.warmup)
    args.block_sizes = [x if x == "chunk" else int(x) for x in args.block_sizes.split(",")]
    args.buffer_sizes = [int(x) for x in args.buffer_sizes.split(",")]
    args.group_tiles = [int(x) for x in args.group_tiles.split(",") if x]
    args.loaders = [x for x in args.loaders.split(",") if x]
    unknown = [x for x in args.loaders if x not in LOADERS]
    if unknown:
        parser.error(f"unknown loaders {unknown}; choose among {list(LOADERS)}")
    if not (args.data / "matrix.mtx.gz").exists() and not (args.data / "matrix.mtx").exists():
        parser.error(f"no 10x matrix in {args.data} (--data or $DELTACELLS_VISIUM)")

    began = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - began:6.1f} s] {message}", flush=True)

    interpreters = {sys.executable: probe(sys.executable)}
    for python in args.python:
        if Path(python).exists():
            interpreters[python] = probe(python)
        else:
            log(f"--python {python}: not found, ignored")
    for python, info in interpreters.items():
        log(f"interpreter {python} (Python {info['python']}): { ({k: v for k, v in info['packages'].items() if v}) }")
    if not interpreters[sys.executable]["packages"].get("deltacells"):
        parser.error("run this with an interpreter that has deltacells")

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="deltacells-bench-loader-"))
    workdir.mkdir(parents=True, exist_ok=True)
    settings = ("cells", "samples", "batch_size", "batches", "warmup", "max_seconds", "rounds", "latency")
    report: dict[str, Any] = {
        "schema": 1,
        "command": command,
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "interpreters": {info["python"]: info["packages"] for info in interpreters.values()},
        "settings": {
            k: getattr(args, k)
            for k in (*settings, "block_sizes", "buffer_sizes", "group_tiles", "group_buffer", "seed", "quick")
        },
        "load_before": os.getloadavg(),
    }
    server = None
    try:
        data, adata = make_data(args, workdir, log)
        report["data"] = {k: v for k, v in data.items() if k not in ("source", "categories")}
        categories = data["categories"]
        labels = adata.obs[LABEL].cat.codes.to_numpy().astype(np.int64)
        report["stores"], paths = write_stores(data, interpreters, workdir, args, log)
        places: dict[str, Any] = {}
        if args.s3 and not interpreters[sys.executable]["packages"].get("s3fs"):
            log("S3: skipped (s3fs is not installed here: pip install -e . --group test)")
        elif args.s3:
            try:
                server, places = s3_places(adata, paths, args, log)
            except Exception as exc:
                log(f"S3: skipped ({type(exc).__name__}: {exc})\n{traceback.format_exc()}")
        del adata
        runs, report["skipped"] = plan_runs(paths, places, interpreters, args, log)
        base = {
            "task": "load", "batch_size": args.batch_size, "seed": args.seed, "warmup": args.warmup,
            "batches": args.batches, "max_seconds": args.max_seconds, "categories": categories,
            "n_genes": data["n_genes"], "n_cells": data["n_cells"], "nnz": data["nnz"],
            "cache_dir": str(workdir / "obs-cache"),
        }  # fmt: skip
        results = time_runs(runs, base, interpreters, args, log)
        if "deltacells" in paths:
            check_plans(results, paths["deltacells"], labels, len(categories), args)
            grid, groups, random = shuffle_grid(paths["deltacells"], labels, len(categories), args)
        else:
            grid, groups, random = [], [], {}
        report["shuffle"] = {"grid": grid, "groups": groups, "random": random}
        report["results"] = list(results.values())
        report["ratios"] = ratios(report["results"])
    finally:
        if server is not None:
            with contextlib.suppress(Exception):
                server[1].send(("stop", 0))
                server[0].join(30)
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    report["load_after"] = os.getloadavg()
    report["duration_s"] = time.perf_counter() - began
    log("\n" + summary(report))
    if args.json:
        args.json = output_path(args.json, quick=args.quick)  # a --quick run never replaces docs/_data's
        args.json.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(report, indent=1, default=str).replace(f"{workdir}{os.sep}", "")
        args.json.write_text(text + "\n")
        log(f"wrote {args.json}")
    if args.plots:
        args.plots = output_path(args.plots, quick=args.quick)
        if importlib.util.find_spec("matplotlib") is None:
            log("no plots: matplotlib is not installed")
        else:
            for path in plot(report, args.plots):
                log(f"wrote {path}")
    errors = [f"{r['name']} ({r['place']}): {e}" for r in report["results"] for e in r.get("errors", [])]
    errors += [f"store {k}: {s['status']}" for k, s in report["stores"].items() if s["status"].startswith("error")]
    log(f"done in {report['duration_s']:.0f} s")
    if errors:
        log("ERRORS:\n" + "\n".join(errors))
        return 1
    return 0


def ratios(results: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """deltacells' cells/s over each peer's, on the same place (above 1: deltacells faster)."""
    out: dict[str, dict[str, float]] = {}
    ok = [r for r in results if r.get("cells_per_s")]
    for ours in ok:
        if not ours["name"].startswith("deltacells") or "block " in ours["name"]:
            continue
        for peer in ok:
            if peer["name"].startswith("deltacells") or peer["place"] != ours["place"]:
                continue
            key = f"{ours['name']}, {ours['place']}"
            out.setdefault(key, {})[peer["name"]] = ours["cells_per_s"] / peer["cells_per_s"]
    return out


def summary(report: dict[str, Any]) -> str:
    d = report["data"]
    random = report["shuffle"]["random"]
    lines = [
        f"{d['n_cells']:,} cells x {d['n_genes']:,} genes ({d['nnz_per_cell']:.0f} nonzeros per cell), "
        f"{d['samples']} samples of {d['cells_per_sample']:,} consecutive cells; batches of "
        f"{report['settings']['batch_size']} (scipy CSR float32 + the label); {report['machine']['label']}",
        "",
        "| store | convert s | MiB |",
        "|---|---:|---:|",
    ]
    for name, s in report["stores"].items():
        if s["status"] != "ok":
            lines.append(f"| {name} | {s['status'][:60]} | |")
        else:
            lines.append(f"| {name} | {s['seconds']:.1f} | {s['bytes'] / 2**20:.1f} |")
    lines += [
        "",
        "| loader | place | Python | cells/s | first batch s | spread / random | labels per batch | CPU stolen |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in report["results"]:
        if not r.get("cells_per_s"):
            lines.append(f"| {r['name']} | {r['place']} | {r['python']} | failed | | | | |")
            continue
        q = r.get("quality", {})
        spread = q.get("spread", float("nan")) / random["spread"] if random else float("nan")
        stolen = "?" if r.get("steal") is None else f"{r['steal']:.0%}"
        lines.append(
            f"| {r['name']} | {r['place']} | {r['python']} | {r['cells_per_s']:,.0f} | {r['first_batch_s']:.2f} | "
            f"{spread:.2f} | {q.get('distinct', float('nan')):.1f} | {stolen} |"
        )
    for name, reason in report["skipped"].items():
        lines.append(f"| {name} | | | {reason} | | | |")
    if report["ratios"]:
        lines += ["", "deltacells' cells/s over each peer's (same place, same run):"]
        for ours, peers in report["ratios"].items():
            lines.append(f"  {ours}: " + ", ".join(f"{p} {v:.2f}x" for p, v in peers.items()))
    if report["shuffle"]["grid"]:
        lines += [
            "",
            f"shuffle quality, one epoch from the plan (truly random batches: spread {random['spread']:.4f}, "
            f"{random['distinct']:.1f} labels per batch):",
            "| block_size | buffer_size | group_tiles | spread / random | labels per batch | top label share |",
            "|---:|---:|---:|---:|---:|---:|",
        ]
        for g in report["shuffle"]["grid"] + report["shuffle"].get("groups", []):
            lines.append(
                f"| {g['block_size']} | {g['buffer_size']} | {g.get('group_tiles', 0)} | "
                f"{g['spread'] / random['spread']:.2f} | {g['distinct']:.1f} | {g['top_share']:.3f} |"
            )
    return "\n".join(lines)


# ============================================================================================ plots


def _main_python(r: dict[str, Any]) -> bool:
    """A deltacells run in the main interpreter (not the one on annbatch's Python)."""
    return r["name"].startswith("deltacells") and "(py" not in r["name"]


def plot(report: dict[str, Any], folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    plain = FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}")
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    d = report["data"]
    caption = (
        f"{report['machine']['label']}; {d['n_cells']:,} cells resampled from Visium CytAssist "
        f"({d['nnz_per_cell']:.0f} nonzeros/cell), batches of {report['settings']['batch_size']}"
    )
    # cells/s of each loader, local disk first
    ok = [r for r in report["results"] if r.get("cells_per_s") and "block " not in r["name"]]
    ok.sort(key=lambda r: (r["place"] != "local disk", r["place"]))
    if ok:
        fig, ax = plt.subplots(figsize=(7, 0.35 * len(ok) + 1.3))
        names = [f"{r['name']} — {r['place']}" for r in ok]
        values = [r["cells_per_s"] for r in ok]
        colours = ["#1b7837" if r["name"].startswith("deltacells") else "#7b8fa6" for r in ok]
        hatches = ["" if r["place"] == "local disk" else "//" for r in ok]
        bars = ax.barh(names, values, color=colours, hatch=hatches, edgecolor="white")
        ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], padding=3, fontsize=7)
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(plain)
        ax.set_xlabel("cells per second after the warm-up (log scale; hatched: S3 with latency)")
        ax.invert_yaxis()
        ax.margins(x=0.25)
        ax.tick_params(axis="y", labelsize=7)
        fig.text(0.5, 0.005, caption, ha="center", va="bottom", fontsize=6)
        fig.tight_layout(rect=(0, 0.04, 1, 1))
        path = folder / "throughput.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")  # the long loader names and the x label are kept whole
        plt.close(fig)
        written.append(path)
    # the speed / randomness trade-off of the knobs
    grid, random = report["shuffle"]["grid"], report["shuffle"]["random"]
    if grid:
        speed = {
            (r.get("settings", {}).get("block_size"), r.get("settings", {}).get("buffer_size")): r["cells_per_s"]
            for r in report["results"]
            if _main_python(r) and r["place"] == "local disk" and r.get("cells_per_s") and "tile cache" not in r["name"]
        }
        fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
        colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for k, block in enumerate(sorted({g["block_size"] for g in grid}, key=_block_order)):
            rows = [g for g in grid if g["block_size"] == block]
            ratio = [g["spread"] / random["spread"] for g in rows]
            colour = colours[k % len(colours)]
            label = f"block_size {_block_label(block)}"
            left.plot([g["buffer_size"] for g in rows], ratio, marker="o", color=colour, label=label)
            points = [
                (g["buffer_size"], y, speed.get((block, g["buffer_size"]))) for g, y in zip(rows, ratio, strict=True)
            ]
            points = [p for p in points if p[2]]
            if points:
                right.plot([p[2] for p in points], [p[1] for p in points], marker="o", color=colour)
                for x, y, s in points:
                    right.annotate(f"{x:,}", (s, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
        left.axhline(1.0, color="black", lw=1, ls="--", label="random batches")
        right.axhline(1.0, color="black", lw=1, ls="--")
        for r in report["results"]:
            q = r.get("quality")
            if not q or r["name"].startswith("deltacells") or r["place"] != "local disk" or r["name"] == "naive":
                continue
            y = q["spread"] / random["spread"]
            right.scatter([r["cells_per_s"]], [y], color="#7b8fa6", marker="s", zorder=3)
            right.annotate(r["name"], (r["cells_per_s"], y), fontsize=6, color="#4d5d70", xytext=(3, -8),
                           textcoords="offset points")  # fmt: skip
        for ax in (left, right):
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.xaxis.set_major_formatter(plain)
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(plain)
            ax.tick_params(axis="both", which="both", labelsize=7)
        left.set_xticks(sorted({g["buffer_size"] for g in grid}))
        left.xaxis.set_minor_formatter(NullFormatter())
        right.xaxis.set_minor_formatter(NullFormatter())
        left.set_xlabel("buffer_size (cells shuffled together)")
        left.set_ylabel("label spread / random batches'")
        left.legend(fontsize=7)
        right.set_xlabel("cells per second, local disk (points: buffer_size)")
        right.set_ylabel("spread / random batches'")
        fig.text(0.5, 0.005, caption, ha="center", va="bottom", fontsize=6)
        fig.tight_layout(rect=(0, 0.05, 1, 1))
        path = folder / "shuffle.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        written.append(path)
    return written


if __name__ == "__main__":
    sys.exit(main())
