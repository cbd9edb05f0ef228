"""numba's kernels load on a background thread; reads before that run their numpy versions, large ones wait.

Each case runs in a fresh interpreter (this one has the kernels loaded), whose loading thread is held back
or slowed by patching ``deltacells._kernel_loading._load``, so that what happens before the kernels are loaded
is not a matter of timing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import deltacells
from deltacells.datasets import synthetic_counts

#: Opens the dataset at sys.argv[1] with its loading thread held until ``release`` is set; ``expected`` is
#: the matrix (scipy .npz at sys.argv[2]).
PRELUDE = """
import sys, threading
import numpy as np
from scipy import sparse
import deltacells
from deltacells import _kernel_loading

release = threading.Event()
load = _kernel_loading._load
_kernel_loading._load = lambda: (release.wait(120), load())
expected = sparse.load_npz(sys.argv[2])
dataset = deltacells.open_dataset(sys.argv[1]).with_gene_order("original")

def same(rows, got):
    assert (got != expected[rows]).nnz == 0 and got.has_sorted_indices, rows
    got.check_format(full_check=True)
"""


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from scipy import sparse

    tmp = tmp_path_factory.mktemp("kernel-loading")
    adata = synthetic_counts(3000, 400, seed=1)
    deltacells.write_deltacells(adata, tmp / "ds", progress=False, tile_size=512)
    sparse.save_npz(tmp / "expected.npz", sparse.csr_matrix(adata.X).astype(np.float32))
    return tmp / "ds", tmp / "expected.npz"


def run(code: str, written: tuple[Path, Path], **env: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PRELUDE + code, *map(str, written)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_reads_before_the_kernels_are_loaded_run_numpys_versions(written) -> None:
    code = """
for rows in ([5], [2999, 0, 1700, 5], slice(10, 40), slice(None, None, 97)):
    same(rows, dataset.read_rows(rows))
same([7, 3, 600], dataset.read_rows_uncached([7, 3, 600]))
assert "deltacells.codec._kernels" not in sys.modules  # nothing compiled was asked for
assert not _kernel_loading._loaded.is_set()
release.set()
_kernel_loading.load_compiled_kernels()
for rows in ([5], [2999, 0, 1700, 5], slice(None, None, 97)):
    same(rows, deltacells.open_dataset(sys.argv[1]).with_gene_order("original").read_rows(rows))
"""
    run(code, written)


def test_a_large_read_waits_for_the_kernels(written) -> None:
    code = """
_kernel_loading.WAIT_MIN_NNZ = 1000  # a read of 100 cells is large here
threading.Timer(0.5, release.set).start()
same(slice(0, 100), dataset.read_rows(slice(0, 100)))
assert _kernel_loading._loaded.is_set()  # waited for them
assert "deltacells.codec._kernels" in sys.modules
"""
    run(code, written)


def test_a_large_read_does_not_wait_for_kernels_being_compiled(written) -> None:
    code = """
_kernel_loading.WAIT_MIN_NNZ = 1000
_kernel_loading._compiling = True  # what the (held) loading thread says once numba's cache misses a kernel
same(slice(0, 3000), dataset.read_rows(slice(0, 3000)))  # numpy's versions, while the kernels compile
assert not _kernel_loading._loaded.is_set()
release.set()
"""
    run(code, written)


def test_malformed_input_waits_for_the_kernels_to_say_where(tmp_path, written) -> None:
    from deltacells.codec import encode_tile

    blob = bytearray(encode_tile(np.array([0, 3]), np.array([1, 4, 6]), np.array([2, 3, 4]), 8, level=1))
    (tmp_path / "tile.bin").write_bytes(bytes(blob))
    code = f"""
from deltacells.codec import _vectorised, check_tile_bytes
tile = check_tile_bytes(open({str(tmp_path / "tile.bin")!r}, "rb").read())
out = (np.empty(3, np.int32), np.empty(3, np.float32))
gaps = np.array([1, 3, 0, 0, 0, 0], np.uint8)  # a zero gap inside the cell
vals = np.array([2, 3, 4, 0, 0, 0], np.uint8)
threading.Timer(0.3, release.set).start()
code, position = _vectorised.decode_chunk(gaps, vals, tile.indptr, 0, 1, 0, 8, *out, None)
assert (code, position) != (0, 0) and position == 2, (code, position)
assert _kernel_loading._loaded.is_set()
"""
    run(code, written)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_fork_waits_for_the_loading_and_the_child_has_the_kernels(written) -> None:
    code = """
import os, time
threading.Timer(0.5, release.set).start()
assert not _kernel_loading._loaded.is_set()
pid = os.fork()  # waits for the loading thread (held 0.5 s, then loading)
if pid == 0:
    ok = _kernel_loading._loaded.is_set() and _kernel_loading.compiled_kernels()
    dataset.read_rows([1, 2])
    os._exit(0 if ok and _kernel_loading._thread is None else 3)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0
"""
    run(code, written)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_fork_while_loading_does_not_wait_for_filelock_forever(written, tmp_path) -> None:
    """filelock imported after deltacells (by a first write), then a fork while the kernels load: no deadlock.

    filelock 4 closes its locks to other threads from its own before-fork hook; had it run before the hook that
    waits for the loading thread (whose every kernel takes the cache's file lock), the fork would hang for ever,
    as a notebook's ``!command`` after a first read did.
    """
    code = f"""
import os, sys
import deltacells
from deltacells import _kernel_loading
from deltacells.datasets import synthetic_counts

assert "filelock" not in sys.modules  # imported by the write below, after deltacells
synthetic_counts(300, 50, seed=0).write_deltacells({str(tmp_path / "small")!r}, progress=False)
deltacells.open_dataset(sys.argv[1])  # the loading starts
assert _kernel_loading._thread is not None and not _kernel_loading._loaded.is_set()
pid = os.fork()
if pid == 0:
    os._exit(0 if _kernel_loading._loaded.is_set() else 3)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0
"""
    done = subprocess.run(
        [sys.executable, "-c", code, *map(str, written)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("compiling", [True, False])
def test_a_process_finishes_compiling_before_it_exits_but_not_loading(tmp_path, compiling: bool) -> None:
    """A cold cache is filled by the first process however short it is; a warm one does not delay an exit."""
    import time

    marker = tmp_path / "finished"
    code = f"""
import time
from deltacells import _kernel_loading

def slow_load():
    _kernel_loading._compiling = {compiling}
    time.sleep(2)
    open({str(marker)!r}, "w").close()

_kernel_loading._load = slow_load
_kernel_loading.prepare_kernels()
"""
    began = time.monotonic()
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    spent = time.monotonic() - began
    assert marker.exists() == compiling
    assert (spent >= 2) == compiling


def test_a_failed_warm_up_leaves_the_kernels_to_their_first_call(written) -> None:
    """An error on the loading thread is not raised there: reads then call the compiled kernels themselves."""
    code = """
from deltacells.codec import _warm_up
def broken():
    raise RuntimeError("a warm-up that fails")
_warm_up.warm_up = broken
release.set()
_kernel_loading.load_compiled_kernels()  # returns: the thread said the kernels are loaded, and did not die loudly
assert _kernel_loading.compiled_kernels()
same([5, 2999], dataset.read_rows([5, 2999]))  # compiled kernels, loaded by this call
"""
    run(code, written)


#: Run in a fresh interpreter on the numba cache of $NUMBA_CACHE_DIR: starts the loading, asks to wait as a read
#: of a million nonzeros does, then prints whether the kernels were loaded then and whether the loading compiled.
WAIT_AS_A_LARGE_READ = """
from deltacells import _kernel_loading
_kernel_loading.prepare_kernels(_kernel_loading.WAIT_MIN_NNZ)
print(_kernel_loading._loaded.is_set(), _kernel_loading._compiling, len(_kernel_loading.kernels_to_compile()))
"""


@pytest.mark.slow
@pytest.mark.skipif(bool(os.environ.get("NUMBA_DISABLE_JIT")), reason="NUMBA_DISABLE_JIT: nothing is compiled")
def test_a_large_read_waits_unless_the_kernels_it_needs_are_compiled(tmp_path) -> None:
    """A cold cache: the loading compiles, and large reads go on meanwhile; a cache holding what the warm-ups load
    but not the kernels of the format's escapes (compiled when first used): they wait, and the kernels are loaded.
    """
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}

    def run_once() -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", WAIT_AS_A_LARGE_READ], env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.split()

    loaded, compiling, _ = run_once()  # the process then finishes compiling before it exits
    assert (loaded, compiling) == ("False", "True")
    loaded, compiling, missing = run_once()
    assert int(missing) > 0  # kernels the warm-ups never call are still not in the cache...
    assert (loaded, compiling) == ("True", "False")  # ...and yet nothing is compiled: the read waited


#: Public decoding alone, in a fresh interpreter that opens no dataset (argv[1]: a tile), its loading thread held:
#: each call starts the loading; small tiles decode with numpy's versions meanwhile, large ones wait; once the
#: kernels are loaded, numpy's versions are no longer called.
PUBLIC_DECODING = """
import sys, threading
import numpy as np
from deltacells import _kernel_loading
from deltacells.codec import _vectorised, decode_chunks, parse_tile

release = threading.Event()
load = _kernel_loading._load
_kernel_loading._load = lambda: (release.wait(120), load())
calls = []
numpy_decode = _vectorised.decode_chunk
_vectorised.decode_chunk = lambda *args: (calls.append(1), numpy_decode(*args))[1]
blob = open(sys.argv[1], "rb").read()

import deltacells
expected = None
for decode in ("decode_tile", "decode_chunks"):
    run = (lambda: deltacells.decode_tile(blob)) if decode == "decode_tile" else (
        lambda: decode_chunks(parse_tile(blob), [(0, blob)], range(parse_tile(blob).n_chunks)))
    tile = run()
    assert _kernel_loading._thread is not None and not _kernel_loading._loaded.is_set(), decode  # started
    assert calls, decode  # numpy's versions, while the kernels load
    expected = tile.indices.copy() if expected is None else expected
    np.testing.assert_array_equal(tile.indices, expected)
    calls.clear()

_kernel_loading.WAIT_MIN_NNZ = 1  # every tile is large now: it waits for the kernels
threading.Timer(0.3, release.set).start()
prefix = parse_tile(blob)  # (its chunk table checked by numpy's version: not a decoding)
calls.clear()
tile = decode_chunks(prefix, [(0, blob)], range(prefix.n_chunks))
assert _kernel_loading._loaded.is_set() and not calls
tile = deltacells.decode_tile(blob)
assert not calls  # the compiled kernels, now that they are loaded
np.testing.assert_array_equal(tile.indices, expected)
"""


def test_public_decoding_starts_the_loading_and_uses_the_kernels_once_loaded(written) -> None:
    path, _ = written
    tile = next((path / "tiles").iterdir())
    done = subprocess.run(
        [sys.executable, "-c", PUBLIC_DECODING, str(tile)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
