"""Helpers for the obs tests (importable by spawned worker processes too): tile layouts, manifests, counting stores."""

from __future__ import annotations

import collections
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from deltacells.format import Manifest
from deltacells.obs import ObsStore, ObsWriteResult, write_obs
from deltacells.storage import FsspecStore

CONFORMANCE = Path(__file__).resolve().parents[3] / "shared" / "conformance"
DATASETS = CONFORMANCE / "datasets"


def tile_cells_for(n_cells: int, tile_size: int) -> np.ndarray:
    """A valid tile layout: full tiles of ``tile_size`` and a last partial one."""
    full, rest = divmod(n_cells, tile_size)
    return np.asarray([tile_size] * full + ([rest] if rest else []), dtype=np.int64)


def manifest_for(tile_cells: np.ndarray, result: ObsWriteResult | None, *, tile_size: int | None = None) -> Manifest:
    """A checked manifest (through ``Manifest.from_dict``) for obs written over ``tile_cells``."""
    cells = [int(x) for x in tile_cells]
    doc: dict[str, Any] = {
        "format": "deltacells-dataset",
        "version": 2,
        "n_cells": sum(cells),
        "n_genes": 3,
        "tile_size": tile_size or (cells[0] if cells else 1),
        "tile_cells": cells,
        "tile_nnz": [0] * len(cells),
        "tile_bytes": [64] * len(cells),
        "n_chunks": 1,
        "zstd_level": 1,
        "has_gene_order": False,
        "has_var_names": False,
        "has_var_table": False,
        "has_obs": result is not None,
        "metadata": {},
    }
    if result is not None:
        doc.update(
            obs_tiles_per_file=result.obs_tiles_per_file,
            obs_shard_bytes=list(result.shard_bytes),
            obs_shard_sha256=list(result.shard_sha256),
            obs_fingerprint=result.fingerprint,
        )
    return Manifest.from_dict(doc)


class CountingStore(FsspecStore):
    """A read-only FsspecStore that counts whole reads (``reads``), ranged passes (``opens``: files opened over
    ranged reads) and ranged reads (``ranged``, ``ranged_bytes``) by object name."""

    def __init__(self, url: Any, storage_options: dict[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self.reads: collections.Counter[str] = collections.Counter()
        self.opens: collections.Counter[str] = collections.Counter()
        self.ranged: collections.Counter[str] = collections.Counter()
        self.ranged_bytes: collections.Counter[str] = collections.Counter()

    def read(self, name: str, start: int | None = None, end: int | None = None) -> bytes:
        data = super().read(name, start, end)
        if start is None and end is None:
            self.reads[name] += 1
        else:
            self.ranged[name] += 1
            self.ranged_bytes[name] += len(data)
        return data

    def open_file(self, path: str, size: int | None = None) -> Any:
        self.opens[path] += 1
        return super().open_file(path, size)

    def shard_reads(self) -> int:
        return sum(n for name, n in self.reads.items() if name.endswith(".parquet"))


class ObsDataset:
    """Obs written to a directory, with its manifest; ``open()`` gives ObsStores on a given cache."""

    def __init__(self, root: Path, frame: pd.DataFrame, tile_cells: np.ndarray, result: ObsWriteResult) -> None:
        self.root = root
        self.frame = frame
        self.tile_cells = tile_cells
        self.result = result
        self.manifest = manifest_for(tile_cells, result)

    def store(self) -> CountingStore:
        return CountingStore(self.root)

    def open(self, cache_dir: Path, *, verify: bool = True, store: FsspecStore | None = None) -> ObsStore:
        return ObsStore(store or self.store(), self.manifest, cache_dir=cache_dir, verify=verify)


def sample_frame(n: int = 30, seed: int = 0) -> pd.DataFrame:
    """A small obs table with one column of each kind, missing values included."""
    rng = np.random.default_rng(seed)
    missing = rng.random(n) < 0.25
    frame = pd.DataFrame(
        {
            "cell_type": pd.Categorical(np.where(missing, None, rng.choice(["T", "B", "NK"], n))),
            "n_counts": rng.integers(0, 5000, n),
            "pct": np.where(missing, np.nan, rng.random(n)),
            "flag": rng.random(n) < 0.5,
            "note": np.where(missing, None, "x").tolist(),  # the default string dtype
        }
    )
    frame.index = pd.Index([f"cell{i:04d}" for i in range(n)])
    return frame


def write_obs_dataset(root: Path, frame: pd.DataFrame, tile_size: int = 4, **options: Any) -> ObsDataset:
    """Write ``frame`` as obs (and a matching manifest.json) under ``root``."""
    cells = tile_cells_for(len(frame), tile_size)
    result = write_obs(FsspecStore(root), frame, cells, **options)
    dataset = ObsDataset(root, frame, cells, result)
    FsspecStore(root).write("manifest.json", dataset.manifest.to_json().encode())
    return dataset


def refresh_manifest(dataset: ObsDataset) -> Manifest:
    """After the test changed obs files by hand: a manifest whose shard sizes, SHA-256s and fingerprint match them."""
    import hashlib

    from deltacells.format import obs_fingerprint

    doc = dataset.manifest.to_dict()
    blobs = [(dataset.root / "obs" / f"obs_{s:04d}.parquet").read_bytes() for s in range(len(doc["obs_shard_bytes"]))]
    doc["obs_shard_bytes"] = [len(b) for b in blobs]
    doc["obs_shard_sha256"] = [hashlib.sha256(b).hexdigest() for b in blobs]
    text = (dataset.root / "obs" / "schema.json").read_text(encoding="utf-8")
    doc["obs_fingerprint"] = obs_fingerprint(text, doc["tile_cells"], doc["obs_shard_sha256"])
    dataset.manifest = Manifest.from_dict(doc)
    return dataset.manifest


# ---------------------------------------------------------------------- multiprocessing (spawned workers)


def _log(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:  # O_APPEND: short lines from several processes do not mix
        f.write(line + "\n")


class LoggingStore(FsspecStore):
    """A read-only FsspecStore that logs whole reads, ranged reads and ranged opens to a file shared by processes."""

    def __init__(self, url: Any, log_path: str) -> None:
        super().__init__(url)
        self.log_path = log_path

    def read(self, name: str, start: int | None = None, end: int | None = None) -> bytes:
        what = "read" if start is None and end is None else "range"
        _log(self.log_path, f"{os.getpid()} {what} {name.rsplit('/', 1)[-1]}")
        return super().read(name, start, end)

    def open_file(self, path: str, size: int | None = None) -> Any:
        _log(self.log_path, f"{os.getpid()} open {path.rsplit('/', 1)[-1]}")
        return super().open_file(path, size)


def localize_in_process(
    root: str, manifest_json: str, cache_dir: str, columns: list[str], barrier: Any, log_path: str, out_path: str
) -> None:
    """Worker: localize ``columns`` (all starting together) and pickle the frame read; log every file rename."""
    import traceback

    real_replace = os.replace

    def logged_replace(src: Any, dst: Any) -> None:
        real_replace(src, dst)
        _log(log_path, f"{os.getpid()} replace {os.path.basename(os.fspath(dst))}")

    os.replace = logged_replace  # this process only
    try:
        obs = ObsStore(LoggingStore(root, log_path), Manifest.from_json(manifest_json), cache_dir=cache_dir)
        barrier.wait(timeout=120)
        obs.to_dataframe(columns).to_pickle(out_path)
    except BaseException:
        Path(out_path + ".err").write_text(traceback.format_exc())
        raise
