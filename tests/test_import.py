"""``import deltacells`` and the command line load no heavy library until it is needed."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

HEAVY = ("anndata", "scanpy", "numba", "h5py", "zarr", "dask", "pandas", "pyarrow")


def loaded_after(code: str) -> list[str]:
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("code", ["import deltacells", "import deltacells.cli"])
def test_imports_load_no_heavy_library(code: str) -> None:
    assert loaded_after(code) == []


def test_opening_a_dataset_starts_loading_numba_in_the_background(tmp_path) -> None:
    """The kernels load on a thread of their own from the open on; the open does not wait for them."""
    import deltacells
    from deltacells.datasets import synthetic_counts

    deltacells.write_deltacells(synthetic_counts(50, 20), tmp_path / "ds", progress=False)
    code = (
        "import threading, deltacells\n"
        "from deltacells import _kernel_loading\n"
        "release = threading.Event()\n"
        "load = _kernel_loading._load\n"
        "_kernel_loading._load = lambda: (release.wait(60), load())\n"  # held until the open has returned
        f"deltacells.open_dataset({str(tmp_path / 'ds')!r})\n"
        "assert not _kernel_loading._loaded.is_set()\n"
        "release.set()\n"
        "_kernel_loading.load_compiled_kernels()\n"
    )
    assert "numba" in loaded_after(code)


def test_names_still_reach_anndata_and_scanpy() -> None:
    """The hooks that add AnnData.write_deltacells and scanpy.read_deltacells run when those are imported."""
    code = (
        "import deltacells, anndata, scanpy\n"
        "assert hasattr(anndata.AnnData, 'write_deltacells')\n"
        "assert scanpy.read_deltacells is deltacells.read_deltacells\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_public_names_resolve() -> None:
    import deltacells

    for name in deltacells.__all__:
        assert getattr(deltacells, name) is not None
    with pytest.raises(AttributeError, match="(?i)no deltacells attribute nope"):  # lazy_loader's message
        _ = deltacells.nope
    for package in ("core", "format", "io", "loader", "obs", "tiles"):  # every facade's names resolve too
        facade = importlib.import_module(f"deltacells.{package}")
        assert all(getattr(facade, name) is not None for name in facade.__all__), package
        assert set(facade.__all__) <= set(dir(facade))


def test_core_has_no_old_name() -> None:
    """Nothing was released under ``deltacells.dataset``: no shim keeps it."""
    with pytest.raises(ModuleNotFoundError):
        import deltacells.dataset  # noqa: F401
