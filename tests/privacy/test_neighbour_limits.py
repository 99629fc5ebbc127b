"""Neighbouring datasets at every internal limit give the same non-noise outputs and spends
(issue 21, item 2): every magnitude check of a selection is in the plan, from the declaration.

Before issue 21 the selections range-checked W x against their noise grid after the spend, so
2**k - 1 records returned and 2**k raised with the budget charged on both sides. The sweep
(:mod:`neighbour_cases`) runs every method x path x workload at every limit k the code has
and asserts that nothing a neighbour can see besides the noise differs.
"""

import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import matmech as mm
from matmech.linalg.linop import Scaled
from matmech.svt import gap, vector
from matmech.svt.split import declared_grid
from matmech.svt.split import DeclarationError
from matmech.svt.grid import DECLARED_UNITS, MAX_UNITS, grid_for_bound
from matmech.workloads import identity, prefix

sys.path.insert(0, str(Path(__file__).resolve().parent))
import neighbour_cases as nc

CASES = nc.cases()


@pytest.mark.parametrize("case", CASES, ids=[c.label for c in CASES])
def test_neighbours_at_every_limit_see_the_same(case):
    for k in nc.ks(case):
        left, right, diff = nc.compare(case, k, strategy="identity")
        assert not diff, (case.label, k, {f: (left.get(f), right.get(f)) for f in diff})
        for side in (left, right):
            if (
                side["outcome"] == "raises"
            ):  # a refusal is made from the declaration, before any spend
                assert side["spent"] == (0.0, 0.0) and not side["ledger"], (case.label, k, side)
                assert "max_records=" in side["error"] and "fits" in side["error"], side["error"]
            else:
                assert side["spent"] == (
                    nc.EPS if case.path == "select_rows" else nc.EPS_TOTAL,
                    0.0,
                )


def test_the_sweep_reaches_the_old_limits():
    """The k where the grid overflowed before issue 21 are in the sweep, and the runs there
    return: every path, the issue's three examples among them."""
    seen = {c.label: nc.old_limits(c) for c in CASES}
    assert seen["topc-gap(vector=False)/select_rows/identity(64)*0.5"]
    assert 45 in seen["svt/select_rows/prefix(16)"]
    returned = 0
    for case in CASES:
        for k in sorted(nc.old_limits(case)):
            left, _, diff = nc.compare(case, k, strategy="identity")
            assert not diff
            returned += left["outcome"] == "returns"
    assert returned >= 60


@pytest.mark.parametrize("name", ["svt", "topc-gap", "adaptive-svt", "vector-top-c"])
def test_release_with_auto_strategy_at_the_old_limits(name):
    """strategy='auto' chooses the strategy for the selected rows after the spend (from the
    selection only): the same at the old limits."""
    case = next(
        c for c in CASES if c.name == name and c.path == "release" and c.workload == "prefix(16)"
    )
    for k in sorted(nc.old_limits(case) | {50}):
        left, _, diff = nc.compare(case, k, strategy="auto")
        assert not diff, (k, diff)
        assert left["outcome"] == "returns" and left["spent"] == (nc.EPS_TOTAL, 0.0)


# -- the issue's reproducers (neighbour_cases.REPRODUCERS) --------------------------------------


@pytest.mark.parametrize("fn", nc.REPRODUCERS[:3], ids=lambda f: f.__name__)
def test_the_issue_reproducers_return_on_both_neighbours_with_the_same_spend(fn):
    left, right = nc.run_reproducer(fn, 0), nc.run_reproducer(fn, 1)
    assert left == right
    assert left["outcome"] == "returns" and left["rows"] == [3 if fn is nc.repro_svt_2_50 else 0]
    assert left["spent"] == (2.0 if fn is nc.repro_factored_marginal else 1.0)


def test_the_issue_threshold_reproducer_is_refused_with_nothing_charged():
    out = nc.run_reproducer(nc.repro_threshold, 0)
    assert out["outcome"] == "raises" and out["spent"] == 0.0
    assert out["error"].startswith("ValueError: threshold = 1e+300 is too large in magnitude")


# -- public inputs and declarations are refused before the spend --------------------------------


@pytest.mark.parametrize(
    "method, extra, name",
    [
        ("svt", dict(threshold=1e300), "threshold"),
        ("svt-gap", dict(threshold=[0.0] * 15 + [-1e200]), r"threshold \(index 15\)"),
        ("adaptive-svt", dict(threshold=5.0, sigma=1e300), r"sigma \(the top-branch margin\)"),
        ("svt-gap", dict(threshold=1e300, vector=True), "threshold"),
    ],
)
def test_public_magnitudes_beyond_the_grid_are_refused_with_nothing_charged(method, extra, name):
    b = mm.PrivacyBudget(2.0)
    x = np.arange(16)
    with pytest.raises(
        ValueError,
        match=rf"^{name} = .* too large in magnitude for exact grid arithmetic: with "
        r"grid \S+ it must be at most \S+ in magnitude$",
    ):
        mm.select_rows(prefix(16), x, c=3, eps=1.0, method=method, budget=b, **extra)
    assert b.spent == (0.0, 0.0) and not b.ledger
    with pytest.raises(ValueError, match=name):  # the release path refuses it the same way
        mm.release(x, prefix(16), 2.0, select=dict(method=method, c=3, eps=1.0, **extra), budget=b)
    assert b.spent == (0.0, 0.0) and not b.ledger


def test_a_declaration_no_grid_holds_is_refused_naming_what_fits():
    W = Scaled(identity(64), 0.5)
    x = np.zeros(64, dtype=np.int64)
    b = mm.PrivacyBudget(5.0)
    pattern = r"max_records=1,125,899,906,842,624 .* at most max_records=([\d,]+) fits"
    with pytest.raises(ValueError, match=pattern) as info:
        mm.select_rows(
            W, x, c=2, eps=1.0, method="topc-gap", vector=True, budget=b, max_records=2**50
        )
    assert b.spent == (0.0, 0.0)
    fits = int(re.search(pattern, str(info.value)).group(1).replace(",", ""))
    s = mm.select_rows(
        W,
        x,
        c=2,
        eps=1.0,
        method="topc-gap",
        vector=True,
        budget=b,
        max_records=fits,
        rng=np.random.default_rng(0),
    )
    assert s.mechanism == "vector-top-c" and b.spent == (1.0, 0.0)
    with pytest.raises(ValueError, match="fits"):
        mm.select_rows(
            W, x, c=2, eps=1.0, method="topc-gap", vector=True, budget=b, max_records=fits + 1
        )
    assert b.spent == (1.0, 0.0)
    # vector="auto" never picks a vector its grid cannot hold: the [DWZK19] mechanism runs
    s = mm.select_rows(
        W,
        x,
        c=2,
        eps=1.0,
        method="topc-gap",
        budget=b,
        max_records=2**50,
        rng=np.random.default_rng(0),
    )
    assert s.mechanism == "noisy-top-c-gap"


# -- the grid rule, against a direct computation --------------------------------------------------


def test_grid_for_bound_is_the_finest_power_of_two_that_holds_the_bound():
    rng = np.random.default_rng(21)
    for b in np.concatenate(
        [2.0 ** rng.uniform(-30, 70, 300), [2.0**59, 2.0**60, 1.0, 3.0 * 2**50]]
    ):
        g = grid_for_bound(float(b))
        assert math.frexp(g)[0] == 0.5  # a power of two
        assert b / g <= DECLARED_UNITS < b / (g / 2)
    assert grid_for_bound(0.0) == 0.0
    with pytest.raises(ValueError, match="value_bound"):
        grid_for_bound(float("inf"))


def test_declared_grid_coarsens_never_refines_and_keeps_integers_on_it():
    assert declared_grid(2.0**-10, 2.0**40, 1.0, True) == 2.0**-10  # 2**50 units: already fine
    assert declared_grid(2.0**-20, 2.0**50, 1.0, True) == 2.0**-9  # coarsened to hold 2**50
    with pytest.raises(DeclarationError) as info:  # integers need a grid <= 1
        declared_grid(2.0**-20, 2.0**61, 1.0, True)
    assert info.value.fits == DECLARED_UNITS
    with pytest.raises(DeclarationError):  # snapping may add at most 2**-8 of the sensitivity
        declared_grid(2.0**-20, 2.0**52, 1.0, False)


def test_a_planned_run_holds_values_to_the_declaration_and_never_raises_on_them():
    """Given the declared value_bound the mechanisms neither check nor overflow on the values
    (the plan checked the declaration before the spend); without it they refuse before any draw."""
    values = np.array(
        [2.0**62, 3.0, 1.0]
    )  # beyond any grid: only reachable by breaking the declaration
    out = gap.noisy_top_c_gap(values, 1, 1.0, value_bound=2.0**40, rng=np.random.default_rng(0))
    assert out.positions == (0,)
    with pytest.raises(ValueError, match="too large in magnitude"):
        gap.noisy_top_c_gap(values, 1, 1.0, rng=np.random.default_rng(0))
    out = vector.noisy_vector_threshold(
        values,
        10.0,
        c=1,
        eps=1.0,
        sensitivity=1.0,
        value_bound=2.0**40,
        rng=np.random.default_rng(0),
    )
    assert out.positions == (0,) and abs(out.values[0] - 2.0**40) < 1e6
    assert MAX_UNITS == 2 * DECLARED_UNITS


# -- the charged and the calibrated eps are the same number: the decimal (issue 21, item 3) ------


@pytest.mark.parametrize("eps", [0.1, 0.2, 0.3, 0.7, 1e-3, 1.1, 0.5])
def test_noise_is_calibrated_for_the_decimal_eps_the_budget_charges(eps):
    """b * eps >= Delta in exact rationals for the decimal eps (Fraction(repr(eps))), not only
    for its binary float (0.1 is 1/10 + 5.6e-18 in binary), on every pure-eps calibration."""
    from fractions import Fraction

    from matmech.privacy.measure import plan_measurement
    from matmech.privacy.params import calibrated_eps, exact
    from matmech.strategies import hierarchical
    from matmech.svt.calibration import svt_budget
    from matmech.svt.gap_calibration import gap_calibration
    from matmech.svt.vector import vector_calibration

    dec = exact(eps)
    assert Fraction(calibrated_eps(eps)) <= dec and calibrated_eps(eps) >= math.nextafter(eps, 0)
    for A in (identity(8), hierarchical(8, 2), Scaled(identity(8), 0.3)):
        p = plan_measurement(A, eps)
        assert Fraction(p.scale) * dec >= Fraction(p.sensitivity)
    cal = svt_budget(
        c=3, eps=eps, sensitivity=1.0, integer_values=True
    )  # [LSL17] Alg. 7: eps1 + eps2
    assert (
        Fraction(1) / Fraction(cal.threshold_scale) + Fraction(2 * 3) / Fraction(cal.query_scale)
        <= dec
    )
    cal = gap_calibration("topc-gap", c=2, eps=eps, sensitivity=1.0, integer_values=True)
    assert Fraction(2 * 2) / Fraction(cal.query_scale) <= dec
    cal = gap_calibration("svt-gap", c=2, eps=eps, sensitivity=1.0, integer_values=True)
    assert (
        Fraction(1) / Fraction(cal.threshold_scale) + 2 * Fraction(2) / Fraction(cal.query_scale)
        <= dec
    )
    cal = vector_calibration(
        "vector-top-c", c=2, eps=eps, sensitivity=1.0, n_values=8, integer_values=True
    )
    assert Fraction(1) / Fraction(cal.scale) <= dec
    b = mm.PrivacyBudget(eps)  # the budget charges the decimal: one spend of eps fits exactly
    b.spend(eps)
    assert b.remaining == (0.0, 0.0)


def test_the_smallest_eps_still_measures():
    """eps = 1e-4 (EPS_MIN) is calibrated on the float just below it: still accepted."""
    from fractions import Fraction

    from matmech.privacy.measure import plan_measurement

    p = plan_measurement(identity(4), 1e-4)
    assert Fraction(p.scale) * Fraction(1, 10**4) >= 1


def test_interactive_sparse_vector_with_a_declared_bound_never_raises_on_a_value():
    """The interactive SVT draws its threshold noise at construction: a value check per query
    would be a data-dependent error after that. With value_bound the grid holds the bound."""
    from matmech.svt import SparseVector

    for side in (0, 1):  # 2**45 - 1 | 2**45 under a declared bound of 2**50
        sv = SparseVector(10.0, c=1, eps=1.0, value_bound=2.0**50, rng=np.random.default_rng(0))
        assert sv.test(2**45 - 1 + side) is True and sv.budget.grid >= 2.0**50 / DECLARED_UNITS
    sv = SparseVector(10.0, c=1, eps=1.0, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="too large in magnitude"):
        sv.test(2.0**45)
