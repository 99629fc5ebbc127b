"""A stream is calibrated by the privacy layer's one rule, and builds its integer factor once.

* The plan's noise, σ (or Laplace b), grid, std and sensitivity equal what
  :mod:`matmech.privacy.calibration` gives for the same (ε, δ, Δ), and a second method: the
  grid from its definition (the smallest power of two with scale/g ≤ 2^22 Gaussian, 2^46
  Laplace), the std from the discrete pmf summed, or the closed form. Integer C (identity,
  prefix) under the Gaussian agree with :func:`matmech.privacy.measure.plan_measurement`.
* Seeded releases equal an independent computation: the noise redrawn from the seed with the
  privacy samplers, y = C_g·x + z in fractions, r = B_g·y with a dense inverse.
* K = C_g/g is built once per plan: create + every step + status, and once more on reopen.
"""

import math
import sqlite3
import sys
from fractions import Fraction

import numpy as np
import pytest

from matmech.privacy import noise
from matmech.privacy.calibration import (
    gaussian_sigma,
    lattice_std,
    neighbor_sensitivity,
    noise_for,
    sampler_grid,
)
from matmech.privacy.measure import plan_measurement
from matmech.stream import exact
from matmech.stream.factorizations import build
from matmech.stream.plan import StreamSpec, plan_stream
from matmech.stream.release import StreamRelease

CASES = [
    dict(horizon=16, eps=1.0),
    dict(horizon=16, eps=0.3, delta=1e-6),
    dict(horizon=9, rho=0.2, delta=1e-7),
    dict(horizon=12, eps=2.0, factorization="identity"),
    dict(horizon=12, eps=2.0, factorization="prefix", neighbors="substitute"),
    dict(horizon=12, eps=0.5, delta=1e-5, factorization="prefix", neighbors="substitute"),
    dict(horizon=10, eps=1.0, delta=1e-6, factorization="identity"),
    dict(horizon=10, eps=1.0, delta=1e-6, factorization="dense", categories=2),
    dict(horizon=10, eps=1.0, factorization="blt"),
    dict(horizon=10, eps=1.0, delta=1e-9, factorization="banded", objective="max"),
    dict(horizon=8, eps=1e-4, delta=1e-100, factorization="identity"),
    dict(horizon=8, eps=1e-4, factorization="sqrt", neighbors="substitute"),
    dict(horizon=8, eps=100.0, delta=0.5, factorization="sqrt"),
]


def _pmf_std(kind, t):
    """Std of the discrete Laplace/Gaussian of parameter t (grid units) by summing its pmf."""
    if kind == "discrete_laplace":  # closed form: Var = 2q/(1 − q)², q = e^{−1/t}
        q = math.exp(-1.0 / t)
        return math.sqrt(2.0 * q) / -math.expm1(-1.0 / t)
    if t > 1e3:  # e^{−2π²t²}-close to t² (Canonne, Kamath, Steinke 2020)
        return t
    k = np.arange(-int(60 * t) - 60, int(60 * t) + 61, dtype=np.float64)
    w = np.exp(-(k * k) / (2.0 * t * t))
    return math.sqrt(float((k * k * w).sum() / w.sum()))


def _grid_by_definition(scale0, gaussian):
    bits = 22 if gaussian else 46
    g = 1.0
    while scale0 / g > 2.0**bits:
        g *= 2.0
    while scale0 / (g / 2.0) <= 2.0**bits:
        g /= 2.0
    return g


@pytest.mark.parametrize("kw", CASES, ids=[str(sorted(c.items())) for c in CASES])
def test_the_plan_is_the_privacy_layers_calibration(kw):
    spec = StreamSpec(**kw)
    plan = plan_stream(spec)
    eps, delta = spec.charge
    p = 1 if delta == 0 else 2
    # "auto" (the default) names its choice; a name is built for the noise's norm
    name = spec.factorization if spec.factorization != "auto" else plan.factorization.name
    f = build(name, spec.horizon, objective=spec.objective, norm=p)
    sens0 = neighbor_sensitivity(f.sensitivity(p), spec.neighbors, margin=True)
    kind0, scale0 = noise_for(eps, delta, sens0)
    integer = np.all(np.mod(f.dense(), 1.0) == 0.0)
    if integer:
        assert plan.grid == 1.0
    else:
        grid = sampler_grid(sens0, scale0, p == 2, spec.max_records, integer_exact=True)
        assert plan.grid == grid == _grid_by_definition(scale0, p == 2)
    np.testing.assert_array_equal(plan.factorization.dense(), f.rounded(plan.grid).dense())
    # calibrated on the rounded C_g actually measured
    sens = neighbor_sensitivity(plan.factorization.sensitivity(p), spec.neighbors, margin=True)
    kind, scale = noise_for(eps, delta, sens)
    assert (plan.noise, plan.scale, plan.sensitivity) == (kind, scale, sens) and kind == kind0
    if p == 1:
        assert plan.scale * eps >= sens and plan.scale == pytest.approx(sens / eps, rel=1e-15)
    else:
        assert plan.scale == gaussian_sigma(eps, delta, sens)
    assert plan.std == lattice_std(kind, scale, plan.grid, remedy="")
    # the sampler rounds a long fraction up to 32 bits (Laplace) or 40 bits (σ²): never less noise
    second = _pmf_std(kind, scale / plan.grid) * plan.grid
    assert second * (1 - 1e-12) <= plan.std <= second * (1 + 2.0**-29)
    if integer and p == 2:  # the histogram measurement's plan of the same integer strategy
        m = plan_measurement(plan.factorization.dense(), eps, delta, neighbors=spec.neighbors)
        assert (m.noise, m.scale, m.std, m.grid, m.sensitivity) == (
            plan.noise,
            plan.scale,
            plan.std,
            plan.grid,
            plan.sensitivity,
        )


def _independent_release(plan, X, seed):
    """(y, r, std) computed without the stream: noise redrawn from the seed, y in fractions."""
    n, k = X.shape
    src = noise.check_rng(np.random.default_rng(seed))
    gauss = plan.noise == "discrete_gaussian"
    C = plan.factorization.dense()
    g = plan.grid
    Y = np.empty((n, k))
    for t in range(n):
        if g == 1.0:
            sampler = noise.discrete_gaussian if gauss else noise.discrete_laplace
            z = sampler(plan.scale, k, rng=src).astype(np.float64)
        else:
            z = (noise.gaussian if gauss else noise.laplace)(plan.scale, k, grid=g, rng=src)
        for c in range(k):
            y = sum(Fraction(C[t, j]) * int(X[j, c]) for j in range(t + 1)) + Fraction(z[c])
            assert (y / Fraction(g)).denominator == 1
            Y[t, c] = float(y)
    B = np.tril(np.ones((n, n))) @ np.linalg.inv(C)
    return Y, B @ Y, plan.std * np.sqrt((B**2).sum(axis=1))


@pytest.mark.parametrize("kw", CASES, ids=[str(sorted(c.items())) for c in CASES])
def test_seeded_releases_equal_an_independent_computation(tmp_path, kw):
    spec = StreamSpec(**{**kw, "categories": 3})
    seed = 17
    s = StreamRelease.create(tmp_path / "s.db", spec, rng=np.random.default_rng(seed))
    X = np.random.default_rng(4).integers(0, 1000, size=(spec.horizon, 3))
    out = [s.step(X[t].tolist()) for t in range(spec.horizon)]
    Y, R, std = _independent_release(s.plan, X, seed)
    with sqlite3.connect(tmp_path / "s.db") as con:
        stored = con.execute("SELECT y FROM steps ORDER BY t").fetchall()
    np.testing.assert_array_equal([np.frombuffer(b, dtype=np.float64) for (b,) in stored], Y)
    np.testing.assert_allclose([o.values for o in out], R, rtol=1e-9, atol=1e-9 * s.plan.std)
    np.testing.assert_allclose([o.std for o in out], std, rtol=1e-10)


def test_integer_c_beyond_the_grid_target_is_measured_on_the_integers(tmp_path):
    """σ of prefix(4096) at ε = 1e-4, δ = 1e-100 is above 2^22 but within the sampler's 2^24:
    it is measured on g = 1 (it used to be rounded to g = 4, all zeros, and fail)."""
    spec = StreamSpec(4096, eps=1e-4, delta=1e-100, factorization="prefix")
    plan = plan_stream(spec)
    assert plan.grid == 1.0 and 2.0**22 < plan.scale <= 2.0**24
    assert plan.std == lattice_std(plan.noise, plan.scale, 1.0, remedy="")
    s = StreamRelease.create(tmp_path / "p.db", spec, rng=np.random.default_rng(0))
    assert s.step([5]).std == pytest.approx(plan.std, rel=1e-12)
    with pytest.raises(ValueError, match="beyond the exact sampler's limit"):
        plan_stream(StreamSpec(2**16, eps=1e-4, delta=1e-100, factorization="prefix"))


@pytest.mark.parametrize("factorization", ["sqrt", "dense", "identity"])
def test_the_integer_factor_is_built_once_per_plan(tmp_path, monkeypatch, factorization):
    calls = []
    real = exact.integer_factor

    def counting(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    for name, mod in list(sys.modules.items()):  # wherever the stream can reach the builder
        if name.startswith("matmech.stream") and hasattr(mod, "integer_factor"):
            monkeypatch.setattr(mod, "integer_factor", counting)
    spec = StreamSpec(8, eps=1.0, delta=1e-6, categories=2, factorization=factorization)
    s = StreamRelease.create(tmp_path / "k.db", spec, rng=np.random.default_rng(0))
    for t in range(8):
        s.step([t, 2 * t])
    s.status()
    assert len(calls) == 1
    again = StreamRelease.open(tmp_path / "k.db")  # a new plan read from the file: one more
    assert again.step([0, 0], t=3).replayed and len(calls) == 2
    np.testing.assert_array_equal(again.plan.integer_factor, s.plan.integer_factor)


@pytest.mark.parametrize(
    "rho,err",
    [
        (True, TypeError),
        ("0.1", TypeError),
        (0.0, ValueError),
        (-1.0, ValueError),
        (math.nan, ValueError),
    ],
)
def test_rho_is_checked_by_the_privacy_rule_when_declared(rho, err):
    """rho=True used to pass the spec (a bool is a numbers.Real) and fail only at the charge."""
    with pytest.raises(err, match="rho"):
        StreamSpec(8, rho=rho, delta=1e-6)
