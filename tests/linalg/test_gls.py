"""The measured-space GLS (matmech.linalg.gls): exact rank from integer structure, and the
combination of answers with free gaps exact for duplicate and dependent rows (issue 22)."""

import numpy as np
import pytest

from matmech.linalg.gls import (
    RANK_RTOL,
    exact_rank,
    gls,
    integer_gram,
    precision_on,
    row_space_basis,
)
from matmech.svt.combine import GapMeasurement, combine_gaps


def test_exact_rank_equals_the_rank_over_the_rationals():
    rng = np.random.default_rng(0)
    for _ in range(300):
        k, n, r = rng.integers(1, 9), rng.integers(1, 9), rng.integers(1, 5)
        A = rng.integers(-3, 4, size=(k, r)) @ rng.integers(-3, 4, size=(r, n))
        assert exact_rank(A) == np.linalg.matrix_rank(A)
        assert exact_rank(integer_gram(A)) == np.linalg.matrix_rank(A)
        B = (A != 0) * 0.3  # rows a constant times 0/1: integer after scaling
        assert exact_rank(integer_gram(B)) == np.linalg.matrix_rank(B)
    assert integer_gram(np.array([[0.3, 0.2]])) is None


def test_the_rank_does_not_follow_rounding():
    """A duplicated row: the Gram perturbed at rounding level (what another BLAS kernel would
    compute) keeps the exact rank; the float path's tolerance is far above rounding too."""
    R = np.array(
        [[1.0, 1, 0, 1], [0, 1, 1, 1], [1, 1, 0, 1], [1, 2, 1, 2]]
    )  # row 2 = row 0, row 3 = 0 + 1
    G = R @ R.T
    rng = np.random.default_rng(1)
    for _ in range(50):
        E = rng.standard_normal(G.shape) * 1e-14 * np.abs(G).max()
        Gp = G + (E + E.T) / 2
        assert row_space_basis(Gp, exact=integer_gram(R)).shape == (4, 2)
        assert row_space_basis(Gp).shape == (4, 2)
    assert RANK_RTOL >= 1e-10


def _dense_gls(Wd, A, sigma2, y_meas, S, z, D, s):
    """Independent oracle in the cell space: stack the measurement y = A x + e (Cov σ²I) and
    the gap z = W_S[order] x + f (Cov D + s11ᵀ, s finite) and take the GLS of W_S x with pinv."""
    k = Wd.shape[0]
    Cz = np.diag(D) + s * np.ones((len(z), len(z)))
    M = np.vstack([A, S @ Wd])
    C = np.block(
        [
            [sigma2 * np.eye(A.shape[0]), np.zeros((A.shape[0], len(z)))],
            [np.zeros((len(z), A.shape[0])), Cz],
        ]
    )
    Ci = np.linalg.inv(C)
    F = np.linalg.pinv(M.T @ Ci @ M)
    xhat = F @ M.T @ Ci @ np.concatenate([y_meas, z])
    return Wd @ xhat, Wd @ F @ Wd.T, k


@pytest.mark.parametrize("common", [0.0, 2.5])
def test_combine_gaps_with_duplicate_and_dependent_rows_equals_the_dense_gls(common):
    """Rows 0 and 2 the same query, row 3 their sum with row 1: the answers' covariance is
    singular; the combination equals the dense GLS over the cells, nothing dropped."""
    rng = np.random.default_rng(2)
    Wd = np.array([[1.0, 1, 0, 0, 1], [0, 1, 1, 0, 0], [1, 1, 0, 0, 1], [1, 2, 1, 0, 1]])
    A = Wd.copy()  # the rows measure themselves (the factored path's strategy)
    sigma2 = 4.0
    x = rng.integers(0, 50, 5).astype(float)
    y = A @ x + rng.normal(0, 2.0, A.shape[0])
    P = Wd @ np.linalg.pinv(A)
    answers, cov = P @ y, sigma2 * P @ P.T
    order = np.array([2, 0, 3])
    D = np.array([1.0, 2.0, 3.0])
    z = Wd[order] @ x + rng.normal(0, 1.0, 3)
    gm = GapMeasurement(order, z, D, common)
    S = np.zeros((3, 4))
    S[np.arange(3), order] = 1.0
    want, wcov, _ = _dense_gls(Wd, A, sigma2, y, S, z, D, common)
    for basis in (None, row_space_basis(Wd @ Wd.T, exact=integer_gram(Wd))):
        est, c = combine_gaps(answers, cov, gm, order=order, basis=basis)
        np.testing.assert_allclose(est, want, rtol=1e-9)
        np.testing.assert_allclose(c, wcov, rtol=1e-8, atol=1e-10 * np.abs(wcov).max())
    assert est[0] == pytest.approx(est[2], rel=1e-12)


def test_gls_refuses_records_that_do_not_determine_the_answers():
    B = np.eye(2)
    with pytest.raises(ValueError, match="do not determine"):
        gls([(np.array([[1.0, 0.0]]), np.array([1.0]), np.eye(1))], B)
    with pytest.raises(ValueError, match="do not determine"):
        precision_on(np.diag([1.0, 0.0]), B)
