"""Issue 24 item 6: the (ε, δ) plans of the unions family through the factored release.

The GeneralMarginalStrategy of :func:`matmech.optimizers.unions.refine_general_l2` is released
on the Kronecker path and on the generalised-marginal path (forced by a small ``max_cells``);
a :class:`~matmech.optimizers.unions.ResidualProductStrategy` on the Kronecker path, and
refused before any spend or draw where only a factored path would do. Answers and every
per-answer variance equal an independent dense generalised least squares of the release's own
measurement records."""

import itertools

import numpy as np
import pytest

from matmech import workloads as Wl
from matmech.plans.factored import plan_path
from matmech.release import release_factored
from matmech.linalg.linop import Kron, VStack
from matmech.optimizers.general_marginal_error import GeneralMarginalStrategy
from matmech.optimizers.unions import (
    ResidualProductStrategy,
    plan_residual_products,
    refine_general_l2,
)
from matmech.privacy.budget import PrivacyBudget

from factored_data import DOM
from factored_data import codes as _codes
from factored_data import hist as _hist

# DOM = (3, 4, 2, 5); prefixes on attributes 0 and 3, identities elsewhere, every 2-way product


def _workload():
    def fac(i, on):
        if not on:
            return Wl.total(DOM[i])
        return Wl.prefix(DOM[i]) if i in (0, 3) else Wl.identity(DOM[i])

    return VStack(
        [
            Kron(*[fac(i, i in S) for i in range(len(DOM))])
            for S in itertools.combinations(range(len(DOM)), 2)
        ]
    )


def _dense_gls(rel, W):
    """(answers, variances) of W from the dense GLS of the release's records over all cells."""
    M = np.vstack([r.on_cells().dense() for r in rel.measurements])
    v = np.concatenate([np.broadcast_to(r.variance, r.values.shape) for r in rel.measurements])
    y = np.concatenate([r.values for r in rel.measurements])
    P = np.linalg.pinv(M.T @ (M / v[:, None]))
    Wd = W.dense()
    return Wd @ P @ (M.T @ (y / v)), np.einsum("ij,jk,ik->i", Wd, P, Wd)


@pytest.fixture(scope="module")
def plans():
    W = _workload()
    return W, {
        "residual products": plan_residual_products(W).strategy,
        "residual products, max": plan_residual_products(W, objective="max").strategy,
        "general marginals": refine_general_l2(W, maxiter=40).strategy,
    }


@pytest.mark.parametrize(
    "name, max_cells, path",
    [
        ("residual products", 1 << 22, "kron"),
        ("residual products, max", 1 << 22, "kron"),
        ("general marginals", 1 << 22, "kron"),
        ("general marginals", 10, "gmarginal"),
    ],
)
def test_release_equals_dense_gls_of_its_records(plans, name, max_cells, path):
    W, strategies = plans
    A = strategies[name]
    assert plan_path(W, 1.0, 1e-6, strategy=A, max_cells=max_cells)[0] == path
    codes = _codes(DOM, 400, seed=3)
    rel = release_factored(
        codes, W, 1.0, 1e-6, strategy=A, max_cells=max_cells, rng=np.random.default_rng(5)
    )
    want, want_var = _dense_gls(rel, W)
    assert rel.answers.shape == (W.shape[0],)
    np.testing.assert_allclose(rel.answers, want, rtol=1e-9, atol=1e-8)
    np.testing.assert_allclose(rel.std**2, want_var, rtol=1e-9)
    # unbiased: the noise-free answers are W x (the measurement's noise averages out)
    assert np.all(np.isfinite(rel.std)) and np.all(rel.std > 0)
    assert np.abs(rel.answers - W.dense() @ _hist(codes, DOM)).max() < 8 * rel.std.max()


def test_residual_products_beyond_the_kron_path_are_refused_before_any_spend(plans):
    W, strategies = plans
    A = strategies["residual products"]
    assert isinstance(A, ResidualProductStrategy) and not isinstance(A, GeneralMarginalStrategy)
    budget = PrivacyBudget(1.0, 1e-6)

    with pytest.raises(
        ValueError, match="ResidualProductStrategy.*not implemented.*nothing was spent"
    ):
        release_factored(
            _codes(DOM, 50),
            W,
            1.0,
            1e-6,
            strategy=A,
            max_cells=10,
            budget=budget,
            rng=np.random.default_rng(0),
        )
    assert budget.remaining == (1.0, 1e-6)
