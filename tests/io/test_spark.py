"""The Spark engine on a local[1] session: the same counts as numpy, one aggregation per call."""

import numpy as np
import pytest

from matmech.io.domain import Domain, categories, integer_range, numeric_bins
from matmech.sources.engines import histogram, marginal_counts
from matmech.sources.engine_sql import compile_query

pyspark = pytest.importorskip(
    "pyspark", reason="the spark extra (pip install 'matmech-dp[spark]') is not installed"
)


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[1]")
        .appName("matmech-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def records(n=800, seed=5):
    """Rows of raw values (None for missing), as tuples for spark.createDataFrame."""
    rng = np.random.default_rng(seed)
    age = rng.integers(-10, 125, n).astype(float)
    sex = rng.choice(["F", "M", "U", "", "F "], n)
    income = np.round(rng.lognormal(10, 1, n), 2)
    state = rng.choice(["CA", "NY", "TX", "O'Hare", "ZZ"], n)
    rows = []
    for i in range(n):
        rows.append(
            (
                None if i % 31 == 0 else float(age[i]),
                None if i % 37 == 0 else str(sex[i]),
                None if i % 29 == 0 else float(-income[i] if i % 41 == 0 else income[i]),
                str(state[i]),
            )
        )
    cols = {
        "age": np.array([np.nan if r[0] is None else r[0] for r in rows]),
        "sex": np.array([r[1] for r in rows], dtype=object),
        "income": np.array([np.nan if r[2] is None else r[2] for r in rows]),
        "state": np.array([r[3] for r in rows], dtype=object),
    }
    return rows, cols


DOMAIN = Domain(
    (
        integer_range("age", 0, 99, width=10, policy="clip", missing="drop"),
        categories("sex", ["F", "M"], other="?", policy="other", missing="other"),
        numeric_bins("income", edges=[0, 20000, 30000, 50000, 1e6], policy="drop", missing="drop"),
        categories(
            "state", ["CA", "NY", "TX", "O'Hare"], other="other", policy="other", missing="drop"
        ),
    )
)


def test_spark_histogram_and_marginals_equal_numpy(spark):
    rows, cols = records()
    df = spark.createDataFrame(rows, "age double, sex string, income double, state string")
    want = histogram(cols, DOMAIN, engine="numpy")
    assert 0 < want.sum() < len(rows)
    subsets = [(0, 1, 2, 3), (0,), (1, 3), ()]  # one Spark job: the histogram and three marginals
    got = marginal_counts(df, DOMAIN, subsets, engine="spark")
    np.testing.assert_array_equal(got[(0, 1, 2, 3)].ravel(), want)
    full = want.reshape(DOMAIN.sizes)
    for s in subsets[1:]:
        np.testing.assert_array_equal(
            got[s], full.sum(axis=tuple(j for j in range(4) if j not in s))
        )
    # the whole mapping is one Spark SQL statement (one aggregation with grouping sets)
    query, _ = compile_query(DOMAIN, subsets, "`t`", "spark")
    assert query.count("GROUP BY") == 1 and "GROUPING SETS" in query and "O\\'Hare" in query


def test_spark_histogram_and_the_error_policy(spark):
    df = spark.createDataFrame(
        [(1.0, "a"), (250.0, "b"), (None, "a"), (7.5, "c")], "age double, k string"
    )
    dom = Domain(
        (
            integer_range("age", 0, 9, policy="other", missing="drop", other="10+"),
            categories("k", ["a", "b"], policy="drop"),
        )
    )
    want = histogram(
        {
            "age": np.array([1.0, 250.0, np.nan, 7.5]),
            "k": np.array(["a", "b", "a", "c"], dtype=object),
        },
        dom,
    )
    np.testing.assert_array_equal(histogram(df, dom), want)
    assert want.sum() == 2 and want[1 * 2 + 0] == 1 and want[10 * 2 + 1] == 1
    dom = Domain((integer_range("age", 0, 99, policy="error"),))
    with pytest.raises(ValueError) as info:
        histogram(df, dom)
    assert "column 'age'" in str(info.value) and "250" not in str(info.value)
    with pytest.raises(ValueError, match=r"no column\(s\) \['height'\]"):
        histogram(df, Domain((integer_range("height", 0, 9),)))


def test_spark_bins_values_on_and_around_every_edge_like_exact_arithmetic(spark):
    """Issue 31 on Spark: the widths of the issue, every edge ± one ulp, a grid of 2·10⁹ bins
    at its far end, explicit edges and text with tabs, each value's bin equal to the one exact
    arithmetic on the floats gives (the numpy and DuckDB engines: test_bin_edges.py)."""
    import math

    from edge_values import around, exact_codes

    from matmech.sources.engines import ENGINE_REGISTRY

    attrs = [
        numeric_bins("w1", lo=0, hi=5, width=0.1, policy="other", other="o"),
        numeric_bins("w2", lo=0, hi=5, width=0.01, policy="other", other="o"),
        numeric_bins("w3", lo=0, hi=100, width=1 / 3, policy="other", other="o"),
        numeric_bins("w4", lo=-1000, hi=1000, width=2.5, policy="other", other="o"),
        numeric_bins("e", edges=[0, 0.1 + 0.2, 1 / 3, 2.5, 1e3], policy="other", other="o"),
        numeric_bins("big", lo=0, hi=2e8, width=0.1, policy="other", other="o"),
    ]
    cols, want = [], []
    for a in attrs[:-1]:
        bins = [a.bins[i] for i in range(a.declared_size)]
        v = around(sorted({e for b in bins for e in b}))
        cols.append(v)
        want.append(exact_codes(v, bins, a.other_code))
    big = attrs[-1]
    picks = [0, 1, 2, 12_345_678, big.declared_size - 2, big.declared_size - 1]
    v = around(sorted({big.bins.edge(i) for i in picks} | {big.bins.edge(i + 1) for i in picks}))
    within = exact_codes(v, [big.bins[i] for i in picks], -1)
    cols.append([x for x, c in zip(v, within) if c >= 0])  # values in the picked bins
    want.append(np.array([picks[c] for c in within if c >= 0]))
    n = max(len(c) for c in cols)
    for j, a in enumerate(attrs):  # padded with missing values: the other cell
        want[j] = np.concatenate([want[j], np.full(n - len(cols[j]), a.other_code)])
    rows = [(i, *(float(c[i]) if i < len(c) else None for c in cols)) for i in range(n)]
    df = spark.createDataFrame(rows, "id long, " + ", ".join(f"{a.name} double" for a in attrs))
    dom = Domain((integer_range("id", 0, n - 1), *attrs))
    sets = [(0, j) for j in range(1, len(attrs) + 1)]
    groups = ENGINE_REGISTRY["spark"].groups(
        df, "spark", dom, sets, where="spark", encoding="utf-8", delimiter=None
    )
    for a, s, w in zip(attrs, sets, want):
        codes, _, counts = groups[s]
        assert (counts == 1).all()
        np.testing.assert_array_equal(codes[np.argsort(codes[:, 0]), 1], w, err_msg=a.name)
    # text: the same white-space rule as the other engines
    text = spark.createDataFrame([(" 0.3\t",), ("\n0.2\r",), ("\u00a00.3",), ("x\t",)], "x string")
    dom = Domain(
        (numeric_bins("x", lo=0, hi=1, width=0.1, policy="other", other="o", missing="other"),)
    )
    got = histogram(text, dom, engine="spark")
    assert got[2] == 1 and got[3] == 1 and got[-1] == 2 and math.isclose(got.sum(), 4)


def test_spark_counts_every_table_on_the_executors_and_flags_error_policies(spark):
    """Several tables: one mapInArrow job (a counter per partition, only tables shipped back),
    equal to numpy; an "error" attribute's defect found on an executor is refused on the
    driver with the usual message, no value."""
    from matmech.sources import engine_sql

    rows, cols = records()
    df = spark.createDataFrame(rows, "age double, sex string, income double, state string")
    subsets = [(0, 1), (2, 3), (1,), ()]
    want = marginal_counts(cols, DOMAIN, subsets, engine="numpy")
    got = engine_sql.spark_tables(df.repartition(3), "spark", DOMAIN, subsets)
    for s in subsets:
        np.testing.assert_array_equal(got[s], want[s])
    bad = spark.createDataFrame([(1.0, "a"), (250.0, "b"), (None, "a")], "age double, k string")
    dom = Domain(
        (integer_range("age", 0, 99, policy="error", missing="drop"), categories("k", ["a", "b"]))
    )
    with pytest.raises(ValueError) as info:
        marginal_counts(bad, dom, [(0,), (1,), (0, 1)], engine="spark")
    assert "column 'age'" in str(info.value) and "250" not in str(info.value)
    dom = Domain((integer_range("age", 0, 999, missing="error"), categories("k", ["a", "b"])))
    with pytest.raises(ValueError, match="column 'age' .*has missing values"):
        marginal_counts(bad, dom, [(0,), (1,)], engine="spark")
