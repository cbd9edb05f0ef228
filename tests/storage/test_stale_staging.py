"""What killed writers leave at a dataset's root: found by ``validate``, removed by ``--remove-staging`` (issue 42.7).

On S3 an appender killed after staging and before its commit leaves ``.deltacells-append-<id>/`` objects that no
manifest names. ``validate`` reports each such prefix with the age of its newest object (never as a problem of
the dataset); :func:`~deltacells.validate.remove_staging` removes those older than a bound, never the pending
commit's prefix, and an appender whose staged objects were removed while it paused refuses to commit.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tests.servers import S3Bucket
from tests.servers.appenders import append_and_die_before_commit, batch

import deltacells
from deltacells.cli import main
from deltacells.core import _commit as commit_module
from deltacells.core import read_for_commit
from deltacells.errors import StorageError
from deltacells.format import APPEND_PREFIX, STAGING_PREFIX
from deltacells.storage import open_store
from deltacells.validate import find_staging, remove_staging, validate_dataset

TILE = 16


def _killed_appender(url: str, options: dict[str, Any] | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run an appender in a fresh process that dies once its objects are staged."""
    # the child imports tests.servers.appenders: spawned children start with the parent's sys.path
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))
    child = multiprocessing.get_context("spawn").Process(
        target=append_and_die_before_commit, args=(url, options, 1000, 40)
    )
    child.start()
    child.join(120)
    assert child.exitcode == 9


def test_a_killed_appenders_staging_on_s3_is_reported_then_removed(
    s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, options = f"{s3_bucket.url}/ds", s3_bucket.storage_options
    deltacells.write_deltacells(batch(0, 20), url, tile_size=TILE, progress=False, storage_options=options)
    before = open_store(url, options).read("manifest.json")
    _killed_appender(url, options, monkeypatch)
    store = open_store(url, options)
    assert store.read("manifest.json") == before  # the dataset is the old version, whole

    report = validate_dataset(url, storage_options=options)
    assert report.ok  # not a problem of the dataset...
    (stale,) = report.staging  # ...but reported, with what it holds and its age
    assert stale.prefix.startswith(APPEND_PREFIX) and stale.kind == "append"
    staged = store.objects_under(stale.prefix)
    assert stale.n_objects == len(staged) >= 3  # the completed last tile, new tiles, obs
    assert stale.n_bytes == sum(o.size for o in staged)
    assert stale.age is not None and 0 <= stale.age < 600
    assert "append's staging" in str(report) and stale.prefix in str(report)
    assert report.to_dict()["staging"][0]["prefix"] == stale.prefix

    assert remove_staging(url, storage_options=options) == []  # too young by default (a day)
    assert remove_staging(url, older_than=3600, storage_options=options) == []
    assert store.objects_under(stale.prefix)
    assert [s.prefix for s in remove_staging(url, older_than=0, storage_options=options)] == [stale.prefix]
    assert store.objects_under(stale.prefix) == []
    assert validate_dataset(url, storage_options=options).staging == []
    deltacells.write_deltacells(batch(2000, 5), url, append=True, progress=False, storage_options=options)
    got = deltacells.read_deltacells(url, storage_options=options)
    assert got.n_obs == 25 and got.obs_names[-1] == "cell2004"  # the killed append's cells never landed


def test_the_cli_reports_and_removes_by_age(s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    url, options = f"{s3_bucket.url}/ds", s3_bucket.storage_options
    deltacells.write_deltacells(batch(0, 20), url, tile_size=TILE, progress=False, storage_options=options)
    _killed_appender(url, options, monkeypatch)
    so = ["--storage-options", json.dumps(options)]
    runner = CliRunner()
    shown = runner.invoke(main, ["validate", url, "-q", *so])
    assert shown.exit_code == 0, shown.output
    assert "not part of the dataset" in shown.output and "--remove-staging" in shown.output
    kept = runner.invoke(main, ["validate", url, "-q", "--remove-staging", "--older-than", "1h", *so])
    assert kept.exit_code == 0 and "removed" not in kept.output
    removed = runner.invoke(main, ["validate", url, "--json", "--remove-staging", "--older-than", "0", *so])
    assert removed.exit_code == 0, removed.output
    doc = json.loads(removed.output)
    assert doc["ok"] and doc["staging"] == [] and len(doc["removed_staging"]) == 1
    bad = runner.invoke(main, ["validate", url, "--remove-staging", "--older-than", "soon", *so])
    assert bad.exit_code == 2 and "not a duration" in bad.output


def test_a_live_appenders_staging_is_never_removed(s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    """An appender paused before its commit keeps its prefix under any bound it has not outlived; one whose
    objects were removed while it paused longer than the bound refuses to commit (the dataset is unchanged)."""
    url, options = f"{s3_bucket.url}/ds", s3_bucket.storage_options
    deltacells.write_deltacells(batch(0, 20), url, tile_size=TILE, progress=False, storage_options=options)
    check = commit_module._check_staged
    staged, go = threading.Event(), threading.Event()

    def pause_before_commit(*args: Any) -> None:
        staged.set()
        assert go.wait(60)
        check(*args)

    monkeypatch.setattr(commit_module, "_check_staged", pause_before_commit)
    outcome: list[BaseException | None] = []

    def append(start: int) -> None:
        try:
            deltacells.write_deltacells(batch(start, 30), url, append=True, progress=False, storage_options=options)
        except BaseException as exc:  # reported to the test
            outcome.append(exc)
        else:
            outcome.append(None)

    worker = threading.Thread(target=append, args=(1000,))
    worker.start()
    assert staged.wait(60)
    assert remove_staging(url, older_than=600, storage_options=options) == []  # younger than the bound: kept
    go.set()
    worker.join(60)
    assert outcome == [None]
    assert deltacells.read_deltacells(url, storage_options=options).n_obs == 50

    staged.clear(), go.clear(), outcome.clear()
    before = open_store(url, options).read("manifest.json")
    worker = threading.Thread(target=append, args=(2000,))
    worker.start()
    assert staged.wait(60)
    assert len(remove_staging(url, older_than=0, storage_options=options)) == 1  # "no writer runs": it did
    go.set()
    worker.join(60)
    (error,) = outcome
    assert isinstance(error, StorageError) and "were removed before this append committed" in str(error)
    assert open_store(url, options).read("manifest.json") == before
    assert validate_dataset(url, storage_options=options).ok


def test_the_pending_commits_prefix_is_part_of_the_dataset(tmp_path: Path) -> None:
    """The prefix a pending manifest names (an appender killed while moving) is neither reported nor removed."""
    path = tmp_path / "ds.deltacells"
    deltacells.write_deltacells(batch(0, 20), path, tile_size=TILE, progress=False)
    store = open_store(path)
    real_roll_forward = commit_module.roll_forward
    commit_module.roll_forward = lambda *args: None  # killed right after its commit: nothing moved
    try:
        deltacells.write_deltacells(batch(1000, 30), path, append=True, progress=False)
    finally:
        commit_module.roll_forward = real_roll_forward
    _, _, commit = read_for_commit(store)
    assert commit.pending and commit.staging is not None
    assert find_staging(store, keep=commit.staging) == []
    report = validate_dataset(path)
    assert report.ok and report.staging == []
    assert remove_staging(path, older_than=0) == []
    assert store.exists(commit.staging)
    assert deltacells.read_deltacells(path).n_obs == 50


def test_on_a_local_disk_ages_come_from_mtimes_and_the_lock_is_held(tmp_path: Path) -> None:
    path = tmp_path / "ds.deltacells"
    deltacells.write_deltacells(batch(0, 20), path, tile_size=TILE, progress=False)
    store = open_store(path)
    old, young = f"{APPEND_PREFIX}{'a' * 32}", f"{STAGING_PREFIX}{'b' * 32}"
    store.write(f"{old}/tiles/tile_000001.dct", b"x" * 10)
    store.write(f"{old}/obs/obs_0000.parquet", b"y" * 5)
    store.write(f"{young}/manifest.json", b"{}")
    two_days_ago = time.time() - 2 * 86400
    for name in ("tiles/tile_000001.dct", "obs/obs_0000.parquet"):
        os.utime(path / old / name, (two_days_ago, two_days_ago))
    found = {s.prefix: s for s in validate_dataset(path).staging}
    assert found[old].kind == "append" and (found[old].n_objects, found[old].n_bytes) == (2, 15)
    assert found[old].age is not None and found[old].age >= 2 * 86400 - 60
    assert found[young].kind == "overwrite" and found[young].age is not None and found[young].age < 600
    assert [s.prefix for s in remove_staging(path)] == [old]  # a day by default
    assert young in store.list() and old not in store.list()


def test_removal_waits_for_a_local_writer_and_makes_nothing_where_there_is_no_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from filelock import FileLock

    from deltacells.validate import _staging

    monkeypatch.setattr(_staging, "LOCK_WAIT", 0.2)
    assert remove_staging(tmp_path / "absent.deltacells", older_than=0) == []
    assert not (tmp_path / "absent.deltacells").exists()
    path = tmp_path / "ds.deltacells"
    deltacells.write_deltacells(batch(0, 20), path, tile_size=TILE, progress=False)
    open_store(path).write(f"{APPEND_PREFIX}{'c' * 32}/x", b"1")
    refused = pytest.raises(StorageError, match="a writer is working on this dataset now")
    with FileLock(path / ".deltacells-lock"), refused:  # a writer at work
        remove_staging(path, older_than=0)
