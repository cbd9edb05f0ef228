"""What a validation found: :class:`ValidationReport`, and the collector that gathers the problems."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from deltacells.format import Problem, problem_from_error
from deltacells.validate._staging import StaleStaging

__all__ = ["Collector", "Problem", "ValidationReport"]


@dataclass
class ValidationReport:
    """What :func:`validate_dataset` found.

    Attributes
    ----------
    path
        The dataset checked (as given).
    problems
        Every problem found, in the order of the checks: manifest, files present (flags, stray tiles and
        shards), sidecar contents, tiles (in tile order), obs, ``anndata.zarr``.
    n_tiles
        Tiles the manifest lists (0 when it cannot be read).
    n_shards
        obs shards the manifest lists.
    tiles_checked
        Tiles fetched and decoded (whether or not they had a problem).
    shards_checked
        obs shards fetched and checked.
    nnz_checked
        Nonzeros checked: those of the tiles that decoded (the manifest's count stands in for a tile that
        did not, so that the figure covers every tile it lists).
    bytes_checked
        Bytes of the tiles read.
    staging
        What killed writers left at the root (staging prefixes no commit names, with their ages): not a problem
        of the dataset, which reads whole without them, but storage to reclaim with
        :func:`~deltacells.validate.remove_staging` (``deltacells validate --remove-staging``).
    """

    path: str
    problems: list[Problem] = field(default_factory=list)
    n_tiles: int = 0
    n_shards: int = 0
    tiles_checked: int = 0
    shards_checked: int = 0
    nnz_checked: int = 0
    bytes_checked: int = 0
    staging: list[StaleStaging] = field(default_factory=list)

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
            "staging": [s.to_dict() for s in self.staging],
        }

    def __str__(self) -> str:
        head = (
            f"{self.path}: {self.tiles_checked} of {self.n_tiles} tiles and {self.shards_checked} of "
            f"{self.n_shards} obs shards checked, "
        )
        if self.ok:
            lines = [head + "no problems"]
        else:
            lines = [head + f"{len(self.problems)} problem{'s' if len(self.problems) != 1 else ''}:"]
            lines += [f"  {p}" for p in self.problems]
        lines += [f"  not part of the dataset: {s.describe()}" for s in self.staging]
        return "\n".join(lines)


class Collector:
    """The problems found so far, each recorded once."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self._seen: set[tuple[str, str]] = set()

    def __call__(self, problem: Problem) -> None:
        """Record ``problem`` (the sink of :func:`deltacells.format.collect`)."""
        key = (problem.object, problem.message)
        if key not in self._seen:
            self._seen.add(key)
            self.problems.append(problem)

    def add(self, obj: str, message: str | BaseException) -> None:
        """Record a problem of ``obj``: a message, or the exception that reported it."""
        self(Problem(obj, message) if isinstance(message, str) else problem_from_error(obj, message))
