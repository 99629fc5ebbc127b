"""Engines count what a per-record Python reference counts: the numpy engine against that
reference, and DuckDB on pandas, Polars, Arrow, CSV and Parquet against numpy (Spark:
tests/io/test_spark.py). Errors name a column and a defect, never a value or a count."""

import csv
import math

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from matmech.sources.histogram import histogram as data_histogram
from matmech.io.domain import Domain, categories, integer_range, numeric_bins
from matmech.sources.engines import histogram, marginal_counts


def raw_table(n=700, seed=0):
    """Raw columns with missing, out-of-domain, fractional and non-numeric entries."""
    rng = np.random.default_rng(seed)
    age = rng.integers(-10, 125, n).astype(object)
    age[rng.random(n) < 0.05] = None
    age[rng.random(n) < 0.03] = "n/a"
    age[::53] = 34.5
    sex = rng.choice(
        np.array(["F", "M", "U", "", " F "], dtype=object), n, p=[0.45, 0.45, 0.04, 0.03, 0.03]
    )
    sex[rng.random(n) < 0.03] = None
    income = np.round(rng.lognormal(10, 1, n), 2)
    income[rng.random(n) < 0.04] = np.nan
    income[rng.random(n) < 0.03] *= -1
    state = rng.choice(np.array(["CA", "NY", "TX", "ZZ", "O'Hare"], dtype=object), n)
    state[rng.random(n) < 0.02] = None
    return {"age": age, "sex": sex, "income": income, "state": state}


def domain(age_policy="clip"):
    other = "?" if age_policy == "other" else None
    return Domain(
        (
            integer_range(
                "age",
                0,
                99,
                width=10,
                policy=age_policy,
                missing="other" if other else "drop",
                other=other,
            ),
            categories("sex", ["F", "M"], other="?", policy="other", missing="other"),
            numeric_bins(
                "income", edges=[0, 20000, 30000, 50000, 1e6], policy="drop", missing="drop"
            ),
            categories(
                "state", ["CA", "NY", "TX", "O'Hare"], other="other", policy="other", missing="drop"
            ),
        )
    )


# -- a per-record reference, written independently of the engines ------------------------------


def _missing(v):
    return (
        v is None
        or (isinstance(v, float) and math.isnan(v))
        or (isinstance(v, str) and v.strip(" ") == "")
    )


def ref_code(a, v):
    """The cell of one value, "drop", or "error" (plain Python comparisons)."""
    if a.kind != "categories" and not _missing(v):
        try:
            v = float(str(v).strip(" ")) if isinstance(v, str) else float(v)
        except ValueError:
            v = None
    if _missing(v):
        return {"other": a.declared_size, "drop": "drop", "error": "error"}[a.missing]
    if a.kind == "categories":
        s = v.strip(" ")
        if s in a.categories:
            return a.categories.index(s)
        return {"other": a.declared_size, "drop": "drop", "error": "error"}[a.policy]
    if a.kind == "range":
        if a.lo <= v < a.hi + 1:
            return int((v - a.lo) // a.width)
        below = v < a.lo
    else:
        for i, (lo, hi) in enumerate(a.bins):
            if lo <= v < hi:
                return i
        below = v < a.bins[0][0]
    if a.policy == "clip":
        return 0 if below else a.declared_size - 1
    return {"other": a.declared_size, "drop": "drop", "error": "error"}[a.policy]


def ref_histogram(cols, d):
    x = np.zeros(d.n, dtype=np.int64)
    n = len(next(iter(cols.values())))
    for i in range(n):
        codes = [ref_code(a, cols[a.column][i]) for a in d.attributes]
        if "error" in codes:
            raise ValueError("error")
        if "drop" not in codes:
            x[np.ravel_multi_index(codes, d.sizes)] += 1
    return x


# -- sources -------------------------------------------------------------------------------------


def pandas_frame(cols):
    df = pd.DataFrame({k: v for k, v in cols.items() if k != "age"})
    df["age"] = pd.Series([None if _missing(v) else str(v) for v in cols["age"]], dtype=object)
    return df


def write_csv(path, cols, *, delimiter=",", encoding="utf-8", bom=False):
    n = len(cols["age"])
    with open(path, "w", newline="", encoding="utf-8-sig" if bom else encoding) as f:
        w = csv.writer(f, delimiter=delimiter)
        w.writerow(list(cols))
        for i in range(n):
            w.writerow(
                [
                    ""
                    if _missing(cols[c][i])
                    else (repr(float(cols[c][i])) if isinstance(cols[c][i], float) else cols[c][i])
                    for c in cols
                ]
            )
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    cols = raw_table()
    d = tmp_path_factory.mktemp("engines")
    df = pandas_frame(cols)
    table = pa.Table.from_pandas(df, preserve_index=False)
    pq.write_table(table, d / "people.parquet")
    write_csv(d / "people.csv", cols)
    sources = {
        "pandas": df,
        "polars": pl.from_arrow(table),
        "arrow": table,
        "csv": str(d / "people.csv"),
        "parquet": str(d / "people.parquet"),
    }
    return cols, sources, d


@pytest.mark.parametrize("policy", ["clip", "other", "drop"])
def test_numpy_engine_equals_the_per_record_reference(data, policy):
    cols, _, _ = data
    dom = domain(policy)
    x = histogram(cols, dom, engine="numpy")
    np.testing.assert_array_equal(x, ref_histogram(cols, dom))
    assert 0 < x.sum() < len(cols["age"])  # some records were dropped, most kept


@pytest.mark.parametrize("kind", ["pandas", "polars", "arrow", "csv", "parquet"])
@pytest.mark.parametrize("policy", ["clip", "other", "drop"])
def test_duckdb_sources_equal_numpy(data, kind, policy):
    cols, sources, _ = data
    dom = domain(policy)
    want = histogram(cols, dom, engine="numpy")
    got = histogram(sources[kind], dom)
    assert got.dtype == np.int64 and got.shape == (dom.n,)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind", ["numpy", "pandas", "polars", "arrow", "csv", "parquet"])
def test_marginal_counts_are_marginals_of_the_histogram(data, kind):
    cols, sources, _ = data
    dom = domain("drop")
    full = histogram(cols, dom, engine="numpy").reshape(dom.sizes)
    subsets = [(0,), (1, 3), (2,), (), (0, 1, 2, 3)]
    got = marginal_counts(cols if kind == "numpy" else sources[kind], dom, subsets)
    assert set(got) == set(subsets)
    for s in subsets:
        other = tuple(j for j in range(len(dom)) if j not in s)
        assert got[s].shape == dom.subset_sizes(s)
        np.testing.assert_array_equal(got[s], full.sum(axis=other))


def test_the_error_policy_refuses_without_naming_values_or_counts(data):
    cols, sources, _ = data
    dom = Domain(
        (
            integer_range("age", 0, 99, policy="error", missing="drop"),
            categories("sex", ["F", "M"], other="?", policy="other", missing="other"),
        )
    )
    for src in [cols, *sources.values()]:
        with pytest.raises(ValueError) as info:
            histogram(src, dom)
        msg = str(info.value)
        assert "column 'age'" in msg and "outside its declared domain" in msg
        assert not any(ch.isdigit() for ch in msg.replace(str(src), "")), (
            msg
        )  # no value, row or count
    dom = Domain((integer_range("age", -10, 200, policy="error", missing="error"),))
    for src in [cols, sources["parquet"]]:
        with pytest.raises(ValueError, match="column 'age' .*has missing values"):
            histogram(src, dom)
    # errors win over drops: a record dropped by another attribute still trips "error"
    bad = {"a": np.array([1.0, 7.0]), "b": np.array(["x", "nope"], dtype=object)}
    dom = Domain((integer_range("a", 0, 5, policy="error"), categories("b", ["x"], policy="drop")))
    for src in [bad, pd.DataFrame(bad)]:
        with pytest.raises(ValueError, match="column 'a'"):
            histogram(src, dom)


def test_clean_data_passes_the_error_policy_and_matches_numpy_binning():
    rng = np.random.default_rng(3)
    v = rng.uniform(0, 1, 5000)
    dom = Domain((numeric_bins("v", lo=0, hi=1, width=0.1, policy="error", missing="error"),))
    x = histogram(pd.DataFrame({"v": v}), dom)
    # numpy's own histogram on edges lo + i*width (a second method; agreement away from the edges)
    np.testing.assert_array_equal(x, np.histogram(v, bins=np.linspace(0, 1, 11))[0])
    gaps = Domain((numeric_bins("v", bins=[(0, 0.2), (0.5, 0.6)], policy="drop"),))
    np.testing.assert_array_equal(
        histogram({"v": v}, gaps), [np.sum(v < 0.2), np.sum((v >= 0.5) & (v < 0.6))]
    )
    np.testing.assert_array_equal(
        histogram(pd.DataFrame({"v": v}), gaps), histogram({"v": v}, gaps)
    )


def test_csv_bom_delimiters_encodings(tmp_path):
    cols = {
        "age": np.array([3.0, 40.0, np.nan, 12.0], dtype=object),
        "city": np.array(["Zürich", "Genève", "Zürich", "Bern"], dtype=object),
    }
    dom = Domain(
        (
            integer_range("age", 0, 99, missing="drop"),
            categories("city", ["Zürich", "Genève"], other="x", policy="other"),
        )
    )
    want = histogram(cols, dom, engine="numpy")
    np.testing.assert_array_equal(
        histogram(str(write_csv(tmp_path / "bom.csv", cols, delimiter=";", bom=True)), dom), want
    )
    np.testing.assert_array_equal(
        histogram(str(write_csv(tmp_path / "tab.tsv", cols, delimiter="\t")), dom, delimiter="\t"),
        want,
    )
    latin = str(write_csv(tmp_path / "latin.csv", cols, encoding="latin-1"))
    np.testing.assert_array_equal(histogram(latin, dom, encoding="latin-1"), want)
    with pytest.raises(ValueError) as info:
        histogram(latin, dom)
    assert (
        "latin.csv: not valid utf-8 text" in str(info.value)
        and "Z" not in str(info.value).split("latin.csv")[1]
    )
    with pytest.raises(ValueError, match="encoding must be utf-8, utf-16 or latin-1"):
        histogram(latin, dom, encoding="cp1252")


def test_engine_messages_are_withheld_and_files_are_checked(tmp_path):
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("age,city\n" + "1,Bern\n" * 50 + "2,secret-value,extra,columns\n")
    dom = Domain((integer_range("age", 0, 9),))
    with pytest.raises(ValueError) as info:
        histogram(str(ragged), dom)
    assert (
        "ragged.csv" in str(info.value)
        and "secret" not in str(info.value)
        and "withheld" in str(info.value)
    )
    with pytest.raises(FileNotFoundError, match="nope.parquet: no such data file"):
        histogram(str(tmp_path / "nope.parquet"), dom)
    with pytest.raises(
        ValueError, match=r"no column\(s\) \['height'\].*header line has 2 name\(s\), not shown"
    ):  # a CSV header may be a record (no header line): its names are not quoted
        histogram(
            str(write_csv(tmp_path / "c.csv", {"age": [1.0], "city": ["x"]})),
            Domain((integer_range("height", 0, 9),)),
        )
    with pytest.raises(ValueError, match="expected a .csv"):
        histogram(str(tmp_path / "data.xlsx"), dom)


def test_argument_checks():
    dom = Domain((integer_range("a", 0, 9),))
    with pytest.raises(ValueError, match="engine must be one of"):
        histogram({"a": [1]}, dom, engine="sqlite")
    with pytest.raises(TypeError, match="must be a matmech.io.domain.Domain"):
        histogram({"a": [1]}, (10,))
    with pytest.raises(TypeError, match="expected a pandas/Polars DataFrame"):
        histogram([1, 2], dom)
    with pytest.raises(TypeError, match="spark engine counts a Spark DataFrame"):
        histogram({"a": [1]}, dom, engine="spark")
    with pytest.raises(ValueError, match="distinct increasing attribute indices"):
        marginal_counts({"a": [1]}, dom, [(1,)])
    huge = Domain((integer_range("a", 0, 2**20 - 1), integer_range("b", 0, 2**20 - 1)))
    with pytest.raises(ValueError, match="1,099,511,627,776 cells"):
        histogram({"a": [1], "b": [1]}, huge)


def test_quoting_in_generated_sql():
    df = pd.DataFrame({'we"ird col': ["O'Brien", "x", "O'Brien", None]})
    dom = Domain(
        (categories("who", ["O'Brien", "x"], column='we"ird col', policy="error", missing="drop"),)
    )
    np.testing.assert_array_equal(histogram(df, dom), [2, 1])
    np.testing.assert_array_equal(histogram(df, dom, engine="numpy"), [2, 1])


def test_matmech_histogram_accepts_a_domain(data):
    cols, sources, _ = data
    dom = domain("other")
    np.testing.assert_array_equal(
        data_histogram(sources["pandas"], dom), histogram(cols, dom, engine="numpy")
    )
    arr = np.column_stack([np.arange(10) % 4, np.arange(10) % 3])
    d2 = Domain((integer_range("a", 0, 3), integer_range("b", 0, 2)))
    np.testing.assert_array_equal(data_histogram(arr, d2), data_histogram(arr, (4, 3)))


@pytest.mark.parametrize("policy", ["clip", "other", "drop"])
def test_integer_typed_columns_take_the_integer_path_with_the_same_cells(policy, tmp_path):
    rng = np.random.default_rng(11)
    a = rng.integers(-20, 130, 3000)
    other = "x" if policy == "other" else None
    dom = Domain(
        (
            integer_range("a", 0, 99, width=7, policy=policy, other=other, missing="drop"),
            integer_range("b", 5, 9, policy=policy, other=other, missing="drop"),
        )
    )
    b = pd.array(rng.integers(0, 15, 3000), dtype="Int64")
    b[::17] = pd.NA
    df = pd.DataFrame({"a": a.astype(np.int32), "b": b})
    want = histogram(
        {"a": a.astype(float), "b": b.to_numpy(dtype=float, na_value=np.nan)}, dom, engine="numpy"
    )
    np.testing.assert_array_equal(histogram(df, dom), want)
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp_path / "ints.parquet")
    np.testing.assert_array_equal(histogram(str(tmp_path / "ints.parquet"), dom), want)
    np.testing.assert_array_equal(
        want,
        ref_histogram(
            {"a": list(a.astype(float)), "b": [None if v is pd.NA else float(v) for v in b]}, dom
        ),
    )


def test_a_gzip_csv_is_counted_like_the_plain_file(tmp_path):
    """issue 23: .csv.gz was listed as supported and refused."""
    import gzip

    import numpy as np

    from matmech.io.domain import Domain, categories, integer_range
    from matmech.sources.engines import histogram as engine_histogram

    dom = Domain(
        (
            integer_range("age", 0, 29, width=10, policy="clip", missing="drop"),
            categories("sex", ["F", "M"], other="other", policy="other", missing="other"),
        )
    )
    text = "age;sex\n3;F\n15;M\n27;M\n40;F\n;F\n12;U\n"
    plain, packed = tmp_path / "p.csv", tmp_path / "p.csv.gz"
    plain.write_text(text)
    with gzip.open(packed, "wt") as f:
        f.write(text)
    a, b = engine_histogram(plain, dom), engine_histogram(packed, dom)
    np.testing.assert_array_equal(a, b)
    assert a.sum() == 5
    broken = tmp_path / "broken.csv.gz"
    broken.write_bytes(b"age,sex\n3,F\n")  # not gzip at all
    with pytest.raises(ValueError, match="not a readable gzip file"):
        engine_histogram(broken, dom)
