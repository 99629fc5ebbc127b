"""Analytic error: closed forms, the slides' numbers, dense second method, bad input."""

import itertools

import numpy as np
import pytest

from matmech import strategies as S
from matmech import workloads as W
from matmech.privacy.calibration import gaussian_sigma
import functools

from matmech import error as E
from matmech.error import lower_bound, sensitivity

# The closed forms and the dense second method below are those of continuous noise (2Δ₁²/ε², σ²):
# this file checks the linear algebra; the discrete default (the noise a release draws) is
# checked against Release.expected_error in tests/test_intervals.py.
expected_error = functools.partial(E.expected_error, noise="continuous")
per_query_variance = functools.partial(E.per_query_variance, noise="continuous")


def dense_error(w, a, eps=1.0):
    """Second method: (2/ε²)·Δ₁²·w (AᵀA)⁺ wᵀ with numpy's pseudo-inverse."""
    wd, ad = w.dense(), a.dense()
    m = np.linalg.pinv(ad.T @ ad)
    unit = 2 * (np.abs(ad).sum(0).max() / eps) ** 2
    return unit * np.einsum("ij,jk,ik->i", wd, m, wd)


WORKLOADS_1D = {
    "all_range": W.all_range,
    "prefix": W.prefix,
    "identity": W.identity,
    "total": W.total,
    "two": lambda n: W.ranges(n, [(0, n - 1), (n // 2, n - 1)]),
}
STRATEGIES_1D = {
    "identity": S.identity,
    "h2": lambda n: S.hierarchical(n, 2),
    "h3_noroot": lambda n: S.hierarchical(n, 3, root=False),
    "h4": lambda n: S.hierarchical(n, 4),
    "haar": S.haar,
}


@pytest.mark.parametrize("n", [1, 2, 3, 4, 6, 9, 16, 20, 27, 32])
def test_structured_paths_match_dense(n):
    for (wn, wf), (sn, sf) in itertools.product(WORKLOADS_1D.items(), STRATEGIES_1D.items()):
        w, a = wf(n), sf(n)
        v = dense_error(w, a, eps=0.7)
        assert expected_error(w, a, eps=0.7) == pytest.approx(v.sum(), rel=1e-9), (wn, sn)
        np.testing.assert_allclose(
            per_query_variance(w, a, eps=0.7), v, rtol=1e-8, err_msg=f"{wn} {sn}"
        )
        assert expected_error(w, a, eps=0.7, measure="max") == pytest.approx(v.max(), rel=1e-9)
        assert expected_error(w, a, eps=0.7, measure="rmse") == pytest.approx(
            np.sqrt(v.mean()), rel=1e-9
        )


def test_kron_marginal_and_workload_strategies_match_dense():
    cases = [
        (W.kron(W.all_range(4), W.prefix(6)), S.kron(S.hierarchical(4, 2), S.haar(6))),
        (W.kron(W.all_range(4), W.prefix(6)), S.identity(24)),
        (W.marginals((3, 4, 2), 2), S.identity(24)),
        (W.marginals((3, 4, 2), 2), S.kron(S.identity(3), S.hierarchical(4, 2), S.identity(2))),
        (W.marginals((3, 4, 2), 1), W.marginals((3, 4, 2), 3)),
        (W.stack(W.prefix(8), W.total(8), weights=[1, 3]), S.haar(8)),
        (W.all_range(8), W.all_range(8)),
        (W.prefix(5), W.from_matrix(np.random.default_rng(0).normal(size=(7, 5)))),
    ]
    for w, a in cases:
        v = dense_error(w, a)
        assert expected_error(w, a) == pytest.approx(v.sum(), rel=1e-9)
        np.testing.assert_allclose(per_query_variance(w, a), v, rtol=1e-8)
        assert expected_error(w, a, measure="max") == pytest.approx(v.max(), rel=1e-9)


def test_slides_numbers():
    """Extreme strategies (slides): A = I gives (2/ε²)·trace(WᵀW); A = W gives (2/ε²)·Δ_W²·n."""
    rng = np.random.default_rng(4)
    for eps in (0.5, 1.0, 2.0):
        w = W.from_matrix(rng.integers(0, 2, size=(6, 5)) + np.eye(6, 5))
        wd = w.dense()
        assert expected_error(w, S.identity(5), eps) == pytest.approx(
            2 / eps**2 * np.trace(wd.T @ wd)
        )
        assert expected_error(w, w, eps) == pytest.approx(
            2 / eps**2 * np.abs(wd).sum(0).max() ** 2 * 5
        )
    assert (
        sensitivity(S.hierarchical(4, 2)) == 3
        and sensitivity(S.haar(4)) == 3
        and sensitivity(S.identity(4)) == 1
    )
    assert (
        sensitivity(S.identity(4), neighbors="substitute") == 2
    )  # the slides' histogram sensitivity 2


@pytest.mark.parametrize("n", [1, 7, 64, 1000])
@pytest.mark.parametrize("eps", [0.1, 1.0])
def test_identity_closed_forms(n, eps):
    assert expected_error(W.all_range(n), S.identity(n), eps) == pytest.approx(
        2 / eps**2 * n * (n + 1) * (n + 2) / 6
    )
    assert expected_error(W.prefix(n), S.identity(n), eps) == pytest.approx(
        2 / eps**2 * n * (n + 1) / 2
    )


def test_reference_rmse_all_ranges():
    """Per-query RMSE at ε = 1, pure ε, add/remove (issue #2 reference numbers)."""
    w = W.all_range(256)
    assert expected_error(w, S.identity(256), measure="rmse") == pytest.approx(13.11, abs=0.005)
    assert expected_error(w, S.haar(256), measure="rmse") == pytest.approx(14.87, abs=0.005)
    assert expected_error(w, S.hierarchical(256, 16, root=False), measure="rmse") == pytest.approx(
        8.90, abs=0.005
    )
    assert lower_bound(W.all_range(1024), measure="rmse") == pytest.approx(4.94, abs=0.005)


def test_gaussian_uses_l2_sensitivity_and_calibration():
    w, a = W.all_range(16), S.hierarchical(16, 2)
    eps, delta = 1.0, 1e-6
    sigma = gaussian_sigma(eps, delta, sensitivity(a, p=2))
    base = expected_error(w, a, eps) / (2 * sensitivity(a, p=1) ** 2 / eps**2)
    assert expected_error(w, a, eps, delta) == pytest.approx(sigma**2 * base)
    assert sensitivity(a, p=2) == pytest.approx(np.sqrt(5))


def test_lower_bound_below_every_strategy():
    for w in [
        W.all_range(32),
        W.prefix(32),
        W.kron(W.prefix(4), W.all_range(8)),
        W.marginals((3, 3, 4), 2),
    ]:
        n = w.shape[1]
        lb = lower_bound(w)
        for a in [S.identity(n), w]:
            assert lb <= expected_error(w, a) * (1 + 1e-9)
        wd = w.dense()
        sv = np.linalg.svd(wd, compute_uv=False)
        assert lb == pytest.approx(2 * sv.sum() ** 2 / n, rel=1e-8)
        assert lower_bound(w, measure="max") == pytest.approx(lb / w.shape[0])
    # L2: the bound is attained by no strategy but is below the Gaussian error of every one
    w = W.all_range(16)
    assert lower_bound(w, 1.0, 1e-5) <= expected_error(w, S.hierarchical(16, 2), 1.0, 1e-5)


def test_marginal_lower_bound_is_structured():
    w = W.marginals((10, 10, 10, 10, 10), 3)  # 10⁵ cells: never a dense gram
    lb = lower_bound(w, measure="rmse")
    assert 0 < lb < expected_error(w, S.identity(10**5), measure="rmse")


def test_rows_outside_row_space_raise():
    a = S.hierarchical(8, 2, root=True)
    # drop the leaves: only block sums remain
    blocks = W.from_matrix(a.dense()[:7])
    with pytest.raises(ValueError, match="not in the strategy's row space"):
        expected_error(W.identity(8), blocks)
    assert expected_error(W.total(8), blocks) > 0
    with pytest.raises(ValueError, match="row space"):
        expected_error(W.kron(W.identity(2), W.prefix(8)), S.kron(S.identity(2), blocks))
    assert np.isfinite(
        expected_error(W.kron(W.identity(2), W.total(8)), S.kron(S.identity(2), blocks))
    )


@pytest.mark.parametrize(
    "kwargs, exc, text",
    [
        (dict(eps=0), ValueError, "eps must be a positive finite number, got 0"),
        (dict(eps=-1), ValueError, "got -1"),
        (dict(eps=np.nan), ValueError, "nan"),
        (dict(eps=np.inf), ValueError, "inf"),
        (dict(delta=1.0), ValueError, r"delta must be in \[0, 1\), got 1.0"),
        (dict(delta=-0.1), ValueError, "-0.1"),
        (dict(measure="mean"), ValueError, "measure must be one of"),
        (dict(neighbors="swap"), ValueError, "neighbors must be one of"),
        (dict(eps="x"), TypeError, "real number"),
    ],
)
def test_bad_parameters(kwargs, exc, text):
    with pytest.raises(exc, match=text):
        expected_error(W.prefix(4), S.identity(4), **kwargs)


def test_shape_mismatch_and_too_many_rows():
    with pytest.raises(ValueError, match="4 columns.*5"):
        expected_error(W.prefix(4), S.identity(5))
    with pytest.raises(ValueError, match="measure='max'"):
        per_query_variance(W.all_range(20000), S.identity(20000))
    assert expected_error(W.all_range(20000), S.identity(20000)) > 0


@pytest.mark.parametrize(
    "w",
    [
        W.prefix(7),
        W.all_range(6),
        W.ranges(6, [(0, 2), (3, 5), (0, 5)]),
        W.ranges(5, [(0, 0), (0, 4), (1, 4), (1, 2), (3, 4)]),
    ],
)
def test_workload_as_its_own_strategy(w):
    """A = W: total = unit·rank(W) (the slides' (2/ε²)Δ_W²·n when W is invertible), from the interval graph."""
    wd = w.dense()
    assert w.rank() == np.linalg.matrix_rank(wd)
    v = dense_error(w, w)
    assert expected_error(w, w) == pytest.approx(v.sum())
    assert expected_error(w, w, measure="max") == pytest.approx(v.max())
