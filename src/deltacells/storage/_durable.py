"""Making files on a local disk survive a crash or a power loss: ``fsync`` of the files and their directories.

A rename makes a file appear whole to other processes at once, but until the file's data and the directory
entry naming it reach the disk, a power loss may leave it empty or missing (ext4, XFS and APFS all allow
that). A dataset is made durable before its manifest names it, and the manifest after (see
:meth:`~deltacells.storage.BaseStore.sync`). What each platform guarantees:

* Linux: ``fsync`` of a file writes its data and metadata to the device and flushes the device's cache; the
  ``fsync`` of a directory does the same for its entries (a new name, a rename).
* macOS: ``fsync`` leaves the data in the drive's cache; ``F_FULLFSYNC`` (used here) flushes it.
* Windows: ``fsync`` (``FlushFileBuffers``) flushes a file; a directory cannot be opened to flush, and NTFS
  journals its entries itself.

On object stores a write that returned is already durable: nothing is done there.
"""

from __future__ import annotations

import contextlib
import os
import sys

__all__ = ["fsync_path", "fsync_tree"]


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


def fsync_tree(path: str, root: str) -> None:
    """Flush ``path`` (a file, or a directory and everything in it), then each directory from its own up to ``root``.

    The directories above it are flushed too, since their entries name it (a new directory is an entry of its
    parent). Nothing is done for a missing ``path``.
    """
    if not os.path.exists(path):
        return
    if os.path.isdir(path):
        for directory, _, files in os.walk(path, topdown=False):
            for name in files:
                fsync_path(os.path.join(directory, name))
            fsync_path(directory)
    else:
        fsync_path(path)
    root = os.path.abspath(root)
    directory = os.path.dirname(os.path.abspath(path))
    while directory.startswith(root):
        fsync_path(directory)
        if directory == root:
            break
        directory = os.path.dirname(directory)
