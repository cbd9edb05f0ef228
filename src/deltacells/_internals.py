"""Every internal of another library that deltacells touches: listed, version-stamped, and reached only from here.

An *internal* is what a library does not document as its public API:

- a name with a leading underscore (a module, class, function, attribute or method), whether imported, read,
  replaced, or overridden in a subclass (a hook the library calls);
- a name in a module the library keeps to itself (``numba.core``, ``xarray.core``, ``anndata.utils``,
  ``anndata.tests.helpers``, ``dask.array.dispatch``);
- a behaviour deltacells relies on that the library does not promise (``AnnData.write_h5ad`` going through
  ``anndata.io.write_h5ad``, ``AnnData.__sizeof__`` sizing an unknown matrix by its own ``__sizeof__``).

:data:`INTERNALS` lists each one: the library, the versions deltacells is tested on, the modules of deltacells
that use it and why no public API does. The functions below are the only way the rest of the package reaches
them. None of these libraries is imported by importing this module: each function imports what it needs when
it is called (``import deltacells`` imports neither anndata nor numba). A name that is no longer where it was
raises :class:`InternalChangedError`, which names the internal, the installed version and the versions tested.

``tests/test_internals.py`` has a test per entry that fails, naming the entry and the installed version, when
the internal moves, is renamed, changes its signature or stops behaving as relied on; and a test that no
module of the package reaches one of these libraries' internals other than through this module.

What is public is used as such: ``anndata.experimental.IOSpec`` (not ``anndata._io.specs.IOSpec``),
``dask.array.Array`` (not ``anndata.compat.DaskArray``), ``AnnData.X``/``isbacked`` (not ``AnnData._has_X``),
``Dataset2D.ds`` (not its ``_ds``), ``fsspec.core.strip_protocol`` (not ``AbstractFileSystem._strip_protocol``);
``deltacells.errors.warn`` finds its caller with ``warnings.warn(skip_file_prefixes=...)`` (Python 3.12+) or
``inspect.currentframe()`` (3.11), not ``sys._getframe``. That ``write_h5ad(as_dense=...)`` asked for a lazy X
dense is learnt from the public ``anndata.io.write_h5ad`` (wrapped to note its ``as_dense``), no longer from the
locals of the frames of anndata's ``_io/h5ad.py``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

from deltacells.errors import InternalChangedError

__all__ = [
    "INTERNALS",
    "Internal",
    "InternalChangedError",
    "installed_version",
    "overrides",
    "reach",
]

F = TypeVar("F", bound=Callable[..., Any])

# ---------------------------------------------------------------------- the list

#: The versions each library's internals are tested on (``tests/test_internals.py`` runs on both of the
#: project's environments: Python 3.11 with anndata 0.12 and scanpy 1.11, Python 3.13 with anndata 0.13 and
#: scanpy 1.12).
ANNDATA = ("0.12.19", "0.13.4")
NUMBA = ("0.68.1",)
SCANPY = ("1.11.5", "1.12.4")
FAST_ARRAY_UTILS = ("1.5.1",)  # scanpy 1.12 computes with it; scanpy 1.11 does not use it
XARRAY = ("2026.9.0",)
DASK = ("2026.8.0",)
FSSPEC = ("2026.9.0",)
S3FS = ("2026.9.0",)
ZARR = ("3.1.6", "3.4.2")


@dataclass(frozen=True)
class Internal:
    """One internal of another library that deltacells uses.

    Attributes
    ----------
    name
        What is used: a dotted path where there is one (``module.Class.attribute``), else a short description.
    distribution
        The library's distribution (its version is the one reported).
    tested
        The library's versions deltacells is tested on.
    used_by
        The modules of deltacells that use it (through this module).
    why
        What deltacells needs it for, and why no public API does it.
    """

    name: str
    distribution: str
    tested: tuple[str, ...]
    used_by: tuple[str, ...]
    why: str


_ENTRIES = (
    # --------------------------------------------------------------- anndata
    Internal(
        "anndata._io.specs.registry._REGISTRY",
        "anndata",
        ANNDATA,
        ("deltacells.io._anndata_hooks",),
        "write_h5ad/write_zarr/write_elem of a lazy X, and of a dask X of deltacells' CSR blocks, stream them "
        "with deltacells' writers: anndata looks writers up in this registry (register_write(dest_type, "
        "src_type, spec), a dask array by (its type, its _meta's type), writers called with _writer= and "
        "dataset_kwargs=) and has no public way to add one",
    ),
    Internal(
        "anndata._core.file_backing.to_memory",
        "anndata",
        ANNDATA,
        ("deltacells.io._anndata_hooks",),
        "AnnData.to_memory() loads each element through this singledispatch function; registered for the lazy X",
    ),
    Internal(
        "anndata._core.views.DaskArrayView",
        "anndata",
        ANNDATA,
        ("deltacells.io._anndata_hooks",),
        "the class of a view's dask X, for which the writer of a dask X of deltacells' blocks is registered too",
    ),
    Internal(
        "anndata.utils.asarray",
        "anndata",
        ANNDATA,
        ("deltacells.io._anndata_hooks",),
        "anndata densifies its backed datasets with this singledispatch function (anndata.utils is not in its "
        "documented API); registered so that it densifies the lazy X too",
    ),
    Internal(
        "anndata.AnnData._remove_unused_categories",
        "anndata",
        ANNDATA,
        ("deltacells.io._anndata_hooks",),
        "a view drops the categories its cells lack (and their colours in uns) through this singledispatchmethod; "
        "registered for the lazy obs",
    ),
    Internal(
        "anndata._core.merge.try_unifying_dtype",
        "anndata",
        ANNDATA,
        ("deltacells.obs._concat",),
        "anndata.concat's own rule for the dtype of an obs column joined from several frames (categories "
        "unioned and natural-sorted, ordered ones kept or made object, bool with missing cells made 'boolean'), "
        "which a collection's obs and an append follow without concatenating the frames: anndata.concat is its "
        "only public caller",
    ),
    Internal(
        "anndata.AnnData._adata_ref",
        "anndata",
        ANNDATA,
        ("deltacells.io._sources",),
        "a view's AnnData and its row and column indices (with _oidx and _vidx), so that writing or loading a "
        "view reads only its cells from the lazy X: anndata has no public accessor for them",
    ),
    Internal(
        "anndata.experimental.backed.Dataset2D._items",
        "anndata",
        ANNDATA,
        ("deltacells.io._lazy_obs._frame",),
        "overridden by LazyObs: anndata's concat and Dataset2D.reindex read a lazy frame's columns through it",
    ),
    Internal(
        "anndata.tests.helpers.assert_equal",
        "anndata",
        ANNDATA,
        ("deltacells.io._scverse",),
        "anndata's (and scanpy users') test helper dispatches on the type of its first argument and knows only "
        "anndata's own backed classes; registered for the lazy X once the helpers are imported",
    ),
    Internal(
        "anndata.io.write_h5ad: as_dense=",
        "anndata",
        ANNDATA,
        ("deltacells.io._scverse", "deltacells.io._anndata_hooks"),
        "write_h5ad handles as_dense itself for anndata's own sparse classes only and passes any other X to the "
        "writer registered for its type without saying it was asked dense; deltacells wraps the public "
        "anndata.io.write_h5ad to note as_dense, relying on AnnData.write_h5ad (and .write) calling "
        "anndata.io.write_h5ad, looked up when called",
    ),
    Internal(
        "anndata.AnnData.__sizeof__: with_disk=",
        "anndata",
        ANNDATA,
        ("deltacells.io._scverse", "deltacells.io._lazy"),
        "with_disk=True adds the on-disk size of anndata's own backed classes only (through their private "
        "_to_backed()) and sizes any other matrix by its __sizeof__(), which cannot see with_disk; deltacells "
        "wraps AnnData.__sizeof__ to tell the lazy X that it is asked with_disk",
    ),
    # --------------------------------------------------------------- numba
    Internal(
        "numba.core.dispatcher.Dispatcher._cache",
        "numba",
        NUMBA,
        ("deltacells._jit",),
        "the kernels' on-disk cache is guarded by a lock and checked on load (numba's cache can pair one "
        "signature with another's machine code): the dispatcher's cache object is replaced by a guarded one",
    ),
    Internal(
        "numba.core.dispatcher.Dispatcher.compile",
        "numba",
        NUMBA,
        ("deltacells._jit",),
        "replaced on each kernel by a version holding the cache directory's lock: numba's dispatcher calls "
        "self.compile(sig) for each signature, loading it from the cache or compiling and saving it",
    ),
    Internal(
        "numba.core.caching.Cache",
        "numba",
        NUMBA,
        ("deltacells._jit",),
        "the protocol of the cache object numba's dispatcher calls (cache_path, load_overload(sig, "
        "target_context), save_overload(sig, data), the loaded result's .signature.args), which the guarded "
        "cache implements around numba's own",
    ),
    Internal(
        "numba.core.caching.IndexDataCacheFile._index_path",
        "numba",
        NUMBA,
        ("deltacells._jit",),
        "the index file of a kernel's cache (through the cache's _cache_file): whether a kernel is in the cache "
        "(the demo says when kernels will be compiled)",
    ),
    Internal(
        "numba.core.sigutils.normalize_signature",
        "numba",
        NUMBA,
        ("deltacells._jit",),
        "the argument types of the signature asked for, compared with those of the code loaded from the cache",
    ),
    # --------------------------------------------------------------- scanpy, fast-array-utils
    Internal(
        "scanpy.pp.scale",
        "scanpy",
        SCANPY,
        ("deltacells.io._scverse",),
        "a singledispatch function (not documented as one): registered for the lazy X with an error that "
        "names .to_memory(), instead of scanpy's fallback that fails pointing nowhere",
    ),
    Internal(
        "scanpy._utils.check_nonnegative_integers",
        "scanpy",
        SCANPY,
        ("deltacells.io._scverse",),
        "a private singledispatch function scanpy's pipelines call on X: registered as scanpy.pp.scale is",
    ),
    Internal(
        "fast_array_utils.stats._generic_ops.generic_op",
        "fast-array-utils",
        FAST_ARRAY_UTILS,
        ("deltacells.io._scverse",),
        "the singledispatch function scanpy 1.12's sums and means go through: registered as scanpy.pp.scale is",
    ),
    Internal(
        "fast_array_utils.stats._is_constant.is_constant_",
        "fast-array-utils",
        FAST_ARRAY_UTILS,
        ("deltacells.io._scverse",),
        "the singledispatch function of scanpy 1.12's constant-column checks: registered as scanpy.pp.scale is",
    ),
    Internal(
        "fast_array_utils.stats._power._power",
        "fast-array-utils",
        FAST_ARRAY_UTILS,
        ("deltacells.io._scverse",),
        "the singledispatch function of scanpy 1.12's variances: registered as scanpy.pp.scale is",
    ),
    # --------------------------------------------------------------- xarray
    Internal(
        "xarray.core.indexing.LazilyIndexedArray",
        "xarray",
        XARRAY,
        ("deltacells.io._lazy_obs._backend", "deltacells.io._lazy_obs._frame"),
        "a lazy obs column is a lazily indexed xarray variable over a BackendArray (the wrapper xarray's guide "
        "to backends uses; xarray.core is not its public namespace)",
    ),
    Internal(
        "xarray.core.indexing.explicit_indexing_adapter",
        "xarray",
        XARRAY,
        ("deltacells.io._lazy_obs._backend",),
        "turns xarray's indexers into the outer indexing a lazy obs column supports (xarray's guide to backends)",
    ),
    Internal(
        "xarray.core.indexing.IndexingSupport",
        "xarray",
        XARRAY,
        ("deltacells.io._lazy_obs._backend",),
        "IndexingSupport.OUTER, the indexing a lazy obs column supports (xarray's guide to backends)",
    ),
    Internal(
        "xarray.core.extension_array.PandasExtensionArray",
        "xarray",
        XARRAY,
        ("deltacells.io._lazy_obs._backend", "deltacells.io._lazy_obs._frame"),
        "xarray's wrapper of pandas arrays (categoricals), which lazy obs columns return and unwrap, as anndata's "
        "own lazy categoricals do",
    ),
    Internal(
        "xarray.indexes.PandasIndex._replace",
        "xarray",
        XARRAY,
        ("deltacells.io._lazy_obs._backend",),
        "the index of cell numbers selects positions without building the whole range, returning a PandasIndex "
        "over the selected numbers (as PandasIndex.isel does)",
    ),
    # --------------------------------------------------------------- dask
    Internal(
        "dask.array.dispatch.concatenate_lookup",
        "dask",
        DASK,
        ("deltacells.io._dask_blocks",),
        "dask stacks blocks with the function this dispatch gives for their type: registered so that stacked "
        "CSR blocks keep their class (and its keepdims reductions)",
    ),
    Internal(
        "dask.base.get_scheduler",
        "dask",
        DASK,
        ("deltacells.io._dask_write",),
        "the scheduler dask computes with now; a distributed Client in effect is found as the owner of the "
        "bound get it returns, so that a write runs on the cluster and waits out its running tasks at an error",
    ),
    # --------------------------------------------------------------- fsspec, s3fs
    Internal(
        "fsspec.asyn.AsyncFileSystem._cat_file",
        "fsspec",
        FSSPEC,
        ("deltacells.storage._fsspec",),
        "asynchronous ranged reads on fsspec's event loop (fsspec documents its coroutines as _-prefixed "
        "methods, 'not to be called in normal code')",
    ),
    Internal(
        "fsspec.asyn.AsyncFileSystem._size",
        "fsspec",
        FSSPEC,
        ("deltacells.storage._fsspec",),
        "an object's size, asynchronously, for ranges given from the end and ranges past the end",
    ),
    Internal(
        "s3fs.S3FileSystem._cat_file_concurrent",
        "s3fs",
        S3FS,
        ("deltacells.storage._fsspec",),
        "its presence says that s3fs's _cat_file takes max_concurrency= (s3fs 2024.3+): a whole object is then "
        "read with one GET, without a HEAD for its size first",
    ),
    # --------------------------------------------------------------- zarr
    Internal(
        "zarr.core.sync.sync",
        "zarr",
        ZARR,
        ("deltacells.io._zarr_thread",),
        "the one function zarr's synchronous API hands every coroutine to (run on zarr's I/O thread, a round "
        "trip between threads a call): replaced, for the modules of zarr holding it, by one that runs them on "
        "the writing thread while anndata writes the extras into a group in memory (zarr has no public way)",
    ),
)

#: Every internal of another library that deltacells uses, by name.
INTERNALS: dict[str, Internal] = {entry.name: entry for entry in _ENTRIES}


def installed_version(distribution: str) -> str:
    """The installed version of ``distribution`` (``"not installed"`` if it is not)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "not installed"


def changed(name: str, problem: str) -> InternalChangedError:
    """The error saying that internal ``name`` changed: the entry, the installed version, those tested."""
    entry = INTERNALS[name]
    return InternalChangedError(
        f"deltacells relies on {name} ({entry.distribution} internal; tested on {', '.join(entry.tested)}), "
        f"which {entry.distribution} {installed_version(entry.distribution)} does not offer as before: {problem}. "
        "Please report it to deltacells with these versions"
    )


def reach(name: str) -> Any:
    """The object at the dotted path ``name`` (an entry of :data:`INTERNALS`), imported now.

    Raises
    ------
    InternalChangedError
        When the module cannot be imported or has no such attribute.
    """
    if name not in INTERNALS:
        msg = f"{name} is not in deltacells' list of internals (deltacells._internals.INTERNALS)"
        raise KeyError(msg)
    first, *rest = name.split(".")
    try:
        target: Any = importlib.import_module(first)
    except ImportError as exc:
        raise changed(name, f"{first} cannot be imported ({exc})") from exc
    path = first
    for part in rest:
        owner, path = target, f"{path}.{part}"
        try:
            target = getattr(owner, part)
            continue
        except AttributeError:
            if not isinstance(owner, ModuleType):
                raise changed(name, f"{type(owner).__name__} {owner.__name__!r} has no {part}") from None
        try:  # a submodule not imported yet
            target = importlib.import_module(path)
        except ImportError as exc:
            raise changed(name, f"{owner.__name__} has no {part} ({exc})") from exc
    return target


def overrides(name: str) -> Callable[[F], F]:
    """Mark a method as overriding (or implementing) internal ``name`` of another library.

    The method is unchanged but for an attribute naming the internal, so that every such override is listed in
    :data:`INTERNALS` (an unlisted name fails at import) and found by ``tests/test_internals.py``.
    """
    if name not in INTERNALS:
        msg = f"{name} is not in deltacells' list of internals (deltacells._internals.INTERNALS)"
        raise KeyError(msg)

    def mark(method: F) -> F:
        method.__deltacells_internal__ = name  # type: ignore[attr-defined]
        return method

    return mark


# ---------------------------------------------------------------------- anndata


def register_anndata_writer(
    group_types: Iterable[type],
    source_type: type | tuple[type, type],
    encoding: tuple[str, str],
    writer: Callable[..., Any],
) -> None:
    """Make anndata write ``source_type`` into each of ``group_types`` with ``writer``, as encoding ``encoding``.

    ``writer(f, k, elem, *, _writer, dataset_kwargs)`` is called as anndata calls its own writers (``_writer``
    is anndata's, whose ``write_elem`` writes with anndata's encodings). ``source_type`` ``(dask.array.Array,
    T)`` is a dask array whose blocks (its ``_meta``) are of type ``T``.
    """
    from anndata.experimental import IOSpec

    registry = reach("anndata._io.specs.registry._REGISTRY")
    spec = IOSpec(*encoding)
    for group_type in group_types:
        registry.register_write(group_type, source_type, spec)(writer)


def anndata_dask_view_class() -> type:
    """The class of a view's dask X (``adata[rows].X`` of an AnnData whose X is a dask array)."""
    return reach("anndata._core.views.DaskArrayView")  # type: ignore[no-any-return]


def register_to_memory(cls: type, loader: Callable[..., Any]) -> None:
    """Make ``AnnData.to_memory()`` load elements of type ``cls`` with ``loader(x, *, copy=False)``."""
    reach("anndata._core.file_backing.to_memory").register(cls)(loader)


def register_asarray(cls: type, densify: Callable[[Any], Any]) -> None:
    """Make ``anndata.utils.asarray`` densify elements of type ``cls`` with ``densify(x)``."""
    reach("anndata.utils.asarray").register(cls)(densify)


def register_remove_unused_categories(cls: type, remove: Callable[[Any, Any, dict[str, Any]], None]) -> None:
    """Make a view of an AnnData whose obs (or var) is a ``cls`` drop unused categories with ``remove``.

    ``remove(full, subset, uns)`` gets the AnnData's frame, the view's and the view's ``uns`` (to update colours).
    """
    import anndata as ad

    if not hasattr(ad.AnnData._remove_unused_categories, "register"):
        error = changed("anndata.AnnData._remove_unused_categories", "it is no longer a singledispatchmethod")
        raise error
    ad.AnnData._remove_unused_categories.register(cls)(staticmethod(remove))


def anndata_unified_dtype(dtypes: list[Any], *, has_missing: bool) -> Any:
    """The dtype anndata.concat casts the frames' columns of ``dtypes`` to before pandas concatenates them.

    ``None`` where anndata leaves the join to pandas; ``has_missing``: some frame lacks the column.
    """
    unify = reach("anndata._core.merge.try_unifying_dtype")
    return unify(dtypes, has_missing=has_missing)


def anndata_view_parts(adata: Any) -> tuple[Any, Any, Any]:
    """``(the viewed AnnData, row index, column index)`` of an AnnData view, as anndata holds them."""
    try:
        return adata._adata_ref, adata._oidx, adata._vidx
    except AttributeError as exc:
        error = changed("anndata.AnnData._adata_ref", f"a view has no {exc.name}")
        raise error from exc


def register_assert_equal(cls: type, compare: Callable[..., None]) -> None:
    """Make ``anndata.tests.helpers.assert_equal(a, b, ...)`` compare an ``a`` of type ``cls`` with ``compare``.

    Imports anndata's test helpers (which need pytest): call it only once they are imported.
    """
    reach("anndata.tests.helpers.assert_equal").register(cls)(compare)


def anndata_assert_equal() -> Callable[..., None]:
    """The ``assert_equal(a, b, *, exact=False, elem_name=None)`` of anndata's test helpers (which need pytest)."""
    return reach("anndata.tests.helpers.assert_equal")  # type: ignore[no-any-return]


#: The elements (``"X"``, ``"raw/X"``) the ``write_h5ad`` under way was asked to write dense.
_H5AD_AS_DENSE: ContextVar[frozenset[str]] = ContextVar("deltacells_h5ad_as_dense", default=frozenset())


def note_h5ad_as_dense(anndata_io: Any) -> None:
    """Wrap ``anndata.io.write_h5ad`` so that writers learn its ``as_dense`` (:func:`h5ad_dense_requested`).

    ``AnnData.write_h5ad`` (and ``AnnData.write``) call ``anndata.io.write_h5ad``, looked up when called: both
    go through the wrapper. Idempotent. The wrapper only notes ``as_dense`` for the time of the call.
    """
    write_h5ad = anndata_io.write_h5ad
    if getattr(write_h5ad, "notes_as_dense_for_deltacells", False):
        return

    @functools.wraps(write_h5ad)
    def noting_as_dense(*args: Any, **kwargs: Any) -> Any:
        with _noted_as_dense(kwargs.get("as_dense", ())):
            return write_h5ad(*args, **kwargs)

    noting_as_dense.notes_as_dense_for_deltacells = True  # type: ignore[attr-defined]
    anndata_io.write_h5ad = noting_as_dense


@contextlib.contextmanager
def _noted_as_dense(as_dense: Any) -> Iterator[None]:
    """Note ``as_dense`` as anndata's ``write_h5ad`` reads it: a name or names, ``raw.X`` meaning ``raw/X``."""
    names = [as_dense] if isinstance(as_dense, str) else list(as_dense or ())
    token = _H5AD_AS_DENSE.set(frozenset("raw/X" if name == "raw.X" else str(name) for name in names))
    try:
        yield
    finally:
        _H5AD_AS_DENSE.reset(token)


def h5ad_dense_requested(group: Any, key: str) -> bool:
    """Whether the ``write_h5ad`` under way was asked (``as_dense``) to write element ``key`` of ``group`` dense."""
    name = getattr(group, "name", None)
    if not isinstance(name, str):
        return False
    return f"{name.rstrip('/')}/{key}".lstrip("/") in _H5AD_AS_DENSE.get()


#: Whether the ``AnnData.__sizeof__`` under way was called with ``with_disk=True``.
_SIZEOF_WITH_DISK: ContextVar[bool] = ContextVar("deltacells_sizeof_with_disk", default=False)


def note_sizeof_with_disk(anndata_class: Any) -> None:
    """Wrap ``AnnData.__sizeof__`` so that matrices learn it is asked ``with_disk`` (:func:`sizeof_with_disk`).

    anndata sizes a matrix it does not know by calling its ``__sizeof__()``. Idempotent.
    """
    sizeof = anndata_class.__sizeof__
    if getattr(sizeof, "notes_with_disk_for_deltacells", False):
        return

    @functools.wraps(sizeof)
    def noting_with_disk(self: Any, *args: Any, **kwargs: Any) -> int:
        token = _SIZEOF_WITH_DISK.set(bool(kwargs.get("with_disk", False)))
        try:
            return sizeof(self, *args, **kwargs)  # type: ignore[no-any-return]
        finally:
            _SIZEOF_WITH_DISK.reset(token)

    noting_with_disk.notes_with_disk_for_deltacells = True  # type: ignore[attr-defined]
    anndata_class.__sizeof__ = noting_with_disk


def sizeof_with_disk() -> bool:
    """Whether the ``AnnData.__sizeof__`` under way (if any) was asked ``with_disk=True``."""
    return _SIZEOF_WITH_DISK.get()


# ---------------------------------------------------------------------- numba


def numba_function_cache(dispatcher: Any) -> Any | None:
    """The on-disk cache object of a numba dispatcher (``None`` without one, as with ``NUMBA_DISABLE_JIT``)."""
    return getattr(dispatcher, "_cache", None)


def set_numba_function_cache(dispatcher: Any, cache: Any) -> None:
    """Make ``dispatcher`` load and save its compilations through ``cache`` (numba's cache protocol)."""
    if not hasattr(dispatcher, "_cache"):
        error = changed("numba.core.dispatcher.Dispatcher._cache", "a dispatcher has no _cache")
        raise error
    dispatcher._cache = cache


def wrap_numba_compile(dispatcher: Any, wrap: Callable[[Callable[[Any], Any]], Callable[[Any], Any]]) -> None:
    """Replace ``dispatcher.compile`` (which numba calls for each signature) by ``wrap(dispatcher.compile)``."""
    dispatcher.compile = wrap(dispatcher.compile)


def numba_cache_path(cache: Any) -> str | None:
    """The directory of a numba cache object's files (``None`` for numba's null cache)."""
    path = getattr(cache, "cache_path", None)
    return path if isinstance(path, str) and path else None


def numba_cache_index_path(cache: Any) -> str:
    """The index file numba writes first when it saves a function's compilations."""
    try:
        return str(cache._cache_file._index_path)
    except AttributeError as exc:
        error = changed("numba.core.caching.IndexDataCacheFile._index_path", str(exc))
        raise error from exc


def numba_load_overload(cache: Any, sig: Any, target_context: Any) -> Any:
    """The ``load_overload`` of numba's cache: the cached compilation of ``sig``, or ``None``."""
    return cache.load_overload(sig, target_context)


def numba_save_overload(cache: Any, sig: Any, data: Any) -> None:
    """The ``save_overload`` of numba's cache: save the compilation of ``sig``."""
    cache.save_overload(sig, data)


def numba_loaded_signature_args(result: Any) -> tuple[Any, ...]:
    """The argument types of a compilation loaded from numba's cache."""
    return tuple(result.signature.args)


def numba_signature_args(sig: Any) -> tuple[Any, ...]:
    """The argument types of a signature as numba's dispatcher asks for it (a tuple of types, or a string)."""
    normalize_signature = reach("numba.core.sigutils.normalize_signature")
    return tuple(normalize_signature(sig)[0])


# ---------------------------------------------------------------------- scanpy, fast-array-utils

#: The functions of scanpy (and of fast-array-utils, which scanpy 1.12 computes with) that dispatch on X's type
#: and are registered for the lazy X with an error that names ``.to_memory()``.
SINGLEDISPATCH_ON_X = (
    "scanpy.pp.scale",
    "scanpy._utils.check_nonnegative_integers",
    "fast_array_utils.stats._generic_ops.generic_op",
    "fast_array_utils.stats._is_constant.is_constant_",
    "fast_array_utils.stats._power._power",
)


def singledispatch_on_x(library: str) -> list[Any]:
    """The functions of :data:`SINGLEDISPATCH_ON_X` of ``library`` (``"scanpy"``, ``"fast_array_utils"``).

    Those missing in the installed version are left out (they move between versions; ``tests/test_internals.py``
    says which), as are those that are no longer singledispatch functions.
    """
    found = []
    for name in SINGLEDISPATCH_ON_X:
        if name.split(".")[0] != library:
            continue
        try:
            function = reach(name)
        except InternalChangedError:
            continue
        if getattr(function, "register", None) is not None and getattr(function, "registry", None) is not None:
            found.append(function)
    return found


# ---------------------------------------------------------------------- xarray


def lazily_indexed_array(array: Any) -> Any:
    """``array`` (an xarray ``BackendArray``) wrapped as xarray wraps a backend's arrays: indexed lazily."""
    return reach("xarray.core.indexing.LazilyIndexedArray")(array)


def outer_indexing_adapter(key: Any, shape: tuple[int, ...], getitem: Callable[[Any], Any]) -> Any:
    """Answer xarray's indexer ``key`` with ``getitem``, which supports outer indexing (a ``BackendArray``)."""
    adapter = reach("xarray.core.indexing.explicit_indexing_adapter")
    support = reach("xarray.core.indexing.IndexingSupport")
    return adapter(key, shape, support.OUTER, getitem)


def pandas_extension_array(values: Any) -> Any:
    """A pandas array (a categorical) wrapped as xarray holds pandas arrays in a variable."""
    return reach("xarray.core.extension_array.PandasExtensionArray")(values)


def is_pandas_extension_array(values: Any) -> bool:
    """Whether ``values`` is xarray's wrapper of a pandas array (its ``.array`` is the pandas array)."""
    return isinstance(values, reach("xarray.core.extension_array.PandasExtensionArray"))


def pandas_index_replace(index: Any, new: Any) -> Any:
    """The xarray ``PandasIndex`` ``index`` over the pandas index ``new`` (same dimension and coordinate dtype)."""
    try:
        replace = index._replace
    except AttributeError as exc:
        error = changed("xarray.indexes.PandasIndex._replace", "PandasIndex has no _replace")
        raise error from exc
    return replace(new)


# ---------------------------------------------------------------------- dask


def register_dask_concatenate(cls: type, concatenate: Callable[..., Any]) -> None:
    """Make dask stack blocks of type ``cls`` with ``concatenate(blocks, axis=0)``."""
    reach("dask.array.dispatch.concatenate_lookup").register(cls)(concatenate)


def dask_scheduler(collections: list[Any] | None = None) -> Any:
    """The scheduler's ``get`` dask computes ``collections`` with now (dask's defaults and config)."""
    return reach("dask.base.get_scheduler")(collections=collections)


def dask_distributed_client() -> Any:
    """The ``distributed.Client`` dask computes with now, or ``None`` (a local scheduler)."""
    owner = getattr(dask_scheduler(), "__self__", None)  # a Client in effect: its bound get
    if owner is None:
        return None
    try:
        from distributed import Client
    except ImportError:  # pragma: no cover - a client cannot be in effect without distributed
        return None
    return owner if isinstance(owner, Client) else None


# ---------------------------------------------------------------------- fsspec, s3fs


def fsspec_is_async(fs: Any) -> bool:
    """Whether an fsspec filesystem is asynchronous (its coroutines can be awaited on fsspec's loop)."""
    return bool(getattr(fs, "async_impl", False)) and hasattr(fs, "_cat_file")


async def fsspec_cat_file(fs: Any, path: str, **options: Any) -> bytes:
    """An asynchronous filesystem's ``cat_file`` coroutine: the bytes of ``path`` (``start=``, ``end=``...)."""
    return await fs._cat_file(path, **options)  # type: ignore[no-any-return]


async def fsspec_size(fs: Any, path: str) -> int:
    """An asynchronous filesystem's ``size`` coroutine."""
    return int(await fs._size(path))


def replace_zarr_sync(make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
    """Replace zarr's ``sync`` by ``make(zarr's sync)`` wherever zarr holds it; whether it could be.

    Every module of zarr imported so far that holds the function by name gets the replacement; those imported
    later take it from ``zarr.core.sync``. False (nothing replaced) when zarr has no such function.
    """
    import sys

    try:
        original = reach("zarr.core.sync.sync")
    except InternalChangedError:
        return False
    if not callable(original):  # pragma: no cover - zarr 3 has it
        return False
    replacement = make(original)
    for name, module in list(sys.modules.items()):
        if (name == "zarr" or name.startswith("zarr.")) and getattr(module, "sync", None) is original:
            setattr(module, "sync", replacement)  # noqa: B010 (mypy knows no attribute sync of a module)
    return True


def s3fs_reads_in_one_request(fs: Any) -> bool:
    """Whether ``fs`` is s3fs with ``_cat_file(max_concurrency=...)`` (one GET for a whole object, no HEAD)."""
    return hasattr(fs, "_cat_file_concurrent")
