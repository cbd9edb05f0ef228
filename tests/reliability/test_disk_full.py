"""A full disk, for real: a 1 MiB tmpfs. The write or append fails with DiskFullError, naming the dataset and
saying what it left; a new dataset leaves nothing, an append leaves the old version whole (issue 42, item 10).

Mounting needs root (and a kernel that lets the test mount): elsewhere the tests skip.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import deltacells
from deltacells.datasets import synthetic_counts
from deltacells.errors import DiskFullError


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of 1 MiB mounted under ``tmp_path`` (unmounted after)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_new_dataset_that_does_not_fit_leaves_nothing(small_disk: Path) -> None:
    adata = synthetic_counts(3000, 2000, seed=0)
    with pytest.raises(DiskFullError, match=r"disk/ds: no space left on the device; no dataset was written") as e:
        deltacells.write_deltacells(adata, small_disk / "ds", progress=False)
    assert e.value.errno == errno.ENOSPC and isinstance(e.value, OSError)
    assert list(small_disk.iterdir()) == []


def test_an_append_that_does_not_fit_leaves_the_dataset_unchanged(small_disk: Path) -> None:
    adata = synthetic_counts(3000, 2000, seed=0)
    path = small_disk / "ds"
    deltacells.write_deltacells(adata[:50].copy(), path, progress=False)
    before = (path / "manifest.json").read_bytes()
    with pytest.raises(DiskFullError, match=r"disk/ds: no space left on the device; the dataset is unchanged"):
        deltacells.write_deltacells(adata[50:].copy(), path, append=True, progress=False)
    assert (path / "manifest.json").read_bytes() == before
    assert not [p for p in path.iterdir() if p.name.startswith(".deltacells-append-")]
    got = deltacells.read_deltacells(path, cache_dir=small_disk.parent / "cache").to_memory()
    np.testing.assert_array_equal(got.X.toarray(), adata[:50].X.toarray())
