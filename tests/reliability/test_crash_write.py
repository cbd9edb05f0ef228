"""A converter SIGKILLed at random points never leaves a dataset that reads as complete.

Each case forks a child that runs ``write_deltacells`` over synthetic data (small tiles, one obs shard per
tile, zstd level 5, an embedding and an uns entry in ``anndata.zarr``: about a second of writing, half tiles,
half obs shards), and kills it: from outside
after a random delay, or from inside at a chosen I/O event (before or after the n-th tile or shard, halfway
through writing a file, just before the manifest is renamed into place, while an old dataset is being
cleared). Then:

* the output is refused by ``open_dataset`` and ``read_deltacells`` with ``DatasetNotFoundError``, except
  when the converter was overwriting a complete dataset and was killed before the new one was complete:
  then the old dataset is byte-for-byte as it was and reads (the new one was being written under a staging
  prefix beside it);
* a re-run with ``overwrite=True`` succeeds and gives exactly the dataset an uninterrupted run writes;
* a complete dataset at another path is byte-for-byte untouched.

The kill points are drawn from ``$DELTACELLS_RELIABILITY_SEED`` (fixed by default, so CI is reproducible;
set it to explore other points).
"""

from __future__ import annotations

import os
import pickle
import random
import shutil
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from reliability_lib import convert_and_maybe_die, run_killable, snapshot

import deltacells
from deltacells.datasets import synthetic_counts
from deltacells.errors import DatasetNotFoundError
from deltacells.format import STAGING_PREFIX

#: Each case converts in a child process and kills it (about 10 s each): run once, on the README's Python.
pytestmark = pytest.mark.slow

SEED = int(os.environ.get("DELTACELLS_RELIABILITY_SEED", "20241129"))
N_CELLS, N_GENES, TILE = 6000, 300, 32
N_TILES = -(-N_CELLS // TILE)
SLOW = {"tile_size": TILE, "obs_tiles_per_file": 1, "level": 5, "threads": 2}  # the run that is killed
FAST = {**SLOW, "level": 1}  # re-runs, and the reference they must reproduce byte for byte

_rng = random.Random(SEED)
TILE_NAME, SHARD_NAME = r"tiles/tile_\d{6}\.dct", r"obs/obs_\d{4}\.parquet"
PLANS: dict[str, dict[str, Any]] = {
    **{f"random-time-{i}": {"at": _rng.uniform(0.05, 0.85)} for i in range(4)},
    "before-a-tile": {"hook": "before_write", "match": TILE_NAME, "nth": _rng.randint(1, N_TILES)},
    # anndata.zarr (written by zarr, not through deltacells' store) is complete, no tile is written yet
    "extras-written-before-the-first-tile": {"hook": "before_write", "match": TILE_NAME, "nth": 1},
    "torn-tile": {"hook": "partial_write", "match": TILE_NAME, "nth": _rng.randint(1, N_TILES)},
    "after-an-obs-shard": {"hook": "after_write", "match": SHARD_NAME, "nth": _rng.randint(1, N_TILES - 1)},
    "after-the-last-obs-shard": {"hook": "after_write", "match": SHARD_NAME, "nth": N_TILES},
    "after-obs-schema": {"hook": "after_write", "match": r"obs/schema\.json"},
    "torn-manifest": {"hook": "partial_write", "match": r"manifest\.json"},
    "manifest-not-yet-renamed": {"hook": "before_rename", "match": r"manifest\.json"},
    "overwrite-after-old-manifest-removed": {"hook": "after_remove", "match": r"manifest\.json", "old": True},
    "overwrite-random-time": {"at": _rng.uniform(0.05, 0.85), "old": True},
    "overwrite-a-late-tile": {"hook": "before_write", "match": TILE_NAME, "nth": N_TILES - 2, "old": True},
    "overwrite-torn-new-manifest": {"hook": "partial_write", "match": r"manifest\.json", "old": True},
}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, ctx: Any) -> dict[str, Any]:
    """The source (pickled for the children), a complete reference dataset, and the duration of a slow write."""
    base = tmp_path_factory.mktemp("crash")
    adata = synthetic_counts(N_CELLS, N_GENES, seed=3)
    adata.obsm["X_emb"] = np.random.default_rng(0).random((N_CELLS, 4)).astype(np.float32)  # anndata.zarr too
    adata.uns["note"] = "kept"
    source = base / "source.pkl"
    source.write_bytes(pickle.dumps(adata))
    reference = base / "reference"
    deltacells.write_deltacells(adata, reference, progress=False, **FAST)
    old = base / "old"
    deltacells.write_deltacells(synthetic_counts(N_CELLS // 2, N_GENES, seed=4), old, progress=False, **FAST)
    # how long an uninterrupted slow write takes, in a child like the ones that get killed
    code, finished, seconds = run_child(ctx, source, base / "calibration", {})
    assert code == 0 and finished
    return {
        "source": source,
        "reference": reference,
        "files": snapshot(reference),
        "old": old,
        "old_files": snapshot(old),
        "seconds": seconds,
        "base": base,
    }


def without_staging(files: dict[str, str]) -> dict[str, str]:
    """A snapshot without what an overwrite writes under its staging prefix."""
    return {name: digest for name, digest in files.items() if not name.startswith(STAGING_PREFIX)}


def run_child(ctx: Any, source: Path, out: Path, plan: dict[str, Any], *, kill_after: float | None = None) -> Any:
    """Fork a converter; SIGKILL it ``kill_after`` seconds after it started writing (or let its plan kill it)."""
    return run_killable(ctx, convert_and_maybe_die, (str(source), str(out), SLOW), plan, kill_after=kill_after)


def state(root: Path) -> str:
    """What a killed converter left behind, for messages."""
    if not root.exists():
        return "nothing"
    tiles = list((root / "tiles").glob("*.dct")) if (root / "tiles").exists() else []
    shards = list((root / "obs").glob("*.parquet")) if (root / "obs").exists() else []
    temporaries = [p.name for p in root.rglob("*.tmp")]
    sidecars = [n for n in ("gene_order.npy", "var_names.txt", "var.parquet") if (root / n).exists()]
    schema, manifest = (root / "obs" / "schema.json").exists(), (root / "manifest.json").exists()
    return (
        f"{len(tiles)}/{N_TILES} tiles, {len(shards)}/{N_TILES} obs shards, schema {schema}, sidecars {sidecars}, "
        f"manifest {manifest}, temporary files {temporaries[:3]}{'...' if len(temporaries) > 3 else ''}"
    )


@pytest.mark.parametrize("name", list(PLANS))
def test_killed_converter(setup: dict[str, Any], ctx: Any, tmp_path: Path, name: str) -> None:
    plan = PLANS[name]
    out = tmp_path / "out"
    if plan.get("old"):  # overwriting a complete dataset (another one: the kill must not change a byte of it)
        shutil.copytree(setup["old"], out)
    kill_after = plan["at"] * setup["seconds"] if "at" in plan else None
    code, finished, _ = run_child(ctx, setup["source"], out, plan, kill_after=kill_after)
    left = state(out)
    print(f"{name}: killed {'never' if finished else 'with ' + left}")
    if finished:  # a random time after the end of the write: the dataset must then be complete and right
        assert "at" in plan and code == 0, f"{name}: the plan should have killed the converter ({left})"
        assert deltacells.open_dataset(out).n_cells == N_CELLS
    else:
        assert code == -signal.SIGKILL, f"{name}: exit code {code} ({left})"
        if plan.get("old") and (out / "manifest.json").exists():  # killed before the swap: the old one is whole
            assert without_staging(snapshot(out)) == setup["old_files"], f"{name}: the old dataset changed"
            assert deltacells.read_deltacells(out, cache_dir=tmp_path / "cache").X[-5:].nnz > 0
        else:
            with pytest.raises(DatasetNotFoundError, match=r"no manifest\.json"):
                deltacells.open_dataset(out)
            with pytest.raises(DatasetNotFoundError):
                deltacells.read_deltacells(out, cache_dir=tmp_path / "cache")
    # a re-run replaces whatever was left, and writes exactly what an uninterrupted run writes
    deltacells.write_deltacells(pickle.loads(setup["source"].read_bytes()), out, progress=False, overwrite=True, **FAST)
    files = snapshot(out)  # nothing else: not even a temporary file of the killed run
    assert files == setup["files"], f"{name}: the re-run differs from an uninterrupted run (killed with: {left})"
    adata = deltacells.read_deltacells(out, cache_dir=tmp_path / "cache")
    assert adata.shape == (N_CELLS, N_GENES) and adata.X[-5:].nnz > 0
    # the complete dataset at another path was never touched
    assert snapshot(setup["reference"]) == setup["files"]


def test_kill_points_cover_every_phase(setup: dict[str, Any], ctx: Any, tmp_path: Path) -> None:
    """The event-driven plans really stop the converter where they say (so the cases above mean something)."""
    expected = {
        "before-a-tile": lambda tiles, shards, m: 0 <= tiles < N_TILES and shards == 0,
        "after-an-obs-shard": lambda tiles, shards, m: tiles == N_TILES and 0 < shards < N_TILES,
        "after-the-last-obs-shard": lambda tiles, shards, m: tiles == N_TILES and shards == N_TILES,
        "manifest-not-yet-renamed": lambda tiles, shards, m: tiles == shards == N_TILES and m,
    }
    for name, check in expected.items():
        out = tmp_path / name
        code, finished, _ = run_child(ctx, setup["source"], out, PLANS[name])
        tiles = len(list((out / "tiles").glob("*.dct")))
        shards = len(list((out / "obs").glob("*.parquet"))) if (out / "obs").exists() else 0
        manifest_tmp = bool(list(out.glob("manifest.json.*.tmp")))
        assert code == -signal.SIGKILL and not finished, name
        assert check(tiles, shards, manifest_tmp), f"{name}: {state(out)}"


def test_rerun_leaves_no_temporary_files(setup: dict[str, Any], ctx: Any, tmp_path: Path) -> None:
    """A torn manifest.json.<hex>.tmp is recognized as the writer's own (until c2c022d a retry said 'other files'
    and a re-run with overwrite=True kept the stale file for good)."""
    out = tmp_path / "out"
    code, _, _ = run_child(ctx, setup["source"], out, PLANS["torn-manifest"])
    assert code == -signal.SIGKILL
    assert list(out.glob("manifest.json.*.tmp")), "the kill left a torn temporary manifest"
    adata = pickle.loads(setup["source"].read_bytes())
    with pytest.raises(FileExistsError, match="unfinished deltacells dataset"):
        deltacells.write_deltacells(adata, out, progress=False, **FAST)
    deltacells.write_deltacells(adata, out, progress=False, overwrite=True, **FAST)
    assert sorted(p.name for p in out.rglob("*.tmp")) == []
