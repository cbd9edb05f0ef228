"""Committing a new version of a dataset, and reading or finishing one that is half rolled forward.

The protocol (docs/format.md, decision 17; the architecture page draws it):

1. A writer takes the dataset's lock (:func:`writer_lock`: a lock file on a local disk; nothing on object
   stores, whose conditional writes decide instead) and reads ``manifest.json`` with its version tag
   (S3's ETag). If that manifest is *pending* (see ``deltacells.format._commit``), it first finishes that
   commit (:func:`roll_forward`) and reads it again, until it is not pending: a commit never lands on a
   pending one (which :func:`_settle` relies on).
2. It writes every object that changes or is new (the last tile, completed, and the new tiles, the last obs
   shard and the new ones, ``obs/schema.json``, the new part of ``anndata.zarr``) under a fresh staging
   prefix ``.deltacells-append-<id>/`` and makes them durable (fsync on a local disk). Nothing the current
   manifest names has changed; a writer killed here leaves the old version, whole, and a staging prefix the
   next writer removes.
3. **The commit**: it writes the new manifest, which names the staging prefix and its objects (pending),
   with a conditional write (:meth:`~deltacells.storage.BaseStore.write_if`): only if ``manifest.json`` is
   still the one read in step 1 (S3 ``If-Match``; under the lock elsewhere). A writer that loses gets
   :class:`~deltacells.errors.CommitConflictError`, removes its staging prefix and tries again from step 1
   or gives up. From this moment readers open the new version: :class:`PendingCommitStore` reads each of
   the commit's objects from the staging prefix while it is there.
4. It moves each staged object to its place (a rename on a local disk; on object stores a copy on the
   server then a delete, or, for the objects a later commit may write again, a write made only if the place
   is unchanged since before the staged object was read, so that a late mover never puts back an older
   version: :func:`roll_forward`), makes them durable, and rewrites the manifest without the pending entry
   (again conditionally: if someone finished it first, nothing is lost). A writer killed in steps 3-4
   leaves a pending manifest, which reads as the new version and which the next writer finishes.

Readers that opened the old version and read the completed last tile after step 4 find a size or cells that
differ from their manifest; they read the new version of that tile, keep the cells they knew and go on
(``deltacells.core._follow``); they never decode cells of two versions together. Before its first commit to
an object store a writer proves the server honours conditional writes (``check_conditional_writes``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from deltacells.core._output import remove_stale_staging
from deltacells.errors import CommitConflictError, MissingObjectError, StorageError
from deltacells.format import (
    APPEND_PREFIX,
    EXTRAS_NAME,
    LOCK_NAME,
    MANIFEST_NAME,
    OBS_DIR,
    PROBE_PREFIX,
    Commit,
    Manifest,
    commit_of,
    first_problem_raises,
    tile_path,
)
from deltacells.storage import BaseStore, PrefixStore, fsync_path

__all__ = [
    "NewVersion",
    "PendingCommitStore",
    "begin_version",
    "check_conditional_writes",
    "commit_entry",
    "read_for_commit",
    "reading_store",
    "roll_forward",
    "sync_entries",
    "with_commit",
    "writer_lock",
]


@contextlib.contextmanager
def writer_lock(store: BaseStore, *, timeout: float = -1) -> Iterator[None]:
    """Hold the dataset's writer lock: a lock file (``.deltacells-lock``) on a local disk, nothing elsewhere.

    The operating system releases the lock of a process that dies (``flock``), so a killed writer never
    blocks the next one.

    Parameters
    ----------
    store
        The dataset's root.
    timeout
        Seconds to wait for the lock (negative: for ever).
    """
    local = store.local_path(LOCK_NAME) if store.is_local else None
    if local is None:
        yield
        return
    from filelock import FileLock

    os.makedirs(os.path.dirname(local), exist_ok=True)
    with FileLock(local, timeout=timeout):
        yield


#: Stores (by URL) whose server was seen to refuse a conditional write it must refuse, in this process.
_PROVEN: set[str] = set()


def check_conditional_writes(store: BaseStore) -> None:
    """Before a first commit to an object store: prove that its server honours conditional writes.

    Concurrent appenders are safe only if the commit's conditional write is refused when another writer
    committed first. Some servers ignore ``If-None-Match`` / ``If-Match`` (stock moto, some S3-compatible
    stores) and would let two appenders both win. The probe writes an object that must not exist
    (``If-None-Match: *``), writes it again the same way, and expects the second to be refused; then removes it.
    Proven once per store and process. A local disk needs no proof (a lock file serialises the writers).

    Raises
    ------
    StorageError
        If the store cannot compare and write atomically, or its server accepted a write it had to refuse: the
        message names the store, and says to pass ``single_writer=True`` if only one process ever appends.
    """
    if store.is_local or store.url in _PROVEN:
        return
    advice = (
        "concurrent appenders could both win and lose cells. If only one process ever appends to this dataset, "
        "pass single_writer=True"
    )
    if not store.atomic_conditional_writes:
        msg = f"{store.url}: this store cannot write conditionally in one atomic step; {advice}"
        raise StorageError(msg)
    probe = f"{PROBE_PREFIX}{uuid.uuid4().hex}"
    try:
        store.write_if(probe, b"1", version=None)
        try:
            store.write_if(probe, b"2", version=None)  # must be refused: the object exists
        except CommitConflictError:
            _PROVEN.add(store.url)
            return
    finally:
        with contextlib.suppress(OSError):
            store.delete(probe)
    msg = f"{store.url}: the server accepted a write made only if the object was absent, over one that exists; {advice}"
    raise StorageError(msg)


def commit_entry(manifest: Manifest, url: str = "") -> Commit:
    """The manifest's :class:`~deltacells.format.Commit` (version 0 without one).

    Raises
    ------
    FormatError
        If the entry is malformed, naming the field.
    """
    commit = first_problem_raises(commit_of(manifest.metadata), url)
    assert commit is not None
    return commit


def with_commit(manifest: Manifest, commit: Commit) -> Manifest:
    """``manifest`` with ``commit`` as its commit entry."""
    metadata = dict(manifest.metadata)
    ours = metadata.get("deltacells")
    metadata["deltacells"] = {**(ours if isinstance(ours, dict) else {}), "commit": commit.to_dict()}
    return dataclasses.replace(manifest, metadata=metadata)


def read_for_commit(store: BaseStore) -> tuple[Manifest, str, Commit]:
    """The current manifest, its version tag (for the conditional commit) and its commit entry.

    Raises
    ------
    MissingObjectError
        If there is no manifest.
    FormatError
        If it is malformed.
    """
    text, version = store.read_versioned(MANIFEST_NAME)
    manifest = Manifest.from_json(text, where=f"{store.url.rstrip('/')}/{MANIFEST_NAME}")
    return manifest, version, commit_entry(manifest, store.url)


class NewVersion:
    """One attempt at a new version of a dataset: :func:`begin_version`, then stage, :meth:`commit`, :meth:`settle`.

    The protocol's invariant lives here: the version begins on a *settled* manifest (every pending commit it
    read finished first), so no commit ever lands on a pending one (which :func:`_settle` relies on). Used as
    a context manager, an attempt that fails before its commit removes its staging prefix; once committed, the
    prefix is the pending commit's and stays until :meth:`settle` (or the next writer) moves it.

    Attributes
    ----------
    store
        The dataset's root.
    base
        The settled manifest the new version grows.
    base_tag
        Its version tag, which the commit's conditional write must still find.
    commit_entry
        The new version's commit entry (number, id, staging prefix), without its objects yet.
    target
        Where to stage the new version's objects: the staging prefix, at their paths in the dataset.
    """

    def __init__(self, store: BaseStore, base: Manifest, base_tag: str, previous: Commit) -> None:
        self.store = store
        self.base = base
        self.base_tag = base_tag
        staging = f"{APPEND_PREFIX}{uuid.uuid4().hex}"
        self.commit_entry = Commit(version=previous.version + 1, id=uuid.uuid4().hex, staging=staging)
        self.target: BaseStore = PrefixStore(store, staging)
        self._committed: tuple[Manifest, str] | None = None

    @property
    def number(self) -> int:
        """The new version's number (the base's plus one)."""
        return self.commit_entry.version

    def base_changed(self) -> bool:
        """Whether another writer has committed since this attempt began."""
        return self.store.read_versioned(MANIFEST_NAME)[1] != self.base_tag

    def commit(self, manifest: Manifest, objects: Sequence[str]) -> None:
        """Commit ``manifest`` (the new version, its staged ``objects`` named): the conditional write.

        Raises
        ------
        CommitConflictError
            If another writer committed first (nothing of this attempt is visible; the context removes its prefix).
        StorageError
            On an object store, if staged objects were removed meanwhile (see :func:`_check_staged`).
        """
        entry = dataclasses.replace(self.commit_entry, objects=tuple(objects))
        pending = with_commit(manifest, entry)
        self.target.sync()
        _check_staged(self.store, entry)
        try:
            written = self.store.write_if(MANIFEST_NAME, pending.to_json().encode(), version=self.base_tag)
        except CommitConflictError:
            _, now_tag, now_commit = read_for_commit(self.store)
            if now_commit.id != entry.id:  # not ours that a retried request reported as a conflict
                raise
            written = now_tag
        self._committed = (pending, written)
        self.store.sync(MANIFEST_NAME)

    def settle(self) -> Manifest:
        """Move the committed objects to their places and finish the commit; the new version's manifest."""
        assert self._committed is not None, "settle() comes after commit()"
        pending, written = self._committed
        entry = commit_entry(pending, self.store.url)
        roll_forward(self.store, pending, written, entry)
        return with_commit(pending, entry.done())

    def __enter__(self) -> NewVersion:
        return self

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        if error is not None and self._committed is None:
            with contextlib.suppress(Exception):
                self.store.delete(self.commit_entry.staging or "")


def begin_version(store: BaseStore) -> NewVersion:
    """Begin a new version of the dataset at ``store``: read its manifest, finishing every pending commit first.

    A writer killed after its commit (or one still moving) left the manifest pending: it is rolled forward, and
    the manifest read again, until it is not pending. On a local disk (the caller holds the writer lock) the
    staging prefixes of killed writers are removed too.

    Raises
    ------
    MissingObjectError
        If there is no manifest.
    FormatError
        If it is malformed.
    """
    base, tag, commit = read_for_commit(store)
    while commit.pending:
        roll_forward(store, base, tag, commit)
        base, tag, commit = read_for_commit(store)
    if store.is_local:  # under the lock: every staging prefix there is a killed writer's
        remove_stale_staging(store)
    return NewVersion(store, base, tag, commit)


def _check_staged(store: BaseStore, entry: Commit) -> None:
    """Before the commit on an object store: every staged object is still there (one LIST of the prefix).

    ``deltacells validate --remove-staging`` removes only prefixes untouched for longer than its bound, which a
    live appender's is not; this check keeps an appender paused for longer than that (a suspended process) from
    committing objects that were removed meanwhile.
    """
    if store.is_local:  # under the writer lock: nothing else removes the prefix
        return
    staging = entry.staging or ""
    there = {o.path[len(staging) + 1 :] for o in store.objects_under(staging)}
    missing = [p for p in entry.objects if p not in there and not any(q.startswith(f"{p}/") for q in there)]
    if missing:
        msg = (
            f"{store.url}/{staging}: {len(missing)} staged objects (e.g. {missing[0]}) were removed before this "
            "append committed; the dataset is unchanged; append again"
        )
        raise StorageError(msg)


def roll_forward(store: BaseStore, manifest: Manifest, version: str, commit: Commit) -> None:
    """Finish a pending commit: move its staged objects to their places, then drop the pending entry.

    Idempotent, and safe to run in several processes at once, however late one of them is: an object already
    moved is skipped (its place holds the same bytes), an object a later commit may write again moves only
    if its place has not changed since before the commit's staged copy was read (see :func:`_settle`), and
    the manifest is rewritten only if it is still the pending one.
    """
    if not commit.pending:
        return
    assert commit.staging is not None
    rewritable = _rewritable(manifest, commit.objects)
    for path in commit.objects:
        staged = f"{commit.staging}/{path}"
        if path.startswith(f"{EXTRAS_NAME}/"):  # a zarr group of this version's own: no other commit writes it
            _move_group(store, staged, path)
        elif path in rewritable and store.atomic_conditional_writes:
            _settle(store, staged, path)
        else:
            with contextlib.suppress(MissingObjectError):  # moved already
                store.replace(staged, path)
    sync_entries(store, commit.objects)
    done = with_commit(manifest, commit.done())
    with contextlib.suppress(CommitConflictError):  # another writer finished it (or committed after it)
        store.write_if(MANIFEST_NAME, done.to_json().encode(), version=version)
        store.sync(MANIFEST_NAME)
    store.delete(commit.staging)


def _rewritable(manifest: Manifest, objects: Sequence[str]) -> set[str]:
    """The commit's objects that a later commit may write again: its last tile, obs shards and schema.

    Its other tiles are full (an append only ever completes the last one) and its part of ``anndata.zarr`` is
    named by its version, so nothing but this commit writes them.
    """
    last_tile = tile_path(manifest.n_tiles - 1) if manifest.n_tiles else None
    return {path for path in objects if path == last_tile or path.startswith(f"{OBS_DIR}/")}


def _settle(store: BaseStore, staged: str, path: str) -> None:
    """Move ``staged`` to ``path`` with a conditional write, or leave ``path`` as it is; then delete ``staged``.

    A mover may be late: a copy on the server, or a write, issued while the commit was pending may land after
    the commit was finished by another writer and a later commit has put its own object at ``path``. So the
    place's version tag is read *before* the staged object: if that object still exists then, the commit is
    not finished (its pending entry goes only after every staged object is gone), so no later commit has
    written ``path`` yet (a writer finishes every pending commit it reads before it commits: no commit lands
    on a pending one), and the write, made only if ``path`` is still at that tag (S3's ``If-Match`` or
    ``If-None-Match``), lands before any later commit's or not at all. A write refused means another mover
    put the same bytes there first.
    """
    before = store.version_tag(path)
    try:
        data = store.read(staged)
    except MissingObjectError:  # moved already
        return
    with contextlib.suppress(CommitConflictError):
        store.write_if(path, data, version=before)
    store.delete(staged)


def _move_group(store: BaseStore, staged: str, path: str) -> None:
    """Move the zarr group ``staged`` to ``path``, which nothing else writes; done in several processes at once.

    On a local disk (under the writer lock) one rename of the directory, after removing what a killed move
    left; elsewhere each object is copied on the server then deleted, skipping those moved already, so that
    movers running at once never remove each other's copies.
    """
    if store.is_local:
        if store.exists(staged):
            store.delete(path)  # what a killed move copied of it
            store.move(staged, path)
        return
    for name in [o.path[len(staged) + 1 :] for o in store.objects_under(staged)]:
        with contextlib.suppress(MissingObjectError):  # moved already
            store.replace(f"{staged}/{name}", f"{path}/{name}")
    store.delete(staged)


def sync_entries(store: BaseStore, paths: Sequence[str]) -> None:
    """On a local disk, flush the directories naming ``paths`` (their new entries) and the root; else nothing."""
    if not store.is_local:
        return

    root = store.local_path("")
    assert root is not None
    directories = {os.path.dirname(store.local_path(path) or root) for path in paths} | {root}
    for directory in sorted(directories, key=len, reverse=True):
        if os.path.isdir(directory):
            fsync_path(directory)


def reading_store(store: BaseStore, manifest: Manifest) -> BaseStore:
    """The store readers of ``manifest`` use: ``store`` itself, or a :class:`PendingCommitStore` if pending.

    Raises
    ------
    FormatError
        If the manifest's commit entry is malformed.
    """
    commit = commit_entry(manifest, store.url)
    if not commit.pending:
        return store
    assert commit.staging is not None
    return PendingCommitStore(store, commit.staging, commit.objects)


class PendingCommitStore(BaseStore):
    """A dataset whose last commit is pending: its objects read from the staging prefix while they are there.

    Every other call goes to ``store``. An object of the commit (or an object under a prefix of it) is read
    from ``<staging>/<path>`` and, once that is gone (moved to its place by whoever rolls the commit
    forward), from ``<path>``: both hold the same bytes. Not local (reads go through :meth:`read`), so that
    memory maps never pin a file that is about to move.

    Parameters
    ----------
    store
        The dataset's root.
    staging
        The commit's staging prefix.
    objects
        The commit's objects, relative to the root.
    """

    def __init__(self, store: BaseStore, staging: str, objects: Sequence[str]) -> None:
        self.store = store
        self.staging = staging
        self.objects = tuple(objects)
        self._prefixes = tuple(f"{o}/" for o in self.objects)
        self.url = store.url

    def __reduce__(self) -> tuple[type[PendingCommitStore], tuple[BaseStore, str, tuple[str, ...]]]:
        return (type(self), (self.store, self.staging, self.objects))

    @property
    def io_concurrency(self) -> int:
        """The inner store's bound on requests in flight."""
        return self.store.io_concurrency

    def _staged(self, path: str) -> str | None:
        if path in self.objects or path.startswith(self._prefixes):
            return f"{self.staging}/{path}"
        return None

    def read(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        """The bytes of ``path``: from the staging prefix while the commit's object is there, else its place."""
        staged = self._staged(path)
        if staged is not None:
            with contextlib.suppress(MissingObjectError):
                return self.store.read(staged, start, end)
        return self.store.read(path, start, end)

    def size(self, path: str) -> int:
        """Size in bytes of ``path`` (see :meth:`read`)."""
        staged = self._staged(path)
        if staged is not None:
            with contextlib.suppress(FileNotFoundError):
                return self.store.size(staged)
        return self.store.size(path)

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists, staged or in place."""
        staged = self._staged(path)
        return (staged is not None and self.store.exists(staged)) or self.store.exists(path)

    def list(self, prefix: str = "") -> list[str]:
        """The entries under ``prefix``, in place or staged."""
        staged = f"{self.staging}/{prefix}".rstrip("/")
        return sorted(set(self.store.list(prefix)) | set(self.store.list(staged)))

    def write(self, path: str, data: bytes) -> None:
        """Write ``path`` in place."""
        self.store.write(path, data)

    def delete(self, path: str) -> None:
        """Remove ``path`` in place."""
        self.store.delete(path)

    def move(self, src: str, dst: str) -> None:
        """Rename in place."""
        self.store.move(src, dst)

    def fsspec_location(self, path: str) -> tuple[str, dict[str, Any]]:
        """The location of ``path``: staged while it is there, else in place."""
        staged = self._staged(path)
        if staged is not None and self.store.exists(staged):
            return self.store.fsspec_location(staged)
        return self.store.fsspec_location(path)
