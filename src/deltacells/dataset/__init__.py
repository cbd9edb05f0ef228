"""Datasets: opening one and reading any set of its cells; writing one from blocks of rows, manifest last."""

from __future__ import annotations

from deltacells.dataset._dataset import Dataset
from deltacells.dataset._open import open_dataset
from deltacells.dataset._sizes import sidecar_bytes
from deltacells.dataset._writer import DatasetWriter

__all__ = ["Dataset", "DatasetWriter", "open_dataset", "sidecar_bytes"]
