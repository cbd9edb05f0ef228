"""``manifest.json``: every rule checked, and what it promises, as far as it could be read."""

from __future__ import annotations

from typing import TYPE_CHECKING

from deltacells.format import MANIFEST_NAME, ManifestFields, check_manifest_text, collect

if TYPE_CHECKING:
    from deltacells.storage import BaseStore
    from deltacells.validate._report import Collector


def check_manifest(store: BaseStore, found: Collector) -> ManifestFields | None:
    """Check the manifest; return the fields that could be read (None when nothing can be interpreted)."""
    try:
        text = store.read(MANIFEST_NAME)
    except FileNotFoundError:
        try:
            exists = store.exists("")
        except Exception:
            exists = True
        what = (
            "missing: this is not a deltacells dataset, or one whose writing did not finish (the manifest is "
            "written last)"
            if exists
            else f"missing: {store.url} does not exist"
        )
        found.add(MANIFEST_NAME, what)
        return None
    except Exception as exc:  # a validator reports, it does not crash
        found.add(MANIFEST_NAME, exc)
        return None
    return collect(check_manifest_text(text), found)
