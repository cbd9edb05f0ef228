"""On a local disk a dataset reaches the device before its manifest names it, and the manifest after.

Power loss cannot be staged in a test; what can be checked is the order of the flushes: every file and folder
of the dataset is flushed (``fsync``, or a ``syncfs`` of the filesystem holding the dataset's folder) before
``manifest.json`` exists, then the manifest and the folders that name it. Both ways are checked: ``syncfs``
(Linux) and one ``fsync`` a file (elsewhere, or where ``syncfs`` is unavailable). Object stores flush nothing (a
write that returned is durable)."""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import deltacells
import deltacells.core._commit as commit_module
import deltacells.storage._durable as durable
from deltacells.datasets import synthetic_counts

#: The modules that look ``fsync_path`` up when they flush: the stores' (``BaseStore.sync``) and the commits'.
FLUSHERS = (durable, commit_module)


def spy_flushes(monkeypatch: pytest.MonkeyPatch, on_flush: Callable[[str], None], *, syncfs: bool) -> None:
    """Call ``on_flush`` with each path flushed: each ``fsync``, and all that a ``syncfs`` of a folder flushed.

    A ``syncfs`` flushes the folder's whole filesystem; what is recorded is what existed under the folder then.
    With ``syncfs=False`` it is unavailable (as on macOS and Windows), and every file is flushed by ``fsync``.
    """
    real_fsync, real_syncfs = durable.fsync_path, durable.syncfs_path

    def fsync_path(path: str) -> None:
        on_flush(os.path.abspath(path))
        real_fsync(path)

    def syncfs_path(path: str) -> bool:
        if not (syncfs and real_syncfs(path)):
            return False
        for entry in sorted(_everything_under(Path(path))):
            on_flush(entry)
        return True

    for module in FLUSHERS:
        monkeypatch.setattr(module, "fsync_path", fsync_path)
    monkeypatch.setattr(durable, "syncfs_path", syncfs_path)


@pytest.fixture(params=["syncfs", "fsync"])
def flushed(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> list[tuple[str, bool]]:
    """Each path flushed, in order, with whether a manifest existed beside the dataset's folders then."""
    record: list[tuple[str, bool]] = []

    def on_flush(path: str) -> None:
        root = Path(path)
        while root.parent != root and not (root / "tiles").is_dir():
            root = root.parent
        record.append((path, (root / "manifest.json").exists()))

    spy_flushes(monkeypatch, on_flush, syncfs=request.param == "syncfs")
    return record


def _everything_under(root: Path) -> set[str]:
    paths = {os.path.abspath(root)}
    for directory, folders, files in os.walk(root):
        paths.update(os.path.abspath(os.path.join(directory, name)) for name in [*folders, *files])
    return paths


@pytest.mark.parametrize("overwrite", [False, True])
def test_the_data_is_flushed_before_the_manifest_names_it(tmp_path: Path, flushed, overwrite: bool) -> None:
    adata = synthetic_counts(300, 40, seed=1)
    adata.obsm["X_pca"] = np.random.default_rng(0).random((300, 5), dtype=np.float32)  # extras: anndata.zarr
    out = tmp_path / "out.deltacells"
    if overwrite:
        deltacells.write_deltacells(adata[:100].copy(), out, progress=False, tile_size=32)
        flushed.clear()
    deltacells.write_deltacells(adata, out, progress=False, tile_size=32, overwrite=overwrite)
    manifest = os.path.abspath(out / "manifest.json")
    everything = _everything_under(out)
    synced_before = {path for path, manifest_seen in flushed if not manifest_seen}
    if overwrite:  # written under a staging folder, then moved in: compare by the path inside the dataset
        synced_before = {_moved_in(path, out) for path in synced_before}
    missing = everything - synced_before - {manifest}
    assert not missing, sorted(missing)[:5]  # every file and folder, before the manifest was written
    after = [path for path, manifest_seen in flushed if manifest_seen]
    assert _moved_in(after[0], out) == manifest  # then the manifest itself
    assert os.path.abspath(out) in after  # and the dataset's folder, whose entry names it
    assert deltacells.read_deltacells(out).n_obs == 300


def _moved_in(path: str, out: Path) -> str:
    """``path`` as it is named once a staging folder inside ``out`` has been moved in."""
    relative = Path(path).relative_to(os.path.abspath(out))
    parts = relative.parts
    if parts and parts[0].startswith("."):  # the staging folder and what it holds
        return os.path.abspath(out.joinpath(*parts[1:]))
    return path


@pytest.mark.parametrize("syncfs", [True, False], ids=["syncfs", "fsync"])
def test_an_append_is_flushed_before_its_commit_and_its_moves_before_the_finished_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, syncfs: bool
) -> None:
    from deltacells.storage import FsspecStore

    out = tmp_path / "out.deltacells"
    deltacells.write_deltacells(synthetic_counts(100, 40, seed=1), out, progress=False, tile_size=32)
    events: list[tuple[str, str]] = []
    real_write = FsspecStore.write

    def write(self: FsspecStore, path: str, data: bytes) -> None:
        real_write(self, path, data)
        if path == "manifest.json":
            events.append(("manifest", ""))

    monkeypatch.setattr(FsspecStore, "write", write)
    new = synthetic_counts(80, 40, seed=2)
    new.obs_names = [f"new{i}" for i in range(80)]
    spy_flushes(monkeypatch, lambda path: events.append(("fsync", path)), syncfs=syncfs)
    deltacells.write_deltacells(new, out, append=True, progress=False)

    commit, finished = [i for i, (kind, _) in enumerate(events) if kind == "manifest"]
    before_commit = {path for kind, path in events[:commit] if kind == "fsync"}
    staged_files = {path for path in before_commit if "/.deltacells-append-" in path}
    assert any(path.endswith("tile_000004.dct") for path in staged_files)  # the completed last tile
    assert any(path.endswith("obs_0000.parquet") for path in staged_files)
    between = {path for kind, path in events[commit:finished] if kind == "fsync"}
    assert os.path.abspath(out / "manifest.json") in between  # the commit, flushed
    assert {os.path.abspath(out / "tiles"), os.path.abspath(out / "obs"), os.path.abspath(out)} <= between
    after = {path for kind, path in events[finished:] if kind == "fsync"}
    assert os.path.abspath(out / "manifest.json") in after
    assert deltacells.read_deltacells(out).n_obs == 180


def test_object_stores_flush_nothing(s3_bucket, flushed) -> None:
    url = f"{s3_bucket.url}/durable"
    deltacells.write_deltacells(
        synthetic_counts(50, 10, seed=2), url, storage_options=s3_bucket.storage_options, progress=False
    )
    assert flushed == []
    assert deltacells.read_deltacells(url, storage_options=s3_bucket.storage_options).n_obs == 50


@pytest.mark.parametrize(
    ("error", "outcome"),
    [(errno.ENOSYS, "fsync"), (errno.EPERM, "fsync"), (errno.EIO, "raised")],
    ids=["no-syscall", "filtered", "write-back-error"],
)
def test_a_folder_falls_back_to_fsync_where_syncfs_is_unavailable_and_its_errors_are_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: int, outcome: str
) -> None:
    folder = tmp_path / "folder"
    (folder / "inner").mkdir(parents=True)
    for name in ("a", "inner/b", "inner/c"):
        (folder / name).write_bytes(b"x")

    def syncfs(descriptor: int) -> int:
        ctypes.set_errno(error)
        return -1

    monkeypatch.setattr(durable, "_syncfs", lambda: syncfs)
    fsynced: list[str] = []
    monkeypatch.setattr(durable, "fsync_path", fsynced.append)
    if outcome == "raised":
        with pytest.raises(OSError, match="syncfs") as info:
            durable.fsync_tree(str(folder), str(tmp_path))
        assert info.value.errno == error
        assert fsynced == []
        return
    durable.fsync_tree(str(folder), str(tmp_path))
    assert set(fsynced) == _everything_under(folder) | {str(tmp_path)}  # each one, and the folder naming it
