"""Findings and the corpus: failure signatures, corpus file names, known signatures, and replay.

A saved input is named ``<target>-<signature>-<sha1[:12]>.<ext>``; its ``<target>-<signature>`` prefix is
what makes a finding *known* (one input per signature is kept).
"""

from __future__ import annotations

import contextlib
import faulthandler
import hashlib
import os
import re
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .oracles import PropertyViolation, make_oracle
from .targets import EXTENSIONS, TARGETS

#: Parts of the file names of this harness (the entry script, the package): its frames never name a failure.
_HARNESS_FILES = ("fuzz_decode", f"{os.sep}deltacells_fuzz{os.sep}")


def signature(target: str, error: BaseException) -> str:
    """What identifies a failure: the exception type and the innermost deltacells function it came through."""
    if isinstance(error, PropertyViolation):
        return f"property-{error.kind}"
    where = "unknown"
    for frame in traceback.extract_tb(error.__traceback__):
        # comprehension frames exist before Python 3.12 only (PEP 709): name the function around them
        harness = any(part in frame.filename for part in _HARNESS_FILES)
        if "deltacells" in frame.filename and not harness and not frame.name.startswith("<"):
            where = frame.name
    return f"{type(error).__name__}-{where}"


def corpus_name(target: str, sig: str, data: bytes) -> str:
    """File name of a saved input: ``<target>-<signature>-<sha1[:12]>.<ext>``."""
    slug = re.sub(r"[^A-Za-z0-9_]+", "_", sig).strip("_")[:60]
    return f"{target}-{slug}-{hashlib.sha1(data).hexdigest()[:12]}.{EXTENSIONS[target]}"


def target_of(path: Path) -> str:
    """The target a corpus file belongs to (from its name)."""
    for target in sorted(TARGETS, key=len, reverse=True):
        if path.name.startswith(target + "-"):
            return target
    msg = f"{path.name}: corpus files are named <target>-<signature>-<hash>.<ext>, target one of {TARGETS}"
    raise ValueError(msg)


def known_signatures(directory: Path) -> set[str]:
    """``target-slug`` prefixes of the inputs already in a corpus directory."""
    known = set()
    for path in directory.glob("*-*-*.*"):
        with contextlib.suppress(ValueError):
            target_of(path)
            known.add(path.name.rsplit("-", 1)[0])
    return known


def replay(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Run the oracle of each saved input; ``ok`` is False when the property still fails."""
    results = []
    oracles: dict[str, Callable[[bytes], str]] = {}
    for path in paths:
        target = target_of(path)
        oracle = oracles.get(target)
        if oracle is None:
            oracle = oracles[target] = make_oracle(target)
        data = path.read_bytes()
        faulthandler.dump_traceback_later(60, exit=True)
        try:
            outcome = oracle(data)
            results.append({"file": path.name, "target": target, "ok": True, "outcome": outcome})
        except Exception as exc:
            results.append(
                {
                    "file": path.name,
                    "target": target,
                    "ok": False,
                    "signature": signature(target, exc),
                    "outcome": f"{type(exc).__name__}: {exc}"[:500],
                }
            )
        finally:
            faulthandler.cancel_dump_traceback_later()
    return results
