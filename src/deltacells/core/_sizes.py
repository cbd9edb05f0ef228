"""Sizes of a dataset's objects, as stored."""

from __future__ import annotations

from typing import TYPE_CHECKING

from deltacells.format import SIDECAR_NAMES

if TYPE_CHECKING:
    from deltacells.core import Dataset

__all__ = ["sidecar_bytes"]


def sidecar_bytes(dataset: Dataset) -> int:
    """Total size of the small objects beside the tiles and obs shards.

    Parameters
    ----------
    dataset
        An open dataset.

    Returns
    -------
    int
        Bytes of the manifest, the gene order, the var names, the var table and the obs schema, counting
        only those present (see ``deltacells.format.SIDECAR_NAMES``).
    """
    return sum(_size_or_zero(dataset, name) for name in SIDECAR_NAMES)


def _size_or_zero(dataset: Dataset, name: str) -> int:
    """Size of object ``name``, 0 if the dataset does not have it."""
    try:
        return dataset.store.size(name)
    except FileNotFoundError:
        return 0
