"""Atlas-scale datasets for ``bench_scale.py``, built cheaply: a few distinct tiles, stored many times.

A small pool of tiles (``pool`` of them, ``tile_size`` cells each) is generated and encoded once with
``deltacells.encode_tile``; tile ``t`` of the dataset is a copy of (or a hard link to) pool tile
``choice[t]``, where ``choice`` is drawn once with the seed. The obs sidecar has the cell names
(``_index``: ``c000000123``) and a categorical ``cell_type`` (30 categories) whose pattern in tile ``t`` is
that of pool tile ``choice[t]``: each pool tile has its own mix of cell types, so one category selects
cells in many tiles, though not in all, and in different numbers. Obs shards are built one at a time with
pyarrow, exactly as ``deltacells.obs.write_obs`` lays them out (its ``_shard_bytes``, the schema that its
``encode_index`` / ``encode_column`` make, ``obs_fingerprint``): :func:`check_obs_matches_writer` compares
them byte for byte with what ``write_obs`` writes for the same table. The manifest's metadata says that the
obs names are unique (they are, by construction), as ``DatasetWriter`` says it of names it found unique.
``gene_order.npy`` and ``var_names.txt`` are written as ``DatasetWriter`` writes them, and ``manifest.json`` last.

Memory is bounded by the pool and two obs shards (about 50 MB per shard of 1,000 tiles), whatever the size.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: Changes whenever the builder makes different bytes for the same parameters (so --keep rebuilds).
BUILD_VERSION = 2  # 2: the manifest says the obs names are unique, as the writer does

#: Cell types of the ``cell_type`` column (the vocabulary, in this order).
CELL_TYPES = (
    "CD4 T cell", "CD8 T cell", "regulatory T cell", "gamma-delta T cell", "NK cell", "B cell", "plasma cell",
    "classical monocyte", "non-classical monocyte", "macrophage", "conventional dendritic cell",
    "plasmacytoid dendritic cell", "mast cell", "neutrophil", "erythroid progenitor", "megakaryocyte",
    "hematopoietic stem cell", "fibroblast", "myofibroblast", "smooth muscle cell", "pericyte",
    "endothelial cell", "lymphatic endothelial cell", "basal cell", "club cell", "ciliated cell",
    "alveolar type 1 cell", "alveolar type 2 cell", "hepatocyte", "enterocyte",
)  # fmt: skip

BUILD_FILE = "build.json"
DATASET_DIR = "dataset"


@dataclass(frozen=True)
class Params:
    """What determines a dataset's bytes (the key of ``--keep``)."""

    n_cells: int
    n_genes: int = 500
    nnz_per_cell: float = 20.0
    tile_size: int = 2048
    n_chunks: int = 8
    level: int = 1
    pool: int = 64
    seed: int = 0
    obs_tiles_per_file: int = 1000
    link: str = "copy"  # "copy": every tile its own file; "hard": hard links to the pool's files
    build_version: int = BUILD_VERSION

    def key(self) -> str:
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:10]
        return f"scale-{self.n_cells}-{digest}"


@dataclass
class Built:
    """A dataset on disk and what the benchmark needs to know about it."""

    root: Path  # the key directory: dataset/, build.json, h5ad files
    params: Params
    info: dict[str, Any]  # build.json: times, bytes, the category chosen, its cells

    @property
    def path(self) -> Path:
        return self.root / DATASET_DIR


# ---------------------------------------------------------------------------------------------- the pool


def _gene_probabilities(params: Params) -> np.ndarray:
    """Per-cell probability that each stored column is expressed: decreasing (genes sorted by total counts)."""
    weights = 1.0 / (np.arange(params.n_genes) + 10.0) ** 0.9
    return np.minimum(weights * (params.nnz_per_cell / weights.sum()), 0.95)


def make_pool(params: Params) -> tuple[list[Any], np.ndarray]:
    """The pool's count matrices (CSR, stored column order) and cell-type codes (``int8[pool, tile_size]``)."""
    from scipy import sparse

    rng = np.random.default_rng([params.seed, 1])
    probs = _gene_probabilities(params).astype(np.float32)
    success = (0.35 + 0.6 * np.arange(params.n_genes) / params.n_genes).astype(np.float64)  # top genes count more
    matrices = []
    for _ in range(params.pool):
        mask = rng.random((params.tile_size, params.n_genes), dtype=np.float32) < probs
        rows, cols = np.nonzero(mask)
        data = rng.geometric(success[cols]).astype(np.int32)
        matrices.append(
            sparse.csr_matrix((data, cols.astype(np.int32), _indptr(rows, params.tile_size)), shape=mask.shape)
        )
    n_types = len(CELL_TYPES)
    base = 1.0 / np.arange(1, n_types + 1)
    codes = np.empty((params.pool, params.tile_size), dtype=np.int8)
    for k in range(params.pool):
        weights = base * rng.gamma(0.5, size=n_types)  # a mix of its own: some types absent, some frequent
        codes[k] = rng.choice(n_types, size=params.tile_size, p=weights / weights.sum())
    return matrices, codes


def _indptr(rows: np.ndarray, n_rows: int) -> np.ndarray:
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n_rows), out=indptr[1:])
    return indptr


def tile_layout(params: Params) -> tuple[np.ndarray, np.ndarray]:
    """``tile_cells`` and the pool tile of each tile (``choice``)."""
    n_tiles = -(-params.n_cells // params.tile_size)
    cells = np.full(n_tiles, params.tile_size, dtype=np.int64)
    cells[-1] = params.n_cells - (n_tiles - 1) * params.tile_size
    choice = np.random.default_rng([params.seed, 2]).integers(params.pool, size=n_tiles)
    return cells, choice


# ---------------------------------------------------------------------------------------------- obs


def cell_names(start: int, stop: int, width: int) -> Any:
    """Arrow strings ``c`` + ``width`` digits for cells ``start .. stop - 1``, built without Python strings."""
    import pyarrow as pa

    n = stop - start
    chars = np.empty((n, width + 1), dtype=np.uint8)
    chars[:, 0] = ord("c")
    values = np.arange(start, stop, dtype=np.int64)
    for position in range(width, 0, -1):
        chars[:, position] = ord("0") + values % 10
        values //= 10
    offsets = np.arange(0, (width + 1) * n + 1, width + 1, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(chars.reshape(-1)))


def name_width(n_cells: int) -> int:
    return max(9, len(str(max(n_cells - 1, 0))))


def obs_schema(params: Params) -> tuple[str, Any]:
    """``obs/schema.json``'s text and the schema, as ``write_obs`` makes them (from a one-tile sample)."""
    import pandas as pd

    from deltacells.format import ObsSchema
    from deltacells.obs._encode import encode_column, encode_index

    sample = pd.Categorical.from_codes(np.zeros(2, dtype=np.int8), categories=list(CELL_TYPES))
    index = pd.Index(cell_names(0, 2, name_width(params.n_cells)).to_pylist())
    columns = (encode_index(index)[0], encode_column("cell_type", pd.Series(sample, index=index))[0])
    text = ObsSchema(columns).to_json()
    return text, ObsSchema.from_json(text)  # what write_obs does: the schema readers will see


def _shard_blob(params: Params, schema: Any, shard: int, tile_cells: np.ndarray, choice: np.ndarray, codes: Any):
    import pyarrow as pa

    from deltacells.obs._write import _shard_bytes

    per_file = params.obs_tiles_per_file
    tiles = range(shard * per_file, min((shard + 1) * per_file, tile_cells.shape[0]))
    first = tiles.start * params.tile_size  # every tile but the last is full
    rows = [int(tile_cells[t]) for t in tiles]
    stop = first + sum(rows)
    names = cell_names(first, stop, name_width(params.n_cells))
    shard_codes = np.concatenate([codes[choice[t], : tile_cells[t]] for t in tiles])
    table = pa.Table.from_arrays([names, pa.array(shard_codes)], schema=schema.arrow_schema())
    starts = np.concatenate([[0], np.cumsum(rows)[:-1]])
    blob = _shard_bytes(table, schema, [(int(s), r) for s, r in zip(starts, rows, strict=True)])
    return blob, hashlib.sha256(blob).hexdigest()


def write_obs_shards(params: Params, root: Path, tile_cells: np.ndarray, choice: np.ndarray, codes: np.ndarray):
    """Write the shards then ``obs/schema.json``; return the manifest's obs fields."""
    from deltacells.format import OBS_SCHEMA_NAME, obs_fingerprint, obs_shard_path

    schema_text, schema = obs_schema(params)
    n_shards = -(-tile_cells.shape[0] // params.obs_tiles_per_file)
    (root / OBS_SCHEMA_NAME).parent.mkdir(parents=True, exist_ok=True)
    sizes: list[int] = []
    digests: list[str] = []
    with ThreadPoolExecutor(2) as pool:  # two shards in memory at most: one built, one being written
        pending = None
        for shard in range(n_shards + 1):
            future = (
                pool.submit(_shard_blob, params, schema, shard, tile_cells, choice, codes) if shard < n_shards else None
            )
            if pending is not None:
                blob, digest = pending.result()
                (root / obs_shard_path(shard - 1)).write_bytes(blob)
                sizes.append(len(blob))
                digests.append(digest)
            pending = future
    (root / OBS_SCHEMA_NAME).write_text(schema_text, encoding="utf-8")
    return {
        "has_obs": True,
        "obs_tiles_per_file": params.obs_tiles_per_file,
        "obs_shard_bytes": tuple(sizes),
        "obs_shard_sha256": tuple(digests),
        "obs_fingerprint": obs_fingerprint(schema_text, tile_cells.tolist(), digests),
    }


def check_obs_matches_writer(built: Built) -> bool:
    """Whether ``write_obs`` of the whole obs table (in pandas) writes the same shards, schema and fingerprint.

    For small datasets only: it holds every cell name as a Python string.
    """
    import tempfile

    import pandas as pd

    from deltacells.format import OBS_SCHEMA_NAME, Manifest, obs_names_unique
    from deltacells.obs import write_obs
    from deltacells.storage import open_store

    params = built.params
    manifest = Manifest.from_json((built.path / "manifest.json").read_text())
    tile_cells, choice = tile_layout(params)
    _, codes = make_pool(params)
    all_codes = np.concatenate([codes[choice[t], : tile_cells[t]] for t in range(tile_cells.shape[0])])
    names = cell_names(0, params.n_cells, name_width(params.n_cells)).to_pylist()
    obs = pd.DataFrame(
        {"cell_type": pd.Categorical.from_codes(all_codes, categories=list(CELL_TYPES))}, index=pd.Index(names)
    )
    with tempfile.TemporaryDirectory() as tmp:
        result = write_obs(open_store(tmp), obs, tile_cells, obs_tiles_per_file=params.obs_tiles_per_file)
        same_schema = (Path(tmp) / OBS_SCHEMA_NAME).read_bytes() == (built.path / OBS_SCHEMA_NAME).read_bytes()
    return (
        same_schema
        and result.shard_sha256 == manifest.obs_shard_sha256
        and result.shard_bytes == manifest.obs_shard_bytes
        and result.fingerprint == manifest.obs_fingerprint
        and result.names_unique == obs_names_unique(manifest.metadata)
    )


# ---------------------------------------------------------------------------------------------- the dataset


def _du(path: Path) -> int:
    """Bytes allocated on disk under ``path`` (hard links counted once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            st = os.lstat(os.path.join(dirpath, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def build(params: Params, workdir: Path, *, reuse: bool, log: Any = print) -> Built:
    """The dataset of ``params`` under ``workdir`` (reused when ``reuse`` and complete), with its ``build.json``."""
    from deltacells.codec import encode_tile
    from deltacells.format import (
        GENE_ORDER_DTYPE,
        GENE_ORDER_NAME,
        MANIFEST_NAME,
        TILES_DIR,
        VAR_NAMES_NAME,
        Manifest,
        tile_path,
        with_obs_names_unique,
    )

    root = workdir / params.key()
    info_path = root / BUILD_FILE
    if reuse and info_path.exists() and (root / DATASET_DIR / MANIFEST_NAME).exists():
        info = json.loads(info_path.read_text())
        if info.get("params") == asdict(params):
            info["reused"] = True
            return Built(root, params, info)
    shutil.rmtree(root, ignore_errors=True)
    path = root / DATASET_DIR
    (path / TILES_DIR).mkdir(parents=True)
    t0 = time.perf_counter()

    matrices, codes = make_pool(params)
    blobs = [
        encode_tile(m.indptr, m.indices, m.data, params.n_genes, n_chunks=params.n_chunks, level=params.level)
        for m in matrices
    ]
    t_pool = time.perf_counter() - t0
    tile_cells, choice = tile_layout(params)
    n_tiles = tile_cells.shape[0]
    tile_nnz = np.array([matrices[k].nnz for k in choice], dtype=np.int64)
    tile_bytes = np.array([len(blobs[k]) for k in choice], dtype=np.int64)
    last_blob = None
    if tile_cells[-1] != params.tile_size:  # the last tile is short: encode its rows
        last = matrices[choice[-1]][: int(tile_cells[-1])]
        last_blob = encode_tile(
            last.indptr, last.indices, last.data, params.n_genes, n_chunks=params.n_chunks, level=params.level
        )
        tile_nnz[-1], tile_bytes[-1] = last.nnz, len(last_blob)
    if params.link == "hard":
        pool_dir = root / "pool"
        pool_dir.mkdir()
        for k, blob in enumerate(blobs):
            (pool_dir / f"pool_{k:04d}.dct").write_bytes(blob)
    t1 = time.perf_counter()
    for t in range(n_tiles):
        target = path / tile_path(t)
        if t == n_tiles - 1 and last_blob is not None:
            target.write_bytes(last_blob)
        elif params.link == "hard":
            os.link(root / "pool" / f"pool_{choice[t]:04d}.dct", target)
        else:
            target.write_bytes(blobs[choice[t]])
    t_tiles = time.perf_counter() - t1

    t2 = time.perf_counter()
    rng = np.random.default_rng([params.seed, 3])
    gene_order = rng.permutation(params.n_genes).astype(GENE_ORDER_DTYPE)  # stored column j = source gene_order[j]
    with open(path / GENE_ORDER_NAME, "wb") as f:
        np.save(f, gene_order, allow_pickle=False)
    names = [f"gene_{j:05d}" for j in range(params.n_genes)]  # in source order
    (path / VAR_NAMES_NAME).write_text("".join(f"{names[i]}\n" for i in gene_order), encoding="utf-8")
    obs_fields = write_obs_shards(params, path, tile_cells, choice, codes)
    t_obs = time.perf_counter() - t2

    manifest = Manifest(
        n_cells=params.n_cells,
        n_genes=params.n_genes,
        tile_size=params.tile_size,
        tile_cells=tile_cells,
        tile_nnz=tile_nnz,
        tile_bytes=tile_bytes,
        n_chunks=params.n_chunks,
        zstd_level=params.level,
        has_gene_order=True,
        has_var_names=True,
        metadata=with_obs_names_unique({"bench_scale": asdict(params)}, True),  # "c000000123": unique
        **obs_fields,
    )
    tmp = path / (MANIFEST_NAME + ".tmp")
    tmp.write_text(manifest.to_json(), encoding="utf-8")
    os.replace(tmp, path / MANIFEST_NAME)  # last (DECISIONS.md 6)
    build_s = time.perf_counter() - t0

    category, cat_cells, cat_tiles = pick_category(params, tile_cells, choice, codes)
    code = CELL_TYPES.index(category)
    ends = [_chunk_ends(blob) for blob in blobs]
    per_pool = np.array(
        [np.unique(_chunk_of(ends[k], np.flatnonzero(codes[k] == code))).shape[0] for k in range(params.pool)]
    )
    tail = np.flatnonzero(codes[choice[-1], : tile_cells[-1]] == code)
    tail_ends = _chunk_ends(last_blob) if last_blob is not None else ends[choice[-1]]
    cat_chunks = int(np.bincount(choice[:-1], minlength=params.pool) @ per_pool)
    cat_chunks += int(np.unique(_chunk_of(tail_ends, tail)).shape[0])
    info = {
        "params": asdict(params),
        "build_s": round(build_s, 2),
        "pool_s": round(t_pool, 2),
        "tiles_s": round(t_tiles, 2),
        "obs_s": round(t_obs, 2),
        "n_tiles": int(n_tiles),
        "nnz": int(tile_nnz.sum()),
        "tile_bytes": int(tile_bytes.sum()),
        "obs_bytes": int(sum(obs_fields["obs_shard_bytes"])),
        "disk_bytes": _du(root),
        "category": category,
        "category_cells": cat_cells,
        "category_tiles": cat_tiles,
        "category_chunks": int(cat_chunks),
        "reused": False,
    }
    info_path.write_text(json.dumps(info, indent=1))
    return Built(root, params, info)


def pick_category(
    params: Params, tile_cells: np.ndarray, choice: np.ndarray, codes: np.ndarray, fraction: float = 0.01
) -> tuple[str, int, int]:
    """The cell type whose share of the cells is nearest ``fraction``: its name, cells and tiles holding it."""
    n_types = len(CELL_TYPES)
    per_pool = np.stack([np.bincount(row, minlength=n_types) for row in codes])  # [pool, types]
    full = tile_cells == params.tile_size
    counts = np.bincount(choice[full], minlength=params.pool) @ per_pool
    present = np.bincount(choice[full], minlength=params.pool) @ (per_pool > 0)
    if not full[-1]:
        tail = np.bincount(codes[choice[-1], : tile_cells[-1]], minlength=n_types)
        counts = counts + tail
        present = present + (tail > 0)
    best = int(np.argmin(np.abs(counts / params.n_cells - fraction)))
    return CELL_TYPES[best], int(counts[best]), int(present[best])


def _chunk_ends(blob: bytes) -> np.ndarray:
    """``cell_hi`` of each chunk of a tile (FORMAT.md: header, then ``n_chunks`` entries of 12 ``uint64``)."""
    n_chunks = int(np.frombuffer(blob, dtype="<u4", count=1, offset=36)[0])
    return np.frombuffer(blob, dtype="<u8", count=12 * n_chunks, offset=64).reshape(n_chunks, 12)[:, 1].astype(np.int64)


def _chunk_of(ends: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return np.searchsorted(ends, rows, side="right")


def chunks_needed(built: Built, cells: np.ndarray) -> int:
    """Chunks (of all tiles) that hold at least one of ``cells``: what a reader must decode at the least."""
    from deltacells.format import tile_path

    params = built.params
    tile_cells, choice = tile_layout(params)
    n_tiles = tile_cells.shape[0]
    first = {int(k): t for t, k in reversed(list(enumerate(choice[:-1])))}  # a tile stored from each pool tile
    head = 64 + 96 * params.n_chunks
    ends_of = {}
    for k, t in first.items():
        with open(built.path / tile_path(t), "rb") as f:
            ends_of[k] = _chunk_ends(f.read(head))
    with open(built.path / tile_path(n_tiles - 1), "rb") as f:
        last_ends = _chunk_ends(f.read(head))
    tiles = cells // params.tile_size
    rows = cells - tiles * params.tile_size
    chunk = np.empty_like(cells)
    for t in np.unique(tiles):  # at most n_tiles groups; the cells are sorted
        lo, hi = np.searchsorted(tiles, [t, t + 1])
        ends = last_ends if t == n_tiles - 1 else ends_of[int(choice[t])]
        chunk[lo:hi] = _chunk_of(ends, rows[lo:hi])
    return int(np.unique(tiles * (params.n_chunks + 1) + chunk).shape[0])


def estimate_bytes(params: Params) -> int:
    """Disk a build will take, from one encoded pool tile (an overestimate by a few percent at most)."""
    from deltacells.codec import encode_tile

    small = Params(**{**asdict(params), "pool": 1})
    matrix = make_pool(small)[0][0]
    blob = encode_tile(matrix.indptr, matrix.indices, matrix.data, params.n_genes, n_chunks=params.n_chunks,
                       level=params.level)  # fmt: skip
    n_tiles = -(-params.n_cells // params.tile_size)
    tiles = (params.pool if params.link == "hard" else n_tiles) * (len(blob) + 4096)
    return int(tiles + params.n_cells * 4)  # obs: about 3 bytes per cell (names compress well)
