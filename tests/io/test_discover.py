"""Private category discovery (issue 23 item 6): the threshold mechanism of Desfontaines et al.
(PoPETs 2022) with exact discrete Laplace noise, charged before any draw."""

import math

import numpy as np
import pandas as pd
import pytest

from matmech.run.discover import _scale, discover_categories, release_probability, threshold
from matmech.privacy.budget import BudgetExceededError, PrivacyBudget
from matmech.privacy.randomness import RandomSource, check_rng


def _pmf_tail(k, t, terms=20_000):
    """P[Z >= k] by summing the discrete Laplace pmf (a second method for the closed form)."""
    z = np.arange(-terms, terms + 1)
    w = np.exp(-np.abs(z) / t)
    return float(w[z >= k].sum() / w.sum())


@pytest.mark.parametrize("eps, delta", [(1.0, 1e-6), (0.1, 1e-9), (2.3, 1e-5), (0.5, 0.05)])
def test_the_threshold_is_the_smallest_that_hides_a_single_record(eps, delta):
    tau, t = threshold(eps, delta)
    assert t >= 1 / eps and t - 1 / eps < 2**-16
    for k in (tau - 1, tau - 2):
        if k >= 1:
            assert release_probability(k, t) == pytest.approx(_pmf_tail(k, t), rel=1e-9)
    assert (
        release_probability(tau - 1, t) <= delta
    )  # a one-record value passes with probability <= δ
    assert (
        tau == 2 or release_probability(tau - 2, t) > delta
    )  # and τ is the smallest such threshold


def test_a_one_record_value_is_released_with_the_stated_probability():
    """Monte Carlo over 40,000 one-record values in one call: within 4 SE of P[1 + Z >= τ]."""
    eps, delta, n = 1.0, 0.05, 40_000
    tau, t = threshold(eps, delta)
    p = release_probability(tau - 1, t)
    cols = {"v": [f"k{i}" for i in range(n)]}
    got = discover_categories(cols, "v", eps, delta, rng=np.random.default_rng(7), other=None)
    frac = len(got.values) / n
    assert abs(frac - p) <= 4 * math.sqrt(p * (1 - p) / n) and p <= delta
    assert got.threshold == tau and got.scale == t


def test_common_values_are_found_sorted_and_rare_ones_hidden():
    df = pd.DataFrame(
        {"carrier": ["UA"] * 300 + [" AA "] * 200 + ["B6"] * 150 + ["ZZ"] + [None, "", "  "]}
    )
    got = discover_categories(df, "carrier", 1.0, 1e-6, rng=np.random.default_rng(1))
    assert got.values == ("AA", "B6", "UA")  # trimmed, sorted; the one-record value is not released
    assert got.attribute.categories == ("AA", "B6", "UA") and got.attribute.other == "other"
    assert got.attribute.size == 4 and got.attribute.column == "carrier"
    assert "Desfontaines" in got.note and str(got.threshold) in got.note


def test_a_csv_file_gives_the_same_candidates(tmp_path):
    path = tmp_path / "f.csv"
    path.write_text("dest,x\n" + "".join(f"{d},1\n" for d in ["IAH"] * 50 + ["MIA"] * 60 + ["BQN"]))
    a = discover_categories(str(path), "dest", 1.0, 1e-6, rng=np.random.default_rng(3))
    b = discover_categories(
        {"dest": ["IAH"] * 50 + ["MIA"] * 60 + ["BQN"]},
        "dest",
        1.0,
        1e-6,
        rng=np.random.default_rng(3),
    )
    assert a.values == b.values == ("IAH", "MIA")
    with pytest.raises(ValueError, match="no such column"):
        discover_categories(str(path), "origin", 1.0, 1e-6)


class _Spy(RandomSource):
    """A reproducible source that records whether the budget was charged before its first draw."""

    def __init__(self, budget):
        super().__init__()
        self.inner, self.budget, self.spent_at_first_draw = (
            check_rng(np.random.default_rng(0)),
            budget,
            None,
        )

    def _generate(self, n):
        if self.spent_at_first_draw is None:
            self.spent_at_first_draw = self.budget.spent
        return self.inner._generate(n)


def test_the_budget_is_charged_before_the_first_draw_and_refusals_spend_nothing():
    budget = PrivacyBudget(1.0, 1e-5)
    spy = _Spy(budget)
    discover_categories({"v": ["a"] * 40 + ["b"] * 3}, "v", 0.5, 1e-6, budget=budget, rng=spy)
    assert spy.spent_at_first_draw == (0.5, 1e-6) and budget.spent == (0.5, 1e-6)

    class Unreadable(dict):
        def __getitem__(self, key):
            raise AssertionError("the data was read before the budget was checked")

    with pytest.raises(BudgetExceededError):
        discover_categories(Unreadable(v=[1]), "v", 0.75, 1e-6, budget=budget)
    with pytest.raises(ValueError, match="needs delta > 0"):
        discover_categories({"v": ["a"]}, "v", 0.1, 0.0, budget=budget)
    with pytest.raises(TypeError, match="column"):
        discover_categories({"v": ["a"]}, 3, 0.1, 1e-6, budget=budget)
    assert budget.spent == (0.5, 1e-6)


def test_the_scale_is_used_exactly_by_the_sampler():
    for eps in (0.1, 1.0, 2.3, 10.9):
        t = _scale(eps)
        assert t.denominator <= 2**16 and 0 <= t - 1 / eps < 2**-16


def test_values_ending_in_white_space_are_trimmed_alike_on_every_engine_before_the_spend(tmp_path):
    """Issue 31: SQL trim() removed spaces only, Python strip() all white space, so a CSV whose
    values end in a tab charged (eps, delta) and then refused the tab-ended values. Every
    source now trims the same characters (space, tab, line breaks) and gives the same values;
    other white space (a no-break space) is part of the value on every engine."""
    import csv

    import pyarrow as pa
    import pyarrow.parquet as pq
    import polars as pl

    raw = (
        ["ATL\t"] * 60
        + ["\tBOS \r"] * 50
        + ["ORD\x0b\x0c"] * 40
        + ["SFO\u00a0"] * 45
        + ["\t \n"] * 5
    )
    path = tmp_path / "tabbed.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["dest"])
        w.writerows([v] for v in raw)
    pq.write_table(pa.table({"dest": raw}), tmp_path / "tabbed.parquet")
    frame = pd.DataFrame({"dest": raw})
    sources = [
        str(path),
        str(tmp_path / "tabbed.parquet"),
        frame,
        pl.from_pandas(frame),
        pa.Table.from_pandas(frame),
        {"dest": raw},
    ]
    for src in sources:
        budget = PrivacyBudget(2.0, 1e-5)
        got = discover_categories(
            src, "dest", 1.0, 1e-6, budget=budget, rng=np.random.default_rng(4)
        )
        assert got.values == ("ATL", "BOS", "ORD", "SFO\u00a0"), type(src)
        assert got.attribute.categories == got.values and budget.spent == (1.0, 1e-6)
    # a declaration the release could not build is refused before anything is read or charged
    budget = PrivacyBudget(2.0, 1e-5)
    with pytest.raises(TypeError, match="name"):
        discover_categories(str(path), "dest", 1.0, 1e-6, name=5, budget=budget)
    assert budget.spent == (0.0, 0.0)


@pytest.mark.parametrize("engine", ["numpy", "duckdb"])
def test_the_white_space_rule_is_the_same_for_numbers_times_and_categories(engine):
    from matmech.io.domain import Domain, categories, numeric_bins, time_bins
    from matmech.sources.engines import histogram

    text = [" 1.5\t", "\n2.5\r", "\x0b3.5\x0c", "\u00a04.5", "4.5\u00a0", "\x1c1.5", "\t"]
    want_num = [1, 1, 1, 0, 0, 0]  # bins [1, 2), [2, 3), [3, 4), [4, 5) then the other cell
    dom = Domain(
        (numeric_bins("x", edges=[1, 2, 3, 4, 5], policy="other", other="?", missing="other"),)
    )
    got = histogram(pd.DataFrame({"x": text}), dom, engine=engine)
    assert got.tolist() == [*want_num[:3], 0, 4]
    cats = Domain((categories("c", ["CA", "NY"], other="?", policy="other", missing="other"),))
    got = histogram(
        pd.DataFrame({"c": ["CA\t", "\nNY", " CA ", "CA\u00a0", "\t\r"]}), cats, engine=engine
    )
    assert got.tolist() == [2, 1, 2]
    days = Domain(
        (time_bins("t", "2013-01-01", "2013-01-03", policy="other", other="?", missing="other"),)
    )
    got = histogram(
        pd.DataFrame({"t": ["\t2013-01-01\n", " 2013-01-02 05:00\r", "\u00a02013-01-01"]}),
        days,
        engine=engine,
    )
    assert got.tolist() == [1, 1, 1]
