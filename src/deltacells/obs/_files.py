"""The files of the local obs cache: one Arrow IPC file per column, written atomically, checked when opened."""

from __future__ import annotations

import contextlib
import hashlib
import os
import urllib.parse
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np
import pyarrow as pa

__all__ = ["ColumnFileWriter", "atomic_write", "column_file_name", "read_column_file", "remove_stale_temporaries"]

#: Longest file name stem used as is; longer quoted names are shortened and gain a hash.
_MAX_STEM = 200


def column_file_name(name: str) -> str:
    """The cache file name of column ``name``: its URL-quoted name plus ``.arrow``.

    Names whose quoted form is too long for a file name keep a prefix and gain a hash of the whole name.
    """
    stem = urllib.parse.quote(name, safe="")
    if len(stem) > _MAX_STEM:
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        stem = f"{stem[:150]}~{digest}"
    return f"{stem}.arrow"


#: Schema metadata key of a cached column file: the obs fingerprint it was fetched for.
FINGERPRINT_KEY = b"deltacells.obs_fingerprint"


def read_column_file(
    path: Path,
    name: str,
    arrow_type: pa.DataType,
    tile_cells: np.ndarray,
    fingerprint: str,
    *,
    validate: bool = True,
) -> list[pa.Array] | None:
    """Memory-map a cached column and return its record batches' values, one array per tile.

    Returns ``None`` when the file is missing, unreadable or truncated, was fetched for another
    fingerprint, or does not hold exactly one column ``name`` of ``arrow_type`` in one record batch of
    ``tile_cells[t]`` rows per tile (string offsets included: a damaged file must not crash the reader).
    With ``validate=False`` the arrays' buffers are not checked (that reads every value of a string
    column); the caller must then ``validate(full=True)`` each array before it uses its values.
    """
    if not path.exists():
        return None
    try:
        source = pa.memory_map(str(path), "r")
        try:
            reader = pa.ipc.open_file(source)
            if reader.num_record_batches != tile_cells.shape[0]:
                return None
            if reader.schema.names != [name] or reader.schema.field(0).type != arrow_type:
                return None
            if (reader.schema.metadata or {}).get(FINGERPRINT_KEY) != fingerprint.encode():
                return None
            full = pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
            chunks: list[pa.Array] = reader.read_all().column(0).chunks  # one array per record batch, zero-copy
            if len(chunks) != tile_cells.shape[0]:
                return None
            rows = np.fromiter(map(len, chunks), dtype=np.int64, count=len(chunks))
            if not np.array_equal(rows, tile_cells):
                return None
            for chunk in chunks:
                chunk.validate(full=full and validate)
            return chunks
        finally:
            source.close()  # the buffers keep the mapping alive as long as they are used
    except (pa.ArrowException, OSError, ValueError, IndexError):
        return None


class ColumnFileWriter:
    """A cached column being written: a temporary file beside the target, one record batch per tile.

    :meth:`commit` renames it into place; :meth:`abort` removes it. ``guard`` wraps every file operation
    (to turn ``OSError`` into an error that tells what to do).
    """

    def __init__(
        self,
        path: Path,
        name: str,
        arrow_type: pa.DataType,
        *,
        fingerprint: str,
        guard: Callable[[], AbstractContextManager[None]],
    ) -> None:
        self.path = path
        self.tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
        self.schema = pa.schema([pa.field(name, arrow_type)], metadata={FINGERPRINT_KEY: fingerprint.encode()})
        self._guard = guard
        self._done = False
        with guard():
            self._sink = pa.OSFile(str(self.tmp), "wb")
            self._writer = pa.ipc.new_file(self._sink, self.schema)

    def write(self, values: pa.Array) -> None:
        """Append one tile's values as a record batch."""
        with self._guard():
            self._writer.write_batch(pa.record_batch([values], schema=self.schema))

    def commit(self) -> None:
        """Finish the file and rename it into place."""
        with self._guard():
            self._writer.close()
            self._sink.close()
            os.replace(self.tmp, self.path)
        self._done = True

    def abort(self) -> None:
        """Remove the temporary file (a no-op after :meth:`commit`)."""
        if self._done:
            return
        self._done = True
        with contextlib.suppress(Exception):
            self._writer.close()
        with contextlib.suppress(Exception):
            self._sink.close()
        with contextlib.suppress(OSError):
            self.tmp.unlink()


def remove_stale_temporaries(directory: Path) -> None:
    """Remove the temporary files of writers that died; call it holding the cache lock (no live writer then)."""
    for tmp in directory.glob("*.tmp"):
        with contextlib.suppress(OSError):
            tmp.unlink()


def atomic_write(path: Path, data: bytes) -> None:
    """Write a small file whole, through a temporary file and a rename."""
    tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
