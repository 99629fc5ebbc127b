"""One scan of the data counts every table (issue 36): the DuckDB scan equals the numpy engine
on random data and domains (every policy, gaps between bins, all attribute subsets), one scan
per call, chunk by chunk the same as at once, batches within their memory share; the
"error" policies refuse as the GROUP BY path does, naming no value."""

import itertools

import numpy as np
import pandas as pd
import pytest

from matmech.sources import engines as E
from matmech.io.domain import Domain, categories, integer_range, numeric_bins
from matmech.sources.engines import marginal_counts
from matmech.sources.grouping import Engine
from matmech.sources.table_scan import TableCounter, scan_batches, scan_cells

pytest.importorskip("duckdb")


@pytest.fixture
def scans(monkeypatch):
    """Every call of an engine's one-scan counter or GROUP BY, recorded (one call = one scan)."""
    calls = []
    for name in ("duckdb", "numpy"):
        e = E.ENGINE_REGISTRY[name]

        def groups(*a, _e=e, _n=name, **kw):
            calls.append((_n, "groups", len(a[3])))
            return _e.groups(*a, **kw)

        tables = None
        if e.tables is not None:

            def tables(*a, _e=e, _n=name, **kw):
                calls.append((_n, "tables", len(a[3])))
                return _e.tables(*a, **kw)

        monkeypatch.setitem(E._ENGINES, name, Engine(name, groups, e.check, tables))
    return calls


def random_case(seed):
    """Random columns and a random domain: ranges (clip / other / drop), categories, explicit
    bins with a gap (other / drop: a declared clip with gaps is refused)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(50, 400))
    policies = ["clip", "other", "drop"]
    attrs, cols = [], {}
    for j in range(int(rng.integers(2, 6))):
        kind = rng.integers(0, 3)
        policy = str(rng.choice(policies))
        other = "o" if policy == "other" else None
        missing = "other" if other else str(rng.choice(["drop", "drop"]))
        name = f"c{j}"
        if kind == 0:
            hi = int(rng.integers(1, 6))
            attrs.append(integer_range(name, 0, hi, policy=policy, missing=missing, other=other))
            v = rng.integers(-2, hi + 3, n).astype(float)
        elif kind == 1:
            vals = ["a", "b", "c"][: int(rng.integers(1, 4))]
            attrs.append(
                categories(
                    name,
                    vals,
                    other="?",
                    policy="other",
                    missing=str(rng.choice(["other", "drop"])),
                )
            )
            v = rng.choice(np.array(["a", "b", "c", "zz", ""], dtype=object), n)
        else:
            p = "drop" if policy == "clip" else policy
            attrs.append(
                numeric_bins(
                    name, bins=[(0, 1), (2, 3), (3, 5)], policy=p, missing=missing, other=other
                )
            )
            v = rng.uniform(-1, 6, n)
        if kind != 1:
            v[rng.random(n) < 0.05] = np.nan
        cols[name] = v
    return cols, Domain(tuple(attrs))


@pytest.mark.parametrize("seed", range(12))
def test_one_scan_equals_the_numpy_engine_on_random_data(seed, scans):
    cols, dom = random_case(seed)
    d = len(dom)
    subsets = [s for r in range(d + 1) for s in itertools.combinations(range(d), r)]
    want = marginal_counts(cols, dom, subsets, engine="numpy")
    scans.clear()
    got = marginal_counts(pd.DataFrame(cols), dom, subsets, engine="duckdb")
    assert scans == [("duckdb", "tables", len(subsets))]  # one scan for every table
    for s in subsets:
        np.testing.assert_array_equal(got[s], want[s], err_msg=str(s))
    # a second method: every table is the histogram summed over the other attributes
    full = got[tuple(range(d))]
    for s in subsets:
        other = tuple(j for j in range(d) if j not in s)
        np.testing.assert_array_equal(got[s], full.sum(axis=other) if other else full)


def test_the_error_policies_refuse_in_the_scan_as_in_group_by(scans):
    cols = {
        "a": np.array([1.0, 70.0, 3.0, np.nan]),
        "b": np.array(["x", "y", "nope", "x"], dtype=object),
    }
    bad = Domain(
        (integer_range("a", 0, 9, policy="error"), categories("b", ["x", "y"], policy="drop"))
    )
    for engine, src in (("numpy", cols), ("duckdb", pd.DataFrame(cols))):
        with pytest.raises(ValueError) as info:
            marginal_counts(src, bad, [(0,), (1,), (0, 1)], engine=engine)
        msg = str(info.value)
        assert "column 'a'" in msg and "outside its declared domain" in msg
        assert "70" not in msg and "nope" not in msg
    missing = Domain(
        (integer_range("a", 0, 99, missing="error"), categories("b", ["x", "y"], policy="drop"))
    )
    with pytest.raises(ValueError, match="column 'a' .*has missing values"):
        marginal_counts(pd.DataFrame(cols), missing, [(0,), (1,)], engine="duckdb")
    # a record dropped by another attribute still trips "error"
    assert ("duckdb", "tables", 2) in scans


def test_chunks_add_up_to_one_pass_and_batches_fit_their_share():
    rng = np.random.default_rng(4)
    dom = Domain(tuple(integer_range(f"a{j}", 0, 3, policy="clip") for j in range(5)))
    codes = rng.integers(0, 4, size=(3000, 5))
    dropped = rng.random(3000) < 0.1
    codes[dropped, rng.integers(0, 5, int(dropped.sum()))] = -1  # the drop sentinel
    subsets = [s for r in range(4) for s in itertools.combinations(range(5), r)]
    whole = TableCounter(dom, subsets)
    whole.add(codes.copy(), dropped)
    parts = TableCounter(dom, subsets)
    for at in range(0, 3000, 701):
        parts.add(codes[at : at + 701].copy(), dropped[at : at + 701])
    keep = codes[~dropped]
    for s in subsets:
        a, b = whole.tables()[s], parts.tables()[s]
        np.testing.assert_array_equal(a, b)
        ref = np.zeros(dom.subset_sizes(s), dtype=np.int64)  # a second method: per record
        for row in keep:
            ref[tuple(row[list(s)])] += 1
        np.testing.assert_array_equal(a, ref)
    share = 8 * scan_cells(dom, subsets) // 3 + (1 << 17) * (6 * 5 + 48)
    batches = scan_batches(dom, subsets, share)
    assert [s for b in batches for s in b] == subsets and len(batches) >= 3
    for b in batches:
        assert 8 * scan_cells(dom, b) <= share - (1 << 17) * (6 * 5 + 48)
