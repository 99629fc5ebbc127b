"""The sampler tables built a row at a time (issue 24 item 5) are bit for bit those of the
former one-entry-at-a-time Python-int builder (``sampler_exact.oracle_*``), at every scale
kind the library uses; the table cache; the seeded source's faster word reads."""

from fractions import Fraction

import numpy as np
import pytest

from matmech.privacy import discrete, noise, thresholds
from matmech.privacy.randomness import check_rng
from sampler_exact import digit_classes, digit_outputs, oracle_gauss_vals, oracle_laplace_vals


def _snapped(lo: float, hi: float, count: int, bits: int = 9) -> list[float]:
    """σ on a geometric grid rounded up to ``bits`` significant bits (the residual path's
    ``scale_bits``)."""
    f, e = np.frexp(np.geomspace(lo, hi, count))
    return sorted({float(v) for v in np.ldexp(np.ceil(np.ldexp(f, bits)), e - bits)})


#: σ < 1 (proposal scale 1, S = 2ab), 1 <= σ <= 2**24 (S up to 2**49, 7 acceptance rows),
#: plus the σ the enumeration tests use.
SIGMAS = _snapped(0.05, 2.0**24, 90) + [0.7, 3.25, 30, 255, 256, 1000, 12345.678, 2**16, 2**24]
#: Laplace scales t/s: fractions, the rounding regime (> 2**32 numerator), up to 2**48.
SCALES = [
    Fraction(1, 3),
    Fraction(18, 5),
    Fraction(2**33 + 1, 3),
    Fraction(7, 2**20),
    Fraction(3**20, 2**9),
    *[Fraction(2) ** k for k in range(-4, 49, 4)],
    *_snapped(0.4, 2.0**47, 25),
]


@pytest.mark.parametrize("sigma", SIGMAS, ids=str)
def test_gaussian_tables_equal_the_python_int_builder(sigma):
    p = noise._gauss_params(sigma)
    g = thresholds._build_gauss(p.S)
    assert g.vals == oracle_gauss_vals(p.S, g.positions)
    lap = thresholds._build_laplace(p.lap_t, p.lap_s)
    assert lap.vals == oracle_laplace_vals(p.lap_t, p.lap_s, lap.digits)
    # the uint64 words the samplers read are the same numbers
    assert all(int(h) << 64 | int(lo) == v for h, lo, v in zip(g.th, g.tl, sum(g.vals, ())))


@pytest.mark.parametrize("scale", SCALES, ids=str)
def test_laplace_tables_equal_the_python_int_builder(scale):
    f = noise._laplace_fraction(scale)
    t, s = f.numerator, f.denominator
    tab = thresholds._build_laplace(t, s)
    assert tab.vals == oracle_laplace_vals(t, s, tab.digits)
    assert tab.th.dtype == np.uint64 and tab.th.shape == (256 * tab.digits,)
    # sign/zero and tail thresholds (from the digits' enclosures) are the exact floors
    exact = [("neg", s, t), ("nonpos", s, t), ("exp", s << (8 * tab.digits), t)]
    assert (*tab.sign, tab.ovf) == tuple(thresholds._floor_bits(k, 128) for k in exact)


@pytest.mark.parametrize("work", [130, 136])
def test_entries_the_bounds_cannot_decide_are_computed_exactly(work, monkeypatch):
    # at a working precision barely above 128 bits most bounds disagree on the floor: those
    # entries take the exact path, and the tables are still the exact floors
    monkeypatch.setattr(thresholds, "_WORK", work)
    calls = []
    exact = thresholds._floor_bits
    monkeypatch.setattr(
        thresholds, "_floor_bits", lambda key, n: calls.append(key) or exact(key, n)
    )
    for sigma in (0.7, 30, 1000):
        p = noise._gauss_params(sigma)
        g = thresholds._build_gauss(p.S)
        assert g.vals == oracle_gauss_vals(p.S, g.positions)
        lap = thresholds._build_laplace(p.lap_t, p.lap_s)
        assert lap.vals == oracle_laplace_vals(p.lap_t, p.lap_s, lap.digits)
    assert sum(k[0] == "cdf" for k in calls) > 50 and sum(k[0] == "exp" for k in calls) > 50


def test_a_cdf_row_with_an_undecided_denominator_is_computed_exactly():
    # 1 - r**256 is never within 2**-_WORK of 0 at scales <= 2**48; were its enclosure to
    # reach 0, every entry of the row would be computed exactly
    lo, _ = thresholds._exp_neg(256 * 5, 1000, thresholds._WORK)
    row = thresholds._cdf_row(5, 1000, (lo, 1 << thresholds._WORK))
    want = oracle_laplace_vals(1000, 5, 1)[0][1:]
    assert [int(h) << 64 | int(lo) for h, lo in row] == list(want)


def test_entries_known_in_advance_are_the_exact_floors():
    # r**c <= e**-89: factor 0; c a >= 90 t: CDF entry 2**128 - 1 (checked by the oracle
    # on rows that have them)
    p = noise._gauss_params(30)
    g = thresholds._build_gauss(p.S)
    assert g.positions == 3 and g.vals[2][3:] == (0,) * 253  # exp(-c 65536/1800), c >= 3
    lap = thresholds._build_laplace(30, 1)
    assert lap.vals[1][11:] == (2**128 - 1,) * 245  # c 256 >= 90 * 30
    assert g.vals == oracle_gauss_vals(p.S, 3) and lap.vals == oracle_laplace_vals(30, 1, 2)


def test_the_cache_returns_the_table_of_the_exact_scale():
    thresholds.TABLES.clear()
    a = discrete.laplace_table(30, 1)
    assert discrete.laplace_table(30, 1) is a
    assert discrete.laplace_table(60, 2) is not a  # the same ratio, another exact key
    g = discrete.gauss_table(1800)
    assert discrete.gauss_table(1800) is g and discrete.gauss_table(1801) is not g
    tables = [a, discrete.laplace_table(60, 2), g, discrete.gauss_table(1801)]
    assert len(thresholds.TABLES) == 4
    assert thresholds.TABLES.nbytes == sum(t.nbytes for t in tables)


def test_the_cache_drops_the_least_recently_used_beyond_its_bytes():
    size = {S: thresholds._build_gauss(S).nbytes for S in (2, 3, 4, 5)}  # 4, 8, 8, 8 KiB
    limit = size[2] + size[3] + size[4]
    cache = thresholds._TableCache(limit)
    built = []

    def build(S):
        built.append(S)
        return thresholds._build_gauss(S)

    for S in (2, 3, 4):
        cache.get(("gauss", S), lambda S=S: build(S))
    cache.get(("gauss", 2), lambda: build(2))  # a hit: 2 is now the most recent
    cache.get(("gauss", 5), lambda: build(5))  # evicts 3, the least recently used
    assert built == [2, 3, 4, 5] and len(cache) == 3 and cache.nbytes <= limit
    cache.get(("gauss", 2), lambda: build(2))
    cache.get(("gauss", 3), lambda: build(3))  # rebuilt
    assert built == [2, 3, 4, 5, 3]
    big = thresholds._build_gauss(2**40)  # larger than the bound alone: kept, the rest dropped
    cache.get(("gauss", 2**40), lambda: big)
    assert len(cache) == 1 and cache.nbytes == big.nbytes


def test_draws_read_the_cached_tables():
    thresholds.TABLES.clear()
    z = noise.discrete_gaussian(30, 1000, rng=np.random.default_rng(1))
    n = len(thresholds.TABLES)
    assert n == 2  # the proposal's Laplace table and the acceptance table
    assert np.array_equal(z, noise.discrete_gaussian(30, 1000, rng=np.random.default_rng(1)))
    assert len(thresholds.TABLES) == n


BIT_GENERATORS = [np.random.PCG64, np.random.PCG64DXSM, np.random.Philox, np.random.SFC64]


@pytest.mark.parametrize("bg", [*BIT_GENERATORS, np.random.MT19937], ids=lambda b: b.__name__)
def test_seeded_words_are_the_generators_uint64_integers(bg):
    # random_raw is used where it yields exactly integers(0, 2**64, dtype=uint64)
    src = check_rng(np.random.Generator(bg(11)))
    ref = np.random.Generator(bg(11))
    sizes = [3, 5, 8192, 1, 20000, 7]
    got = np.concatenate([src._generate(n) for n in sizes])
    want = np.concatenate([ref.integers(0, 1 << 64, size=n, dtype=np.uint64) for n in sizes])
    assert np.array_equal(got, want)
    assert src._raw == (bg in BIT_GENERATORS)
    # and the generator is left in the same state
    assert src._rng.integers(0, 2**62) == ref.integers(0, 2**62)


@pytest.mark.parametrize("scale", [Fraction(1, 3), 1, 30, 1000, 2**16, 2**48], ids=str)
def test_the_all_thresholds_search_gives_the_binary_searchs_digits(scale, monkeypatch):
    # a few draws compare with every threshold instead of searching: on every input class
    # (both ends of every interval between thresholds, and the thresholds) the same digit
    f = noise._laplace_fraction(scale)
    tab = discrete.laplace_table(f.numerator, f.denominator)
    for d in range(tab.digits):
        points, ties = digit_classes(tab.vals[d][1:])
        words = [w for w, _ in points + ties]
        monkeypatch.setattr(discrete, "_BROADCAST", 0)
        binary = digit_outputs(tab, d, words)
        monkeypatch.setattr(discrete, "_BROADCAST", len(words))
        assert np.array_equal(digit_outputs(tab, d, words), binary), d
        assert np.array_equal(binary[: len(points)], [c for _, c in points])
