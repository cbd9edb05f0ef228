"""The per-cell elements of an appended dataset's parts put together (see ``deltacells.io._extras_parts``)."""

from __future__ import annotations

from typing import Any

__all__ = ["combine_parts"]


def combine_parts(path: str, values: list[Any]) -> Any:
    """One element from the values of its parts, in order: rows stacked (obsm), blocks on the diagonal (obsp)."""
    if len(values) == 1:
        return values[0]
    import numpy as np
    import pandas as pd
    from scipy import sparse

    from deltacells._sparse import issparse

    if path.startswith("obsp/"):
        blocks = [v.compute() if hasattr(v, "compute") else v for v in values]
        return sparse.block_diag([sparse.csr_matrix(b) for b in blocks], format="csr")
    if any(hasattr(v, "dask") for v in values):
        import dask.array as da

        return da.concatenate([v if hasattr(v, "dask") else da.from_array(v) for v in values], axis=0)
    if isinstance(values[0], pd.DataFrame):
        return pd.concat(values, axis=0)
    if issparse(values[0]):
        return sparse.vstack(values, format=values[0].format)
    return np.concatenate([np.asarray(v) for v in values], axis=0)
