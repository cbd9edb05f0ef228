"""Appends on S3 (moto's server) and concurrent appenders, on a local disk and on S3 (DECISIONS.md 17).

On S3 the commit is a conditional PUT of ``manifest.json`` (``If-Match`` the ETag read): the loser of a race
gets :class:`~deltacells.errors.CommitConflictError` and starts again (``commit_retries``) or gives up. On a
local disk a lock file serialises the appenders. Either way, the final dataset holds exactly the cells of the
appends that reported success, each batch whole and in one piece.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pytest
from tests.servers import S3Bucket
from tests.servers.appenders import append_batch, batch

import deltacells
from deltacells.core import _append as append_module
from deltacells.core import _commit as commit_module
from deltacells.core import read_for_commit
from deltacells.core._commit import roll_forward
from deltacells.errors import CommitConflictError, StorageError
from deltacells.format import tile_path
from deltacells.storage import BaseStore, FsspecStore, ObstoreStore
from deltacells.validate import validate_dataset

BASE = 20  # cells written before the appenders start
PER_WRITER = 45  # cells each appender adds (not a multiple of the tile size: every append completes a tile)
TILE = 16


#: The two clients of s3:// URLs: the conditional writes and the late movers run with each (the other tests open
#: URLs, which get obstore's client where it is installed).
CLIENTS = {"fsspec": FsspecStore, "obstore": ObstoreStore}


@pytest.fixture(params=list(CLIENTS))
def client(request: pytest.FixtureRequest) -> type[BaseStore]:
    """The store class of one client (obstore's skipped where it is not installed)."""
    if request.param == "obstore":
        pytest.importorskip("obstore")
    return CLIENTS[request.param]


def test_write_if_on_s3(s3_bucket: S3Bucket, client: type[FsspecStore]) -> None:
    store = client(f"{s3_bucket.url}/x", s3_bucket.storage_options)
    first = store.write_if("m.json", b"1", version=None)
    with pytest.raises(CommitConflictError, match="another writer committed first"):
        store.write_if("m.json", b"2", version=None)  # If-None-Match: * on an existing object
    data, version = store.read_versioned("m.json")
    assert (data, version) == (b"1", first)
    second = store.write_if("m.json", b"2", version=version)
    with pytest.raises(CommitConflictError):
        store.write_if("m.json", b"3", version=version)  # If-Match a stale ETag
    assert store.read_versioned("m.json") == (b"2", second)


def test_append_on_s3(s3_bucket: S3Bucket) -> None:
    url, options = f"{s3_bucket.url}/ds", s3_bucket.storage_options
    parts = [batch(0, BASE), batch(1000, PER_WRITER), batch(2001, 7)]
    deltacells.write_deltacells(parts[0], url, tile_size=TILE, progress=False, storage_options=options)
    for part in parts[1:]:
        deltacells.write_deltacells(part, url, append=True, progress=False, storage_options=options)
    _assert_holds(url, options, [0, 1000, 2001], [BASE, PER_WRITER, 7])
    assert not [e for e in FsspecStore(url, options).list() if e.startswith(".deltacells")]


def test_the_loser_of_a_commit_race_retries_or_gives_up(s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    url, options = f"{s3_bucket.url}/ds", s3_bucket.storage_options
    deltacells.write_deltacells(batch(0, BASE), url, tile_size=TILE, progress=False, storage_options=options)
    stage = append_module._stage
    rivals = iter([batch(500, 10), batch(700, 10)])

    def stage_while_another_commits(*args: Any, **kwargs: Any) -> Any:
        staged = stage(*args, **kwargs)
        rival = next(rivals, None)  # another writer commits between our read of the manifest and our commit
        if rival is not None:
            with monkeypatch.context() as inner:
                inner.setattr(append_module, "_stage", stage)
                deltacells.write_deltacells(rival, url, append=True, progress=False, storage_options=options)
        return staged

    monkeypatch.setattr(append_module, "_stage", stage_while_another_commits)
    with pytest.raises(CommitConflictError, match="another writer committed first, 1 time"):
        deltacells.write_deltacells(
            batch(900, 10), url, append=True, progress=False, storage_options=options, commit_retries=0
        )
    _assert_holds(url, options, [0, 500], [BASE, 10])  # the rival's cells, none of the loser's
    deltacells.write_deltacells(batch(901, 10), url, append=True, progress=False, storage_options=options)
    _assert_holds(url, options, [0, 500, 700, 901], [BASE, 10, 10, 10])  # lost once, then committed


@pytest.mark.parametrize("writers", [2, 4])
@pytest.mark.parametrize("where", ["local", "s3"])
def test_concurrent_appenders(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, writers: int
) -> None:
    if where == "s3":
        bucket: S3Bucket = request.getfixturevalue("s3_bucket")
        url, options = f"{bucket.url}/ds", bucket.storage_options
    else:
        url, options = str(tmp_path / "ds"), None
    deltacells.write_deltacells(batch(0, BASE), url, tile_size=TILE, progress=False, storage_options=options)
    starts = [1000 * (i + 1) + i % 2 for i in range(writers)]
    root = str(Path(__file__).resolve().parents[2])  # the children import tests.servers.appenders
    monkeypatch.syspath_prepend(root)  # spawned children start with the parent's sys.path
    context = multiprocessing.get_context("spawn")
    start_at = time.time() + 4.0  # after every child has imported deltacells: the appends overlap
    processes = []
    for start in starts:
        result = str(tmp_path / f"result-{start}")
        process = context.Process(target=append_batch, args=(url, options, start, PER_WRITER, start_at, result))
        process.start()
        processes.append(process)
    for process in processes:
        process.join(120)
        assert process.exitcode == 0
    outcomes = {start: (tmp_path / f"result-{start}").read_text() for start in starts}
    succeeded = [start for start in starts if outcomes[start] == "ok"]
    assert succeeded, outcomes
    assert all(o == "ok" or o.startswith("CommitConflictError") for o in outcomes.values()), outcomes
    _assert_holds(url, options, [0, *succeeded], [BASE] + [PER_WRITER] * len(succeeded), any_order=True)


class LateMover(BaseStore):
    """A store whose first write to (or removal of) ``late`` or anything under it waits for :attr:`go`.

    It stands for a mover whose request reaches the server late: a copy on the server that read its source and
    writes after a pause, a conditional write sent and delayed, a removal sent and delayed. A mixin: made with
    :func:`late_store` over one client's store class.
    """

    def __init__(self, url: str, options: dict[str, Any], late: str) -> None:
        super().__init__(url, options)  # type: ignore[call-arg]
        self.late = late
        self.reached = threading.Event()
        self.go = threading.Event()

    def _stall(self, path: str) -> None:
        if (path == self.late or path.startswith(f"{self.late}/")) and not self.reached.is_set():
            self.reached.set()
            assert self.go.wait(60)

    def replace(self, src: str, dst: str) -> None:
        if dst == self.late or dst.startswith(f"{self.late}/"):
            data = self.read(src)  # the server read the source...
            self._stall(dst)
            self.write(dst, data)  # ... and writes late
            self.delete(src)
            return
        super().replace(src, dst)

    def write_if(self, path: str, data: bytes, *, version: str | None) -> str:
        self._stall(path)
        return super().write_if(path, data, version=version)

    def delete(self, path: str) -> None:
        self._stall(path)
        super().delete(path)


def late_store(mixin: type[LateMover], client: type[BaseStore], url: str, options: dict[str, Any], late: str) -> Any:
    """A store of ``client``'s class with the stalls of ``mixin`` (the store pickles as the client's)."""
    cls = type(f"{mixin.__name__}{client.__name__}", (mixin, client), {})
    return cls(url, options, late)


@pytest.mark.parametrize("late", ["last tile", "obs shard", "anndata.zarr part"])
def test_a_late_mover_never_puts_back_an_older_version(
    s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch, late: str, client: type[BaseStore]
) -> None:
    """A mover of commit 1, delayed, lands after another writer finished commit 1 and committed 2 on top."""
    url, options = f"{s3_bucket.url}/ds", s3_bucket.storage_options
    parts = [batch(0, BASE, obsm=True), batch(1000, PER_WRITER, obsm=True), batch(2001, 7, obsm=True)]
    deltacells.write_deltacells(parts[0], url, tile_size=TILE, progress=False, storage_options=options)
    with monkeypatch.context() as killed:  # the first appender commits, then stops before moving anything
        killed.setattr(commit_module, "roll_forward", lambda *args: None)
        deltacells.write_deltacells(parts[1], url, append=True, progress=False, storage_options=options)
    manifest, version, commit = read_for_commit(FsspecStore(url, options))
    assert commit.pending
    target = {
        "last tile": tile_path(manifest.n_tiles - 1),
        "obs shard": max(p for p in commit.objects if p.startswith("obs/") and p.endswith(".parquet")),
        "anndata.zarr part": next(p for p in commit.objects if p.startswith("anndata.zarr/")),
    }[late]
    mover = late_store(LateMover, client, url, options, target)
    errors: list[BaseException] = []
    thread = _move_late(mover, manifest, version, commit, errors)
    # another writer finishes commit 1 and commits 2, which writes the late object's place again (or not)
    deltacells.write_deltacells(parts[2], url, append=True, progress=False, storage_options=options)
    mover.go.set()
    thread.join(60)
    assert not errors, errors
    _assert_holds(url, options, [0, 1000, 2001], [BASE, PER_WRITER, 7], obsm=True)
    assert validate_dataset(url, storage_options=options).ok


def _move_late(
    mover: LateMover, manifest: Any, version: str, commit: Any, errors: list[BaseException]
) -> threading.Thread:
    """Start rolling ``commit`` forward through ``mover`` on a thread; return once it stalls at its late object.

    An error of the roll-forward goes to ``errors`` (and releases the wait).
    """

    def move() -> None:
        try:
            roll_forward(mover, manifest, version, commit)
        except BaseException as exc:  # reported to the test
            errors.append(exc)
            mover.reached.set()

    thread = threading.Thread(target=move)
    thread.start()
    assert mover.reached.wait(60)
    return thread


class LateHead(LateMover):
    """A :class:`LateMover` that waits before it even asks for the version tag of ``late`` (a HEAD sent late)."""

    def version_tag(self, path: str) -> str | None:
        self._stall(path)
        return super().version_tag(path)


def test_an_append_never_commits_on_top_of_a_pending_commit(
    s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch, client: type[BaseStore]
) -> None:
    """An appender finishes every pending commit it reads, also one committed while it finished another.

    The appender finishes commit 1 (its writer was killed), and meanwhile another writer commits 2 and is slow to
    move it: its mover has not yet asked for the ETag of commit 2's last tile. Had the appender committed 3 on
    top of the pending commit 2 (rewriting that tile, completed), the slow mover would find the staged tile
    still there and the place's ETag that of commit 3's tile, and put commit 2's partial tile (and obs shard)
    back over commit 3's (the race of 4 appenders on S3).
    """
    url, options = f"{s3_bucket.url}/ds", s3_bucket.storage_options
    parts = [batch(0, BASE), batch(1000, PER_WRITER), batch(2001, 7), batch(3000, 10)]
    deltacells.write_deltacells(parts[0], url, tile_size=TILE, progress=False, storage_options=options)
    with monkeypatch.context() as killed:  # commit 1's writer commits, then stops before moving anything
        killed.setattr(commit_module, "roll_forward", lambda *args: None)
        deltacells.write_deltacells(parts[1], url, append=True, progress=False, storage_options=options)
    finish = commit_module.roll_forward
    slow: list[tuple[LateMover, threading.Thread]] = []
    errors: list[BaseException] = []

    def finish_while_another_commits(store: Any, manifest: Any, version: str, commit: Any) -> None:
        finish(store, manifest, version, commit)
        if slow:
            return
        with monkeypatch.context() as inner:  # another writer commits 2 on top of the finished commit 1...
            inner.setattr(commit_module, "roll_forward", lambda *args: None)
            deltacells.write_deltacells(parts[2], url, append=True, progress=False, storage_options=options)
        manifest, version, commit = read_for_commit(FsspecStore(url, options))
        assert commit.pending
        mover = late_store(LateHead, client, url, options, tile_path(manifest.n_tiles - 1))  # ... and is slow
        slow.append((mover, _move_late(mover, manifest, version, commit, errors)))

    monkeypatch.setattr(commit_module, "roll_forward", finish_while_another_commits)
    deltacells.write_deltacells(parts[3], url, append=True, progress=False, storage_options=options)
    monkeypatch.setattr(commit_module, "roll_forward", finish)
    [(mover, thread)] = slow
    mover.go.set()
    thread.join(60)
    assert not errors, errors
    store = FsspecStore(url, options)
    manifest, _, _ = read_for_commit(store)
    sizes = [len(store.read(tile_path(i))) for i in range(manifest.n_tiles)]
    assert sizes == manifest.tile_bytes.tolist()  # commit 2's last tile is not back over commit 3's
    _assert_holds(url, options, [0, 1000, 2001, 3000], [BASE, PER_WRITER, 7, 10])
    assert validate_dataset(url, storage_options=options).ok


def _assert_holds(
    url: str,
    options: dict[str, Any] | None,
    starts: list[int],
    sizes: list[int],
    *,
    any_order: bool = False,
    obsm: bool = False,
) -> None:
    """The dataset holds exactly these batches, each whole and contiguous (in this order unless ``any_order``)."""
    got = deltacells.read_deltacells(url, storage_options=options).to_memory()
    names = list(got.obs_names)
    order = sorted(zip(starts, sizes, strict=True), key=lambda b: names.index(f"cell{b[0]}")) if any_order else None
    pairs = order if order is not None else list(zip(starts, sizes, strict=True))
    expected = ad.concat([batch(start, n, obsm=obsm)[:, got.var_names] for start, n in pairs])
    assert names == list(expected.obs_names)
    np.testing.assert_array_equal(got.X.toarray(), expected.X.toarray())
    np.testing.assert_array_equal(got.obs["value"].to_numpy(), expected.obs["value"].to_numpy())
    assert got.obs["writer"].astype(str).tolist() == expected.obs["writer"].astype(str).tolist()
    if obsm:
        np.testing.assert_array_equal(got.obsm["X_emb"], expected.obsm["X_emb"])


class IgnoresConditions(FsspecStore):
    """An S3 client whose conditional writes are plain writes: a server that ignores If-None-Match / If-Match."""

    def write_if(self, path: str, data: bytes, *, version: str | None) -> str:
        self.write(path, data)
        return "ignored"


def test_an_append_refuses_a_server_that_ignores_conditional_writes(s3_bucket: S3Bucket) -> None:
    url, options = f"{s3_bucket.url}/ds", s3_bucket.storage_options
    deltacells.write_deltacells(batch(0, BASE), url, tile_size=TILE, progress=False, storage_options=options)
    store = IgnoresConditions(url, options)
    with pytest.raises(StorageError, match=r"ds: the server accepted a write.*single_writer=True"):
        deltacells.write_deltacells(batch(1001, 5), store, append=True, progress=False)
    assert not [e for e in FsspecStore(url, options).list() if e.startswith(".deltacells")]  # the probe removed
    _assert_holds(url, options, [0], [BASE])  # unchanged
    deltacells.write_deltacells(batch(1001, 5), store, append=True, progress=False, single_writer=True)
    _assert_holds(url, options, [0, 1001], [BASE, 5])


def test_an_append_refuses_a_store_that_cannot_write_conditionally(tmp_path: Path) -> None:
    url = f"memory://{tmp_path.name}/ds"  # fsspec's memory filesystem: compare-and-write is not atomic there
    deltacells.write_deltacells(batch(0, BASE), url, tile_size=TILE, progress=False)
    with pytest.raises(StorageError, match=r"cannot write conditionally in one atomic step.*single_writer=True"):
        deltacells.write_deltacells(batch(1001, 5), url, append=True, progress=False)
    deltacells.write_deltacells(batch(1001, 5), url, append=True, progress=False, single_writer=True)
    assert deltacells.read_deltacells(url).n_obs == BASE + 5
