"""One name per idea: a parameter that ``read_deltacells`` and ``CellLoader`` share means the same and has one type."""

from __future__ import annotations

import inspect

import deltacells

#: Shared names whose type differs on purpose: the loader's ``None`` there means "the AnnData's own".
DIFFERENT_ON_PURPOSE = {
    "gene_order": "None: the gene order the AnnData was read with",
    "obs_columns": "the loader's default reads no obs (a batch carries only what it is asked for)",
    "dtype": "the loader's batches are float32 by default (what models take), reads the dtype written",
}


def test_shared_parameters_have_one_type() -> None:
    read = inspect.signature(deltacells.read_deltacells).parameters
    loader = inspect.signature(deltacells.CellLoader).parameters
    shared = (set(read) & set(loader)) - set(DIFFERENT_ON_PURPOSE)
    assert {"cache_dir", "verify_obs", "storage_options", "threads", "join", "keys", "label", "var_key"} <= shared
    for name in sorted(shared):
        assert str(read[name].annotation) == str(loader[name].annotation), name
        assert read[name].default == loader[name].default, name


def test_the_loader_says_verify_obs() -> None:
    assert "verify" not in inspect.signature(deltacells.CellLoader).parameters
