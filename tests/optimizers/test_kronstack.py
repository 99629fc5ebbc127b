"""Unions of Kronecker products (HDMM's OPT₊): stacked factors expand without changing the
gram, the per-group figure bounds the exact least-squares error from above, the exact figure
equals the dense error, and the result is never worse than a given single Kronecker strategy."""

import math

import numpy as np
import pytest

from matmech import workloads as wl
from matmech.linalg.linop import Dense, Kron, Scaled, VStack
from matmech.optimizers import kronstack as KS
from matmech.optimizers.dispatch import optimize


def _dense_error(W, A):
    a, w = A.dense(), W.dense()
    sens = np.abs(a).sum(0).max()
    return sens**2 * float(np.trace(w @ np.linalg.pinv(a.T @ a) @ w.T))


def _cases():
    rng = np.random.default_rng(0)
    yield VStack(
        [
            Kron(wl.prefix(6), wl.total(4)),
            Kron(wl.total(6), wl.identity(4)),
            Kron(wl.prefix(6), wl.identity(4)),
        ],
        weights=[1.0, 2.0, 0.7],
    )
    yield Kron(
        wl.prefix(5), VStack([wl.identity(3), wl.total(3)]), VStack([wl.identity(2), wl.total(2)])
    )
    yield VStack(
        [
            Kron(Dense(rng.standard_normal((3, 5))), wl.total(3)),
            Kron(wl.all_range(5), wl.identity(3)),
        ]
    )
    # a scaled, nested stack (read by matmech.linalg.products like the flat stack it equals)
    yield Scaled(
        VStack(
            [
                Scaled(Kron(wl.prefix(5), wl.identity(3)), -2.0),
                VStack([Kron(wl.total(5), wl.all_range(3))], weights=[0.5]),
            ],
            weights=[0.3, 1.7],
        ),
        3.0,
    )


@pytest.mark.parametrize("W", list(_cases()))
def test_expansion_keeps_the_gram(W):
    terms = KS.expand_terms(W)
    G = sum(v2 * Kron(*fs).gram().dense() for v2, fs in terms)
    assert np.allclose(G, W.gram().dense())


@pytest.mark.parametrize("W", list(_cases()))
def test_bound_is_above_the_exact_error_which_is_the_dense_one(W):
    fit = KS.optimize_kron_stack(W)
    assert fit.exact  # small domains are scored exactly
    assert fit.value == pytest.approx(_dense_error(W, fit.strategy), rel=1e-8)
    assert fit.value <= fit.bound * (1 + 1e-9)
    assert sum(fit.weights) == pytest.approx(1.0)
    assert fit.strategy.sensitivity(1) == pytest.approx(1.0)


@pytest.mark.parametrize("W", list(_cases()))
def test_never_worse_than_the_best_single_kron(W):
    kron = optimize(W, eps=math.sqrt(2.0), method="kron", bound=False)
    fit = KS.optimize_kron_stack(W, single=(kron.strategy, kron.error))
    assert fit.value <= kron.error * (1 + 1e-12)
    union = optimize(W, eps=math.sqrt(2.0), method="kronstack", bound=False)
    assert union.error == pytest.approx(_dense_error(W, union.strategy), rel=1e-8)
    assert union.params["error_kind"] == "exact"


def test_large_domain_reports_the_upper_bound():
    W = VStack(
        [
            Kron(wl.prefix(60), wl.total(60), wl.identity(60)),
            Kron(wl.total(60), wl.prefix(60), wl.total(60)),
        ]
    )
    fit = KS.optimize_kron_stack(W)
    assert not fit.exact and fit.value == fit.bound and fit.terms == 2
    res = optimize(W, eps=1.0, method="kronstack", bound=False)
    assert res.params["error_kind"].startswith("upper bound")
    # the union's groups are answered exactly by their own terms: the bound is Σ c/w² at w ∝ c^(1/3)
    assert res.error == pytest.approx(2.0 * fit.bound)
