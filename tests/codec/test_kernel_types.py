"""Each kernel is compiled once per type of its data, never again for a read-only copy of the same arrays.

numba compiles a kernel per argument types, and a read-only array is not of the type of a writable one. A
kernel reached with a tile's bytes (read-only) on one path and a fresh array (writable) on another would be
compiled twice: about a second each on a machine with no cache yet (what the demo's first reads paid), and
loaded twice in every process. Every read path is exercised in a fresh interpreter (other tests call
kernels directly, with arrays of their own), then no kernel called from Python may have two signatures that
differ only in which arrays are read-only.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import numpy as np
    import anndata as ad
    from numba.core import types
    import deltacells as dc
    from deltacells.codec import _kernels, decode_chunks, parse_prefix
    from deltacells.datasets import synthetic_counts
    from deltacells.format import tile_path
    from deltacells.tiles import _gather

    root = Path(sys.argv[1])
    adata = synthetic_counts(600, 300, seed=0)
    dc.write_deltacells(adata, root / "ds", tile_size=32, progress=False)
    blob = (root / "ds" / tile_path(0)).read_bytes()
    dc.decode_tile(blob)  # read-only bytes
    dc.decode_tile(bytearray(blob))  # writable bytes
    prefix = parse_prefix(blob, object_size=len(blob))
    decode_chunks(prefix, [(0, blob)], [0])
    rows = np.array([5, 300, 2, 599, 2, 450])
    spread = np.arange(0, 600, 7)[::-1]  # every tile, in decreasing order
    for cache in (0, 2**26):  # decoded tiles fresh (writable), or frozen in the cache (read-only)
        for order in ("original", "stored"):
            ds = dc.open_dataset(root / "ds", tile_cache_bytes=cache).with_gene_order(order)
            for dtype in (np.float32, np.int32):
                ds.read_rows(dtype=dtype)  # whole tiles into the output
                ds.read_rows(slice(10, 400), dtype=dtype)
                ds.read_rows(rows, dtype=dtype)  # gathered rows
                ds.read_rows(rows[:2], dtype=dtype)
                ds.read_rows(spread, dtype=dtype)
                ds.read_rows_uncached(rows, dtype=dtype)
                ds.read_row_batches(rows, np.array([0, 3, 6]), dtype=dtype)
    for cache in (0, 2**26):
        back = dc.read_deltacells(root / "ds", cache_dir=root / "cache", tile_cache_bytes=cache)
        back[back.obs_names[::7]].to_memory()
        back.X[np.arange(0, 600, 37)[::-1]]
        back.X[:64]

    def erased(signature):
        return tuple(t.copy(readonly=False) if isinstance(t, types.Array) else t for t in signature)

    twice = {}
    for module in (_kernels, _gather):
        for name in dir(module):
            if name.startswith("_"):  # called by other kernels only, typed by each caller: compiled with it
                continue
            kernel = getattr(module, name)
            signatures = getattr(kernel, "signatures", None)
            if not signatures:
                continue
            kinds = {}
            for signature in signatures:
                kinds.setdefault(erased(signature), []).append(str(signature))
            twice.update({f"{module.__name__}.{name}": s for s in kinds.values() if len(s) > 1})
    print(json.dumps(twice))
    """
)


@pytest.mark.skipif("NUMBA_DISABLE_JIT" in __import__("os").environ, reason="no compiled kernels to count")
def test_no_kernel_is_compiled_again_for_read_only_arrays(tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    twice = __import__("json").loads(done.stdout.strip().splitlines()[-1])
    assert twice == {}, "kernels compiled again for arrays that differ only in being read-only:\n" + "\n".join(
        f"{name}: {signatures}" for name, signatures in twice.items()
    )
