"""Whether the writer found the stored obs names unique: a flag in the manifest's free-form ``metadata``.

anndata checks that obs names are unique each time it builds an AnnData (it warns otherwise), which costs
hashing every name: most of the time of opening a million cells with their names. The writer hashes them
once, as it stores them, and says so in the manifest, so that the reader need not check again::

    "metadata": {"deltacells": {"obs_names_unique": true}}

The flag is written only when every stored name (the obs column ``_index``) differs from every other. An
append keeps it: it refuses new names that repeat each other or a stored one. A reader that does not find
it (a dataset of another writer, or names that repeat) lets anndata check as usual. Readers that know only
the format ignore it.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["OBS_NAMES_UNIQUE", "obs_names_unique", "with_obs_names_unique"]

#: The key of ``metadata["deltacells"]`` that says the stored obs names are unique.
OBS_NAMES_UNIQUE: Final = "obs_names_unique"


def obs_names_unique(metadata: Any) -> bool:
    """Whether a manifest's ``metadata`` says that the writer found the stored obs names unique."""
    entry = metadata.get("deltacells") if isinstance(metadata, dict) else None
    return isinstance(entry, dict) and entry.get(OBS_NAMES_UNIQUE) is True


def with_obs_names_unique(metadata: dict[str, Any] | None, unique: bool) -> dict[str, Any]:
    """A copy of a manifest's ``metadata`` that says whether the stored obs names are unique (no flag when not)."""
    metadata = dict(metadata or {})
    entry = metadata.get("deltacells")
    entry = dict(entry) if isinstance(entry, dict) else {}
    if unique:
        entry[OBS_NAMES_UNIQUE] = True
    else:
        entry.pop(OBS_NAMES_UNIQUE, None)
    if entry:
        metadata["deltacells"] = entry
    else:
        metadata.pop("deltacells", None)
    return metadata
