"""``deltacells convert``'s inputs: formats told from HDF5 contents, and inputs it cannot read, each as one error line.

HDF5 files are told apart by their groups (h5ad, a legacy 10x h5 whose genome group holds the barcodes, loom); a
``.h5`` file that is not HDF5, an HDF5 file of none of these, a zarr array, a zarr group without obs and var,
and ``--storage-options`` that is not a JSON object are refused naming the input and what is wrong.
"""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np
import pytest
import zarr
from click.testing import CliRunner, Result

from deltacells.cli import CLIError, detect_format, main


@pytest.fixture(autouse=True)
def _no_default_cache(no_default_cache: None) -> None:
    """Every test here must leave the default obs cache empty."""


def run(*args: str | os.PathLike[str]) -> Result:
    return CliRunner().invoke(main, [os.fspath(a) for a in args])


def one_error_line(result: Result) -> str:
    """The command failed with exit status 1 and one line ``error: ...`` (returned without its prefix)."""
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    return errors[0].removeprefix("error: ")


def test_an_h5_file_that_is_not_hdf5(tmp_path: Path) -> None:
    path = tmp_path / "cells.h5"
    path.write_bytes(b"not an HDF5 file at all")
    with pytest.raises(CLIError, match=r"cells\.h5: not a readable HDF5 file"):
        detect_format(path)
    message = one_error_line(run("convert", path, tmp_path / "out"))
    assert message.startswith(f"{path}: not a readable HDF5 file")
    assert not (tmp_path / "out").exists()


def test_an_hdf5_file_of_no_known_layout(tmp_path: Path) -> None:
    path = tmp_path / "other.hdf5"
    with h5py.File(path, "w") as f:
        f["numbers"] = np.arange(3)
        f.create_group("settings")
    message = one_error_line(run("convert", path, tmp_path / "out"))
    assert message == f"{path}: an HDF5 file that is neither h5ad, 10x h5 nor loom; pass --format"


def test_hdf5_layouts_are_told_by_their_groups(tmp_path: Path) -> None:
    legacy = tmp_path / "legacy"  # no suffix: told by the HDF5 signature, then by its groups
    with h5py.File(legacy, "w") as f:
        f.create_group("GRCh38").create_dataset("barcodes", data=np.array([b"AAAC"]))
    assert detect_format(legacy) == "10x-h5"
    encoded = tmp_path / "encoded.h5"
    with h5py.File(encoded, "w") as f:
        f.attrs["encoding-type"] = np.bytes_(b"anndata")  # an attribute stored as bytes
    assert detect_format(encoded) == "h5ad"
    loom = tmp_path / "cells.h5"
    with h5py.File(loom, "w") as f:
        f.create_group("matrix")  # a matrix group without barcodes: loom's layout
    assert detect_format(loom) == "loom"


def test_a_zarr_array_is_not_an_anndata(tmp_path: Path) -> None:
    path = tmp_path / "array.zarr"
    zarr.create_array(str(path), shape=(4,), dtype="i4")
    message = one_error_line(run("convert", "--format", "zarr", path, tmp_path / "out"))
    assert message.endswith("a zarr array, not the group of an AnnData")


def test_a_zarr_group_without_obs_and_var_is_not_an_anndata(tmp_path: Path) -> None:
    path = tmp_path / "group.zarr"
    group = zarr.open_group(str(path), mode="w")
    group.create_array("X", shape=(2, 2), dtype="f4")
    assert detect_format(path) == "zarr"
    message = one_error_line(run("convert", path, tmp_path / "out"))
    assert message == f"{path}: a zarr store without obs and var groups is not an AnnData"


@pytest.mark.parametrize("text", ["{not json", "[1, 2]"], ids=["not JSON", "not an object"])
def test_storage_options_must_be_a_json_object(tmp_path: Path, text: str) -> None:
    result = run("info", tmp_path, "--storage-options", text)
    assert result.exit_code == 2, result.output  # a usage error, reported by click
    assert "--storage-options must be a JSON object" in result.stderr
