"""An appender SIGKILLed at any step of the commit protocol leaves the old version or the new one, never a mix.

Each case forks a child that appends 200 cells (with obs and an embedding) to a 300-cell dataset whose last tile
is partial, and kills it at one step of the protocol (``deltacells.core._commit``): while it stages tiles,
obs shards and the schema; while the committing manifest is written (torn, or not yet renamed); right after
the commit; while it moves the staged objects to their places; before and after it writes the finished
manifest; or at a random time. Then:

* the dataset opens, validates, and reads as the old version (killed before the commit) or as the new one
  (killed after it), cell for cell, obs and embedding included;
* the next append finishes or clears what the killed one left (no staging prefix remains) and gives exactly
  that version plus its own cells.
"""

from __future__ import annotations

import os
import pickle
import random
import signal
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pytest
from reliability_lib import append_and_maybe_die, run_killable

import deltacells
from deltacells.datasets import synthetic_counts
from deltacells.format import APPEND_PREFIX
from deltacells.validate import validate_dataset

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("DELTACELLS_RELIABILITY_SEED", "20241129"))
TILE, OLD, NEW, NEXT = 32, 300, 200, 50
TILE_NAME, SHARD_NAME, MANIFEST = r"tiles/tile_\d{6}\.dct", r"obs/obs_\d{4}\.parquet", r"manifest\.json"
_rng = random.Random(SEED)

#: Each plan: where the child dies, and the version the dataset must then read as.
PLANS: dict[str, dict[str, Any]] = {
    "staging-the-completed-last-tile": {"hook": "before_write", "match": TILE_NAME, "nth": 1, "then": "old"},
    "staging-a-new-tile": {"hook": "after_write", "match": TILE_NAME, "nth": 4, "then": "old"},
    "torn-staged-tile": {"hook": "partial_write", "match": TILE_NAME, "nth": 2, "then": "old"},
    "staged-obs-shard": {"hook": "after_write", "match": SHARD_NAME, "nth": 1, "then": "old"},
    "staged-obs-schema": {"hook": "after_write", "match": r"obs/schema\.json", "then": "old"},
    "torn-commit": {"hook": "partial_write", "match": MANIFEST, "nth": 1, "then": "old"},
    "commit-not-yet-renamed": {"hook": "before_rename", "match": MANIFEST, "nth": 1, "then": "old"},
    "right-after-the-commit": {"hook": "after_write", "match": MANIFEST, "nth": 1, "then": "new"},
    "before-the-first-move": {"hook": "before_replace", "match": TILE_NAME, "nth": 1, "then": "new"},
    "after-some-moves": {"hook": "after_replace", "match": TILE_NAME, "nth": 3, "then": "new"},
    "after-moving-an-obs-shard": {"hook": "after_replace", "match": SHARD_NAME, "nth": 1, "then": "new"},
    "before-the-finished-manifest": {"hook": "before_write", "match": MANIFEST, "nth": 2, "then": "new"},
    "after-the-finished-manifest": {"hook": "after_write", "match": MANIFEST, "nth": 2, "then": "new"},
    **{f"random-time-{i}": {"at": _rng.uniform(0.0, 1.0), "then": "either"} for i in range(3)},
}


def cells(n: int, start: int, seed: int) -> ad.AnnData:
    adata = synthetic_counts(n, 60, seed=seed)
    adata.obs_names = [f"cell{start + i}" for i in range(n)]
    adata.obsm["X_emb"] = np.random.default_rng(seed).random((n, 4)).astype(np.float32)
    return adata


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, ctx: Any) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("crash-append")
    old, new, following = cells(OLD, 0, 1), cells(NEW, OLD, 2), cells(NEXT, OLD + NEW, 3)
    source = base / "new.pkl"
    source.write_bytes(pickle.dumps(new))
    template = base / "template"
    deltacells.write_deltacells(old, template, tile_size=TILE, obs_tiles_per_file=2, progress=False)
    calibration = base / "calibration"
    _copy(template, calibration)
    code, finished, seconds = run_child(ctx, source, calibration, {})
    assert code == 0 and finished
    return {"old": old, "new": new, "next": following, "source": source, "template": template, "seconds": seconds}


def run_child(ctx: Any, source: Path, out: Path, plan: dict[str, Any], *, kill_after: float | None = None) -> Any:
    """Fork an appender (see ``run_killable``)."""
    return run_killable(ctx, append_and_maybe_die, (str(source), str(out)), plan, kill_after=kill_after)


@pytest.mark.parametrize("name", list(PLANS))
def test_killed_appender(setup: dict[str, Any], ctx: Any, tmp_path: Path, name: str) -> None:
    plan = PLANS[name]
    out = tmp_path / "ds"
    _copy(setup["template"], out)
    kill_after = plan["at"] * setup["seconds"] if "at" in plan else None
    code, finished, _ = run_child(ctx, setup["source"], out, plan, kill_after=kill_after)
    if "hook" in plan:
        assert code == -signal.SIGKILL and not finished, f"the child was not killed where planned ({code})"

    versions = {"old": setup["old"], "new": ad.concat([setup["old"], setup["new"]])}
    cache = tmp_path / "cache"
    got = deltacells.read_deltacells(out, cache_dir=cache).to_memory()
    which = plan["then"] if plan["then"] != "either" else ("new" if got.n_obs == OLD + NEW else "old")
    _assert_equal(got, versions[which])
    assert validate_dataset(out).ok

    deltacells.write_deltacells(setup["next"], out, append=True, progress=False)  # finishes or clears it
    assert not [p.name for p in out.iterdir() if p.name.startswith(APPEND_PREFIX)]
    grown = deltacells.read_deltacells(out, cache_dir=cache).to_memory()
    _assert_equal(grown, ad.concat([versions[which], setup["next"]]))
    assert validate_dataset(out).ok


def _assert_equal(got: ad.AnnData, expected: ad.AnnData) -> None:
    assert list(got.obs_names) == list(expected.obs_names)
    np.testing.assert_array_equal(got.X.toarray(), expected[:, got.var_names].X.toarray())
    np.testing.assert_array_equal(got.obsm["X_emb"], expected.obsm["X_emb"])
    for column in expected.obs.columns:
        assert got.obs[column].astype(str).tolist() == expected.obs[column].astype(str).tolist(), column


def _copy(source: Path, target: Path) -> None:
    import shutil

    shutil.copytree(source, target)
