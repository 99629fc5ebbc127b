"""The exact samplers, checked on every class of random input and against their exact
distributions at every scale they are used at (issue 21).

``sampler_exact`` explains why running the fixed-work code on both ends of every interval
between thresholds (and on the thresholds) covers all 2**128 values of each uniform.
"""

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest

import matmech as mm
from matmech import workloads as W
from matmech.privacy import discrete, noise
from sampler_exact import (
    TWO128,
    ScriptedSource,
    accept_outputs,
    chi2_p,
    digit_classes,
    digit_outputs,
    laplace_digit_pmfs,
    laplace_loss_bound,
    sign_outputs,
)

#: Discrete Laplace scales (grid units) the library uses: integer strategies (1 .. ~30),
#: the old hole's edge (255, 256), SVT / selections (~2**16), real-valued strategies
#: (~2**20), the rounding regime (> 2**32 numerator) and the limit 2**48; plus the
#: Gaussian's proposal scales (sigma**2 / round(sigma)).
LAPLACE_SCALES = [
    Fraction(1, 3),
    1,
    Fraction(18, 5),
    30,
    255,
    256,
    1000,
    2**16,
    2**20,
    Fraction(2**33 + 1, 3),
    2**48,
]
SIGMAS = [0.7, 3.25, 30, 1000, 2**16, 2**24]
#: The residual release's σ (issue 24): 1/(2σ²) on a dyadic grid (noise.gaussian_grid),
#: from below 1 to past the dyadic range (2**23.5: falls back to σ = τ), at 9 and 2 bits.
DYADIC_TAUS = [0.7, 3.7, 30.2, 1000.3, 2**16 + 0.5]


def _dyadic(tau, bits=9):
    (p,), _ = noise.gaussian_grid([tau], bits=bits)
    return p


GAUSS_PARAMS = [noise._gauss_params(s) for s in SIGMAS] + [
    _dyadic(t) for t in DYADIC_TAUS + [2**23.5]
]
#: Slack for comparing a 128-bit floor with a 100-digit Decimal value.
TOL = Fraction(TWO128, 10**90)


def _table(scale):
    f = noise._laplace_fraction(scale)
    return discrete.laplace_table(f.numerator, f.denominator)


def _exact_cdf(a: int, t: int, c: int) -> Fraction:
    """(1 - r**c) / (1 - r**256), r = exp(-a/t), to 100 significant digits (Decimal: a
    second method, independent of the interval arithmetic that built the tables)."""
    with localcontext() as ctx:
        ctx.prec = 100
        r = (-Decimal(a) / Decimal(t)).exp()
        return Fraction((1 - r**c) / (1 - r**256))


def _exact_exp(a: int, s: int) -> Fraction:
    with localcontext() as ctx:
        ctx.prec = 100
        return Fraction((-Decimal(a) / Decimal(s)).exp())


# ------------------------------------------------------------- enumeration: the digits


@pytest.mark.parametrize("scale", LAPLACE_SCALES, ids=str)
def test_every_digit_of_every_table_is_drawn_with_its_table_probability(scale):
    tab = _table(scale)
    for d in range(tab.digits):
        thresholds = tab.vals[d][1:]
        points, ties = digit_classes(thresholds)
        got = digit_outputs(tab, d, [w for w, _ in points])
        want = np.array([c for _, c in points])
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, (d, [(points[i][1], int(got[i])) for i in bad[:5]])
        # every digit value is reachable, up to those of probability below 2**-127
        # (whose thresholds round to the same 128-bit value)
        reach = sorted(set(want.tolist()))
        assert reach == list(range(len(reach)))
        if len(reach) < 256:
            a = tab.s << (8 * d)
            p_next = 1 - _exact_cdf(a, tab.t, len(reach))
            assert p_next * TWO128 < 2, (d, len(reach))
        # a tie is settled by further words, to one of the two neighbouring digits
        tie_got = digit_outputs(tab, d, [w for w, _ in ties])
        assert all(g in (c - 1, c) for g, (_, c) in zip(tie_got.tolist(), ties))


@pytest.mark.parametrize("scale", LAPLACE_SCALES, ids=str)
def test_digit_tables_are_the_exact_truncated_geometric(scale):
    # T[c] = floor(F_d(c) 2**128) with F_d the CDF of digit d (a geometric with ratio
    # q**(256**d) truncated to [0, 256)), so P[digit = c] = (T[c+1] - T[c]) / 2**128
    # is exact to 2**-128.
    tab = _table(scale)
    for d in range(tab.digits):
        a = tab.s << (8 * d)
        for c in (1, 2, 127, 128, 254, 255):
            exact = _exact_cdf(a, tab.t, c) * TWO128  # to ~1e-100 relative
            assert exact - 1 - TOL < tab.vals[d][c] <= exact + TOL, (d, c)
    g0, g1 = tab.sign
    with localcontext() as ctx:
        ctx.prec = 100
        q = (-Decimal(tab.s) / Decimal(tab.t)).exp()
        assert g0 == math.floor(Fraction(q / (1 + q)) * TWO128)
        assert g1 == math.floor(Fraction(1 / (1 + q)) * TWO128)


@pytest.mark.parametrize("scale", [1, 30, 256, 2**20])
def test_exact_path_gives_the_same_digits_as_the_fixed_path(scale):
    # the slow exact path (ties, two high-word ties in one draw) counts the same thresholds
    tab = _table(scale)
    D = tab.digits
    for d in range(D):
        points, _ = digit_classes(tab.vals[d][1:])
        fast = digit_outputs(tab, d, [w for w, _ in points])
        for (w, c), f in zip(points[::7], fast[::7]):
            wh = [tab.vals[j][1] >> 65 for j in range(D)] + [(1 << 64) - 1, (1 << 64) - 1]
            wh[d] = w >> 64
            z = discrete._laplace_exact(tab, wh, w & ((1 << 64) - 1), ScriptedSource([], seed=1))
            assert z - 1 == c << (8 * d) and int(f) == c


@pytest.mark.parametrize("scale", LAPLACE_SCALES, ids=str)
def test_sign_and_zero_are_decided_on_every_input_class(scale):
    tab = _table(scale)
    g0, g1 = tab.sign
    words = [0, g0 - 1, g0 + 1, g1 - 1, g1 + 1, TWO128 - 1]
    want = [-1, -1, 0, 0, 1, 1]
    keep = [i for i, w in enumerate(words) if 0 <= w < TWO128 and not (i == 1 and g0 == 0)]
    got = sign_outputs(tab, [words[i] for i in keep])
    assert got.tolist() == [want[i] for i in keep]
    assert set(sign_outputs(tab, [g0, g0, g0, g1, g1, g1]).tolist()) <= {-1, 0, 1}


@pytest.mark.parametrize("scale", [Fraction(18, 5), 30, 2**20])
def test_the_tail_event_is_decided_on_both_sides(scale):
    tab = _table(scale)
    D = tab.digits
    below, above = max(tab.ovf - 1, 0), tab.ovf + 1
    out = []
    for w in (below, above):
        rows = np.array(
            [tab.vals[j][1] >> 65 for j in range(D)]
            + [(1 << 64) - 1, w >> 64, w & ((1 << 64) - 1)],
            dtype=np.uint64,
        )
        out.append(int(discrete._dlaplace_block(tab, 1, ScriptedSource(rows, seed=3))[0]))
    if tab.ovf > 0:
        assert out[0] > 256**D  # U < q**(256**D): beyond the last digit
    assert out[1] == 1  # otherwise not


# --------------------------------------------------- enumeration: the Gaussian's test


@pytest.mark.parametrize("p", GAUSS_PARAMS, ids=lambda p: f"{p.a}/{p.b}")
def test_every_acceptance_factor_on_every_input_class(p):
    tab = discrete.gauss_table(p.S)
    for d in range(tab.positions):
        nums, words, want = [], [], []
        for c in range(1, 256):
            T = tab.vals[d][c]
            exact = _exact_exp(c << (8 * d), p.S) * TWO128
            assert exact - 1 - TOL < T <= exact + TOL, (d, c)  # exp(-c 256**d / S)
            for w, acc in ((0, T > 0), (T - 1, True), (T + 1, False), (TWO128 - 1, False)):
                if 0 <= w < TWO128 and (w < T or w > T):
                    nums.append(c << (8 * d))
                    words.append(w)
                    want.append(w < T)
        got = accept_outputs(tab, nums, words, d)
        assert got.tolist() == want, d
        ties = [c << (8 * d) for c in range(1, 256)]
        tw = [tab.vals[d][c] for c in range(1, 256)]
        keep = [i for i, w in enumerate(tw) if w > 0]
        tie_got = accept_outputs(tab, [ties[i] for i in keep], [tw[i] for i in keep], d)
        assert tie_got.dtype == bool and tie_got.size == len(keep)
    if tab.high:  # digits above the table: threshold below 2**-128, reject
        L = tab.positions
        got = accept_outputs(tab, [1 << (8 * L)] * 3, [1 << 64, 5 << 64, TWO128 - 1], L)
        assert not got.any()


def test_acceptance_of_a_zero_numerator_is_certain():
    p = noise._gauss_params(30)
    tab = discrete.gauss_table(p.S)
    assert accept_outputs(tab, [0, 0], [0, TWO128 - 1], 0).all()


# ----------------------------------------- the sampler's privacy loss, from its tables


@pytest.mark.parametrize("scale", [1, 30, 255, 256, 1000, 2**16, 2**20, 2**48], ids=str)
def test_privacy_loss_of_the_laplace_as_implemented(scale):
    # P[Z = z] / P[Z = z + shift] of the implemented sampler (digit pmfs read off the code
    # by enumeration) never exceeds the ideal exp(shift / scale) by more than rounding
    tab = _table(scale)
    ideal_per_unit = tab.s / tab.t
    for eps in (0.1, 1.0):
        shift = max(1, round(eps / ideal_per_unit))
        bound = laplace_loss_bound(tab, shift)
        assert bound <= shift * ideal_per_unit * (1 + 1e-6) + 1e-12, (eps, bound)
        assert bound >= shift * ideal_per_unit * (1 - 1e-6)


def _fold_digit_255(tab, monkeypatch):
    """The issue-21 defect as a fixture: the search starts at the sentinel T[0] and counts
    one entry short, so digit 255 is never drawn (254 twice as often)."""

    def broken(th, tl, base, wh, wl):
        pos = np.repeat(base, wh.shape[-1], axis=1)
        for h in (128, 64, 32, 16, 8, 4, 2, 1):
            i = pos + (h - 1)
            pos += ((th[i] < wh) | ((th[i] == wh) & (tl[i] <= wl))) * h
        return pos - 1

    monkeypatch.setattr(discrete, "_digit_search", broken)


def test_enumeration_catches_the_digit_255_defect(monkeypatch):
    tab = _table(1000)
    _fold_digit_255(tab, monkeypatch)
    points, _ = digit_classes(tab.vals[0][1:])
    got = digit_outputs(tab, 0, [w for w, _ in points])
    assert 255 not in got.tolist()
    wrong = {c for (_, c), g in zip(points, got.tolist()) if g != c}
    assert wrong == {255}  # every point of the top interval goes to 254


def test_audit_rejects_the_sampler_that_never_draws_digit_255(monkeypatch):
    tab = _table(1000)
    _fold_digit_255(tab, monkeypatch)
    assert laplace_loss_bound(tab, 1000) == math.inf
    pmfs = laplace_digit_pmfs(tab)
    assert pmfs[0][255] == 0


def _gauss_log_pmf(p, span):
    """log P[Z = k], k in [-span, span], of the discrete Gaussian of params ``p`` *as
    implemented*: the discrete Laplace proposal's digit pmfs read off its tables, times the
    acceptance probability of each |k| from the acceptance tables (floor(exp(-.) 2**128) /
    2**128)."""
    lap = discrete.laplace_table(p.lap_t, p.lap_s)
    pmfs = laplace_digit_pmfs(lap)
    k = np.arange(0, span + 1, dtype=np.int64)
    y = np.maximum(k - 1, 0)
    logq = np.zeros(k.size)
    for d, pmf in enumerate(pmfs):
        pd = np.log(np.array([max(float(v / TWO128), 1e-320) for v in pmf]))
        logq += pd[(y >> (8 * d)) & 255]
    logq += math.log1p(-lap.ovf / TWO128)
    g0, g1 = lap.sign
    log_side = math.log((TWO128 - g1) / TWO128)  # P[Z > 0] = P[Z < 0] up to 2**-128
    log_zero = math.log((g1 - g0) / TWO128)
    logprop = np.where(k == 0, log_zero, log_side + logq)
    tab = discrete.gauss_table(p.S)
    num = (k * p.A - p.B) * k + p.C
    logacc = np.zeros(k.size)
    for d in range(tab.positions):
        # a factor's probability is its table entry / 2**128 where that entry has >= 100
        # significant bits; below, only tie points (settled exactly) remain: exp(-c 256**d/S)
        row = np.array(
            [0.0]
            + [
                math.log(v / TWO128) if v >= 1 << 100 else -(c << (8 * d)) / p.S
                for c, v in enumerate(tab.vals[d][1:], start=1)
            ]
        )
        logacc += row[(num >> (8 * d)) & 255]
    if tab.high:  # digits above the table: a factor below exp(-89), decided on ties only
        hi = (num >> (8 * tab.positions)) != 0
        logacc = np.where(hi, -num.astype(np.float64) / p.S, logacc)
    half = logprop + logacc
    full = np.concatenate([half[:0:-1], half])
    return full - np.logaddexp.reduce(full), p


@pytest.mark.parametrize(
    "p",
    [noise._gauss_params(s) for s in (0.7, 3.25, 30, 1000, 2**16)]
    + [_dyadic(t) for t in DYADIC_TAUS]
    + [_dyadic(30.2, bits=2), _dyadic(1000.3, bits=16)],
    ids=lambda p: f"{p.a}/{p.b}",
)
def test_gaussian_as_implemented_matches_the_ideal_and_its_renyi_bound(p):
    s2 = Fraction(p.a, p.b)
    sigma = math.sqrt(s2)
    span = int(40 * sigma) + 40
    logp, p = _gauss_log_pmf(p, span)
    k = np.arange(-span, span + 1, dtype=np.float64)
    ideal = -k * k / (2 * float(s2))
    ideal -= np.logaddexp.reduce(ideal)
    mass = ideal > -230  # P >= 2**-332: every factor's table entry has >= 100 bits
    assert np.max(np.abs(logp[mass] - ideal[mass])) < 1e-9
    # Renyi divergence of a shift by delta: at most alpha delta**2 / (2 sigma**2) (CKS 2020)
    for shift in {1, max(1, round(sigma))}:
        for alpha in (1.5, 2.0, 8.0, 32.0):
            a, b = logp[shift:], logp[:-shift]
            keep = np.isfinite(a) & np.isfinite(b)
            div = np.logaddexp.reduce(alpha * a[keep] + (1 - alpha) * b[keep]) / (alpha - 1)
            assert div <= alpha * shift**2 / (2 * float(s2)) * (1 + 1e-6) + 1e-12


# ------------------------------------- distribution tests by value mod 256 and mod 2**k


def _laplace_mod_pmf(scale, m):
    """P[|Z| mod m = r] for the discrete Laplace with ratio q = exp(-1/scale) (closed form)."""
    q = math.exp(-1.0 / float(scale))
    c = (1 - q) / (1 + q)
    qm = q**m
    r = np.arange(m, dtype=np.float64)
    p = 2 * c * q**r / (1 - qm)
    p[0] = c * (1 + 2 * qm / (1 - qm))
    return p / p.sum()


def _gauss_mod_pmf(sigma, m):
    """P[Z mod m = r] of the discrete Gaussian (direct sum over +-40 sigma)."""
    span = int(40 * sigma) + m
    k = np.arange(-span, span + 1)
    w = np.exp(-(k.astype(np.float64) ** 2) / (2 * sigma**2))
    out = np.bincount(k % m, weights=w, minlength=m)
    return out / out.sum()


def _chi2(values, pmf):
    """Chi-square p-value of ``values`` against ``pmf`` (rare cells pooled, as in
    benchmarks/sampler_digits.py)."""
    return chi2_p(np.bincount(values, minlength=pmf.size), pmf * values.size)


N_MOD = 400_000


@pytest.mark.parametrize("scale", [1, 30, 255, 256, 1000, 2**16, 2**20], ids=str)
def test_discrete_laplace_mod_256_and_mod_2k(scale):
    z = noise.discrete_laplace(scale, N_MOD, rng=np.random.default_rng(scale % 997))
    a = np.abs(z)
    assert _chi2(a % 256, _laplace_mod_pmf(scale, 256)) > 1e-4
    for k in (1, 4, 9, 12):
        assert _chi2(a % 2**k, _laplace_mod_pmf(scale, 2**k)) > 1e-4, k
    # the multiples of 256 (the old hole): observed vs exact within 5 standard errors
    p256 = _laplace_mod_pmf(scale, 256)[0] - (1 - math.exp(-1 / scale)) / (1 + math.exp(-1 / scale))
    hits = np.count_nonzero((a % 256 == 0) & (a > 0))
    assert abs(hits - N_MOD * p256) <= 5 * math.sqrt(N_MOD * p256 * (1 - p256)) + 3


@pytest.mark.parametrize("scale", [256, 1000, 2**16, 2**20], ids=str)
def test_mod_256_test_rejects_the_digit_255_defect(scale, monkeypatch):
    _fold_digit_255(_table(scale), monkeypatch)
    z = noise.discrete_laplace(scale, N_MOD, rng=np.random.default_rng(5))
    assert _chi2(np.abs(z) % 256, _laplace_mod_pmf(scale, 256)) < 1e-12


@pytest.mark.parametrize("sigma", [1, 30, 255, 256, 1000, 2**16, 2**20], ids=str)
def test_discrete_gaussian_mod_256(sigma):
    z = noise.discrete_gaussian(sigma, N_MOD // 2, rng=np.random.default_rng(sigma % 991))
    m = 256
    # for sigma >= 2**16 the residues are uniform to within exp(-2 pi**2 sigma**2 / m**2)
    pmf = _gauss_mod_pmf(sigma, m) if sigma < 2**16 else np.full(m, 1.0 / m)
    assert _chi2(z % m, pmf) > 1e-4


# ----------------------------------------------------------- the reproducers


def test_multiples_of_256_occur_at_their_exact_rate():
    z = noise.discrete_laplace(1000.0, 2_000_000, rng=np.random.default_rng(21))
    nz = z[z != 0]
    q = math.exp(-1 / 1000)
    exact = (q**256 / (1 - q**256)) / (q / (1 - q))
    frac = np.mean(nz % 256 == 0)
    assert abs(frac - exact) < 5 * math.sqrt(exact / nz.size)


def test_identity_release_on_neighbours_has_no_impossible_event():
    # eps = 0.001 on identity: scale 1000 on the integer grid. Before the fix, no answer
    # on x = 0 was a non-zero multiple of 256 (probability 0) while on x = 1 about 0.5% were.
    n = 20_000
    W1 = W.identity(n)
    rel0 = mm.release(np.zeros(n), W1, 0.001, strategy="identity", rng=np.random.default_rng(3))
    assert rel0.measurement.grid == 1
    vals = np.asarray(rel0.answers)
    assert np.max(np.abs(vals - np.rint(vals))) < 1e-6
    a = np.abs(np.rint(vals).astype(np.int64))
    q = math.exp(-1 / 1000)
    exact = (1 - q) / (1 + q) * 2 * q**256 / (1 - q**256)
    hits = np.count_nonzero((a % 256 == 0) & (a > 0))
    assert abs(hits - n * exact) <= 5 * math.sqrt(n * exact) + 3
