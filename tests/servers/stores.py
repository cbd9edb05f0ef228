"""Stores standing in for a server: a local directory that reads like object storage."""

from __future__ import annotations

from deltacells.storage import FsspecStore


class RemoteLookingStore(FsspecStore):
    """A local directory that says it is not local: ranged reads and whole fetches, without a server."""

    @property
    def is_local(self) -> bool:
        return False
