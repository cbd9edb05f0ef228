"""``read_deltacells`` of several datasets (docs/format.md, decision 16): one lazy AnnData over a collection.

The datasets are opened at once (their manifests and gene tables fetched concurrently: on object storage, the
two GETs of every dataset started together, :data:`OPEN_REQUESTS` in flight), their genes joined
as :func:`anndata.concat` joins them (the intersection or the union of the var names, or of a var column),
and each is read into the join's columns by the decode kernels (:meth:`~deltacells.Dataset.with_columns`).
obs is each dataset's, joined as :func:`anndata.concat` joins them (:class:`~deltacells.core.CollectionObs`).
"""

from __future__ import annotations

import functools
import gc
import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any, Concatenate, Literal, NoReturn, ParamSpec, TypeVar

import numpy as np
import pandas as pd

from deltacells._checks import check_choice, check_names
from deltacells._threads import map_members
from deltacells.core import Collection, Dataset, dataset_of_manifest, not_a_dataset, open_dataset
from deltacells.errors import InvalidTypeError, InvalidValueError, MissingObjectError, UnknownKeyError
from deltacells.format import (
    INDEX_COLUMN,
    MANIFEST_NAME,
    VAR_TABLE_NAME,
    check_var_table,
    first_problem_raises,
)
from deltacells.io._collection_var import check_merge, merged_var
from deltacells.io._var_frame import string_column_of
from deltacells.storage import BaseStore, open_store
from deltacells.tiles import DEFAULT_TILE_CACHE_BYTES

if TYPE_CHECKING:
    import pyarrow as pa
    from typing_extensions import TypeIs

    from deltacells.io._lazy_obs import LazyObs

__all__ = ["JOINS", "OpenCollection", "is_collection", "open_collection", "read_collection"]

_R = TypeVar("_R")
_P = ParamSpec("_P")

#: How the genes of a collection's datasets are joined (as :func:`anndata.concat`'s ``join``).
JOINS = ("inner", "outer")

#: The most requests in flight at once while a collection's datasets on object storage open: two small GETs a
#: dataset (the manifest and the gene table), started together. Not the tile reads' bound (``io_concurrency``):
#: 2,000 GETs of 30 ms take 1.9 s at 32 in flight, 0.23 s at 256.
OPEN_REQUESTS = 256

#: Datasets whose small GETs are all answered before they are opened (see ``_fetched_together``): at most a few
#: tens of megabytes of manifests and gene tables held at once.
OPEN_BATCH = 2048


def is_collection(path: Any) -> TypeIs[list[Any] | tuple[Any, ...]]:
    """Whether ``read_deltacells``'s ``path`` names several datasets (a list or tuple of them)."""
    return isinstance(path, (list, tuple))


@dataclass(frozen=True)
class OpenCollection:
    """Datasets opened as one: the collection read in the join's columns, and what made it.

    Attributes
    ----------
    collection
        The members, each reading its cells into the join's columns.
    datasets
        The members as opened (stored gene order), for their obs.
    genes
        The join's genes (var names, or ``var_key``'s values).
    keys
        Each dataset's name (``label``'s categories).
    join, var_key
        As asked.
    tables
        Each dataset's gene table indexed by its join keys, when asked for (``merge=``), else None.
    """

    collection: Collection
    datasets: list[Dataset]
    genes: pd.Index
    keys: list[str]
    join: str
    var_key: str | None
    tables: list[pd.DataFrame] | None = None


#: From this many datasets on, opening a collection pauses Python's cyclic garbage collector (``_collector_paused``).
PAUSE_COLLECTOR_DATASETS = 64


def _collector_paused(
    function: Callable[Concatenate[Sequence[Any], _P], _R],
) -> Callable[Concatenate[Sequence[Any], _P], _R]:
    """``function(sources, ...)`` run with the cyclic garbage collector paused when ``sources`` are many.

    Opening thousands of datasets makes about a hundred container objects each (manifests, datasets, frames,
    indexes), none of them garbage: the collections they trigger, each older generation's walking every object of
    the process (anndata, pandas, pyarrow: hundreds of thousands), cost a fifth of the client's CPU of a 1,000
    dataset open (measured: 0.2-0.25 s of 1.3 s). Reference counting still frees what is dropped; the collector's
    previous state is restored after, whatever happens.
    """

    @functools.wraps(function)
    def paused(sources: Sequence[Any], /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        if len(sources) < PAUSE_COLLECTOR_DATASETS or not gc.isenabled():
            return function(sources, *args, **kwargs)
        gc.disable()
        try:
            return function(sources, *args, **kwargs)
        finally:
            gc.enable()

    return paused


@_collector_paused
def open_collection(
    sources: Sequence[Any],
    *,
    join: str = "inner",
    keys: Sequence[str] | None = None,
    var_key: str | None = None,
    storage_options: dict[str, Any] | Sequence[dict[str, Any] | None] | None = None,
    tile_cache_bytes: int = DEFAULT_TILE_CACHE_BYTES,
    threads: int | None = None,
    io_concurrency: int | None = None,
    var_tables: bool = False,
) -> OpenCollection:
    """Open datasets as one: their manifests and gene tables read concurrently, their genes joined.

    ``var_tables``: keep each dataset's whole gene table (:attr:`OpenCollection.tables`), not only its keys.

    Raises
    ------
    InvalidValueError
        For another ``join``, ``keys`` or ``storage_options`` of another length, keys that repeat, var names
        (or ``var_key`` values) that repeat in a dataset, or an inner join with no gene in common.
    UnknownKeyError
        If ``var_key`` is not a var column of every dataset.
    """
    check_choice("join", join, JOINS, hint="as anndata.concat's")
    sources = list(sources)
    if not sources:
        msg = "a collection needs at least one dataset"
        raise InvalidValueError(msg)
    options = _per_dataset(storage_options, len(sources))
    names = _keys(sources, keys)
    # One bound for the decoded tiles of them all, shared out.
    cache_each = max(0, int(tile_cache_bytes) // len(sources))

    def opened(k: int, fetched: _Fetched | None = None) -> tuple[Dataset, pd.Index, pd.DataFrame | None]:
        source = sources[k]
        table: pa.Table | None = None
        if fetched is not None:
            dataset, table = _open_fetched(fetched, None if var_tables else var_key, cache_each, threads)
        elif isinstance(source, Dataset):
            dataset = source.with_gene_order("stored")
        elif isinstance(source, (str, os.PathLike)):
            dataset = open_dataset(
                source,
                storage_options=options[k],
                tile_cache_bytes=cache_each,
                threads=threads,
                io_concurrency=io_concurrency,
            )
        else:
            msg = f"a collection's datasets are paths, URLs or deltacells Datasets; dataset {k} is a {type(source)}"
            raise InvalidTypeError(msg)
        if var_tables:
            keyed = _keyed_table(dataset, var_key, names[k])
            return dataset, _unique(keyed.index, var_key, names[k]), keyed
        return dataset, _gene_keys(dataset, var_key, names[k], table), None

    remote = _remote_stores(sources, options, io_concurrency)
    members_of: dict[int, tuple[Dataset, pd.Index, pd.DataFrame | None]] = {}
    for fetched in _fetched_together(remote):  # in order, each as soon as its GETs are back, the next ones in flight
        members_of[fetched.k] = opened(fetched.k, fetched)
    others = [k for k in range(len(sources)) if k not in remote]
    members_of.update(zip(others, map_members(opened, others), strict=True))
    members = [members_of[k] for k in range(len(sources))]
    genes = _joined([dataset for dataset, _, _ in members], [stored for _, stored, _ in members], join)
    if genes.shape[0] == 0 and join == "inner":
        msg = (
            f"the {len(sources)} datasets have no gene in common (join='inner'); use join='outer', or var_key= to "
            "join on another var column"
        )
        raise InvalidValueError(msg)
    width = int(genes.shape[0])
    readers = []
    for dataset, stored, _ in members:
        columns = genes.get_indexer(stored).astype(np.int32)
        same = width == dataset.n_genes and bool(np.array_equal(columns, np.arange(width)))
        readers.append(dataset if same else dataset.with_columns(columns, width))
    datasets = [dataset for dataset, _, _ in members]
    tables = [table for _, _, table in members if table is not None] if var_tables else None
    return OpenCollection(Collection(readers), datasets, genes, names, join, var_key, tables)


@_collector_paused
def read_collection(
    sources: Sequence[Any],
    *,
    join: Literal["inner", "outer"],
    label: str | None,
    keys: Sequence[str] | None,
    var_key: str | None,
    index_unique: str | None,
    merge: Any,
    storage_options: dict[str, Any] | Sequence[dict[str, Any] | None] | None,
    obs_columns: Sequence[str] | None,
    obs_names: bool,
    cache_dir: Any,
    verify_obs: bool,
    tile_cache_bytes: int,
    threads: int | None,
    io_concurrency: int | None,
    lazy: Callable[[int], bool],
) -> tuple[Collection, Any, pd.DataFrame, dict[str, Any]]:
    """The collection's matrix, obs and var, and what made it (datasets, keys, join...: see :func:`open_collection`).

    var has the columns ``merge`` keeps (:func:`~deltacells.io._collection_var.merged_var`; none by default, as
    :func:`anndata.concat`).

    ``lazy(n_cells)`` says whether obs is lazy (a :class:`~deltacells.io._lazy_obs.LazyObs` over the datasets'
    caches, :class:`~deltacells.core.CollectionObs`) or a pandas frame of the same columns.

    Raises
    ------
    InvalidValueError
        As :func:`open_collection`, and for obs columns whose kinds differ between datasets.
    UnknownKeyError
        As :func:`open_collection`, and for an obs column no dataset has.
    """
    merge = check_merge(merge)
    opened = open_collection(
        sources, join=join, keys=keys, var_key=var_key, storage_options=storage_options,
        tile_cache_bytes=tile_cache_bytes, threads=threads, io_concurrency=io_concurrency,
        var_tables=merge is not None,
    )  # fmt: skip
    from deltacells.core import CollectionObs

    if obs_columns is not None:
        check_names("obs_columns", obs_columns, of="column names")
    store = CollectionObs(
        opened.collection, opened.keys, label=label, join=join, columns=obs_columns, names=obs_names,
        index_unique=index_unique, cache_dir=cache_dir, verify=verify_obs,
    )  # fmt: skip
    obs: pd.DataFrame | LazyObs
    if lazy(opened.collection.n_cells):
        from deltacells.io._lazy_obs import lazy_obs_frame

        obs = lazy_obs_frame(store, opened.collection.n_cells, store.columns, names=True)
    else:
        obs = _obs_in_memory(store)
    var = merged_var(opened.tables, opened.genes, join=join, merge=merge)
    entry: dict[str, Any] = {
        "datasets": [dataset.url for dataset in opened.datasets],
        "keys": opened.keys,
        "join": join,
        "counts": "X",
        "columns": "joined",
    }
    if label is not None:
        entry["label"] = label
    if var_key is not None:
        entry["var_key"] = var_key
    if cache_dir is not None:
        entry["cache_dir"] = os.fspath(cache_dir)
    return opened.collection, obs, var, entry


@dataclass
class _Fetched:
    """A dataset on object storage whose manifest and gene table were requested together."""

    k: int
    store: BaseStore
    manifest: Future[bytes]
    var_table: Future[bytes]


def _remote_stores(
    sources: list[Any], options: list[dict[str, Any] | None], io_concurrency: int | None
) -> dict[int, BaseStore]:
    """The stores of the datasets given by URL whose reads are coroutines (obstore's, async fsspec's), by position."""
    stores: dict[int, BaseStore] = {}
    for k, source in enumerate(sources):
        if isinstance(source, (str, os.PathLike)):
            store = open_store(source, options[k], io_concurrency=io_concurrency)
            if store.reads_asynchronously:
                stores[k] = store
    return stores


def _fetched_together(stores: dict[int, BaseStore]) -> Iterator[_Fetched]:
    """Each dataset's manifest and gene table requested, :data:`OPEN_REQUESTS` in flight, yielded in order.

    The gene table is asked for before the manifest says there is one (a dataset without one answers 404, which
    its opening then ignores). The datasets come in batches of :data:`OPEN_BATCH`: every request of a batch is
    answered before its datasets are yielded, so that the caller's opening (Python, holding the GIL) does not run
    while the event loop is receiving the answers (which needs the GIL too): measured, that contention cost more
    CPU than the overlap saved. Requests not yet answered when the caller stops are cancelled.
    """
    pending: deque[_Fetched] = deque()
    window = max(1, OPEN_REQUESTS // 2)
    items = list(stores.items())
    try:
        for first in range(0, len(items), OPEN_BATCH):
            ready: list[_Fetched] = []
            for k, store in items[first : first + OPEN_BATCH]:
                if len(pending) >= window:
                    ready.append(_done(pending.popleft()))
                manifest, var_table = store.submit_read(MANIFEST_NAME), store.submit_read(VAR_TABLE_NAME)
                pending.append(_Fetched(k, store, manifest, var_table))
            while pending:
                ready.append(_done(pending.popleft()))
            yield from ready
    finally:
        for fetched in pending:
            fetched.manifest.cancel()
            fetched.var_table.cancel()


def _done(fetched: _Fetched) -> _Fetched:
    """``fetched`` once both its requests are answered (so that neither runs on past the dataset's opening)."""
    wait((fetched.manifest, fetched.var_table))
    return fetched


def _open_fetched(
    fetched: _Fetched, var_key: str | None, tile_cache_bytes: int, threads: int | None
) -> tuple[Dataset, pa.Table | None]:
    """The dataset of ``fetched`` and its gene table (None: none, or to be read as ``Dataset.var_table`` reads it).

    Of the gene table only the column of the keys is read when it is a string column (``read_gene_keys`` reads
    no other), else all of it.
    """
    store = fetched.store
    try:
        text = fetched.manifest.result()
    except (MissingObjectError, NotADirectoryError) as exc:
        raise not_a_dataset(store, exc) from exc
    dataset = dataset_of_manifest(store, text, tile_cache_bytes=tile_cache_bytes, threads=threads)
    if not dataset.manifest.has_var_table or dataset.store is not store:  # none, or read from a pending commit's
        return dataset, None
    try:
        blob = fetched.var_table.result()
    except MissingObjectError:
        return dataset, None  # reported as Dataset.var_table reports it
    columns = functools.partial(string_column_of, name=var_key)  # the keys' column alone, where it is one
    return dataset, first_problem_raises(check_var_table(blob, dataset.manifest.n_genes, columns=columns), store.url)


def _per_dataset(storage_options: Any, n: int) -> list[dict[str, Any] | None]:
    """``storage_options`` for each dataset: the same dict for all, or one (or None) each."""
    if storage_options is None or isinstance(storage_options, dict):
        return [storage_options] * n
    options = list(storage_options)
    if len(options) != n:
        msg = f"storage_options must be one dict for all the datasets or one per dataset ({n}), got {len(options)}"
        raise InvalidValueError(msg)
    return options


def _keys(sources: list[Any], keys: Sequence[str] | None) -> list[str]:
    """The datasets' keys (``label``'s categories): as given, or their names (folders, without ``.deltacells``)."""
    if keys is None:
        names = [_name_of(source) for source in sources]
        if len(set(names)) != len(names):
            repeated = sorted({name for name in names if names.count(name) > 1})
            msg = f"datasets share a name ({', '.join(repeated[:3])}): pass keys= to name each one"
            raise InvalidValueError(msg)
        return names
    names = [str(key) for key in check_names("keys", keys)]
    if len(names) != len(sources):
        msg = f"keys names {len(names)} datasets, but there are {len(sources)}"
        raise InvalidValueError(msg)
    if len(set(names)) != len(names):
        msg = "keys must not repeat: they say which dataset each cell came from"
        raise InvalidValueError(msg)
    return names


def _name_of(source: Any) -> str:
    url = source.url if isinstance(source, Dataset) else os.fspath(source)
    name = PurePosixPath(str(url).replace("\\", "/").rstrip("/").split("://", 1)[-1]).name
    return name.removesuffix(".deltacells") or name


def _gene_keys(dataset: Dataset, var_key: str | None, name: str, table: pa.Table | None = None) -> pd.Index:
    """The keys the genes are joined on (var names, or ``var_key``'s values), in stored order (``table``: read)."""
    from deltacells.io._frames import read_gene_keys, read_var

    stored = read_gene_keys(dataset, var_key, table=table)
    if stored is None:
        _no_var_key(read_var(dataset), var_key, name)
    return _unique(stored, var_key, name)


def _keyed_table(dataset: Dataset, var_key: str | None, name: str) -> pd.DataFrame:
    """The gene table in stored order, indexed by the keys the genes are joined on (as :func:`_gene_keys`)."""
    from deltacells.io._frames import read_var

    table = read_var(dataset)
    if var_key is not None:
        if var_key not in table.columns:
            _no_var_key(table, var_key, name)
        table.index = pd.Index(table[var_key].astype(str).to_numpy())
    return table


def _no_var_key(var: pd.DataFrame, var_key: str | None, name: str) -> NoReturn:
    msg = f"dataset {name!r} has no var column {var_key!r} (var_key=); its columns: {list(var.columns)}"
    raise UnknownKeyError(msg)


def _unique(stored: pd.Index, var_key: str | None, name: str) -> pd.Index:
    """``stored``, the keys of dataset ``name``'s genes, if they do not repeat."""
    if not stored.is_unique:
        repeated = stored[stored.duplicated()].unique()[:3].tolist()
        what = "var names" if var_key is None else f"values of var column {var_key!r}"
        msg = f"dataset {name!r}: its {what} repeat ({', '.join(map(str, repeated))}): a join needs them unique"
        raise InvalidValueError(msg)
    return stored


def _joined(datasets: list[Dataset], stored: list[pd.Index], join: str) -> pd.Index:
    """The genes of the join, as :func:`anndata.concat` finds them (pandas' intersection or union, from the left).

    anndata joins the keys in each dataset's original order. Only some orders can change the result, and each
    costs a request on object storage (the dataset's gene order), so only those are read: pandas' intersection
    keeps its left side's order (the first dataset's); its union is sorted unless both sides are equal, order
    included, so a dataset's order counts only when its genes are the same set as the union so far.
    """
    from deltacells.io._frames import in_column_order

    def original(k: int) -> pd.Index:
        return in_column_order(pd.DataFrame(index=stored[k]), datasets[k].with_gene_order("original")).index

    joined = original(0)
    for k in range(1, len(stored)):
        if join == "inner":
            joined = joined.intersection(stored[k])
        else:
            same_set = len(stored[k]) == len(joined) and bool(stored[k].isin(joined).all())
            joined = joined.union(original(k) if same_set else stored[k])
    return joined


def _obs_in_memory(store: Any) -> pd.DataFrame:
    """The joined obs as a pandas frame (what :func:`anndata.concat` of the datasets' obs gives)."""
    index = pd.Index(store.take(INDEX_COLUMN), name=store.schema.index_name)
    columns = {  # each in its joined dtype (pandas 3 would infer str for an object array of strings)
        name: pd.Series(store.take(name), dtype=store.dtype(name), index=index, copy=False) for name in store.columns
    }
    return pd.DataFrame(columns, index=index, columns=store.columns)
