"""Tests for matmech.release: Monte Carlo agreement with the analytic error, budget, bad input.

Monte Carlo design. For a fixed histogram x, workload W and strategy A, every release's
error vector is e = K z with K = W A_g⁺ (A_g the measured matrix) and z the iid discrete
noise (variance s², fourth moment μ₄). Its total squared error S = zᵀQz, Q = KᵀK, has

    E[S] = s² tr Q,        Var[S] = 2 s⁴ tr Q² + (μ₄ − 3 s⁴) Σᵢ Qᵢᵢ²,

computed here from dense matrices and the noise pmf, independently of matmech.error. Over
R seeded runs the mean of S must lie within z·sqrt(Var[S]/R) of release's
``expected_error``, z = 4 (two-sided p ≈ 6e-5 per case under the CLT, so a false alarm in
any of the ~10 cases has probability < 1e-3). Unbiasedness: each query's mean error must lie
within z_m·std/√R, z_m the Bonferroni quantile for the m queries at the same level.
Strategies: identity, hierarchical, Haar (all ranges over 32 cells) and matmech.optimize's
output for all ranges over 64 cells (p-Identity for pure ε, the L2 optimum for δ > 0), each
under pure ε and (ε, δ); the seeds are fixed, so the outcome is deterministic.
"""

import json
import math

import numpy as np
import pytest
from scipy.special import ndtri

import matmech as mm
from matmech import strategies as S
from matmech import workloads as Wk
from matmech.privacy.budget import BudgetExceededError, PrivacyBudget
import functools

from matmech.error import expected_error
from matmech.linalg.linop import Dense, Kron, RowSubset
from matmech.release import Release, choose_strategy, release
from matmech.results.release import release_table

continuous_expected_error = functools.partial(expected_error, noise="continuous")

N = 32
RUNS = 500
Z = 4.0
X = np.random.default_rng(2024).integers(0, 20, N)
W = Wk.all_range(N)
TRUTH = W @ X


N_OPT = 64  # all ranges over 64 cells: the first size where the pure-eps optimum beats the identity


def optimised_strategy(delta):
    """matmech.optimize's strategy for all ranges over N_OPT cells: p-Identity (pure eps) or
    the certified L2 optimum (delta > 0); real-valued, so release rounds it to a grid."""
    from matmech.optimizers.l2 import L2Strategy
    from matmech.optimizers.pidentity import PIdentity

    A = mm.optimize(Wk.all_range(N_OPT), 1.0, delta).strategy
    assert isinstance(A, L2Strategy if delta > 0 else PIdentity), type(
        A
    )  # not the identity fallback
    return A


def noise_moments(meas):
    """(variance, fourth moment) of one noise entry, from the pmf (not from matmech.privacy.noise)."""
    g = meas.grid
    if meas.noise == "discrete_laplace":
        p = math.exp(-g / meas.scale)  # P[k] ∝ p^|k| on the lattice gℤ
        var = 2 * p / (1 - p) ** 2
        mu4 = 2 * p * (1 + 11 * p + 11 * p * p + p**3) / ((1 + p) * (1 - p) ** 4)
        return var * g * g, mu4 * g**4
    sigma = meas.scale / g
    if sigma > 1000:  # Poisson summation: moments equal the continuous ones to ~e^(-2π²σ²)
        return meas.scale**2, 3 * meas.scale**4
    k = np.arange(-int(40 * sigma) - 5, int(40 * sigma) + 6, dtype=float)
    w = np.exp(-k * k / (2 * sigma * sigma))
    w /= w.sum()
    return (w * k**2).sum() * g * g, (w * k**4).sum() * g**4


CASES = [
    ("identity", N, lambda: S.identity(N), 1.0, 0.0),
    ("identity", N, lambda: S.identity(N), 1.0, 1e-6),
    ("hierarchical", N, lambda: S.hierarchical(N, 2), 1.0, 0.0),
    ("hierarchical", N, lambda: S.hierarchical(N, 4), 1.0, 1e-6),
    ("haar", N, lambda: S.haar(N), 1.0, 0.0),
    ("haar", N, lambda: S.haar(N), 1.0, 1e-6),
    ("optimised", N_OPT, lambda: optimised_strategy(0.0), 1.0, 0.0),
    ("optimised", N_OPT, lambda: optimised_strategy(1e-6), 1.0, 1e-6),
    ("identity eps=2", N, lambda: S.identity(N), 2.0, 0.0),  # discrete variance 0.36 vs Laplace 0.5
]


@pytest.mark.parametrize("name, n, make, eps, delta", CASES, ids=[f"{c[0]}-{c[4]}" for c in CASES])
def test_monte_carlo_matches_expected_error(name, n, make, eps, delta):
    A = make()
    rng = np.random.default_rng([7, int(eps * 10), int(delta > 0), len(name)])
    W = Wk.all_range(n)
    x = X if n == N else np.random.default_rng(2025).integers(0, 20, n)
    truth = W @ x
    totals, mean_err = np.empty(RUNS), np.zeros(W.shape[0])
    for r in range(RUNS):
        rel = release(x, W, eps, delta, strategy=A, rng=rng)
        e = rel.answers - truth
        totals[r] = e @ e
        mean_err += e / RUNS
    meas = rel.measurement
    # the analytic figures, recomputed densely from the measured matrix and the pmf
    K = W.dense() @ np.linalg.pinv(meas.strategy.dense())
    Q = K.T @ K
    s2, mu4 = noise_moments(meas)
    assert meas.std**2 == pytest.approx(s2, rel=1e-9)
    np.testing.assert_allclose(rel.std**2, s2 * np.einsum("ij,ij->i", K, K), rtol=1e-7)
    assert rel.expected_error == pytest.approx(s2 * np.trace(Q), rel=1e-7)
    var_s = 2 * s2**2 * np.sum(Q * Q) + (mu4 - 3 * s2**2) * np.sum(np.diag(Q) ** 2)
    tol = Z * math.sqrt(var_s / RUNS)
    print(
        f"{name} delta={delta}: mean S {totals.mean():.1f}, expected {rel.expected_error:.1f}, tol {tol:.1f} ({tol / rel.expected_error:.1%})"
    )
    assert abs(totals.mean() - rel.expected_error) <= tol, (totals.mean(), rel.expected_error, tol)
    # unbiased: every query's mean error within its Bonferroni-corrected interval
    z_m = float(ndtri(1 - math.erfc(Z / math.sqrt(2)) / 2 / W.shape[0]))
    assert np.all(np.abs(mean_err) <= z_m * rel.std / math.sqrt(RUNS))
    if name == "identity eps=2":
        # the test has the power to tell the discrete noise from continuous Laplace
        assert abs(totals.mean() - continuous_expected_error(W, A, eps, delta)) > tol


# -- budget ------------------------------------------------------------------------------------


def test_tenths_of_a_budget_through_release():
    budget = PrivacyBudget(0.3)
    a = release(X, W, 0.1, strategy="identity", budget=budget, rng=np.random.default_rng(1))
    b = release(X, W, 0.2, strategy="identity", budget=budget, rng=np.random.default_rng(2))
    assert a.spent == (0.1, 0.0) and b.budget_remaining == (0.0, 0.0)
    rng = np.random.default_rng(3)
    before = rng.bit_generator.state
    with pytest.raises(BudgetExceededError, match="remains"):
        release(X, W, 0.05, strategy="identity", budget=budget, rng=rng)
    assert rng.bit_generator.state == before and budget.spent == (0.3, 0.0)


def test_overspend_refused_and_nothing_drawn():
    budget = PrivacyBudget(1.0, 1e-6)
    rng = np.random.default_rng(4)
    before = rng.bit_generator.state
    with pytest.raises(BudgetExceededError):
        # its ρ (a Gaussian for (1, 1e-5)) is above the zCDP capacity of (1, 1e-6), its δ above 1e-6
        release(X, W, 1.0, 1e-5, strategy="hierarchical", budget=budget, rng=rng)
    assert rng.bit_generator.state == before and budget.spent == (0.0, 0.0) and not budget.ledger


BAD = [
    (dict(x=np.r_[X[:-1], -1]), ValueError, r"x holds an entry that is negative"),
    (dict(x=np.r_[X[:-1], 0.5]), ValueError, r"x holds an entry that is not an integer"),
    (dict(x=np.r_[X[:-1], np.nan]), ValueError, "not finite"),
    (dict(x=np.r_[X[:-1], np.inf]), ValueError, "not finite"),
    (dict(x=X[:-1]), ValueError, "the workload has 32 columns but x has 31 cells"),
    (dict(eps=0.0), ValueError, "eps must be a positive"),
    (dict(eps=-1.0), ValueError, "eps must be a positive"),
    (dict(delta=1.5), ValueError, "delta must be in"),
    (dict(strategy=Wk.total(N)), ValueError, "not in the strategy's row space"),
    (
        dict(strategy=RowSubset(S.identity(N), np.arange(N - 1))),
        ValueError,
        "not in the strategy's row space",
    ),
    (dict(strategy=S.identity(N + 1)), ValueError, "strategy has 33 columns"),
    (dict(strategy="wavelets"), ValueError, "strategy must be"),
    (dict(W=[(0, 40)], domain=32), ValueError, "interval 0 = \\(0, 40\\) is invalid"),
    (dict(W=[(0, 4)]), ValueError, "no domain was declared"),
    (dict(W=[(0.5, 3)], domain=32), TypeError, "integers"),
    (dict(neighbors="both"), ValueError, "neighbors"),
    (dict(budget=0.5), TypeError, "budget must be"),
    (dict(rng="seed"), TypeError, "rng must be"),
]


@pytest.mark.parametrize("kwargs, exc, pattern", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_raises_and_spends_nothing(kwargs, exc, pattern):
    budget = PrivacyBudget(10.0, 0.1)
    rng = np.random.default_rng(5)
    before = rng.bit_generator.state
    args = dict(x=X, W=W, eps=1.0, delta=0.0, strategy="identity", budget=budget, rng=rng)
    args.update(kwargs)
    with pytest.raises(exc, match=pattern):
        release(args.pop("x"), args.pop("W"), args.pop("eps"), args.pop("delta"), **args)
    assert budget.spent == (0.0, 0.0) and rng.bit_generator.state == before


# -- shapes of W, output helpers ------------------------------------------------------------------


def test_intervals_list_table_and_json():
    rel = release(
        X,
        [(0, 3), (4, 31), (7, 7)],
        1.0,
        strategy="hierarchical",
        rng=np.random.default_rng(6),
        domain=32,
    )
    assert isinstance(rel, Release) and rel.answers.shape == (3,) and rel.std.shape == (3,)
    rows = release_table(rel)
    assert [r["query"] for r in rows] == ["[0, 3]", "[4, 31]", "[7, 7]"]
    law = rel.interval_law()
    for r, h, how in zip(rows, law.half, law.method):
        assert r["lower"] == pytest.approx(r["answer"] - h) and r["upper"] == pytest.approx(
            r["answer"] + h
        )
        assert r["interval"] == how and how in ("exact", "convolution", "normal", "cornish-fisher")
    assert [r["query"] for r in release_table(rel, ["a", "b", "c"])] == ["a", "b", "c"]
    with pytest.raises(ValueError, match="2 labels for 3 queries"):
        release_table(rel, ["a", "b"])
    data = json.loads(rel.to_json())
    assert data["eps"] == 1.0 and data["delta"] == 0.0 and len(data["queries"]) == 3
    assert (
        data["noise"]["distribution"] == "discrete_laplace"
        and data["noise"]["secure_randomness"] is False
    )
    assert data["strategy"]["name"] == "hierarchical b=16"
    lo, hi = rel.interval(0.5)
    assert np.all(lo < rel.answers) and np.all(rel.answers < hi)
    with pytest.raises(AttributeError):
        rel.eps = 3.0
    with pytest.raises(ValueError):
        rel.answers[0] = 0.0


def test_auto_choice_is_data_independent_and_explained():
    A, name, note = choose_strategy(W, 1.0)
    A2, name2, _ = choose_strategy(W, 1.0)
    assert name == name2 and A.shape == A2.shape
    rel = release(X, W, 1.0, rng=np.random.default_rng(8))
    assert rel.strategy_note and rel.expected_error > 0
    if "not available" in note:
        assert (
            rel.expected_error
            <= release(X, W, 1.0, strategy="identity", rng=np.random.default_rng(8)).expected_error
        )


def test_multi_attribute_workload():
    x = np.random.default_rng(9).integers(0, 30, 4 * 8)
    Wm = Wk.marginals((4, 8), 1)
    for strategy in ("hierarchical", "identity", "haar", Kron(S.hierarchical(4, 2), S.haar(8))):
        rel = release(x, Wm, 2.0, strategy=strategy, rng=np.random.default_rng(10))
        assert rel.answers.shape == (12,)
        assert np.all(np.abs(rel.answers - Wm @ x) < 12 * rel.std)


def test_secure_default_release():
    rel = release(X, [(0, 31)], 1.0, strategy="identity", domain=32)
    assert rel.measurement.secure is True


def test_woodbury_interval_variances_match_the_general_path():
    from matmech.privacy.calibration import noise_variance
    from matmech.error import per_query_variance, sensitivity
    from matmech.privacy.measure import plan_measurement
    from matmech.release import _answer_variances

    r = np.random.default_rng(12)
    theta = r.random((6, N))
    A = Dense(np.vstack([np.eye(N), theta]) / (1 + theta.sum(0)))
    plan = plan_measurement(A, 1.0)
    fast = _answer_variances(W, plan)
    Ag = plan.strategy
    general = (
        per_query_variance(W, Ag, 1.0)
        * plan.std**2
        / noise_variance(1.0, sensitivity=sensitivity(Ag, 1))
    )
    np.testing.assert_allclose(fast, general, rtol=1e-8)
    K = W.dense() @ np.linalg.inv(Ag.dense().T @ Ag.dense())
    np.testing.assert_allclose(fast, plan.std**2 * np.einsum("ij,ij->i", K, W.dense()), rtol=1e-8)


@pytest.mark.parametrize(
    "eps, delta",
    [("1", 0.0), (1.0, "0"), (True, 0.0), (1.0, False), (b"1", 0.0), (np.bool_(True), 0.0)],
)
def test_privacy_parameters_are_never_converted_from_strings_or_bools(eps, delta):
    from matmech.privacy.params import check_privacy_params

    name = "eps" if isinstance(eps, (str, bytes, bool, np.bool_)) else "delta"
    with pytest.raises(TypeError, match=f"must be real numbers, got {name}="):
        check_privacy_params(eps, delta)
    with pytest.raises(TypeError, match="must be real numbers"):
        mm.expected_error(W, S.identity(N), eps, delta)
    assert check_privacy_params(np.float32(0.5), 0) == (0.5, 0.0)


def test_interval_list_needs_a_declared_domain_and_x_must_match_it():
    """Raw values passed as x are not counts: an interval list without a domain is refused,
    and a declared domain that x does not match is refused, before anything is spent."""
    ages = np.random.default_rng(1).integers(18, 90, size=300)  # raw ages, not a histogram
    budget = mm.PrivacyBudget(1.0)
    with pytest.raises(ValueError, match="no domain was declared"):
        release(ages, [(0, 17), (18, 64)], 1.0, budget=budget)
    with pytest.raises(ValueError, match="declared domain has 100"):
        release(ages, [(0, 17), (18, 64)], 1.0, budget=budget, domain=100)
    with pytest.raises(TypeError, match="domain must be"):
        release(np.zeros(100, dtype=int), [(0, 17)], 1.0, budget=budget, domain="100")
    assert budget.spent == (0.0, 0.0)
    r = release(
        np.zeros(100, dtype=int),
        [(0, 17), (18, 64)],
        1.0,
        budget=budget,
        domain=100,
        rng=np.random.default_rng(2),
    )
    assert r.answers.shape == (2,)


def test_records_and_tables_take_the_factored_path():
    """The same records as codes, as marginal tables, and as their histogram give the same
    release with the same rng (the factored path restricts to the workload's support)."""
    from matmech.sources.tables import marginal_tables

    rng = np.random.default_rng(5)
    codes = np.column_stack(
        [rng.integers(0, 3, 200), rng.integers(0, 4, 200), rng.integers(0, 2, 200)]
    )
    Wm = Wk.marginals((3, 4, 2), 2)
    x = mm.histogram(codes, (3, 4, 2))
    a = release(codes, Wm, 1.0, strategy="identity", rng=np.random.default_rng(9))
    tables = marginal_tables(codes, (3, 4, 2), [(0, 1, 2)])
    b = release(tables, Wm, 1.0, strategy="identity", rng=np.random.default_rng(9))
    c = release(x, Wm, 1.0, strategy="identity", rng=np.random.default_rng(9))
    np.testing.assert_allclose(a.answers, c.answers, atol=1e-9)
    np.testing.assert_allclose(b.answers, c.answers, atol=1e-9)
    np.testing.assert_allclose(a.std, c.std, rtol=1e-12)
    # selection too: records select the same rows as their histogram, draw for draw
    sel = [
        release(d, Wm, 1.0, select=dict(method="em", eps=0.5, c=2), rng=np.random.default_rng(4))
        for d in (codes, x)
    ]
    np.testing.assert_array_equal(sel[0].selected, sel[1].selected)


def test_a_data_source_with_a_declared_domain_is_counted_by_the_engine():
    """A DataFrame of raw records plus a Domain: the engine counts the marginal tables and
    the release equals the one on the histogram of the same records."""
    import pandas as pd

    from matmech.io.domain import Domain, categories, integer_range

    dom = Domain(
        (
            integer_range("age", 0, 29, width=10, policy="clip", missing="drop"),
            categories("sex", ["F", "M"], other="other", policy="other", missing="other"),
        )
    )
    df = pd.DataFrame({"age": [3, 15, 27, 40, None, 12], "sex": ["F", "M", "M", "F", "F", "U"]})
    Wm = Wk.marginals(dom.sizes, 1)
    a = release(df, Wm, 1.0, domain=dom, strategy="identity", rng=np.random.default_rng(4))
    x = mm.histogram(df, dom)
    b = release(x, Wm, 1.0, domain=dom, strategy="identity", rng=np.random.default_rng(4))
    np.testing.assert_allclose(a.answers, b.answers, atol=1e-9)
    np.testing.assert_allclose(a.std, b.std, rtol=1e-12)


def test_records_or_tables_with_a_domain_that_is_not_ws_are_refused_before_the_spend():
    """issue 23: release(records | tables, domain=...) used to ignore domain=."""
    from matmech.io.domain import Domain, integer_range
    from matmech.privacy.budget import PrivacyBudget

    rng = np.random.default_rng(3)
    codes = np.column_stack([rng.integers(0, 3, 50), rng.integers(0, 4, 50)])
    Wm = Wk.marginals((3, 4), 1)
    tables = {
        (1, 0): np.bincount(codes[:, 1] * 3 + codes[:, 0], minlength=12).reshape(4, 3)
    }  # key order
    wrong = Domain((integer_range("a", 0, 3), integer_range("b", 0, 3)))  # sizes (4, 4)
    right = Domain((integer_range("a", 0, 2), integer_range("b", 0, 3)))
    budget = PrivacyBudget(2.0)
    for data in (codes, tables):
        with pytest.raises(ValueError, match=r"attribute sizes \(4, 4\) differ from W's \(3, 4\)"):
            release(data, Wm, 1.0, domain=wrong, budget=budget)
        with pytest.raises(ValueError, match="declared domain has 16 cells"):
            release(data, Wm, 1.0, domain=16, budget=budget)
        with pytest.raises(TypeError, match="domain must be"):
            release(data, Wm, 1.0, domain="3x4", budget=budget)
    assert budget.spent == (0.0, 0.0)
    a = release(codes, Wm, 1.0, domain=right, strategy="identity", rng=np.random.default_rng(5))
    b = release(tables, Wm, 1.0, domain=12, strategy="identity", rng=np.random.default_rng(5))
    np.testing.assert_allclose(a.answers, b.answers, atol=1e-9)
