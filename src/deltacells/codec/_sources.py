"""Where the frames of a tile are read from: the whole tile object, or the byte ranges a reader fetched."""

from __future__ import annotations

from typing import Protocol


class ByteSource(Protocol):
    """Where the frames of a tile are read from: absolute offsets of the tile object to bytes.

    :class:`BlobSource` serves the whole object (what :func:`decode_tile` reads);
    ``deltacells.codec._partial.PieceSource`` serves the byte ranges a reader fetched.
    """

    def read(self, start: int, length: int, where: str) -> memoryview:
        """Return bytes ``[start, start + length)`` of the object (a view, no copy).

        The range is inside the object (the chunk table has been checked);
        ``where`` names the stream for an error if the source does not hold it.
        """


class BlobSource:
    """A :class:`ByteSource` over the whole tile object: a slice of its memoryview, no copy."""

    __slots__ = ("view",)

    def __init__(self, view: memoryview) -> None:
        self.view = view

    def read(self, start: int, length: int, where: str) -> memoryview:
        """Return bytes ``[start, start + length)`` of the object."""
        return self.view[start : start + length]
