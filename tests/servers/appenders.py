"""Appenders for the tests of concurrent appends: functions that child processes import and run.

A batch is made from its first cell number and size alone (:func:`batch`), so that the test can rebuild what
each child appended and compare the grown dataset with the batches whose append reported success.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
from scipy import sparse

__all__ = ["N_GENES", "append_and_die_before_commit", "append_batch", "batch"]

N_GENES = 30


def batch(start: int, n: int, *, obsm: bool = False) -> ad.AnnData:
    """``n`` cells named ``cell<start>``..., counts and obs drawn from ``start``; genes ``g0``... (reversed order
    for odd ``start``, so that appends match genes by name); with ``obsm``, an embedding ``X_emb`` too."""
    rng = np.random.default_rng(start)
    counts = sparse.random(n, N_GENES, density=0.3, format="csr", random_state=start, dtype=np.float64)
    counts.data = rng.integers(1, 100, counts.nnz).astype(np.float64)
    obs = pd.DataFrame(
        {"writer": pd.Categorical([f"w{start}"] * n), "value": rng.random(n)},
        index=[f"cell{start + i}" for i in range(n)],
    )
    adata = ad.AnnData(X=counts.astype(np.float32), obs=obs, var=pd.DataFrame(index=[f"g{i}" for i in range(N_GENES)]))
    if obsm:
        adata.obsm["X_emb"] = rng.random((n, 3)).astype(np.float32)
    return adata[:, ::-1].copy() if start % 2 else adata


def append_batch(
    url: str, storage_options: dict[str, Any] | None, start: int, n: int, start_at: float, result: str
) -> None:
    """Wait until ``start_at`` (a ``time.time()``), append ``batch(start, n)`` to ``url``, report to ``result``.

    The report is ``"ok"``, or the exception's class name and message.
    """
    import deltacells

    adata = batch(start, n)
    time.sleep(max(0.0, start_at - time.time()))
    try:
        deltacells.write_deltacells(
            adata, url, append=True, progress=False, storage_options=storage_options, commit_retries=50
        )
    except Exception as exc:  # reported to the test, which decides
        Path(result).write_text(f"{type(exc).__name__}: {exc}")
        return
    Path(result).write_text("ok")


def append_and_die_before_commit(url: str, storage_options: dict[str, Any] | None, start: int, n: int) -> None:
    """Append ``batch(start, n)`` to ``url`` and die (``os._exit``) once it is staged, just before its commit.

    What an appender SIGKILLed between staging and committing leaves: its staging prefix, whole, that no
    manifest names.
    """
    import os

    import deltacells
    from deltacells.core import _commit

    def die(*args: Any) -> None:
        os._exit(9)

    _commit._check_staged = die
    deltacells.write_deltacells(batch(start, n), url, append=True, progress=False, storage_options=storage_options)
    os._exit(0)  # not reached
