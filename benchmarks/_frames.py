"""The zstd frames of a dataset's tiles: what "zstd alone", the floor of the benchmarks, decompresses."""

from __future__ import annotations

from deltacells.codec._layout import GAPS_LEN, GAPS_OFF, VALS_LEN, VALS_OFF, TileHeader, read_chunk_table


def tile_frames(blob: bytes) -> list[bytes]:
    """Every gaps and vals frame of one tile object, in chunk order."""
    return [
        blob[int(row[off]) : int(row[off]) + int(row[length])]
        for row in read_chunk_table(blob, TileHeader.unpack(blob))
        for off, length in ((GAPS_OFF, GAPS_LEN), (VALS_OFF, VALS_LEN))
    ]


def dataset_frames(blobs: list[bytes]) -> list[bytes]:
    """Every gaps and vals frame of the tiles ``blobs``, tile after tile."""
    return [frame for blob in blobs for frame in tile_frames(blob)]
