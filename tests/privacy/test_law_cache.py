"""Interval laws cached per strategy (issue 32): the law of a release's intervals depends on
the workload rows, the strategy and the noise only, so it is kept under a content fingerprint
of them. Second methods: the uncached law computed afresh, and the moments of each row
computed one by one (the vectorised moment path of ``law_intervals``)."""

import math
import threading

import numpy as np
import pytest
from scipy.special import ndtri

import matmech as mm
from matmech import strategies as S
from matmech import workloads as wl
from matmech.error import noise_weights
from matmech.linalg.storage import fingerprint
from matmech.privacy import confidence as C
from matmech.privacy.noise import discrete_laplace_variance


@pytest.fixture(autouse=True)
def _empty_cache():
    C.clear_laws()
    yield
    C.clear_laws()


def _uncached(rel, level):
    m = rel.measurement
    return C.law_intervals(noise_weights(rel.workload, m.strategy), m.noise, m.scale, m.grid, level)


def _close(a, b):
    np.testing.assert_allclose(a.half, b.half, rtol=1e-12)
    np.testing.assert_allclose(a.coverage, b.coverage, rtol=1e-12)
    np.testing.assert_array_equal(a.method, b.method)


def _same(a, b):
    np.testing.assert_array_equal(a.half, b.half)
    np.testing.assert_array_equal(a.coverage, b.coverage)
    np.testing.assert_array_equal(a.method, b.method)


def test_cached_law_equals_the_uncached_one_and_serves_a_second_release():
    W = wl.all_range(16)
    A = mm.optimize(W, 1.0, bound=False).strategy
    x = np.arange(16) % 5
    first = mm.release(x, W, 1.0, strategy=A, rng=np.random.default_rng(1))
    law = first.interval_law(0.9)
    _close(law, _uncached(first, 0.9))
    C.clear_laws()  # computed afresh: exactly the cached law
    law = mm.release(x, W, 1.0, strategy=A, rng=np.random.default_rng(3)).interval_law(0.9)
    _same(law, first.interval_law(0.9))
    # another release of the same plan on other data: the same law, not recomputed
    second = mm.release(x[::-1].copy(), W, 1.0, strategy=A, rng=np.random.default_rng(2))
    assert second.interval_law(0.9) is law
    assert not np.array_equal(first.answers, second.answers)  # the answers are not shared
    lo, hi = second.interval(0.9)
    np.testing.assert_array_equal(hi - second.answers, law.half)
    # another level is another law
    assert second.interval_law(0.95) is not law
    _close(second.interval_law(0.95), _uncached(second, 0.95))


def test_the_key_changes_with_the_strategy_the_noise_and_the_rows():
    W = wl.all_range(8)
    x = np.ones(8, dtype=np.int64)
    H2, H4 = S.hierarchical(8, 2), S.hierarchical(8, 4)
    assert fingerprint(H2) != fingerprint(H4)
    assert fingerprint(H2) == fingerprint(S.hierarchical(8, 2))
    assert fingerprint(wl.prefix(8)) != fingerprint(W)
    a = mm.release(x, W, 1.0, strategy=H2, rng=np.random.default_rng(0))
    b = mm.release(x, W, 1.0, strategy=H4, rng=np.random.default_rng(0))
    c = mm.release(x, W, 0.5, strategy=H2, rng=np.random.default_rng(0))  # other scale
    d = mm.release(x, wl.prefix(8), 1.0, strategy=H2, rng=np.random.default_rng(0))
    laws = [r.interval_law(0.95) for r in (a, b, c, d)]
    assert len({id(law) for law in laws}) == 4
    for r, law in zip((a, b, c, d), laws):
        _close(law, _uncached(r, 0.95))


def test_the_cache_keeps_at_most_its_byte_bound(monkeypatch):
    calls = []

    def law(k, m):
        def compute():
            calls.append(k)
            half = np.full(m, float(k))
            return C.IntervalLaw(0.95, half, np.full(m, 0.95), np.full(m, "exact", dtype=object))

        return compute

    one = law(0, 100)().nbytes
    calls.clear()
    monkeypatch.setattr(C, "MAX_CACHED_BYTES", 3 * one)
    for k in range(5):
        C.cached_law(("k", k), law(k, 100))
    assert C.cached_bytes() <= 3 * one and C.cached_bytes() == 3 * one
    C.cached_law(("k", 4), law(4, 100))  # kept: not recomputed
    C.cached_law(("k", 0), law(0, 100))  # evicted (least recently used): recomputed
    assert calls == [0, 1, 2, 3, 4, 0]
    big = C.cached_law(("big",), law(9, 1000))  # larger than the bound: returned, not kept
    assert big.half[0] == 9.0 and C.cached_bytes() <= 3 * one
    C.cached_law(("big",), law(9, 1000))
    assert calls[-2:] == [9, 9]


def test_threads_share_one_bounded_cache(monkeypatch):
    monkeypatch.setattr(C, "MAX_CACHED_BYTES", 4 * 24 * 50)
    out, errors = {}, []

    def work(i):
        try:
            for k in range(20):
                key = ("t", (i + k) % 7)
                got = C.cached_law(
                    key,
                    lambda k=key[1]: C.IntervalLaw(
                        0.95, np.full(50, float(k)), np.ones(50), np.full(50, "exact", dtype=object)
                    ),
                )
                out[(i, k)] = got.half[0] == float(key[1])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and all(out.values()) and len(out) == 80
    assert C.cached_bytes() <= 4 * 24 * 50


def test_rows_beyond_the_exact_profiles_get_their_own_moments(monkeypatch):
    """Rows past MAX_PROFILES distinct weight profiles: the normal or Cornish–Fisher quantile
    of their own weights, as a row-by-row computation gives, coverage never NaN."""
    monkeypatch.setattr(C, "MAX_PROFILES", 2)
    rng = np.random.default_rng(3)
    c = rng.uniform(0.1, 1.0, size=(9, 200))
    c[:4, 0] = 40.0  # one dominant draw: heavy tails (Cornish–Fisher)
    c[4:] = 1.0  # 200 equal draws: close to normal; rows 4..8 share one profile
    c[:2, 3:] = 0.0  # rows 0 and 1: three draws, a cheap binned convolution
    t, level = 2.0, 0.95
    law = C.law_intervals(c, "discrete_laplace", t, 1.0, level)
    assert law.counts()["convolution"] == 2  # rows 0 and 1: the first two profiles
    var = discrete_laplace_variance(t)
    kurt = C.excess_kurtosis("discrete_laplace", t)
    z = float(ndtri(0.5 + level / 2))
    methods = set()
    for i in range(2, 9):
        a = np.round(c[i], 12)
        s2 = var * float((a * a).sum())
        k4 = kurt * var * var * float((a**4).sum()) / (s2 * s2)
        if C.edgeworth_error(k4, level) <= C.NORMAL_TOLERANCE:
            want = (z * math.sqrt(s2), C.edgeworth_coverage(k4, level), "normal")
        else:
            want = ((z + k4 * (z**3 - 3 * z) / 24.0) * math.sqrt(s2), level, "cornish-fisher")
        assert law.half[i] == pytest.approx(want[0], rel=1e-12)
        assert law.coverage[i] == pytest.approx(want[1], abs=1e-12)
        assert law.method[i] == want[2]
        methods.add(want[2])
    assert methods == {"normal", "cornish-fisher"}
    assert not np.isnan(law.coverage).any()
