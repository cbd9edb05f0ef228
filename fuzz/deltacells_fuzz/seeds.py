"""Seed inputs: valid tiles, manifests and obs schemas, from the conformance suite and made here.

Every seed must pass its oracle (:func:`deltacells_fuzz.workers.warm_up` checks it): the mutators start from
inputs that reach deep into the decoders.
"""

from __future__ import annotations

import json

from ._tilebytes import declared_frame_bytes
from .targets import CONFORMANCE, NOJIT_MAX_DECLARED


def tile_seeds() -> list[bytes]:
    """Valid tiles: the conformance vectors, a real dataset's tiles, and tiles made to reach every path."""
    import numpy as np

    import deltacells

    seeds = [p.read_bytes() for p in sorted((CONFORMANCE / "valid").glob("*.dct"))]
    tiles = CONFORMANCE / "datasets" / "complete" / "tiles"
    seeds += [p.read_bytes() for p in sorted(tiles.glob("*.dct"))[-2:]]
    rng = np.random.default_rng(1)

    def encode(rows: list[list[tuple[int, int]]], n_genes: int, n_chunks: int) -> bytes:
        indptr = np.cumsum([0] + [len(r) for r in rows])
        indices = np.array([g for r in rows for g, _ in r], dtype=np.int64)
        data = np.array([v for r in rows for _, v in r], dtype=np.int64)
        return deltacells.encode_tile(indptr, indices, data, n_genes, n_chunks=n_chunks, level=3)

    # value and gap exceptions (and a count above 2^24), several chunks, empty cells
    rows = []
    for _ in range(24):
        genes = np.sort(rng.choice(200_000, size=int(rng.integers(0, 12)), replace=False))
        rows.append([(int(g), int(rng.choice([1, 2, 3, 70_000, 2**25]))) for g in genes])
    seeds.append(encode(rows, 200_000, 3))
    # a cell of more than 32767 nonzeros (the int64 prefix sum), genes up to 2^31 - 1
    seeds.append(encode([[(g, 1 + g % 3) for g in range(0, 80_000, 2)], [(2**31 - 1, 5)]], 2**31, 1))
    # more than 200,000 nonzeros in 8 chunks (the threaded path); compresses to a few kilobytes
    seeds.append(encode([[(g, 1 + (g % 7 == 0)) for g in range(1000)] for _ in range(250)], 1000, 8))
    # one gene, one cell
    seeds.append(encode([[(0, 1)]], 1, 1))
    return seeds


def manifest_seeds() -> list[bytes]:
    """Manifests of the conformance datasets and a few made here."""
    seeds = [p.read_bytes() for p in sorted((CONFORMANCE / "datasets").glob("*/manifest.json"))]
    plain = {
        "format": "deltacells-dataset",
        "version": 2,
        "n_cells": 5,
        "n_genes": 3,
        "tile_size": 2,
        "tile_cells": [2, 2, 1],
        "tile_nnz": [1, 6, 0],
        "tile_bytes": [200, 300, 100],
        "n_chunks": 8,
        "zstd_level": 19,
        "has_gene_order": False,
        "has_var_names": False,
        "has_var_table": False,
        "has_obs": True,
        "obs_tiles_per_file": 2,
        "obs_shard_bytes": [10, 20],
        "obs_shard_sha256": ["0" * 64, "a" * 64],
        "obs_fingerprint": "b" * 24,
        "metadata": {"source": "fuzz", "nested": [1, {"a": None}]},
    }
    seeds.append(json.dumps(plain).encode())
    empty = {**plain, "n_cells": 0, "tile_cells": [], "tile_nnz": [], "tile_bytes": [], "has_obs": False}
    seeds.append(json.dumps(empty, indent=1).encode())
    return seeds


def schema_seeds() -> list[bytes]:
    """The conformance schema and schemas with every kind, type and option."""
    seeds = [p.read_bytes() for p in sorted((CONFORMANCE / "datasets").glob("*/obs/schema.json"))][:2]
    columns = [
        {"name": "_index", "kind": "string", "arrow_type": "string", "categories": None},
        {"name": "ct", "kind": "category", "arrow_type": "int8", "categories": ["T", "B", "NK"]},
        {"name": "grade", "kind": "category", "arrow_type": "int8", "categories": [1, 2, 3], "ordered": True},
        {"name": "dose", "kind": "category", "arrow_type": "int16", "categories": [0.5, 1.5]},
        {"name": "flagc", "kind": "category", "arrow_type": "int8", "categories": [True, False]},
        {"name": "n", "kind": "numeric", "arrow_type": "int64", "categories": None, "pandas_dtype": "Int64"},
        {"name": "x", "kind": "numeric", "arrow_type": "float", "categories": None},
        {"name": "ok", "kind": "bool", "arrow_type": "bool", "categories": None},
        {"name": "empty", "kind": "category", "arrow_type": "int32", "categories": []},
    ]
    seeds.append(json.dumps({"format": "deltacells-obs", "version": 1, "columns": columns}, indent=1).encode())
    seeds.append(json.dumps({"format": "deltacells-obs", "version": 1, "columns": []}).encode())
    return seeds


def seeds_for(target: str) -> list[bytes]:
    """The seed inputs of ``target``."""
    if target == "tile-nojit":
        return [s for s in tile_seeds() if declared_frame_bytes(s) <= NOJIT_MAX_DECLARED]
    if target == "tile":
        return tile_seeds()
    return manifest_seeds() if target == "manifest" else schema_seeds()
