"""Fetching the objects of a dataset without raising: a failure becomes a problem, not an exception."""

from __future__ import annotations

from deltacells.storage import Store
from deltacells.validate._report import Collector, error_message


def listdir(store: Store, name: str) -> set[str]:
    """The entries of directory ``name``; empty when it cannot be listed."""
    try:
        return store.listdir(name)
    except Exception:  # listing is a courtesy; the reads below report what matters
        return set()


def read_object(store: Store, name: str, found: Collector) -> bytes | None:
    """The bytes of ``name``, or None after recording why they cannot be had."""
    try:
        return store.read(name)
    except FileNotFoundError:
        found.add(name, "missing")
    except Exception as exc:
        found.add(name, f"cannot be read ({error_message(exc)})")
    return None


def present(store: Store, name: str) -> bool:
    """Whether ``name`` exists; true when that cannot be told (the read then reports why)."""
    try:
        return store.exists(name)
    except Exception:
        return True  # let the read report it
