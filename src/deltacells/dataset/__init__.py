"""Datasets: opening one (or several as one, a collection) and reading any cells; writing one, manifest last."""

from __future__ import annotations

from deltacells.dataset._collection import Collection
from deltacells.dataset._dataset import Dataset
from deltacells.dataset._open import open_dataset
from deltacells.dataset._sizes import sidecar_bytes
from deltacells.dataset._writer import DatasetWriter

__all__ = ["Collection", "Dataset", "DatasetWriter", "open_dataset", "sidecar_bytes"]
