"""Pure ε on the residual path (issue 14): exact L1 sensitivity from the factors, the table
plan, equality with a dense generalised least squares, Monte Carlo error, budget order."""

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import matmech as mm
from matmech import workloads as Wl
from matmech.measurements import residual as fmeasure
from matmech.measurements.residual import combine_tables, plan_residual_laplace
from matmech.release import release_factored
from matmech.linalg.linop import Dense, Identity, Kron, Ones
from matmech.linalg.normmax import factored_sensitivity
from matmech.linalg.residual import haar_contrasts, orthonormal_contrasts, table_sensitivity1
from matmech.optimizers.marginal_lattice import optimize_marginals_pure
from matmech.optimizers.residual import laplace_residual_variances, plan_residuals_laplace

from factored_data import DOM
from factored_data import codes as _codes
from factored_data import hist as _hist


def _factor(n, basis):
    if basis == "identity":
        return np.eye(n)
    return orthonormal_contrasts(n) if basis == "contrasts" else haar_contrasts(n)[0].astype(float)


def _marginal(domain, t):
    return Kron(*[Identity(n) if i in t else Ones(1, n) for i, n in enumerate(domain)]).dense()


# -- the L1 sensitivity from the factors -------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(2, 7), min_size=1, max_size=4), st.data())
def test_sensitivity_from_factors_equals_the_dense_stack(domain, data):
    domain = tuple(domain)
    d = len(domain)
    all_subsets = [s for k in range(d + 1) for s in itertools.combinations(range(d), k)]
    subsets = data.draw(st.lists(st.sampled_from(all_subsets), min_size=1, max_size=6, unique=True))
    theta = np.array(
        data.draw(st.lists(st.floats(0.01, 5.0), min_size=len(subsets), max_size=len(subsets)))
    )
    basis = data.draw(st.sampled_from(["identity", "contrasts", "integer"]))
    blocks = []
    for w, t in zip(theta, subsets):
        m = np.ones((1, 1))
        for i, n in enumerate(domain):
            m = np.kron(m, _factor(n, basis) if i in t else np.ones((1, n)))
        blocks.append(w * m)
    dense = float(np.abs(np.vstack(blocks)).sum(axis=0).max())
    assert table_sensitivity1(domain, subsets, theta, basis) == pytest.approx(dense, rel=1e-12)
    # and the branch and bound of the Kronecker stacks agrees (a second method from factors)
    terms = [
        (
            float(w),
            [Dense(_factor(n, basis)) if i in t else Ones(1, n) for i, n in enumerate(domain)],
        )
        for w, t in zip(theta, subsets)
    ]
    res = factored_sensitivity(terms, 1)
    assert res.exact and res.value == pytest.approx(dense, rel=1e-12)


def test_sensitivity_needs_no_domain_sized_array():
    domain = (10,) * 100
    subsets = list(itertools.combinations(range(100), 2))
    theta = np.full(len(subsets), 1.0 / len(subsets))
    assert table_sensitivity1(domain, subsets, theta) == pytest.approx(1.0)
    # the contrast basis would cost Π max‖Qᵢe‖₁ per table: why the tables are measured
    q = float(np.abs(orthonormal_contrasts(10)).sum(axis=0).max())
    assert table_sensitivity1(domain, subsets, theta, "contrasts") == pytest.approx(q * q)
    with pytest.raises(ValueError, match="non-negative"):
        table_sensitivity1(domain, subsets, -theta)


# -- the plan ------------------------------------------------------------------------------------


def test_plan_variances_equal_the_dense_gls_of_the_weighted_tables():
    subsets = [(0, 1), (1, 2), (3,), (0, 2, 3)]
    plan = plan_residuals_laplace(DOM, subsets)
    assert abs(plan.theta.sum() - 1) < 1e-12
    A = np.vstack([w * _marginal(DOM, t) for w, t in zip(plan.theta, plan.tables)])
    cov = 2.0 * np.linalg.pinv(A.T @ A)  # continuous Laplace at ε = 1, unit L1 sensitivity
    assert np.abs(A).sum(axis=0).max() == pytest.approx(1.0)
    W = np.vstack([_marginal(DOM, s) for s in plan.lattice.subsets])
    np.testing.assert_allclose(
        np.repeat(plan.cell_variances, plan.lattice.cells.astype(int)),
        np.einsum("ij,jk,ik->i", W, cov, W),
        rtol=1e-9,
    )
    assert plan.total == pytest.approx(np.trace(W @ cov @ W.T), rel=1e-9)


def test_plan_is_no_worse_than_its_starts_and_matches_the_marginal_optimiser_when_given_its_tables():
    W = Wl.marginals(DOM, 2)
    subsets = list(itertools.combinations(range(4), 2))
    assert np.array_equal(W.dense(), np.vstack([_marginal(DOM, s) for s in subsets]))
    plan = plan_residuals_laplace(DOM, subsets)
    lat = plan.lattice
    own = laplace_residual_variances(lat, np.full(len(lat.residuals), 1.0 / len(lat.residuals)))
    assert (
        plan.total
        <= float(
            np.sum(
                lat.cells
                * np.bincount(
                    lat.pair_s,
                    weights=(lat.norm2[lat.pair_t] / lat.pair_rest**2) * own[lat.pair_t],
                    minlength=len(lat.subsets),
                )
            )
        )
        + 1e-9
    )
    fit = optimize_marginals_pure(W)
    k = len(DOM)
    tables = [tuple(i for i in range(k) if m >> i & 1) for m in range(1 << k) if fit.theta[m] > 0]
    theta = [fit.theta[m] for m in range(1 << k) if fit.theta[m] > 0]
    given_plan = plan_residuals_laplace(DOM, subsets, tables=tables, theta=theta)
    searched = plan_residuals_laplace(
        DOM, subsets, search="all"
    )  # the same optimiser, called inside
    assert searched.tables == given_plan.tables and searched.total == pytest.approx(
        given_plan.total, rel=1e-9
    )
    # the optimiser's own value is σ²-free (noise variance 1 per unit L1): ours is 2× (Laplace 2b²)
    assert given_plan.total == pytest.approx(2 * fit.value, rel=1e-6)
    A = np.vstack([w * _marginal(DOM, t) for w, t in zip(given_plan.theta, given_plan.tables)])
    Wd = W.dense()
    dense = 2.0 * np.trace(Wd @ np.linalg.pinv(A.T @ A) @ Wd.T)
    assert given_plan.total == pytest.approx(dense, rel=1e-8)
    # the lattice plan measures only tables inside the closure; the marginal optimiser may
    # pick a larger table (here the full 4-way one), which is better on small domains
    assert given_plan.total <= plan.total
    with pytest.raises(ValueError, match="no table with a positive weight contains residual"):
        plan_residuals_laplace(DOM, subsets, tables=[(0, 1)], theta=[1.0])
    with pytest.raises(ValueError, match="search"):
        plan_residuals_laplace(DOM, subsets, search="greedy")
    # the release with search="all" answers with the searched plan's error
    codes = _codes(DOM, 500)
    r = release_factored(
        codes, W, 1.0, strategy="residual", search="all", rng=np.random.default_rng(0)
    )
    from matmech.linalg.residual import total_variance

    exact = total_variance(
        searched.lattice, plan_residual_laplace(searched, 1.0).row_variance
    )  # discrete noise
    assert r.expected_error == pytest.approx(exact, rel=1e-9) and exact < searched.total


def test_rounded_scales_spend_at_most_eps_exactly():
    plan = plan_residuals_laplace(DOM, [(0, 1), (2, 3), (1,)])
    for neighbors, factor in (("add_remove", 1), ("substitute", 2)):
        for bits in (None, 4, 9):
            mp = plan_residual_laplace(plan, 0.7, neighbors=neighbors, scale_bits=bits)
            loss = factor * sum(Fraction(1) / Fraction(float(b)) for b in mp.scales)
            assert loss <= Fraction(0.7) and loss > Fraction(0.7) * Fraction(99, 100) ** (
                1 if bits is None else 20
            )
    with pytest.raises(ValueError, match="too small"):
        plan_residual_laplace(plan, 1e-15)
    with pytest.raises(TypeError, match="LaplaceResidualAllocation"):
        plan_residual_laplace(object(), 1.0)


# -- the release -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "domain,subsets",
    [((3, 4, 2, 5), [(0, 1), (1, 2), (3,), (0, 2, 3)]), ((2, 1, 6), [(0, 1, 2), (2,)])],
)
def test_pure_release_equals_dense_gls_on_the_noisy_tables(domain, subsets, monkeypatch):
    codes = _codes(domain, 2000, seed=3)
    W = Wl.marginals(domain, attrs=subsets)
    seen = {}
    orig = fmeasure.combine_tables

    def spy(mplan, noisy, *, secure=False):
        seen["mplan"], seen["noisy"] = mplan, noisy
        return orig(mplan, noisy, secure=secure)

    monkeypatch.setattr(fmeasure, "combine_tables", spy)
    r = release_factored(codes, W, 1.0, 0.0, strategy="residual", rng=np.random.default_rng(5))
    mp, noisy = seen["mplan"], seen["noisy"]
    assert r.strategy_name == "residual" and r.delta == 0.0 and "Laplace" in r.strategy_note
    x = _hist(codes, domain)
    rows, ys, ws = [], [], []
    for j, t in enumerate(mp.plan.tables):
        M = _marginal(domain, t)
        y = np.ravel(noisy[t])
        assert np.array_equal(y, np.rint(y)) and not np.array_equal(y, M @ x)  # integers, noisy
        rows.append(M)
        ys.append(y)
        ws.append(np.full(M.shape[0], 1.0 / mp.table_variances[j]))
    A, y, w = np.vstack(rows), np.concatenate(ys), np.concatenate(ws)
    cov = np.linalg.pinv(A.T @ (w[:, None] * A))
    xhat = cov @ (A.T @ (w * y))
    Wd = W.dense()
    np.testing.assert_allclose(r.answers, Wd @ xhat, rtol=1e-9, atol=1e-8)
    np.testing.assert_allclose(r.std**2, np.einsum("ij,jk,ik->i", Wd, cov, Wd), rtol=1e-9)


def test_combine_tables_is_exact_without_noise():
    subsets = [(0, 1), (1, 3), (2,)]
    plan = plan_residuals_laplace(DOM, subsets)
    mp = plan_residual_laplace(plan, 1.0)
    x = _hist(_codes(DOM, 700), DOM).reshape(DOM)
    tables = {t: x.sum(axis=tuple(i for i in range(4) if i not in t)) for t in plan.tables}
    from matmech.estimators.reconstruct import MarginalReconstructor

    rec = MarginalReconstructor(combine_tables(mp, tables))
    for s in subsets:
        np.testing.assert_allclose(
            rec.marginal(s)[0], x.sum(axis=tuple(i for i in range(4) if i not in s)), atol=1e-9
        )


def test_monte_carlo_pure_residual():
    from matmech.measurements.residual import measure_residuals_laplace
    from matmech.estimators.reconstruct import MarginalReconstructor
    from matmech.sources.tables import marginal_tables

    domain = (3, 4, 2)
    codes = _codes(domain, 400)
    subsets = list(itertools.combinations(range(3), 2))
    W = Wl.marginals(domain, 2)
    truth = W.matvec(_hist(codes, domain))
    r = release_factored(codes, W, 1.0, strategy="residual", rng=np.random.default_rng(0))
    # the same plan (search="auto": all 2^d subsets for d <= 10), measured many times
    mp = plan_residual_laplace(plan_residuals_laplace(domain, subsets, search="all"), 1.0)
    tables = marginal_tables(codes, domain, mp.plan.tables)

    def answers(k):
        rec = MarginalReconstructor(
            measure_residuals_laplace(mp, tables, rng=np.random.default_rng(100 + k))
        )
        return np.concatenate([rec.marginal(s)[0].reshape(-1) for s in subsets])

    rec0 = MarginalReconstructor(
        measure_residuals_laplace(mp, tables, rng=np.random.default_rng(0))
    )
    exp = float(sum(rec0.marginal(s)[1].sum() for s in subsets))
    assert exp == pytest.approx(r.expected_error, rel=1e-12)
    np.testing.assert_allclose(
        answers(-100), r.answers, rtol=1e-12, atol=1e-9
    )  # the release is this
    runs = 2000
    errs = np.array([np.sum((answers(k) - truth) ** 2) for k in range(runs)])
    se = errs.std(ddof=1) / math.sqrt(runs)
    assert abs(errs.mean() - exp) <= 4 * se, (errs.mean(), exp, se)


def test_budget_is_charged_before_noise_and_refusals_draw_nothing():
    codes = _codes(DOM, 300)
    W = Wl.marginals(DOM, 2)
    budget = mm.PrivacyBudget(1.0)
    rng = np.random.default_rng(1)
    state = rng.bit_generator.state
    with pytest.raises(mm.BudgetExceededError):
        release_factored(codes, W, 1.5, strategy="residual", budget=budget, rng=rng)
    assert rng.bit_generator.state == state and budget.spent == pytest.approx((0.0, 0.0))
    bad = codes.copy()
    bad[0, 2] = 9
    with pytest.raises(ValueError, match="attribute 2") as e:
        release_factored(bad, W, 0.5, strategy="residual", budget=budget, rng=rng)
    assert (
        rng.bit_generator.state == state
        and budget.spent == pytest.approx((0.0, 0.0))
        and "300" not in str(e.value)
    )
    order = []
    real_spend = budget.spend_events  # every spend goes through it

    def spend(*a, **k):
        order.append("spend")
        return real_spend(*a, **k)

    real_draw = fmeasure.noise.discrete_laplace

    def draw(*a, **k):
        order.append("noise")
        return real_draw(*a, **k)

    mp = pytest.MonkeyPatch()
    mp.setattr(budget, "spend_events", spend)
    mp.setattr(fmeasure.noise, "discrete_laplace", draw)
    try:
        r = release_factored(codes, W, 0.6, strategy="residual", budget=budget, rng=rng)
    finally:
        mp.undo()
    assert order[0] == "spend" and order.count("spend") == 1 and "noise" in order
    assert budget.spent == pytest.approx((0.6, 0.0)) and r.budget_remaining == budget.remaining


def test_pure_release_on_a_domain_too_big_for_the_histogram():
    from matmech.linalg.terms import marginal_workload

    domain = (10,) * 40
    subsets = [()] + [(i,) for i in range(40)] + list(itertools.combinations(range(6), 2))
    W = marginal_workload(domain, subsets)
    rng = np.random.default_rng(0)
    codes = np.column_stack([rng.integers(0, 10, 500) for _ in domain])
    r = release_factored(codes, W, 1.0, rng=rng)
    assert r.strategy_name == "residual" and r.answers.shape == (W.shape[0],)
    assert np.all(np.isfinite(r.std)) and np.all(r.std > 0)
    assert r.answers[0] == pytest.approx(500, abs=8 * r.std[0])


# -- labels ------------------------------------------------------------------------------------


def test_release_labels_with_and_without_a_domain():
    from matmech.results.labels import release_labels
    from matmech.linalg.terms import marginal_workload
    from matmech.io.domain import Domain, categories, integer_range
    from matmech.results.release import release_table

    dom = Domain(
        (
            categories("sex", ["F", "M"]),
            integer_range("age", 18, 41, width=8),
            categories("x", ["a", "b", "c"]),
        )
    )
    assert dom.sizes == (2, 3, 3)
    codes = np.column_stack([np.arange(60) % 2, np.arange(60) % 3, (np.arange(60) // 2) % 3])
    W = marginal_workload(dom.sizes, [(), (0, 1), (2,)])
    rel = release_factored(codes, W, 1.0, 1e-6, rng=np.random.default_rng(0))
    labels = release_labels(W, dom)
    assert labels[:3] == ["total", "sex=F, age 18-25", "sex=F, age 26-33"] and labels[-1] == "x=c"
    table = release_table(rel, labels=labels)
    assert [r["query"] for r in table] == labels and len(table) == W.shape[0]
    import json

    assert json.loads(rel.to_json(labels=labels))["queries"][1]["query"] == "sex=F, age 18-25"
    assert (
        release_labels(W) == W.labels()
        and release_labels(W, names=["s", "g", "y"])[1] == "s=0, g=0"
    )
    # Kronecker terms: a prefix factor's rows are numbered, identity rows labelled, totals skipped
    K = Kron(Wl.prefix(2), Wl.total(3), Wl.identity(3))
    assert release_labels(K, dom)[:4] == ["sex#0, x=a", "sex#0, x=b", "sex#0, x=c", "sex#1, x=a"]
    # and a stack of marginals built with matmech.workloads gives the same labels as the subsets
    M = Wl.marginals(dom.sizes, 2)
    assert (
        release_labels(M)
        == marginal_workload(dom.sizes, list(itertools.combinations(range(3), 2))).labels()
    )
    with pytest.raises(ValueError, match="attribute sizes"):
        release_labels(marginal_workload((2, 3, 4), [(0,)]), dom)
    with pytest.raises(TypeError, match="Domain"):
        release_labels(W, (2, 3, 3))


@pytest.mark.parametrize("gaussian", [False, True])
def test_reconstructor_answers_equal_the_gls_of_the_records(gaussian):
    """MarginalReconstructor.answers → Answers equal to matmech.estimators.gls.estimate over the
    same measurement's records (the cell-space GLS), answers and variances (issue 22)."""
    from matmech.measurements.residual import (
        measure_residuals,
        measure_residuals_laplace,
        plan_residual_measurement,
    )
    from matmech.estimators.reconstruct import MarginalReconstructor
    from matmech.sources.tables import marginal_tables
    from matmech.estimators.gls import estimate

    domain = (3, 4, 2)
    subsets = list(itertools.combinations(range(3), 2))
    codes = _codes(domain, 300)
    if gaussian:
        from matmech.optimizers.residual import plan_residuals

        mp = plan_residual_measurement(plan_residuals(domain, subsets), 1.0, 1e-6)
        meas = measure_residuals(
            mp,
            marginal_tables(codes, domain, mp.plan.lattice.residuals),
            rng=np.random.default_rng(1),
        )
    else:
        mp = plan_residual_laplace(plan_residuals_laplace(domain, subsets, search="all"), 1.0)
        meas = measure_residuals_laplace(
            mp, marginal_tables(codes, domain, mp.plan.tables), rng=np.random.default_rng(1)
        )
    got = MarginalReconstructor(meas).answers(subsets)
    W = Wl.marginals(domain, 2)
    ref = estimate(meas.records, W)
    np.testing.assert_allclose(got.values, ref.values, rtol=0, atol=1e-8 * np.abs(ref.values).max())
    np.testing.assert_allclose(got.variances, ref.variances, rtol=1e-8)
