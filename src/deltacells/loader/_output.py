"""What a batch's X is made into: scipy CSR, dense numpy, or torch tensors (sparse CSR or dense)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from scipy import sparse

from deltacells._checks import check_choice

__all__ = ["OUTPUTS", "SPARSE_OUTPUTS", "check_output", "convert"]

#: The values of ``output=``: what each gives.
OUTPUTS = {
    "scipy": "scipy.sparse.csr_matrix",
    "numpy": "dense numpy.ndarray",
    "torch": "dense torch.Tensor",
    "torch_sparse": "torch.Tensor in sparse CSR layout",
}

#: The outputs that keep the CSR structure (their rows' columns must be sorted).
SPARSE_OUTPUTS = frozenset({"scipy", "torch_sparse"})


def check_output(output: str) -> None:
    """Raise for an unknown ``output``, or a torch output without torch installed."""
    check_choice("output", output, OUTPUTS)
    if output.startswith("torch"):
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            msg = (
                f"output={output!r} needs torch, which is not installed: pip install torch "
                "(for a CPU-only build, torch's CPU wheel index), or use output='scipy' or 'numpy'"
            )
            raise ImportError(msg) from exc


def convert(matrix: sparse.csr_matrix, output: str) -> Any:
    """``matrix`` (a batch's rows) as ``output`` asks."""
    if output == "scipy":
        return matrix
    if output == "numpy":
        return matrix.toarray()
    import torch

    if output == "torch":
        return torch.from_numpy(matrix.toarray())
    with warnings.catch_warnings():  # torch calls its sparse CSR layout beta, on every tensor made
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)
        return torch.sparse_csr_tensor(
            torch.from_numpy(np.asarray(matrix.indptr, dtype=np.int64)),
            torch.from_numpy(np.asarray(matrix.indices, dtype=np.int64)),
            torch.from_numpy(matrix.data),
            size=matrix.shape,
            check_invariants=False,  # a canonical CSR matrix: checked by scipy, and by the decoder before it
        )
