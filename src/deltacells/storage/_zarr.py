"""A location of a store as a zarr store: where anndata's element writer and readers keep an AnnData's elements."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deltacells.storage._base import BaseStore

__all__ = ["zarr_store"]


def zarr_store(store: BaseStore, path: str, *, read_only: bool) -> Any:
    """The zarr store at ``path`` inside ``store``: a directory on a local disk, else fsspec's at the same URL.

    zarr reads and writes its objects itself (with the store's ``storage_options``); its stores pickle to their
    location, so dask workers reading lazily loaded elements open their own. A remote location is fsspec's
    synchronous filesystem behind fsspec's asynchronous wrapper (see the code for why).

    Parameters
    ----------
    store
        The dataset's store.
    path
        The group's path inside it.
    read_only
        Open for reading only.

    Returns
    -------
    zarr.storage.LocalStore or zarr.storage.FsspecStore
    """
    import fsspec
    import zarr.storage
    from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper

    local = store.local_path(path) if store.is_local else None
    if local is not None:
        return zarr.storage.LocalStore(local, read_only=read_only)
    url, options = store.fsspec_location(path)
    # A synchronous filesystem (s3fs's sessions then live on fsspec's own event loop, as deltacells' do), which
    # zarr calls through fsspec's wrapper: zarr's FsspecStore.from_url makes an asynchronous one on zarr's loop,
    # whose sessions are closed at exit from another loop (errors printed as the interpreter stops).
    filesystem, root = fsspec.core.url_to_fs(url, **options)
    return zarr.storage.FsspecStore(
        AsyncFileSystemWrapper(filesystem, asynchronous=True), path=root, read_only=read_only
    )
