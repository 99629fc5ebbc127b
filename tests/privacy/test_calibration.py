"""Tests for matmech.privacy.calibration: conversions checked against independent computations."""

import math

import numpy as np
import pytest
from scipy.stats import norm

from matmech.privacy.calibration import (
    analytic_gaussian_sigma,
    approx_dp_delta,
    gaussian_sigma,
    laplace_scale,
    noise_variance,
    zcdp_to_approx_dp,
)

RHO_EPS = [(0.5, 1.0), (0.01, 0.5), (2.0, 8.0), (1e-4, 0.05), (0.1, 3.0)]


def dense_alpha_grid():
    # 400k α values, denser near 1, up to 1e7: a brute-force second method
    return 1.0 + np.geomspace(1e-6, 1e7, 400_000)


def brute_delta(rho, eps):
    a = dense_alpha_grid()
    with np.errstate(over="ignore"):  # huge α overflow to inf, which the min ignores
        vals = np.exp((a - 1) * (a * rho - eps)) / (a - 1) * (1 - 1 / a) ** a
    return float(np.min(vals))


def brute_eps(rho, delta):
    a = dense_alpha_grid()
    vals = a * rho + (np.log(1 / delta) + (a - 1) * np.log(1 - 1 / a) - np.log(a)) / (a - 1)
    return float(np.min(vals))


@pytest.mark.parametrize("rho, eps", RHO_EPS)
def test_approx_dp_delta_matches_brute_force_minimisation(rho, eps):
    ours = approx_dp_delta(rho, eps)
    brute = brute_delta(rho, eps)
    assert ours <= brute * (1 + 1e-9)  # never worse than the grid
    assert ours == pytest.approx(brute, rel=1e-6)


@pytest.mark.parametrize("rho, delta", [(0.5, 1e-6), (0.01, 1e-5), (2.0, 1e-9), (1e-4, 1e-3)])
def test_zcdp_to_approx_dp_matches_brute_force_and_round_trips(rho, delta):
    eps = zcdp_to_approx_dp(rho, delta)
    assert eps == pytest.approx(brute_eps(rho, delta), rel=1e-7)
    # tighter than the textbook ρ + 2 sqrt(ρ ln(1/δ)), and consistent with approx_dp_delta
    assert eps < rho + 2 * math.sqrt(rho * math.log(1 / delta))
    assert approx_dp_delta(rho, eps) == pytest.approx(delta, rel=1e-6)


def test_zero_rho_is_free():
    assert approx_dp_delta(0.0, 1.0) == 0.0
    assert zcdp_to_approx_dp(0.0, 1e-6) == 0.0


@pytest.mark.parametrize(
    "eps, delta", [(1.0, 1e-6), (0.1, 1e-6), (1.0, 1e-10), (5.0, 1e-5), (0.01, 1e-3)]
)
def test_gaussian_sigma_is_minimal_and_valid(eps, delta):
    sigma = gaussian_sigma(eps, delta, 1.0)
    rho = 1.0 / (2 * sigma**2)
    assert approx_dp_delta(rho, eps) <= delta  # meets the target
    smaller = sigma * (1 - 1e-6)
    assert approx_dp_delta(1.0 / (2 * smaller**2), eps) > delta  # and is the smallest such
    # the brute-force conversion agrees
    assert brute_delta(rho, eps) == pytest.approx(delta, rel=1e-5)


def balle_wang_delta(sigma, eps, sens):
    # independent evaluation of Balle & Wang (2018) Thm. 8 with scipy's normal cdf
    a, b = sens / (2 * sigma), eps * sigma / sens
    return norm.cdf(a - b) - math.exp(eps) * norm.cdf(-a - b)


@pytest.mark.parametrize("eps, delta, sens", [(1.0, 1e-6, 1.0), (0.5, 1e-5, 3.0), (3.0, 1e-3, 0.2)])
def test_analytic_gaussian_sigma_plugs_back(eps, delta, sens):
    sigma = analytic_gaussian_sigma(eps, delta, sens)
    assert balle_wang_delta(sigma, eps, sens) == pytest.approx(delta, rel=1e-6)
    assert balle_wang_delta(sigma, eps, sens) <= delta * (1 + 1e-9)
    # the classical sqrt(2 ln(1.25/δ)) Δ/ε (valid for ε < 1) is looser
    if eps < 1:
        assert sigma < math.sqrt(2 * math.log(1.25 / delta)) * sens / eps


@pytest.mark.parametrize("eps, delta", [(0.1, 1e-6), (1.0, 1e-6), (2.0, 1e-8), (0.01, 1e-3)])
def test_zcdp_route_is_more_conservative_than_analytic(eps, delta):
    assert gaussian_sigma(eps, delta, 2.0) >= analytic_gaussian_sigma(eps, delta, 2.0)


def test_zcdp_route_within_ten_percent_at_eps_1():
    # measured ratio 1.072 at ε = 1, δ = 1e-6
    ratio = gaussian_sigma(1.0, 1e-6, 1.0) / analytic_gaussian_sigma(1.0, 1e-6, 1.0)
    assert 1.0 <= ratio < 1.10


def test_sigma_monotone_in_eps_and_delta_and_linear_in_sensitivity():
    eps_grid = [0.05, 0.1, 0.5, 1.0, 2.0, 5.0]
    sig = [gaussian_sigma(e, 1e-6, 1.0) for e in eps_grid]
    assert all(a > b for a, b in zip(sig, sig[1:]))
    ana = [analytic_gaussian_sigma(e, 1e-6, 1.0) for e in eps_grid]
    assert all(a > b for a, b in zip(ana, ana[1:]))
    delta_grid = [1e-12, 1e-9, 1e-6, 1e-3, 0.1]
    sig = [gaussian_sigma(1.0, d, 1.0) for d in delta_grid]
    assert all(a > b for a, b in zip(sig, sig[1:]))
    assert gaussian_sigma(1.0, 1e-6, 3.0) == pytest.approx(
        3 * gaussian_sigma(1.0, 1e-6, 1.0), rel=1e-12
    )
    assert gaussian_sigma(1.0, 1e-6, 0.0) == 0.0


def test_laplace_scale_and_noise_variance():
    assert laplace_scale(0.5, 3.0) == 6.0
    assert noise_variance(0.5, sensitivity=3.0) == 72.0
    assert noise_variance(0.5, 0.0, sensitivity=3.0) == 72.0
    s = gaussian_sigma(0.5, 1e-6, 3.0)
    assert noise_variance(0.5, 1e-6, sensitivity=3.0) == pytest.approx(s**2, rel=1e-15)
    assert noise_variance(1.0, 1e-6, sensitivity=0.0) == 0.0


@pytest.mark.parametrize("eps", [0, -1.0, float("nan"), float("inf")])
def test_bad_eps(eps):
    for call in (
        lambda: laplace_scale(eps, 1.0),
        lambda: gaussian_sigma(eps, 1e-6, 1.0),
        lambda: analytic_gaussian_sigma(eps, 1e-6, 1.0),
        lambda: noise_variance(eps, sensitivity=1.0),
    ):
        with pytest.raises(ValueError, match="eps") as err:
            call()
        assert repr(eps) in str(err.value)


@pytest.mark.parametrize("delta", [-0.1, 1.0, 1.5, float("nan")])
def test_bad_delta(delta):
    with pytest.raises(ValueError, match=r"delta must be in \[0, 1\)") as err:
        noise_variance(1.0, delta, sensitivity=1.0)
    assert repr(delta) in str(err.value)
    with pytest.raises(ValueError, match="delta"):
        gaussian_sigma(1.0, delta, 1.0)


def test_gaussian_needs_positive_delta():
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        gaussian_sigma(1.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="delta"):
        zcdp_to_approx_dp(0.5, 0.0)


@pytest.mark.parametrize("sens", [-1.0, float("inf"), float("nan")])
def test_bad_sensitivity(sens):
    with pytest.raises(ValueError, match="sensitivity"):
        noise_variance(1.0, sensitivity=sens)
    with pytest.raises(ValueError, match="sensitivity"):
        laplace_scale(1.0, sens)


def test_bad_types_and_rho():
    with pytest.raises(TypeError, match="str"):
        laplace_scale("1", 1.0)
    with pytest.raises(TypeError, match="bool"):
        noise_variance(True, sensitivity=1.0)
    with pytest.raises(ValueError, match="rho"):
        approx_dp_delta(-0.1, 1.0)
    with pytest.raises(ValueError, match="rho"):
        zcdp_to_approx_dp(float("inf"), 1e-6)
    with pytest.raises(TypeError):
        noise_variance(1.0, 0.0, 1.0)  # sensitivity is keyword-only


# -- the one calibration rule (issue 22): every plan calls these ----------------------------


def test_neighbor_sensitivity_doubles_for_substitution_and_adds_the_float_margin():
    from matmech.privacy.calibration import SENS_MARGIN, neighbor_sensitivity

    assert neighbor_sensitivity(3.0) == 3.0
    assert neighbor_sensitivity(3.0, "substitute") == 6.0
    assert neighbor_sensitivity(2.5, "substitute", margin=True) == 5.0 * SENS_MARGIN
    with pytest.raises(ValueError, match="neighbors"):
        neighbor_sensitivity(1.0, "swap")


def test_noise_for_is_the_measurement_rule():
    """The plan of a histogram measurement and the rule give the same noise, bit for bit."""
    from matmech import strategies as S
    from matmech.privacy.calibration import neighbor_sensitivity, noise_for
    from matmech.privacy.measure import plan_measurement

    A = S.hierarchical(16)
    for eps, delta, nb in [
        (0.1, 0.0, "add_remove"),
        (1.0, 1e-6, "substitute"),
        (0.3, 0.0, "substitute"),
    ]:
        plan = plan_measurement(A, eps, delta, neighbors=nb)
        p = 1 if delta == 0 else 2
        sens = neighbor_sensitivity(A.sensitivity(p), nb, margin=p == 2)
        assert sens == plan.sensitivity
        assert noise_for(eps, delta, sens) == (plan.noise, plan.scale)
    # Laplace: b·ε >= Δ exactly for the decimal ε charged (0.1 is 1/10)
    from fractions import Fraction

    kind, b = noise_for(0.1, 0.0, 3.0)
    assert kind == "discrete_laplace" and Fraction(b) * Fraction(1, 10) >= 3


def test_measurement_variance_discrete_laplace_by_summation():
    """The discrete Laplace variance at t = Δ/ε against a direct sum over the integers."""
    from matmech.privacy.calibration import measurement_variance

    for sens, eps in [(1.0, 1.0), (2.0, 0.5), (3.0, 4.0)]:  # scales the sampler uses as given
        t = sens / eps
        k = np.arange(-4000, 4001)
        w = np.exp(-np.abs(k) / t)
        direct = float((w * k * k).sum() / w.sum())
        assert measurement_variance(eps, 0.0, sens) == pytest.approx(direct, rel=1e-12)
        assert measurement_variance(eps, 0.0, sens, discrete=False) == 2 * t * t


def test_run_grid_and_scale_on_grid():
    from fractions import Fraction

    from matmech.privacy.calibration import run_grid, scale_on_grid

    assert run_grid() == 1.0 and run_grid(1e9) == 1.0  # never coarser than 1
    g = run_grid(0.3, 5.0)
    assert g == 2.0**-18  # the largest power of two <= 0.3 · 2**-16
    s = scale_on_grid(2.0, 1.0, 0.7, g)
    assert Fraction(s) >= Fraction(2) / Fraction(0.7) and Fraction(s) / Fraction(g) == int(s / g)
    assert Fraction(s) - Fraction(2) / Fraction(0.7) < Fraction(g)


def test_row_sensitivity_by_enumerating_neighbours():
    """A row with entries in [lo, hi] (and a 0 cell): the largest change of its answer over
    every add/remove (one entry) or substitution (one entry out, one in) of a record."""
    from matmech.privacy.calibration import row_sensitivity

    for row in ([0.0, 1.0, 3.0], [-2.0, 0.0, 1.5], [0.5, 2.0, 0.0]):
        lo, hi = min(row), max(row)
        add = max(abs(v) for v in row)
        sub = max(abs(a - b) for a in row for b in row)
        assert row_sensitivity(lo, hi) == add
        assert row_sensitivity(lo, hi, "substitute") == sub
