"""Collections and appends give what ``anndata.concat`` gives for the same AnnDatas (issue 41, items 2, 3, 6, 7, 8).

anndata is the oracle: each case builds AnnDatas in memory, writes each with ``write_deltacells``, reads them
as a collection (``read_deltacells([...], join=..., merge=...)``, eager and lazy obs) or appends them one by
one, and compares obs (dtypes, category order, values and missing ones), var (the columns of each ``merge``
strategy), obs names and X with ``anndata.concat`` of the AnnDatas, on whichever anndata and pandas are
installed (0.12 with pandas 2, 0.13 with pandas 3): nothing expected is typed here. The cases follow those
of anndata's own ``test_concatenate.py`` (categories kept, ordered ones retained or made object, categories
beside strings, bool promotion, missing names, an empty axis, repeated columns).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
from scipy import sparse

import deltacells
from deltacells.errors import InvalidTypeError, InvalidValueError
from deltacells.format import APPEND_PREFIX, MANIFEST_NAME

N_GENES = 12
TILE = 8


def _values(kind: str, n: int, rng: np.random.Generator) -> Any:
    """``n`` values of an obs column of ``kind``: each kind obs stores, with missing values where it can."""
    pick = rng.integers(0, 3, n)
    if kind.startswith(("cat", "ordered")):
        categories = {
            "cat": ["GW16_1", "GW16_2", "GW16_10"],
            "cat_other": ["GW16_3", "GW16_2"],
            "cat_perm": ["GW16_10", "GW16_2", "GW16_1"],
            "cat_int": [3, 1, 2],
            "ordered": ["low", "mid", "high"],
            "ordered_other": ["low", "high"],
        }[kind]
        codes = pick % len(categories)
        codes[::7] = -1  # missing values
        return pd.Categorical.from_codes(codes, categories=categories, ordered=kind.startswith("ordered"))
    makers: dict[str, Callable[[], Any]] = {
        "int64": lambda: pick.astype(np.int64),
        "int32": lambda: pick.astype(np.int32),
        "float32": lambda: pick.astype(np.float32) / 2,
        "float64": lambda: np.where(pick == 0, np.nan, pick / 3),
        "bool": lambda: pick > 0,
        "boolean": lambda: pd.array([None if p == 0 else bool(p - 1) for p in pick], dtype="boolean"),
        "Int64": lambda: pd.array([None if p == 0 else int(p) for p in pick], dtype="Int64"),
        "text": lambda: [f"t{p}" for p in pick],  # the running pandas' default string dtype
        "string": lambda: pd.array([None if p == 0 else f"s{p}" for p in pick], dtype="string"),
    }
    return makers[kind]()


#: Pairs of column kinds (``None``: the dataset lacks the column) joined in one collection of two datasets.
PAIRS = [
    ("cat", "cat"),
    ("cat", "cat_other"),  # categories unioned, in natural order (GW16_2 before GW16_10)
    ("cat", "cat_perm"),  # the same categories in another order: the first dataset's
    ("cat_perm", "cat_other"),
    ("cat", None),
    (None, "cat_other"),
    ("cat_int", "cat_int"),
    ("cat", "text"),  # categories beside strings: object (pandas 3: str)
    ("cat", "int64"),
    ("ordered", "ordered"),  # ordered categoricals retained
    ("ordered", "ordered_other"),  # ordered ones that differ: object
    ("ordered", "cat"),
    ("ordered", None),
    ("int64", "int64"),
    ("int64", "int32"),
    ("int32", "float32"),
    ("int64", None),  # missing cells: float64
    ("float32", None),
    ("Int64", None),
    ("Int64", "int64"),
    ("bool", "bool"),
    ("bool", None),  # missing cells: boolean
    (None, "bool"),
    ("bool", "boolean"),
    ("bool", "int64"),
    ("text", "text"),
    ("text", None),
    ("string", "text"),
    ("string", None),
]


def _counts(n: int, seed: int) -> sparse.csr_matrix:
    rng = np.random.default_rng(seed)
    counts = sparse.random(n, N_GENES, density=0.4, format="csr", random_state=seed, dtype=np.float64)
    counts.data = rng.integers(1, 30, counts.nnz).astype(np.float64)
    return counts.astype(np.float32)


def _adata(name: str, n: int, seed: int, obs: dict[str, Any], genes: list[str] | None = None) -> ad.AnnData:
    genes = genes if genes is not None else [f"g{i}" for i in range(N_GENES)]
    frame = pd.DataFrame(obs, index=[f"{name}{i}" for i in range(n)])
    return ad.AnnData(_counts(n, seed), obs=frame, var=pd.DataFrame(index=genes))


def _write(root: Path, adatas: dict[str, ad.AnnData]) -> list[Path]:
    paths = []
    for name, adata in adatas.items():
        path = root / name
        deltacells.write_deltacells(adata, path, tile_size=TILE, progress=False)
        paths.append(path)
    return paths


def _concat(adatas: dict[str, ad.AnnData], **options: Any) -> ad.AnnData:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anndata and pandas on the join of all-missing columns
        return ad.concat(adatas, label="dataset", **options)


def _assert_lazy_obs_equal(lazy: Any, expected: pd.DataFrame) -> None:
    """A lazy obs answers as the expected pandas one: columns, dtypes, every column's values."""
    assert list(lazy.columns) == list(expected.columns)
    assert dict(lazy.dtypes) == dict(expected.dtypes)
    for column in expected.columns:
        pd.testing.assert_series_equal(lazy[column], expected[column], check_index=False)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, ad.AnnData], list[Path]]:
    """Two datasets holding one column per pair of kinds (``PAIRS``): ``x0`` of kind ``PAIRS[0]``..."""
    rng = np.random.default_rng(3)
    obs: list[dict[str, Any]] = [{}, {}]
    n = (37, 29)
    for i, pair in enumerate(PAIRS):
        for k, kind in enumerate(pair):
            if kind is not None:
                obs[k][f"x{i}"] = _values(kind, n[k], rng)
    genes_b = [f"g{i}" for i in range(4, N_GENES + 4)]  # genes overlapping by two thirds
    adatas = {"a": _adata("a", n[0], 1, obs[0]), "b": _adata("b", n[1], 2, obs[1], genes_b)}
    return adatas, _write(tmp_path_factory.mktemp("pairs"), adatas)


@pytest.mark.parametrize("join", ["inner", "outer"])
def test_every_kind_of_obs_column_joins_as_concat_joins_it(pairs, tmp_path: Path, join: str) -> None:
    """Items 6 and 3: dtypes, category order, values and missing ones of every joined column, eager and lazy."""
    adatas, paths = pairs
    expected = _concat(adatas, join=join)
    eager = deltacells.read_deltacells(paths, join=join, lazy_obs=False, cache_dir=tmp_path / "cache")
    pd.testing.assert_frame_equal(eager.obs, expected.obs)
    for name, dtype in expected.obs.dtypes.items():  # the order of the categories too
        if isinstance(dtype, pd.CategoricalDtype):
            assert list(eager.obs[name].cat.categories) == list(dtype.categories), name
    lazy = deltacells.read_deltacells(paths, join=join, lazy_obs=True, cache_dir=tmp_path / "cache")
    _assert_lazy_obs_equal(lazy.obs, expected.obs)
    cells = np.random.default_rng(0).choice(eager.n_obs, 25, replace=False)
    pd.testing.assert_frame_equal(lazy[cells].to_memory().obs, expected[cells].copy().obs)
    assert list(eager.var_names) == list(expected.var_names)
    assert (eager.X[:] != sparse.csr_matrix(expected.X, dtype=np.float32)).nnz == 0


def test_categories_in_the_order_concat_gives_across_three_datasets(tmp_path: Path) -> None:
    """anndata's test_concat_categories_maintain_dtype and _ordered_categoricals_retained, as a collection."""
    values = {"a": list("aabcc"), "b": list("bccdd"), "c": list("bccdd")}
    adatas = {
        name: _adata(
            name, 5, k, {"cat": pd.Categorical(values[name]), "cat_ordered": pd.Categorical(values[name], ordered=True)}
        )
        for k, name in enumerate("abc")
    }
    adatas["c"].obs = adatas["c"].obs.drop(columns=["cat"])
    paths = _write(tmp_path, adatas)
    for join in ("inner", "outer"):
        expected = _concat(adatas, join=join).obs
        got = deltacells.read_deltacells(paths, join=join, cache_dir=tmp_path / "cache")
        pd.testing.assert_frame_equal(got.obs, expected)
    retained = {
        "a": _adata("a", 5, 1, {"cat_ordered": pd.Categorical(list("aabcd"), ordered=True)}),
        "b": _adata("b", 5, 2, {"cat_ordered": pd.Categorical(list("abcdd"), ordered=True)}),
    }
    paths = _write(tmp_path / "retained", retained)
    got = deltacells.read_deltacells(paths, cache_dir=tmp_path / "cache")
    pd.testing.assert_frame_equal(got.obs, _concat(retained).obs)
    assert got.obs["cat_ordered"].cat.ordered


# ---------------------------------------------------------------------- item 2: selections of no cell


@pytest.mark.parametrize("lazy_obs", [False, True])
def test_a_selection_of_no_cell_from_a_collection(pairs, tmp_path: Path, lazy_obs: bool) -> None:
    adatas, paths = pairs
    expected = _concat(adatas, join="outer")
    got = deltacells.read_deltacells(paths, join="outer", lazy_obs=lazy_obs, cache_dir=tmp_path / "cache")
    nothing = [[], np.array([], dtype=np.int64), np.zeros(got.n_obs, dtype=bool), slice(5, 5), slice(got.n_obs, None)]
    for index in nothing:
        subset = got[index]
        assert subset.shape == (0, got.n_vars)
        memory = subset.to_memory()
        want = expected[index].copy()
        assert memory.X.shape == (0, got.n_vars)
        assert memory.X.nnz == 0
        pd.testing.assert_frame_equal(memory.obs, want.obs)
        assert got.X[index].shape == (0, got.n_vars)
    collection = got.X.dataset
    assert collection.read_rows([]).shape == (0, got.n_vars)
    assert collection.read_rows_uncached(np.array([], dtype=np.int64)).shape == (0, got.n_vars)
    (batch,) = collection.read_row_batches(np.array([], dtype=np.int64), None)
    assert batch.shape == (0, got.n_vars)


# ---------------------------------------------------------------------- item 3: var, merge=


@pytest.fixture(scope="module")
def annotated(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, ad.AnnData], list[Path]]:
    """Three datasets whose gene tables agree on some columns, differ on others, and have some of their own."""
    genes = [[f"g{i}" for i in range(12)], [f"g{i}" for i in range(4, 16)], [f"g{i}" for i in range(2, 14)]]
    adatas = {}
    for k, name in enumerate("abc"):
        adata = _adata(name, 20 + k, k, {"batch": pd.Categorical([name] * (20 + k))}, genes[k])
        numbers = np.array([int(g[1:]) for g in genes[k]])
        adata.var["symbol"] = [f"SYM{i}" for i in numbers]  # the same for a gene in every dataset
        adata.var["ensembl"] = [f"ENSG{i:05d}" for i in numbers]
        adata.var["length"] = numbers * 100  # ints: floats where a gene is missing
        adata.var["highly_variable"] = numbers % 2 == 0
        adata.var["mean"] = numbers / (k + 1)  # differs between datasets
        adata.var[f"only_{name}"] = pd.Categorical(["x"] * len(numbers))
        adatas[name] = adata
    return adatas, _write(tmp_path_factory.mktemp("annotated"), adatas)


@pytest.mark.parametrize("merge", [None, "same", "unique", "first", "only"])
@pytest.mark.parametrize("join", ["inner", "outer"])
def test_var_columns_are_those_concat_keeps(annotated, tmp_path: Path, join: str, merge: str | None) -> None:
    adatas, paths = annotated
    expected = _concat(adatas, join=join, merge=merge)
    got = deltacells.read_deltacells(paths, join=join, merge=merge, cache_dir=tmp_path / "cache")
    pd.testing.assert_frame_equal(got.var, expected.var)
    if merge is None:
        assert list(got.var.columns) == []  # concat's default: no var column
    default = deltacells.read_deltacells(paths, join=join, cache_dir=tmp_path / "cache")
    pd.testing.assert_frame_equal(default.var, _concat(adatas, join=join).var)  # the default is concat's


@pytest.mark.parametrize("merge", ["same", "unique", "first"])
def test_var_columns_of_a_join_on_a_var_column(annotated, tmp_path: Path, merge: str) -> None:
    """``var_key=``: as concat of the AnnDatas whose var names are that column."""
    adatas, paths = annotated
    keyed = {}
    for name, adata in adatas.items():
        keyed[name] = adata.copy()
        keyed[name].var_names = adata.var["ensembl"].to_numpy()
    expected = _concat(keyed, join="outer", merge=merge)
    got = deltacells.read_deltacells(paths, join="outer", merge=merge, var_key="ensembl", cache_dir=tmp_path / "c")
    pd.testing.assert_frame_equal(got.var, expected.var, check_index_type=False)
    assert list(got.var_names) == list(expected.var_names)
    assert (got.X[:] != sparse.csr_matrix(expected.X, dtype=np.float32)).nnz == 0


# ---------------------------------------------------------------------- item 7: appends


def _batch(k: int, n: int, obs: dict[str, Any]) -> ad.AnnData:
    return _adata(f"b{k}_", n, k, obs)


def _append_all(path: Path, batches: list[ad.AnnData]) -> None:
    for i, part in enumerate(batches):
        deltacells.write_deltacells(part, path, append=i > 0, tile_size=TILE, obs_tiles_per_file=2, progress=False)


def _categorical(values: list[str], categories: list[str], **kwargs: Any) -> pd.Categorical:
    return pd.Categorical(values, categories=categories, **kwargs)


APPENDS: dict[str, Callable[[], list[ad.AnnData]]] = {
    # new categories that natural-sort among the stored ones: every shard renumbered
    "categories-in-natural-order": lambda: [
        _batch(1, 21, {"ct": _categorical(["GW16_1", "GW16_2"] * 10 + ["GW16_1"], ["GW16_1", "GW16_2"])}),
        _batch(2, 13, {"ct": _categorical(["GW16_10", "GW16_3"] * 6 + ["GW16_3"], ["GW16_10", "GW16_3"])}),
        _batch(3, 9, {"ct": _categorical(["GW16_2"] * 9, ["GW16_2", "GW16_1"])}),
    ],
    "categories-reordered": lambda: [  # a new category sorting between stored ones: stored codes renumbered
        _batch(1, 21, {"ct": _categorical(["GW16_1", "GW16_10"] * 10 + [None], ["GW16_1", "GW16_10"])}),
        _batch(2, 13, {"ct": _categorical(["GW16_2", "GW16_10"] * 6 + ["GW16_1"], ["GW16_2", "GW16_10", "GW16_1"])}),
    ],
    "categories-permuted": lambda: [  # the same categories in another order: the dataset's order
        _batch(1, 21, {"ct": _categorical(["c", "a", "b"] * 7, ["c", "a", "b"])}),
        _batch(2, 13, {"ct": _categorical(["b", "a"] * 6 + ["c"], ["b", "a", "c"])}),
    ],
    "categories-after": lambda: [  # new categories sorting after the stored ones: codes kept
        _batch(1, 21, {"ct": _categorical(["a", "b"] * 10 + ["a"], ["a", "b"])}),
        _batch(2, 13, {"ct": _categorical(["c", "d"] * 6 + ["c"], ["c", "d"])}),
    ],
    "categories-missing": lambda: [
        _batch(1, 21, {"ct": _categorical(["a", None] * 10 + ["b"], ["b", "a"])}),
        _batch(2, 13, {"ct": _categorical([None] * 13, [])}),
    ],
    "ordered-same": lambda: [
        _batch(1, 21, {"ct": _categorical(["lo", "hi"] * 10 + ["hi"], ["lo", "hi"], ordered=True)}),
        _batch(2, 13, {"ct": _categorical(["hi"] * 13, ["lo", "hi"], ordered=True)}),
    ],
    "numbers-widen": lambda: [
        _batch(1, 21, {"n": np.arange(21, dtype=np.int32), "f": np.ones(21, dtype=np.float32), "i": np.arange(21)}),
        _batch(2, 13, {"n": np.arange(13, dtype=np.int64), "f": np.ones(13), "i": np.arange(13) + 0.5}),
    ],
    "bool-and-boolean": lambda: [
        _batch(1, 21, {"flag": np.arange(21) % 2 == 0, "maybe": pd.array([True] * 21, dtype="boolean")}),
        _batch(2, 13, {"flag": pd.array([True, None] * 6 + [False], dtype="boolean"), "maybe": np.ones(13, bool)}),
    ],
    "strings": lambda: [
        _batch(1, 21, {"s": [f"x{i}" for i in range(21)], "u": pd.array(["u"] * 21, dtype="string")}),
        _batch(2, 13, {"s": [None] + [f"y{i}" for i in range(12)], "u": [f"v{i}" for i in range(13)]}),
    ],
}


@pytest.mark.parametrize("case", list(APPENDS))
def test_appends_give_what_concat_of_the_batches_gives(tmp_path: Path, case: str) -> None:
    batches = APPENDS[case]()
    path = tmp_path / "ds"
    _append_all(path, batches)
    expected = ad.concat(batches)
    got = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache")
    pd.testing.assert_frame_equal(got.obs, expected.obs)
    for name, dtype in expected.obs.dtypes.items():
        if isinstance(dtype, pd.CategoricalDtype):
            assert list(got.obs[name].cat.categories) == list(dtype.categories), name
    assert (got.X[:] != sparse.csr_matrix(expected.X, dtype=np.float32)).nnz == 0
    loader = deltacells.CellLoader(path, batch_size=64, shuffle=False, obs_columns=list(expected.obs.columns),
                                   cache_dir=tmp_path / "cache")  # fmt: skip
    for name, categories in loader.obs_categories.items():  # the loader's codes mean the same categories
        assert list(categories) == list(expected.obs[name].cat.categories)
    from deltacells.validate import validate_dataset

    assert validate_dataset(path).ok


def test_categories_growing_at_the_end_rewrite_only_the_last_shard(tmp_path: Path) -> None:
    """Stored codes keep their meaning: the shards before the last are left as they are."""
    path = tmp_path / "ds"
    first, second = APPENDS["categories-after"]()
    _append_all(path, [first])
    shards = sorted((path / "obs").glob("obs_*.parquet"))
    before = {p.name: p.read_bytes() for p in shards}
    deltacells.write_deltacells(second, path, append=True, progress=False)
    assert (path / "obs" / shards[0].name).read_bytes() == before[shards[0].name]
    reordered = tmp_path / "reordered"
    first, second = APPENDS["categories-reordered"]()
    _append_all(reordered, [first])
    old = (reordered / "obs" / shards[0].name).read_bytes()
    deltacells.write_deltacells(second, reordered, append=True, progress=False)
    assert (reordered / "obs" / shards[0].name).read_bytes() != old  # codes renumbered in every shard


REFUSED = {
    "ordered-new-categories": (
        {"ct": _categorical(["lo"] * 10, ["lo", "hi"], ordered=True)},
        {"ct": _categorical(["mid"] * 5, ["lo", "mid", "hi"], ordered=True)},
        "ordered categoricals join only when their categories are the same",
    ),
    "ordered-beside-unordered": (
        {"ct": _categorical(["lo"] * 10, ["lo", "hi"], ordered=True)},
        {"ct": _categorical(["lo"] * 5, ["lo", "hi"])},
        "ordered categoricals join only",
    ),
    "categories-beside-strings": (
        {"ct": _categorical(["a"] * 10, ["a", "b"])},
        {"ct": ["a"] * 5},
        "only categoricals join as a categorical",
    ),
    "bool-beside-numbers": ({"flag": np.ones(10, bool)}, {"flag": np.arange(5)}, "'flag' is stored as bool"),
    "numbers-beside-strings": ({"n": np.arange(10)}, {"n": ["x"] * 5}, "'n' is stored as numeric"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_an_append_concat_would_change_the_kind_of_is_refused(tmp_path: Path, case: str) -> None:
    """What anndata.concat makes of these the dataset's column cannot hold (DECISIONS 17): refused, nothing written."""
    stored, new, message = REFUSED[case]
    first, second = _batch(1, 10, stored), _batch(2, 5, new)
    concatenated = ad.concat([first, second]).obs
    name = next(iter(stored))
    assert concatenated[name].dtype != first.obs[name].dtype  # concat changes the column's kind
    path = tmp_path / "ds"
    _append_all(path, [first])
    before = (path / MANIFEST_NAME).read_bytes()
    with pytest.raises((InvalidValueError, InvalidTypeError), match=message) as raised:
        deltacells.write_deltacells(second, path, append=True, progress=False)
    assert str(concatenated[name].dtype) in str(raised.value)  # it says what concat would make of it
    assert (path / MANIFEST_NAME).read_bytes() == before
    assert not [p for p in path.iterdir() if p.name.startswith(APPEND_PREFIX)]


# ---------------------------------------------------------------------- item 8: names, no gene, repeated columns


@pytest.mark.parametrize("index_unique", [None, "-"])
@pytest.mark.parametrize("lazy_obs", [False, True])
def test_missing_obs_names_stay_missing(tmp_path: Path, index_unique: str | None, lazy_obs: bool) -> None:
    """anndata's test_concat_names[missing-*]: five missing names in each dataset, missing after the join."""
    adatas = {}
    for k, name in enumerate("ab"):
        adata = _adata("c", 10, k, {"x": np.arange(10)})  # the same names in both, as anndata's test has
        adata.obs_names = pd.Index([*adata.obs_names[:5], *([pd.NA] * 5)])
        adatas[name] = adata
    paths = _write(tmp_path, adatas)
    expected = _concat(adatas, index_unique=index_unique)
    assert expected.obs_names.isna().sum() == 10
    single = deltacells.read_deltacells(paths[0], cache_dir=tmp_path / "cache")
    np.testing.assert_array_equal(single.obs_names.isna(), adatas["a"].obs_names.isna())
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Observation names are not unique")  # anndata's, as concat warns it
        got = deltacells.read_deltacells(paths, index_unique=index_unique, lazy_obs=lazy_obs, cache_dir=tmp_path / "c")
        names = got[:].to_memory().obs_names if lazy_obs else got.obs_names
    np.testing.assert_array_equal(names.isna(), expected.obs_names.isna())
    named = ~expected.obs_names.isna()
    assert list(names[named]) == list(expected.obs_names[named])
    assert names[named].is_unique is (index_unique is not None)


def test_a_dataset_with_no_gene_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """anndata's test_concat_size_0_axis[no_var]: the format holds at least one gene (every tile's n_genes >= 1)."""
    adata = ad.AnnData(sparse.csr_matrix((8, 0), dtype=np.float32), obs=pd.DataFrame(index=[f"c{i}" for i in range(8)]))
    with pytest.raises(InvalidValueError, match=r"no gene \(n_vars is 0\).*n_genes >= 1.*Nothing was written"):
        deltacells.write_deltacells(adata, tmp_path / "empty", progress=False)
    assert not (tmp_path / "empty").exists()


def test_repeated_obs_columns_raise_what_anndata_raises(tmp_path: Path) -> None:
    """anndata's test_concat_duplicated_columns: its writers' error, word for word, before anything is written."""
    obs = pd.DataFrame(np.ones((5, 3)), columns=["a", "a", "b"], index=[str(i) for i in range(5)])
    adata = ad.AnnData(sparse.csr_matrix(np.ones((5, 2), dtype=np.float32)), obs=obs)
    with pytest.raises(ValueError) as theirs:  # noqa: PT011 -- the message is compared below
        adata.write_zarr(tmp_path / "anndata.zarr")
    with pytest.raises(ValueError) as ours:  # noqa: PT011
        deltacells.write_deltacells(adata, tmp_path / "ds", progress=False)
    assert str(ours.value) == str(theirs.value)
    assert not (tmp_path / "ds").exists()
