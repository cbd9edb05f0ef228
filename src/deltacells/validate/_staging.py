"""What killed writers left at a dataset's root, and removing it once no live writer can still use it.

An append stages its objects under ``.deltacells-append-<id>/`` and an overwrite writes the new dataset under
``.deltacells-staging-<id>/``; an appender's probe of conditional writes is ``.deltacells-probe-<id>``. A writer
killed before it commits leaves them behind. On a local disk the next writer removes them (under the writer
lock every such prefix is a dead writer's); on object stores, where concurrent appenders take no lock, nothing
can tell a dead writer's prefix from a live one's but time: a live writer writes to its prefix until it
commits, within moments of its last object. So :func:`find_staging` reports each prefix with the age of its
newest object, and :func:`remove_staging` removes those older than a bound the user chooses (a day by
default), never the prefix of the dataset's pending commit (its objects are part of the current version).
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deltacells._numbers import format_age, format_size, plural
from deltacells.core import read_for_commit, writer_lock
from deltacells.errors import MissingObjectError, StorageError
from deltacells.format import APPEND_PREFIX, PROBE_PREFIX, STAGING_PREFIX, WRITER_PREFIXES
from deltacells.storage import open_store

if TYPE_CHECKING:
    from deltacells.storage import BaseStore

__all__ = ["DEFAULT_STAGING_AGE", "StaleStaging", "find_staging", "remove_staging"]

#: How old (seconds since its newest object was written) a prefix must be for :func:`remove_staging` by default.
DEFAULT_STAGING_AGE = 24 * 3600.0

#: Seconds :func:`remove_staging` waits for a local writer's lock.
LOCK_WAIT = 10.0

_KINDS = {APPEND_PREFIX: "append", STAGING_PREFIX: "overwrite", PROBE_PREFIX: "probe"}


@dataclass(frozen=True)
class StaleStaging:
    """A writer's staging prefix (or probe object) at a dataset's root that no commit names.

    Attributes
    ----------
    prefix
        Its name at the root (``.deltacells-append-<id>``, ``.deltacells-staging-<id>``, ``.deltacells-probe-<id>``).
    kind
        ``"append"``, ``"overwrite"`` or ``"probe"``: the kind of writer that made it.
    n_objects
        Objects under it.
    n_bytes
        Their total size.
    age
        Seconds since its newest object was written, when the store tells; None otherwise.
    """

    prefix: str
    kind: str
    n_objects: int
    n_bytes: int
    age: float | None

    def to_dict(self) -> dict[str, Any]:
        """As a JSON-ready dict (``deltacells validate --json``)."""
        return {
            "prefix": self.prefix,
            "kind": self.kind,
            "n_objects": self.n_objects,
            "n_bytes": self.n_bytes,
            "age_seconds": self.age,
        }

    def describe(self) -> str:
        """One line for people: ``".deltacells-append-9f2c (an append's staging: 3 objects, 1.20 MB, ...)"``."""
        what = {"append": "an append's staging", "overwrite": "an overwrite's staging", "probe": "an appender's probe"}
        return (
            f"{self.prefix} ({what[self.kind]}: {plural(self.n_objects, 'object')}, {format_size(self.n_bytes)}, "
            f"last written {format_age(self.age)} ago)"
        )

    def older_than(self, seconds: float) -> bool:
        """Whether its newest object is at least ``seconds`` old (an unknown age is old only for a bound of 0)."""
        if seconds <= 0:
            return True
        return self.age is not None and self.age >= seconds


def find_staging(store: BaseStore, *, keep: str | None = None) -> list[StaleStaging]:
    """The writers' prefixes at the root of ``store`` other than ``keep`` (the pending commit's), with their ages.

    One listing of the root, then one recursive listing per prefix found.
    """
    now = time.time()
    found = []
    for entry in store.list():
        kind = next((_KINDS[p] for p in WRITER_PREFIXES if entry.startswith(p)), None)
        if kind is None or entry == keep:
            continue
        objects = store.objects_under(entry)
        if not objects:  # removed meanwhile
            continue
        times = [o.modified for o in objects if o.modified is not None]
        age = max(0.0, now - max(times)) if times else None
        found.append(StaleStaging(entry, kind, len(objects), sum(o.size for o in objects), age))
    return found


def remove_staging(
    path: str | os.PathLike[str] | BaseStore,
    *,
    older_than: float = DEFAULT_STAGING_AGE,
    storage_options: dict[str, Any] | None = None,
) -> list[StaleStaging]:
    """Remove what killed writers left at a dataset's root: the staging prefixes no commit names.

    Only prefixes whose newest object is at least ``older_than`` seconds old go (a live writer writes to its
    prefix until the moment it commits); the pending commit's prefix never does. On a local disk the dataset's
    writer lock is held meanwhile, so no writer is running and every prefix is a dead writer's.

    Parameters
    ----------
    path
        Local directory, fsspec URL or store of the dataset.
    older_than
        Seconds since a prefix's newest object was written for it to be removed (default: a day). 0 removes
        every prefix no commit names: only safe when no writer can be running.
    storage_options
        fsspec options for ``path``.

    Returns
    -------
    list of StaleStaging
        What was removed.

    Raises
    ------
    StorageError
        On a local disk, if a writer holds the dataset's lock for more than a few seconds.

    Examples
    --------
    >>> import deltacells
    >>> from deltacells.datasets import synthetic_counts
    >>> from deltacells.validate import remove_staging
    >>> deltacells.write_deltacells(synthetic_counts(300, 100), "left.deltacells", progress=False, overwrite=True)
    >>> remove_staging("left.deltacells", older_than=3600)
    []
    """
    store = open_store(path, storage_options)
    if not any(entry.startswith(WRITER_PREFIXES) for entry in store.list()):
        return []  # nothing to remove (and no lock file made where there is no dataset)
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(writer_lock(store, timeout=LOCK_WAIT))
        except TimeoutError as exc:  # filelock's Timeout is one
            msg = f"{store.url}: a writer is working on this dataset now; try again when it is done"
            raise StorageError(msg) from exc
        removed = []
        for stale in find_staging(store, keep=pending_staging(store)):
            # the manifest read again just before: a commit made meanwhile may name the prefix now
            if stale.older_than(older_than) and stale.prefix != pending_staging(store):
                store.delete(stale.prefix)
                removed.append(stale)
        return removed


def pending_staging(store: BaseStore) -> str | None:
    """The staging prefix of the dataset's pending commit (its manifest read now); None without one or a manifest.

    Raises
    ------
    FormatError
        If the manifest is malformed: then nothing can tell which prefix it may name.
    """
    try:
        _, _, commit = read_for_commit(store)
    except MissingObjectError:
        return None
    return commit.staging if commit.pending else None
