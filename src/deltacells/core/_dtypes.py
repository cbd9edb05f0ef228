"""The dtype reads give (docs/format.md, decision 9): the counts' own, as the writer recorded it; float32 without one.

The decoders write four dtypes straight into their output (:data:`~deltacells.tiles.DIRECT_DTYPES`: int32,
int64, float32, float64); counts written in another (``uint16``, ``int8``, ``float16``...) are decoded into
the nearest of them that holds every count, then cast (:func:`decoded_dtype`). A collection of datasets reads
in the dtype :func:`anndata.concat` would give their matrices (numpy's promotion, :func:`promoted_dtype`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from deltacells.tiles import DIRECT_DTYPES

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

__all__ = ["UNRECORDED_DTYPE", "decoded_dtype", "promoted_dtype"]

#: What a dataset that records no dtype reads as (the dtype scanpy expects).
UNRECORDED_DTYPE = np.dtype(np.float32)


def decoded_dtype(dtype: DTypeLike) -> np.dtype:
    """The decoders' dtype a read in ``dtype`` decodes into before it is cast (``dtype`` itself when it is one).

    Integers decode as int32 (counts lie in ``0 .. 2^31 - 1``, docs/format.md, decision 8), floats as float32 up
    to 4 bytes and float64 beyond.
    """
    wanted = np.dtype(dtype)
    if wanted in DIRECT_DTYPES:
        return wanted
    if wanted.kind == "f":
        return np.dtype(np.float32 if wanted.itemsize <= 4 else np.float64)
    return np.dtype(np.int32)


def promoted_dtype(dtypes: Iterable[DTypeLike]) -> np.dtype:
    """The dtype of matrices of ``dtypes`` stacked, as :func:`anndata.concat` gives it (numpy's promotion).

    ``int32`` and ``int64`` give ``int64``, ``int32`` and ``float32`` give ``float64``, ``uint16`` and
    ``int32`` give ``int32``; no dtype at all gives :data:`UNRECORDED_DTYPE`.
    """
    found = [np.dtype(dtype) for dtype in dtypes]
    if not found:
        return UNRECORDED_DTYPE
    return np.result_type(*found)
