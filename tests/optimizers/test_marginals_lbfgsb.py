"""The marginal-lattice optimisers drive scipy's compiled L-BFGS-B step directly
(:func:`matmech.optimizers.lbfgs.lbfgsb_nonneg`): the iterates and the result must be those of
``scipy.optimize.minimize(method="L-BFGS-B", bounds=Bounds(0, inf))`` bit for bit, including
the stops at ``maxiter`` and at an infeasible (+inf) point."""

import math

import numpy as np
import pytest
from scipy.optimize import Bounds, minimize

from matmech.optimizers import marginal_lattice as M
from matmech.optimizers.lbfgs import _setulb, lbfgsb_nonneg


def _scipy(fun, x0, maxiter, ftol, gtol):
    res = minimize(
        fun,
        x0,
        jac=True,
        method="L-BFGS-B",
        bounds=Bounds(0.0, np.inf),
        options={"maxiter": maxiter, "ftol": ftol, "gtol": gtol},
    )
    return res.x, res.fun


def test_the_installed_scipy_step_is_driven_directly():
    assert _setulb() is not None  # otherwise lbfgsb_nonneg silently falls back to minimize


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("maxiter", [3, 2000])
def test_lattice_objective_runs_are_bitwise_scipys(seed, maxiter):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 8))
    domain = tuple(int(d) for d in rng.integers(2, 6, k))
    out_prod, mult = M.lattice_masks(domain)
    mu = rng.random(1 << k) * (rng.random(1 << k) < 0.6)
    mu[-1] = 1.0
    obj = M.LatticeObjective(mu, mult, out_prod, k)
    x0 = rng.random(1 << k) * (rng.random(1 << k) < 0.8)
    x0[-1] = 1.0
    calls = []

    def fun(x):
        calls.append(x.copy())
        return obj(x)

    x, f = lbfgsb_nonneg(fun, x0, maxiter=maxiter, ftol=1e-14, gtol=1e-12)
    ours = list(calls)
    calls.clear()
    rx, rf = _scipy(fun, x0, maxiter, 1e-14, 1e-12)
    assert f == rf
    np.testing.assert_array_equal(x, rx)
    assert len(ours) == len(calls)  # the same evaluations, at the same points
    for a, b in zip(ours, calls):
        np.testing.assert_array_equal(a, b)
    assert np.all(x >= 0)


def test_infeasible_points_and_a_quadratic_with_active_bounds():
    rng = np.random.default_rng(5)
    n = 30
    a = rng.standard_normal((n, n))
    h = a.T @ a / n + 0.05 * np.eye(n)
    b = rng.standard_normal(n)

    def quad(x):
        hx = h @ x
        return float(0.5 * x @ hx - b @ x), hx - b

    x, f = lbfgsb_nonneg(quad, np.ones(n), maxiter=500, ftol=1e-15, gtol=1e-12)
    rx, rf = _scipy(quad, np.ones(n), 500, 1e-15, 1e-12)
    assert f == rf
    np.testing.assert_array_equal(x, rx)
    assert np.any(x == 0)
    # KKT: zero gradient on the free variables, non-negative on the bound ones
    g = h @ x - b
    assert np.abs(g[x > 0]).max() < 1e-6 and g[x == 0].min() > -1e-6

    def wall(x):  # +inf beyond a wall, as the lattice objective when a needed class has λ = 0
        f0, g0 = quad(x)
        return (math.inf, np.zeros_like(x)) if x.sum() > 3.0 else (f0, g0)

    x, f = lbfgsb_nonneg(wall, np.full(n, 0.05), maxiter=200, ftol=1e-12, gtol=1e-10)
    rx, rf = _scipy(wall, np.full(n, 0.05), 200, 1e-12, 1e-10)
    assert f == rf
    np.testing.assert_array_equal(x, rx)


def test_falls_back_to_minimize_on_another_step_signature(monkeypatch):
    from matmech.optimizers import lbfgs

    rng = np.random.default_rng(11)
    k, domain = 4, (3, 2, 4, 2)
    out_prod, mult = M.lattice_masks(domain)
    obj = M.LatticeObjective(rng.random(1 << k), mult, out_prod, k)
    x0 = rng.random(1 << k)
    direct = lbfgsb_nonneg(obj, x0, maxiter=300, ftol=1e-14, gtol=1e-12)
    monkeypatch.setattr(lbfgs, "_setulb", lambda: None)
    fallback = lbfgsb_nonneg(obj, x0, maxiter=300, ftol=1e-14, gtol=1e-12)
    assert fallback[1] == direct[1]
    np.testing.assert_array_equal(fallback[0], direct[0])
