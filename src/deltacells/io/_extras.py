"""The AnnData's other elements, beside the tiles: written with anndata's element writer, read back lazily.

``write_deltacells`` stores the count matrix in the tiles, obs and var in their files, and every other
element (obsm, varm, obsp, varp, uns, the other layers, raw, and X when the counts came from a layer or raw)
in the zarr group ``anndata.zarr`` (docs/format.md, decision 15; the layout is :mod:`deltacells.format._extras`'s). The
group's metadata is consolidated, so that opening it is one read, on a disk or in a bucket.

``read_deltacells`` reads ``uns`` and every element of at most :data:`IN_MEMORY_BYTES` into memory, and the
larger ones lazily with anndata's lazy reader (dask arrays, chunked along the cells): an atlas with a 100M x 50
embedding opens in constant time and memory, and ``adata[cells].to_memory()`` reads the rows of those cells.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from deltacells.errors import InvalidTypeError, warn
from deltacells.format import EXTRAS_FORMAT, EXTRAS_NAME, MAPPINGS, RAW_VARM, Extras, is_raw_varm
from deltacells.io._combine_parts import combine_parts
from deltacells.io._zarr_batch import BatchBudget, store_objects
from deltacells.io._zarr_thread import zarr_on_this_thread
from deltacells.storage import zarr_store

if TYPE_CHECKING:
    import anndata as ad
    import numpy as np

    from deltacells.storage import BaseStore

__all__ = [
    "IN_MEMORY_BYTES",
    "collect_extras",
    "open_extras",
    "read_extras",
    "stored_shape",
    "without_bookkeeping",
    "write_extras",
]

#: Elements stored in more bytes than this (uncompressed) are read lazily (dask arrays), the others into memory.
IN_MEMORY_BYTES = 64 * 2**20

#: The key of ``uns`` where ``read_deltacells`` once described the dataset it read (its URL, settings, obs cache).
OLD_UNS_KEY = "deltacells"


def collect_extras(adata: ad.AnnData, *, layer: str | None, raw: bool) -> tuple[str, dict[str, Any]]:
    """Where the counts are (``"X"``, ``"raw"``, ``"layers/<name>"``) and every other element, by path.

    obs and var go to the dataset's own files (var: raw's when the counts are raw's, and then the AnnData's own
    var is an element); lazy data frames (``read_lazy``'s) are brought into memory.
    """
    counts = "raw" if raw else (f"layers/{layer}" if layer is not None else "X")
    elements: dict[str, Any] = {}
    if counts != "X" and adata.X is not None:
        elements["X"] = adata.X
    if raw:
        elements["var"] = _in_memory(adata.var)
        raw_varm = adata.raw.varm  # type: ignore[arg-type, unused-ignore]  # anndata types the descriptor for AnnData
        for key, value in raw_varm.items():  # raw's genes are the tiles': its varm goes beside them
            elements[f"{RAW_VARM}/{key}"] = _in_memory(value)
    elif adata.raw is not None:
        elements["raw"] = _raw_in_memory(adata)
    for mapping in MAPPINGS:
        for key, value in getattr(adata, mapping).items():
            if key is None or f"{mapping}/{key}" == counts:  # anndata 0.13 lists X among the layers, as None
                continue
            elements[f"{mapping}/{key}"] = _in_memory(value)
    uns = without_bookkeeping(adata.uns)
    if uns:
        elements["uns"] = uns
    return counts, elements


def without_bookkeeping(uns: Mapping[str, Any]) -> dict[str, Any]:
    """``uns`` without what older versions of ``read_deltacells`` added to it: ``uns["deltacells"]``.

    Older versions described the dataset read there (its URL, settings, gene order and obs cache), and it went
    on into every AnnData written from one (an h5ad, a dataset converted again). It is dropped when it is that
    description (a URL and a format version, or a collection's datasets and join); a ``uns["deltacells"]`` of
    the user's is an element like any other.
    """
    entry = uns.get(OLD_UNS_KEY)
    bookkeeping = isinstance(entry, Mapping) and (
        {"url", "format_version"} <= set(entry) or {"datasets", "join"} <= set(entry)
    )
    return {key: value for key, value in uns.items() if not (bookkeeping and key == OLD_UNS_KEY)}


def write_extras(
    store: BaseStore, counts: str, elements: Mapping[str, Any], *, group_path: str = EXTRAS_NAME
) -> Extras:
    """Write ``elements`` with anndata's element writer into ``anndata.zarr`` in ``store``; consolidate its metadata.

    ``group_path`` is the group's path in ``store`` (an append writes a part of its own under ``anndata.zarr``).
    The elements in memory are written into a zarr group in memory first (zarr's coroutines run on this thread:
    :mod:`deltacells.io._zarr_thread`), then stored in one pass (:mod:`deltacells.io._zarr_batch`), the
    consolidated metadata with them; the others (dask arrays, elements beyond
    :data:`~deltacells.io._zarr_batch.BATCH_BYTES`) are then written in place, and the metadata consolidated
    there. Either way the objects are those zarr writes.

    Raises
    ------
    InvalidTypeError
        For an element anndata cannot write, naming it (what was written is left for the caller to remove).
    """
    import zarr
    import zarr.storage

    items = _items(elements)
    budget = BatchBudget()
    in_memory = [budget.takes(value) for _, _, value in items]
    objects: dict[str, Any] = {}
    in_place = [item for item, here in zip(items, in_memory, strict=True) if not here]
    with zarr_on_this_thread():  # a group in memory: zarr's coroutines need not hop to its I/O thread
        memory = zarr.storage.MemoryStore(objects)
        group = zarr.open_group(memory, mode="w", zarr_format=EXTRAS_FORMAT)
        for mapping in dict.fromkeys(mapping for mapping, _, _ in items if mapping):  # every mapping, even absent
            # (raw's varm alone is nested: raw itself is the tiles'; anndata 0.13 refuses a nested key)
            parent, name = (group.require_group("raw"), "varm") if mapping == RAW_VARM else (group, mapping)
            _write_element(parent, "", name, {})  # an anndata dict, so that anndata reads the mapping whole too
        _write_elements(group, [item for item, here in zip(items, in_memory, strict=True) if here])
        if not in_place:
            zarr.consolidate_metadata(memory, zarr_format=EXTRAS_FORMAT)
    store_objects(store, group_path, objects)
    del objects, memory, group
    if in_place:
        location = zarr_store(store, group_path, read_only=False)
        _write_elements(zarr.open_group(location, mode="r+", zarr_format=EXTRAS_FORMAT), in_place)
        zarr.consolidate_metadata(location, zarr_format=EXTRAS_FORMAT)
    return Extras(counts=counts, elements=tuple(elements), zarr_format=EXTRAS_FORMAT)


def _items(elements: Mapping[str, Any]) -> list[tuple[str, str, Any]]:
    """``(mapping, name, value)`` for each element, ``uns`` key by key (so that an error names the key)."""
    items: list[tuple[str, str, Any]] = []
    for path, value in elements.items():
        if path == "uns":
            items += [("uns", name, item) for name, item in value.items()]
        else:
            mapping, _, name = path.rpartition("/")
            items.append((mapping, name, value))
    return items


def _write_elements(group: Any, items: list[tuple[str, str, Any]]) -> None:
    """Each ``(mapping, name, value)`` of ``items`` written into ``group``, whose mappings' groups exist."""
    parents = {"": group}
    for mapping, name, value in items:
        if mapping not in parents:  # opened once (reading its metadata), not once an element
            parents[mapping] = group[mapping]
        _write_element(parents[mapping], mapping, name, value)


def _write_element(parent: Any, mapping: str, name: str, value: Any) -> None:
    """``anndata.io.write_elem`` of ``value`` as ``name`` in ``parent``, the group of ``mapping`` (or the root).

    Raises
    ------
    InvalidTypeError
        Naming the element, if anndata cannot write it.
    """
    import anndata as ad

    try:
        ad.io.write_elem(parent, name, value)
    except Exception as exc:
        msg = (
            f"adata.{_attribute(f'{mapping}/{name}' if mapping else name)} cannot be stored by anndata's "
            f"element writer ({type(exc).__name__}: {exc}); remove it, or pass extras=False to store the "
            "counts, obs and var only"
        )
        raise InvalidTypeError(msg) from exc


def open_extras(store: BaseStore, extras: Extras, *, consolidated: bool = True, group: str = EXTRAS_NAME) -> Any:
    """The ``anndata.zarr`` group (or ``group``, a part of it): from its consolidated metadata, or object by object."""
    import zarr

    location = zarr_store(store, group, read_only=True)
    return zarr.open_group(location, mode="r", zarr_format=extras.zarr_format, use_consolidated=consolidated)


def read_extras(store: BaseStore, extras: Extras, *, in_memory_bytes: int | None = None) -> dict[str, Any]:
    """The elements of ``anndata.zarr``, by path: ``uns`` and small ones in memory, the larger lazily (dask).

    Elements of more than ``in_memory_bytes`` (default :data:`IN_MEMORY_BYTES`) are lazy; without dask they
    are read into memory, with a warning. raw is an AnnData whose X is lazy when it is large.
    """
    limit = IN_MEMORY_BYTES if in_memory_bytes is None else in_memory_bytes
    elements = _read_group(store, open_extras(store, extras), extras.elements, limit)
    if extras.parts:  # an appended dataset: each append's per-cell elements, put together
        per_cell = extras.per_cell
        parts = [
            _read_group(store, open_extras(store, extras, group=f"{EXTRAS_NAME}/{group}"), per_cell, limit)
            for group, _ in extras.parts
        ]
        for path in per_cell:
            elements[path] = combine_parts(path, [elements[path], *(part[path] for part in parts)])
    return elements


def _read_group(store: BaseStore, group: Any, paths: Sequence[str], limit: int) -> dict[str, Any]:
    import anndata as ad

    lazy_ok = _has_dask()
    elements: dict[str, Any] = {}
    for path in paths:
        element = group[path]
        inner = element["X"] if path == "raw" else element  # raw: its X is the large part
        big = path != "uns" and stored_bytes(inner) > limit
        if big and not lazy_ok:
            warn(f"{store.url}/{EXTRAS_NAME}/{path} is read into memory: install dask to read it lazily")
        if not (big and lazy_ok):
            elements[path] = ad.io.read_elem(element)
        elif path == "raw":
            parts: dict[str, Any] = {key: ad.io.read_elem(element[key]) for key in element.keys() if key != "X"}  # noqa: SIM118
            elements[path] = ad.AnnData(X=_read_lazily(inner), **parts)
        else:
            elements[path] = _read_lazily(element)
    return elements


def stored_bytes(element: Any) -> int:
    """What an element of the group holds, uncompressed: an array's bytes, a group's arrays' (nothing read)."""
    import zarr

    if isinstance(element, zarr.Array):
        return int(element.nbytes)
    return sum(int(array.nbytes) for _, array in element.arrays()) + sum(
        stored_bytes(child) for _, child in element.groups()
    )


def stored_shape(element: Any) -> tuple[int, ...] | None:
    """The shape of an element as anndata stores it (an array, a sparse matrix, a data frame), nothing read."""
    import zarr

    if isinstance(element, zarr.Array):
        return tuple(int(n) for n in element.shape)
    attrs = element.attrs
    encoding = str(attrs.get("encoding-type", ""))
    if encoding in ("csr_matrix", "csc_matrix"):
        return tuple(int(n) for n in attrs["shape"])
    if encoding == "dataframe":
        index = element[attrs["_index"]]
        length = stored_shape(index)
        return None if length is None else (length[0], len(attrs.get("column-order", [])))
    if encoding == "categorical" or encoding.startswith("nullable-"):
        return stored_shape(element["codes" if encoding == "categorical" else "values"])
    return None


def reorder_genes(elements: dict[str, Any], extras: Extras, order: np.ndarray) -> dict[str, Any]:
    """The elements in another gene order (``order[j]`` the original gene of column ``j``) where they have genes.

    varm's rows, varp's rows and columns, the layers' columns, and X's (whose genes are the tiles', unless the
    counts are raw's).
    """
    reordered = dict(elements)
    if extras.counts == "raw":  # the tiles hold raw's genes (and raw's varm); X and its elements keep the AnnData's own
        for path, value in elements.items():
            if is_raw_varm(path):
                reordered[path] = value[order]
        return reordered
    for path, value in elements.items():
        mapping = path.partition("/")[0]
        if mapping == "varm":
            reordered[path] = value[order]
        elif mapping == "varp":
            reordered[path] = value[order][:, order]
        elif mapping == "layers" or (path == "X" and extras.counts != "raw"):
            reordered[path] = value[:, order]
    return reordered


# ---------------------------------------------------------------------- internals


def _read_lazily(element: Any) -> Any:
    import anndata as ad

    return ad.experimental.read_elem_lazy(element)


def _has_dask() -> bool:
    try:
        import dask.array  # noqa: F401
    except ImportError:
        return False
    return True


def _in_memory(value: Any) -> Any:
    """A lazy data frame (anndata's ``Dataset2D``, as ``read_lazy`` gives in obsm) as pandas; anything else as is."""
    from anndata.experimental.backed import Dataset2D

    return value.to_memory() if isinstance(value, Dataset2D) else value


def _raw_in_memory(adata: ad.AnnData) -> Any:
    """``adata.raw``, its var in memory (``read_lazy`` gives a lazy one, which anndata's writer refuses)."""
    from anndata.experimental.backed import Dataset2D

    raw = adata.raw
    if not isinstance(raw.var, Dataset2D):
        return raw
    import anndata as ad

    return ad.Raw(adata, X=raw.X, var=raw.var.to_memory(), varm=dict(raw.varm))


def _attribute(path: str) -> str:
    """``obsm/X_pca`` as the user names it: ``obsm['X_pca']`` (``raw/varm/PCs``: ``raw.varm['PCs']``)."""
    mapping, _, key = path.rpartition("/") if is_raw_varm(path) else path.partition("/")
    mapping = mapping.replace("/", ".")
    return f"{mapping}[{key!r}]" if key else mapping
