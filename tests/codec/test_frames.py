"""zstd frames: the extent walked from block headers, decompression into scratch buffers, and compression."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
import zstandard

from deltacells.codec._frames import compress_frame, decompress_scratch, frame_size
from deltacells.errors import FormatError

PAYLOADS = {
    "empty": b"",
    "rle": b"\x00" * 300_000,  # RLE blocks
    "raw": os.urandom(200_000),  # incompressible: raw blocks
    "mixed": os.urandom(1000) * 150 + b"\x07" * 50_000,  # compressed and RLE blocks
}


def _frame(payload: bytes, *, checksum: bool = False) -> bytes:
    cctx = zstandard.ZstdCompressor(level=3, write_content_size=True, write_checksum=checksum)
    return cctx.compress(payload)


@pytest.mark.parametrize("checksum", [False, True])
@pytest.mark.parametrize("name", list(PAYLOADS))
def test_frame_size_is_the_frames_extent(name: str, checksum: bool) -> None:
    frame = _frame(PAYLOADS[name], checksum=checksum)
    assert frame_size(memoryview(frame), where="f") == len(frame)
    assert frame_size(memoryview(frame + b"trailing"), where="f") == len(frame)


@pytest.mark.parametrize("name", list(PAYLOADS))
def test_decompress_scratch_round_trips(name: str) -> None:
    payload = PAYLOADS[name]
    got = decompress_scratch(memoryview(_frame(payload)), len(payload), 0, where="f")
    assert bytes(got) == payload


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda f: f + b"\x00", "must fill it exactly"),
        (lambda f: f + _frame(b""), "must fill it exactly"),  # a second (empty) frame in the stream
        (lambda f: f[:-3], r"takes \d+ of the stream's \d+ bytes|cut short"),
        (lambda f: b"nope" + f[4:], "not a zstd frame|corrupt"),
    ],
    ids=["trailing byte", "second frame", "truncated", "bad magic"],
)
def test_malformed_frames_are_refused(mutate, match: str) -> None:
    payload = PAYLOADS["mixed"]
    with pytest.raises(FormatError, match=match):
        decompress_scratch(memoryview(mutate(_frame(payload))), len(payload), 0, where="f")


def test_a_frame_of_another_size_is_refused() -> None:
    payload = PAYLOADS["mixed"]
    with pytest.raises(FormatError, match="decompressed to"):
        decompress_scratch(memoryview(_frame(payload)), len(payload) + 1, 0, where="f")


def test_scratch_is_per_thread_and_per_slot() -> None:
    """Two slots of one thread hold two frames at once; another thread has its own buffers."""
    a, b = os.urandom(5000), os.urandom(7000)
    first = decompress_scratch(memoryview(_frame(a)), len(a), 0, where="a")
    second = decompress_scratch(memoryview(_frame(b)), len(b), 1, where="b")
    seen = {}

    def other() -> None:
        seen["other"] = bytes(decompress_scratch(memoryview(_frame(b)), len(b), 0, where="c"))

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert bytes(first) == a and bytes(second) == b and seen["other"] == b


def test_compress_frame_with_parameters_keeps_frames_valid() -> None:
    """Parameters that would drop the content size or add a checksum are overridden: one frame, size declared."""
    data = np.arange(50_000, dtype="<u2").tobytes()
    params = zstandard.ZstdCompressionParameters.from_level(
        19, window_log=20, enable_ldm=1, write_content_size=0, write_checksum=1
    )
    frame = compress_frame(data, params)
    assert zstandard.get_frame_parameters(frame).content_size == len(data)
    assert not zstandard.get_frame_parameters(frame).has_checksum
    assert zstandard.ZstdDecompressor().decompress(frame, allow_extra_data=False) == data
    # the thread's compressor follows the level asked for, not the last one used
    assert compress_frame(data, 1) == zstandard.ZstdCompressor(level=1, write_content_size=True).compress(data)
