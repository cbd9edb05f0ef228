"""Resolve references to deltacells objects by the public name they are documented under.

Docstrings and type hints often name an object by the module that defines it
(``deltacells.io._lazy.TiledCSRDataset``, ``deltacells.core.Dataset``) while the API
reference documents it where users import it from (``deltacells.TiledCSRDataset``). When
a ``py`` reference to ``deltacells.*`` does not resolve, look for the one documented object
whose dotted name ends the same way and point the reference there.
"""

from __future__ import annotations

from typing import Any

from sphinx.application import Sphinx


def _resolve(app: Sphinx, env: Any, node: Any, contnode: Any) -> Any:
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    if not target.startswith("deltacells."):
        if not target.isidentifier():
            return None
        target = f"deltacells.{target}"  # a bare name (e.g. in an autosummary table): look for it too
    domain = env.get_domain("py")
    parts = target.split(".")
    # The shortest suffix first ("Name"), then longer ones ("Class.member"); an ambiguous one is skipped.
    for start in range(len(parts) - 1, 0, -1):
        suffix = ".".join(parts[start:])
        matches = [name for name, entry in domain.objects.items() if name.endswith(f".{suffix}") and not entry.aliased]
        if len(matches) == 1:
            for reftype in (node["reftype"], "obj"):
                resolved = domain.resolve_xref(env, node["refdoc"], app.builder, reftype, matches[0], node, contnode)
                if resolved is not None:
                    return resolved
    return None


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the handler."""
    app.connect("missing-reference", _resolve)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
