"""Many σ in one sampler call (issue 24): a stack of tables serves every draw from its own
table on every class of random input, the draws of each σ follow its exact distribution,
and the dyadic σ grid rounds up within its stated bits."""

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from matmech.privacy import discrete, noise, thresholds
from sampler_exact import (
    TWO128,
    ScriptedSource,
    accept_outputs,
    chi2_p,
    digit_classes,
    digit_outputs,
    sign_outputs,
)


def _lap(scale):
    f = Fraction(scale)
    return discrete.laplace_table(f.numerator, f.denominator)


#: Laplace tables of one layout each (equal digits): the proposals of the dyadic grid
#: (2**u / p) beside the exact-σ ones (σ²/round(σ)) and SVT-like scales.
LAPLACE_GROUPS = [
    [Fraction(1, 3), 1, Fraction(18, 5)],
    [Fraction(256, 9), 30, 255, Fraction(1000, 3)],
    [2**16, Fraction(2**19, 11)],
]


@pytest.mark.parametrize("scales", LAPLACE_GROUPS, ids=str)
def test_a_stack_draws_every_digit_class_from_its_own_table(scales, monkeypatch):
    tabs = [_lap(s) for s in scales]
    assert len({t.digits for t in tabs}) == 1
    st = thresholds.stack(tabs)
    for k, tab in enumerate(tabs):
        for d in range(tab.digits):
            points, ties = digit_classes(tab.vals[d][1:])
            words = [w for w, _ in points + ties]
            alone = digit_outputs(tab, d, words)
            assert np.array_equal(alone[: len(points)], [c for _, c in points])
            for broadcast in (0, len(words)):  # the binary search and the all-thresholds path
                monkeypatch.setattr(discrete, "_BROADCAST", broadcast)
                assert np.array_equal(digit_outputs(tab, d, words, via=(st, k)), alone), (k, d)


@pytest.mark.parametrize("scales", LAPLACE_GROUPS, ids=str)
def test_a_stack_decides_sign_and_tail_per_table(scales):
    tabs = [_lap(s) for s in scales]
    st = thresholds.stack(tabs)
    for k, tab in enumerate(tabs):
        g0, g1 = tab.sign
        words = [w for w in (0, g0 - 1, g0, g0 + 1, g1 - 1, g1, g1 + 1, TWO128 - 1) if w >= 0]
        assert np.array_equal(sign_outputs(tab, words, via=(st, k)), sign_outputs(tab, words))
        D = tab.digits
        for w in (max(tab.ovf - 1, 0), tab.ovf + 1):  # the tail event on both sides
            rows = [tab.vals[j][1] >> 65 for j in range(D)] + [(1 << 64) - 1, w >> 64, w % 2**64]
            one = discrete._dlaplace_block(tab, 1, ScriptedSource(rows, seed=3))
            via = discrete._dlaplace_block(st, 1, ScriptedSource(rows, seed=3), j=np.array([k]))
            assert one.tolist() == via.tolist()


def test_a_stack_accepts_every_class_per_table():
    # acceptance tables exp(-N/2**K) of one layout (4 digits), as the dyadic grid uses them
    tabs = [discrete.gauss_table(1 << K) for K in (19, 20, 22)]
    assert len({(t.positions, t.high) for t in tabs}) == 1
    st = thresholds.stack(tabs)
    for k, tab in enumerate(tabs):
        for d in range(tab.positions):
            nums, words = [], []
            for c in range(1, 256):
                T = tab.vals[d][c]
                for w in (0, T - 1, T, T + 1, TWO128 - 1):
                    if 0 <= w < TWO128:
                        nums.append(c << (8 * d))
                        words.append(w)
            alone = accept_outputs(tab, nums, words, d)
            assert np.array_equal(accept_outputs(tab, nums, words, d, via=(st, k)), alone)
            strict = [
                i for i, (n, w) in enumerate(zip(nums, words)) if w != tab.vals[d][n >> 8 * d]
            ]
            want = [words[i] < tab.vals[d][nums[i] >> (8 * d)] for i in strict]
            assert alone[strict].tolist() == want  # accept iff U < exp(-c 256**d / S)


def _pmf(params, span):
    """The discrete Gaussian of σ² = a/b on [-span, span], by direct summation."""
    s2 = params.a / params.b
    k = np.arange(-span, span + 1)
    w = np.exp(-(k.astype(np.float64) ** 2) / (2 * s2))
    return k, w / w.sum()


def test_each_sigma_of_a_mixed_call_follows_its_own_distribution():
    params, _ = noise.gaussian_grid([0.7, 3.7, 30.2, 300.5, 40_000.0], bits=9)
    n = 40_000
    which = np.random.default_rng(5).permutation(np.repeat(np.arange(len(params)), n))
    z = noise.discrete_gaussian_mixed(params, which, rng=np.random.default_rng(6))
    for i, p in enumerate(params):
        got = z[which == i]
        sigma = math.sqrt(p.a / p.b)
        if sigma < 100:  # every value its own cell
            k, pmf = _pmf(p, int(12 * sigma) + 12)
            counts = np.bincount(got - k[0], minlength=k.size)
            assert counts.size == k.size  # nothing beyond 12 σ
            assert chi2_p(counts, pmf * got.size) > 1e-4, sigma
        else:  # a continuous comparison is exact to far below the test's resolution
            assert stats.kstest(got / sigma, "norm").pvalue > 1e-4, sigma
        var = noise.gaussian_variances([p])[0]
        assert abs(got.var() / var - 1) < 5 * math.sqrt(2 / got.size), sigma


def test_unused_parameters_change_no_draw():
    p = noise._gauss_params(30)
    far = noise.gaussian_grid([5000.0], bits=9)[0][0]  # another layout of both tables
    ref = discrete.dgauss(p, 5000, noise.check_rng(np.random.default_rng(8)))
    for params in [(p,), (p, far), (far, p)]:
        which = np.full(5000, params.index(p))
        got = noise.discrete_gaussian_mixed(params, which, rng=np.random.default_rng(8))
        assert np.array_equal(got, ref)


def _taus():
    rng = np.random.default_rng(11)
    edges = [2.0**k * f for k in range(-1, 23) for f in (1.0, 1 + 2**-52, 1 - 2**-53)]
    return np.concatenate([np.exp(rng.uniform(np.log(0.3), np.log(2**22), 400)), edges])


@pytest.mark.parametrize("bits", [2, 9, 16])
def test_the_grid_rounds_sigma_up_within_its_bits(bits):
    tau = _taus()
    params, index = noise.gaussian_grid(tau, bits=bits)
    most = 1 / ((1 - Fraction(2) ** -50) * (1 - Fraction(2) ** (1 - bits)))
    for t, i in zip(tau.tolist(), index.tolist()):
        p = params[i]
        s2 = Fraction(p.a, p.b)
        assert Fraction(t) ** 2 <= s2 <= Fraction(t) ** 2 * most, (t, bits)
        scale = Fraction(p.lap_t, p.lap_s)
        assert abs(float(scale) / math.sqrt(s2) - 1) < 0.07  # an efficient proposal
        if bits + 2 * math.log2(t) + 3 < 55:  # in the dyadic range (noise._DYADIC_MAX_S)
            assert p.S & (p.S - 1) == 0  # a power of two: shared acceptance tables
    sig = [math.sqrt(p.a / p.b) for p in params]
    assert sig == sorted(sig)
    octaves = math.ceil(math.log2(tau.max() / tau.min())) + 1
    dyadic = {p.S for p in params if p.S & (p.S - 1) == 0}
    assert len(dyadic) <= 2 * octaves + 2  # S = 2**K, K ~ bits + 2 log2 σ
    assert len({(p.lap_t, p.lap_s) for p in params}) <= 9 * octaves


@pytest.mark.parametrize("bits", [2, 9, 16])
def test_sigma_rounded_on_its_own_grid_is_at_least_tau(bits):
    tau = _taus()
    params, index = noise.gaussian_grid(tau, bits=bits, shared=False)
    for t, i in zip(tau.tolist(), index.tolist()):
        s2 = Fraction(params[i].a, params[i].b)
        # (σ < 1: σ² further rounded up to a multiple of 2**-25, noise's documented rule)
        most = (1 + Fraction(2) ** (1 - bits)) ** 2 * (1 + Fraction(2) ** -20)
        assert Fraction(t) ** 2 <= s2 <= Fraction(t) ** 2 * most
    rounded = set()
    for v in tau.tolist():
        f, e = math.frexp(v)
        rounded.add(math.ldexp(math.ceil(math.ldexp(f, bits)), e - bits))
    assert len(params) == len(rounded)  # one parameter set per rounded σ


def test_past_the_dyadic_range_sigma_is_tau():
    (p,), _ = noise.gaussian_grid([2.0**23.5], bits=9)
    assert p == noise._gauss_params(2.0**23.5)  # σ = τ (σ² rounded up below 2**-39)
    assert p.S & (p.S - 1) != 0


def test_the_grid_keeps_the_shape_of_tau_also_past_the_dyadic_range():
    tau = np.array([[1.6e7, 1.5e7], [2.0, 3.0]])  # the first row past 2**23: σ = τ
    params, index = noise.gaussian_grid(tau, bits=9)
    assert index.shape == (2, 2)
    for t, i in zip(tau.ravel().tolist(), index.ravel().tolist()):
        assert Fraction(params[i].a, params[i].b) >= Fraction(t) ** 2
    assert params[index[0, 0]] == noise._gauss_params(1.6e7)


def test_exact_grid_keeps_each_tau():
    params, index = noise.gaussian_grid([3.0, 3.0, 7.5], bits=None)
    assert index.tolist() == [0, 0, 1]
    assert [Fraction(p.a, p.b) for p in params] == [9, Fraction(225, 4)]


def test_inconsistent_parameters_are_refused():
    p = noise._gauss_params(30)
    for field, value in [("B", p.B + 1), ("A", p.A + 1), ("C", 0), ("y_safe", 2**62)]:
        with pytest.raises(ValueError, match="inconsistent discrete Gaussian"):
            discrete.GaussParams(**{**p.__dict__, field: value})


@pytest.mark.parametrize(
    "tau, bits",
    [
        ([0.0], 9),
        ([-1.0], 9),
        ([float("nan")], 9),
        ([2.0**25], 9),
        ([1.0], 1),
        ([1.0], 41),
        ([1.0], True),
    ],
)
def test_bad_grid_input_is_refused(tau, bits):
    with pytest.raises(ValueError, match="tau|bits"):
        noise.gaussian_grid(tau, bits=bits)


def test_bad_mixed_input_is_refused():
    params, _ = noise.gaussian_grid([3.0, 30.0], bits=9)
    with pytest.raises(ValueError, match="which"):
        noise.discrete_gaussian_mixed(params, [0, 2])
    with pytest.raises(ValueError, match="which"):
        noise.discrete_gaussian_mixed(params, [0.0, 1.0])
    with pytest.raises(TypeError, match="GaussParams"):
        noise.discrete_gaussian_mixed([3.0], [0])
