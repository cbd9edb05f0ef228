"""A dataset's commit entry (docs/format.md, decision 17): its version, and an append's objects not yet moved.

A dataset that was appended to says so in its manifest's free-form ``metadata``, so that a reader that
knows only the format ignores it::

    "metadata": {"deltacells": {"commit": {
        "version": 3,
        "id": "9f2c...",
        "staging": ".deltacells-append-9f2c...",
        "objects": ["tiles/tile_000041.dct", "tiles/tile_000042.dct", "obs/obs_0000.parquet", "obs/schema.json"]
    }}}

``version`` counts the commits (a dataset written in one go is version 0 and has no entry); ``id`` is the
commit's own (a random hex string). ``staging`` and ``objects`` are present only while the commit is
*pending*: the manifest is committed, but the objects it names still sit, complete, under the staging prefix
(``<staging>/<object>``) while they are moved to their places. Readers of a pending manifest read each of
those objects from the staging prefix when it is still there and from its place otherwise (both hold the
same bytes); the writer that committed, or the next one, moves them and then rewrites the manifest without
``staging`` and ``objects``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from deltacells.format._names import APPEND_PREFIX, MANIFEST_NAME
from deltacells.format._problems import Checker, Problem

__all__ = ["Commit", "check_commit", "commit_of"]

_WHERE = f"{MANIFEST_NAME} field metadata.deltacells.commit"
_SAFE_PATH = re.compile(r"[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)*")


@dataclass(frozen=True)
class Commit:
    """A manifest's commit entry.

    Attributes
    ----------
    version
        Commits so far (0: written in one go).
    id
        The commit's id.
    staging
        The staging prefix of a pending commit, else ``None``.
    objects
        The objects (paths relative to the root) a pending commit still has under ``staging``; empty once done.
    """

    version: int = 0
    id: str = ""
    staging: str | None = None
    objects: tuple[str, ...] = ()

    @property
    def pending(self) -> bool:
        """Whether objects of this commit may still be under its staging prefix."""
        return self.staging is not None

    def done(self) -> Commit:
        """The same commit, rolled forward (no staging prefix, no objects)."""
        return Commit(version=self.version, id=self.id)

    def to_dict(self) -> dict[str, Any]:
        """The manifest's entry (``metadata["deltacells"]["commit"]``)."""
        entry: dict[str, Any] = {"version": self.version, "id": self.id}
        if self.staging is not None:
            entry["staging"] = self.staging
            entry["objects"] = list(self.objects)
        return entry


def commit_of(metadata: Any) -> Checker[Commit]:
    """The :class:`Commit` a manifest's ``metadata`` names (version 0 when it names none); problems if malformed."""
    entry = metadata.get("deltacells", {}) if isinstance(metadata, dict) else {}
    entry = entry.get("commit") if isinstance(entry, dict) else None
    if entry is None:
        return Commit()
    commit = yield from check_commit(entry)
    return commit if commit is not None else Commit()


def check_commit(entry: Any) -> Checker[Commit | None]:
    """The manifest's commit entry: a version, an id, and, while pending, a staging prefix and its objects."""
    if not isinstance(entry, dict):
        yield Problem(MANIFEST_NAME, f"{_WHERE} is not a JSON object")
        return None
    version, commit_id = entry.get("version"), entry.get("id")
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        yield Problem(MANIFEST_NAME, f"{_WHERE}.version is {version!r}, not an integer >= 0")
        return None
    if not isinstance(commit_id, str) or not re.fullmatch(r"[0-9a-f]{1,64}", commit_id):
        yield Problem(MANIFEST_NAME, f"{_WHERE}.id is {commit_id!r}, not a hex string")
        return None
    staging, objects = entry.get("staging"), entry.get("objects")
    if staging is None and objects is None:
        return Commit(version=version, id=commit_id)
    if not isinstance(staging, str) or not re.fullmatch(re.escape(APPEND_PREFIX) + r"[0-9a-f]{1,64}", staging):
        yield Problem(MANIFEST_NAME, f"{_WHERE}.staging is {staging!r}, not an append's staging prefix")
        return None
    if not isinstance(objects, list) or not all(
        isinstance(o, str) and _SAFE_PATH.fullmatch(o) and ".." not in o.split("/") for o in objects
    ):
        yield Problem(MANIFEST_NAME, f"{_WHERE}.objects is not a list of paths inside the dataset")
        return None
    return Commit(version=version, id=commit_id, staging=staging, objects=tuple(objects))
