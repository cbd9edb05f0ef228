"""A read-only, seekable file over one stored object, made of ranged reads.

``pyarrow.parquet.ParquetFile(StoreFile(store, "obs/obs_0000.parquet"))`` fetches the footer and
then only the column chunks it is asked for, whatever the store.
"""

from __future__ import annotations

import io
from typing import Any, Protocol

from deltacells.errors import InvalidTypeError, InvalidValueError

__all__ = ["RangeReader", "StoreFile"]


class RangeReader(Protocol):
    """What a :class:`StoreFile` asks of its store (every :class:`~deltacells.storage.BaseStore` has both)."""

    def read(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        """The bytes ``[start, end)`` of object ``path``."""
        ...

    def size(self, path: str) -> int:
        """Size in bytes of object ``path``."""
        ...


class StoreFile(io.RawIOBase):
    """A read-only, seekable, unbuffered file whose every read is one ranged ``store.read``.

    Subclasses that hold some of the object's bytes already (e.g. ``deltacells.obs._ranges.KnownRangesFile``)
    override ``_read_range``, which every read goes through, and keep the position bookkeeping here.

    Parameters
    ----------
    store
        The store holding the object: a :class:`~deltacells.storage.BaseStore`, or anything with its ``read`` and
        ``size`` (:class:`~deltacells.storage.RangeReader`).
    path
        The object, relative to the store's root.
    size
        The object's size in bytes when already known; otherwise asked of ``store.size``.

    Attributes
    ----------
    requests : int
        The ranged reads made so far (the size lookup is not counted).
    bytes_read : int
        The bytes those reads returned.

    Raises
    ------
    MissingObjectError
        From the constructor, if ``size`` is not given and the object does not exist.
    """

    def __init__(self, store: RangeReader, path: str, size: int | None = None) -> None:
        super().__init__()
        self.store = store
        self.path = path
        self.size = int(store.size(path) if size is None else size)
        self.requests = 0
        self.bytes_read = 0
        self._pos = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.store!r}, {self.path!r}, size={self.size})"

    def __reduce__(self) -> Any:
        msg = f"{self!r} cannot be pickled; pickle the store and the path instead"
        raise InvalidTypeError(msg)

    @property
    def name(self) -> str:
        """The object's path in its store."""
        return self.path

    def readable(self) -> bool:
        """True: the file can be read."""
        return True

    def seekable(self) -> bool:
        """True: the file can seek."""
        return True

    def writable(self) -> bool:
        """False: the file is read-only."""
        return False

    def tell(self) -> int:
        """The current position."""
        self._check_open()
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move to ``offset`` from the start, the current position or the end; return the new position."""
        self._check_open()
        if whence == io.SEEK_SET:
            position = offset
        elif whence == io.SEEK_CUR:
            position = self._pos + offset
        elif whence == io.SEEK_END:
            position = self.size + offset
        else:
            msg = f"whence must be 0, 1 or 2 (io.SEEK_SET, SEEK_CUR, SEEK_END), got {whence!r}"
            raise InvalidValueError(msg)
        if position < 0:
            msg = f"negative seek position {position} in {self.path}"
            raise InvalidValueError(msg)
        self._pos = int(position)
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes from the current position (to the end if ``size`` is None or negative)."""
        self._check_open()
        stop = self.size if size is None or size < 0 else min(self.size, self._pos + size)
        if stop <= self._pos:
            return b""
        data = self._read_range(self._pos, stop)
        self._pos += len(data)
        return data

    def readall(self) -> bytes:
        """Everything from the current position to the end."""
        return self.read(-1)

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        """Read into ``buffer`` (a writable bytes-like object); return the number of bytes read."""
        view = memoryview(buffer).cast("B")
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)

    def _read_range(self, start: int, stop: int) -> bytes:
        """The bytes ``[start, stop)`` of the object, ``0 <= start < stop <= size``: one ranged read of the store.

        Every :meth:`read` (and so :meth:`readinto` and :meth:`readall`) gets its bytes here; subclasses
        override it to answer from bytes they hold and call it for the rest, which counts in
        :attr:`requests` and :attr:`bytes_read`.

        Parameters
        ----------
        start, stop
            The range, clipped to the object by the caller and never empty.

        Returns
        -------
        bytes
            What the store returned for the range.
        """
        data = self.store.read(self.path, start, stop)
        self.requests += 1
        self.bytes_read += len(data)
        return data

    def _check_open(self) -> None:
        if self.closed:
            msg = f"I/O operation on closed file {self.path}"
            raise InvalidValueError(msg)
