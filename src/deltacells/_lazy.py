"""Public names that import their module on first use (PEP 562), so that importing a package stays cheap."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(
    package: str,
    where: Mapping[str, str],
    namespace: dict[str, Any],
    before_import: Callable[[str], None] | None = None,
) -> tuple[Callable[..., Any], Any]:
    """``__getattr__`` and ``__dir__`` for ``package``, whose names ``where[name]`` lives in that module.

    A name, once loaded, is stored in the package's ``namespace`` so that later lookups skip ``__getattr__``.
    ``before_import(name)``, if given, is called before a name's module is imported.
    """

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            msg = f"module {package!r} has no attribute {name!r}"
            raise AttributeError(msg)
        if before_import is not None:
            before_import(name)
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__
