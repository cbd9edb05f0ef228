"""The dtype of the counts a dataset was written from (docs/format.md, decision 9), in the manifest's metadata.

The tiles hold whole numbers whatever the input's dtype; the writer records that dtype in the manifest's
free-form ``metadata``, so that readers give the counts back in it by default::

    "metadata": {"deltacells": {"dtype": "int32"}}

The value is numpy's name of an integer or floating dtype (``"int32"``, ``"uint16"``, ``"float32"``...). A
dataset that records none (written before the key existed, or by another writer) reads as ``float32``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from deltacells.format._names import MANIFEST_NAME
from deltacells.format._problems import Checker, Problem

__all__ = ["COUNTS_DTYPE_KINDS", "check_counts_dtype", "counts_dtype_entry", "counts_dtype_of"]

#: The kinds of numpy dtype that can hold counts: signed and unsigned integers, floats.
COUNTS_DTYPE_KINDS = "iuf"

_WHERE = f"{MANIFEST_NAME} field metadata.deltacells.dtype"


def counts_dtype_of(metadata: Any) -> Checker[np.dtype | None]:
    """The dtype a manifest's ``metadata`` records for the counts, ``None`` when it records none."""
    entry = metadata.get("deltacells", {}) if isinstance(metadata, dict) else {}
    name = entry.get("dtype") if isinstance(entry, dict) else None
    if name is None:
        return None
    dtype = yield from check_counts_dtype(name)
    return dtype


def check_counts_dtype(name: Any) -> Checker[np.dtype | None]:
    """``metadata.deltacells.dtype``: numpy's own name of an integer or floating dtype."""
    try:
        dtype = np.dtype(name) if isinstance(name, str) else None
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind not in COUNTS_DTYPE_KINDS or dtype.name != name:
        yield Problem(MANIFEST_NAME, f"{_WHERE} is {name!r}, not numpy's name of an integer or floating dtype")
        return None
    return dtype


def counts_dtype_entry(dtype: np.dtype) -> str:
    """What the writer records for counts of ``dtype``: numpy's name of it (``"int32"``)."""
    return np.dtype(dtype).name
