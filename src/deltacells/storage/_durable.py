"""Making files on a local disk survive a crash or a power loss: ``fsync`` of the files and their directories.

A rename makes a file appear whole to other processes at once, but until the file's data and the directory
entry naming it reach the disk, a power loss may leave it empty or missing (ext4, XFS and APFS all allow
that). A dataset is made durable before its manifest names it, and the manifest after (see
:meth:`~deltacells.storage.BaseStore.sync`). What each platform guarantees:

* Linux: ``fsync`` of a file writes its data and metadata to the device and flushes the device's cache; the
  ``fsync`` of a directory does the same for its entries (a new name, a rename). ``syncfs`` does it for every
  file and directory of one filesystem at once: a folder of many files is flushed with it (see
  :func:`fsync_tree`).
* macOS: ``fsync`` leaves the data in the drive's cache; ``F_FULLFSYNC`` (used here) flushes it.
* Windows: ``fsync`` (``FlushFileBuffers``) flushes a file; a directory cannot be opened to flush, and NTFS
  journals its entries itself.

On object stores a write that returned is already durable: nothing is done there.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

__all__ = ["FLUSH_THREADS", "fsync_path", "fsync_tree", "syncfs_path"]

#: The ``fsync`` calls in flight at once when a folder's files are flushed one by one (where there is no ``syncfs``).
FLUSH_THREADS = 16

#: ``syncfs`` errors that mean the call is not available here (a sandbox's filter, an old kernel): flush file by file.
_UNAVAILABLE = frozenset({errno.ENOSYS, errno.EPERM, errno.EACCES, errno.EINVAL, errno.EOPNOTSUPP})


def fsync_path(path: str) -> None:
    """Flush file or directory ``path`` to the device (a directory: its entries; skipped where it cannot be opened)."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) if os.path.isdir(path) else os.O_RDONLY
    try:
        descriptor = os.open(path, flags)
    except (IsADirectoryError, PermissionError):  # a directory on Windows
        return
    try:
        if sys.platform == "darwin":
            import fcntl

            with contextlib.suppress(OSError):  # not every file system takes it; fsync then
                fcntl.fcntl(descriptor, fcntl.F_FULLFSYNC)
                return
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def syncfs_path(path: str) -> bool:
    """Flush the whole filesystem holding ``path`` to the device (Linux ``syncfs``); False where it is unavailable.

    Every dirty page and inode of that filesystem is written back and its journal committed once (other
    processes' writes to it included), so everything written there before the call survives a power loss.

    Raises
    ------
    OSError
        If the filesystem reports a write-back error (``EIO``, ``ENOSPC``): what was written may be lost.
    """
    syncfs = _syncfs()
    if syncfs is None:
        return False
    descriptor = os.open(path, os.O_RDONLY)
    try:
        if syncfs(descriptor) == 0:
            return True
        error = ctypes.get_errno()
    finally:
        os.close(descriptor)
    if error in _UNAVAILABLE:
        return False
    raise OSError(error, f"syncfs of the filesystem holding {path} failed: {os.strerror(error)}", path)


@functools.cache
def _syncfs() -> Callable[[int], int] | None:
    """The C library's ``syncfs`` (Linux), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):  # no libc to load, or one without syncfs
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int
    return function


def fsync_tree(path: str, root: str) -> None:
    """Flush ``path`` (a file, or a directory and everything in it), then each directory from its own up to ``root``.

    The directories above it are flushed too, since their entries name it (a new directory is an entry of its
    parent). Nothing is done for a missing ``path``. A directory's files and folders are flushed together: by
    one ``syncfs`` of each filesystem they are on (Linux: one journal commit, where an ``fsync`` each commits
    the journal each time), else by ``fsync`` calls on :data:`FLUSH_THREADS` threads.
    """
    if not os.path.exists(path):
        return
    if os.path.isdir(path):
        _flush_folder(path)
    else:
        fsync_path(path)
    root = os.path.abspath(root)
    directory = os.path.dirname(os.path.abspath(path))
    while directory.startswith(root):
        fsync_path(directory)
        if directory == root:
            break
        directory = os.path.dirname(directory)


def _flush_folder(path: str) -> None:
    """Flush every file and directory under ``path`` (included): by filesystem where possible, else one by one."""
    entries: list[str] = []
    filesystems = {os.stat(path).st_dev: path}  # a directory on each (a folder inside may be a mount point)
    for directory, _, files in os.walk(path, topdown=False):
        entries += [os.path.join(directory, name) for name in files]
        entries.append(directory)
        filesystems.setdefault(os.stat(directory).st_dev, directory)
    if all(syncfs_path(directory) for directory in filesystems.values()):
        return
    if len(entries) == 1:
        fsync_path(entries[0])
        return
    threads = min(FLUSH_THREADS, len(entries))
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="deltacells-fsync") as pool:
        for _ in pool.map(fsync_path, entries):  # every one flushed, the first error raised
            pass
