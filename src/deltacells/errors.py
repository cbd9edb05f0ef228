"""Exceptions and warnings raised by deltacells.

Every exception deltacells raises on purpose derives from :class:`DeltaCellsError`. Problems with
bytes or files that do not follow the format raise :class:`FormatError` (a :class:`ValueError`), whose
message names the object and the field at fault. Problems with what a user asked for raise subclasses
of both :class:`DeltaCellsError` and the usual built-in exception (:class:`InvalidValueError` is a
:class:`ValueError`, :class:`InvalidTypeError` a :class:`TypeError`, :class:`UnknownKeyError` a
:class:`KeyError`, :class:`OutOfRangeError` an :class:`IndexError`, :class:`OutputExistsError` a
:class:`FileExistsError`), with a message that says what to do instead. Anything else that escapes is a
bug.
"""

from __future__ import annotations

__all__ = [
    "CommitConflictError",
    "DatasetNotFoundError",
    "DeltaCellsError",
    "DeltaCellsWarning",
    "DemoMismatchError",
    "DiskFullError",
    "ExceptionPolicyError",
    "FormatError",
    "InternalChangedError",
    "InvalidTypeError",
    "InvalidValueError",
    "MissingObjectError",
    "NotInMemoryError",
    "ObsCacheError",
    "OutOfRangeError",
    "OutputExistsError",
    "PrefixTooShortError",
    "StorageAccessError",
    "StorageError",
    "StorageTimeoutError",
    "UnknownKeyError",
    "UnmappedOptionError",
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


class ExceptionPolicyError(DeltaCellsError, ValueError):
    """A tile has too many exceptions for data that should be raw counts (docs/format.md, decision 7).

    Raised by the writer, naming the tile and the reason; the data are most likely not raw counts.
    """


class ObsCacheError(DeltaCellsError, OSError):
    """The obs cache directory cannot be created or written (read-only, full, not a directory...)."""


class UnsupportedPlatformError(DeltaCellsError, RuntimeError):
    """The host cannot read the format (e.g. a big-endian machine)."""


class InternalChangedError(DeltaCellsError, ImportError):
    """An internal of another library deltacells relies on is not as in the versions deltacells is tested on.

    The message names the internal (see ``deltacells._internals.INTERNALS``), the installed version of its library
    and the versions tested.
    """


class InvalidValueError(DeltaCellsError, ValueError):
    """A value passed to deltacells that it cannot use (counts that are not counts, an option out of range...).

    The message names the value and says what to do instead.
    """


class UnmappedOptionError(InvalidValueError):
    """A storage option that obstore's configuration cannot express: the URL opens with fsspec instead.

    Raised by ``ObstoreStore`` (``open_store`` then opens an ``FsspecStore``, which understands every option of its
    filesystem); the message names the option.
    """


class InvalidTypeError(DeltaCellsError, TypeError):
    """An argument of a type deltacells cannot use (a dtype that cannot hold counts, an obs column's dtype...)."""


class NotInMemoryError(InvalidValueError, AttributeError):
    """An operation that needs the whole matrix in memory, asked of a lazy X; the message names ``.to_memory()``.

    It is also an :class:`AttributeError`, so that ``hasattr(X, "T")`` is simply false.
    """


class UnknownKeyError(DeltaCellsError, KeyError):
    """A name that is not there (an obs column, a layer); the message lists what is."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class OutOfRangeError(DeltaCellsError, IndexError):
    """An index (a cell, a gene, a tile) outside the dataset, or a mask of the wrong length."""


class OutputExistsError(DeltaCellsError, FileExistsError):
    """The output path holds a dataset or other files, and overwriting was not asked for."""


class CommitConflictError(DeltaCellsError, RuntimeError):
    """Another writer committed to the dataset first: this write was not committed, nothing of it is visible.

    Raised by an append whose conditional commit lost (docs/format.md, decision 17); the dataset holds the other
    writer's version. Call again (``write_deltacells(..., append=True)`` retries ``commit_retries`` times by itself).
    """


class PrefixTooShortError(DeltaCellsError):
    """The bytes given to ``deltacells.codec.parse_prefix`` end before the tile's indptr does.

    Not a :class:`~deltacells.FormatError`: the object is large enough for what its
    header claims, the caller fetched too little of it. Fetch the first ``needed``
    bytes and parse again.

    Attributes
    ----------
    needed
        Bytes from offset 0 that hold the header, chunk table and indptr (never more
        than the object size).
    got
        Bytes that were given.
    """

    def __init__(self, needed: int, got: int, name: str = "tile") -> None:
        self.needed = needed
        self.got = got
        self.name = name
        super().__init__(
            f"{name}: the header, chunk table and indptr end at byte {needed}, but only the first {got} bytes "
            f"were given; fetch [0, {needed}) and parse again"
        )

    def __reduce__(self) -> tuple[type[PrefixTooShortError], tuple[int, int, str]]:
        return (type(self), (self.needed, self.got, self.name))


class StorageError(DeltaCellsError, OSError):
    """Reading or writing an object failed (after the retries of transient errors); names the object's URL."""


class StorageAccessError(StorageError, PermissionError):
    """The storage refused access to an object (HTTP 403, a local permission); credentials are the likely cause."""


class StorageTimeoutError(StorageError, TimeoutError):
    """An object request got no answer in time, every attempt; names the object's URL and the timeout."""


class DiskFullError(StorageError):
    """A write ran out of space (``errno.ENOSPC``); names the dataset and says what it left (never a torn dataset)."""


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
    import warnings

    package_dir = str(pathlib.Path(__file__).parent)
    if sys.version_info >= (3, 12):
        warnings.warn(message, category, skip_file_prefixes=(package_dir,))
        return
    # Python 3.11 has no skip_file_prefixes: count the package's frames (inspect's public access to them).
    import inspect

    frame, level = inspect.currentframe(), 1
    while frame is not None and frame.f_back is not None and frame.f_code.co_filename.startswith(package_dir):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


class MissingObjectError(FormatError, FileNotFoundError):
    """An object the manifest promises (a tile, a shard, a sidecar file) is not there."""


class DemoMismatchError(DeltaCellsError, RuntimeError):
    """The demo read back data that differ from what it wrote: a bug in deltacells (please report it)."""


#: What the errors about data that are not raw counts suggest (the command line rewrites it as its options).
RAW_COUNTS_HINT = (
    "deltacells stores raw counts; pass the raw counts instead "
    "(with write_deltacells: layer=NAME for a layer that holds them, or raw=True for .raw)"
)
