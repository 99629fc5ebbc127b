"""The factored release (issue 14): equal to the explicit release where x can be built, exact
error bars (dense GLS and Monte Carlo), budget order, marginal tables."""

import itertools
import math

import numpy as np
import pytest

import matmech as mm
from matmech import strategies as S
from matmech import workloads as Wl
from matmech.measurements import residual as fmeasure
from matmech.plans.factored import plan_path
from matmech.release import release_factored
from matmech.sources.tables import marginal_tables
from matmech.linalg.terms import marginal_workload
from matmech.linalg.linop import Dense, Kron, VStack
from matmech.linalg.residual import haar_contrasts

from factored_data import DOM
from factored_data import codes as _codes
from factored_data import hist as _hist
from factored_data import spy_gaussian_draws


# -- marginal tables ---------------------------------------------------------------------------


class _Engine:
    def __init__(self, codes, domain):
        self.codes, self.domain, self.calls = codes, domain, []

    def marginal_counts(self, subsets):
        self.calls.append(list(subsets))
        return {
            s: _hist(self.codes[:, list(s)], tuple(self.domain[i] for i in s)).reshape(
                [self.domain[i] for i in s]
            )
            for s in subsets
        }


def test_tables_from_codes_engine_and_mapping_agree_with_the_histogram():
    codes = _codes(DOM, 500)
    x = _hist(codes, DOM).reshape(DOM)
    subsets = [(0, 1), (1, 3), (1,), (), (0, 1, 2)]
    direct = marginal_tables(codes, DOM, subsets)
    eng = _Engine(codes, DOM)
    via_engine = marginal_tables(eng, DOM, subsets)
    assert eng.calls == [[(0, 1, 2), (1, 3)]]  # only the maximal subsets are counted
    via_map = marginal_tables({(0, 1, 2): x.sum(axis=3), (1, 3): x.sum(axis=(0, 2))}, DOM, subsets)
    for s in subsets:
        axes = tuple(i for i in range(4) if i not in s)
        want = x.sum(axis=axes) if axes else x
        for got in (direct, via_engine, via_map):
            assert got[s].dtype == np.int64 and np.array_equal(got[s], want)


def test_bad_tables_are_refused_without_counts_in_the_message():
    codes = _codes(DOM, 50)
    bad = codes.copy()
    bad[7, 2] = 9
    with pytest.raises(ValueError, match=r"attribute 2 holds a code outside \[0, 1\]") as e:
        marginal_tables(bad, DOM, [(2,)])
    assert "9" not in str(e.value) and "7" not in str(e.value)
    with pytest.raises(ValueError, match="shape"):
        marginal_tables({(0, 1): np.zeros((3, 5), dtype=int)}, DOM, [(0, 1)])
    with pytest.raises(ValueError, match="negative"):
        marginal_tables({(0,): -np.ones(3, dtype=int)}, DOM, [(0,)])
    with pytest.raises(TypeError, match="integers"):
        marginal_tables(codes.astype(float), DOM, [(0,)])


# -- equivalence with the explicit release ----------------------------------------------------


def _census_like():
    """A union of Kronecker products with custom, prefix, identity and total factors
    (the fourth attribute is a total everywhere)."""
    rng = np.random.default_rng(4)
    D = Dense(rng.integers(0, 2, size=(4, 3)).astype(float))
    W = VStack(
        [
            Kron(D, Wl.total(4), Wl.prefix(2), Wl.total(5)),
            Kron(Wl.total(3), Wl.identity(4), Wl.identity(2), Wl.total(5)),
            Kron(Wl.identity(3), Wl.prefix(4), Wl.total(2), Wl.total(5)),
        ],
        weights=[1.0, 2.0, 1.0],
    )
    A = VStack(
        [
            Kron(S.identity(3), S.hierarchical(4), S.identity(2), Wl.total(5)),
            Kron(Wl.total(3), Wl.total(4), Wl.identity(2), Wl.total(5)),
        ],
        weights=[0.75, 0.5],
    )
    return W, A


def _cases():
    marg = Wl.marginals(DOM, attrs=[(0, 1), (1, 2)])
    rng = np.random.default_rng(1)
    real = Dense(rng.normal(size=(5, 3)) + 2 * np.eye(5, 3))
    pxi_w = Kron(Wl.prefix(3), Wl.identity(4), Wl.total(2), Wl.total(5))
    pxi_a = Kron(real, S.identity(4), Wl.total(2), Wl.total(5))
    census_w, census_a = _census_like()
    return {
        "marginals": (marg, marg),
        "prefix x identity": (pxi_w, pxi_a),
        "census union": (census_w, census_a),
    }


@pytest.mark.parametrize("case", ["marginals", "prefix x identity", "census union"])
@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_kron_path_equals_the_explicit_release(case, delta):
    W, A = _cases()[case]
    codes = _codes(DOM, 2000, seed=3)
    x = _hist(codes, DOM)
    path, *_, U = plan_path(W, 1.0, delta, strategy=A)
    assert path == "kron" and len(U) < len(DOM)  # solved on a proper marginal
    ex = mm.release(x, W, 1.0, delta, strategy=A, rng=np.random.default_rng(11))
    fa = release_factored(codes, W, 1.0, delta, strategy=A, rng=np.random.default_rng(11))
    np.testing.assert_allclose(
        fa.answers, ex.answers, rtol=0, atol=1e-9 * max(1.0, np.abs(ex.answers).max())
    )
    np.testing.assert_allclose(fa.std, ex.std, rtol=1e-9)
    assert fa.expected_error == pytest.approx(ex.expected_error, rel=1e-9)
    assert (
        fa.measurement.noise == ex.measurement.noise and fa.measurement.grid == ex.measurement.grid
    )
    assert fa.measurement.sensitivity == pytest.approx(ex.measurement.sensitivity, rel=1e-12)


# -- the residual path ------------------------------------------------------------------------


def _dense_residual_check(domain, subsets, rel, codes):
    """Answers and variances of the residual release against dense GLS on the integer y."""
    W = Wl.marginals(domain, attrs=subsets)
    seen = {}
    orig = fmeasure.measure_residuals

    def spy(mplan, tables, *, rng=None):
        seen["m"] = orig(mplan, tables, rng=rng)
        return seen["m"]

    fmeasure_spy = pytest.MonkeyPatch()
    import matmech.plans.residual as frel

    fmeasure_spy.setattr(frel, "measure_residuals", spy)
    try:
        r = release_factored(codes, W, 1.0, 1e-6, rng=np.random.default_rng(5))
    finally:
        fmeasure_spy.undo()
    m = seen["m"]
    rows, ys, var = [], [], []
    for T in m.plan.plan.lattice.residuals:
        H = np.ones((1, 1))
        lam2 = np.ones(())
        for i in range(len(domain)):
            f = haar_contrasts(domain[i])[0] if i in T else np.ones((1, domain[i]))
            H = np.kron(H, f)
        for i in T:
            lam2 = np.multiply.outer(lam2, haar_contrasts(domain[i])[1].astype(float))
        lam = np.sqrt(lam2.reshape(-1))
        rows.append(H)
        ys.append(m.coords[T].reshape(-1) * lam)  # the released integers
        var.append(m.row_variances[T].reshape(-1) * lam**2)
    A, y, v = np.vstack(rows), np.concatenate(ys), np.concatenate(var)
    assert np.allclose(y, np.rint(y), atol=1e-6)
    # the integer measurement's noise variances are those of the discrete Gaussian at τ_j
    Ai = A / np.sqrt(v)[:, None]
    cov = np.linalg.pinv(Ai.T @ Ai)
    Wd = W.dense()
    xhat = cov @ Ai.T @ (y / np.sqrt(v))
    np.testing.assert_allclose(r.answers, Wd @ xhat, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(r.std**2, np.einsum("ij,jk,ik->i", Wd, cov, Wd), rtol=1e-8)
    return r


@pytest.mark.parametrize(
    "domain,subsets",
    [((3, 4, 2, 5), [(0, 1), (1, 2), (3,), (0, 2, 3)]), ((2, 1, 6), [(0, 1, 2), (2,)])],
)
def test_residual_release_equals_dense_gls_on_the_measured_integers(domain, subsets):
    _dense_residual_check(domain, subsets, 1e-8, _codes(domain, 3000, seed=2))


def test_residual_release_reaches_the_svd_bound_up_to_the_discrete_noise():
    codes = _codes(DOM, 1000)
    W = Wl.marginals(DOM, 2)
    r = release_factored(codes, W, 1.0, 1e-6, rng=np.random.default_rng(0), scale_bits=None)
    bound = mm.error.lower_bound(W, 1.0, 1e-6)
    assert r.strategy_name == "residual"
    assert r.expected_error == pytest.approx(bound, rel=1e-6)  # σ ≫ 1: discrete variance = σ²
    rounded = release_factored(codes, W, 1.0, 1e-6, rng=np.random.default_rng(0))  # σ to 9 bits
    assert bound < rounded.expected_error < bound * 1.008


def _monte_carlo(release, truth, expected, runs):
    errs = np.array([np.sum((release(k) - truth) ** 2) for k in range(runs)])
    se = errs.std(ddof=1) / math.sqrt(runs)
    assert abs(errs.mean() - expected) <= 4 * se, (errs.mean(), expected, se)


def test_monte_carlo_residual_gaussian():
    domain = (3, 4, 2)
    codes = _codes(domain, 400)
    W = Wl.marginals(domain, 2)
    truth = W.matvec(_hist(codes, domain))
    exp = release_factored(codes, W, 1.0, 1e-5, rng=np.random.default_rng(0)).expected_error
    _monte_carlo(
        lambda k: release_factored(codes, W, 1.0, 1e-5, rng=np.random.default_rng(100 + k)).answers,
        truth,
        exp,
        300,
    )


@pytest.mark.parametrize("delta", [0.0, 1e-5])
def test_monte_carlo_kron_path(delta):
    W, A = _cases()["prefix x identity"]
    codes = _codes(DOM, 400)
    truth = W.matvec(_hist(codes, DOM))
    exp = release_factored(
        codes, W, 1.0, delta, strategy=A, rng=np.random.default_rng(0)
    ).expected_error
    _monte_carlo(
        lambda k: (
            release_factored(
                codes, W, 1.0, delta, strategy=A, rng=np.random.default_rng(200 + k)
            ).answers
        ),
        truth,
        exp,
        300,
    )


# -- budget order -----------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["auto", "given"])
def test_budget_is_charged_before_the_first_noise_draw(monkeypatch, strategy):
    codes = _codes(DOM, 300)
    W, A = (Wl.marginals(DOM, 2), "auto") if strategy == "auto" else _cases()["prefix x identity"]
    budget = mm.PrivacyBudget(2.0, 1e-5, accountant="basic")  # spent: the sums charged
    seen = spy_gaussian_draws(monkeypatch, budget)  # budget.spent at every Gaussian draw
    release_factored(codes, W, 1.0, 1e-6, strategy=A, budget=budget, rng=np.random.default_rng(0))
    assert seen and all(s == pytest.approx((1.0, 1e-6)) for s in seen)


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_overspending_is_refused_and_draws_nothing(delta):
    codes = _codes(DOM, 300)
    W = Wl.marginals(DOM, 2)
    A = W if delta == 0 else "auto"
    budget = mm.PrivacyBudget(1.0, 1e-5)
    budget.spend(0.7, 0.0)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(mm.BudgetExceededError):
        release_factored(codes, W, 0.5, delta, strategy=A, budget=budget, rng=rng)
    assert rng.bit_generator.state == state and budget.spent == pytest.approx((0.7, 0.0))
    # bad data: refused before the spend
    bad = codes.copy()
    bad[0, 0] = -1
    with pytest.raises(ValueError, match="attribute 0"):
        release_factored(bad, W, 0.2, delta, strategy=A, budget=budget, rng=rng)
    assert rng.bit_generator.state == state and budget.spent == pytest.approx((0.7, 0.0))


def test_too_many_records_for_the_declared_bound_is_refused_without_the_count():
    codes = _codes(DOM, 300)
    with pytest.raises(ValueError, match="max_records") as e:
        release_factored(
            codes, Wl.marginals(DOM, 1), 1.0, 1e-6, max_records=100, rng=np.random.default_rng(0)
        )
    assert "300" not in str(e.value)


def test_paths_and_refusals():
    big = marginal_workload((10,) * 100, list(itertools.combinations(range(100), 2)))
    assert big.shape == (495_000, 10**100)
    assert plan_path(big, 1.0, 1e-6)[0] == "residual"
    assert plan_path(big, 1.0, 0.0)[0] == "residual"  # pure ε: too big for the Kronecker path
    # small too: the route follows from W and the strategy, never from a cell count (issue 22)
    assert plan_path(Wl.marginals(DOM, 2), 1.0, 0.0)[0] == "residual"
    assert plan_path(Wl.marginals(DOM, 2), 1.0, 0.0, strategy="residual")[0] == "residual"
    prefix = Kron(
        *[
            Wl.prefix(10) if i == 0 else Wl.identity(10) if i < 8 else Wl.total(10)
            for i in range(12)
        ]
    )
    assert (
        plan_path(prefix, 1.0, 0.0)[0] == "gmarginal"
    )  # a generalised marginal strategy, factored GLS
    with pytest.raises(ValueError, match="union of marginals"):
        plan_path(prefix, 1.0, 0.0, strategy="residual")
    with pytest.raises(ValueError, match="not a Kronecker"):
        plan_path(Dense(np.ones((2, 120))), 1.0, 1e-6)


def test_marginal_workload_for_any_domain_matches_the_stack_of_marginals():
    subsets = [(0, 2), (1,), ()]
    M = marginal_workload(DOM, subsets, weights=[1.0, 2.0, 0.5])
    ref = VStack(
        [Wl.marginals(DOM, attrs=[s]) if s else Kron(*[Wl.total(n) for n in DOM]) for s in subsets],
        weights=[1.0, 2.0, 0.5],
    )
    np.testing.assert_array_equal(M.dense(), ref.dense())
    codes = _codes(DOM, 500)
    a = release_factored(codes, M, 1.0, 1e-6, rng=np.random.default_rng(3))
    b = release_factored(codes, ref, 1.0, 1e-6, rng=np.random.default_rng(3))
    np.testing.assert_allclose(a.answers, b.answers, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(a.std, b.std, rtol=1e-12)
    assert M.labels()[:2] == ["a0=0, a2=0", "a0=0, a2=1"] and M.labels()[-1] == "total"


def test_answers_that_cannot_fit_are_refused_before_planning_reading_or_spending(monkeypatch):
    """16 bytes an answer (the answers and their std) over max_memory: refused at once, before
    the workload's terms are built, the data read or the budget charged."""
    import importlib

    frel = importlib.import_module(
        "matmech.release"
    )  # the module (matmech.release is the function)

    domain = (10,) * 30
    W = marginal_workload(domain, list(itertools.combinations(range(30), 3)))  # 4,060,000 answers
    budget = mm.PrivacyBudget(1.0, 1e-6)

    def no_plan(*a, **k):
        raise AssertionError("planned a release that cannot fit")

    monkeypatch.setattr(frel, "plan_path", no_plan)

    class NoData:
        def marginal_counts(self, subsets):
            raise AssertionError("data read")

    with pytest.raises(
        ValueError, match=r"4,060,000 answers: with their std 0\.1 GiB alone \(> max_memory"
    ):
        release_factored(NoData(), W, 1.0, 1e-6, budget=budget, max_memory=16 * 4_060_000 - 1)
    assert budget.remaining == (1.0, 1e-6)
    monkeypatch.undo()
    # one byte more and it is planned (then refused by the path's own fuller estimate)
    with pytest.raises(ValueError, match="residual release would use about"):
        release_factored(NoData(), W, 1.0, 1e-6, budget=budget, max_memory=16 * 4_060_000)
    assert budget.remaining == (1.0, 1e-6)
