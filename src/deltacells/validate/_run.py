""":func:`validate_dataset`: every check, in order, on one dataset."""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any

from deltacells._threads import default_threads
from deltacells.core import PendingCommitStore
from deltacells.format import MANIFEST_NAME, collect, commit_of, counts_dtype_of
from deltacells.storage import open_store
from deltacells.validate._extras import check_extras
from deltacells.validate._files import check_files
from deltacells.validate._manifest import check_manifest
from deltacells.validate._obs import check_obs
from deltacells.validate._report import Collector, ValidationReport
from deltacells.validate._staging import find_staging
from deltacells.validate._tiles import check_tiles

if TYPE_CHECKING:
    from deltacells.format import Commit
    from deltacells.storage import BaseStore


def validate_dataset(
    path: str | os.PathLike[str],
    *,
    storage_options: dict[str, Any] | None = None,
    progress: bool = False,
    threads: int | None = None,
) -> ValidationReport:
    """Check every object of a dataset against the format and its manifest, collecting every problem.

    The rules are those the reader applies (:mod:`deltacells.format`): where reading stops at the first
    problem, validation records it and carries on.

    Parameters
    ----------
    path
        Local directory or fsspec URL of the dataset.
    storage_options
        fsspec options for ``path``.
    progress
        Show a progress bar over the tiles (and the obs shards).
    threads
        Tiles fetched and decoded at once (default: the usable CPUs).

    Returns
    -------
    ValidationReport
        ``report.ok`` is true when nothing is wrong; ``report.problems`` lists every problem found, each
        with the object at fault and a message. A dataset that cannot be read at all (no manifest, a
        manifest that is not JSON or not this format) gives one problem, not an exception.

    Examples
    --------
    >>> import deltacells
    >>> from deltacells.datasets import synthetic_counts
    >>> from deltacells.validate import validate_dataset
    >>> deltacells.write_deltacells(synthetic_counts(300, 100), "val.deltacells", progress=False, overwrite=True)
    >>> validate_dataset("val.deltacells").ok
    True
    """
    report = ValidationReport(path=os.fspath(path))
    found = Collector()
    try:
        store = open_store(path, storage_options)
        fields = check_manifest(store, found)
    except Exception as exc:  # a validator reports, it does not crash (e.g. a bad URL)
        found.add(MANIFEST_NAME, exc)
        fields = None
    if fields is not None:
        report.n_tiles, report.n_shards = fields.n_tiles, fields.n_shards
        collect(counts_dtype_of(fields.metadata or {}), found)  # the dtype reads give (docs/format.md, decision 9)
        commit = collect(commit_of(fields.metadata or {}), found)
        with contextlib.suppress(Exception):  # what killed writers left: reported, never a problem of the dataset
            report.staging = find_staging(store, keep=commit.staging if commit is not None else None)
        store = _pending_commit_read_through(store, commit)
        check_files(store, fields, found)
        n_threads = default_threads() if threads is None else max(1, int(threads))
        check_tiles(store, fields, found, report, threads=n_threads, progress=progress)
        check_obs(store, fields, found, report, progress=progress)
        check_extras(store, fields, found)
    report.problems = found.problems
    return report


def _pending_commit_read_through(store: BaseStore, commit: Commit | None) -> BaseStore:
    """The store to check: for a pending commit (an append killed while moving its objects), reading through it."""
    if commit is None or not commit.pending:
        return store
    assert commit.staging is not None
    return PendingCommitStore(store, commit.staging, commit.objects)
