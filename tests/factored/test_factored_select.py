"""Private selection on the factored path (issue 14 item 3): the same rows and answers as the
explicit release where the mechanisms coincide, the budget charged once before any draw, exact
error bars (Monte Carlo), no value of x in a message, and 100 attributes without the domain."""

import itertools
import math

import numpy as np
import pytest

import matmech as mm
from matmech import workloads as Wl
from matmech.plans import factored_selected as fsel
from matmech.plans.factored_selection import plan_factored_selection
from matmech.plans import factored_rows as select_rows
from matmech.release import release_factored
from matmech.sources.tables import marginal_tables
from matmech.linalg.terms import marginal_workload
from matmech.linalg.linop import Dense, Kron, VStack
from matmech.privacy.budget import BudgetExceededError
from matmech.results.release import release_table

from factored_data import DOM
from factored_data import codes as _codes
from factored_data import hist as _hist

N = 2000


@pytest.fixture(scope="module")
def data():
    c = _codes(DOM, N)
    return c, _hist(c, DOM)


def _census():
    """Integer factors only: 0/1 custom, prefix, identity, total."""
    rng = np.random.default_rng(4)
    D = Dense(rng.integers(0, 2, size=(4, 3)).astype(float))
    return VStack(
        [
            Kron(D, Wl.total(4), Wl.prefix(2), Wl.total(5)),
            Kron(Wl.total(3), Wl.identity(4), Wl.identity(2), Wl.total(5)),
            Kron(Wl.identity(3), Wl.prefix(4), Wl.total(2), Wl.identity(5)),
        ],
        weights=[1.0, 2.0, 1.0],
    )


class _Engine:
    def __init__(self, codes):
        self.codes, self.calls = codes, []

    def marginal_counts(self, subsets):
        self.calls.append(list(subsets))
        return marginal_tables(self.codes, DOM, subsets)


# -- values and sensitivities from the factors against dense matrices --------------------------


@pytest.mark.parametrize("W", [Wl.marginals(DOM, 2), _census()], ids=["2-way", "census"])
def test_row_values_and_sensitivities_match_the_dense_workload(W, data):
    codes, x = data
    plan = plan_factored_selection(
        W, 1.0, 0.0, select=dict(method="em", c=5, eps=0.2), max_records=2**32, max_memory=1 << 30
    )
    tables = marginal_tables(codes, DOM, list(plan.subsets))
    parts = fsel.row_values(plan, tables)
    Wd = W.dense()
    w = np.repeat(plan.terms.weights, np.diff(plan.offsets))
    assert np.array_equal(
        np.concatenate(parts) * w, Wd @ x
    )  # same rows, same order, exact integers
    U = Wd / w[:, None]  # the unweighted rows that are measured
    rng = np.random.default_rng(0)
    for k in (1, 3, 8, 20):
        rows = np.sort(rng.choice(W.shape[0], size=k, replace=False))
        for p in (1, 2):
            value, exact, _ = fsel.rows_sensitivity(plan, rows, p)
            dense = np.max(np.sum(np.abs(U[rows]) ** p, axis=0)) ** (1 / p)
            assert (
                value == pytest.approx(dense, rel=1e-12) if exact else value >= dense * (1 - 1e-12)
            )
    # the worst case over any c rows bounds every selection of c rows
    worst = plan.worst_sensitivity
    for _ in range(20):
        rows = np.sort(rng.choice(W.shape[0], size=5, replace=False))
        assert np.max(np.sum(np.abs(U[rows]), axis=0)) <= worst


def test_cell_sensitivity_is_the_exact_clique_or_a_certified_bound(monkeypatch):
    """Selected cells of 1-, 2- and 3-way marginals: the maximum clique of consistent cells is
    the largest column norm of the dense rows; past the node cap the colouring bound is above it."""
    rng = np.random.default_rng(1)
    for trial in range(60):
        dom = tuple(rng.integers(2, 4, size=5).tolist())
        W = marginal_workload(
            dom, [s for k in (1, 2, 3) for s in itertools.combinations(range(5), k)]
        )
        plan = plan_factored_selection(
            W,
            1.0,
            0.0,
            select=dict(method="em", c=3, eps=0.2),
            max_records=2**32,
            max_memory=1 << 30,
        )
        Wd = W._explicit().dense()
        rows = np.sort(rng.choice(W.shape[0], size=int(rng.integers(1, 30)), replace=False))
        for p in (1, 2):
            dense = np.max(np.sum(Wd[rows] ** p, axis=0)) ** (1 / p)
            value, exact, how = fsel.rows_sensitivity(plan, rows, p)
            assert exact and "clique" in how and value == pytest.approx(dense, rel=1e-12)
            monkeypatch.setattr(select_rows, "CLIQUE_NODE_CAP", 1)
            value, exact, _ = fsel.rows_sensitivity(plan, rows, p)
            monkeypatch.undo()
            assert value >= dense * (1 - 1e-12)


# -- the same release as the explicit path --------------------------------------------------------


@pytest.mark.parametrize("W", [Wl.marginals(DOM, 2), _census()], ids=["2-way", "census"])
@pytest.mark.parametrize(
    "sel",
    [
        dict(method="em", c=4, eps=0.3),
        dict(method="svt", c=3, eps=0.3, threshold=300),
        dict(method="topc-gap", c=3, eps=0.3),
        dict(method="svt-gap", c=3, eps=0.4, threshold=250),
        dict(method="adaptive-svt", c=3, eps=0.4, threshold=250),
        dict(method="topc-gap", c=3, eps=0.3, vector=True),
    ],
    ids=lambda s: s["method"] + ("-vector" if s.get("vector") else ""),
)
def test_pure_eps_selection_equals_the_explicit_release(W, sel, data):
    """δ = 0, strategy "auto": the explicit advisor measures the selected rows themselves, so
    the two mechanisms coincide draw for draw."""
    codes, x = data
    a = mm.release(x, W, 1.0, select=sel, rng=np.random.default_rng(11))
    b = mm.release(codes, W, 1.0, select=sel, rng=np.random.default_rng(11))
    if a.selected.size:  # the explicit advisor measures the selected rows themselves; a union of
        # marginals takes the tables route from a histogram too (matmech.plans.route, issue 22)
        assert (
            "(workload)" if W.shape[0] != Wl.marginals(DOM, 2).shape[0] else "measured themselves"
        ) in a.strategy_note
    assert np.array_equal(a.selected, b.selected) and a.selection.stopped == b.selection.stopped
    np.testing.assert_allclose(b.answers, a.answers, rtol=0, atol=1e-9)
    np.testing.assert_allclose(b.std, a.std, rtol=1e-9)
    assert b.eps_select == a.eps_select and b.spent == a.spent
    ta, tb = release_table(a), release_table(b)
    assert [r["status"] for r in ta] == [r["status"] for r in tb]
    assert (
        b.to_dict()["selection"]["gaps_combined" if a.selection.gap is not None else "method"]
        == a.to_dict()["selection"]["gaps_combined" if a.selection.gap is not None else "method"]
    )


def test_duplicate_selected_rows_are_answered_exactly_on_both_paths(data):
    """Issue 22 reproducer: census, svt-gap, seed 11 selects rows 0 and 2, the same query. The
    answers' covariance is singular; before, the explicit path dropped the gaps with a Cholesky
    message and the factored path (on AVX-512 kernels) answered 1,335.4 ± 5.66 for 1,007. Now
    both answer from the measurement (the gaps are never combined, issue 31), equal answers
    for equal rows, under 1 and 2 BLAS threads alike."""
    from threadpoolctl import threadpool_limits

    codes, x = data
    W, sel = _census(), dict(method="svt-gap", c=3, eps=0.4, threshold=250)
    truth = W.dense() @ x
    runs = []
    for threads in (1, 2):
        with threadpool_limits(limits=threads, user_api="blas"):
            for src in (x, codes):
                runs.append(mm.release(src, W, 1.0, select=sel, rng=np.random.default_rng(11)))
    first = runs[0]
    assert first.selected.tolist() == [0, 1, 2]
    for r in runs:
        assert np.array_equal(r.selected, first.selected)
        assert "gaps not combined" not in r.strategy_note and "Cholesky" not in r.strategy_note
        assert r.to_dict()["selection"]["gaps_combined"] is False
        np.testing.assert_allclose(r.answers, first.answers, rtol=0, atol=1e-9)
        np.testing.assert_allclose(r.std, first.std, rtol=1e-9)
        assert r.answers[0] == pytest.approx(r.answers[2], rel=1e-12) and r.std[0] == pytest.approx(
            r.std[2], rel=1e-12
        )
        assert np.all(np.abs(r.answers - truth[r.selected]) < 4 * r.std)


def test_substitution_neighbours_equal_the_explicit_release(data):
    codes, x = data
    W, sel = Wl.marginals(DOM, 2), dict(method="em", c=4, eps=0.3)
    a = mm.release(x, W, 1.0, select=sel, neighbors="substitute", rng=np.random.default_rng(5))
    b = mm.release(codes, W, 1.0, select=sel, neighbors="substitute", rng=np.random.default_rng(5))
    assert "measured themselves" in a.strategy_note and np.array_equal(
        a.selected, b.selected
    )  # the tables route
    np.testing.assert_allclose(b.answers, a.answers, rtol=0, atol=1e-9)
    np.testing.assert_allclose(b.std, a.std, rtol=1e-9)
    assert b.selection.sensitivity == a.selection.sensitivity == 1.0  # hi − lo of 0/1 rows


@pytest.mark.parametrize("W", [Wl.marginals(DOM, 2), _census()], ids=["2-way", "census"])
def test_gaussian_selection_equals_select_rows_then_measuring_the_rows(W, data):
    """δ > 0: the selection of matmech.select_rows and matmech.measure of the dense selected
    rows (the same plan: integer rows, grid 1, Δ₂ with its margin) give the same draws; the
    answers are their least-squares projection (dense pinv here, factored Gram there)."""
    codes, x = data
    eps, delta, sel = 1.0, 1e-6, dict(method="em", c=5, eps=0.25)
    rng = np.random.default_rng(3)
    s = mm.select_rows(W, x, rng=rng, c=5, eps=0.25, method="em")
    rows = np.sort(s.rows)
    plan = plan_factored_selection(W, eps, delta, select=sel, max_records=2**32, max_memory=1 << 30)
    weights = np.repeat(np.asarray(plan.terms.weights), np.diff(plan.offsets))
    Wd = W.dense()
    R = Wd[rows] / weights[rows, None]
    m = mm.measure(x, R, mm.privacy.params.rest_of(eps, 0.25), delta, rng=rng)
    b = mm.release(codes, W, eps, delta, select=sel, rng=np.random.default_rng(3))
    assert np.array_equal(b.selected, rows)
    P = R @ np.linalg.pinv(R)  # least squares on the measured rows, from the dense matrix
    np.testing.assert_allclose(b.answers, weights[rows] * (P @ m.y), rtol=0, atol=1e-9)
    np.testing.assert_allclose(b.std, weights[rows] * m.std * np.sqrt(np.diag(P)), rtol=1e-9)


# -- budget order ----------------------------------------------------------------------------------


def test_budget_is_charged_once_before_the_first_draw_and_overspend_changes_nothing(
    data, monkeypatch
):
    codes, _ = data
    W = Wl.marginals(DOM, 2)
    budget = mm.PrivacyBudget(2.0, 1e-5, accountant="basic")  # the sums read below
    seen = []
    real_run = fsel.run_selection
    real_dg = fsel.noise.discrete_gaussian

    def run(plan, *, rng=None):
        seen.append(("select", budget.spent, len(budget.ledger)))
        return real_run(plan, rng=rng)

    def dg(*a, **k):
        seen.append(("measure", budget.spent, len(budget.ledger)))
        return real_dg(*a, **k)

    monkeypatch.setattr(fsel, "run_selection", run)
    monkeypatch.setattr(fsel.noise, "discrete_gaussian", dg)
    rel = mm.release(
        codes,
        W,
        1.0,
        1e-6,
        select=dict(method="em", c=3, eps=0.2),
        budget=budget,
        rng=np.random.default_rng(0),
    )
    assert [s[0] for s in seen] == ["select", "measure"]
    assert all(
        s[1] == pytest.approx((1.0, 1e-6)) and s[2] == 1 for s in seen
    )  # one spend, before any draw
    assert rel.budget_remaining == pytest.approx((1.0, 9e-6))
    # overspend: refused before the data is read or anything drawn; the ledger is unchanged
    eng, rng = _Engine(codes), np.random.default_rng(1)
    state, ledger = rng.bit_generator.state, budget.ledger
    seen.clear()
    with pytest.raises(BudgetExceededError):
        mm.release(
            eng, W, 1.5, 1e-6, select=dict(method="em", c=3, eps=0.2), budget=budget, rng=rng
        )
    assert (
        budget.ledger == ledger
        and eng.calls == []
        and seen == []
        and rng.bit_generator.state == state
    )


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(strategy="identity"), "measures the selected rows themselves"),
        (dict(select=dict(method="em", c=3, eps=1.0)), "must be less than"),
        (dict(select=dict(method="em", c=3, eps=0.2, threshold=5)), "takes no threshold"),
        (dict(select=dict(method="svt", c=3, eps=0.2)), "needs a threshold"),
        (dict(select=dict(method="em", c=3, eps=0.2, bogus=1)), "unknown select option"),
        (dict(select=dict(method="em", c=0, eps=0.2)), "c must be a positive integer"),
        (
            dict(select=dict(method="em", c=3, eps=0.2, monotonic=True), neighbors="substitute"),
            "monotonic=True",
        ),
        (dict(max_memory=1000), r"GiB \(> max_memory"),
        (
            dict(W=Kron(Dense(np.full((2, 3), 0.5)), Wl.identity(4), Wl.total(2), Wl.total(5))),
            "non-integer factor",
        ),
        (dict(eps=1e-4 * 1.5, select=dict(method="em", c=3, eps=1e-4)), "too small"),
    ],
)
def test_bad_requests_are_refused_before_anything_is_read_or_spent(bad, match, data):
    codes, _ = data
    kw = dict(
        W=Wl.marginals(DOM, 2),
        eps=1.0,
        select=dict(method="em", c=3, eps=0.2),
        strategy="auto",
        neighbors="add_remove",
        max_memory=1 << 30,
    )
    kw.update(bad)
    eng, budget, rng = _Engine(codes), mm.PrivacyBudget(5.0), np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises((ValueError, TypeError), match=match):
        release_factored(eng, kw.pop("W"), kw.pop("eps"), budget=budget, rng=rng, **kw)
    assert eng.calls == [] and budget.ledger == () and rng.bit_generator.state == state


# -- error bars: Monte Carlo -------------------------------------------------------------------------


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_monte_carlo_mse_of_the_selected_answers_matches_the_analytic_variance(delta, data):
    codes, x = data
    W = _census()
    truth = W.dense() @ x
    rng = np.random.default_rng(7 if delta else 8)
    z2 = []
    for _ in range(300):
        rel = release_factored(
            codes, W, 0.6, delta, select=dict(method="em", c=4, eps=0.1), rng=rng
        )
        z2.extend(((rel.answers - truth[rel.selected]) / rel.std) ** 2)
    z2 = np.asarray(z2)
    se = z2.std(ddof=1) / math.sqrt(z2.size)
    assert abs(z2.mean() - 1.0) < 4 * se, (z2.mean(), se)


# -- nothing private in messages -----------------------------------------------------------------


def test_messages_and_notes_carry_no_value_of_x():
    codes = _codes(DOM, 1237)  # a distinctive record count
    W = Wl.marginals(DOM, 2)
    with pytest.raises(ValueError, match="more records than the declared max_records") as e:
        mm.release(
            codes,
            W,
            1.0,
            select=dict(method="em", c=3, eps=0.2),
            max_records=1000,
            rng=np.random.default_rng(0),
        )
    assert "1237" not in str(e.value) and "1,237" not in str(e.value)
    bad = codes.copy()
    bad[41, 3] = 17
    with pytest.raises(ValueError, match="attribute 3 holds a code outside") as e:
        mm.release(
            bad, W, 1.0, select=dict(method="em", c=3, eps=0.2), rng=np.random.default_rng(0)
        )
    assert "17" not in str(e.value) and "41" not in str(e.value)
    x = _hist(codes, DOM)
    counts = {str(int(v)) for v in W.dense() @ x if v > 9}
    rel = mm.release(
        codes, W, 1.0, select=dict(method="topc-gap", c=3), rng=np.random.default_rng(0)
    )
    assert rel.select_options.get("_advised") and not any(
        cnt in rel.strategy_note for cnt in counts
    )
    assert "1237" not in rel.to_json().replace(" ", "").split('"queries"')[0]


# -- many attributes: the domain is never built ----------------------------------------------------


def test_one_hundred_attributes_of_ten_values_all_two_way_marginals(monkeypatch):
    d, n = 100, 300
    rng = np.random.default_rng(5)
    latent = rng.integers(0, 3, size=n)
    codes = np.column_stack(
        [(latent * (i % 3 + 1) + rng.integers(0, 2, size=n)) % 10 for i in range(d)]
    )
    subsets = list(itertools.combinations(range(d), 2))
    W = marginal_workload((10,) * d, subsets)
    assert W.shape == (len(subsets) * 100, 10**100)

    def never(*a, **k):
        raise AssertionError("nothing over the domain may be built")

    monkeypatch.setattr(type(W), "_explicit", never)
    budget = mm.PrivacyBudget(1.0, 1e-6)
    rel = mm.release(
        codes,
        W,
        1.0,
        1e-6,
        select=dict(method="em", c=10, eps=0.3),
        budget=budget,
        rng=np.random.default_rng(2),
    )
    assert rel.selected.size == 10 and budget.remaining == pytest.approx((0.0, 0.0))
    assert rel.selection.sensitivity == 1.0
    # the selected cells against counts from the records
    for r, a, s in zip(rel.selected.tolist(), rel.answers, rel.std):
        (i, j), cell = subsets[r // 100], divmod(r % 100, 10)
        true = int(np.sum((codes[:, i] == cell[0]) & (codes[:, j] == cell[1])))
        assert abs(a - true) < 6 * s
    # the L2 sensitivity of the selected rows: at most sqrt(#distinct marginals hit)
    hit = len({r // 100 for r in rel.selected.tolist()})
    assert "L2 sensitivity" in rel.strategy_note
    assert np.all(rel.std <= np.sqrt(hit) * rel.std.min() * 1.0001)
    table = release_table(rel)
    assert sum(row["status"] == "answered" for row in table) == 10 and len(table) == W.shape[0]


def test_threshold_auto_tests_each_row_against_a_bound_on_its_std(data):
    """threshold="auto": row i is tested against |w_i|·sqrt(worst variance)/target, and every
    answered row's std is at most that bound (the selection cannot make it larger)."""
    codes, _ = data
    W = _census()
    sel = dict(method="svt", c=6, eps=0.3, threshold="auto", target_rel_error=0.05)
    plan = plan_factored_selection(W, 1.0, 0.0, select=sel, max_records=2**32, max_memory=1 << 30)
    w = np.abs(np.repeat(plan.terms.weights, np.diff(plan.offsets)))
    np.testing.assert_allclose(plan.select["threshold"], w * math.sqrt(plan.worst_variance) / 0.05)
    rel = release_factored(codes, W, 1.0, select=sel, rng=np.random.default_rng(4))
    assert rel.selected.size > 0
    assert np.all(rel.std <= w[rel.selected] * math.sqrt(plan.worst_variance) * (1 + 1e-12))
    assert rel.to_dict()["selection"]["threshold_rule"].startswith("row i is tested")
