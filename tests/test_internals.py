"""The internals of other libraries that deltacells uses (``deltacells._internals.INTERNALS``), checked against the
installed versions.

One test per internal: it fails, naming the internal, the installed version of its library and the versions
deltacells is tested on, when the internal has moved, been renamed, changed its signature or stopped doing what
deltacells relies on. An internal of a library that is not installed is skipped (fast-array-utils comes with
scanpy 1.12 only). Then the fence: no module of the package reaches these libraries' internals other than
through ``deltacells._internals``, and every method that overrides one is marked with its entry.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import pkgutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import sparse

import deltacells
from deltacells import _internals
from deltacells._internals import INTERNALS, installed_version, reach
from deltacells.errors import DeltaCellsError, InternalChangedError

PACKAGE_DIR = Path(deltacells.__file__).parent

#: The check of each internal, by name: a function whose arguments are fixtures.
CHECKS: dict[str, Callable[..., None]] = {}


def check(name: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    def register(function: Callable[..., None]) -> Callable[..., None]:
        assert name in INTERNALS, f"{name} is checked but not listed in deltacells._internals.INTERNALS"
        CHECKS[name] = function
        return function

    return register


def parameters(function: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(function).parameters)


def keyword_only(function: Callable[..., Any]) -> set[str]:
    return {
        name
        for name, parameter in inspect.signature(function).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    }


@pytest.fixture(scope="module")
def lazy(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A small dataset read lazily (which registers deltacells' hooks in anndata)."""
    from deltacells.datasets import synthetic_counts

    root = tmp_path_factory.mktemp("internals")
    deltacells.write_deltacells(synthetic_counts(30, 6, seed=1), root / "data", tile_size=8, progress=False)
    return deltacells.read_deltacells(root / "data", cache_dir=root / "cache", gene_order="original")


@pytest.mark.parametrize("name", list(INTERNALS))
def test_internal(name: str, request: pytest.FixtureRequest) -> None:
    entry = INTERNALS[name]
    version = installed_version(entry.distribution)
    if version == "not installed":
        pytest.skip(f"{entry.distribution} is not installed")
    function = CHECKS[name]
    try:
        function(**{argument: request.getfixturevalue(argument) for argument in parameters(function)})
    except (Exception, AssertionError) as exc:
        pytest.fail(
            f"{name} changed: {entry.distribution} {version} is installed, deltacells is tested on "
            f"{', '.join(entry.tested)} (used by {', '.join(entry.used_by)}; {entry.why}).\n"
            f"{type(exc).__name__}: {exc}"
        )


def test_every_internal_has_a_check() -> None:
    assert set(CHECKS) == set(INTERNALS)


@pytest.mark.parametrize("name", list(INTERNALS))
def test_the_modules_said_to_use_an_internal_do(name: str) -> None:
    for module in INTERNALS[name].used_by:
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin is not None, f"{name}: {module} does not exist"
        assert "_internals" in Path(spec.origin).read_text(encoding="utf-8"), f"{name}: {module} does not use it"


def test_an_internal_that_moved_is_named_with_the_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    import anndata.utils

    monkeypatch.delattr(anndata.utils, "asarray")
    with pytest.raises(InternalChangedError, match=r"anndata\.utils\.asarray .*tested on 0\.12") as info:
        reach("anndata.utils.asarray")
    assert f"anndata {installed_version('anndata')}" in str(info.value)
    assert isinstance(info.value, DeltaCellsError) and isinstance(info.value, ImportError)


def test_reaching_an_unlisted_name_fails() -> None:
    with pytest.raises(KeyError, match="not in deltacells' list"):
        reach("anndata._core.anndata.AnnData")
    with pytest.raises(KeyError, match="not in deltacells' list"):
        _internals.overrides("pandas.DataFrame._mgr")


# ---------------------------------------------------------------------- anndata


@check("anndata._io.specs.registry._REGISTRY")
def _anndata_registry(tmp_path: Path) -> None:
    import anndata as ad
    import dask.array as da
    import h5py

    registry = reach("anndata._io.specs.registry._REGISTRY")
    assert parameters(registry.register_write)[:3] == ["dest_type", "src_type", "spec"]
    calls = []

    class Marker:
        """A type only this check writes."""

    class MarkerBlock(sparse.csr_matrix):
        """The blocks of a dask array only this check writes."""

    def writer(f: Any, k: str, elem: Any, *, _writer: Any, dataset_kwargs: Any) -> None:
        calls.append(type(elem))
        _writer.write_elem(f, k, np.arange(3), dataset_kwargs=dataset_kwargs)

    _internals.register_anndata_writer([h5py.Group], Marker, ("array", "0.2.0"), writer)
    _internals.register_anndata_writer([h5py.Group], (da.Array, MarkerBlock), ("array", "0.2.0"), writer)
    blocks = da.zeros((4, 4), chunks=2).map_blocks(MarkerBlock, meta=MarkerBlock((0, 0)))
    with h5py.File(tmp_path / "written.h5", "w") as f:
        ad.io.write_elem(f, "marker", Marker())
        ad.io.write_elem(f, "dask", blocks)
        assert list(ad.io.read_elem(f["marker"])) == [0, 1, 2]
    assert calls == [Marker, da.Array]


@check("anndata._core.file_backing.to_memory")
def _anndata_to_memory(lazy: Any) -> None:
    from deltacells.io import TiledCSRDataset

    to_memory = reach("anndata._core.file_backing.to_memory")
    assert parameters(to_memory) == ["x", "copy"] and "copy" in keyword_only(to_memory)
    assert TiledCSRDataset in to_memory.registry
    assert sparse.issparse(lazy.to_memory().X)  # AnnData.to_memory() loads X through it


@check("anndata._core.views.DaskArrayView")
def _anndata_dask_view() -> None:
    import anndata as ad
    import dask.array as da

    view_class = _internals.anndata_dask_view_class()
    assert isinstance(view_class, type) and issubclass(view_class, da.Array)
    assert type(ad.AnnData(X=da.zeros((4, 3), chunks=2))[:2].X) is view_class


@check("anndata.utils.asarray")
def _anndata_asarray(lazy: Any) -> None:
    asarray = reach("anndata.utils.asarray")
    assert parameters(asarray) == ["x"] and hasattr(asarray, "register")
    np.testing.assert_array_equal(asarray(lazy.X), lazy.X.to_memory().toarray())


@check("anndata.AnnData._remove_unused_categories")
def _anndata_remove_unused_categories(lazy: Any) -> None:
    import functools

    import anndata as ad

    from deltacells.io._lazy_obs import LazyObs

    method = ad.AnnData.__dict__["_remove_unused_categories"]
    assert isinstance(method, functools.singledispatchmethod)
    assert parameters(ad.AnnData._remove_unused_categories) == ["df_full", "df_sub", "uns"]
    assert LazyObs in method.dispatcher.registry
    assert "_remove_unused_categories(" in inspect.getsource(ad.AnnData._init_as_view)  # what views call


@check("anndata.AnnData._adata_ref")
def _anndata_view_parts() -> None:
    import anndata as ad

    adata = ad.AnnData(np.zeros((4, 3)))
    ref, rows, cols = _internals.anndata_view_parts(adata[1:3, [0, 2]])
    assert ref is adata
    np.testing.assert_array_equal(np.arange(4)[rows], [1, 2])
    np.testing.assert_array_equal(np.arange(3)[np.asarray(cols)], [0, 2])


@check("anndata.experimental.backed.Dataset2D._items")
def _anndata_dataset2d_items() -> None:
    import anndata._core.merge
    import anndata._core.xarray
    from anndata.experimental.backed import Dataset2D

    from deltacells.io._lazy_obs import LazyObs

    assert parameters(Dataset2D._items) == ["self"]
    callers = [module.__name__ for module in (anndata._core.merge, anndata._core.xarray)]
    assert any("._items()" in inspect.getsource(importlib.import_module(name)) for name in callers), callers
    assert LazyObs._items.__deltacells_internal__ == "anndata.experimental.backed.Dataset2D._items"


@check("anndata._core.merge.try_unifying_dtype")
def _anndata_try_unifying_dtype() -> None:
    import anndata._core.merge

    unify = _internals.anndata_unified_dtype
    assert parameters(anndata._core.merge.try_unifying_dtype) == ["dtypes", "has_missing"]
    assert "has_missing" in keyword_only(anndata._core.merge.try_unifying_dtype)
    two = [pd.CategoricalDtype(["GW16_10", "GW16_2"]), pd.CategoricalDtype(["GW16_1"])]
    assert list(unify(two, has_missing=False).categories) == ["GW16_1", "GW16_2", "GW16_10"]  # natural order
    ordered = [pd.CategoricalDtype(["a", "b"], ordered=True), pd.CategoricalDtype(["a"], ordered=True)]
    assert unify(ordered, has_missing=False) is object
    assert unify([np.dtype(bool)], has_missing=True) == pd.BooleanDtype()
    assert unify([np.dtype(bool)], has_missing=False) is None  # left to pandas
    assert unify([np.dtype(np.int64), np.dtype(np.float32)], has_missing=True) is None


@check("anndata.tests.helpers.assert_equal")
def _anndata_assert_equal(lazy: Any) -> None:
    from deltacells.io import TiledCSRDataset

    assert_equal = _internals.anndata_assert_equal()
    assert parameters(assert_equal) == ["a", "b", "exact", "elem_name"]
    assert keyword_only(assert_equal) == {"exact", "elem_name"}
    assert TiledCSRDataset in assert_equal.registry  # registered as the helpers were imported
    assert_equal(lazy.X, lazy.X.to_memory())


@check("anndata.io.write_h5ad: as_dense=")
def _anndata_write_h5ad(tmp_path: Path, lazy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import anndata as ad
    import anndata.io
    import h5py

    memory = ad.AnnData(sparse.random(5, 4, density=0.5, format="csr"))
    anndata.io.write_h5ad(tmp_path / "dense.h5ad", memory, as_dense=("X",))  # the keyword, in the function
    with h5py.File(tmp_path / "dense.h5ad") as f:
        assert f["X"].attrs["encoding-type"] == "array"
    calls = []
    noting = anndata.io.write_h5ad
    monkeypatch.setattr(anndata.io, "write_h5ad", lambda *args, **kwargs: calls.append(kwargs.get("as_dense")))
    memory.write_h5ad(tmp_path / "through.h5ad", as_dense=("X",))
    memory.write(tmp_path / "through.h5ad", as_dense="X")
    assert calls == [("X",), "X"]  # AnnData.write_h5ad and .write call anndata.io.write_h5ad, looked up then
    monkeypatch.setattr(anndata.io, "write_h5ad", noting)
    lazy.write_h5ad(tmp_path / "lazy.h5ad", as_dense="X")
    with h5py.File(tmp_path / "lazy.h5ad") as f:
        assert f["X"].attrs["encoding-type"] == "array"


@check("anndata.AnnData.__sizeof__: with_disk=")
def _anndata_sizeof(lazy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import anndata as ad

    from deltacells.io import TiledCSRDataset

    assert {"with_disk", "show_stratified"} <= keyword_only(ad.AnnData.__sizeof__)
    sizes = []

    def sizeof(self: Any) -> int:
        sizes.append(_internals.sizeof_with_disk())
        return 10**9

    monkeypatch.setattr(TiledCSRDataset, "__sizeof__", sizeof)
    assert lazy.__sizeof__() >= 10**9 and lazy.__sizeof__(with_disk=True) >= 10**9  # sized by its __sizeof__
    assert sizes == [False, True]


# ---------------------------------------------------------------------- numba


def _add_one(x: int) -> int:
    return x + 1


class RecordingCache:
    """Stands in for numba's cache object of a dispatcher, recording what numba calls."""

    cache_path = ""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        self.calls.append(("load", sig))

    def save_overload(self, sig: Any, data: Any) -> None:
        self.calls.append(("save", data))

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None  # flush, enable, ...


def _fresh_dispatcher(**options: Any) -> Any:
    import numba

    return numba.njit(**options)(_add_one)


def _needs_jit() -> None:
    import numba

    if numba.config.DISABLE_JIT:
        pytest.skip("NUMBA_DISABLE_JIT: no dispatcher, nothing cached")


@check("numba.core.dispatcher.Dispatcher._cache")
def _numba_dispatcher_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import numba

    _needs_jit()
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path))
    cache = _internals.numba_function_cache(_fresh_dispatcher(cache=True))
    assert cache is not None and hasattr(cache, "load_overload") and hasattr(cache, "save_overload")
    dispatcher = _fresh_dispatcher()
    recording = RecordingCache()
    _internals.set_numba_function_cache(dispatcher, recording)
    assert dispatcher(1) == 2
    assert [what for what, _ in recording.calls] == ["load", "save"]  # numba loads and saves through it


@check("numba.core.dispatcher.Dispatcher.compile")
def _numba_dispatcher_compile() -> None:
    from numba.core.dispatcher import Dispatcher

    _needs_jit()
    assert parameters(Dispatcher.compile) == ["self", "sig"]
    dispatcher = _fresh_dispatcher()
    asked = []

    def wrap(compile_signature: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def compile_recorded(sig: Any) -> Any:
            asked.append(sig)
            return compile_signature(sig)

        return compile_recorded

    _internals.wrap_numba_compile(dispatcher, wrap)
    assert dispatcher(1) == 2
    assert len(asked) == 1  # numba's dispatch compiles each new signature through self.compile


@check("numba.core.caching.Cache")
def _numba_cache_protocol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import numba
    from numba.core import types
    from numba.core.caching import Cache

    from deltacells._jit import GuardedCache

    _needs_jit()
    assert parameters(Cache.load_overload) == ["self", "sig", "target_context"]
    assert parameters(Cache.save_overload) == ["self", "sig", "data"]
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path))
    cache = _internals.numba_function_cache(_fresh_dispatcher(cache=True))
    assert _internals.numba_cache_path(cache) == str(tmp_path) or str(tmp_path) in _internals.numba_cache_path(cache)
    dispatcher = _fresh_dispatcher()
    recording = RecordingCache()
    _internals.set_numba_function_cache(dispatcher, recording)
    dispatcher(1)
    (_, saved) = recording.calls[-1]
    assert _internals.numba_loaded_signature_args(saved) == (types.int64,)
    for method in ("load_overload", "save_overload"):
        assert getattr(GuardedCache, method).__deltacells_internal__ == "numba.core.caching.Cache"


@check("numba.core.caching.IndexDataCacheFile._index_path")
def _numba_index_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import numba

    _needs_jit()
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path))
    cache = _internals.numba_function_cache(_fresh_dispatcher(cache=True))
    index = Path(_internals.numba_cache_index_path(cache))
    assert index.suffix == ".nbi" and str(index).startswith(str(_internals.numba_cache_path(cache)))
    dispatcher = _fresh_dispatcher(cache=True)
    dispatcher(1)  # compiled and saved: the index is written where it says
    assert Path(_internals.numba_cache_index_path(_internals.numba_function_cache(dispatcher))).is_file()


@check("numba.core.sigutils.normalize_signature")
def _numba_normalize_signature() -> None:
    from numba.core import types

    assert _internals.numba_signature_args((types.int64, types.float32)) == (types.int64, types.float32)
    assert _internals.numba_signature_args("(int64, float32)") == (types.int64, types.float32)


# ---------------------------------------------------------------------- scanpy, fast-array-utils


def _singledispatch(name: str, first_parameter: str | None = None) -> None:
    from deltacells.io import TiledCSRDataset

    function = reach(name)
    assert callable(getattr(function, "register", None)) and TiledCSRDataset in function.registry
    if first_parameter is not None:
        assert parameters(function)[0] == first_parameter
    library = name.split(".")[0]
    assert function in _internals.singledispatch_on_x(library)


@check("scanpy.pp.scale")
def _scanpy_scale(lazy: Any) -> None:
    import scanpy  # noqa: F401 - registers the lazy X

    _singledispatch("scanpy.pp.scale", "data")


@check("scanpy._utils.check_nonnegative_integers")
def _scanpy_check_nonnegative_integers(lazy: Any) -> None:
    import scanpy  # noqa: F401

    _singledispatch("scanpy._utils.check_nonnegative_integers", "x")


@check("fast_array_utils.stats._generic_ops.generic_op")
def _fast_array_utils_generic_op(lazy: Any) -> None:
    import fast_array_utils.stats  # noqa: F401

    _singledispatch("fast_array_utils.stats._generic_ops.generic_op", "x")


@check("fast_array_utils.stats._is_constant.is_constant_")
def _fast_array_utils_is_constant(lazy: Any) -> None:
    import fast_array_utils.stats  # noqa: F401

    _singledispatch("fast_array_utils.stats._is_constant.is_constant_", "a")


@check("fast_array_utils.stats._power._power")
def _fast_array_utils_power(lazy: Any) -> None:
    import fast_array_utils.stats  # noqa: F401

    _singledispatch("fast_array_utils.stats._power._power", "x")


# ---------------------------------------------------------------------- xarray


def _backend_column() -> Any:
    from xarray.backends import BackendArray

    class Column(BackendArray):  # type: ignore[misc]
        shape = (5,)
        dtype = np.dtype(np.int64)

        def __getitem__(self, key: Any) -> Any:
            return _internals.outer_indexing_adapter(key, self.shape, lambda k: np.arange(5)[k])

    return Column()


@check("xarray.core.indexing.LazilyIndexedArray")
def _xarray_lazily_indexed() -> None:
    import xarray as xr

    variable = xr.Variable(("cell",), _internals.lazily_indexed_array(_backend_column()))
    np.testing.assert_array_equal(variable[[1, 3]].values, [1, 3])
    np.testing.assert_array_equal(variable[1:4].values, [1, 2, 3])


@check("xarray.core.indexing.explicit_indexing_adapter")
def _xarray_indexing_adapter() -> None:
    adapter = reach("xarray.core.indexing.explicit_indexing_adapter")
    assert parameters(adapter) == ["key", "shape", "indexing_support", "raw_indexing_method"]
    _xarray_lazily_indexed()


@check("xarray.core.indexing.IndexingSupport")
def _xarray_indexing_support() -> None:
    assert reach("xarray.core.indexing.IndexingSupport").OUTER is not None
    _xarray_lazily_indexed()


@check("xarray.core.extension_array.PandasExtensionArray")
def _xarray_pandas_extension_array() -> None:
    import xarray as xr

    categories = pd.Categorical(["a", "b", "a"])
    wrapped = _internals.pandas_extension_array(categories)
    assert _internals.is_pandas_extension_array(wrapped) and wrapped.array is categories
    assert isinstance(xr.Variable(("cell",), wrapped).dtype, pd.CategoricalDtype)


@check("xarray.indexes.PandasIndex._replace")
def _xarray_pandas_index_replace() -> None:
    import xarray as xr

    index = xr.indexes.PandasIndex(pd.RangeIndex(5, name="cell"), "cell")
    replaced = _internals.pandas_index_replace(index, pd.Index([1, 3], dtype=np.int64, name="cell"))
    assert isinstance(replaced, xr.indexes.PandasIndex) and replaced.dim == "cell"
    assert list(replaced.index) == [1, 3]


# ---------------------------------------------------------------------- dask


@check("dask.array.dispatch.concatenate_lookup")
def _dask_concatenate_lookup() -> None:
    import dask.array as da

    from deltacells.io._dask_blocks import CSRMatrixBlock, register_with_dask

    lookup = reach("dask.array.dispatch.concatenate_lookup")
    register_with_dask()
    assert callable(lookup.register) and callable(lookup.dispatch(CSRMatrixBlock))
    block = CSRMatrixBlock(np.eye(2))
    stacked = da.concatenate([da.from_array(block, asarray=False)] * 2).compute(scheduler="sync")
    assert isinstance(stacked, CSRMatrixBlock) and stacked.shape == (4, 2)


@check("dask.base.get_scheduler")
def _dask_get_scheduler() -> None:
    distributed = pytest.importorskip("distributed")
    import dask.array as da
    from dask.threaded import get as threaded_get

    assert "collections" in parameters(reach("dask.base.get_scheduler"))
    assert _internals.dask_scheduler([da.zeros(2)]) is threaded_get and _internals.dask_distributed_client() is None
    with (
        distributed.LocalCluster(n_workers=1, processes=False, threads_per_worker=1, dashboard_address=":0") as cluster,
        distributed.Client(cluster) as client,
    ):
        assert _internals.dask_distributed_client() is client
    assert _internals.dask_distributed_client() is None


# ---------------------------------------------------------------------- fsspec, s3fs


def _async_filesystem() -> Any:
    from fsspec.implementations.http import HTTPFileSystem

    return HTTPFileSystem(skip_instance_cache=True)


@check("fsspec.asyn.AsyncFileSystem._cat_file")
def _fsspec_cat_file() -> None:
    from fsspec.asyn import AsyncFileSystem

    for owner in (AsyncFileSystem, type(_async_filesystem())):  # the path is passed by position
        assert inspect.iscoroutinefunction(owner._cat_file)
        assert parameters(owner._cat_file)[2:4] == ["start", "end"]
    assert _internals.fsspec_is_async(_async_filesystem())


@check("fsspec.asyn.AsyncFileSystem._size")
def _fsspec_size() -> None:
    from fsspec.asyn import AsyncFileSystem

    assert inspect.iscoroutinefunction(AsyncFileSystem._size)
    assert parameters(AsyncFileSystem._size)[:2] == ["self", "path"]


@check("s3fs.S3FileSystem._cat_file_concurrent")
def _s3fs_cat_file_concurrent() -> None:
    from s3fs import S3FileSystem

    filesystem = S3FileSystem(anon=True, skip_instance_cache=True)
    assert _internals.s3fs_reads_in_one_request(filesystem) and _internals.fsspec_is_async(filesystem)
    assert "max_concurrency" in parameters(S3FileSystem._cat_file)
    assert inspect.iscoroutinefunction(S3FileSystem._size)


# ---------------------------------------------------------------------- zarr


@check("zarr.core.sync.sync")
def _zarr_sync() -> None:
    import zarr
    import zarr.storage

    sync = reach("zarr.core.sync.sync")
    assert parameters(sync)[:2] == ["coro", "loop"]
    seen: list[str] = []

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def counting(coro: Any, loop: Any = None, **kwargs: Any) -> Any:
            seen.append(getattr(coro, "__qualname__", type(coro).__name__))
            return original(coro, loop=loop, **kwargs)

        return counting

    # zarr's synchronous API hands its coroutines to the function of zarr.core.sync, found where zarr holds it
    current = sync  # zarr's own, or deltacells' around it (once the extras were written in this process)
    assert _internals.replace_zarr_sync(make)
    try:
        group = zarr.open_group(zarr.storage.MemoryStore(), mode="w", zarr_format=2)
        group.create_array("a", shape=(3,), dtype="i4")[:] = [1, 2, 3]
        assert seen, "zarr's synchronous calls no longer go through zarr.core.sync.sync"
    finally:
        assert _internals.replace_zarr_sync(lambda _: current)  # as it was


# ---------------------------------------------------------------------- the interpreter (no internal used)


def test_warnings_are_attributed_outside_the_package() -> None:
    """``errors.warn`` finds the first caller outside the package with public APIs (no ``sys._getframe``)."""
    from deltacells.errors import DeltaCellsWarning, warn

    with pytest.warns(DeltaCellsWarning) as caught:
        warn("from deltacells")
    assert caught[0].filename == __file__


# ---------------------------------------------------------------------- the fence

#: Modules of other libraries that are theirs alone (and one name of a module otherwise public): importing from
#: them is reaching an internal.
INTERNAL_MODULES = (
    "anndata._",
    "anndata.compat",
    "anndata.tests",
    "anndata.utils",
    "dask.array.dispatch",
    "dask.base.get_scheduler",
    "fast_array_utils.stats._",
    "numba.core",
    "scanpy._",
    "xarray.core",
    "zarr.core",
)

#: Private names of other libraries that deltacells used or uses: reading them is reaching an internal.
PRIVATE_NAMES = frozenset(
    {
        "_REGISTRY",
        "_adata_ref",
        "_cache_file",
        "_cat_file",
        "_cat_file_concurrent",
        "_ds",
        "_getframe",  # CPython's (inspect.currentframe is the public way)
        "_has_X",
        "_index_path",
        "_oidx",
        "_remove_unused_categories",
        "_replace",
        "_size",
        "_strip_protocol",
        "_to_backed",
        "_vidx",
    }
)


def _internal_module(name: str) -> bool:
    """Whether module ``name`` is (in) one of :data:`INTERNAL_MODULES` (``x._`` meaning any private module of x)."""
    return any(
        name.startswith(prefix) if prefix.endswith("_") else name == prefix or name.startswith(f"{prefix}.")
        for prefix in INTERNAL_MODULES
    )


#: The libraries whose internals deltacells uses (a dotted name in a string, reached with getattr or importlib).
LIBRARIES = ("anndata", "dask", "fast_array_utils", "fsspec", "numba", "s3fs", "scanpy", "xarray", "zarr")


def _names_an_internal(text: str) -> bool:
    """Whether a string names a private attribute above, or a private name of another library (``lib.x._y``)."""
    if text in PRIVATE_NAMES:
        return True
    parts = text.split(".")
    if len(parts) < 2 or not all(part.isidentifier() for part in parts):
        return False
    # a library's private name, or one relative to a library's module ("_utils.check_nonnegative_integers")
    return (parts[0] in LIBRARIES and any(part.startswith("_") for part in parts[1:])) or parts[0].startswith("_")


def _module_files() -> list[Path]:
    return [path for path in sorted(PACKAGE_DIR.rglob("*.py")) if path.name != "_internals.py"]


def test_internals_are_reached_only_through_the_internals_module() -> None:
    problems = []
    for path in _module_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        where = path.relative_to(PACKAGE_DIR.parent).as_posix()
        marks = {  # the names in @_internals.overrides("..."): listed there
            id(argument)
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "overrides"
            for argument in node.args
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                names = []
            problems.extend(f"{where}:{node.lineno}: imports {name}" for name in names if _internal_module(name))
            if isinstance(node, ast.Attribute) and node.attr in PRIVATE_NAMES:
                problems.append(f"{where}:{node.lineno}: reads .{node.attr}")
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in marks
                and (_names_an_internal(node.value))
            ):
                problems.append(f"{where}:{node.lineno}: names {node.value!r}")
            if (  # numba's; deltacells' own are self._cache
                isinstance(node, ast.Attribute)
                and node.attr == "_cache"
                and not (isinstance(node.value, ast.Name) and node.value.id == "self")
            ):
                problems.append(f"{where}:{node.lineno}: reads ._cache of another object")
    assert not problems, "reach these through deltacells._internals:\n" + "\n".join(problems)


def _package_modules() -> list[Any]:
    modules = []
    for info in pkgutil.walk_packages([str(PACKAGE_DIR)], prefix="deltacells."):
        try:
            modules.append(importlib.import_module(info.name))
        except ImportError:  # an optional dependency (torch) missing
            continue
    return modules


def test_overrides_of_other_libraries_private_methods_are_listed() -> None:
    """A class of the package that redefines a private method of a base class from another library marks it."""
    problems = []
    for module in _package_modules():
        for cls in vars(module).values():
            if not isinstance(cls, type) or cls.__module__ != module.__name__:
                continue
            foreign = [base for base in cls.__mro__[1:] if not base.__module__.startswith("deltacells")]
            for name, value in vars(cls).items():
                if not name.startswith("_") or name.startswith("__") or not inspect.isfunction(value):
                    continue
                if any(name in vars(base) for base in foreign) and not hasattr(value, "__deltacells_internal__"):
                    problems.append(f"{cls.__module__}.{cls.__qualname__}.{name}")
    assert not problems, "mark these with deltacells._internals.overrides(...):\n" + "\n".join(problems)


def test_import_deltacells_imports_no_other_library_for_its_internals() -> None:
    import subprocess

    code = (
        "import sys, deltacells, deltacells._internals\n"
        "loaded = sorted(m for m in ('anndata', 'numba', 'scanpy', 'xarray', 'dask') if m in sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
