"""CRC-32 of tile payloads (zlib's polynomial, as docs/format.md requires), at memory speed.

zlib-ng's ``crc32`` folds with carry-less multiplication (PCLMULQDQ, ARMv8 CRC, VPCLMULQDQ): about
50 GB/s on one core of the benchmark machine, against about 3 GB/s for the zlib that CPython links. The
result is the same number; where zlib-ng is not installed, CPython's ``zlib.crc32`` is used.
"""

from __future__ import annotations

try:
    from zlib_ng.zlib_ng import crc32 as _crc32
except ImportError:  # pragma: no cover - zlib-ng is a dependency; kept for platforms without a wheel
    from zlib import crc32 as _crc32

__all__ = ["crc32"]


def crc32(data: bytes | bytearray | memoryview) -> int:
    """Return the CRC-32 of ``data`` (the value of :func:`zlib.crc32`)."""
    return _crc32(data)
