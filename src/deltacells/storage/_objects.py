"""What a listing says of each object: :class:`StoredObject` (path, size, when it was last written)."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["StoredObject", "modified_of"]

#: The keys under which fsspec filesystems report when an object was last written, most specific first
#: (s3fs ``LastModified``, obstore and adlfs ``last_modified``, local and sftp ``mtime``, gcsfs ``updated``,
#: memory ``created``).
_MODIFIED_KEYS = ("LastModified", "last_modified", "mtime", "updated", "created")


@dataclass(frozen=True)
class StoredObject:
    """One object of a store, as a recursive listing gives it.

    Attributes
    ----------
    path
        Its path, relative to the store's root.
    size
        Its size in bytes.
    modified
        When it was last written (seconds since the epoch), or None where the store does not say.
    """

    path: str
    size: int
    modified: float | None


def modified_of(info: Mapping[str, Any]) -> float | None:
    """When an object was last written, in seconds since the epoch, from an fsspec or obstore ``info`` mapping.

    Accepts datetimes (naive ones are taken as UTC), numbers and ISO 8601 strings; None when none is given.
    """
    for key in _MODIFIED_KEYS:
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, str):
            try:
                value = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
        if isinstance(value, datetime.datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=datetime.UTC)
            return value.timestamp()
        if isinstance(value, (int, float)):
            return float(value)
    return None
