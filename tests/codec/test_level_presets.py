"""zstd level presets: ``"default"`` and ``"archive"`` name integer levels; bad levels are refused clearly."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

import deltacells
from deltacells.codec import ARCHIVE_LEVEL, DEFAULT_LEVEL, resolve_level
from deltacells.errors import InvalidTypeError, InvalidValueError


def small_csr(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    m = sparse.random(300, 200, density=0.1, format="csr", random_state=seed, dtype=np.float64)
    m.data = np.ceil(m.data * 20).astype(np.int64)
    m.sort_indices()
    return m.indptr, m.indices, m.data.astype(np.int32), m.shape[1]


def test_presets_map_to_levels() -> None:
    assert resolve_level("default") == DEFAULT_LEVEL
    assert resolve_level("archive") == ARCHIVE_LEVEL
    assert 1 <= DEFAULT_LEVEL < ARCHIVE_LEVEL <= 22  # zstd's levels (the bounds: test_integers_are_themselves)


@pytest.mark.parametrize("level", range(1, 23))
def test_integers_are_themselves(level: int) -> None:
    assert resolve_level(level) == level
    assert type(resolve_level(np.int64(level))) is int


@pytest.mark.parametrize(("text", "level"), [(" Archive ", ARCHIVE_LEVEL), ("DEFAULT", DEFAULT_LEVEL), ("7", 7)])
def test_names_are_forgiving(text: str, level: int) -> None:
    assert resolve_level(text) == level


@pytest.mark.parametrize("name", ["fastest", "", "max", "19.5"])
def test_unknown_names(name: str) -> None:
    with pytest.raises(InvalidValueError, match=f"unknown zstd level {name!r}: pass an integer 1 .. 22 or one of"):
        resolve_level(name)


@pytest.mark.parametrize("level", [0, -1, 23, 100, "0", "23"])
def test_out_of_range(level: int | str) -> None:
    with pytest.raises(InvalidValueError, match=r"zstd level -?\d+ is out of range: pass an integer 1 \.\. 22"):
        resolve_level(level)


@pytest.mark.parametrize("level", [3.0, True, None, [3]])
def test_wrong_types(level: object) -> None:
    with pytest.raises(
        InvalidTypeError, match="the zstd level must be an integer 1 .. 22 or one of 'default', 'archive'"
    ):
        resolve_level(level)  # type: ignore[arg-type]


def test_encode_tile_takes_presets() -> None:
    m = small_csr()
    default = deltacells.encode_tile(*m)
    assert deltacells.encode_tile(*m, level="default") == default == deltacells.encode_tile(*m, level=DEFAULT_LEVEL)
    archive = deltacells.encode_tile(*m, level="archive")
    assert archive == deltacells.encode_tile(*m, level=ARCHIVE_LEVEL)
    for blob in (default, archive):
        got = deltacells.decode_tile(blob)
        assert np.array_equal(got.indptr, m[0]) and np.array_equal(got.indices, m[1])
        assert np.array_equal(got.data, m[2])


@pytest.mark.parametrize("level", ["turbo", 0, 23])
def test_encode_tile_refuses_bad_levels(level: object) -> None:
    with pytest.raises(InvalidValueError, match="zstd level"):
        deltacells.encode_tile(*small_csr(), level=level)  # type: ignore[arg-type]
