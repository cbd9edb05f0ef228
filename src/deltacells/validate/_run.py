""":func:`validate_dataset`: every check, in order, on one dataset."""

from __future__ import annotations

import os
from typing import Any

from deltacells.dataset._manifest import MANIFEST_NAME
from deltacells.storage import Store
from deltacells.validate._listing import check_listing
from deltacells.validate._manifest import check_manifest
from deltacells.validate._obs import check_obs
from deltacells.validate._report import Collector, ValidationReport
from deltacells.validate._sidecars import check_sidecars
from deltacells.validate._tiles import check_tiles


def validate_dataset(
    path: str | os.PathLike[str],
    *,
    storage_options: dict[str, Any] | None = None,
    progress: bool = False,
    threads: int | None = None,
) -> ValidationReport:
    """Check every object of a dataset against the format and its manifest, collecting every problem.

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
    from deltacells._threads import default_threads

    url = os.fspath(path)
    report = ValidationReport(path=url)
    found = Collector()
    try:
        store = Store(path, storage_options)
        expected = check_manifest(store, found)
    except Exception as exc:  # a validator reports, it does not crash (e.g. a bad URL)
        found.add(MANIFEST_NAME, exc)
        expected = None
    if expected is not None:
        report.n_tiles, report.n_shards = expected.n_tiles, expected.n_shards
        check_listing(store, expected, found)
        check_sidecars(store, expected, found)
        n_threads = default_threads() if threads is None else max(1, int(threads))
        check_tiles(store, expected, found, report, threads=n_threads, progress=progress)
        check_obs(store, expected, found, report, progress=progress)
    report.problems = found.problems
    return report
