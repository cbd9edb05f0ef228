"""The AnnData the obs network tests write and read back (``tests/storage``, ``tests/obs``).

Unlike the servers' modules, this one needs neither ``aiohttp`` nor ``moto``.
"""

from __future__ import annotations

import anndata as ad
import numpy as np
import pandas as pd
import scipy.sparse as sp

__all__ = ["obs_adata"]


def obs_adata(n_tiles: int, tile_size: int, *, blob_chars: int = 0, seed: int = 0) -> ad.AnnData:
    """Cells in ``n_tiles`` tiles of ``tile_size``, with categorical, string and numeric obs columns.

    Parameters
    ----------
    n_tiles, tile_size
        The dataset has ``n_tiles * tile_size`` cells (named ``cell000000``, ...) and 6 genes.
    blob_chars
        If not 0, add a column ``blob`` of random hexadecimal text of this many characters, which makes
        each row group of an obs shard large.
    seed
        The seed of the random values; the same arguments always give the same AnnData.

    Returns
    -------
    anndata.AnnData
        Counts in ``X`` (CSR, float32 whole numbers) and obs columns ``cell_type`` (categorical), ``donor``
        (strings), ``n_counts`` (integers), ``pct`` (floats), and ``blob`` if asked.
    """
    n = n_tiles * tile_size
    rng = np.random.default_rng(seed)
    obs = pd.DataFrame(
        {
            "cell_type": pd.Categorical(rng.choice(["T", "B", "NK", "Mono"], n)),
            "donor": pd.array(rng.choice([f"donor_{i}" for i in range(30)], n), dtype=object),
            "n_counts": rng.integers(0, 5000, n),
            "pct": rng.random(n),
        },
        index=[f"cell{i:06d}" for i in range(n)],
    )
    if blob_chars:
        obs["blob"] = [rng.bytes(blob_chars // 2).hex() for _ in range(n)]
    X = sp.random(n, 6, density=0.3, format="csr", random_state=seed, dtype=np.float32)
    X.data = np.ceil(X.data * 10)
    return ad.AnnData(X=X, obs=obs)
