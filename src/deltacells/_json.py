"""Parsing the format's small JSON documents (``manifest.json``, ``obs/schema.json``) safely."""

from __future__ import annotations

import json
from typing import Any

from deltacells.errors import FormatError


def parse_json(text: str | bytes, *, where: str) -> Any:
    """Decode JSON text, turning every way it can fail into a :class:`FormatError` naming ``where``.

    Besides syntax errors this covers bytes that are not UTF-8, integers too long for Python to
    parse (a ``ValueError``) and nesting too deep for its parser (a ``RecursionError``).
    """
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        msg = f"{where}: not valid JSON ({type(exc).__name__}: {str(exc)[:200]})"
        raise FormatError(msg) from exc
