"""Generalised marginal strategies: the factored error equals the dense one, its gradient
equals finite differences, identity factors give the marginal lattice, and the optimiser's
reported value is the strategy's dense error."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from matmech import workloads as wl
from matmech.error import expected_error
from matmech.linalg.linop import Dense, Kron, VStack
from matmech.optimizers import (
    general_marginal_error as GE,
    general_marginal_error,
    general_marginals,
    marginal_lattice,
)
from matmech.optimizers.gram import GramOperator
from matmech.optimizers.pure import objective
from matmech.optimizers.pidentity import PIdentity

from gmarginal_cases import random_case as _random_case


def _dense_error(W, A):
    a, w = A.dense(), W.dense()
    sens = np.abs(a).sum(0).max()
    return sens**2 * float(np.trace(w @ np.linalg.pinv(a.T @ a) @ w.T))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([0.0, 0.5]))
def test_factored_error_equals_dense(seed, zero_frac):
    W, A = _random_case(seed, zero_frac)
    dense = _dense_error(W, A)
    assert general_marginal_error.general_marginal_error(W, A) == pytest.approx(dense, rel=1e-7)
    assert A.factored_trace(W) * float(A.theta.sum()) ** 2 == pytest.approx(dense, rel=1e-7)
    # the matmech error analysis through the strategy's factored generalised inverse agrees
    assert expected_error(W, A, eps=math.sqrt(2.0)) == pytest.approx(dense, rel=1e-7)
    assert A.sensitivity(1) == pytest.approx(float(A.theta.sum()), rel=1e-12)
    assert A.sensitivity(1) == pytest.approx(np.abs(A.dense()).sum(0).max(), rel=1e-12)


def test_outside_row_space_raises():
    dom = (3, 4)
    th = np.zeros(4)
    th[1] = th[2] = 1.0  # the 1-way subsets only
    A = general_marginal_error.GeneralMarginalStrategy(dom, th, [PIdentity(np.ones((1, 3))), None])
    W = Kron(wl.prefix(3), wl.identity(4))  # needs the 2-way subset
    with pytest.raises(ValueError, match="row space"):
        general_marginal_error.general_marginal_error(W, A)
    # a workload on the measured subsets is answerable, and matches the dense figure
    W1 = VStack([Kron(wl.prefix(3), wl.total(4)), Kron(wl.total(3), wl.identity(4))])
    assert general_marginal_error.general_marginal_error(W1, A) == pytest.approx(
        _dense_error(W1, A), rel=1e-8
    )


def test_identity_factors_are_the_marginal_lattice():
    dom = (3, 4, 2)
    rng = np.random.default_rng(3)
    th = rng.uniform(0, 1, 8)
    W = wl.marginals(dom, 2)
    A = general_marginal_error.GeneralMarginalStrategy(dom, th, [None, None, None])
    ref = expected_error(W, marginal_lattice.MarginalStrategy(dom, th), eps=math.sqrt(2.0))
    assert general_marginal_error.general_marginal_error(W, A) == pytest.approx(ref, rel=1e-10)
    assert np.allclose(A.eigenvalues(), marginal_lattice.MarginalStrategy(dom, th).eigenvalues())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_gradient_equals_finite_differences(seed):
    rng = np.random.default_rng(seed)
    dom = (5, 3, 4)
    W = VStack(
        [
            Kron(wl.prefix(5), wl.total(3), wl.identity(4)),
            Kron(wl.prefix(5), wl.identity(3), wl.total(4)),
            Kron(wl.total(5), VStack([wl.identity(3), wl.total(3)]), wl.all_range(4)),
            Kron(Dense(rng.standard_normal((2, 5))), wl.total(3), wl.prefix(4)),
        ],
        weights=[1.0, 2.0, 0.5, 1.3],
    )
    prob, _, _ = GE.general_marginal_problem(W)
    assert prob.free == (0, 2)
    th = rng.uniform(0.1, 1, 8)
    thetas = {0: rng.uniform(0, 1, (2, 5)), 2: rng.uniform(0, 1, (2, 4))}

    def full(th, thetas):
        minvs = [np.eye(d) for d in dom]
        for i, t in thetas.items():
            minvs[i] = GE.pidentity_minv(t)
        return prob.full(th, minvs)

    f, dth, grads = full(th, thetas)
    h = 1e-6
    num = np.array(
        [(full(th + h * e, thetas)[0] - full(th - h * e, thetas)[0]) / (2 * h) for e in np.eye(8)]
    )
    assert np.allclose(num, dth, rtol=1e-5, atol=1e-6 * abs(f))
    for i, t in thetas.items():
        gam = grads[i]
        g = objective(t, GramOperator("dense", gam.shape[0], np.diag(gam).copy(), dense=gam))[1]
        for r, c in [(0, 0), (1, 2), (0, t.shape[1] - 1)]:
            e = np.zeros_like(t)
            e[r, c] = h
            fd = (full(th, {**thetas, i: t + e})[0] - full(th, {**thetas, i: t - e})[0]) / (2 * h)
            assert fd == pytest.approx(g[r, c], rel=1e-5, abs=1e-7 * abs(f))


def test_optimiser_value_is_the_dense_error_and_beats_its_starts():
    W = VStack(
        [
            Kron(wl.prefix(8), wl.identity(3), wl.total(4)),
            Kron(wl.prefix(8), wl.total(3), wl.identity(4)),
            Kron(wl.total(8), wl.identity(3), wl.identity(4)),
            Kron(wl.prefix(8), wl.total(3), wl.total(4)),
        ]
    )
    fit = general_marginals.optimize_general_marginals(W)
    assert fit.value == pytest.approx(_dense_error(W, fit.strategy), rel=1e-7)
    assert any(isinstance(f, PIdentity) for f in fit.strategy.factors)  # the prefix attribute
    starts = [r for r in fit.starts if r[0] == "workload subsets"]
    assert fit.value <= starts[0][2] * (1 + 1e-12)
    # never worse than the plain marginal lattice with identity factors at the same θ
    plain = general_marginal_error.GeneralMarginalStrategy((8, 3, 4), fit.theta, [None, None, None])
    assert fit.value <= general_marginal_error.general_marginal_error(W, plain) * (1 + 1e-9)


def test_marginal_workload_close_to_the_lattice_optimum():
    W = wl.marginals((3, 4, 2, 3), 2)
    fit = general_marginals.optimize_general_marginals(W)
    ref = marginal_lattice.optimize_marginals_pure(W)
    assert fit.value == pytest.approx(_dense_error(W, fit.strategy), rel=1e-7)
    assert fit.value <= ref.value * 1.02


def test_store_round_trip(tmp_path):
    from matmech.io import store

    W, A = _random_case(7)
    path = tmp_path / "g.npz"
    store.save_strategy(path, A)
    B = store.load_strategy(path)
    assert np.allclose(A.dense(), B.dense())


def test_huge_domain_is_factored():
    # 10¹⁶ cells: all 2-way products of prefixes (4 ordered attributes) and identities (4 others)
    import itertools

    kinds = [wl.prefix(100)] * 4 + [wl.identity(100)] * 4
    blocks = [
        Kron(*[kinds[i] if i in pair else wl.total(100) for i in range(8)])
        for pair in itertools.combinations(range(8), 2)
    ]
    W = VStack(blocks)
    fit = general_marginals.optimize_general_marginals(W)
    A = fit.strategy
    assert A.shape[1] == 10**16
    assert A.sensitivity_details(1).exact and A.sensitivity(1) == pytest.approx(1.0)
    assert general_marginal_error.general_marginal_error(W, A) == pytest.approx(fit.value, rel=1e-9)
    # better than measuring each workload product with its own share (the first start)
    assert fit.value < fit.starts[0][1]
    assert sum(isinstance(f, PIdentity) for f in A.factors) == 4
