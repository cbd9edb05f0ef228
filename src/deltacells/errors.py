"""Exceptions and warnings raised by deltacells.

Every problem with bytes or files that do not follow the format raises
:class:`FormatError` (a :class:`ValueError`), whose message names the object and
the field at fault. Problems with what a user asked for raise the usual built-in
exceptions (:class:`ValueError`, :class:`TypeError`, :class:`FileExistsError`)
with a message that says what to do instead.
"""

from __future__ import annotations

import warnings

__all__ = [
    "DatasetNotFoundError",
    "DeltaCellsError",
    "DeltaCellsWarning",
    "FormatError",
    "MissingObjectError",
    "UnsupportedPlatformError",
    "warn",
]


class DeltaCellsError(Exception):
    """Base class of every exception that deltacells defines."""


class FormatError(DeltaCellsError, ValueError):
    """Bytes, files or metadata that do not follow the deltacells format.

    The message names the object (a tile, ``manifest.json``, a shard) and the
    field at fault, e.g. ``"tile_000003.dct: header field n_genes is 0, must be
    1 .. 2^31"``.
    """


class DatasetNotFoundError(FormatError, FileNotFoundError):
    """A path that holds no complete dataset (no ``manifest.json``)."""


class UnsupportedPlatformError(DeltaCellsError, RuntimeError):
    """The host cannot read the format (e.g. a big-endian machine)."""


class DeltaCellsWarning(UserWarning):
    """Warnings emitted by deltacells (e.g. float32 losing exactness)."""


def warn(message: str, category: type[Warning] = DeltaCellsWarning) -> None:
    """Emit a warning attributed to the first caller outside deltacells.

    Parameters
    ----------
    message
        The text of the warning.
    category
        The warning class; :class:`DeltaCellsWarning` by default.
    """
    import pathlib
    import sys

    package_dir = str(pathlib.Path(__file__).parent)
    # warnings.warn(skip_file_prefixes=...) needs Python 3.12: count the package's frames instead.
    frame, level = sys._getframe(1), 2
    while frame.f_back is not None and frame.f_code.co_filename.startswith(package_dir):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


class MissingObjectError(FormatError, FileNotFoundError):
    """An object the manifest promises (a tile, a shard, a sidecar file) is not there."""
