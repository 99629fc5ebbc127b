"""Behaviour, calibration, accuracy and input validation of matmech.svt.

Privacy itself is tested statistically in test_privacy_audit.py.  Formulas
and numbers come from Lyu, Su, Li (VLDB 2017) [LSL17], Dwork-Roth [DR14] as
quoted there and in the Cummings notes, and the Machanavajjhala SVT slides.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import integrate

from matmech import svt
from matmech.privacy import noise
from privacy_audit import clopper_pearson_lower


def gen(seed=0):
    return np.random.default_rng(seed)


def lap_sf(x, b):
    """P[L >= x] for L ~ Laplace(b) (continuous)."""
    return 0.5 * math.exp(-x / b) if x >= 0 else 1.0 - 0.5 * math.exp(x / b)


def p_above(t, b_query, b_threshold):
    """P[nu - rho >= t], nu ~ Lap(b_query), rho ~ Lap(b_threshold): one query's chance to be reported."""

    def f(z):
        return math.exp(-abs(z) / b_threshold) / (2 * b_threshold) * lap_sf(t + z, b_query)

    lim = 60 * b_threshold
    return integrate.quad(f, -lim, lim, points=[0.0, -t], limit=200)[0]


# --------------------------------------------------------------------------
# Calibration ([LSL17] Alg. 7, Eq. (12), Sec. 4.3; Alg. 2)
# --------------------------------------------------------------------------
@pytest.mark.parametrize("c", [1, 2, 25, 300])
@pytest.mark.parametrize("monotonic", [False, True])
def test_optimal_ratio_is_eq_12(c, monotonic):
    expected = (c if monotonic else 2 * c) ** (2 / 3)
    assert math.isclose(svt.optimal_ratio(c, monotonic=monotonic), expected)
    b = svt.svt_budget(c=c, eps=0.7, monotonic=monotonic)
    assert math.isclose(b.eps_queries / b.eps_threshold, expected, rel_tol=1e-12)


@pytest.mark.parametrize("ratio", [1.0, 3.0, 0.25, "optimal"])
@pytest.mark.parametrize("eps_answer", [0.0, 0.3])
def test_budget_split_sums_to_eps(ratio, eps_answer):
    b = svt.svt_budget(c=5, eps=1.3, ratio=ratio, eps_answer=eps_answer)
    assert math.isclose(b.eps_threshold + b.eps_queries + b.eps_answer, 1.3, rel_tol=1e-15)
    assert b.eps == 1.3 and b.eps_answer == eps_answer
    if ratio != "optimal":
        assert math.isclose(b.eps_queries / b.eps_threshold, ratio, rel_tol=1e-12)


@pytest.mark.parametrize("monotonic", [False, True])
def test_noise_scales_follow_alg7(monotonic):
    c, eps, d = 4, 0.9, 2.5
    b = svt.svt_budget(
        c=c,
        eps=eps,
        sensitivity=d,
        monotonic=monotonic,
        ratio=2.0,
        eps_answer=0.2,
        integer_values=True,
    )
    e1, e2 = 0.7 / 3, 0.7 * 2 / 3
    assert b.sensitivity == d
    # Scales are rounded UP to whole grid steps: at most 2**-16 relative.
    tol = dict(rel_tol=2.0**-15)
    assert math.isclose(b.threshold_scale, d / e1, **tol) and b.threshold_scale >= d / e1
    k = 1 if monotonic else 2
    assert math.isclose(b.query_scale, k * c * d / e2, **tol) and b.query_scale >= k * c * d / e2
    assert math.isclose(b.answer_scale, c * d / 0.2, **tol) and b.answer_scale >= c * d / 0.2
    for s in (b.threshold_scale, b.query_scale, b.answer_scale):
        assert (s / b.grid).is_integer()


def test_grid_is_a_small_power_of_two_and_float_values_pay_one_grid_step():
    b_int = svt.svt_budget(c=3, eps=1.0, integer_values=True)
    b_flt = svt.svt_budget(c=3, eps=1.0, integer_values=False)
    g = b_int.grid
    assert g <= 1.0 and math.frexp(g)[0] == 0.5
    assert g <= b_int.threshold_scale * 2.0**-16
    assert b_int.sensitivity == 1.0 and b_flt.sensitivity == 1.0 + g
    assert b_flt.query_scale > b_int.query_scale
    # The result reports the calibration actually used.
    r_int = svt.sparse_vector(np.zeros(5, dtype=np.int64), 1.0, c=3, eps=1.0, rng=gen())
    r_flt = svt.sparse_vector(np.zeros(5), 1.0, c=3, eps=1.0, rng=gen())
    assert r_int.budget == b_int and r_flt.budget == b_flt


def test_above_threshold_uses_the_book_split():
    eps = 0.8
    b = svt.above_threshold([1, 2], 0, eps=eps, rng=gen()).budget
    # halves of the float calibrated for the decimal 0.8 the budget charges (issue 21): 0.8 - 1 ulp
    assert b.c == 1 and b.eps_threshold == b.eps_queries == math.nextafter(eps, 0) / 2
    assert math.isclose(b.threshold_scale, 2 / eps, rel_tol=2.0**-15)  # Lap(2/eps)
    assert math.isclose(b.query_scale, 4 / eps, rel_tol=2.0**-15)  # Lap(4/eps)
    bm = svt.above_threshold([1, 2], 0, eps=eps, monotonic=True, rng=gen()).budget
    assert math.isclose(bm.query_scale, 2 / eps, rel_tol=2.0**-15)


def test_dpbook_budget_is_alg2():
    c, eps, d = 3, 1.0, 2.0
    b = svt.sparse_vector_dpbook([1, 2, 3], 0, c=c, eps=eps, sensitivity=d, rng=gen()).budget
    assert b.eps_threshold == b.eps_queries == eps / 2
    assert math.isclose(b.threshold_scale, c * d / (eps / 2), rel_tol=2.0**-15)  # Lap(c D / eps1)
    assert math.isclose(b.query_scale, 2 * c * d / (eps / 2), rel_tol=2.0**-15)  # Lap(2c D / eps1)


@pytest.mark.parametrize("monotonic", [False, True])
def test_query_noise_scale_seen_in_behaviour(monotonic):
    """The fraction of reported zeros at threshold T matches P[nu - rho >= T] for
    the documented scales (Lap(2cD/eps2), or Lap(cD/eps2) when monotonic)."""
    n, runs, eps = 2000, 20, 1.0
    b = svt.svt_budget(c=n, eps=eps, monotonic=monotonic, ratio=1.0, integer_values=True)
    t = 4000.0  # = c D / eps2: one query-noise scale above for monotonic, half of one otherwise
    rng = gen(42)
    hits = sum(
        len(
            svt.sparse_vector(
                np.zeros(n, dtype=np.int64),
                t,
                c=n,
                eps=eps,
                monotonic=monotonic,
                ratio=1.0,
                rng=rng,
            ).positions
        )
        for _ in range(runs)
    )
    p_hat = hits / (n * runs)
    p = p_above(t, b.query_scale, b.threshold_scale)
    wrong = p_above(t, b.query_scale * (2 if monotonic else 0.5), b.threshold_scale)
    se = math.sqrt(p * (1 - p) / (n * runs))
    assert abs(p_hat - p) < 5 * se, (p_hat, p)
    assert abs(p_hat - wrong) > 20 * se  # the other calibration is clearly excluded


# --------------------------------------------------------------------------
# Behaviour
# --------------------------------------------------------------------------
def test_stops_after_c_positives():
    r = svt.sparse_vector([10**6] * 10, 0, c=3, eps=1.0, rng=gen())
    assert r.positions == (0, 1, 2) and r.stopped and r.n_processed == 3
    assert r.answers is None and r.eps == 1.0


def test_nothing_above_processes_everything():
    r = svt.sparse_vector(np.zeros(100), 10**6, c=3, eps=1.0, rng=gen())
    assert r.positions == () and not r.stopped and r.n_processed == 100


def test_positions_are_in_stream_order():
    v = np.full(12, -1e6)
    v[[9, 2, 5]] = 1e6
    r = svt.sparse_vector(v, 0.0, c=5, eps=1.0, rng=gen())
    assert r.positions == (2, 5, 9) and not r.stopped


def test_one_threshold_per_query():
    t = np.where(np.arange(20) % 4 == 0, -1e6, 1e6)
    r = svt.sparse_vector(np.zeros(20), t, c=4, eps=1.0, rng=gen())
    assert r.positions == (0, 4, 8, 12) and r.stopped and r.n_processed == 13


def test_empty_input():
    r = svt.sparse_vector([], 0.0, c=2, eps=1.0, rng=gen())
    assert r.positions == () and r.n_processed == 0 and not r.stopped


@pytest.mark.parametrize("dtype", [np.int64, np.float64])
@pytest.mark.parametrize(
    "mechanism",
    [
        lambda v, t, c, r: svt.sparse_vector(v, t, c=c, eps=1.0, rng=r),
        lambda v, t, c, r: svt.sparse_vector_dpbook(v, t, c=c, eps=1.0, rng=r),
        lambda v, t, c, r: svt.sparse_vector_retraversal(v, t, c=c, eps=1.0, boost=1.0, rng=r),
    ],
    ids=["sparse_vector", "dpbook", "retraversal"],
)
def test_chunk_boundaries(mechanism, dtype):
    """Positives straddling the internal chunk boundaries (4096, 20480, 86016, ...)."""
    n = 300_000
    big = [4095, 4096, 20479, 20480, 86015, 86016, n - 1]
    v = np.zeros(n, dtype=dtype)
    v[big] = 10**9
    t = np.full(n, 1e6)
    t[::7] = 1.2e6
    r = mechanism(v, t, len(big), gen(1))
    assert r.positions == tuple(big) and r.stopped and r.n_processed == n
    r = mechanism(v, 1e6, 3, gen(1))
    assert r.positions == tuple(big[:3]) and r.n_processed == big[2] + 1


def test_long_input_uses_parallel_noise_and_stays_reproducible():
    n = (1 << 22) + 5  # at the threshold where two threads draw the query noise
    v = np.zeros(n, dtype=np.int64)
    big = [0, 1 << 20, (1 << 21) + 3, n - 1]
    v[big] = 10**9
    a = svt.sparse_vector(v, 10**6, c=4, eps=1.0, rng=gen(9))
    b = svt.sparse_vector(v, 10**6, c=4, eps=1.0, rng=gen(9))
    assert a.positions == tuple(big) and a.n_processed == n and a == b
    s = svt.sparse_vector(v, 10**6, c=2, eps=1.0)  # secure default, stops early
    assert s.positions == tuple(big[:2]) and s.n_processed == big[1] + 1


def test_numeric_answers_with_eps_answer():
    v = np.array([0, 500, 0, 800, 0, 0, 900])
    r = svt.sparse_vector(v, 100, c=2, eps=1.0, eps_answer=0.5, rng=gen(3))
    assert r.positions == (1, 3) and r.stopped
    assert len(r.answers) == 2
    scale = r.budget.answer_scale  # c D / eps3 = 4
    assert math.isclose(scale, 4.0, rel_tol=2.0**-15)
    for a, pos in zip(r.answers, r.positions):
        assert abs(a - v[pos]) < 40 * scale
        assert (a / r.budget.grid).is_integer()
    assert svt.sparse_vector(v, 100, c=2, eps=1.0, rng=gen(3)).answers is None


def test_numeric_answers_are_unbiased():
    answers = [
        svt.sparse_vector([1000], 0, c=1, eps=1.0, eps_answer=0.5, rng=gen(s)).answers[0]
        for s in range(400)
    ]
    # Lap(2) noise: sd 2*sqrt(2); mean within 5 standard errors of 1000.
    assert abs(np.mean(answers) - 1000) < 5 * 2 * math.sqrt(2) / math.sqrt(400)


def test_result_is_frozen():
    r = svt.sparse_vector([1, 2], 0, c=1, eps=1.0, rng=gen())
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.positions = (5,)


@pytest.mark.parametrize(
    "call",
    [
        lambda r: svt.sparse_vector(np.arange(50) % 7, 4.0, c=3, eps=0.5, eps_answer=0.1, rng=r),
        lambda r: svt.above_threshold(np.arange(50) % 7, 4.0, eps=0.5, rng=r),
        lambda r: svt.sparse_vector_dpbook(np.arange(50) % 7, 4.0, c=3, eps=0.5, rng=r),
        lambda r: svt.sparse_vector_retraversal(
            np.arange(50) % 7, 4.0, c=3, eps=0.5, boost=2.0, rng=r
        ),
        lambda r: svt.exponential_top_c(np.arange(50) % 7, 3, 0.5, rng=r),
    ],
    ids=["sparse_vector", "above_threshold", "dpbook", "retraversal", "exponential_top_c"],
)
def test_deterministic_under_a_seeded_generator(call):
    assert call(gen(123)) == call(gen(123))
    assert len({call(gen(s)).positions for s in range(12)}) > 1  # and actually random
    assert isinstance(call(None).positions, tuple)  # secure default runs too


def test_default_rng_is_the_os_csprng(monkeypatch):
    calls = []
    real = noise.check_rng

    def spy(rng=None):
        src = real(rng)
        calls.append(src)
        return src

    monkeypatch.setattr(noise, "check_rng", spy)
    svt.sparse_vector([1, 2, 3], 0, c=1, eps=1.0)
    svt.exponential_top_c([1, 2, 3], 1, 1.0)
    assert calls and all(s.secure for s in calls)


# --------------------------------------------------------------------------
# Retraversal, DPBook, EM
# --------------------------------------------------------------------------
def test_retraversal_finds_c_by_going_around_again():
    runs = [
        svt.sparse_vector_retraversal(
            np.zeros(5, dtype=np.int64), 0, c=4, eps=1.0, boost=1.0, rng=gen(s)
        )
        for s in range(20)
    ]
    for r in runs:
        assert len(r.positions) == 4 and len(set(r.positions)) == 4 and r.stopped
    # at a threshold raised by 1 std, 4 of 5 zeros rarely clear in one pass (~3% of runs)
    assert sum(r.n_processed > 5 for r in runs) >= 15


def test_retraversal_boost_is_in_query_noise_standard_deviations():
    # Values 30 std above T: found in one pass with boost 0; never (in one pass) with boost 60.
    b = svt.svt_budget(c=2, eps=1.0, integer_values=True)
    std = math.sqrt(2) * b.query_scale
    v = np.array([-(10**6), int(30 * std), -(10**6), int(30 * std)])
    r0 = svt.sparse_vector_retraversal(v, 0, c=2, eps=1.0, boost=0.0, max_passes=1, rng=gen())
    assert r0.positions == (1, 3)
    r60 = svt.sparse_vector_retraversal(v, 0, c=2, eps=1.0, boost=60.0, max_passes=1, rng=gen())
    assert r60.positions == () and not r60.stopped and r60.n_processed == 4
    r60m = svt.sparse_vector_retraversal(v, 0, c=2, eps=1.0, boost=60.0, max_passes=3, rng=gen())
    assert r60m.n_processed == 12


def test_dpbook_stops_at_c_and_keeps_order():
    v = np.full(30, -1e6)
    v[[3, 11, 17, 25]] = 1e6
    r = svt.sparse_vector_dpbook(v, 0.0, c=3, eps=1.0, rng=gen())
    assert r.positions == (3, 11, 17) and r.stopped and r.n_processed == 18


def test_dpbook_is_noisier_than_alg7():
    """[LSL17] Sec. 6: DPBook's threshold noise scales with c, so it misses more."""
    rng = gen(5)
    v = np.r_[np.full(10, 60), np.zeros(90)].astype(np.int64)
    miss = {"S": 0, "DPBook": 0}
    for _ in range(60):
        perm = rng.permutation(100)
        s = set(
            perm[
                list(
                    svt.sparse_vector(v[perm], 30, c=10, eps=2.0, monotonic=True, rng=rng).positions
                )
            ]
        )
        d = set(perm[list(svt.sparse_vector_dpbook(v[perm], 30, c=10, eps=2.0, rng=rng).positions)])
        miss["S"] += len(set(range(10)) - s)
        miss["DPBook"] += len(set(range(10)) - d)
    assert miss["S"] < miss["DPBook"]


def test_exponential_top_c_clear_cut_and_order():
    v = [0, 10**6, 5 * 10**5, 2 * 10**6, 3]
    r = svt.exponential_top_c(v, 3, 1.0, rng=gen())
    assert r.positions == (3, 1, 2) and r.c == 3 and r.n_candidates == 5 and r.eps == 1.0
    assert sorted(svt.exponential_top_c(v, 5, 1.0, rng=gen()).positions) == list(range(5))


def test_exponential_score_scale():
    # eps / (2 c D), eps / (c D) monotonic: the noise scale rounded UP to whole grid steps
    r = svt.exponential_top_c([1, 2, 3], 2, 0.6, sensitivity=3.0, rng=gen())
    assert math.isclose(r.score_scale, 0.6 / (2 * 2 * 3.0), rel_tol=2**-12)
    rm = svt.exponential_top_c([1, 2, 3], 2, 0.6, sensitivity=3.0, monotonic=True, rng=gen())
    assert math.isclose(rm.score_scale, 0.6 / (2 * 3.0), rel_tol=2**-12)
    assert r.score_scale <= 0.6 / (2 * 2 * 3.0) and rm.score_scale <= 0.6 / (2 * 3.0)
    assert r.calibration.scale / r.calibration.grid == r.calibration.units


# --------------------------------------------------------------------------
# Accuracy helpers vs Monte Carlo
# --------------------------------------------------------------------------
def test_above_threshold_alpha_is_dr14_thm_3_24():
    assert math.isclose(
        svt.above_threshold_alpha(0.1, k=100, eps=0.5), 8 * (math.log(100) + math.log(20)) / 0.5
    )
    assert math.isclose(
        svt.above_threshold_alpha(0.1, k=100, eps=0.5, sensitivity=3),
        3 * 8 * (math.log(100) + math.log(20)) / 0.5,
    )


def test_sparse_alpha_is_the_slides_formula():
    # Slides: tau' = tau + Lap(2/eps), q' = q + Lap(2c/eps): alpha = 4c (ln k + ln(2/beta)) / eps.
    a = svt.sparse_alpha(0.05, k=1000, c=7, eps=0.3, monotonic=True, ratio=1.0)
    assert math.isclose(a, 4 * 7 * (math.log(1000) + math.log(2 / 0.05)) / 0.3)
    # Alg. 7's general query noise Lap(2cD/eps2) doubles it; c = 1 gives DR14's 8(...)/eps.
    a2 = svt.sparse_alpha(0.05, k=1000, c=7, eps=0.3, monotonic=False, ratio=1.0)
    assert math.isclose(a2, 2 * a)
    assert math.isclose(
        svt.sparse_alpha(0.1, k=50, c=1, eps=1.0, monotonic=False, ratio=1.0),
        svt.above_threshold_alpha(0.1, k=50, eps=1.0),
    )


def test_alpha_at_a_subnormal_beta_is_the_finite_closed_form():
    """beta = 5e-324: 2/beta overflows to inf, but ln(2/beta) = ln 2 - ln beta = 745.13 is
    finite; checked against the same logarithm computed exactly with Fraction/Decimal."""
    from decimal import Decimal, getcontext
    from fractions import Fraction

    getcontext().prec = 40
    beta = 5e-324
    ln_inv = float(
        (Decimal(2) / Decimal(Fraction(beta).numerator) * Decimal(Fraction(beta).denominator)).ln()
    )
    assert math.isclose(
        svt.above_threshold_alpha(beta, k=10, eps=1.0), 8 * (math.log(10) + ln_inv), rel_tol=1e-12
    )
    assert math.isclose(
        svt.sparse_alpha(beta, k=10, c=7, eps=0.3, monotonic=True, ratio=1.0),
        4 * 7 * (math.log(10) + ln_inv) / 0.3,
        rel_tol=1e-12,
    )
    ln_odds = float(
        (Decimal(1) - Decimal(Fraction(beta).numerator) / Decimal(Fraction(beta).denominator)).ln()
    ) - float((Decimal(Fraction(beta).numerator) / Decimal(Fraction(beta).denominator)).ln())
    assert math.isclose(
        svt.exponential_alpha(beta, k=10, eps=1.0), math.log(9) + ln_odds, rel_tol=1e-12
    )


@pytest.mark.parametrize(
    "fn, kw",
    [(svt.above_threshold_alpha, {}), (svt.sparse_alpha, {"c": 2}), (svt.exponential_alpha, {})],
)
def test_alpha_refuses_an_eps_whose_alpha_overflows(fn, kw):
    """eps = 5e-324 makes alpha (finite in the reals) too large for a float: a ValueError
    naming eps, never inf or ZeroDivisionError; an eps no float can hold names it too."""
    with pytest.raises(ValueError, match="eps=5e-324"):
        fn(0.05, k=10, eps=5e-324, **kw)
    with pytest.raises(ValueError, match="eps must be a real number a float can hold"):
        fn(0.05, k=10, eps=10**400, **kw)
    assert math.isfinite(fn(0.05, k=10, eps=1e-300, **kw))  # huge, but a float


def test_checks_refuse_huge_ints_and_ragged_lists_naming_them():
    """10**400 (no float holds it) is a ValueError naming the argument, not OverflowError;
    a ragged nested list names its row, never numpy's 'inhomogeneous shape'."""
    for kw, name in [
        (dict(c=10**400), "c"),
        (dict(eps=10**400), "eps"),
        (dict(sensitivity=10**400), "sensitivity"),
    ]:
        with pytest.raises(ValueError, match=name):
            svt.svt_budget(**{"c": 1, "eps": 1.0, **kw})
    with pytest.raises(
        ValueError, match=r"c \(the number of positives to report\) must be an integer >= 1 and <= "
    ):
        svt.optimal_ratio(2**63)
    with pytest.raises(ValueError, match="values is ragged: row 1 has 1 entries, row 0 has 2"):
        svt.sparse_vector([[1.0, 2.0], [1.0]], 0.0, c=1, eps=1.0)
    with pytest.raises(ValueError, match="threshold is ragged: row 1"):
        svt.sparse_vector([1.0, 2.0], [[1.0, 2.0], [1.0]], c=1, eps=1.0)
    with pytest.raises(ValueError, match="threshold must be a real number a float can hold"):
        svt.sparse_vector([1.0, 2.0], 10**400, c=1, eps=1.0)
    with pytest.raises(TypeError, match="threshold must be a real number"):
        svt.sparse_vector([1.0, 2.0], True, c=1, eps=1.0)
    sv = svt.SparseVector(10.0, c=1, eps=1.0, rng=gen(0))
    with pytest.raises(ValueError, match="value must be a real number a float can hold"):
        sv.test(10**400)
    with pytest.raises(ValueError, match="boost"):
        svt.sparse_vector_retraversal([1.0], 0.0, c=1, eps=1.0, boost=10**400)
    with pytest.raises(ValueError, match="values must hold at least one candidate"):
        svt.exponential_top_c([], 1, 1.0)
    # an int threshold beyond int64 but within a float is a float threshold (then range-checked)
    with pytest.raises(ValueError, match="threshold"):
        svt.sparse_vector([1.0, 2.0], 2**70, c=1, eps=1.0)


def _union_bound_failure(alpha, b_threshold, b_query, k, n, rng):
    """MC of P[|rho| >= alpha/2 or max_i |nu_i| >= alpha/2] with the exact grid noise."""
    g = noise.grid_for(b_threshold)
    rho = noise.laplace(b_threshold, n, grid=g, rng=rng)
    nu = noise.laplace(b_query, (n, k), grid=g, rng=rng)
    return np.mean((np.abs(rho) >= alpha / 2) | (np.abs(nu).max(axis=1) >= alpha / 2))


@pytest.mark.parametrize("beta", [0.05, 0.2])
def test_accuracy_union_bounds_are_tight_by_monte_carlo(beta):
    """The helpers' alpha makes the slides' failure event have probability ~beta (at most beta)."""
    k, eps, n = 50, 1.0, 40000
    a = svt.above_threshold_alpha(beta, k=k, eps=eps)
    p = _union_bound_failure(a, 2 / eps, 4 / eps, k, n, gen(1))
    se = math.sqrt(beta / n)
    assert p <= beta + 4 * se and p > beta / 2 - 4 * se  # DR14's split spends ~beta/2
    c = 3
    s = svt.sparse_alpha(beta, k=k, c=c, eps=eps)  # defaults: those of sparse_vector
    b = svt.svt_budget(c=c, eps=eps)
    p = _union_bound_failure(s, b.threshold_scale, b.query_scale, k, n, gen(2))
    assert p <= beta + 4 * se and p > beta / 2 - 4 * se


def _failure_rate(run, expected, trials):
    fails = sum(run(s) != expected for s in range(trials))
    return fails, clopper_pearson_lower(fails, trials, 0.001)


def test_above_threshold_meets_its_accuracy_guarantee():
    """[DR14] Thm. 3.24: all but the last query < T - alpha, last > T + alpha -> halt exactly at k."""
    k, eps, beta, trials = 20, 1.0, 0.2, 1500
    a = svt.above_threshold_alpha(beta, k=k, eps=eps)
    v = np.r_[np.full(k - 1, -a - 1e-3), a + 1e-3]
    fails, lower = _failure_rate(
        lambda s: svt.above_threshold(v, 0.0, eps=eps, rng=gen(s)).positions, (k - 1,), trials
    )
    assert lower <= beta, fails


@pytest.mark.parametrize("monotonic", [True, False])
def test_sparse_vector_meets_the_slides_accuracy_guarantee(monotonic):
    """c queries above T + alpha, the rest below T - alpha: exactly those are reported."""
    k, c, eps, beta, trials = 30, 3, 1.0, 0.2, 1000
    a = svt.sparse_alpha(beta, k=k, c=c, eps=eps, monotonic=monotonic, ratio=1.0)
    v = np.full(k, -a - 1e-3)
    big = (5, 17, 29)
    v[list(big)] = a + 1e-3
    fails, lower = _failure_rate(
        lambda s: (
            svt.sparse_vector(
                v, 0.0, c=c, eps=eps, monotonic=monotonic, ratio=1.0, rng=gen(s)
            ).positions
        ),
        big,
        trials,
    )
    assert lower <= beta, fails


def test_exponential_alpha_bounds_the_permute_and_flip_selection():
    """[LSL17] Sec. 5: with k-1 answers at T - alpha and one at T + alpha, the exponential
    mechanism picks the right one with probability exactly 1 - beta; exponential_top_c
    (permute-and-flip) with probability (1 - (1 - p)^k) / (k p), p = e^{-2 alpha eps / 2},
    which is at least that (as on random score vectors in test_topc_exact.py), by Monte Carlo."""
    k, eps, beta, n = 10, 1.0, 0.2, 4000
    a = svt.exponential_alpha(beta, k=k, eps=eps)
    assert math.isclose(a, (math.log(k - 1) + math.log((1 - beta) / beta)) / eps)
    p = math.exp(-2 * a * eps / 2)
    exact = (1 - (1 - p) ** k) / (k * p)
    assert exact > 1 - beta
    v = np.full(k, -a)
    v[4] = a
    src = noise.check_rng(gen(4))
    hits = sum(svt.exponential_top_c(v, 1, eps, rng=src).positions == (4,) for _ in range(n))
    se = math.sqrt(exact * (1 - exact) / n)
    assert abs(hits / n - exact) < 4.5 * se


# --------------------------------------------------------------------------
# Interactive form
# --------------------------------------------------------------------------
def test_sparse_vector_object_answers_a_stream_and_refuses_after_c():
    sv = svt.SparseVector(0.0, c=2, eps=1.0, eps_answer=0.2, rng=gen())
    assert sv.test(-(10**6)) is False
    assert sv.test(10**6) is True
    assert sv.test(-(10**6), threshold=-2 * 10**6) is True  # per-query threshold
    assert sv.exhausted and sv.remaining == 0
    assert sv.positions == (1, 2) and sv.n_processed == 3
    assert len(sv.answers) == 2 and abs(sv.answers[0] - 10**6) < 1000
    with pytest.raises(svt.SparseVectorExhausted, match="c=2"):
        sv.test(0)
    assert isinstance(svt.SparseVectorExhausted("x"), RuntimeError)
    r = sv.result()
    assert r.positions == (1, 2) and r.stopped and r.n_processed == 3 and r.eps == 1.0
    assert "SparseVector(c=2" in repr(sv)


def test_sparse_vector_object_matches_the_function_on_clear_inputs():
    v = [-1e6, 1e6, -1e6, 1e6, 1e6]
    sv = svt.SparseVector(0.0, c=2, eps=1.0, rng=gen())
    for x in v:
        if sv.exhausted:
            break
        sv.test(x)
    assert sv.positions == svt.sparse_vector(v, 0.0, c=2, eps=1.0, rng=gen()).positions == (1, 3)
    assert svt.SparseVector(0.0, c=1, eps=1.0, rng=gen()).answers is None


def test_sparse_vector_object_rejects_bad_values_without_drawing():
    rng = gen()
    sv = svt.SparseVector(0.0, c=1, eps=1.0, rng=rng)
    state = rng.bit_generator.state
    for bad, exc in [
        (float("nan"), ValueError),
        (float("inf"), ValueError),
        ("3", TypeError),
        (None, TypeError),
    ]:
        with pytest.raises(exc, match="value"):
            sv.test(bad)
    with pytest.raises(ValueError, match="threshold"):
        sv.test(1.0, threshold=float("nan"))
    assert sv.n_processed == 0 and rng.bit_generator.state == state


# --------------------------------------------------------------------------
# Validation: errors name the argument, and nothing random is drawn first
# --------------------------------------------------------------------------
GOOD = dict(values=[1.0, 2.0, 3.0], threshold=1.5, c=1, eps=1.0)

SV_BAD = [
    (dict(c=0), ValueError, "c "),
    (dict(c=-3), ValueError, "c "),
    (dict(c=1.5), TypeError, "integer"),
    (dict(c=True), TypeError, "integer"),
    (dict(c="2"), TypeError, "integer"),
    (dict(eps=0.0), ValueError, "eps must be > 0"),
    (dict(eps=-1.0), ValueError, "eps"),
    (dict(eps=float("nan")), ValueError, "eps must be finite"),
    (dict(eps=float("inf")), ValueError, "eps must be finite"),
    (dict(eps="1"), TypeError, "eps"),
    (dict(eps_answer=1.0), ValueError, "eps_answer"),
    (dict(eps_answer=2.0), ValueError, "eps_answer"),
    (dict(eps_answer=-0.1), ValueError, "eps_answer"),
    (dict(eps_answer=float("nan")), ValueError, "eps_answer"),
    (dict(sensitivity=-1.0), ValueError, "sensitivity"),
    (dict(sensitivity=0.0), ValueError, "sensitivity"),
    (dict(sensitivity=float("inf")), ValueError, "sensitivity"),
    (dict(values=[1.0, float("nan")]), ValueError, "values must be finite"),
    (dict(values=[1.0, float("inf")]), ValueError, "values must be finite"),
    (dict(values=[[1.0, 2.0]]), ValueError, "1-D"),
    (dict(values=["a", "b"]), TypeError, "values"),
    (dict(threshold=float("nan")), ValueError, "threshold must be finite"),
    (dict(threshold=[1.0, float("inf"), 2.0]), ValueError, "index 1"),
    (dict(threshold=[1.0, 2.0]), ValueError, "length 2 but values has length 3"),
    (dict(threshold=[[1.0, 2.0, 3.0]]), ValueError, "threshold"),
    (dict(ratio="best"), ValueError, "ratio"),
    (dict(ratio=0.0), ValueError, "ratio"),
    (dict(ratio=-2.0), ValueError, "ratio"),
    (dict(ratio=float("nan")), ValueError, "ratio"),
    (dict(values=[1e300, 0.0]), ValueError, "too large"),
    (dict(eps=1e-300), ValueError, "too (large|small)"),
    (dict(rng="seed"), TypeError, "rng"),
    (dict(rng=42), TypeError, "rng"),
    (dict(rng=np.random.RandomState(0)), TypeError, "rng"),
]


def _bad_id(bad):
    """A test id without an object's address (xdist workers must collect the same ids)."""
    return str(
        {k: type(v).__name__ if isinstance(v, np.random.RandomState) else v for k, v in bad.items()}
    )


def _call_with(fn, bad, drop=()):
    kw = {**GOOD, **bad}
    for k in drop:
        kw.pop(k, None)
    rng = kw.pop("rng", None)
    values, threshold = kw.pop("values"), kw.pop("threshold")
    return lambda r: fn(values, threshold, rng=r if rng is None else rng, **kw)


@pytest.mark.parametrize("bad, exc, match", SV_BAD, ids=[_bad_id(b) for b, _, _ in SV_BAD])
def test_sparse_vector_rejects_bad_input_before_drawing(bad, exc, match):
    rng = gen()
    state = rng.bit_generator.state
    with pytest.raises(exc, match=match):
        _call_with(svt.sparse_vector, bad)(rng)
    assert rng.bit_generator.state == state


OTHERS = {
    "above_threshold": (svt.above_threshold, ("c", "eps_answer", "ratio")),
    "dpbook": (svt.sparse_vector_dpbook, ("eps_answer", "ratio")),
    "retraversal": (
        lambda v, t, **kw: svt.sparse_vector_retraversal(v, t, boost=1.0, **kw),
        ("eps_answer",),
    ),
}


OTHER_BAD = [
    (name, bad, exc, match)
    for name, (_, unsupported) in OTHERS.items()
    for bad, exc, match in SV_BAD
    if not any(k in unsupported for k in bad)
]


@pytest.mark.parametrize(
    "name, bad, exc, match", OTHER_BAD, ids=[f"{n}-{_bad_id(b)}" for n, b, _, _ in OTHER_BAD]
)
def test_other_svts_reject_bad_input_before_drawing(name, bad, exc, match):
    fn, unsupported = OTHERS[name]
    rng = gen()
    state = rng.bit_generator.state
    with pytest.raises(exc, match=match):
        _call_with(fn, bad, drop=unsupported)(rng)
    assert rng.bit_generator.state == state


@pytest.mark.parametrize(
    "kw, exc, match",
    [
        (dict(boost=float("nan")), ValueError, "boost"),
        (dict(boost="1"), TypeError, "boost"),
        (dict(max_passes=0), ValueError, "max_passes"),
        (dict(max_passes=2.5), TypeError, "max_passes"),
    ],
)
def test_retraversal_specific_validation(kw, exc, match):
    rng = gen()
    state = rng.bit_generator.state
    args = dict(c=1, eps=1.0, boost=1.0, rng=rng)
    args.update(kw)
    with pytest.raises(exc, match=match):
        svt.sparse_vector_retraversal([1, 2], 0.0, **args)
    assert rng.bit_generator.state == state


@pytest.mark.parametrize(
    "args, kw, exc, match",
    [
        (([1, 2, 3], 4, 1.0), {}, ValueError, "at most the number of candidates"),
        (([1, 2, 3], 0, 1.0), {}, ValueError, "c "),
        (([1, 2, 3], 1, 0.0), {}, ValueError, "eps"),
        (([1, float("nan")], 1, 1.0), {}, ValueError, "values must be finite"),
        (([1, 2], 1, 1.0), dict(sensitivity=-2), ValueError, "sensitivity"),
        (([1, 2], 1, 1.0), dict(rng=7), TypeError, "rng"),
    ],
)
def test_exponential_top_c_validation(args, kw, exc, match):
    rng = gen()
    state = rng.bit_generator.state
    kw = {"rng": rng, **kw}
    with pytest.raises(exc, match=match):
        svt.exponential_top_c(*args, **kw)
    assert rng.bit_generator.state == state


@pytest.mark.parametrize(
    "kw, exc, match",
    [
        (dict(c=0), ValueError, "c "),
        (dict(eps=-1.0), ValueError, "eps"),
        (dict(eps_answer=1.0), ValueError, "eps_answer"),
        (dict(sensitivity=-1.0), ValueError, "sensitivity"),
        (dict(threshold=[1.0, 2.0]), ValueError, "scalar"),
        (dict(threshold=float("nan")), ValueError, "threshold"),
        (dict(rng="x"), TypeError, "rng"),
    ],
)
def test_sparse_vector_object_validation(kw, exc, match):
    rng = gen()
    state = rng.bit_generator.state
    args = dict(threshold=0.0, c=1, eps=1.0, rng=rng)
    args.update(kw)
    with pytest.raises(exc, match=match):
        svt.SparseVector(args.pop("threshold"), **args)
    assert rng.bit_generator.state == state


@pytest.mark.parametrize(
    "fn, kw",
    [
        (svt.above_threshold_alpha, dict(k=10, eps=1.0)),
        (svt.sparse_alpha, dict(k=10, c=2, eps=1.0)),
        (svt.exponential_alpha, dict(k=10, eps=1.0)),
    ],
)
def test_accuracy_helpers_validate(fn, kw):
    for beta in (0.0, 1.0, 1.5, -0.1, float("nan")):
        with pytest.raises(ValueError, match="beta"):
            fn(beta, **kw)
    with pytest.raises(ValueError, match="k "):
        fn(0.1, **{**kw, "k": 0})
    with pytest.raises(ValueError, match="eps"):
        fn(0.1, **{**kw, "eps": 0.0})
    with pytest.raises(ValueError, match="k must be >= 2"):
        svt.exponential_alpha(0.1, k=1, eps=1.0)


def test_public_names():
    assert set(svt.__all__) >= {
        "sparse_vector",
        "SparseVector",
        "above_threshold",
        "sparse_vector_dpbook",
        "sparse_vector_retraversal",
        "exponential_top_c",
        "SVTResult",
        "TopCResult",
        "above_threshold_alpha",
        "sparse_alpha",
        "exponential_alpha",
    }
    for name in svt.__all__:
        assert getattr(svt, name).__doc__


def test_retraversal_rejects_a_boost_too_large_for_the_grid():
    rng = gen()
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="boost"):
        svt.sparse_vector_retraversal([1, 2], 0.0, c=1, eps=1.0, boost=1e30, rng=rng)
    assert rng.bit_generator.state == state


# --------------------------------------------------------------------------
# The API of issue 5 §1, module layout and the reference numbers
# --------------------------------------------------------------------------
def test_signatures_match_the_issue():
    import inspect

    sig = inspect.signature(svt.sparse_vector)
    assert [(p.name, p.kind.name, p.default) for p in sig.parameters.values()] == [
        ("values", "POSITIONAL_OR_KEYWORD", inspect.Parameter.empty),
        ("threshold", "POSITIONAL_OR_KEYWORD", inspect.Parameter.empty),
        ("c", "KEYWORD_ONLY", inspect.Parameter.empty),
        ("eps", "KEYWORD_ONLY", inspect.Parameter.empty),
        ("sensitivity", "KEYWORD_ONLY", 1.0),
        ("monotonic", "KEYWORD_ONLY", False),
        ("ratio", "KEYWORD_ONLY", "optimal"),
        ("eps_answer", "KEYWORD_ONLY", 0.0),
        ("rng", "KEYWORD_ONLY", None),
        ("value_bound", "KEYWORD_ONLY", None),  # issue 21: the declared bound a planner checked
    ]
    sig = inspect.signature(svt.exponential_top_c)
    assert [(p.name, p.kind.name, p.default) for p in sig.parameters.values()] == [
        ("values", "POSITIONAL_OR_KEYWORD", inspect.Parameter.empty),
        ("c", "POSITIONAL_OR_KEYWORD", inspect.Parameter.empty),
        ("eps", "POSITIONAL_OR_KEYWORD", inspect.Parameter.empty),
        ("sensitivity", "KEYWORD_ONLY", 1.0),
        ("monotonic", "KEYWORD_ONLY", False),
        ("rng", "KEYWORD_ONLY", None),
        ("value_bound", "KEYWORD_ONLY", None),  # the exact EM: its grid holds the declared bound
    ]


def test_public_namespace_re_exports_the_concept_modules():
    import importlib

    for mod_name in (
        "checks",
        "calibration",
        "grid",
        "core",
        "interactive",
        "variants",
        "topc",
        "accuracy",
    ):
        mod = importlib.import_module(f"matmech.svt.{mod_name}")
        assert mod.__doc__, mod_name
        for name in svt.__all__:
            if getattr(svt, name).__module__ == mod.__name__:
                assert getattr(svt, name) is getattr(mod, name)
    # Everything public in matmech.svt comes from one of them (no second copy).
    assert svt.sparse_vector.__module__ == "matmech.svt.core"
    assert svt.SparseVector.__module__ == "matmech.svt.interactive"
    assert svt.exponential_top_c.__module__ == "matmech.svt.topc"


def test_accuracy_helpers_reproduce_the_reference_numbers():
    # Cummings notes Thm. 8 / [DR14] Thm. 3.24: 8 (ln 100 + ln 40) / 1 = 66.3524 (by hand).
    assert svt.above_threshold_alpha(0.05, k=100, eps=1.0) == pytest.approx(66.35239712, rel=1e-9)
    # Slides: alpha = 4c (log n + log 2/beta)/eps; c=5, n=1000, beta=0.1, eps=0.5: 40 * 9.903488 = 396.1395.
    a = svt.sparse_alpha(0.1, k=1000, c=5, eps=0.5, monotonic=True, ratio=1.0)
    assert a == pytest.approx(396.1395021, rel=1e-9)
    # ... which is where the slides' two tail bounds each reach beta/2:
    assert math.exp(-0.5 * a / 4) <= 0.1 / 2
    assert 1000 * math.exp(-0.5 * a / (4 * 5)) == pytest.approx(0.1 / 2, rel=1e-12)
    # [LSL17] Sec. 5: alpha_EM = (ln 99 + ln 19)/eps = 7.5396, "less than 1/8 of alpha_SVT".
    assert svt.exponential_alpha(0.05, k=100, eps=1.0) == pytest.approx(7.53955883, rel=1e-9)
    for k in (2, 10, 10**3, 10**6):
        for beta in (0.001, 0.05, 0.5, 0.9):
            ratio = svt.exponential_alpha(beta, k=k, eps=0.3) / svt.above_threshold_alpha(
                beta, k=k, eps=0.3
            )
            assert ratio < 1 / 8, (k, beta)


# --------------------------------------------------------------------------
# Calibration is exact: scales never below nominal, shares never above eps
# --------------------------------------------------------------------------
def test_scales_are_at_least_nominal_and_shares_sum_to_at_most_eps_exactly():
    from fractions import Fraction as F

    rng = gen(17)
    for _ in range(300):
        c = int(rng.integers(1, 400))
        eps = float(rng.choice([0.1, 0.3, 0.7, 1.0, 3.0])) * float(rng.uniform(0.5, 2))
        e3 = float(rng.choice([0.0, 0.2 * eps]))
        mono = bool(rng.integers(2))
        ratio = rng.choice(["optimal", 1.0, 3.0, float(c)])
        ratio = ratio if ratio == "optimal" else float(ratio)
        d = float(rng.choice([1.0, 2.0, 0.3]))
        b = svt.svt_budget(
            c=c,
            eps=eps,
            sensitivity=d,
            monotonic=mono,
            ratio=ratio,
            eps_answer=e3,
            integer_values=bool(rng.integers(2)),
        )
        assert F(b.eps_threshold) + F(b.eps_queries) + F(b.eps_answer) <= F(eps)
        assert F(b.threshold_scale) * F(b.eps_threshold) >= F(b.sensitivity)
        assert F(b.query_scale) * F(b.eps_queries) >= (1 if mono else 2) * c * F(b.sensitivity)
        if e3:
            assert F(b.answer_scale) * F(b.eps_answer) >= c * F(b.sensitivity)


def test_budget_is_cached_and_shared():
    assert svt.svt_budget(c=7, eps=0.4) is svt.svt_budget(c=7, eps=0.4)


# --------------------------------------------------------------------------
# Noise streams: spawned children, no seed integers, secure stays secure
# --------------------------------------------------------------------------
def test_worker_sources_spawn_children_without_drawing_from_the_parent():
    from matmech.svt import grid as svt_noise

    g = gen(5)
    state = g.bit_generator.state
    w = svt_noise.worker_sources(g, svt_noise.PARALLEL_MIN)
    assert g.bit_generator.state == state  # nothing drawn, no seed integers made
    assert len(w) == 2 and not any(s.secure for s in w)
    a, b = (s.words64(4).tolist() for s in w)
    assert a != b
    w2 = svt_noise.worker_sources(gen(5), svt_noise.PARALLEL_MIN)
    assert [s.words64(4).tolist() for s in w2] == [a, b]  # reproducible from the same seed
    # Secure in, secure out; small inputs and other sources stay single-threaded.
    assert all(s.secure for s in svt_noise.worker_sources(None, svt_noise.PARALLEL_MIN))
    assert all(
        s.secure for s in svt_noise.worker_sources(noise.check_rng(None), svt_noise.PARALLEL_MIN)
    )
    assert svt_noise.worker_sources(g, svt_noise.PARALLEL_MIN - 1) is None
    assert svt_noise.worker_sources(noise.check_rng(gen()), svt_noise.PARALLEL_MIN) is None
    # A Generator over a legacy-seeded bit generator cannot spawn: one thread, no made-up seeds.
    legacy = np.random.Generator(np.random.RandomState(1)._bit_generator)
    assert svt_noise.worker_sources(legacy, svt_noise.PARALLEL_MIN) is None


def test_library_code_makes_no_seeds():
    """Issue 5 task: children come from Generator.spawn, not default_rng(int(seed))."""
    import ast
    import pathlib

    root = pathlib.Path(svt.__file__).parent
    paths = sorted(root.glob("*.py"))
    assert root / "topc.py" in paths and root / "core.py" in paths
    for path in paths:
        calls = [
            ast.unparse(node.func)
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call)
        ]
        made = [
            f
            for f in calls
            if f.split(".")[-1] in {"default_rng", "SeedSequence", "seed", "RandomState"}
        ]
        assert not made, (path.name, made)


def test_noise_buffer_hands_out_iid_draws_across_blocks():
    from matmech.svt import grid as svt_noise

    buf = svt_noise.NoiseBuffer(3.0, 1.0, noise.check_rng(gen(3)), first=2, largest=8)
    assert buf.take(0).size == 0
    parts = [buf.take(k) for k in (1, 3, 5, 8, 13, 1)] + [np.array([buf.one()])]
    draws = np.concatenate(parts)
    assert draws.dtype == np.int64 and draws.size == 32
    many = svt_noise.NoiseBuffer(3.0, 1.0, noise.check_rng(gen(4))).take(40000)
    assert abs(
        many.var() - noise.discrete_laplace_variance(3)
    ) < 0.05 * noise.discrete_laplace_variance(3)


# --------------------------------------------------------------------------
# DPBook and retraversal edge cases
# --------------------------------------------------------------------------
def test_dpbook_with_c_far_above_the_number_of_candidates_is_cheap():
    r = svt.sparse_vector_dpbook(np.full(5, 10**9, dtype=np.int64), 0, c=10**7, eps=1.0, rng=gen())
    assert r.positions == (0, 1, 2, 3, 4) and not r.stopped and r.n_processed == 5


def test_retraversal_counts_passes_over_long_and_short_remainders():
    # 4100 candidates (> one scan chunk) that never clear a threshold 60 std up: 3 passes.
    v = np.zeros(4100, dtype=np.int64)
    r = svt.sparse_vector_retraversal(v, 0, c=2, eps=1.0, boost=60.0, max_passes=3, rng=gen())
    assert r.positions == () and r.n_processed == 3 * 4100
    # Short remainders share buffered noise; every candidate is picked once.
    r = svt.sparse_vector_retraversal(
        np.zeros(7, dtype=np.int64), 0, c=7, eps=1.0, boost=1.0, rng=gen(6)
    )
    assert sorted(r.positions) == list(range(7)) and r.stopped and r.n_processed >= 7
    # The large-pass path hands over to the short-pass path as candidates are selected.
    v = np.zeros(5000, dtype=np.int64)
    v[:1000] = 10**9
    r = svt.sparse_vector_retraversal(v, 0, c=1003, eps=1.0, boost=1.0, rng=gen(7))
    assert len(set(r.positions)) == 1003 and set(range(1000)) <= set(r.positions) and r.stopped


def test_exponential_top_c_on_many_candidates_uses_two_sources_reproducibly(monkeypatch):
    from matmech.svt import grid as svt_noise

    monkeypatch.setattr(svt_noise, "PARALLEL_MIN", 1 << 14)  # the two-thread path, small
    n = (1 << 14) + 7  # two chunks, two threads
    v = np.zeros(n, dtype=np.int64)
    planted = [n - 1, svt_noise.CHUNK_FIRST - 1, 0]  # decreasing values
    v[planted] = [3 * 10**6, 2 * 10**6, 10**6]
    a = svt.exponential_top_c(v, 3, 4.0, rng=gen(11))  # one round per pick, all n draws each
    assert a.positions == tuple(planted)
    assert a == svt.exponential_top_c(v, 3, 4.0, rng=gen(11))
    assert svt.exponential_top_c(v, 2, 1.0).positions == tuple(planted[:2])  # secure default
    # Away from the planted values the selection is random, and differs between seeds.
    rest = svt.exponential_top_c(np.zeros(n, dtype=np.int64), 2, 1.0, rng=gen(12)).positions
    assert len(set(rest)) == 2
    assert rest != svt.exponential_top_c(np.zeros(n, dtype=np.int64), 2, 1.0, rng=gen(13)).positions
