"""Deprecated: the name :mod:`deltacells.core` had before it stopped sitting beside ``deltacells.datasets``.

``deltacells.dataset.Collection`` and the other names still work, with a ``FutureWarning`` pointing at
``deltacells.core`` (``deltacells.open_dataset``, ``deltacells.Dataset`` and ``deltacells.DatasetWriter`` at the top
level are unchanged).
"""

from __future__ import annotations

from typing import Any

from deltacells.errors import warn_renamed

__all__: list[str] = []


def __getattr__(name: str) -> Any:
    import deltacells.core

    if name.startswith("__") or name not in deltacells.core.__all__:
        msg = f"module 'deltacells.dataset' has no attribute {name!r} (it is deltacells.core now)"
        raise AttributeError(msg)
    warn_renamed(f"deltacells.dataset.{name}", f"deltacells.core.{name}")
    return getattr(deltacells.core, name)
