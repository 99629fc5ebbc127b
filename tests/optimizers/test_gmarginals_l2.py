"""Generalised marginal weights for the (ε, δ) error: the factored L2 objective
Δ₂² · trace(W (AᵀA)⁻ Wᵀ) equals the dense computation (‖A‖_{1→2}² from the dense A), its
gradient equals finite differences, the re-optimised θ is never worse than the pure-ε θ and
the (ε, δ) measurement uses the same sensitivity."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from matmech import workloads as wl
from matmech.measurements.gmarginal import plan_gmarginal
from matmech.plans.gmarginal import gmarginal_strategy
from matmech.estimators.gmarginal_solve import GMarginalSolver
from matmech.linalg.terms import as_terms
from matmech.linalg.linop import Kron, VStack
from matmech.optimizers import general_marginal_error, general_marginals
from matmech.optimizers.dispatch import optimize

from gmarginal_cases import random_case as _random_case


def _dense_l2(W, A):
    """‖A‖_{1→2}² · trace(W (AᵀA)⁺ Wᵀ) from the dense matrices."""
    a, w = A.dense(), W.dense()
    sens2 = float((a * a).sum(0).max())
    return sens2 * float(np.trace(w @ np.linalg.pinv(a.T @ a) @ w.T))


def _prefix_union():
    """adult_W2-like: prefixes on two ordered attributes inside 2-way products with identities."""
    P, I, T = wl.prefix, wl.identity, wl.total
    return VStack(
        [
            Kron(P(6), I(3), T(4)),
            Kron(P(6), T(3), P(4)),
            Kron(T(6), I(3), P(4)),
            Kron(I(6), T(3), T(4)),
        ],
        weights=[1.0, 1.0, 1.5, 0.7],
    )


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([0.0, 0.5]))
def test_l2_objective_equals_dense(seed, zero_frac):
    W, A = _random_case(seed, zero_frac)
    dense = _dense_l2(W, A)
    assert general_marginals.general_marginal_l2_objective(W, A)[0] == pytest.approx(
        dense, rel=1e-7
    )
    assert general_marginal_error.general_marginal_error(W, A, p=2) == pytest.approx(
        dense, rel=1e-7
    )
    # the closed-form sensitivity is the exact largest column norm (not only a bound): the dense
    # column norms and the branch and bound of linalg.normmax agree with it
    s2 = general_marginal_error.general_marginal_sensitivity2(
        A.theta, [general_marginal_error.factor_col_norm2(f) for f in A.factors]
    )
    a = A.dense()
    assert s2 == pytest.approx(float((a * a).sum(0).max()), rel=1e-12)
    assert s2 == pytest.approx(float(A.sensitivity(2)) ** 2, rel=1e-12)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_l2_gradient_matches_finite_differences(seed):
    W, A = _random_case(seed)
    rng = np.random.default_rng(seed)
    th = rng.uniform(0.2, 1.0, A.theta.size)
    f, g = general_marginals.general_marginal_l2_objective(W, A, th)
    for j in range(th.size):
        h = 1e-6 * th[j]
        up, dn = th.copy(), th.copy()
        up[j] += h
        dn[j] -= h
        fd = (
            general_marginals.general_marginal_l2_objective(W, A, up)[0]
            - general_marginals.general_marginal_l2_objective(W, A, dn)[0]
        ) / (2 * h)
        assert g[j] == pytest.approx(fd, rel=1e-5, abs=1e-7 * abs(f))


def test_reweighted_theta_is_no_worse_and_its_value_is_dense():
    W = _prefix_union()
    A = optimize(W, 1.0, 0.0, method="gmarginals").strategy
    before = general_marginals.general_marginal_l2_objective(W, A)[0]
    fit = general_marginals.reweight_general_marginals_l2(W, A)
    assert fit.value <= before
    assert fit.value < 0.99 * before  # the pure-ε weights are not L2-optimal here
    assert fit.value == pytest.approx(_dense_l2(W, fit.strategy), rel=1e-7)
    # the factors are kept
    assert all(f is g for f, g in zip(fit.strategy.factors, A.factors))
    # deterministic, and the norm=2 option of the optimiser is the same re-weighting
    again = general_marginals.reweight_general_marginals_l2(W, A)
    assert np.array_equal(again.theta, fit.theta)
    full = general_marginals.optimize_general_marginals(W, norm=2)
    assert np.array_equal(full.theta, fit.theta) and full.value == fit.value


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000))
def test_reweighting_random_cases_never_worse(seed):
    W, A = _random_case(seed, 0.5)
    before = general_marginals.general_marginal_l2_objective(W, A)[0]
    fit = general_marginals.reweight_general_marginals_l2(W, A)
    assert fit.value <= before * (1 + 1e-12)
    assert fit.value == pytest.approx(_dense_l2(W, fit.strategy), rel=1e-7)


def test_bad_arguments_raise():
    W = _prefix_union()
    with pytest.raises(ValueError, match="norm"):
        general_marginals.optimize_general_marginals(W, norm=3)
    with pytest.raises(ValueError, match="p must be"):
        general_marginal_error.general_marginal_error(
            W,
            general_marginal_error.GeneralMarginalStrategy((6, 3, 4), np.ones(8), [None] * 3),
            p=3,
        )
    with pytest.raises(TypeError):
        general_marginals.reweight_general_marginals_l2(W, wl.identity(72))
    with pytest.raises(ValueError, match="attributes"):
        general_marginals.reweight_general_marginals_l2(
            W, general_marginal_error.GeneralMarginalStrategy((6, 3, 5), np.ones(8), [None] * 3)
        )
    with pytest.raises(ValueError, match="lattice weights"):
        general_marginal_error.general_marginal_sensitivity2(np.ones(4), [1.0, 1.0, 1.0])


def test_release_uses_the_l2_weights_and_the_same_sensitivity():
    W = _prefix_union()
    eps, delta = 1.0, 1e-6
    A_pure = optimize(W, eps, 0.0, method="gmarginals").strategy
    A, name, note = gmarginal_strategy(W, eps, delta, None)
    assert "L2 (Gaussian)" in note and name == "gmarginals"
    assert np.array_equal(A.theta, general_marginals.reweight_general_marginals_l2(W, A_pure).theta)
    assert "L2" not in gmarginal_strategy(W, eps, 0.0, None)[2]  # pure ε: unchanged
    assert np.array_equal(gmarginal_strategy(W, eps, 0.0, None)[0].theta, A_pure.theta)
    wt = as_terms(W)
    total = {}
    for key, S in (("pure", A_pure), ("l2", A)):
        plan = plan_gmarginal(S, eps, delta)
        # the measurement's Δ₂ is the dense largest column norm of the strategy it measures
        m = plan.measured_strategy().dense()
        assert plan.sensitivity == pytest.approx(math.sqrt(float((m * m).sum(0).max())), rel=1e-8)
        total[key] = float(GMarginalSolver(plan.gls_strategy(), plan.subsets).variances(wt).sum())
    # the measured total variance follows the objective (grid rounding and scale buckets aside)
    ratio = (
        general_marginals.general_marginal_l2_objective(W, A)[0]
        / general_marginals.general_marginal_l2_objective(W, A_pure)[0]
    )
    assert total["l2"] < total["pure"]
    assert total["l2"] / total["pure"] == pytest.approx(ratio, rel=0.02)
