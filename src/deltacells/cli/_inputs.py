"""The inputs of ``deltacells convert``: telling their format, and opening them as lazily as it allows."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deltacells.cli._errors import CLIError
from deltacells.errors import DeltaCellsError, warn
from deltacells.format import MANIFEST_NAME

if TYPE_CHECKING:
    import anndata as ad
    import pandas as pd
    import zarr

#: Input formats ``deltacells convert`` reads (``auto`` guesses from the path).
INPUT_FORMATS = ("auto", "h5ad", "zarr", "10x-h5", "10x-mtx", "loom", "deltacells")


_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def detect_format(path: Path) -> str:
    """Guess the input format of ``path`` from its name and contents.

    Returns
    -------
    str
        One of ``h5ad``, ``zarr``, ``10x-h5``, ``10x-mtx``, ``loom``, ``deltacells``.

    Raises
    ------
    CLIError
        When the format cannot be told (pass ``--format``).
    """
    name = path.name.lower()
    if path.is_dir():
        entries = {p.name for p in path.iterdir()}
        if MANIFEST_NAME in entries:
            return "deltacells"
        if entries & {".zgroup", "zarr.json", ".zattrs"} or name.endswith(".zarr"):
            return "zarr"
        if entries & {"matrix.mtx", "matrix.mtx.gz"}:
            return "10x-mtx"
        msg = (
            f"{path}: cannot tell the format of this directory (not zarr, not a 10x matrix.mtx directory, not a "
            "deltacells dataset); pass --format"
        )
        raise CLIError(msg)
    if name.endswith(".h5ad"):
        return "h5ad"
    if name.endswith(".loom"):
        return "loom"
    if name in ("matrix.mtx", "matrix.mtx.gz"):
        return "10x-mtx"
    with path.open("rb") as f:
        is_hdf5 = f.read(8) == _HDF5_SIGNATURE
    if is_hdf5 or name.endswith((".h5", ".hdf5")):
        return _sniff_hdf5(path)
    msg = f"{path}: cannot tell the format of this file from its name or contents; pass --format"
    raise CLIError(msg)


def _sniff_hdf5(path: Path) -> str:
    """h5ad, 10x h5 (v3 ``/matrix`` or a legacy genome group) or loom, from the groups inside."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            keys = set(f.keys())
            encoding = f.attrs.get("encoding-type", "")
            if isinstance(encoding, bytes):
                encoding = encoding.decode()
            if encoding == "anndata" or "X" in keys or {"obs", "var"} <= keys:
                return "h5ad"
            if "matrix" in keys and isinstance(f["matrix"], h5py.Group):
                return "10x-h5" if "barcodes" in f["matrix"] else "loom"
            if any(isinstance(f[k], h5py.Group) and "barcodes" in f[k] for k in keys):
                return "10x-h5"
    except OSError as exc:
        msg = f"{path}: not a readable HDF5 file ({exc})"
        raise CLIError(msg) from exc
    msg = f"{path}: an HDF5 file that is neither h5ad, 10x h5 nor loom; pass --format"
    raise CLIError(msg)


@contextlib.contextmanager
def read_input(path: Path, fmt: str, tmp: str | os.PathLike[str]) -> Iterator[ad.AnnData]:
    """Open ``path`` as an AnnData, as lazily as its format allows; close it afterwards.

    Parameters
    ----------
    path
        The input.
    fmt
        Its format (one of :data:`INPUT_FORMATS` but ``auto``).
    tmp
        A scratch directory (the obs cache of a deltacells input).
    """
    adata, close = _open_input(path, fmt, tmp)
    try:
        yield adata
    finally:
        if close is not None:
            with contextlib.suppress(Exception):
                close()


def _open_input(path: Path, fmt: str, tmp: str | os.PathLike[str]) -> tuple[ad.AnnData, Any]:
    """The input as an AnnData, and what closes it (or None).

    Raises
    ------
    CLIError
        If the reader of the format cannot read the input (naming the input, the format and the reason).
    """
    if fmt == "loom":
        try:
            import loompy  # noqa: F401 - anndata reads loom through it
        except ImportError as exc:
            msg = "reading loom files needs the package loompy (pip install loompy)"
            raise CLIError(msg) from exc
    if fmt not in INPUT_FORMATS[1:]:
        msg = f"unknown input format {fmt!r}; choose one of {', '.join(INPUT_FORMATS[1:])}"
        raise CLIError(msg)
    try:
        return _read_format(path, fmt, tmp)
    except DeltaCellsError:
        raise
    except Exception as exc:  # whatever the format's reader raises for a file it cannot read
        msg = f"{path}: cannot be read as {fmt} ({type(exc).__name__}: {exc})"
        raise CLIError(msg) from exc


def _read_format(path: Path, fmt: str, tmp: str | os.PathLike[str]) -> tuple[ad.AnnData, Any]:
    import anndata as ad

    if fmt == "h5ad":
        adata = ad.read_h5ad(path, backed="r")
        return _csc_in_memory(adata), adata.file.close
    if fmt == "zarr":
        return _read_zarr_lazily(path), None
    if fmt == "10x-h5":
        import scanpy as sc

        return sc.read_10x_h5(path), None
    if fmt == "10x-mtx":
        import scanpy as sc

        return sc.read_10x_mtx(path if path.is_dir() else path.parent), None
    if fmt == "loom":
        return ad.io.read_loom(path), None  # type: ignore[attr-defined, unused-ignore]  # not in anndata 0.13's __all__
    from deltacells.io import read_deltacells

    # In the source's gene order (read_deltacells' default), so that the new gene_order.npy refers to it too, and in
    # the dtype the counts were written in, which the new dataset records again.
    return read_deltacells(path, cache_dir=Path(tmp) / "obs-cache"), None


def _csc_in_memory(adata: ad.AnnData) -> ad.AnnData:
    """A backed CSC X is read by columns: reading it in row blocks would read it whole each time."""
    from anndata.abc import CSCDataset

    if isinstance(adata.X, CSCDataset):
        warn("X is stored as CSC (by genes), which cannot be streamed by cells; reading it into memory")
        return adata.to_memory()
    return adata


def _read_zarr_lazily(path: Path) -> ad.AnnData:
    """A zarr AnnData with X, layers and raw.X left on disk (sparse ones as backed datasets) and the rest in memory."""
    import anndata as ad
    import pandas as pd
    import zarr

    group = zarr.open(str(path), mode="r")
    if not isinstance(group, zarr.Group):
        msg = f"{path}: a zarr array, not the group of an AnnData"
        raise CLIError(msg)
    # anndata writes absent elements (e.g. no raw) as arrays of encoding "null".
    keys = {k for k in group.keys() if group[k].attrs.get("encoding-type") != "null"}  # noqa: SIM118 - zarr groups
    if "obs" not in keys or "var" not in keys:
        msg = f"{path}: a zarr store without obs and var groups is not an AnnData"
        raise CLIError(msg)

    def lazy(element: Any) -> Any:
        encoding = element.attrs.get("encoding-type", "")
        if encoding == "csr_matrix":
            return ad.io.sparse_dataset(element)
        if encoding == "csc_matrix":
            return ad.io.read_elem(element)  # by genes: cannot be streamed by cells
        if encoding == "array":
            return element
        return ad.io.read_elem(element)

    kwargs: dict[str, Any] = {
        "obs": _read_frame(group["obs"]),
        "var": _read_frame(group["var"]),
        "X": lazy(group["X"]) if "X" in keys else None,
    }
    for name in ("obsm", "varm", "obsp", "varp", "uns"):
        if name in keys:
            kwargs[name] = ad.io.read_elem(group[name])
    if "layers" in keys:
        layers = group["layers"]
        assert isinstance(layers, zarr.Group)  # anndata writes layers as a group
        kwargs["layers"] = {k: lazy(layers[k]) for k in layers.keys()}  # noqa: SIM118 - zarr groups
    adata = ad.AnnData(**kwargs)
    if "raw" in keys:
        raw = group["raw"]
        assert isinstance(raw, zarr.Group)  # anndata writes raw as a group
        obs = adata.obs
        assert isinstance(obs, pd.DataFrame)  # read into memory above
        adata.raw = ad.AnnData(X=lazy(raw["X"]), obs=obs[[]], var=_read_frame(raw["var"]))
    return adata


def _read_frame(element: zarr.Array[Any] | zarr.Group) -> pd.DataFrame:
    """An AnnData's obs or var (a dataframe element) read into memory."""
    import anndata as ad
    import pandas as pd

    frame = ad.io.read_elem(element)
    assert isinstance(frame, pd.DataFrame)  # obs and var are dataframes
    return frame
