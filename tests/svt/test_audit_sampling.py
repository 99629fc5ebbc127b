"""Statistical privacy tests for matmech.svt, with the auditor in privacy_audit.py.

For every shipped mechanism: neighbouring inputs D, D' and output events on
which the privacy loss is close to the claimed eps (crafted after the proofs
and counterexamples of Lyu, Su, Li, VLDB 2017), many seeded trials, and a
Clopper-Pearson test that must NOT prove a loss above the claimed eps.  The
paper's non-private Alg. 5 and Alg. 3 (tests/svt_fixtures.py) must be
rejected, and the auditor's power is checked on mechanisms of known epsilon.

This is the second, sampling-based method; the exact audit with its
mutation test is tests/test_privacy_exact.py.  Everything is seeded
(deterministic); the whole file takes about 30 s of CPU.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

import svt_fixtures as fx
from matmech import svt
from matmech.privacy import noise
from privacy_audit import (
    audit,
    audit_outputs,
    clopper_pearson_lower,
    clopper_pearson_upper,
    per_trial,
    positions_equal,
    where,
)

EPS = 1.0
CONFIDENCE = 0.999
# Trials per input.  One SVT run costs about 1-2 ms (mostly the exact sampler's
# fixed cost per call), so these keep the whole file under 2 minutes on a
# shared 2-core machine while every case still shows a loss estimate > 0.2 on
# its events; EM runs are ~10x cheaper.
SVT_TRIALS = 2000
RETRAVERSAL_TRIALS = 1500  # several passes (sampler calls) per run
EM_TRIALS = 8000
AT_TRIALS = 4000


def shipped(mechanism):
    """Sampler for a matmech mechanism ``mechanism(data, rng)``: one run per trial.

    All trials on one input share one random source made from the trial
    Generator (cheaper than re-wrapping it every call; same distribution).
    """

    def sampler(data, n, rng):
        src = noise.check_rng(rng)
        return [mechanism(data, src) for _ in range(n)]

    return sampler


def answer_at_least(positions, bound):
    target = tuple(positions)
    return where(lambda o: o.positions == target and o.answers[0] >= bound)


def answer_below(positions, bound):
    target = tuple(positions)
    return where(lambda o: o.positions == target and o.answers[0] < bound)


class _Interactive:
    """The interactive SparseVector asked the queries of ``data`` one by one."""

    def __init__(self, **kw):
        self.kw = kw

    def __call__(self, data, rng):
        sv = svt.SparseVector(0.0, rng=rng, **self.kw)
        for v in data:
            if sv.exhausted:
                break
            sv.test(v)
        return sv.result()


# name, mechanism(data, rng), D, D', events, trials.  In each case D' differs
# from D by at most 1 per query (sensitivity 1); monotonic cases move every
# query in the same direction.  The "all below then one above" events are
# where the threshold-noise shift of the proofs (Thm. 3.3 / 4.7) is tight.
# above_threshold is audited below, on one batch of outputs shared with the
# auditor's power checks.
CASES = [
    (
        "sparse_vector c=1 (optimal ratio)",
        lambda d, r: svt.sparse_vector(d, 0.0, c=1, eps=EPS, rng=r),
        [0, 0, 0, 1],
        [1, 1, 1, 0],
        {"(3,)": positions_equal([3]), "()": positions_equal([])},
        SVT_TRIALS,
    ),
    (
        "sparse_vector c=2 (optimal ratio)",
        lambda d, r: svt.sparse_vector(d, 0.0, c=2, eps=EPS, rng=r),
        [0, 1, 0, 1],
        [1, 0, 1, 0],
        {
            "(1, 3)": positions_equal([1, 3]),
            "(1,)": positions_equal([1]),
            "(3,)": positions_equal([3]),
        },
        SVT_TRIALS,
    ),
    (
        "sparse_vector monotonic c=1",
        lambda d, r: svt.sparse_vector(d, 0.0, c=1, eps=EPS, monotonic=True, rng=r),
        [0, 0, 0, 1],
        [1, 1, 1, 1],
        {"(3,)": positions_equal([3]), "()": positions_equal([])},
        SVT_TRIALS,
    ),
    (
        "sparse_vector with eps_answer=0.5",
        lambda d, r: svt.sparse_vector(d, 0.0, c=1, eps=EPS, eps_answer=0.5, rng=r),
        [0, 0, 0, 1],
        [1, 1, 1, 0],
        {
            "(3,) & answer>=1": answer_at_least([3], 1.0),
            "(3,) & answer<0": answer_below([3], 0.0),
            "()": positions_equal([]),
        },
        SVT_TRIALS,
    ),
    (
        "SparseVector (interactive) c=2",
        _Interactive(c=2, eps=EPS),
        [0, 1, 0, 1],
        [1, 0, 1, 0],
        {
            "(1, 3)": positions_equal([1, 3]),
            "(1,)": positions_equal([1]),
            "(3,)": positions_equal([3]),
        },
        SVT_TRIALS,
    ),
    (
        "sparse_vector_dpbook c=2",
        lambda d, r: svt.sparse_vector_dpbook(d, 0.0, c=2, eps=EPS, rng=r),
        [0, 1, 0, 1],
        [1, 0, 1, 0],
        {
            "(1, 3)": positions_equal([1, 3]),
            "(1,)": positions_equal([1]),
            "(3,)": positions_equal([3]),
        },
        SVT_TRIALS,
    ),
    (
        "sparse_vector_retraversal c=2 boost=0.5",
        lambda d, r: svt.sparse_vector_retraversal(d, 0.0, c=2, eps=EPS, boost=0.5, rng=r),
        [0, 1, 0, 1],
        [1, 0, 1, 0],
        {
            "(1, 3)": positions_equal([1, 3]),
            "(3, 1)": positions_equal([3, 1]),
            "(0, 2)": positions_equal([0, 2]),
        },
        RETRAVERSAL_TRIALS,
    ),
    (
        "exponential_top_c c=1",
        lambda d, r: svt.exponential_top_c(d, 1, EPS, rng=r),
        [1] + [0] * 19,
        [0] + [1] * 19,
        {"(0,)": positions_equal([0])},
        EM_TRIALS,
    ),
    (
        "exponential_top_c c=2",
        lambda d, r: svt.exponential_top_c(d, 2, EPS, rng=r),
        [1, 1] + [0] * 8,
        [0, 0] + [1] * 8,
        {"(0, 1)": positions_equal([0, 1]), "first is 0": where(lambda o: o.positions[0] == 0)},
        EM_TRIALS,
    ),
    (
        "exponential_top_c monotonic c=1",
        lambda d, r: svt.exponential_top_c(d, 1, EPS, monotonic=True, rng=r),
        [1] + [0] * 19,
        [0] * 20,
        {"(0,)": positions_equal([0])},
        EM_TRIALS,
    ),
]


@pytest.mark.parametrize(
    "name, mechanism, d, d_prime, events, trials", CASES, ids=[c[0] for c in CASES]
)
def test_shipped_mechanism_passes_at_its_eps(name, mechanism, d, d_prime, events, trials):
    report = audit(
        shipped(mechanism),
        d,
        d_prime,
        events,
        eps=EPS,
        trials=trials,
        seed=sum(map(ord, name)),
        confidence=CONFIDENCE,
    )
    assert not report.rejected, report.summary()
    # The events are informative: each case shows a real, positive privacy loss
    # (a wrong event or a mechanism ignoring its input would show ~0).
    assert max(c.eps_estimate for c in report.checks) > 0.2, report.summary()


# --------------------------------------------------------------------------
# The paper's non-private variants must be caught
# --------------------------------------------------------------------------
def test_alg5_without_query_noise_is_rejected():
    """[LSL17] Thm. 3.5: q(D) = (0, 1), q(D') = (1, 0), T = 0, output (bottom, top).

    P[M(D) = a] = P[0 < rho <= 1] > 0 while P[M(D') = a] = 0: not eps-DP for any eps.
    """

    def sampler(data, n, rng):
        return fx.alg5_batch(data, 0.0, eps=EPS, n=n, rng=rng)

    report = audit(
        sampler,
        [0, 1],
        [1, 0],
        {"(bottom, top)": fx.flags_equal([0, 1])},
        eps=EPS,
        trials=100_000,
        seed=5,
        confidence=CONFIDENCE,
    )
    assert report.rejected, report.summary()
    assert report.eps_lower > 5 * EPS, report.summary()


def test_alg3_releasing_noisy_answer_is_rejected():
    """[LSL17] Thm. 9.11 with c = 1: q(D) = 0^m 1, q(D') = 1^m 0, output bottom^m then a number <= 1.

    A released answer a >= T + rho bounds the threshold noise, and then the m
    negatives cost about eps/2 each: the loss grows like (m - 1) eps / 2.
    """
    m = 6

    def sampler(data, n, rng):
        return fx.alg3_batch(data, 0.0, c=1, eps=EPS, n=n, rng=rng)

    event = fx.flags_equal_and_answer_at_most([0] * m + [1], m, 1.0)
    report = audit(
        sampler,
        [0] * m + [1],
        [1] * m + [0],
        {"bottom^6, answer <= 1": event},
        eps=EPS,
        trials=1_000_000,
        seed=6,
        confidence=CONFIDENCE,
    )
    assert report.rejected, report.summary()
    assert report.eps_lower > 2 * EPS, report.summary()


def test_fixture_single_runs_match_the_paper_output_format():
    rng = np.random.default_rng(0)
    out5 = fx.alg5([0, 1e9, -1e9], 0.0, eps=1.0, rng=rng)
    assert out5 == [False, True, False]  # no cutoff: every query gets an answer
    out3 = fx.alg3([-1e9, 1e9, 1e9], 0.0, c=1, eps=1.0, rng=rng)
    assert out3[0] is None and len(out3) == 2 and out3[1] > 1e8  # stops after c = 1 positive


# --------------------------------------------------------------------------
# The auditor's power on mechanisms of known epsilon
# --------------------------------------------------------------------------
def _alg1_sampler(data, n, rng):
    return fx.alg1_batch(data, 0.0, c=1, eps=EPS, n=n, rng=rng)


def test_auditor_power_on_vectorised_alg1():
    """Alg. 1 is exactly eps-DP and the event below shows a loss of about 0.86 eps."""
    d, d_prime = [0] * 5 + [1], [1] * 5 + [0]
    events = {"bottom^5 top": fx.flags_equal([0] * 5 + [1])}
    rng_d, rng_dp = (np.random.default_rng(s) for s in np.random.SeedSequence(7).spawn(2))
    out_d = _alg1_sampler(d, 200_000, rng_d)
    out_dp = _alg1_sampler(d_prime, 200_000, rng_dp)
    at = lambda e: audit_outputs(out_d, out_dp, events, eps=e, confidence=CONFIDENCE)  # noqa: E731
    assert not at(EPS).rejected, at(EPS).summary()
    assert not at(2 * EPS).rejected, at(2 * EPS).summary()
    assert at(EPS / 4).rejected, at(EPS / 4).summary()
    # A tight-ish lower bound: at least 0.6 of the true eps is proven.
    assert at(EPS).eps_lower > 0.6 * EPS, at(EPS).summary()


@pytest.fixture(scope="module")
def above_threshold_outputs():
    d, d_prime = [0, 0, 0, 1], [1, 1, 1, 0]
    sampler = shipped(lambda data, r: svt.above_threshold(data, 0.0, eps=EPS, rng=r))
    rng_d, rng_dp = (np.random.default_rng(s) for s in np.random.SeedSequence(8).spawn(2))
    return sampler(d, AT_TRIALS, rng_d), sampler(d_prime, AT_TRIALS, rng_dp)


def test_above_threshold_passes_at_its_eps_and_at_larger_eps(above_threshold_outputs):
    """above_threshold's audit at its claimed eps (and the auditor accepting larger eps)."""
    events = {"(3,)": positions_equal([3]), "()": positions_equal([])}
    for e in (EPS, 2 * EPS, 5 * EPS):
        report = audit_outputs(*above_threshold_outputs, events, eps=e, confidence=CONFIDENCE)
        assert not report.rejected, report.summary()
        assert max(c.eps_estimate for c in report.checks) > 0.2, report.summary()


def test_auditor_rejects_shipped_mechanism_tested_at_much_smaller_eps(above_threshold_outputs):
    events = {"(3,)": positions_equal([3]), "()": positions_equal([])}
    report = audit_outputs(*above_threshold_outputs, events, eps=EPS / 10, confidence=CONFIDENCE)
    assert report.rejected, report.summary()


# --------------------------------------------------------------------------
# The auditor itself
# --------------------------------------------------------------------------
def test_clopper_pearson_closed_forms():
    n, a = 50, 0.01
    # k = 0: upper bound solves (1 - p)^n = a; k = n: lower bound solves p^n = a.
    assert math.isclose(clopper_pearson_upper(0, n, a), 1 - a ** (1 / n), rel_tol=1e-9)
    assert math.isclose(clopper_pearson_lower(n, n, a), a ** (1 / n), rel_tol=1e-9)
    assert clopper_pearson_lower(0, n, a) == 0.0 and clopper_pearson_upper(n, n, a) == 1.0
    # Exactness: at the bound, the binomial tail equals alpha.
    k = 17
    lo, hi = clopper_pearson_lower(k, n, a), clopper_pearson_upper(k, n, a)
    assert math.isclose(stats.binom.sf(k - 1, n, lo), a, rel_tol=1e-6)
    assert math.isclose(stats.binom.cdf(k, n, hi), a, rel_tol=1e-6)


def test_clopper_pearson_coverage_by_simulation():
    rng = np.random.default_rng(11)
    p, n, a = 0.2, 40, 0.05
    ks = rng.binomial(n, p, size=4000)
    lower_ok = np.mean([clopper_pearson_lower(int(k), n, a) <= p for k in ks])
    upper_ok = np.mean([clopper_pearson_upper(int(k), n, a) >= p for k in ks])
    assert lower_ok >= 1 - a and upper_ok >= 1 - a


def test_audit_is_deterministic_and_corrects_for_multiple_events():
    def sampler(data, n, rng):
        return fx.alg1_batch(data, 0.0, c=1, eps=EPS, n=n, rng=rng)

    one = {"e": fx.flags_equal([0, 1])}
    many = {f"e{i}": fx.flags_equal([0, 1]) for i in range(10)}
    r1 = audit(sampler, [0, 1], [1, 0], one, eps=EPS, trials=5000, seed=3)
    r2 = audit(sampler, [0, 1], [1, 0], one, eps=EPS, trials=5000, seed=3)
    assert r1 == r2
    r10 = audit(sampler, [0, 1], [1, 0], many, eps=EPS, trials=5000, seed=3)
    # Same counts, but Bonferroni over 10 events widens every bound.
    assert r10.checks[0].count_a == r1.checks[0].count_a
    assert r10.checks[0].eps_lower < r1.checks[0].eps_lower


def test_audit_validates_its_arguments():
    sampler = per_trial(lambda data, rng: (0,))
    with pytest.raises(ValueError, match="event"):
        audit(sampler, [0], [1], {}, eps=1.0, trials=10, seed=0)
    with pytest.raises(ValueError, match="confidence"):
        audit(
            sampler,
            [0],
            [1],
            {"e": positions_equal([0])},
            eps=1.0,
            trials=10,
            seed=0,
            confidence=1.0,
        )
    with pytest.raises(ValueError, match="shape"):
        audit(sampler, [0], [1], {"bad": lambda outs: np.ones(3, bool)}, eps=1.0, trials=10, seed=0)
