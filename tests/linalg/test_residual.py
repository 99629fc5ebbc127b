"""Residual bases (ResidualPlanner, Xiao et al. 2023): closed forms against dense matrices."""

import itertools
import math

import numpy as np
import pytest

import matmech as mm
from matmech.error import lower_bound
from matmech.privacy.calibration import gaussian_sigma
from matmech.linalg.residual import (
    exact_cell_variances,
    haar_contrasts,
    lattice,
    marginal_cell_variances,
    orthonormal_contrasts,
    residual_operator,
    sensitivity2,
    svd_bound,
    total_variance,
)
from matmech.optimizers.residual import plan_residuals


@pytest.mark.parametrize("n", list(range(1, 41)) + [64, 99, 100])
def test_contrasts_are_an_integer_orthogonal_basis_of_the_difference_subspace(n):
    H, nrm = haar_contrasts(n)
    assert H.shape == (n - 1, n) and H.dtype == np.int64
    assert not (H @ np.ones(n, dtype=np.int64)).any()
    G = H @ H.T
    assert np.array_equal(G, np.diag(nrm))
    Q = orthonormal_contrasts(n)
    np.testing.assert_allclose(Q.T @ Q, np.eye(n) - 1.0 / n, atol=1e-12)
    # few distinct row norms (the measurement draws one table per distinct noise scale)
    assert len(set(nrm.tolist())) <= 2 * max(1, math.ceil(math.log2(n))) + 1


def _marginal(domain, S):
    return mm.workloads.marginals(domain, attrs=[S]).dense()


def _lift(domain, S, T):
    """⊗_{i∈T} Qᵢᵀ ⊗_{i∈S∖T} 1/nᵢ (the map from residual T's coordinates to S's cells)."""
    out = np.ones((1, 1))
    for i in S:
        f = (
            orthonormal_contrasts(domain[i]).T
            if i in T
            else np.full((domain[i], 1), 1.0 / domain[i])
        )
        out = np.kron(out, f)
    return out


DOMAINS = [(2, 3, 4), (3, 1, 2, 2), (5, 2, 3)]


@pytest.mark.parametrize("domain", DOMAINS)
def test_every_marginal_is_the_sum_of_its_lifted_residuals(domain):
    d = len(domain)
    for k in range(d + 1):
        for S in itertools.combinations(range(d), k):
            total = np.zeros((math.prod(domain[i] for i in S), math.prod(domain)))
            for j in range(len(S) + 1):
                for T in itertools.combinations(S, j):
                    if all(domain[i] > 1 for i in T):
                        total += (
                            _lift(domain, S, T)
                            @ residual_operator(domain, T, integer=False).dense()
                        )
            np.testing.assert_allclose(total, _marginal(domain, S), atol=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_cell_variances_and_sensitivity_equal_the_dense_covariance(seed):
    rng = np.random.default_rng(seed)
    d = int(rng.integers(2, 4))
    domain = tuple(int(v) for v in rng.integers(1, 5, size=d))
    subsets = [
        s
        for s in itertools.chain.from_iterable(
            itertools.combinations(range(d), k) for k in range(d + 1)
        )
        if rng.random() < 0.6
    ] or [(0,)]
    lat = lattice(domain, subsets)
    u = rng.uniform(0.5, 3.0, size=len(lat.residuals))
    # dense: strategy A = [R_T / sqrt(u_T)], unit noise; covariance of the GLS estimate of M_S
    A = np.vstack(
        [
            residual_operator(domain, T, integer=False).dense() / math.sqrt(uu)
            for T, uu in zip(lat.residuals, u)
        ]
    )
    cols = (A**2).sum(0)
    np.testing.assert_allclose(cols, sensitivity2(lat, u), rtol=1e-12)  # the same on every cell
    cov = np.linalg.pinv(A.T @ A)
    v = marginal_cell_variances(lat, u)
    for i, S in enumerate(lat.subsets):
        M = _marginal(domain, S)
        np.testing.assert_allclose(np.diag(M @ cov @ M.T), v[i], rtol=1e-9, atol=1e-12)
    assert total_variance(lat, u) == pytest.approx(sum(lat.cells * v))


def test_exact_cell_variances_with_unequal_row_variances():
    domain = (3, 4, 2)
    T = (0, 1)
    rng = np.random.default_rng(3)
    rv = rng.uniform(1, 2, size=(2, 3))
    Q = np.kron(orthonormal_contrasts(3), orthonormal_contrasts(4))
    dense = np.diag(Q.T @ np.diag(rv.ravel()) @ Q)
    np.testing.assert_allclose(exact_cell_variances(domain, T, rv).ravel(), dense, rtol=1e-12)


@pytest.mark.parametrize("seed", range(8))
def test_svd_bound_equals_the_dense_spectrum_and_error_lower_bound(seed):
    rng = np.random.default_rng(100 + seed)
    d = int(rng.integers(2, 4))
    domain = tuple(int(v) for v in rng.integers(2, 5, size=d))
    subsets = sorted(
        {
            tuple(sorted(rng.choice(d, size=int(rng.integers(0, d + 1)), replace=False).tolist()))
            for _ in range(3)
        }
    )
    w = rng.uniform(0.5, 2.0, size=len(subsets))
    W = mm.workloads.stack(
        [mm.workloads.marginals(domain, attrs=[s]) for s in subsets], weights=np.sqrt(w)
    )
    lam = np.linalg.eigvalsh(W.dense().T @ W.dense())
    lam[lam < 1e-9 * lam.max()] = 0.0  # round-off around the zero eigenvalues
    dense_bound = np.sqrt(lam).sum() ** 2 / math.prod(domain)
    lat = lattice(domain, subsets, w)
    assert svd_bound(lat) == pytest.approx(dense_bound, rel=1e-10)
    # matmech.error.lower_bound in the Gaussian unit (σ² at unit sensitivity)
    sigma2 = gaussian_sigma(1.0, 1e-6, 1.0) ** 2
    assert svd_bound(lat) * sigma2 == pytest.approx(
        lower_bound(W, 1.0, 1e-6), rel=1e-6
    )  # its dense path clips round-off
    plan = plan_residuals(domain, subsets, weights=w)
    assert plan.weighted_total == pytest.approx(svd_bound(lat), rel=1e-12)
    assert sensitivity2(plan.lattice, plan.variances) == pytest.approx(1.0, rel=1e-12)


def test_adult_w1_reaches_the_svd_bound_and_residualplanners_figure():
    import json

    z = np.load("/work/shared/benchmarks/hdmm-journal/adult_W1.npz", allow_pickle=False)
    meta = json.loads(str(z["meta"]))
    subsets = [tuple(i for i, k in enumerate(t["kinds"]) if k == "I") for t in meta["terms"]]
    plan = plan_residuals(tuple(meta["domain"]), subsets)
    assert plan.queries == meta["m"]
    assert round(plan.rmse, 3) == 10.665
    assert plan.weighted_total / plan.svd_bound == pytest.approx(1.0, abs=1e-4)


def test_sum_plan_is_stationary_and_beats_perturbations():
    plan = plan_residuals((3, 5, 2, 4), [(0, 1), (1, 2, 3), (0, 3)])
    lat, u = plan.lattice, plan.variances
    rng = np.random.default_rng(0)
    for _ in range(20):
        v = u * np.exp(rng.normal(0, 0.2, size=u.size))
        v = v * sensitivity2(lat, v)  # rescale to unit sensitivity
        assert total_variance(lat, v, weighted=True) >= plan.weighted_total * (1 - 1e-12)


def test_max_objective_equals_sum_on_a_symmetric_lattice():
    subsets = list(itertools.combinations(range(5), 2))
    s, m = plan_residuals((4,) * 5, subsets), plan_residuals((4,) * 5, subsets, objective="max")
    assert m.cell_variances.max() == pytest.approx(s.cell_variances.max(), rel=1e-4)


def test_max_objective_matches_an_independent_solver():
    from scipy.optimize import minimize

    domain, subsets = (2, 6, 3), [(0, 1), (2,), (1, 2)]
    plan = plan_residuals(domain, subsets, objective="max")
    lat = plan.lattice
    assert sensitivity2(lat, plan.variances) == pytest.approx(1.0, rel=1e-9)
    # epigraph form in log-variances with SLSQP, from the sum-optimal start
    u0 = plan_residuals(domain, subsets).variances
    k = len(u0)

    def cons(z):
        u = np.exp(z[:k])
        return np.concatenate([[1 - sensitivity2(lat, u)], z[k] - marginal_cell_variances(lat, u)])

    z0 = np.concatenate([np.log(u0), [marginal_cell_variances(lat, u0).max()]])
    res = minimize(
        lambda z: z[k],
        z0,
        constraints=[{"type": "ineq", "fun": cons}],
        method="SLSQP",
        options={"ftol": 1e-12, "maxiter": 500},
    )
    assert res.success
    assert plan.cell_variances.max() == pytest.approx(res.x[k], rel=1e-4)
    assert plan.cell_variances.max() < plan_residuals(domain, subsets).cell_variances.max()


def test_bad_lattices_are_refused():
    with pytest.raises(ValueError, match="not an index"):
        plan_residuals((2, 3), [(0, 2)])
    with pytest.raises(ValueError, match="repeats"):
        plan_residuals((2, 3), [(1, 1)])
    with pytest.raises(ValueError, match="objective"):
        plan_residuals((2, 3), [(0,)], objective="mean")
    with pytest.raises(ValueError, match="weights"):
        plan_residuals((2, 3), [(0,)], weights=[-1.0])


def test_one_hundred_attributes_two_way_plan_is_at_the_bound_and_symmetric():
    subsets = list(itertools.combinations(range(100), 2))
    plan = plan_residuals((10,) * 100, subsets)
    assert len(plan.residuals) == 1 + 100 + 4950
    assert plan.weighted_total / plan.svd_bound == pytest.approx(1.0, abs=1e-4)
    np.testing.assert_allclose(plan.cell_variances, plan.cell_variances[0], rtol=1e-9)
    # the per-cell variance from the residual scales by hand: each 2-way marginal sees
    # one 2-way, two 1-way and the 0-way residual
    u = dict(zip(plan.residuals, plan.variances))
    v = u[(0, 1)] * 0.81 + (u[(0,)] + u[(1,)]) * 0.9 / 100 + u[()] / 10**4
    assert plan.cell_variances[0] == pytest.approx(v, rel=1e-12)


def test_apply_axes_batched_equals_apply_axes_member_by_member():
    from matmech.linalg.residual import apply_axes, apply_axes_batched, contrast_operators

    rng = np.random.default_rng(4)
    sizes = (3, 5, 2)
    stack = rng.normal(size=(7, *sizes))
    mats = [contrast_operators(n)[0] for n in sizes[:2]] + [
        rng.normal(size=(4, 2))
    ]  # sparse and dense
    got = apply_axes_batched(stack, mats)
    assert got.shape == (7, 2, 4, 4)
    for b in range(7):
        np.testing.assert_allclose(got[b], apply_axes(stack[b], mats), rtol=1e-13, atol=1e-13)
    last = np.stack(list(stack), axis=-1)  # the same stack, batch on the last axis
    np.testing.assert_array_equal(apply_axes_batched(last, mats, batch_last=True), got)
    np.testing.assert_array_equal(
        apply_axes_batched(np.arange(3.0), []), np.arange(3.0)
    )  # a stack of scalars
    with pytest.raises(ValueError, match="expected 2 matrices"):
        apply_axes_batched(stack[:, :, :, 0], mats)


def test_apply_axes_batched_adds_in_place_and_converts_integers_bit_for_bit():
    from matmech.linalg.residual import apply_axes_batched, contrast_operators

    rng = np.random.default_rng(8)
    sizes = (5, 4, 3)
    ints = rng.integers(-50, 50, size=(6, *sizes))
    mats = [contrast_operators(n)[0] for n in sizes]
    ref = apply_axes_batched(ints.astype(np.float64), mats)
    np.testing.assert_array_equal(apply_axes_batched(ints, mats), ref)  # int64: one copy
    base = rng.normal(size=ref.shape)
    acc = base.copy()
    got = apply_axes_batched(ints, mats, add_to=acc)
    assert got is acc
    np.testing.assert_array_equal(acc, base + ref)
    acc0 = base[:, 0, 0, 0].copy()  # no matrices: a stack of scalars added
    apply_axes_batched(ints[:, 0, 0, 0], [], add_to=acc0)
    np.testing.assert_array_equal(acc0, base[:, 0, 0, 0] + ints[:, 0, 0, 0])


@pytest.mark.parametrize("sizes", [(100,), (5000,), (100, 50), (2, 9), (32, 9, 20), (17, 2, 33, 9)])
def test_lift_row_variances_is_apply_axes_bit_for_bit(monkeypatch, sizes):
    """Variances that depend on a row only through its norm class take the short lift (on
    the class grid) from 4,096 entries; any other array the full product: both bit for bit
    apply_axes, and equal to dense (Q∘Q)ᵀ products."""
    from matmech.linalg import residual
    from matmech.linalg.residual import (
        _norm_classes,
        apply_axes,
        contrast_operators,
        exact_cell_variances,
        lift_row_variances,
    )

    seen = []
    orig = residual._on_classes
    monkeypatch.setattr(residual, "_on_classes", lambda *a: seen.append(orig(*a)) or seen[-1])
    rng = np.random.default_rng(len(sizes))
    ops = [contrast_operators(n)[2] for n in sizes]
    inv = [_norm_classes(n)[0] for n in sizes]
    g = rng.uniform(0.5, 3.0, size=tuple(int(i.max()) + 1 for i in inv))
    v = g[np.ix_(*inv)]
    got = lift_row_variances(sizes, v)
    assert seen == ([True] if v.size >= 4096 else [])
    np.testing.assert_array_equal(got, apply_axes(v, ops))
    dense = v
    for ax, n in enumerate(sizes):  # second method: dense (Q∘Q)ᵀ on every axis
        Q2 = orthonormal_contrasts(n) ** 2
        dense = np.moveaxis(np.tensordot(Q2.T, dense, axes=([1], [ax])), 0, ax)
    np.testing.assert_allclose(got, dense, rtol=1e-12)
    other = v.copy()
    other.reshape(-1)[-1] *= 1.5  # breaks the class form: the full product
    np.testing.assert_array_equal(lift_row_variances(sizes, other), apply_axes(other, ops))
    assert seen[-1:] == ([False] if v.size >= 4096 else [])
    assert exact_cell_variances(sizes, tuple(range(len(sizes))), v).flags.c_contiguous
