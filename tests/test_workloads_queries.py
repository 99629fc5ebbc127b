"""Circular ranges, affine and absolute-difference thresholds (issue 24) against explicit
enumeration, usable as factors of unions planned under (ε, δ)."""

import itertools

import numpy as np
import pytest

from matmech import workloads as wl
from matmech.linalg.linop import Kron, VStack
from matmech.optimizers import unions as U
from matmech.validate import SizeError


@pytest.mark.parametrize("n", [1, 2, 5, 7])
def test_circular_ranges_enumerated(n):
    rows = []
    for s in range(n):
        for length in range(1, n):
            r = np.zeros(n)
            r[[(s + t) % n for t in range(length)]] = 1
            rows.append(r)
    rows.append(np.ones(n))
    np.testing.assert_array_equal(wl.circular_ranges(n).dense(), np.array(rows))


@pytest.mark.parametrize("n1,n2,a,b", [(3, 4, 1, 1), (4, 2, 2, 1), (1, 3, 1, 1), (3, 3, 1, -1)])
def test_affine_thresholds_enumerated(n1, n2, a, b):
    score = np.array([[a * i + b * j for j in range(n2)] for i in range(n1)], dtype=float).ravel()
    expect = np.array([(score <= c).astype(float) for c in np.unique(score)])
    np.testing.assert_array_equal(wl.affine(n1, n2, a=a, b=b).dense(), expect)


@pytest.mark.parametrize("n1,n2", [(3, 3), (4, 2), (2, 5)])
def test_abs_diff_thresholds_enumerated(n1, n2):
    score = np.array([[abs(i - j) for j in range(n2)] for i in range(n1)]).ravel()
    expect = np.array(
        [(score <= c).astype(float) for c in range(max(n1, n2)) if c in set(score.tolist())]
    )
    np.testing.assert_array_equal(wl.abs_diff(n1, n2).dense(), expect)


def test_builders_refuse_bad_input():
    with pytest.raises(ValueError, match="a must be a finite number, got nan"):
        wl.affine(3, 3, a=float("nan"))
    with pytest.raises(ValueError):
        wl.circular_ranges(0)
    with pytest.raises(SizeError, match="nonzero"):
        wl.circular_ranges(400)
    with pytest.raises(SizeError, match="MAX_PAIR_CELLS"):
        wl.affine(33554430, 4)
    with pytest.raises(SizeError, match="MAX_PAIR_CELLS"):
        wl.abs_diff(4, 33554430)
    with pytest.raises(SizeError, match="nonzero"):
        wl.affine(2000, 2000)


def test_stack_counts_rows_by_sum():
    big = wl.kron(wl.prefix(100), wl.prefix(100), wl.identity(50))
    assert wl.stack(big, big, big).shape == (3 * 500_000, 500_000)


def _dense_l2(W, A):
    # the affine pair's gram has rank 5 of 9 cells, so the residual plan is rank-deficient and
    # its smallest kept eigenvalues are ~1e-8 of the largest: agreement to ~1e-6, not 1e-12
    a, w = A.dense(), W.dense()
    pinv = np.linalg.pinv(a.T @ a, hermitian=True)
    assert np.allclose(w @ pinv @ (a.T @ a), w, atol=1e-6)
    return float((a * a).sum(0).max()) * float(np.trace(w @ pinv @ w.T))


def test_new_queries_in_a_union_planned_under_l2_match_the_dense_error():
    # attribute 0: a merged pair (3 × 3) with affine thresholds, attribute 1: circular ranges
    factors = [wl.affine(3, 3), wl.circular_ranges(5)]
    totals = [wl.total(9), wl.total(5)]
    blocks = [
        Kron(*[factors[i] if i in T else totals[i] for i in range(2)])
        for k in (1, 2)
        for T in itertools.combinations(range(2), k)
    ]
    W = VStack(blocks + [Kron(wl.abs_diff(3, 3), wl.total(5))])
    for fit in (U.plan_residual_products(W), U.refine_general_l2(W, maxiter=40)):
        assert fit.value == pytest.approx(_dense_l2(W, fit.strategy), rel=1e-5)
