"""``RowSource``: a dataset and a collection are both row sources, with the same signatures (issue 43)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import deltacells
from deltacells.core import Collection, Dataset, RowSource, open_dataset
from deltacells.datasets import synthetic_counts

METHODS = [
    name
    for name, member in vars(RowSource).items()
    if not name.startswith("_") and callable(member) and not isinstance(member, property)
]
PROPERTIES = [name for name, member in vars(RowSource).items() if isinstance(member, property)]


def test_the_protocol_names_what_the_readers_use() -> None:
    assert {"read_rows", "read_rows_uncached", "read_row_batches", "chunk_starts", "submit_tile_fetch"} <= set(METHODS)
    assert {"shape", "n_cells", "n_tiles", "tile_starts", "tile_bytes", "threads"} <= set(PROPERTIES)


def test_a_dataset_and_a_collection_are_row_sources(tmp_path: Path) -> None:
    paths = []
    for i in range(2):
        paths.append(tmp_path / f"d{i}.deltacells")
        adata = synthetic_counts(50, 30, seed=i)
        adata.obs_names = [f"d{i}-{n}" for n in adata.obs_names]
        deltacells.write_deltacells(adata, paths[-1], progress=False)
    dataset = open_dataset(paths[0])
    collection = deltacells.read_deltacells(paths).X.dataset
    assert isinstance(collection, Collection)
    for source in (dataset, collection):
        assert isinstance(source, RowSource)
        for name in PROPERTIES:
            getattr(source, name)  # every property answers
    assert not isinstance(object(), RowSource)


@pytest.mark.parametrize("name", METHODS)
def test_both_have_the_protocols_signature(name: str) -> None:
    expected = inspect.signature(getattr(RowSource, name))
    for cls in (Dataset, Collection):
        got = inspect.signature(getattr(cls, name))
        assert list(got.parameters) == list(expected.parameters), f"{cls.__name__}.{name}"
        for param in expected.parameters.values():
            assert got.parameters[param.name].kind == param.kind, f"{cls.__name__}.{name}({param.name})"
            assert str(got.parameters[param.name].annotation) == str(param.annotation), f"{cls.__name__}.{name}"
