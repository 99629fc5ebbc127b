"""Stream factorizations: every closed form against a dense B·C computation, and the bounds."""

import math

import numpy as np
import pytest
import scipy.linalg as sla

from matmech.optimizers.l2 import dual_l2, tridiagonal_inverse
from matmech.stream.advise import advise_stream
from matmech.stream.blt import blt_coefs, blt_errors, blt_prefix_coefs, optimize_blt
from matmech.stream.bounds import (
    gamma2_bound,
    prefix_singular_values,
    svd_bound,
    tree_errors,
)
from matmech.stream.factorizations import StreamFactorization, build, square_root_coefs
from matmech.stream.series import prefix_coefs, series_inverse, toeplitz_dense
from matmech.workloads import prefix


def _dense_errors(C):
    n = C.shape[0]
    W = np.tril(np.ones((n, n)))
    B = W @ np.linalg.inv(C)
    np.testing.assert_allclose(B @ C, W, atol=1e-9)
    assert np.allclose(np.triu(B, 1), 0, atol=1e-9), "B must be lower-triangular (online)"
    var = (B**2).sum(axis=1)
    s2 = (C**2).sum(axis=0).max()
    return var, s2, np.abs(C).sum(axis=0).max()


@pytest.mark.parametrize(
    "name,opts",
    [
        ("sqrt", {}),
        ("banded", {"bands": 4}),
        ("banded", {}),
        ("identity", {}),
        ("prefix", {}),
        ("blt", {"max_buffers": 2}),
        ("dense", {}),
    ],
)
@pytest.mark.parametrize("objective", ["mean", "max"])
def test_variances_and_sensitivity_match_dense_B_C(name, opts, objective):
    n = 24
    f = build(name, n, objective=objective, **opts)
    var, s2, s1 = _dense_errors(f.dense())
    np.testing.assert_allclose(f.step_variances(), var, rtol=1e-10)
    assert f.sensitivity(2) ** 2 == pytest.approx(s2, rel=1e-12)
    assert f.sensitivity(1) == pytest.approx(s1, rel=1e-12)
    mean, mx = f.errors()
    assert mean == pytest.approx(s2 * var.mean(), rel=1e-10) and mx == pytest.approx(
        s2 * var.max(), rel=1e-10
    )
    for t in (0, 5, n - 1):  # the rows the release uses
        np.testing.assert_array_equal(f.c_row(t), f.dense()[t, : t + 1])
        np.testing.assert_allclose(
            f.b_row(t),
            (np.tril(np.ones((n, n))) @ np.linalg.inv(f.dense()))[t, : t + 1],
            atol=1e-10,
        )


def test_square_root_targets_of_the_issue():
    m, x = build("sqrt", 1024).errors()
    assert round(x, 3) == 10.710 and round(m, 3) == 9.671
    f = build("sqrt", 2**20)
    m, x = f.errors()
    assert round(x, 2) == 30.02 and round(m, 2) == 28.28
    # second method: the square root is its own B (both are (1 − x)^(−1/2)); Newton's inverse agrees
    np.testing.assert_allclose(prefix_coefs(f.c), f.c, rtol=1e-9, atol=1e-14)
    c = square_root_coefs(12)
    assert c[3] == pytest.approx(math.comb(6, 3) / 4**3)


def test_series_inverse_matches_triangular_solve():
    rng = np.random.default_rng(3)
    t = 0.7 ** np.arange(300) * rng.random(300)
    t[0] = 1.3
    e = np.zeros(300)
    e[0] = 1
    exact = sla.solve_triangular(toeplitz_dense(t), e, lower=True)
    np.testing.assert_allclose(series_inverse(t), exact, atol=1e-13)
    with pytest.raises(ValueError, match="non-zero diagonal"):
        series_inverse(np.array([0.0, 1.0]))


def test_blt_closed_forms():
    theta, omega = np.array([0.99, 0.8]), np.array([0.05, 0.3])
    n = 200
    k = np.arange(1, n)
    c = blt_coefs(theta, omega, n)
    np.testing.assert_allclose(
        c[1:], (omega[None, :] * theta[None, :] ** (k[:, None] - 1)).sum(1), rtol=1e-12
    )
    assert c[0] == 1.0
    np.testing.assert_allclose(
        blt_prefix_coefs(theta, omega, n), prefix_coefs(c), rtol=1e-9, atol=1e-13
    )
    f = StreamFactorization("blt", n, c=c)
    np.testing.assert_allclose(blt_errors(theta, omega, n), f.errors(), rtol=1e-9)
    # the O(d²) geometric sums against the coefficients, with decays near 1 at a long horizon
    theta, omega = np.array([1 - 2e-6, 0.999, 0.95, 0.5]), np.array([0.002, 0.03, 0.12, 0.3])
    n = 2**17
    f = StreamFactorization("blt", n, c=blt_coefs(theta, omega, n))
    np.testing.assert_allclose(blt_errors(theta, omega, n), f.errors(), rtol=1e-8)
    assert blt_errors(np.array([0.5]), np.array([-2.0]), 64) == (math.inf, math.inf)  # C⁻¹ diverges


def test_blt_optimiser_beats_the_square_root_on_the_mean():
    theta, omega, value = optimize_blt(256, objective="mean", max_buffers=3)
    assert np.all((theta > 0) & (theta < 1)) and np.all(omega > 0)
    assert value == pytest.approx(blt_errors(theta, omega, 256)[0], rel=1e-9)
    assert value < build("sqrt", 256).errors()[0]
    with pytest.raises(ValueError, match="objective"):
        optimize_blt(16, objective="median")


def test_dense_optimum_is_the_certified_l2_optimum_and_beats_all():
    n = 64
    f = build("dense", n)
    fit = dual_l2(prefix(n).gram().dense(), tol=1e-8, inverse=tridiagonal_inverse(prefix(n)))
    mean, _ = f.errors()
    assert mean == pytest.approx(fit.value / n, rel=1e-6)
    assert f.sensitivity(2) == pytest.approx(1.0, rel=1e-9)
    for name in ("sqrt", "banded", "blt", "identity", "prefix"):
        assert mean <= build(name, n).errors()[0] * (1 + 1e-9), name
    assert mean >= svd_bound(n) * (1 - 1e-9)


def test_bounds_hold_and_singular_values_are_right():
    n = 50
    np.testing.assert_allclose(
        np.sort(prefix_singular_values(n)),
        np.sort(np.linalg.svd(np.tril(np.ones((n, n))), compute_uv=False)),
        rtol=1e-10,
    )
    assert svd_bound(1024) == pytest.approx(8.466, abs=5e-4)  # the issue's figure
    n = 64
    g2 = gamma2_bound(n)
    assert g2 > svd_bound(n)  # the weighted trace norm improves on uniform weights
    for name in ("sqrt", "banded", "blt", "dense", "identity"):
        m, x = build(name, n, objective="max").errors()
        assert m >= svd_bound(n) * (1 - 1e-9) and x >= g2 * (1 - 1e-9), name


def test_tree_least_squares_matches_dense_blue():
    n = 8
    nodes = [(lo, lo + 2**h) for h in range(4) for lo in range(0, n, 2**h)]
    H = np.array([[1.0 if lo <= j < hi else 0.0 for j in range(n)] for lo, hi in nodes])
    var = []
    for t in range(1, n + 1):
        rows = H[[i for i, (lo, hi) in enumerate(nodes) if hi <= t]]
        s = np.r_[np.ones(t), np.zeros(n - t)]
        var.append(s @ np.linalg.pinv(rows.T @ rows) @ s)
    mean, mx, levels = tree_errors(n)
    assert levels == 4
    assert mean == pytest.approx(levels * np.mean(var), rel=1e-10) and mx == pytest.approx(
        levels * max(var), rel=1e-10
    )
    plain = tree_errors(n, least_squares=False)
    assert plain[1] == levels * 3  # t = 7 sums three nodes


def test_advisor_ranks_by_objective():
    adv = advise_stream(64, eps=1.0, delta=1e-6, objective="mean", dense=True)
    means = [c.mean for c in adv.choices]
    assert means == sorted(means) and adv.best.name == "dense"
    assert all(
        c.mean_unit >= adv.mean_bound * (1 - 1e-9) and c.max_unit >= adv.max_bound * (1 - 1e-9)
        for c in adv.choices
    )
    adv = advise_stream(64, eps=1.0, delta=1e-6, objective="max", dense=False)
    assert [c.max for c in adv.choices] == sorted(c.max for c in adv.choices)
    assert {c.name for c in adv.choices} >= {"sqrt", "blt", "tree+ls"}


@pytest.mark.parametrize(
    "call,err,match",
    [
        (lambda: build("sqrt", 0), ValueError, "horizon"),
        (lambda: build("sqrt", 1.5), TypeError, "horizon"),
        (lambda: build("nope", 8), ValueError, "unknown factorization"),
        (lambda: build("sqrt", 8, objective="median"), ValueError, "objective"),
        (lambda: build("dense", 5000), ValueError, "above 4096"),
        (lambda: build("banded", 8, bands=9), ValueError, "bands"),
        (lambda: advise_stream(8, objective="p99"), ValueError, "objective"),
    ],
)
def test_bad_input_is_named(call, err, match):
    with pytest.raises(err, match=match):
        call()
