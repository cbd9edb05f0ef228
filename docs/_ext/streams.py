"""Merge a cell's stream outputs exactly, before myst-nb renders them.

A kernel may deliver one command's output in chunks that end mid-line (IPython's ``%%bash`` reads
100 bytes at a time). myst-nb's ``nb_merge_streams`` strips each chunk and adds a newline, which
breaks lines at the chunk boundaries. This extension concatenates the chunks of each stream as they
came, then lets myst-nb's own merge do the rest (carriage returns, stderr after stdout).
"""

from __future__ import annotations

import copy
from typing import Any

from sphinx.application import Sphinx


def setup(app: Sphinx) -> dict[str, Any]:
    """Wrap myst-nb's stream merging."""
    from myst_nb.core import render

    original = render.coalesce_streams
    if getattr(original, "_exact", False):
        return {"parallel_read_safe": True, "parallel_write_safe": True}

    def coalesce_streams(outputs: list[Any]) -> list[Any]:
        merged: list[Any] = []
        streams: dict[str, Any] = {}
        for output in outputs or []:
            if output["output_type"] != "stream":
                merged.append(output)
            elif output["name"] in streams:
                streams[output["name"]]["text"] += output["text"]
            else:
                output = copy.deepcopy(output)
                streams[output["name"]] = output
                merged.append(output)
        return original(merged)

    coalesce_streams._exact = True  # type: ignore[attr-defined]
    render.coalesce_streams = coalesce_streams
    return {"parallel_read_safe": True, "parallel_write_safe": True}
