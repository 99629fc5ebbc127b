"""Tables computed elsewhere (issue 36): the query matmech prints for a plan's tables, run by
an engine, saved as Parquet / CSV and read back gives the numpy engine's tables and the same
release; every disagreement with the declaration is refused before the spend, naming no count."""

import itertools

import numpy as np
import pandas as pd
import pytest

import matmech as mm
from matmech.io.domain import Domain, categories, integer_range
from matmech.sources.engines import marginal_counts
from matmech.sources.given_tables import read_tables, tables_sql, workload_tables
from matmech.linalg.terms import marginal_workload

duckdb = pytest.importorskip("duckdb")

SUBSETS = list(itertools.combinations(range(3), 2))


def _case():
    rng = np.random.default_rng(8)
    n = 900
    cols = {
        "age": rng.integers(-3, 8, n).astype(float),
        "sex": rng.choice(np.array(["F", "M", "X", ""], dtype=object), n),
        "k": rng.integers(0, 3, n),
    }
    cols["age"][::17] = np.nan
    dom = Domain(
        (
            integer_range("age", 0, 5, policy="drop", missing="drop"),
            categories("sex", ["F", "M"], other="?", policy="other", missing="other"),
            integer_range("k", 0, 2),
        )
    )
    return cols, dom


def _warehouse(cols, dom, subsets=SUBSETS):
    """The printed query run by a warehouse (DuckDB here) → its result as a DataFrame."""
    con = duckdb.connect()
    con.register("events", pd.DataFrame(cols))
    return con.execute(tables_sql(dom, subsets, "events")).fetchdf()


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_printed_sql_result_read_back_equals_the_engine_and_releases_the_same(tmp_path, fmt):
    cols, dom = _case()
    result = _warehouse(cols, dom)
    path = tmp_path / f"tables.{fmt}"
    if fmt == "parquet":
        result.to_parquet(path)
    else:
        result.to_csv(path, index=False)
    got = read_tables(path, dom, SUBSETS)
    want = marginal_counts(cols, dom, SUBSETS, engine="numpy")
    for s in SUBSETS:
        np.testing.assert_array_equal(got[s], want[s])
    W = marginal_workload(dom.sizes, SUBSETS)
    a = mm.release(got, W, 1.0, 1e-6, rng=np.random.default_rng(3))
    b = mm.release(pd.DataFrame(cols), W, 1.0, 1e-6, domain=dom, rng=np.random.default_rng(3))
    np.testing.assert_array_equal(a.answers, b.answers)
    np.testing.assert_array_equal(a.std, b.std)
    assert "GROUPING SETS" in tables_sql(dom, SUBSETS, "`events`", "spark")


def _bad(result, how):
    r = result.copy()
    first = r.index[r["age"].notna() & r["sex"].notna() & (r["dropped"] == 0)][0]
    if how == "outside":
        r.loc[first, "age"] = 6  # the domain has cells 0 … 5
    elif how == "negative":
        r.loc[first, "n"] = -4
    elif how == "fraction":
        r["n"] = r["n"].astype(float)
        r.loc[first, "n"] = 2.5
    elif how == "total":
        r.loc[first, "n"] += 12345
    elif how == "twice":
        r = pd.concat([r, r.loc[[first]]])
    elif how == "column":
        r = r.drop(columns=["sex"])
    return r


@pytest.mark.parametrize("how", ["outside", "negative", "fraction", "total", "twice", "column"])
def test_tables_disagreeing_with_the_declaration_are_refused_before_the_spend(how):
    cols, dom = _case()
    result = _warehouse(cols, dom)
    W = marginal_workload(dom.sizes, SUBSETS)
    budget = mm.PrivacyBudget(1.0, 1e-5)

    def handed_in_release(r):
        return mm.release(read_tables(r, dom, SUBSETS), W, 1.0, 1e-6, budget=budget)

    with pytest.raises(ValueError) as info:
        handed_in_release(_bad(result, how))
    msg = str(info.value)
    assert budget.remaining == (1.0, 1e-5)
    for value in ("12345", "2.5", "-4", str(len(cols["k"]))):
        assert value not in msg
    handed_in_release(result)  # the good tables pass
    assert budget.remaining[0] < 1.0


def test_more_records_than_declared_and_error_policies_are_refused():
    cols, dom = _case()
    tables = read_tables(_warehouse(cols, dom), dom, SUBSETS)
    W = marginal_workload(dom.sizes, SUBSETS)
    budget = mm.PrivacyBudget(1.0, 1e-5)
    with pytest.raises(ValueError, match="max_records") as info:
        mm.release(tables, W, 1.0, 1e-6, budget=budget, max_records=100)
    assert str(sum(tables[(0, 1)].ravel())) not in str(info.value)
    assert budget.remaining == (1.0, 1e-5)
    strict = Domain(
        (integer_range("age", 0, 5, policy="error", missing="drop"), *dom.attributes[1:])
    )
    result = _warehouse(cols, strict)  # the query keeps the sentinels: the refusal is matmech's
    with pytest.raises(ValueError, match="column 'age'.*outside its declared domain"):
        read_tables(result, strict, SUBSETS)
    with pytest.raises(ValueError, match=r"no table given for attributes \(0, 1, 2\)"):
        read_tables(_warehouse(cols, dom), dom, [(0, 1, 2)])


def test_the_tables_a_workload_reads_and_the_query_s_refusals():
    """workload_tables: each Kronecker term's attributes, the largest kept (a marginal inside
    another is summed out of it); a workload without terms reads the full table."""
    W = marginal_workload((3, 4, 2), [(0,), (0, 1), (1, 2), (2,), ()])
    assert workload_tables(W, 3) == [(0, 1), (1, 2)]
    dense = mm.as_linop(np.arange(24.0).reshape(1, 24))  # no Kronecker terms
    assert workload_tables(dense, 3) == [(0, 1, 2)]
    _, dom = _case()
    for bad in (None, 3, "", "  "):
        with pytest.raises(TypeError, match="source_sql"):
            tables_sql(dom, SUBSETS, bad)
    with pytest.raises(ValueError, match="dialect"):
        tables_sql(dom, SUBSETS, "events", "oracle")
