"""How deltacells writes its parquet objects (``var.parquet`` and the obs shards): their encodings.

pyarrow's defaults give every column a dictionary page, and compress with zstd at level 1. A column of strings
that are all different (obs names, gene names and ids) gains nothing from a dictionary: its values are stored
twice over (in the dictionary, then as indices into it), and zstd then sees them shuffled among lengths. Written
plain, the same strings compress better (``benchmarks/bench_convert.py`` prints the bytes of each object of a
dataset).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

__all__ = ["PARQUET_ZSTD_LEVEL", "parquet_write_options"]

#: zstd level of the parquet objects: level 3 writes as fast as pyarrow's default (1), a few percent smaller.
PARQUET_ZSTD_LEVEL = 3


def parquet_write_options(schema: pa.Schema) -> dict[str, Any]:
    """Keyword arguments of :func:`pyarrow.parquet.write_table` (and ``ParquetWriter``) for a table of ``schema``.

    zstd at :data:`PARQUET_ZSTD_LEVEL`; dictionary pages for every column but plain strings (categoricals are
    dictionary columns already, and keep their dictionary page).
    """
    dictionary = [
        field.name for field in schema if not (pa.types.is_string(field.type) or pa.types.is_large_string(field.type))
    ]
    return {"compression": "zstd", "compression_level": PARQUET_ZSTD_LEVEL, "use_dictionary": dictionary}
