"""Equitable partitions shrink the max-variance residual program without changing its optimum
(matmech.optimizers.symmetry); the plan's largest variance against a dense computation."""

import itertools
import math

import numpy as np
import pytest
import scipy.sparse as sp

from matmech.linalg.residual import (
    cell_variance_coefficients,
    lattice,
    marginal_cell_variances,
    residual_operator,
    sensitivity2,
)
from matmech.optimizers import residual as R
from matmech.optimizers.symmetry import equitable_partition


def _upto(d, k):
    return [s for j in range(k + 1) for s in itertools.combinations(range(d), j)]


def _assert_equitable(B, part):
    """Every row of a row class has the same sum over each column class and vice versa."""
    rc, cc = part.row_class, part.col_class
    by_col = np.stack([B[:, cc == c].sum(1) for c in range(part.n_col_classes)], axis=1)
    by_row = np.stack([B[rc == r, :].sum(0) for r in range(part.n_row_classes)], axis=0)
    for r in range(part.n_row_classes):
        block = by_col[rc == r]
        np.testing.assert_allclose(block, np.broadcast_to(block[:1], block.shape))
    for c in range(part.n_col_classes):
        block = by_row[:, cc == c]
        np.testing.assert_allclose(block, np.broadcast_to(block[:, :1], block.shape))
    r, c, v = part.blocks
    dense = np.zeros((part.n_row_classes, part.n_col_classes))
    dense[r, c] = v
    first = [int(np.flatnonzero(rc == k)[0]) for k in range(part.n_row_classes)]
    np.testing.assert_allclose(dense, by_col[first], rtol=1e-12)


def _lattice_matrix(domain, subsets):
    lat = lattice(domain, subsets)
    rows, cols, vals = cell_variance_coefficients(lat)
    b = lat.weights[rows] * vals
    return lat, rows, cols, b


@pytest.mark.parametrize(
    "domain, order", [((3, 3, 3, 3), 2), ((2, 3, 3, 4), 2), ((4,) * 6, 3), ((2, 5, 2, 5), 3)]
)
def test_partition_of_a_marginal_lattice_is_equitable(domain, order):
    lat, rows, cols, b = _lattice_matrix(domain, _upto(len(domain), order))
    shape = (len(lat.subsets), len(lat.residuals))
    part = equitable_partition(rows, cols, b, shape, col_labels=lat.norm2)
    assert part is not None
    B = sp.csr_matrix((b, (rows, cols)), shape=shape).toarray()
    _assert_equitable(B, part)
    # q is constant on the column classes
    for c in range(part.n_col_classes):
        assert np.ptp(lat.norm2[part.col_class == c]) <= 1e-12 * lat.norm2.max()
    if len(set(domain)) == 1:  # uniform: one class per order on both sides
        assert part.n_row_classes == part.n_col_classes == order + 1


def test_random_matrix_partition_is_equitable_and_bad_input_is_refused():
    rng = np.random.default_rng(3)
    B = rng.uniform(0, 1, (7, 5)) * (rng.uniform(0, 1, (7, 5)) < 0.6)
    B = np.vstack([B, B[:2]])  # two repeated rows: they may share a class
    r, c = np.nonzero(B)
    part = equitable_partition(r, c, B[r, c], B.shape)
    assert part is not None
    _assert_equitable(B, part)
    assert part.row_class[7] == part.row_class[0] and part.row_class[8] == part.row_class[1]
    with pytest.raises(ValueError, match="non-negative"):
        equitable_partition([0], [0], [-1.0], (1, 1))
    with pytest.raises(ValueError, match="outside"):
        equitable_partition([0], [3], [1.0], (1, 1))


@pytest.mark.parametrize("domain, order", [((3, 3, 3, 3), 2), ((2, 3, 3, 4), 2), ((2, 5, 2), 3)])
def test_reduced_max_program_has_the_full_programs_optimum(domain, order):
    subsets = _upto(len(domain), order)
    plan = R.plan_residuals(domain, subsets, objective="max")
    assert "after symmetry" in plan.solver
    lat, rows, cols, b = _lattice_matrix(domain, subsets)
    B = sp.csr_matrix((b, (rows, cols)), shape=(len(lat.subsets), len(lat.residuals)))
    u0 = R.plan_residuals(domain, subsets).variances
    full, _ = R._solve_max(B, lat.norm2, u0, None)
    full = full * float(np.sum(lat.norm2 / full))
    assert plan.cell_variances.max() == pytest.approx(
        marginal_cell_variances(lat, full).max(), rel=1e-6
    )
    assert sensitivity2(lat, plan.variances) == pytest.approx(1.0, rel=1e-12)


def test_max_plan_largest_variance_equals_the_dense_covariance():
    domain, subsets = (3, 3, 2), _upto(3, 2)
    plan = R.plan_residuals(domain, subsets, objective="max")
    lat = plan.lattice
    A = np.vstack(
        [
            residual_operator(domain, T, integer=False).dense() / math.sqrt(u)
            for T, u in zip(lat.residuals, plan.variances)
        ]
    )
    assert float((A**2).sum(0).max()) == pytest.approx(1.0, rel=1e-10)  # unit L2 sensitivity
    cov = np.linalg.pinv(A.T @ A)
    worst = 0.0
    for S in subsets:
        M = np.ones((1, 1))
        for i, n in enumerate(domain):
            M = np.kron(M, np.eye(n) if i in S else np.ones((1, n)))
        worst = max(worst, float(np.diag(M @ cov @ M.T).max()))
    assert plan.cell_variances.max() == pytest.approx(worst, rel=1e-9)
    # and it beats the total-variance plan on its own objective
    assert worst < R.plan_residuals(domain, subsets).cell_variances.max()
