"""Fetching the objects of a dataset without raising: a failure becomes a problem, not an exception."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from deltacells.storage import BaseStore
    from deltacells.validate._report import Collector


def list_entries(store: BaseStore, prefix: str) -> list[str]:
    """The entries directly under ``prefix``; empty when they cannot be listed."""
    try:
        return store.list(prefix)
    except Exception:  # listing is a courtesy; the reads report what matters
        return []


def read_object(store: BaseStore, name: str, found: Collector) -> bytes | None:
    """The bytes of ``name``, or None after recording why they cannot be had."""
    try:
        return store.read(name)
    except FileNotFoundError:
        found.add(name, "missing")
    except Exception as exc:  # a validator reports, it does not crash
        found.add(name, exc)
    return None
