"""StoreFile's hook for subclasses: every read goes through ``_read_range`` with a clipped, non-empty range."""

from __future__ import annotations

import io
from pathlib import Path

from deltacells.storage import FsspecStore, StoreFile


class RecordingFile(StoreFile):
    """A StoreFile that records the ranges asked of its hook and serves even ones from memory."""

    def __init__(self, store: FsspecStore, path: str, data: bytes) -> None:
        super().__init__(store, path)
        self.data = data
        self.asked: list[tuple[int, int]] = []

    def _read_range(self, start: int, stop: int) -> bytes:
        self.asked.append((start, stop))
        if start % 2 == 0:
            return self.data[start:stop]
        return super()._read_range(start, stop)


def test_every_read_goes_through_the_hook(tmp_path: Path) -> None:
    data = bytes(range(50))
    store = FsspecStore(tmp_path)
    store.write("obj", data)
    with RecordingFile(store, "obj", data) as f:
        assert repr(f).startswith("RecordingFile(")
        assert f.read(4) == data[:4]
        assert f.read(3) == data[4:7]
        assert f.read(2) == data[7:9]  # odd start: the store
        assert f.read(0) == b""
        assert f.seek(-5, io.SEEK_END) == 45 and f.read(100) == data[45:]
        assert f.read() == b"" and f.seek(80) == 80 and f.read(3) == b""
        buffer = bytearray(10)
        f.seek(20)
        assert f.readinto(buffer) == 10 and bytes(buffer) == data[20:30]
        assert f.asked == [(0, 4), (4, 7), (7, 9), (45, 50), (20, 30)]
        assert (f.requests, f.bytes_read) == (2, 2 + 5)
