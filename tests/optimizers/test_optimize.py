"""Strategy optimisation: agreement of the L2 solvers, gradients, optimality over the fixed
strategies, exact error bookkeeping, determinism and input errors."""

import functools
import math

import numpy as np
import pytest

from matmech import strategies as S
from matmech import workloads as wl
from matmech import error as _error
from matmech.error import lower_bound
from matmech.linalg.intervals import AllRange, Prefix
from matmech.linalg.linop import Dense, Kron, Scaled, VStack
from matmech.optimizers.l2 import L2Strategy, dual_l2, dual_value, sdp_l2, tridiagonal_inverse
from matmech.linalg.structured import workload_spectrum
from matmech.optimizers.marginal_lattice import (
    MarginalStrategy,
    ResidualStrategy,
    marginal_objective,
    optimize_marginals_l2,
    optimize_marginals_pure,
)
from matmech.optimizers.gram import GramOperator, check_gram
from matmech.optimizers.pure import (
    _reliable,
    default_maxiter,
    fit_pidentity,
    hat_theta,
    hdmm_theta,
    objective,
    tree_theta,
    weighted_tree_value,
)
from matmech.optimizers.pidentity import PIdentity
from matmech.optimizers.blas import blas_threads
from matmech.optimizers.lbfgs import projected_lbfgs
from matmech.optimizers.dispatch import METHODS, optimize
from matmech.optimizers.result import OptimizeResult

# optimize reports and optimises the continuous figure 2Δ₁²/ε² (σ²); so do these closed forms
expected_error = functools.partial(_error.expected_error, noise="continuous")

DELTA = 1e-6


def random_workload(rng, m, n):
    return wl.from_matrix(rng.standard_normal((m, n)))


def fixed_strategies(n):
    out = [S.identity(n), S.haar(n)]
    for b in range(2, n):
        for root in (True, False):
            out.append(S.hierarchical(n, b, root))
    return out


def best_fixed_error(W, delta):
    best = math.inf
    for A in fixed_strategies(W.shape[1]):
        try:
            best = min(best, expected_error(W, A, 1.0, delta))
        except ValueError:
            continue
    return best


# -- the L2 program ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda rng: AllRange(12).gram().dense(),
        lambda rng: Prefix(16).gram().dense(),
        lambda rng: (lambda w: w.T @ w)(rng.standard_normal((20, 10))),
        lambda rng: (lambda w: w.T @ w)(rng.standard_normal((5, 12))),  # rank deficient
        lambda rng: np.eye(14) + np.ones((14, 14)),
        lambda rng: np.kron(AllRange(4).gram().dense(), Prefix(4).gram().dense()),
    ],
    ids=[
        "all_range_12",
        "prefix_16",
        "random_full_rank",
        "random_rank_5",
        "identity_plus_total",
        "kron_4x4",
    ],
)
def test_sdp_and_dual_iteration_agree(make):
    gram = make(np.random.default_rng(0))
    sdp = sdp_l2(gram)
    dual = dual_l2(gram, tol=1e-10, maxiter=3000)
    assert dual.value == pytest.approx(sdp.value, rel=1e-6)
    assert dual.gap <= 1e-7
    # both strategies have unit L2 sensitivity and their value is their exact trace
    for fit in (sdp, dual):
        assert fit.strategy.sensitivity(2) == pytest.approx(1.0, rel=1e-9)
        m, _ = fit.strategy.gram_pinv()
        assert float((gram * m.dense()).sum()) == pytest.approx(fit.value, rel=1e-7)


def test_dual_value_is_a_lower_bound_at_any_multiplier():
    gram = Prefix(20).gram().dense()
    opt = dual_l2(gram, tol=1e-10).value
    rng = np.random.default_rng(3)
    for _ in range(5):
        assert dual_value(gram, rng.uniform(0.1, 10, 20)) <= opt * (1 + 1e-12)


def test_l2_strategy_pinv_matches_dense_pinv():
    gram = AllRange(24).gram().dense()
    fit = dual_l2(gram, tol=1e-9)
    a = fit.strategy.dense()
    m, nul = fit.strategy.gram_pinv()
    assert nul is None
    np.testing.assert_allclose(m.dense(), np.linalg.pinv(a.T @ a), rtol=1e-7, atol=1e-9)


def test_l2_optimum_beats_fixed_and_respects_the_svd_bound():
    W = wl.all_range(64)
    res = optimize(W, 1.0, DELTA)
    assert res.method == "l2"
    assert res.gap is not None and res.gap <= 1e-6
    assert res.error <= best_fixed_error(W, DELTA)
    assert res.lower_bound <= res.error <= 1.05 * res.lower_bound


def test_dual_iteration_measures_unqueried_cells_with_identity_rows():
    w = np.zeros((3, 6))
    w[:, :4] = np.random.default_rng(1).standard_normal((3, 4))
    W = wl.from_matrix(w)
    res = optimize(W, 1.0, DELTA, "l2")
    assert res.strategy.sensitivity(2) == pytest.approx(1.0)
    assert res.error == pytest.approx(expected_error(W, res.strategy, 1.0, DELTA), rel=1e-9)


@pytest.mark.parametrize(
    "W",
    [AllRange(24), Prefix(24), Scaled(Prefix(20), 3.0), VStack([AllRange(16)], weights=[0.5])],
    ids=["all_range", "prefix", "scaled", "stacked"],
)
def test_tridiagonal_inverse_of_interval_grams(W):
    d, e = tridiagonal_inverse(W)
    t = np.diag(d) + np.diag(e, 1) + np.diag(e, -1)
    np.testing.assert_allclose(t @ W.gram().dense(), np.eye(W.shape[1]), atol=1e-10)
    assert tridiagonal_inverse(wl.total(8)) is None and tridiagonal_inverse(wl.identity(8)) is None


@pytest.mark.parametrize("W", [AllRange(20), Prefix(24)], ids=["all_range", "prefix"])
def test_tridiagonal_dual_iteration_matches_dense_and_sdp(W):
    gram = W.gram().dense()
    fast = dual_l2(gram, tol=1e-10, inverse=tridiagonal_inverse(W))
    assert fast.value == pytest.approx(dual_l2(gram, tol=1e-10).value, rel=1e-9)
    assert fast.value == pytest.approx(sdp_l2(gram).value, rel=1e-6)
    assert fast.gap <= 1e-9
    m, _ = fast.strategy.gram_pinv()
    assert float((gram * m.dense()).sum()) == pytest.approx(fast.value, rel=1e-8)


def test_tridiagonal_inverse_is_checked_against_the_gram():
    gram = Prefix(10).gram().dense()
    d, e = tridiagonal_inverse(AllRange(10))
    with pytest.raises(ValueError, match="not the inverse of the gram"):
        dual_l2(gram, inverse=(d, e))
    with pytest.raises(ValueError, match="off-diagonal of length 9"):
        dual_l2(gram, inverse=(d, e[:-1]))


# -- pure eps: p-Identity ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["all_range", "prefix", "dense"])
def test_pidentity_gradient_matches_finite_differences(kind):
    rng = np.random.default_rng(5)
    n, p = 24, 5
    if kind == "all_range":
        gram = GramOperator.from_workload(AllRange(n))
    elif kind == "prefix":
        gram = GramOperator.from_workload(Prefix(n))
    else:
        w = rng.standard_normal((30, n))
        gram = GramOperator.from_gram(w.T @ w)
    theta = rng.uniform(0.1, 1.0, (p, n))
    f, g = objective(theta, gram)
    h = 1e-6
    for _ in range(6):
        d = rng.standard_normal((p, n))
        numeric = (
            objective(theta + h * d, gram, gradient=False)
            - objective(theta - h * d, gram, gradient=False)
        ) / (2 * h)
        assert np.sum(g * d) == pytest.approx(numeric, rel=1e-6, abs=1e-6 * abs(f))


@pytest.mark.parametrize(
    "W", [AllRange(40), Prefix(40), Scaled(AllRange(40), 3.0), VStack([Prefix(40)], weights=[2.0])]
)
def test_structured_gram_rows_match_dense(W):
    fast = GramOperator.from_workload(W)
    dense = GramOperator.from_gram(W.gram().dense())
    z = np.random.default_rng(2).uniform(size=(7, 40))
    np.testing.assert_allclose(fast.rows(z), dense.rows(z), rtol=1e-12)
    np.testing.assert_allclose(fast.diag, dense.diag)
    np.testing.assert_allclose(fast.dense(), dense.dense())


def test_objective_is_the_exact_error_of_the_pidentity_strategy():
    rng = np.random.default_rng(4)
    W = AllRange(30)
    theta = rng.uniform(0, 1, (4, 30))
    A = PIdentity(theta)
    assert A.sensitivity(1) == pytest.approx(1.0)
    unit = objective(theta, GramOperator.from_workload(W), gradient=False)
    assert 2 * unit == pytest.approx(expected_error(W, A), rel=1e-10)
    assert 2 * unit == pytest.approx(expected_error(W, Dense(A.dense())), rel=1e-8)


def test_pidentity_operator_matches_its_dense_form():
    rng = np.random.default_rng(6)
    A = PIdentity(rng.uniform(0, 1, (3, 9)))
    a = A.dense()
    x, y = rng.standard_normal((9, 2)), rng.standard_normal((12, 2))
    np.testing.assert_allclose(A @ x, a @ x)
    np.testing.assert_allclose(A.T @ y, a.T @ y)
    np.testing.assert_allclose(A.col_norms(1), np.abs(a).sum(0))
    np.testing.assert_allclose(A.col_norms(2), np.sqrt((a**2).sum(0)))
    np.testing.assert_allclose(A.rows(7, 11), a[7:11])
    m, nul = A.gram_pinv()
    assert nul is None
    np.testing.assert_allclose(m.dense(), np.linalg.inv(a.T @ a), rtol=1e-9)
    np.testing.assert_allclose(m @ x, np.linalg.inv(a.T @ a) @ x, rtol=1e-9)


def test_tree_start_is_the_hierarchical_strategy():
    # [I; Θ]D with Θ the internal nodes of H_b is H_b up to scale, in closed form too
    for W in (AllRange(64), Prefix(64)):
        gram = GramOperator.from_workload(W)
        for b, root in ((4, True), (2, False), (8, True)):
            theta, _ = tree_theta(64, b, root)
            exact = expected_error(W, S.hierarchical(64, b, root))
            assert 2 * objective(theta, gram, gradient=False) == pytest.approx(exact, rel=1e-10)
        sizes = [4, 16, 64]
        assert 2 * weighted_tree_value(gram, sizes, [1, 1, 1]) == pytest.approx(
            expected_error(W, S.hierarchical(64, 4, True)), rel=1e-10
        )


def test_hat_start_sits_on_the_hierarchy_and_spreads_evenly_otherwise():
    hats, depth = hat_theta(256, 16)
    boxes, box_depth = tree_theta(256, 16, True)
    np.testing.assert_array_equal(depth, box_depth)
    # same nodes: each hat peaks inside its block, over twice the block's width
    cells = np.arange(256) + 0.5
    for h, b in zip(hats, boxes):
        lo, hi = np.flatnonzero(b)[[0, -1]]
        centre, size = (lo + hi + 1) / 2, hi - lo + 1
        np.testing.assert_array_equal(
            np.flatnonzero(h), np.flatnonzero(np.abs(cells - centre) < size)
        )
        assert h.max() == pytest.approx(1 - 0.5 / size)
    # interior cells of a level are covered with total weight 1
    np.testing.assert_allclose(hats[depth == 1].sum(0)[16:-16], 1.0)
    uneven, d = hat_theta(1000, 16)
    assert np.bincount(d).tolist() == [
        1,
        4,
        62,
    ]  # round(1000/16) evenly spread hats, no tiny blocks
    np.testing.assert_allclose(uneven[d == 2].sum(0)[16:-16], 1.0)
    assert hat_theta(3, 16)[0].shape == (1, 3) and hat_theta(3, 16, root=False)[0].shape == (0, 3)


def test_pure_optimum_beats_hdmm_at_n_256():
    # HDMM (McKenna et al. 2018) OPT_0 on this machine class: 8.07 (all ranges), 7.35 (prefix)
    for W, hdmm in ((wl.all_range(256), 8.07), (wl.prefix(256), 7.35)):
        res = optimize(W, bound=False)
        assert res.rmse < hdmm - 0.005
        assert res.params["init"].startswith(("hats b=16", "hdmm p=16"))


def test_hdmm_start_is_uniform_and_drawn_first_from_the_rng():
    th = hdmm_theta(100, rng=np.random.default_rng(3))
    np.testing.assert_array_equal(th, np.random.default_rng(3).random((6, 100)))
    assert hdmm_theta(8).shape == (1, 8) and hdmm_theta(64, p=5).shape == (5, 64)
    # without an rng: a fixed equidistributed fill of [0, 1), no global generator involved
    a, b = hdmm_theta(256), hdmm_theta(256)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (16, 256) and a.min() >= 0 and a.max() < 1
    assert np.histogram(a, bins=10, range=(0, 1))[0].min() > 0.09 * a.size
    # the optimiser takes HDMM's start as the first draw of the caller's generator
    fit = fit_pidentity(
        GramOperator.from_workload(wl.prefix(64)), rng=np.random.default_rng(3), polish=0
    )
    start = next(r for r in fit.starts if r[0].startswith("hdmm"))
    gram = GramOperator.from_workload(wl.prefix(64))
    assert start[2] == pytest.approx(
        objective(hdmm_theta(64, rng=np.random.default_rng(3)), gram, gradient=False), rel=1e-12
    )


@pytest.mark.parametrize("seed", [None, 0, 1, 2])
@pytest.mark.parametrize("make", [wl.all_range, wl.prefix], ids=["all_range", "prefix"])
def test_optimizer_never_loses_to_hdmm_opt0_start(make, seed):
    # issue 12: the optimiser's result is at most HDMM's OPT_0 (p = n/16, Θ ~ U[0, 1))
    # optimised alone with the same budget and the same draw
    n = 128
    W = make(n)
    gram = GramOperator.from_workload(W)
    rng = lambda: None if seed is None else np.random.default_rng(seed)  # noqa: E731
    th0 = hdmm_theta(n, rng=rng())

    def fun(x):
        f, g = objective(x.reshape(th0.shape), gram)
        return f, g.ravel()

    with blas_threads(1):
        _, ref, _, _ = projected_lbfgs(fun, th0.ravel(), maxiter=default_maxiter(n), ftol=1e-8)
        fit = fit_pidentity(gram, rng=rng())
    assert fit.value <= ref * (1 + 1e-9)
    res = optimize(W, rng=rng(), bound=False)
    assert res.rmse <= math.sqrt(2 * ref / W.shape[0]) * (1 + 1e-9)


def test_runaway_results_are_refused():
    gram = GramOperator.from_workload(wl.prefix(16))
    th = np.full((1, 16), 0.5)
    assert _reliable(th, objective(th, gram, gradient=False), gram)
    assert not _reliable(th, -1.0, gram) and not _reliable(th, float("nan"), gram)
    assert not _reliable(np.full((1, 16), 1e6), 1.0, gram)  # f = 1 would be pure rounding here


@pytest.mark.parametrize("n", [200, 600])
def test_pure_optimum_on_sizes_that_are_not_powers_of_the_branching(n):
    W = wl.all_range(n)
    res = optimize(W, bound=False)
    # the hat start (or HDMM's random one, which wins at n = 600) beats every hierarchy
    assert res.params["init"].startswith(("hats b=16", "hdmm p="))
    assert res.params["starts"][0][0].startswith("hats b=16")
    with blas_threads(1):  # irregular trees: dense pseudo-inverses, fast on one thread
        best_tree = min(
            expected_error(W, S.hierarchical(n, b, root)) for b in (4, 16) for root in (True, False)
        )
    assert res.error < 0.9 * best_tree
    assert default_maxiter(n) == (200 if n <= 512 else 40)


def test_projected_lbfgs_solves_a_bound_constrained_quadratic():
    rng = np.random.default_rng(8)
    h = rng.uniform(1, 10, 50)
    c = rng.standard_normal(50)

    def fun(x):
        return 0.5 * float(np.sum(h * (x - c) ** 2)), h * (x - c)

    x, f, _, _ = projected_lbfgs(fun, np.ones(50), maxiter=500, ftol=1e-15)
    np.testing.assert_allclose(x, np.maximum(c, 0), atol=1e-6)


@pytest.mark.parametrize(
    "W",
    [wl.all_range(48), wl.prefix(48), wl.stack(wl.prefix(32), wl.total(32), weights=[1.0, 3.0])],
    ids=["all_range", "prefix", "union"],
)
def test_pure_optimum_beats_every_fixed_strategy(W):
    res = optimize(W, 1.0, 0.0)
    assert res.method == "pidentity"
    assert res.error <= best_fixed_error(W, 0.0)
    assert res.gap is None


def test_pure_optimum_on_a_dense_random_workload():
    W = random_workload(np.random.default_rng(9), 20, 16)
    res = optimize(W, 1.0, 0.0)
    assert res.error <= expected_error(W, S.identity(16))
    assert res.error == pytest.approx(expected_error(W, res.strategy), rel=1e-10)


def test_pure_optimum_is_not_the_l2_optimum():
    # under pure eps the L2-optimal strategy is worse than the identity (Li et al. 2010)
    W = wl.all_range(64)
    l2 = optimize(W, 1.0, DELTA).strategy
    pure = optimize(W, 1.0, 0.0)
    assert (
        expected_error(W, l2, 1.0, 0.0) > expected_error(W, S.identity(64), 1.0, 0.0) > pure.error
    )


# -- results and bookkeeping ------------------------------------------------------------------


@pytest.mark.parametrize(
    "W, delta, method",
    [
        (wl.all_range(16), DELTA, "sdp"),
        (wl.prefix(40), DELTA, "l2"),
        (wl.prefix(40), 0.0, "pidentity"),
        (wl.kron(wl.all_range(12), wl.prefix(10)), 0.0, "kron"),
        (wl.kron(wl.all_range(12), wl.prefix(10)), DELTA, "kron"),
        (wl.marginals((3, 4, 2, 3), 2), 0.0, "marginals"),
        (wl.marginals((3, 4, 2, 3), 2), DELTA, "marginals"),
    ],
)
def test_result_error_equals_expected_error(W, delta, method):
    res = optimize(W, 0.7, delta, method)
    assert isinstance(res, OptimizeResult)
    assert res.method == method
    assert res.error == pytest.approx(expected_error(W, res.strategy, 0.7, delta), rel=1e-12)
    assert res.rmse == pytest.approx(math.sqrt(res.error / W.shape[0]))
    assert res.lower_bound == pytest.approx(lower_bound(W, 0.7, delta))
    assert res.error >= res.lower_bound * (1 - 1e-9)
    assert res.seconds >= 0
    with pytest.raises(AttributeError):
        res.error = 0.0


def test_auto_chooses_by_structure_and_privacy_model():
    assert optimize(wl.prefix(20)).method == "pidentity"
    assert optimize(wl.prefix(20), delta=DELTA).method == "l2"
    assert optimize(wl.kron(wl.prefix(8), wl.prefix(6))).method == "kron"
    assert optimize(wl.marginals((3, 3, 3), 1)).method == "marginals"


def test_kron_is_factorwise_optimal_and_certified():
    W = wl.kron(wl.all_range(16), wl.all_range(16))
    res = optimize(W)
    one = optimize(wl.all_range(16))
    # the per-query variance of the product is the product of the factors' unit figures
    assert res.error / W.shape[0] == pytest.approx(2 * (one.error / 2 / 136) ** 2, rel=1e-9)
    res2 = optimize(W, delta=DELTA)
    assert res2.gap is not None and res2.gap <= 1e-6
    assert res2.error <= expected_error(
        W, Kron(S.hierarchical(16, 2), S.hierarchical(16, 2)), 1.0, DELTA
    )


def test_union_of_kron_products_improves_on_identity_and_fixed_products():
    W = wl.stack(wl.kron(wl.prefix(12), wl.identity(8)), wl.kron(wl.total(12), wl.all_range(8)))
    res = optimize(W, method="kron")
    for A in (
        Kron(S.identity(12), S.identity(8)),
        Kron(S.hierarchical(12, 4), S.hierarchical(8, 2)),
    ):
        assert res.error <= expected_error(W, A)
    assert len(res.params["history"]) >= 2


def test_marginal_lattice_beats_measuring_the_marginals():
    W = wl.marginals((4, 4, 4, 4), 3)
    res = optimize(W)
    workload_marginals = MarginalStrategy(
        (4, 4, 4, 4), np.array([1.0 if bin(m).count("1") == 3 else 0.0 for m in range(16)])
    )
    assert res.error <= expected_error(W, workload_marginals) * (1 + 1e-12)
    assert res.error <= expected_error(W, S.identity(256))


def test_marginal_l2_optimum_attains_the_svd_bound():
    W = wl.marginals((3, 5, 4), 2)
    res = optimize(W, 1.0, DELTA)
    assert res.gap == 0.0
    assert res.error == pytest.approx(res.lower_bound, rel=1e-10)
    dual = dual_l2(W.gram().dense(), tol=1e-10)
    assert res.error / res.lower_bound == pytest.approx(1.0, abs=1e-9)
    assert optimize_marginals_l2(W).value == pytest.approx(dual.value, rel=1e-6)


@pytest.mark.parametrize("p", [1, 2])
def test_marginal_objective_gradient(p):
    W = wl.marginals((3, 4, 5), 2)
    from matmech.optimizers.marginal_workloads import marginal_workload

    terms, domain = marginal_workload(W)
    mu, mult, out_prod = workload_spectrum(terms, domain)
    rng = np.random.default_rng(11)
    theta = rng.uniform(0.2, 1.0, 8)
    f, g = marginal_objective(theta, mu, mult, out_prod, 3, p=p)
    h = 1e-7
    for i in range(8):
        e = np.zeros(8)
        e[i] = h
        num = (
            marginal_objective(theta + e, mu, mult, out_prod, 3, p=p, gradient=False)
            - marginal_objective(theta - e, mu, mult, out_prod, 3, p=p, gradient=False)
        ) / (2 * h)
        assert g[i] == pytest.approx(num, rel=1e-5)


def test_marginal_strategies_pinv_match_dense():
    domain = (2, 3, 2)
    rng = np.random.default_rng(12)
    theta = rng.uniform(0.1, 1, 8)
    for A in (MarginalStrategy(domain, theta), ResidualStrategy(domain, rng.uniform(0.5, 2, 8))):
        a = A.dense()
        m, nul = A.gram_pinv()
        assert nul is None
        np.testing.assert_allclose(m.dense(), np.linalg.pinv(a.T @ a), rtol=1e-9, atol=1e-12)
    # a lattice missing some classes has a null space, reported as such
    sparse = MarginalStrategy(domain, np.array([0, 1.0, 0, 0, 0, 0, 0, 0]))
    m, nul = sparse.gram_pinv()
    a = sparse.dense()
    np.testing.assert_allclose(m.dense(), np.linalg.pinv(a.T @ a), atol=1e-12)
    np.testing.assert_allclose(nul.dense(), np.eye(12) - np.linalg.pinv(a) @ a, atol=1e-12)


def test_marginal_optimiser_restarts_use_the_rng():
    W = wl.marginals((3, 3, 3, 3), 2)
    a = optimize_marginals_pure(W, restarts=3, rng=np.random.default_rng(2))
    b = optimize_marginals_pure(W, restarts=3, rng=np.random.default_rng(2))
    np.testing.assert_array_equal(a.theta, b.theta)
    assert sum(1 for name, _, _ in a.starts if name.startswith("random")) == 2


# -- determinism ------------------------------------------------------------------------------


def test_restarts_are_deterministic_under_a_seeded_rng():
    W = wl.all_range(64)
    runs = [optimize(W, restarts=3, rng=np.random.default_rng(42), maxiter=60) for _ in range(2)]
    np.testing.assert_array_equal(runs[0].strategy.theta, runs[1].strategy.theta)
    assert runs[0].error == runs[1].error
    names = [r[0] for r in runs[0].params["starts"]]
    assert sum(name.startswith("random") for name in names) == 2  # restarts - 1
    assert sum(name.startswith("hdmm p=") for name in names) == 1  # HDMM's OPT_0 start
    assert (
        sum(name.startswith("hdmm-like quadratic fill") for name in names) == 1
    )  # its deterministic cousin
    # a different seed explores different random starts
    other = optimize(W, restarts=3, rng=np.random.default_rng(43), maxiter=60)
    assert other.params["starts"][1][2] != runs[0].params["starts"][1][2]
    # without an rng only deterministic starts: reproducible too
    a, b = optimize(W, restarts=2), optimize(W, restarts=2)
    np.testing.assert_array_equal(a.strategy.theta, b.strategy.theta)


def test_restarts_never_lose_to_the_first_start():
    W = wl.prefix(64)
    one = optimize(W, maxiter=80)
    three = optimize(W, restarts=3, rng=np.random.default_rng(0), maxiter=80)
    assert three.error <= one.error


def test_progress_callable_receives_fractions():
    seen = []
    optimize(wl.prefix(64), progress=lambda f, m: seen.append((f, m)))
    assert seen and seen[-1][0] == 1.0
    assert all(0.0 <= f <= 1.0 for f, _ in seen)
    with pytest.raises(TypeError, match="progress"):
        optimize(wl.prefix(8), progress="yes")


# -- bad input --------------------------------------------------------------------------------


def test_unknown_method():
    with pytest.raises(ValueError, match="method must be one of"):
        optimize(wl.prefix(8), method="hdmm")
    assert "sdp" in METHODS


@pytest.mark.parametrize("delta", [-0.1, 1.0, 1.5, float("nan")])
def test_delta_out_of_range(delta):
    with pytest.raises(ValueError, match="delta"):
        optimize(wl.prefix(8), delta=delta)


@pytest.mark.parametrize("eps", [0.0, -1.0, float("inf")])
def test_eps_out_of_range(eps):
    with pytest.raises(ValueError, match="eps"):
        optimize(wl.prefix(8), eps=eps)


def test_non_psd_and_nan_grams_are_refused():
    bad = np.array([[1.0, 2.0], [2.0, 1.0]])
    for fn in (check_gram, dual_l2, sdp_l2, GramOperator.from_gram):
        with pytest.raises(ValueError, match="positive semidefinite"):
            fn(bad)
    nan = np.eye(3)
    nan[1, 2] = nan[2, 1] = np.nan
    for fn in (check_gram, dual_l2, sdp_l2):
        with pytest.raises(ValueError, match="finite"):
            fn(nan)
    with pytest.raises(ValueError, match="symmetric"):
        check_gram(np.array([[1.0, 0.5], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="square"):
        check_gram(np.ones((2, 3)))
    with pytest.raises(ValueError, match="zero"):
        check_gram(np.zeros((3, 3)))


def test_dual_l2_refuses_a_maxiter_below_one():
    # it used to run no iteration and fail unpacking its (None) best iterate with a TypeError
    gram = wl.prefix(4).gram().dense()
    for bad in (0, -3):
        with pytest.raises(ValueError, match=f"maxiter must be an integer >= 1, got {bad}"):
            dual_l2(gram, maxiter=bad)
    with pytest.raises(TypeError, match="maxiter must be an integer"):
        dual_l2(gram, maxiter=2.0)
    fit = dual_l2(gram, maxiter=1)  # one step: a strategy with a (loose) certified bound
    assert fit.iterations == 1 and fit.dual <= fit.value


def test_workloads_too_large_for_the_method():
    with pytest.raises(ValueError, match="method='l2'"):
        optimize(wl.prefix(100), delta=DELTA, method="sdp")
    with pytest.raises(ValueError, match="n <= 4096"):
        optimize(wl.prefix(5000), delta=DELTA, method="l2")
    # beyond p-Identity's dense limit the pure-eps answer is the best exact hierarchy
    res = optimize(wl.prefix(9000), method="pidentity")
    assert res.params["init"].startswith("best hierarchy")
    best_fixed = min(
        expected_error(wl.prefix(9000), S.hierarchical(9000, b, r))
        for b in (2, 4, 8, 16, 32)
        for r in (True, False)
    )
    assert res.error <= best_fixed * (1 + 1e-12)


def test_methods_that_do_not_fit_the_privacy_model_or_workload():
    with pytest.raises(ValueError, match="pure eps"):
        optimize(wl.prefix(8), delta=0.0, method="l2")
    with pytest.raises(ValueError, match="pure-eps"):
        optimize(wl.prefix(8), delta=DELTA, method="pidentity")
    with pytest.raises(ValueError, match="union of marginals"):
        optimize(wl.prefix(8), method="marginals")
    with pytest.raises(ValueError, match="Kronecker"):
        optimize(wl.prefix(8), method="kron")


def test_bad_keyword_values():
    with pytest.raises(TypeError, match="Generator"):
        optimize(wl.prefix(8), rng=np.random.RandomState(0))
    with pytest.raises(ValueError, match="restarts"):
        optimize(wl.prefix(8), restarts=0)
    with pytest.raises(ValueError, match="time_limit"):
        optimize(wl.prefix(8), time_limit=-1)
    with pytest.raises(ValueError, match="maxiter"):
        fit_pidentity(GramOperator.from_workload(Prefix(8)), maxiter=0)
    with pytest.raises(ValueError, match="non-negative"):
        PIdentity(-np.ones((2, 3)))
    assert isinstance(L2Strategy(np.eye(2)), Dense)


# -- issue 12: HDMM's journal workloads (benchmarks/highdim.py) ---------------------------------


def _it(n, w=1.0):
    return wl.stack(wl.identity(n), wl.total(n), weights=[1.0, w])


def test_products_of_identity_total_factors_expand_to_marginals_with_the_same_gram():
    from matmech.optimizers.marginal_workloads import expand_marginals, marginal_workload

    W = wl.stack(
        wl.kron(_it(3, 2.0), wl.identity(4), wl.total(2)),
        wl.kron(wl.total(3), _it(4), _it(2)),
        weights=[1.0, 3.0],
    )
    E = expand_marginals(W)
    assert marginal_workload(E) is not None
    assert set(E.subsets) == {(), (1,), (2,), (0, 1), (1, 2)}
    np.testing.assert_allclose(E.gram().dense(), W.gram().dense(), atol=1e-12)
    assert expand_marginals(wl.kron(wl.prefix(3), wl.identity(2))) is None
    assert expand_marginals(W, max_terms=4) is None
    marg = wl.marginals((3, 3), 1)
    assert expand_marginals(marg) is marg


def test_auto_tries_marginals_on_kron_of_identity_total_and_keeps_the_best():
    # HDMM's cps_W1 shape Kron[IT, ..., IT]: the marginal lattice beats the Kronecker fit
    W = wl.kron(_it(50), _it(20), _it(7), _it(2))
    res = optimize(W)
    assert res.method == "marginals" and set(res.params["tried"]) == {
        "marginals",
        "gmarginals",
        "kron",
        "kronstack",
    }
    assert res.error < res.params["tried"]["kron"]["error"]
    assert res.error == pytest.approx(expected_error(W, res.strategy), rel=1e-9)
    assert res.seconds == pytest.approx(sum(t["seconds"] for t in res.params["tried"].values()))
    assert optimize(W, method="marginals").error == pytest.approx(res.error, rel=1e-12)
    # (eps, delta): both families are certified optimal; the lattice's closed form comes first
    res2 = optimize(W, delta=DELTA)
    assert res2.method == "marginals" and res2.error == pytest.approx(res2.lower_bound, rel=1e-9)


def test_marginal_lattice_has_fixed_random_starts_and_is_reproducible():
    W = wl.marginals((4, 3, 5, 2), 2)
    a, b = optimize_marginals_pure(W), optimize_marginals_pure(W)
    assert sum(name.startswith("fixed random") for name, _, _ in a.starts) == 16
    np.testing.assert_array_equal(a.theta, b.theta)
    assert a.value <= min(f for _, _, f in a.starts) * (1 + 1e-12)


def test_auto_goes_on_to_the_next_family_when_one_fails(monkeypatch):
    from matmech.optimizers import general_marginals, marginal_lattice

    def boom(*args, **kwargs):
        raise MemoryError("lattice too large")

    monkeypatch.setattr(marginal_lattice, "optimize_marginals_pure", boom)
    W = wl.marginals((3, 4, 2), 2)
    res = optimize(W)
    assert (
        "MemoryError" in res.params["failed"]["marginals"]
        and "marginals" not in res.params["tried"]
    )
    assert res.method == min(res.params["tried"], key=lambda k: res.params["tried"][k]["error"])
    assert res.error == pytest.approx(expected_error(W, res.strategy), rel=1e-9)
    with pytest.raises(MemoryError):  # an explicit method is not caught
        optimize(W, method="marginals")
    # every family failing but one: that one is the result
    monkeypatch.setattr(general_marginals, "optimize_general_marginals", boom)
    monkeypatch.setattr("matmech.optimizers.kronfit.MAX_KRON_GRAM_BYTES", 1)
    res = optimize(W)
    assert res.method == "kronstack" and set(res.params["failed"]) == {
        "marginals",
        "gmarginals",
        "kron",
    }
    monkeypatch.setattr("matmech.optimizers.kronstack.optimize_kron_stack", boom)
    with pytest.raises(ValueError, match="every applicable family failed"):
        optimize(W)


def test_kron_union_memory_is_refused_up_front(monkeypatch):
    from matmech.optimizers.kronfit import check_kron_memory
    from matmech.optimizers.marginal_workloads import kron_blocks

    W = wl.stack(wl.kron(wl.prefix(12), wl.identity(8)), wl.kron(wl.total(12), wl.all_range(8)))
    assert check_kron_memory(kron_blocks(W)) == 8 * 2 * (144 + 64)
    monkeypatch.setattr("matmech.optimizers.kronfit.MAX_KRON_GRAM_BYTES", 1000)
    with pytest.raises(ValueError, match="GiB of dense factor grams"):
        optimize(W, method="kron")
    with pytest.raises(ValueError, match="attribute sizes"):
        check_kron_memory(
            [(1.0, [wl.identity(2), wl.identity(10**5)]), (1.0, [wl.total(2), wl.total(10**5)])]
        )


def test_pure_kron_union_uses_deterministic_fill_starts_and_is_reproducible():
    W = wl.stack(wl.kron(wl.prefix(12), wl.identity(8)), wl.kron(wl.total(12), wl.all_range(8)))
    a, b = optimize(W, method="kron"), optimize(W, method="kron")
    assert a.error == b.error
    fit = fit_pidentity(GramOperator.from_workload(wl.prefix(64)), fill_starts=2, polish=0)
    assert [r[0] for r in fit.starts if r[0].startswith("fill")] == ["fill p=4 #1", "fill p=4 #2"]
    again = fit_pidentity(GramOperator.from_workload(wl.prefix(64)), fill_starts=2, polish=0)
    np.testing.assert_array_equal(fit.theta, again.theta)
    for A in (
        Kron(S.identity(12), S.identity(8)),
        Kron(S.hierarchical(12, 4), S.hierarchical(8, 2)),
    ):
        assert a.error <= expected_error(W, A)


_HDMM = __import__("pathlib").Path("/work/shared/benchmarks/hdmm-journal/cps_W1.npz")


@pytest.mark.skipif(not _HDMM.exists(), reason="HDMM journal workloads not available")
def test_hdmm_cps_w1_beats_hdmm():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "highdim", __import__("pathlib").Path(__file__).parents[2] / "benchmarks" / "highdim.py"
    )
    highdim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(highdim)
    W, meta = highdim.load("cps_W1")
    assert highdim.rebuild_check(W, meta)[2] < 1e-12
    res = optimize(W, bound=False)
    assert res.method == "marginals" and res.rmse < 4.839  # HDMM's best template (issue 12)


# -- generalised marginals and unions of Kronecker products in optimize / auto --------------------


def _prefix_products():
    return VStack(
        [
            Kron(wl.prefix(8), wl.identity(3), wl.total(4)),
            Kron(wl.prefix(8), wl.total(3), wl.prefix(4)),
            Kron(wl.total(8), wl.identity(3), wl.identity(4)),
        ]
    )


def test_auto_keeps_the_lowest_exact_error_over_all_families():
    W = _prefix_products()
    res = optimize(W, eps=1.0)
    tried = dict(res.params["tried"])
    assert {"gmarginals", "kron", "kronstack"} <= set(tried)
    assert res.error == pytest.approx(min(v["error"] for v in tried.values()))
    a, w = res.strategy.dense(), W.dense()
    dense = 2.0 * np.abs(a).sum(0).max() ** 2 * float(np.trace(w @ np.linalg.pinv(a.T @ a) @ w.T))
    assert res.error == pytest.approx(dense, rel=1e-7)
    g = optimize(W, eps=1.0, method="gmarginals")
    assert g.error == pytest.approx(expected_error(W, g.strategy, 1.0), rel=1e-8)
    assert g.params["error_kind"] == "exact (factored)"


def test_auto_survives_a_failing_family(monkeypatch):
    from matmech.optimizers import general_marginals

    def boom(*args, **kwargs):
        raise MemoryError("simulated")

    monkeypatch.setattr(general_marginals, "optimize_general_marginals", boom)
    res = optimize(_prefix_products(), eps=1.0)
    assert (
        "gmarginals" in res.params["failed"] and "simulated" in res.params["failed"]["gmarginals"]
    )
    assert res.method in ("kron", "kronstack")


def test_new_families_check_their_inputs():
    # kronstack runs under (eps, delta) too since issue 24 (L2 factors); both models need a
    # Kronecker workload
    for delta in (0.0, 1e-6):
        with pytest.raises(ValueError, match="Kronecker"):
            optimize(wl.from_matrix(np.ones((2, 6))), eps=1.0, delta=delta, method="kronstack")
