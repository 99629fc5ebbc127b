"""The factored release of a generalised marginal strategy (issue 14, item 2): the factored GLS
equals dense GLS on the measured matrix, the variances equal dense diag(W G⁺ Wᵀ), the
measurement is exact on its lattice with the claimed sensitivity, Monte Carlo matches the
analytic error, the budget is charged once before the first draw, and messages carry no x."""

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

import matmech as mm
from matmech import workloads as Wl
from matmech.plans import gmarginal as grel
from matmech.measurements.gmarginal import measure_gmarginal, plan_gmarginal
from matmech.estimators.gmarginal_solve import GMarginalSolver
from matmech.plans.factored import plan_path
from matmech.release import release_factored
from matmech.sources.tables import marginal_tables
from matmech.linalg.terms import as_terms
from matmech.linalg.linop import Dense, Kron, VStack
from matmech.optimizers.general_marginal_error import GeneralMarginalStrategy
from matmech.optimizers.pidentity import PIdentity
from matmech.privacy import noise

from factored_data import DOM
from factored_data import codes as _codes
from factored_data import hist as _hist

# DOM = (3, 4, 2, 5)


def _prefix_identity():
    """Prefix × identity products (2-way, as adult_W2) and a total, with a hand-made strategy:
    p-Identity factors on the prefix attributes, two of them together in some subsets."""
    W = VStack(
        [
            Kron(Wl.prefix(3), Wl.identity(4), Wl.total(2), Wl.total(5)),
            Kron(Wl.prefix(3), Wl.total(4), Wl.total(2), Wl.prefix(5)),
            Kron(Wl.total(3), Wl.identity(4), Wl.identity(2), Wl.total(5)),
            Kron(Wl.total(3), Wl.total(4), Wl.total(2), Wl.total(5)),
        ],
        weights=[1.0, 2.0, 0.5, 1.0],
    )
    rng = np.random.default_rng(7)
    theta = np.zeros(16)
    for m, t in [
        (0b0011, 0.5),
        (0b1001, 0.8),
        (0b0110, 0.3),
        (0b1011, 0.2),
        (0b0001, 0.1),
        (0, 0.05),
    ]:
        theta[m] = t
    A = GeneralMarginalStrategy(
        DOM,
        theta,
        [PIdentity(rng.uniform(0, 1, (2, 3))), None, None, PIdentity(rng.uniform(0, 1, (2, 5)))],
    )
    return W, A


def _census_union():
    """A census-style union: custom 0/1 predicates, [identity; total] stacks, prefixes,
    totals; the strategy from optimize(method="gmarginals")."""
    rng = np.random.default_rng(4)
    D = Dense(rng.integers(0, 2, size=(4, 3)).astype(float))
    IT = Wl.stack(Wl.identity(4), Wl.total(4))
    W = VStack(
        [
            Kron(D, IT, Wl.prefix(2), Wl.total(5)),
            Kron(Wl.total(3), Wl.identity(4), Wl.identity(2), Wl.prefix(5)),
            Kron(Wl.identity(3), Wl.prefix(4), Wl.total(2), Wl.total(5)),
        ],
        weights=[1.0, 2.0, 1.0],
    )
    A = mm.optimize(W, 1.0, method="gmarginals").strategy
    assert isinstance(A, GeneralMarginalStrategy)
    # its lattice weights with real-valued p-Identity factors on attributes 0 and 1 (measured
    # together), so that the grid rounding is exercised
    return W, GeneralMarginalStrategy(
        DOM,
        A.theta,
        [PIdentity(rng.uniform(0, 1, (2, 3))), PIdentity(rng.uniform(0, 1, (3, 4))), None, None],
    )


CASES = {"prefix x identity": _prefix_identity, "census union": _census_union}


def _dense_blocks(plan):
    """The measured rows of every block, built with np.kron (independently of the factored code)."""
    out = []
    for S in plan.subsets:
        M = np.ones((1, 1))
        for i, n in enumerate(plan.domain):
            M = np.kron(M, plan.factors[i].dense() if i in S else np.ones((1, n)))
        out.append(M)
    return out


def _dense_gls(plan, W, y):
    """(answers, variances) of dense GLS: W (MᵀΣ⁻¹M)⁺ MᵀΣ⁻¹ y and diag(W (MᵀΣ⁻¹M)⁺ Wᵀ)."""
    blocks = _dense_blocks(plan)
    M = np.vstack(blocks)
    w = np.concatenate([np.full(b.shape[0], 1.0 / v) for b, v in zip(blocks, plan.variances)])
    Gp = np.linalg.pinv(M.T @ (w[:, None] * M), rcond=1e-12)
    Wd = W.dense()
    yv = np.concatenate([np.asarray(y[S]).reshape(-1) for S in plan.subsets])
    return Wd @ (Gp @ (M.T @ (w * yv))), np.einsum("ij,jk,ik->i", Wd, Gp, Wd)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("delta,max_records", [(0.0, None), (0.0, 10**6), (1e-6, None)])
def test_factored_gls_equals_dense_gls_on_given_y(case, delta, max_records):
    W, A = CASES[case]()
    plan = plan_gmarginal(A, 1.0, delta, max_records=max_records)
    solver = GMarginalSolver(plan.gls_strategy(), plan.subsets)
    rng = np.random.default_rng(3)
    y = {S: rng.normal(size=tuple(plan.factors[i].shape[0] for i in S)) * 10 for S in plan.subsets}
    wt = as_terms(W)
    got = solver.answers(wt, solver.estimate(y, plan.variances))
    var = solver.variances(wt)
    want, want_var = _dense_gls(plan, W, y)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9 * np.abs(want).max())
    np.testing.assert_allclose(var, want_var, rtol=1e-9)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_release_equals_dense_gls_on_the_measured_y_and_is_exact(case, delta, monkeypatch):
    W, A = CASES[case]()
    codes = _codes(DOM, 2000, seed=3)
    x = _hist(codes, DOM)
    assert plan_path(W, 1.0, delta, strategy=A, max_cells=1)[0] == "gmarginal"
    seen = {}

    def spy(plan, tables, *, rng=None):
        seen["m"] = measure_gmarginal(plan, tables, rng=rng)
        return seen["m"]

    monkeypatch.setattr(grel, "measure_gmarginal", spy)
    rel = release_factored(
        codes, W, 1.0, delta, strategy=A, rng=np.random.default_rng(11), max_cells=1
    )
    m = seen["m"]
    plan = m.plan
    assert rel.strategy_name == "gmarginals" and "generalised least squares" in rel.strategy_note
    want, want_var = _dense_gls(plan, W, m.y)
    np.testing.assert_allclose(rel.answers, want, rtol=0, atol=1e-9 * np.abs(want).max())
    np.testing.assert_allclose(rel.std**2, want_var, rtol=1e-9)
    assert rel.expected_error == pytest.approx(want_var.sum(), rel=1e-12)
    # exact measurement: y_S − Q'_S t_S is an integer multiple of the lattice h_S
    for S, M, h in zip(plan.subsets, _dense_blocks(plan), plan.lattice):
        k = (m.y[S].reshape(-1) - M @ x) / h
        np.testing.assert_allclose(k, np.rint(k), rtol=0, atol=1e-6)
    # the explicit release of the same strategy has nearly the same error (rounding, bucketing)
    ex = mm.release(x, W, 1.0, delta, strategy=A, rng=np.random.default_rng(11))
    assert rel.expected_error == pytest.approx(ex.expected_error, rel=0.05)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_sensitivity_and_privacy_loss_match_the_dense_strategy(case, delta):
    W, A = CASES[case]()
    plan = plan_gmarginal(A, 0.7, delta, neighbors="substitute")
    blocks = _dense_blocks(plan)
    if delta == 0:
        # every cell: Σ_S ‖column of block S‖₁ / b_S, exact rationals, at most ε (factor 2)
        worst = max(
            sum(
                Fraction(float(np.abs(b[:, c]).sum())) / (Fraction(float(u)) * Fraction(float(h)))
                for b, u, h in zip(blocks, plan.units, plan.lattice)
            )
            for c in range(math.prod(DOM))
        )
        assert 2 * worst <= Fraction(0.7) and 2 * worst > Fraction(0.7) * Fraction(99, 100)
        dense = sum(t * np.abs(b).sum(axis=0) for t, b in zip(plan.theta, blocks)).max()
        assert plan.sensitivity == pytest.approx(2 * dense, rel=1e-8)
    else:
        dense = math.sqrt(
            sum(t * t * (b * b).sum(axis=0) for t, b in zip(plan.theta, blocks)).max()
        )
        assert plan.sensitivity == pytest.approx(2 * dense, rel=1e-8)
        sigma1 = mm.privacy.calibration.gaussian_sigma(0.7, delta, plan.sensitivity)
        # every block's σ (units × lattice) is at least σ₁/θ_S: ρ <= Δ₂²/(2σ₁²)
        assert np.all(plan.units * plan.lattice >= sigma1 / plan.theta)


def _monte_carlo(run, truth, expected, reps):
    errs = np.array([float(np.sum((run(k) - truth) ** 2)) for k in range(reps)])
    se = errs.std(ddof=1) / math.sqrt(reps)
    assert abs(errs.mean() - expected) <= 4 * se, (errs.mean(), expected, se)


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_monte_carlo_error_matches_the_analytic_variances(delta):
    W, A = _prefix_identity()
    codes = _codes(DOM, 400)
    truth = W.matvec(_hist(codes, DOM))
    tables = marginal_tables(codes, DOM, list(A.attribute_subsets))
    plan = plan_gmarginal(A, 1.0, delta)
    solver = GMarginalSolver(plan.gls_strategy(), plan.subsets)
    wt = as_terms(W)
    expected = float(solver.variances(wt).sum())
    rel = release_factored(
        codes, W, 1.0, delta, strategy=A, rng=np.random.default_rng(0), max_cells=1
    )
    assert rel.expected_error == pytest.approx(expected, rel=1e-12)

    def run(k):
        m = measure_gmarginal(plan, tables, rng=np.random.default_rng(100 + k))
        return solver.answers(wt, solver.estimate(m.y, plan.variances))

    _monte_carlo(run, truth, expected, 400)


def test_budget_is_charged_once_before_the_first_noise_draw(monkeypatch):
    W, A = _prefix_identity()
    codes = _codes(DOM, 300)
    budget = mm.PrivacyBudget(2.0)
    seen = []
    real = noise.discrete_laplace

    def spy(scale, size, *, rng=None):
        seen.append(budget.spent)
        return real(scale, size, rng=rng)

    monkeypatch.setattr(noise, "discrete_laplace", spy)
    rel = release_factored(
        codes, W, 1.0, strategy=A, budget=budget, rng=np.random.default_rng(0), max_cells=1
    )
    assert len(seen) >= 2 and all(s == pytest.approx((1.0, 0.0)) for s in seen)
    assert len(budget.ledger) == 1 and rel.budget_remaining == pytest.approx((1.0, 0.0))


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_refusals_draw_nothing_spend_nothing_and_carry_no_counts(delta):
    W, A = _prefix_identity()
    codes = _codes(DOM, 357)
    budget = mm.PrivacyBudget(1.0, 1e-5)
    budget.spend(0.7, 0.0)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(mm.BudgetExceededError):
        release_factored(codes, W, 0.5, delta, strategy=A, budget=budget, rng=rng, max_cells=1)
    with pytest.raises(ValueError, match="max_records") as e:
        release_factored(
            codes, W, 0.2, delta, strategy=A, budget=budget, rng=rng, max_cells=1, max_records=100
        )
    assert "357" not in str(e.value)
    bad = codes.copy()
    bad[5, 3] = 9
    with pytest.raises(ValueError, match="attribute 3") as e:
        release_factored(bad, W, 0.2, delta, strategy=A, budget=budget, rng=rng, max_cells=1)
    assert "9" not in str(e.value)
    with pytest.raises(ValueError, match="GiB"):
        release_factored(
            codes, W, 0.2, delta, strategy=A, budget=budget, rng=rng, max_cells=1, max_memory=1000
        )
    assert rng.bit_generator.state == state and budget.spent == pytest.approx((0.7, 0.0))


def test_a_workload_outside_the_row_space_is_refused_before_the_data_is_read():
    _, A = _prefix_identity()
    W = Kron(
        Wl.identity(3), Wl.identity(4), Wl.identity(2), Wl.identity(5)
    )  # the 4-way class is not measured

    class Source:
        called = False

        def marginal_counts(self, subsets):
            Source.called = True
            raise AssertionError("data read")

    with pytest.raises(ValueError, match="row space"):
        release_factored(Source(), W, 1.0, strategy=A, rng=np.random.default_rng(0), max_cells=1)
    assert not Source.called


def test_paths():
    W, A = _prefix_identity()
    assert (
        plan_path(W, 1.0, 0.0, strategy=A)[0] == "kron"
    )  # small: the explicit solve on the support
    path, wt, at, U = plan_path(W, 1.0, 0.0, strategy=A, max_cells=10)
    assert path == "gmarginal" and at is A and U == (0, 1, 2, 3)
    assert plan_path(W, 1.0, 1e-6, max_cells=10)[0] == "gmarginal"  # auto: optimised
    assert plan_path(W, 1.0, 0.0, strategy="gmarginals")[0] == "gmarginal"
    big = Kron(
        *[Wl.prefix(2) if i == 0 else Wl.identity(2) if i < 3 else Wl.total(2) for i in range(17)]
    )
    with pytest.raises(ValueError, match="residual path"):  # beyond the optimiser's 16 attributes
        plan_path(big, 1.0, 0.0, max_cells=4)


def test_auto_optimises_and_releases():
    W, _ = _census_union()
    codes = _codes(DOM, 500)
    rel = release_factored(codes, W, 1.0, rng=np.random.default_rng(2), max_cells=1)
    assert rel.strategy_name == "gmarginals" and "optimised" in rel.strategy_note
    assert isinstance(rel.strategy, GeneralMarginalStrategy) and rel.answers.shape == (W.shape[0],)
    truth = W.matvec(_hist(codes, DOM))
    assert np.sqrt(np.mean((rel.answers - truth) ** 2)) < 10 * np.sqrt(
        rel.expected_error / W.shape[0]
    )


def test_a_domain_of_a_trillion_cells_is_released_from_small_tables():
    """12 attributes of 10 values (10¹² cells): nothing domain-sized is built; the standardised
    errors against the true answers (from the records) have mean square 1 (chi-square, 4 SE)."""
    dom = (10,) * 12
    rng = np.random.default_rng(9)
    theta = np.zeros(1 << 12)
    for a, b in itertools.combinations(range(8), 2):  # support 10⁸ cells: beyond the Kronecker path
        theta[(1 << a) | (1 << b)] = rng.uniform(0.5, 1.0)
    A = GeneralMarginalStrategy(
        dom,
        theta,
        [PIdentity(rng.uniform(0, 1, (3, 10))), PIdentity(rng.uniform(0, 1, (3, 10)))]
        + [None] * 10,
    )

    def term(a, fa, b, fb):
        return Kron(*[fa if i == a else fb if i == b else Wl.total(10) for i in range(12)])

    W = VStack(
        [
            term(0, Wl.prefix(10), 1, Wl.prefix(10)),
            term(0, Wl.prefix(10), 2, Wl.identity(10)),
            term(2, Wl.identity(10), 3, Wl.identity(10)),
            term(6, Wl.prefix(10), 7, Wl.identity(10)),
        ],
        weights=[1.0, 1.0, 2.0, 1.0],
    )
    codes = _codes(dom, 3000, seed=5)
    assert plan_path(W, 1.0, 0.0, strategy=A)[0] == "gmarginal"
    for delta in (0.0, 1e-6):
        rel = release_factored(codes, W, 1.0, delta, strategy=A, rng=np.random.default_rng(1))
        tabs = marginal_tables(codes, dom, [(0, 1), (0, 2), (2, 3), (6, 7)])
        P = np.tril(np.ones((10, 10)))
        truth = np.concatenate(
            [
                (P @ tabs[(0, 1)] @ P.T).reshape(-1),
                (P @ tabs[(0, 2)]).reshape(-1),
                2.0 * tabs[(2, 3)].reshape(-1),
                (P @ tabs[(6, 7)]).reshape(-1),
            ]
        )
        z2 = ((rel.answers - truth) / rel.std) ** 2
        assert (
            abs(z2.mean() - 1.0) <= 4 * z2.std(ddof=1) / math.sqrt(z2.size) + 0.05
        )  # correlated answers: slack


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_solver_over_the_release_records_gives_its_answers(case, delta):
    """GMarginalSolver.solve(terms, records) → Answers: the release's answers and variances,
    from its exposed measurement records alone (issue 22: estimators take the records)."""
    W, A = CASES[case]()
    codes = _codes(DOM, 300)
    rel = release_factored(
        codes, W, 1.0, delta, strategy=A, rng=np.random.default_rng(5), max_cells=1
    )
    plan = plan_gmarginal(A, 1.0, delta)
    got = GMarginalSolver(plan.gls_strategy(), plan.subsets).solve(as_terms(W), rel.measurements)
    np.testing.assert_allclose(
        got.values, rel.answers, rtol=0, atol=1e-9 * np.abs(rel.answers).max()
    )
    np.testing.assert_allclose(got.std, rel.std, rtol=1e-12)
    with pytest.raises(ValueError, match="one record per measured subset"):
        GMarginalSolver(plan.gls_strategy(), plan.subsets).solve(as_terms(W), rel.measurements[1:])


def test_a_gaussian_plan_without_its_sigma_index_is_refused_before_any_draw(monkeypatch):
    """A discrete-Gaussian plan names block j's σ by ``which[j]``; a plan stripped of it is a
    clear ValueError, raised before the sampler runs (not a NumPy error from np.repeat(None))."""
    import dataclasses

    W, A = _prefix_identity()
    tables = marginal_tables(_codes(DOM, 50), DOM, list(A.attribute_subsets))
    plan = plan_gmarginal(A, 1.0, 1e-6)
    assert plan.which is not None
    calls = []
    monkeypatch.setattr(noise, "discrete_gaussian_mixed", lambda *a, **k: calls.append(1) or 1 / 0)
    with pytest.raises(ValueError, match="needs which"):
        measure_gmarginal(
            dataclasses.replace(plan, which=None), tables, rng=np.random.default_rng(0)
        )
    assert calls == []
