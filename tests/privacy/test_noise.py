"""Tests for matmech.privacy.noise: exact discrete samplers against exact pmfs (chi-square)."""

import ast
import decimal
import math
import os
import pathlib
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from matmech.privacy import discrete, noise, thresholds
from matmech.privacy.noise import (
    check_rng,
    discrete_gaussian,
    discrete_gaussian_variance,
    discrete_laplace,
    discrete_laplace_variance,
    gaussian,
    grid_for,
    laplace,
    snap,
    snap_sensitivity,
    uniform,
)
from matmech.privacy.randomness import RandomSource

N = 100_000


# ---------------------------------------------------------------- exact pmfs (second method)


def laplace_pmf(scale, ks):
    """P[k] = (1-p)/(1+p) p^|k|, p = exp(-1/scale), computed independently of the sampler."""
    p = math.exp(-1.0 / float(scale))
    return (1 - p) / (1 + p) * np.power(p, np.abs(ks).astype(float))


def gaussian_pmf(sigma, ks):
    s2 = float(sigma) ** 2
    kmax = int(40 * float(sigma)) + 10
    z = np.exp(-(np.arange(-kmax, kmax + 1, dtype=float) ** 2) / (2 * s2)).sum()
    return np.exp(-(ks.astype(float) ** 2) / (2 * s2)) / z


def chisquare_pvalue(samples, pmf, span, bins=60):
    """Chi-square p-value of integer samples against pmf on [-span, span] (tails pooled),
    consecutive integers grouped into bins of roughly equal expected count."""
    ks = np.arange(-span, span + 1)
    probs = pmf(ks)
    tail = max(0.0, (1.0 - probs.sum()) / 2)
    cdf = tail + np.cumsum(probs)  # P[X <= k]
    n = samples.size
    for target in (max(20.0 / n, 1.0 / bins), 20.0 / n):
        edges, last = [], 0.0
        for k, c in zip(ks, cdf):
            if c - last >= target and 1.0 - c >= target:
                edges.append(k)
                last = c
        if len(edges) >= 2:
            break
    edges = np.array(edges)
    expected = np.diff(np.concatenate([[0.0], cdf[np.searchsorted(ks, edges)], [1.0]])) * n
    observed = np.bincount(np.searchsorted(edges, samples, side="left"), minlength=edges.size + 1)
    return stats.chisquare(observed, expected).pvalue


# ---------------------------------------------------------------- goodness of fit


LAPLACE_SCALES = [1, 0.7, 0.3, 3.25, 10, Fraction(10, 3), Fraction(22, 7), 1000, 2**16]


@pytest.mark.parametrize("scale", LAPLACE_SCALES, ids=str)
def test_discrete_laplace_matches_exact_pmf(scale):
    x = discrete_laplace(scale, N, rng=np.random.default_rng(11))
    assert x.dtype == np.int64 and x.shape == (N,)
    span = int(20 * float(scale)) + 5
    assert chisquare_pvalue(x, lambda k: laplace_pmf(scale, k), span) > 1e-4


GAUSS_SIGMAS = [0.3, 0.5, 0.7, 1, 3.25, 10, 1000, 2**16]


@pytest.mark.parametrize("sigma", GAUSS_SIGMAS, ids=str)
def test_discrete_gaussian_matches_exact_pmf(sigma):
    x = discrete_gaussian(sigma, N, rng=np.random.default_rng(12))
    assert x.dtype == np.int64 and x.shape == (N,)
    span = int(8 * float(sigma)) + 5
    assert chisquare_pvalue(x, lambda k: gaussian_pmf(sigma, k), span) > 1e-4


def test_chisquare_detects_a_wrong_scale():
    # the goodness-of-fit test has power: 5% off in scale is rejected decisively
    x = discrete_laplace(10, N, rng=np.random.default_rng(13))
    assert chisquare_pvalue(x, lambda k: laplace_pmf(10.5, k), 205) < 1e-6
    g = discrete_gaussian(10, N, rng=np.random.default_rng(13))
    assert chisquare_pvalue(g, lambda k: gaussian_pmf(10.5, k), 85) < 1e-6


def test_gaussian_and_laplace_are_distinguishable():
    g = discrete_gaussian(3.25, N, rng=np.random.default_rng(14))
    sd_matched_laplace = 3.25 / math.sqrt(2)
    assert chisquare_pvalue(g, lambda k: laplace_pmf(sd_matched_laplace, k), 60) < 1e-6


def test_secure_source_loose_moments():
    x = discrete_laplace(10, 200_000)  # rng=None: the secure default source
    var = discrete_laplace_variance(10)
    assert abs(x.mean()) < 5 * math.sqrt(var / x.size)
    assert abs(x.var() / var - 1) < 0.05
    g = discrete_gaussian(10, 200_000)
    assert abs(g.mean()) < 5 * math.sqrt(100 / g.size)
    assert abs(g.var() / 100 - 1) < 0.05


# ---------------------------------------------------------------- variances


@pytest.mark.parametrize("scale", [0.3, 1, 3.25, 10, 250])
def test_discrete_laplace_variance_closed_form_vs_series(scale):
    k = np.arange(-60 * 250, 60 * 250 + 1)
    series = float(np.sum(k.astype(float) ** 2 * laplace_pmf(scale, k)))
    assert discrete_laplace_variance(scale) == pytest.approx(series, rel=1e-9)


@pytest.mark.parametrize("sigma", [1.0, 1.5, 2.5, 4.0, 7.9])
def test_discrete_gaussian_variance_direct_vs_dual_series(sigma):
    direct = discrete_gaussian_variance(sigma)  # direct sum below sigma = 8
    dual = noise._dual_gaussian_variance(sigma**2)
    assert direct == pytest.approx(dual, rel=1e-12)


def test_discrete_gaussian_variance_values():
    # small sigma: variance well below sigma^2; large sigma: sigma^2 to float precision
    k = np.arange(-50, 51)
    p = noise._gauss_params(0.4)  # sigma^2 = 0.16 rounded up to a multiple of 2**-25
    assert abs(Fraction(p.a, p.b) - Fraction(0.4) ** 2) <= Fraction(1, 2**25)
    pmf = gaussian_pmf(math.sqrt(p.a / p.b), k)
    assert discrete_gaussian_variance(0.4) == pytest.approx(float(np.sum(k**2 * pmf)), rel=1e-12)
    assert discrete_gaussian_variance(0.4) == pytest.approx(
        float(np.sum(k**2 * gaussian_pmf(0.4, k))), rel=1e-5
    )
    assert discrete_gaussian_variance(0.4) < 0.4**2 * 0.9
    assert discrete_gaussian_variance(1000) == pytest.approx(1e6, rel=1e-12)


@pytest.mark.parametrize("scale", [0.7, 10, 1000])
def test_empirical_variance_matches_formulas(scale):
    x = discrete_laplace(scale, 200_000, rng=np.random.default_rng(21))
    assert x.var() == pytest.approx(discrete_laplace_variance(scale), rel=0.03)
    g = discrete_gaussian(scale, 200_000, rng=np.random.default_rng(22))
    assert g.var() == pytest.approx(discrete_gaussian_variance(scale), rel=0.02)


# ---------------------------------------------------------------- exact building blocks


def _freq_ok(hits, n, p):
    return abs(hits / n - p) < 5 * math.sqrt(p * (1 - p) / n) + 1e-12


@pytest.mark.parametrize(
    "a, b",
    [
        (1, 1),
        (7, 10),
        (1, 2**48),
        (3, 1),
        (10**6 + 7, 10**6),
        (100 * 256, 1),
        (5 << 56, 3),
        (2**62, 1),
    ],
)
def test_exp_neg_encloses_exp(a, b):
    # an independent decimal computation at 300 digits
    ctx = decimal.Context(prec=300)
    exact = ctx.exp(ctx.divide(-decimal.Decimal(a), decimal.Decimal(b)))
    for prec in (64, 128, 300):
        lo, hi = thresholds._exp_neg(a, b, prec)
        scaled = ctx.multiply(exact, ctx.power(decimal.Decimal(2), prec))
        assert lo <= scaled <= hi and hi - lo <= 4, (prec, lo, hi)


def test_floor_bits_are_consistent_across_precisions():
    keys = [
        ("exp", 7, 10),
        ("cdf", 256, 10, 3),
        ("cdf", 1, 2**40, 200),
        ("neg", 1, 1),
        ("nonpos", 100, 1),
        ("cdf", 100, 1, 255),
    ]
    for key in keys:
        f128, f500 = thresholds._floor_bits(key, 128), thresholds._floor_bits(key, 500)
        assert f500 >> 372 == f128 and 0 <= f128 < 2**128
        lo, hi = thresholds._enclose(key, 600)
        assert lo >> 100 <= f500 <= hi >> 100


@pytest.mark.parametrize("a, b", [(1, 1), (5, 2), (1, 3), (10**40 + 12345, 3 * 10**39)])
def test_bernoulli_exp_frequencies(a, b):
    # exp(-a/b) with a/b far beyond int64 in the last case (the Gaussian's huge-|y| fallback)
    src = check_rng(np.random.default_rng(32))
    n = 20_000
    hits = sum(thresholds.bernoulli(("exp", a, b), src) for _ in range(n))
    assert _freq_ok(hits, n, math.exp(-a / b))


def test_resolve_continues_a_tied_comparison_exactly():
    # given a 128-bit tie with v, P[v <= U] = 1 - frac(v * 2**128): check the continuation
    src = check_rng(np.random.default_rng(33))
    for key in [("exp", 7, 10), ("cdf", 256, 10, 3)]:
        prefix = thresholds._floor_bits(key, 128)
        frac = (thresholds._floor_bits(key, 192) - (prefix << 64)) / 2**64
        n = 20_000
        hits = sum(thresholds.resolve([key], prefix, 128, src) for _ in range(n))
        assert _freq_ok(hits, n, 1 - frac)


def test_gaussian_acceptance_overflow_fallback():
    p = noise._gauss_params(10)
    src = check_rng(np.random.default_rng(36))
    y0 = p.B // (2 * p.A)  # gamma = 0 here (sigma = 10: |y| = mu = 10)
    assert p.A * y0 * y0 - p.B * y0 + p.C == 0
    ay = np.array([y0, p.y_safe + 1, 2**62], dtype=np.int64)  # gamma = 0, huge, huger
    assert discrete._gauss_accept(ay, p, src).tolist() == [True, False, False]


def test_gaussian_acceptance_frequencies():
    p = noise._gauss_params(3.25)  # sigma^2 = 169/16: gamma(y) = (|y| - 3)^2 * 16 / 338
    src = check_rng(np.random.default_rng(37))
    n = 40_000
    for y in [0, 3, 5, 12, 40]:
        hits = discrete._gauss_accept(np.full(n, y, dtype=np.int64), p, src).sum()
        assert _freq_ok(hits, n, math.exp(-((y - 3) ** 2) * 16 / 338)), y
        assert (p.A * y * y - p.B * y + p.C) * 338 == (y - 3) ** 2 * 16 * p.S


# ---------------------------------------------------------------- fixed work per draw


class CountingSource(RandomSource):
    """A seeded source that counts the words handed out and can script some of them."""

    __slots__ = ("inner", "taken", "script")

    def __init__(self, seed, script=()):
        super().__init__()
        self.inner = check_rng(np.random.default_rng(seed))
        self.taken = 0
        self.script = list(script)  # arrays handed out, in order, before random words

    def words64(self, n):
        self.taken += n
        if self.script:
            w = np.asarray(self.script.pop(0), dtype=np.uint64)
            if w.size != n:
                raise RuntimeError(f"scripted {w.size} words, asked for {n}")
            return w
        return self.inner.words64(n)


def _laplace_words(scale):
    f = noise._laplace_fraction(scale)
    return discrete.laplace_table(f.numerator, f.denominator).digits + 3


@pytest.mark.parametrize("scale", [0.7, 1, 10, 2**16, 2**40])
def test_discrete_laplace_words_per_draw_do_not_depend_on_value(scale):
    src = CountingSource(51)
    counts, values = [], []
    for _ in range(3000):
        before = src.taken
        values.append(int(discrete_laplace(scale, 1, rng=src)[0]))
        counts.append(src.taken - before)
    assert set(counts) == {_laplace_words(scale)}
    big = max(abs(v) for v in values)
    assert big > 4 * scale  # the draws did reach the tail: same words as for the centre
    # bulk draws: the words depend on the size only
    before = src.taken
    discrete_laplace(scale, 5000, rng=src)
    assert src.taken - before == 5000 * _laplace_words(scale)


@pytest.mark.parametrize("sigma", [0.7, 3.25, 1000])
def test_discrete_gaussian_words_depend_on_rounds_only(sigma):
    # each rejection round costs the same words whatever the proposal; the number of
    # rounds is independent of the accepted value (CKS Alg. 3 is a rejection sampler)
    p = noise._gauss_params(sigma)
    g = discrete.gauss_table(p.S)
    per_round = _laplace_words(Fraction(p.lap_t, p.lap_s)) + g.positions + g.high + 1
    src = CountingSource(52)
    one_round, more = [], []
    for _ in range(6000):
        before = src.taken
        v = int(discrete_gaussian(sigma, 1, rng=src)[0])
        used = src.taken - before
        assert used % per_round == 0
        (one_round if used == per_round else more).append(abs(v))
    assert len(more) > 200
    # |value| given one round vs several rounds: same distribution
    assert stats.ks_2samp(one_round, more).pvalue > 1e-4


M64 = 2**64 - 1
MID = 2**63


def _script(high_words, spare):
    """Fixed-path words of one draw: one high word per uniform, then the spare word."""
    return np.array([*high_words, spare], dtype=np.uint64)


def test_fallback_resolves_ties_and_the_tail_exactly():
    tab = discrete.laplace_table(10, 1)
    D = tab.digits
    # 1) U of digit 0 ties with F_0(3) on 128 bits (high word + spare); sign "positive"
    v3 = tab.vals[0][3]
    words = _script([v3 >> 64] + [MID] * (D - 1) + [M64, M64], v3 & M64)
    results = []
    for seed in range(400):
        src = CountingSource(seed, [words])
        results.append(int(discrete_laplace(10, 1, rng=src)[0]))
        assert src.taken > D + 3  # extra words were read to settle the tie
    assert set(results) <= {3, 4}  # digit 2 or 3, |Z| = 1 + digit
    # the continuation is exact: P[digit = 3] = 1 - frac(F_0(3) 2**128)
    frac = (thresholds._floor_bits(("cdf", 1, 10, 3), 192) - (v3 << 64)) / 2**64
    assert _freq_ok(results.count(4), len(results), 1 - frac)
    # 2) the tail uniform below q**(256**D) (> 2**-128 at scale 18/5, D = 1): |Z| > 256
    tail = discrete.laplace_table(18, 5)
    assert tail.digits == 1 and 0 < tail.ovf < 2**64
    src = CountingSource(7, [_script([MID, M64, 0], 0)])
    assert int(discrete_laplace(Fraction(18, 5), 1, rng=src)[0]) > 256
    # 3) a sign tie: U equal to the first 128 bits of P[Z < 0] = q/(1+q)
    g0 = tab.sign[0]
    signs = set()
    for seed in range(50):
        src = CountingSource(seed, [_script([MID] * D + [g0 >> 64, MID], g0 & M64)])
        signs.add(int(np.sign(discrete_laplace(10, 1, rng=src)[0])))
    assert signs == {-1, 0}
    # 4) two uniforms whose high words both meet a threshold: one takes the spare word,
    # the other fresh words, on the exact path
    for seed in range(50):
        src = CountingSource(seed, [_script([v3 >> 64] + [MID] * (D - 1) + [g0 >> 64, MID], 0)])
        v = int(discrete_laplace(10, 1, rng=src)[0])
        assert v in {-3, -4, 0} and src.taken > D + 3


def test_gaussian_fallback_on_an_acceptance_tie():
    p = noise._gauss_params(3.25)
    g = discrete.gauss_table(p.S)
    y = 12
    num = p.A * y * y - p.B * y + p.C
    v = g.vals[0][num & 255]
    # tie on digit 0; the other factors' uniforms are 2**-64: they accept
    words = _script([v >> 64] + [1] * (g.positions + g.high - 1), v & M64)
    hits = 0
    for seed in range(200):
        src = CountingSource(seed, [words])
        out = discrete._gauss_accept(np.array([y], dtype=np.int64), p, src)
        assert out.dtype == bool and out.shape == (1,) and src.taken > words.size
        hits += bool(out[0])
    # given the tie, accepted iff the continuation of U is below exp(-gamma)'s next bits
    frac = (thresholds._floor_bits(("exp", num & 255, p.S), 192) - (v << 64)) / 2**64
    assert _freq_ok(hits, 200, frac)


@pytest.mark.parametrize("d", [3, 7, 10, 1000, 2**32 - 1, 3 * 2**30, 2**20, 3 * 2**40, 3 * 2**61])
def test_integers_uniform(d):
    # 3*2**30 rejects 25% of 32-bit words and 3*2**61 12.5% of 64-bit words: the redraw paths
    src = check_rng(np.random.default_rng(37))
    x = src.integers(d, 60_000)
    assert x.dtype == np.int64 and x.min() >= 0 and x.max() < d
    bins = min(d, 30)
    counts = np.bincount((x.astype(object) * bins // d).astype(np.int64), minlength=bins)
    expected = (
        np.array(
            [((i + 1) * d + bins - 1) // bins - (i * d + bins - 1) // bins for i in range(bins)],
            dtype=float,
        )
        / d
        * x.size
    )
    assert stats.chisquare(counts, expected).pvalue > 1e-4
    if d % 8 == 0:  # low bits uniform too
        assert stats.chisquare(np.bincount(x % 8, minlength=8)).pvalue > 1e-4


def test_randbelow_big_range():
    src = check_rng(np.random.default_rng(38))
    d = 3 * 2**100
    xs = [src.randbelow(d) for _ in range(6000)]
    assert all(0 <= x < d for x in xs)
    counts = np.bincount([x * 3 // d for x in xs], minlength=3)
    assert stats.chisquare(counts).pvalue > 1e-4


def test_bits_fair():
    src = check_rng(np.random.default_rng(39))
    b = src.bits(100_001)
    assert b.dtype == bool and b.size == 100_001
    assert _freq_ok(b.sum(), b.size, 0.5)


# ---------------------------------------------------------------- parameters and rounding


def test_scale_rounding_is_upward_and_tiny():
    f = noise._laplace_fraction(0.7)
    assert f >= Fraction(0.7) and f.numerator <= 2**32
    assert (f - Fraction(0.7)) / Fraction(0.7) < Fraction(1, 2**31)
    assert noise._laplace_fraction(10) == 10 and noise._laplace_fraction(3.25) == Fraction(13, 4)
    for sigma in [0.7, 3.7, 1000.3, 2**16 + 0.25, 2**24 - 0.5]:
        p = noise._gauss_params(sigma)
        exact = Fraction(sigma) ** 2
        assert Fraction(p.a, p.b) >= exact
        assert (Fraction(p.a, p.b) - exact) / exact < Fraction(1, 2**23)


def test_large_scales_need_a_grid():
    with pytest.raises(ValueError, match=r"2\*\*48"):
        discrete_laplace(2.0**49, 3, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"2\*\*24"):
        discrete_gaussian(2.0**25, 3, rng=np.random.default_rng(0))
    x = laplace(1e20, 1000, grid=grid_for(1e20), rng=np.random.default_rng(0))
    assert 0.5e20 < np.abs(x).mean() < 2e20
    with pytest.raises(ValueError, match="grid"):
        gaussian(1e20, 3, grid=1.0, rng=np.random.default_rng(0))


# ---------------------------------------------------------------- grid helpers


def test_laplace_and_gaussian_on_grid():
    grid = 2.0**-4
    x = laplace(3.0, 50_000, grid=grid, rng=np.random.default_rng(41))
    assert x.dtype == np.float64
    assert np.array_equal(x / grid, np.round(x / grid))
    # same stream as the integer sampler at scale/grid
    k = discrete_laplace(48, 50_000, rng=np.random.default_rng(41))
    assert np.array_equal(x, k * grid)
    g = gaussian(3.0, 50_000, grid=grid, rng=np.random.default_rng(42))
    assert np.array_equal(g, discrete_gaussian(48, 50_000, rng=np.random.default_rng(42)) * grid)
    assert g.var() == pytest.approx(9.0, rel=0.03)


def test_grid_for():
    assert grid_for(1.0) == 2.0**-16
    assert grid_for(3.0) == 2.0**-15
    assert grid_for(2**16) == 1.0
    assert grid_for(65535.99) == 0.5
    for s in [1e-3, 0.1, 7.3, 1e6, 1e30]:
        g = grid_for(s)
        assert math.frexp(g)[0] == 0.5
        assert g <= s * 2**-16 < 2 * g


def test_snap_and_sensitivity_rule():
    assert snap([0.3, 1.26, -0.74, 0.25], 0.5).tolist() == [0.5, 1.5, -0.5, 0.0]
    msgs = set()
    for bad in ([1.0, np.nan], [np.inf, 2.0, 3.0]):
        with pytest.raises(ValueError, match="finite") as err:
            snap(bad, 0.5)
        msgs.add(str(err.value))
    assert len(msgs) == 1  # the message names no position of the values
    with pytest.raises(ValueError, match="power of two"):
        snap([1.0], 0.3)
    # brute-force the documented rule: c coordinates differ by total L1 <= delta
    rng = np.random.default_rng(43)
    grid, c, delta = 0.25, 3, 1.0
    worst_l1 = worst_l2 = 0.0
    for _ in range(2000):
        x = rng.uniform(-10, 10, size=8)
        d = np.zeros(8)
        d[:c] = rng.dirichlet(np.ones(c)) * delta * rng.choice([-1, 1], size=c)
        diff = snap(x + d, grid) - snap(x, grid)
        worst_l1 = max(worst_l1, np.abs(diff).sum())
        worst_l2 = max(worst_l2, np.linalg.norm(diff) - np.linalg.norm(d))
    assert worst_l1 <= snap_sensitivity(delta, grid, coords=c, norm="l1")
    assert worst_l1 > delta  # snapping really can increase the sensitivity
    assert worst_l2 <= snap_sensitivity(0.0, grid, coords=c, norm="l2")
    assert snap_sensitivity(1.0, 0.25, coords=4, norm="l2") == 1.5
    with pytest.raises(ValueError, match="norm"):
        snap_sensitivity(1.0, 0.25, norm="linf")


def test_uniform_open_interval():
    u = uniform(200_000, rng=np.random.default_rng(44))
    assert u.dtype == np.float64 and u.min() > 0 and u.max() < 1
    assert np.array_equal(u * 2**53, np.round(u * 2**53))
    assert stats.kstest(u, "uniform").pvalue > 1e-4
    s = uniform((3, 4))
    assert s.shape == (3, 4) and np.all((s > 0) & (s < 1))


# ---------------------------------------------------------------- rng handling


def test_same_seed_same_samples():
    for f, arg in [(discrete_laplace, 3.25), (discrete_gaussian, 0.7)]:
        a = f(arg, 1000, rng=np.random.default_rng(5))
        b = f(arg, 1000, rng=np.random.default_rng(5))
        c = f(arg, 1000, rng=np.random.default_rng(6))
        assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert np.array_equal(
        uniform(10, rng=np.random.default_rng(5)), uniform(10, rng=np.random.default_rng(5))
    )


def test_check_rng():
    secure = check_rng(None)
    assert isinstance(secure, RandomSource) and secure.secure
    assert check_rng(secure) is secure
    seeded = check_rng(np.random.default_rng(1))
    assert not seeded.secure
    # a checked source can be passed on and keeps its stream
    src = check_rng(np.random.default_rng(9))
    a = np.concatenate([discrete_laplace(5, 10, rng=src), discrete_laplace(5, 10, rng=src)])
    src2 = check_rng(np.random.default_rng(9))
    b = np.concatenate([discrete_laplace(5, 10, rng=src2), discrete_laplace(5, 10, rng=src2)])
    assert np.array_equal(a, b)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_processes_do_not_share_buffered_randomness():
    src = check_rng(None)
    src.words64(1)  # fills the 64 KiB buffer
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report the next words, then leave without running pytest teardown
        try:
            os.write(w, src.words64(4).tobytes())
        finally:
            os._exit(0)
    os.close(w)
    child = os.read(r, 32)
    os.close(r)
    os.waitpid(pid, 0)
    assert len(child) == 32 and child != src.words64(4).tobytes()


@pytest.mark.parametrize("bad", [42, "seed", np.random.RandomState(0), 1.5])
def test_bad_rng_raises_type_error_naming_type(bad):
    with pytest.raises(TypeError, match=type(bad).__name__):
        discrete_laplace(1.0, 3, rng=bad)
    with pytest.raises(TypeError, match=type(bad).__name__):
        uniform(3, rng=bad)


@pytest.mark.parametrize("func", [discrete_laplace, discrete_gaussian])
@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), -float("inf")])
def test_bad_scale_raises_value_error_with_value(func, bad):
    with pytest.raises(ValueError, match="positive finite") as err:
        func(bad, 3, rng=np.random.default_rng(0))
    assert repr(bad) in str(err.value)


@pytest.mark.parametrize("bad", ["1", True, None, [1.0]])
def test_bad_scale_type(bad):
    with pytest.raises(TypeError, match="real number"):
        discrete_laplace(bad, 3, rng=np.random.default_rng(0))


@pytest.mark.parametrize("grid", [3, 0.3, 0.0, -0.5, float("nan"), float("inf")])
def test_grid_must_be_power_of_two(grid):
    with pytest.raises(ValueError, match="power of two") as err:
        laplace(1.0, 3, grid=grid, rng=np.random.default_rng(0))
    assert repr(grid) in str(err.value)
    with pytest.raises(ValueError, match="power of two"):
        gaussian(1.0, 3, grid=grid, rng=np.random.default_rng(0))


def test_bad_size():
    with pytest.raises(ValueError, match="-1"):
        discrete_laplace(1.0, -1)
    with pytest.raises(TypeError, match="size"):
        discrete_laplace(1.0, 2.5)
    assert discrete_laplace(1.0, 0).shape == (0,)
    assert discrete_gaussian(1.0, (2, 3), rng=np.random.default_rng(0)).shape == (2, 3)


# ---------------------------------------------------------------- no insecure sampling in the library


FORBIDDEN_METHODS = {"laplace", "normal"}


def _fixed_seed(node):
    """A seed written into the code: a literal (42, -1, (1, 2)) or a CONSTANT name.
    Seeds derived from the caller's Generator (rng.integers(...)) are allowed."""
    if isinstance(node, ast.Constant):
        return node.value is not None
    if isinstance(node, ast.UnaryOp):
        return _fixed_seed(node.operand)
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_fixed_seed(e) for e in node.elts)
    if isinstance(node, ast.Name):
        return node.id.isupper()
    return False


def _insecure_calls(tree):
    bad = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        seeded = any(_fixed_seed(a) for a in [*node.args, *(k.value for k in node.keywords)])
        if isinstance(f, ast.Attribute):
            global_numpy = ast.unparse(f.value) in {"np.random", "numpy.random"} and f.attr not in {
                "default_rng",
                "Generator",
                "SeedSequence",
                "PCG64",
            }  # np.random.rand, np.random.seed, ...: the hidden global generator
            receiver = ast.unparse(f.value)
            ours = receiver == "noise" or receiver.endswith(
                ".noise"
            )  # matmech.privacy.noise.laplace
            if (
                (f.attr in FORBIDDEN_METHODS and not ours)
                or global_numpy
                or (f.attr == "default_rng" and seeded)
            ):
                bad.append((node.lineno, ast.unparse(node)))
        elif isinstance(f, ast.Name) and f.id == "default_rng" and seeded:
            bad.append((node.lineno, ast.unparse(node)))
    return bad


def test_library_has_no_insecure_or_seeded_sampling():
    root = pathlib.Path(noise.__file__).parents[1]  # the whole matmech package
    assert (root / "__init__.py").exists() and len(list(root.rglob("*.py"))) > 30
    found = {}
    for path in sorted(root.rglob("*.py")):
        hits = _insecure_calls(ast.parse(path.read_text(), filename=str(path)))
        if hits:
            found[path.name] = hits
    assert not found, f"insecure or seeded sampling in library code: {found}"


def test_insecure_call_detector_finds_offences():
    src = (
        "import numpy as np\n"
        "a = np.random.laplace(0, 1)\n"
        "b = rng.normal(size=3)\n"
        "c = np.random.default_rng(0)\n"
        "d = np.random.rand(3)\n"
        "e = np.random.default_rng()\n"
        "f = default_rng(seed=SEED)\n"
        "g = np.random.default_rng(int(rng.integers(2**63)))\n"
        "h = noise.laplace(1.0, 3, grid=0.5, rng=src) + matmech.privacy.noise.gaussian(1, 3, grid=1)\n"
        "i = self.rng.laplace(0.0, 1.0)\n"
    )
    assert [line for line, _ in _insecure_calls(ast.parse(src))] == [2, 3, 4, 5, 7, 10]


# -- sampler sizes are checked up front (issue 23; matmech.privacy.draws) -------------------------


def test_check_draws_refuses_what_does_not_fit_with_an_estimate():
    import tracemalloc

    from matmech.privacy import draws
    from matmech.validate import SizeError

    with pytest.raises(
        SizeError, match=r"drawing 1,000,000,000,000 laplace noise values needs about 14\.6 TiB"
    ):
        draws.check_draws(10**12, "laplace")
    fixed = draws.FIXED_BYTES
    with pytest.raises(SizeError, match="at most about 1,000 fit: draw in batches"):
        draws.check_draws(1001, "uniform", limit=fixed + 16_000)
    assert draws.check_draws(1000, "uniform", limit=fixed + 16_000) == 1000
    assert draws.check_shape_draws((10, 100), "gaussian", limit=fixed + 400_000) == 1000
    with pytest.raises(TypeError):
        draws.check_draws(True, "laplace")
    with pytest.raises(ValueError, match="kind"):
        draws.check_draws(3, "cauchy")
    # the bytes per draw bound the samplers' measured peak (the estimate is not optimistic)
    rng = np.random.default_rng(0)
    for kind, call in (
        ("laplace", lambda: noise.discrete_laplace(1e6 + 0.3, 200_000, rng=rng)),
        ("gaussian", lambda: noise.discrete_gaussian(1000.3, 200_000, rng=rng)),
        ("uniform", lambda: noise.uniform(200_000, rng=rng)),
    ):
        tracemalloc.start()
        call()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak <= draws.FIXED_BYTES + draws.BYTES_PER_DRAW[kind] * 200_000, (kind, peak)


@pytest.mark.parametrize(
    "call",
    [
        lambda src: noise.discrete_laplace(3.0, 10**12, rng=src),
        lambda src: noise.discrete_gaussian(3.0, (10**6, 10**6), rng=src),
        lambda src: noise.laplace(3.0, 10**12, grid=2.0**-10, rng=src),
        lambda src: noise.uniform(10**12, rng=src),
    ],
)
def test_samplers_refuse_what_does_not_fit_before_reading_randomness(call):
    from matmech.validate import SizeError

    src = CountingSource(0)
    with pytest.raises(SizeError, match="noise values needs about"):
        call(src)
    assert src.taken == 0
