"""The streamed release from a data engine (issue 36): the tables counted where the data lives
before the spend (one scan per batch that fits the memory share), kept in a file and checked,
then read after it; the same answers as from the records in memory with the same seed; a
defect or an inconsistency refused with the budget untouched."""

import itertools

import numpy as np
import pandas as pd
import pytest

import matmech as mm
from matmech import release_marginals
from matmech.sources.tables import marginal_tables
from matmech.sources import engines as E
from matmech.io.domain import Domain, integer_range
from matmech.sources.grouping import Engine
from matmech.sources.spilled_tables import spill_tables
from matmech.sources.table_scan import scan_batches
from matmech.linalg.terms import marginal_workload
from matmech.sources.source import EngineSource

pytest.importorskip("duckdb")

SIZES = (3, 4, 2, 5, 3)


def _data(n=1500, seed=2):
    codes = np.random.default_rng(seed).integers(0, SIZES, size=(n, len(SIZES)))
    dom = Domain(tuple(integer_range(f"a{j}", 0, k - 1) for j, k in enumerate(SIZES)))
    return codes, pd.DataFrame({f"a{j}": codes[:, j] for j in range(len(SIZES))}), dom


@pytest.fixture
def scans(monkeypatch):
    calls = []
    e = E.ENGINE_REGISTRY["duckdb"]

    def groups(*a, **kw):
        calls.append(list(a[3]))
        return e.groups(*a, **kw)

    def tables(*a, **kw):
        calls.append(list(a[3]))
        return e.tables(*a, **kw)

    monkeypatch.setitem(E._ENGINES, "duckdb", Engine("duckdb", groups, e.check, tables))
    return calls


@pytest.mark.parametrize("delta", [1e-6, 0.0])
def test_streamed_from_duckdb_equals_streamed_from_records(delta, scans):
    codes, df, dom = _data()
    W = marginal_workload(SIZES, list(itertools.combinations(range(5), 3)))
    ref = release_marginals(codes, W, 1.0, delta, rng=np.random.default_rng(7))
    budget = mm.PrivacyBudget(2.0, 1e-5)
    got = release_marginals(
        df, W, 1.0, delta, rng=np.random.default_rng(7), domain=dom, budget=budget
    )
    assert len(scans) == 1  # every table the plan reads, from one scan
    for s in itertools.combinations(range(5), 3):
        for a, b in zip(ref.marginal(s), got.marginal(s)):
            np.testing.assert_array_equal(a, b)
    assert budget.remaining[0] < 2.0  # spent once, after the read


def test_the_scans_follow_the_memory_share_and_the_reader_sums_out(scans):
    codes, df, dom = _data()
    subsets = [s for r in range(4) for s in itertools.combinations(range(5), r)]
    tops = list(itertools.combinations(range(5), 3))
    share = scan_batches(dom, tops, 1 << 40)  # one batch when memory is ample
    assert share == [tops]
    small = (1 << 17) * (6 * 5 + 48) + 8 * 2 * 4 * 5 * 3  # the chunk and about two tables
    src = EngineSource(df, dom, memory=small)
    reader = src.reader(SIZES, subsets)
    assert len(scans) == len(scan_batches(dom, tops, small)) > 3  # one scan per batch
    want = marginal_tables(codes, SIZES, subsets)
    got = reader(subsets)
    for s in subsets:
        np.testing.assert_array_equal(got[s], want[s], err_msg=str(s))
    with pytest.raises(ValueError, match=r"attributes \(0, 1, 2, 3\)"):
        reader.check_covers([(0, 1, 2, 3)])


def test_tables_that_disagree_across_scans_are_refused_before_the_spend():
    sizes = (2, 2, 2)
    good = {
        s: np.full((2,) * len(s), 3, dtype=np.int64) for s in itertools.combinations(range(3), 2)
    }
    calls = iter([1, 2, 3])

    def count(batch):  # the data changed between the second and the third scan
        k = next(calls)
        return {s: good[s] * (2 if k == 3 else 1) for s in batch}

    with pytest.raises(ValueError) as info:
        spill_tables(count, sizes, list(good), cut=lambda tops: [[t] for t in tops])
    msg = str(info.value)
    assert "disagree on the record total" in msg and "nothing was spent" in msg
    assert "12" not in msg and "24" not in msg


def test_a_refused_read_spends_nothing():
    codes, df, dom = _data()
    df.loc[3, "a1"] = 99  # out of the declared domain, whose policy is "error"
    strict = Domain(
        tuple(integer_range(f"a{j}", 0, k - 1, policy="error") for j, k in enumerate(SIZES))
    )
    W = marginal_workload(SIZES, list(itertools.combinations(range(5), 2)))
    budget = mm.PrivacyBudget(1.0, 1e-5)
    with pytest.raises(ValueError, match="column 'a1'") as info:
        release_marginals(
            df, W, 1.0, 1e-6, domain=strict, budget=budget, rng=np.random.default_rng(1)
        )
    assert "99" not in str(info.value)
    assert budget.remaining == (1.0, 1e-5)
    # too many records for the declared max_records: refused from the spilled total
    _, clean, _ = _data()
    with pytest.raises(ValueError, match="max_records"):
        release_marginals(
            clean,
            W,
            1.0,
            1e-6,
            domain=dom,
            budget=budget,
            max_records=100,
            rng=np.random.default_rng(1),
        )
    assert budget.remaining == (1.0, 1e-5)
    with pytest.raises(ValueError, match="attribute sizes"):
        release_marginals(df, marginal_workload((3, 4), [(0, 1)]), 1.0, 1e-6, domain=dom)
