"""What a validation found: :class:`Problem`, :class:`ValidationReport`, and the collector that gathers them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from deltacells.errors import FormatError


@dataclass(frozen=True)
class Problem:
    """One problem found in a dataset.

    Attributes
    ----------
    object
        The object at fault, relative to the dataset root (``"manifest.json"``, ``"tiles/tile_000003.dct"``,
        ``"obs/obs_0001.parquet"``...).
    message
        What is wrong with it.
    """

    object: str
    message: str

    def __str__(self) -> str:
        return f"{self.object}: {self.message}"


@dataclass
class ValidationReport:
    """What :func:`validate_dataset` found.

    Attributes
    ----------
    path
        The dataset checked (as given).
    problems
        Every problem found, in the order of the checks: manifest, files present (flags, stray tiles and
        shards), sidecar contents, tiles (in tile order), obs.
    n_tiles
        Tiles the manifest lists (0 when it cannot be read).
    n_shards
        obs shards the manifest lists.
    tiles_checked
        Tiles fetched and decoded (whether or not they had a problem).
    shards_checked
        obs shards fetched and checked.
    nnz_checked
        Nonzeros decoded from the tiles.
    bytes_checked
        Bytes of the tiles read.
    """

    path: str
    problems: list[Problem] = field(default_factory=list)
    n_tiles: int = 0
    n_shards: int = 0
    tiles_checked: int = 0
    shards_checked: int = 0
    nnz_checked: int = 0
    bytes_checked: int = 0

    @property
    def ok(self) -> bool:
        """Whether no problem was found."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict (what ``deltacells validate --json`` prints)."""
        return {
            "path": self.path,
            "ok": self.ok,
            "n_tiles": self.n_tiles,
            "n_shards": self.n_shards,
            "tiles_checked": self.tiles_checked,
            "shards_checked": self.shards_checked,
            "nnz_checked": self.nnz_checked,
            "bytes_checked": self.bytes_checked,
            "problems": [{"object": p.object, "message": p.message} for p in self.problems],
        }

    def __str__(self) -> str:
        head = (
            f"{self.path}: {self.tiles_checked} of {self.n_tiles} tiles and {self.shards_checked} of "
            f"{self.n_shards} obs shards checked, "
        )
        if self.ok:
            return head + "no problems"
        lines = [head + f"{len(self.problems)} problem{'s' if len(self.problems) != 1 else ''}:"]
        lines += [f"  {p}" for p in self.problems]
        return "\n".join(lines)


class Collector:
    """The problems found so far: deduplicated, with the object's name stripped from messages."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self._seen: set[tuple[str, str]] = set()

    def add(self, obj: str, message: str | BaseException) -> None:
        """Record a problem of ``obj`` (a message or the exception that reported it), once."""
        text = error_message(message)
        prefix = f"{obj}: "
        while text.startswith(prefix):
            text = text[len(prefix) :]
        key = (obj, text)
        if key not in self._seen:
            self._seen.add(key)
            self.problems.append(Problem(obj, text))


def error_message(error: str | BaseException) -> str:
    """The text of a problem: a message as is, a :class:`FormatError`'s message, else ``Type: message``."""
    if isinstance(error, str):
        return error
    if isinstance(error, FormatError):
        return str(error)
    text = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
