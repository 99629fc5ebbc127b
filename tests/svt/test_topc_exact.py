"""The exact exponential-mechanism selection (permute-and-flip on the grid) against its law.

``exponential_top_c`` runs c rounds of report noisy max with exponential noise (McKenna and
Sheldon 2020; Ding et al. 2021), drawn exactly: geometric noise folded from one discrete
Laplace draw per candidate, ties broken by an exact uniform index (:mod:`matmech.svt.topc`).
Checked here: the folded geometric's law (closed form and samples), the closed-form round
probability against a direct sum over the geometric noise with the ties enumerated (a second
method), and the shipped sampler against the exact pmf at several ε and score scales.
"""

from __future__ import annotations

import math
import numpy as np
import pytest
from scipy import stats

import privacy_exact as pe
from matmech import svt
from matmech.privacy import noise
from matmech.svt.topc import em_calibration, geometric, report_noisy_max


def _direct_round(u, left, i, t, kmax=4000):
    """P[i wins among ``left``] for integer scores ``u`` and geometric noise P(G >= k) = p^k,
    p = e^{-1/t}, ties broken uniformly: sum over G_i = k of P(G_i = k) times
    E[1{every other <= u_i + k} / (1 + #ties)] = int_0^1 prod_j (P(u_j + G_j < v) + P(= v) s) ds,
    summed to k = kmax (tail below p^kmax)."""
    p = math.exp(-1.0 / t)
    others = [j for j in left if j != i]
    total = 0.0
    for k in range(kmax):
        v = u[i] + k
        poly = np.array([1.0])
        for j in others:
            m = v - u[j]
            below = 1.0 - p**m if m > 0 else 0.0
            at = (1 - p) * p**m if m >= 0 else 0.0
            poly = np.convolve(poly, [at, below])  # coefficients in s: highest first
        integral = float(np.sum(poly[::-1] / np.arange(1, poly.size + 1)))
        total += (1 - p) * p**k * integral
    return total


@pytest.mark.parametrize("t", [1, 2, 7])
@pytest.mark.parametrize("u", [(0, 0, 0), (3, 0, 1, 1), (5, -2, 5, 0), (0, 40, 1)])
def test_closed_form_round_equals_the_geometric_sum_with_ties(u, t):
    """The continuous-exponential closed form (pf_round) is the law of the discrete run:
    floor(E) geometric, the fractional parts breaking ties uniformly."""
    left = list(range(len(u)))
    probs = [pe.pf_round(u, left, i, 1.0 / t) for i in left]
    assert math.isclose(sum(probs), 1.0, rel_tol=1e-12)
    for i in left:
        assert math.isclose(probs[i], _direct_round(u, left, i, t), rel_tol=1e-9, abs_tol=1e-15)


def test_permute_and_flip_picks_the_best_at_least_as_often_as_the_exponential_mechanism():
    """McKenna and Sheldon 2020: never worse than the exponential mechanism at the same eps
    (here: the probability of the best candidate, on random score vectors)."""
    rng = np.random.default_rng(1)
    for _ in range(200):
        q = rng.integers(0, 8, size=int(rng.integers(2, 6))).astype(float)
        rate = float(rng.uniform(0.05, 3.0))
        best = int(np.argmax(q))
        w = np.exp(rate * (q - q.max()))
        ties = q == q.max()
        em = float(w[ties].sum() / w.sum())
        pf = sum(pe.pf_round(q, list(range(q.size)), i, rate) for i in np.flatnonzero(ties))
        assert pf >= em - 1e-12, (q, rate, best)


@pytest.mark.parametrize("t", [1, 3, 1000])
def test_folded_geometric_has_the_geometric_law(t):
    p = math.exp(-1.0 / t)
    # closed form: P(Z = k) + P(Z = -k - 1) = (1 - p) p^k for the discrete Laplace pmf
    k = np.arange(0, 50)
    z_pmf = lambda m: math.tanh(1 / (2 * t)) * p ** abs(m)  # noqa: E731
    assert np.allclose([z_pmf(m) + z_pmf(-m - 1) for m in k], (1 - p) * p**k, rtol=1e-12)
    n = 40_000
    g = geometric(t, n, rng=np.random.default_rng(t))
    assert g.dtype == np.int64 and g.min() >= 0
    # binned chi-square against the exact law (bins of equal probability ~ 1/20)
    edges = np.unique(np.ceil(np.log1p(-np.linspace(0, 0.95, 20)) / math.log(p))).astype(int)
    edges = edges[edges > 0]
    cuts = np.concatenate([[0], edges])
    cdf = lambda m: 1 - p**m  # noqa: E731  P(G < m)
    probs = [cdf(b) - cdf(a) for a, b in zip(cuts[:-1], cuts[1:])] + [p ** cuts[-1]]
    obs = [int(((g >= a) & (g < b)).sum()) for a, b in zip(cuts[:-1], cuts[1:])] + [
        int((g >= cuts[-1]).sum())
    ]
    assert stats.chisquare(obs, np.array(probs) * n).pvalue > 1e-4
    assert abs(g.mean() - p / (1 - p)) < 5 * math.sqrt(p) / (1 - p) / math.sqrt(n)


@pytest.mark.parametrize("t", [1, 2])
@pytest.mark.parametrize("u", [(0, 0, 0), (2, 0, 1, 2), (1, 3, 0)])
def test_one_round_at_small_scales_breaks_ties_uniformly(u, t):
    """At t = 1, 2 grid steps the geometric noise ties often (the release's grids are 2**16
    times finer): the exact round, ties and all, against its law."""
    left = list(range(len(u)))
    probs = np.array([pe.pf_round(u, left, i, 1.0 / t) for i in left])
    runs = 3000
    src = noise.check_rng(np.random.default_rng(10 * t + len(u)))
    picks = [report_noisy_max(np.array(u), t, rng=src) for _ in range(runs)]
    obs = np.bincount(picks, minlength=len(u))
    assert stats.chisquare(obs, probs * runs).pvalue > 1e-5, (obs, probs)


def test_report_noisy_max_refuses_bad_input():
    for bad, kw in (
        ([], {}),
        ([0.5, 1.0], {}),
        ([2**61], {}),
        ([1, 2], {"t": 0}),
        ([1], {"t": 1.5}),
    ):
        with pytest.raises(ValueError, match="units|t must"):
            report_noisy_max(np.array(bad), kw.get("t", 2), rng=np.random.default_rng(0))


CASES = [  # (values, c, eps, kwargs): integer, large, float (snapped), equal scores; monotonic
    ((4, 2, 0, 3), 2, 2.0, {}),
    ((0, 0, 0, 1), 2, 8.0, {"monotonic": True}),
    ((10**6 + 3, 10**6, 10**6 + 1, 10**6 + 3), 1, 0.5, {}),
    ((0.25, -1.5, 0.3, 1.1), 2, 1.0, {"sensitivity": 0.5}),
    ((0, 0, 0), 2, 20.0, {}),
]


@pytest.mark.parametrize("values,c,eps,kw", CASES)
def test_shipped_sampler_matches_the_exact_pmf(values, c, eps, kw):
    arr = np.asarray(values)
    cal = em_calibration(
        c=c,
        eps=eps,
        sensitivity=kw.get("sensitivity", 1.0),
        monotonic=kw.get("monotonic", False),
        integer_values=arr.dtype.kind in "iu",
    )
    on_grid = noise.snap(arr, cal.grid) if arr.dtype.kind == "f" else arr
    pmf = pe.em_pmf(on_grid, c, 1.0 / cal.scale)
    assert math.isclose(sum(pmf.values()), 1.0, rel_tol=1e-12)
    runs = 2500
    src = noise.check_rng(np.random.default_rng(sum(map(ord, repr(values)))))
    counts: dict = {}
    for _ in range(runs):
        o = svt.exponential_top_c(arr, c, eps, rng=src, **kw).positions
        counts[o] = counts.get(o, 0) + 1
    keys = [o for o, p in pmf.items() if p * runs >= 5]
    obs = [counts.get(o, 0) for o in keys] + [runs - sum(counts.get(o, 0) for o in keys)]
    exp = [pmf[o] * runs for o in keys] + [runs - sum(pmf[o] * runs for o in keys)]
    if exp[-1] < 1e-9:
        obs, exp = obs[:-1], exp[:-1]
    assert set(counts) <= set(pmf)
    assert stats.chisquare(obs, exp).pvalue > 1e-5, (counts, pmf)


def test_the_sampler_rejects_the_gumbel_exponential_mechanism():
    """Power: on the scores where they differ most, runs of the shipped mechanism are
    incompatible with the (Gumbel) exponential mechanism's law at the same rate."""
    v, c, eps, runs = np.array([0, 0, 0, 2]), 1, 2.0, 3000
    rate = svt.exponential_top_c(v, c, eps, rng=np.random.default_rng(0)).score_scale
    src = noise.check_rng(np.random.default_rng(5))
    hits = sum(svt.exponential_top_c(v, c, eps, rng=src).positions == (3,) for _ in range(runs))
    pf = pe.pf_round(v, [0, 1, 2, 3], 3, rate)
    w = np.exp(rate * v)
    em = w[3] / w.sum()
    se = math.sqrt(pf * (1 - pf) / runs)
    assert abs(hits / runs - pf) < 4.5 * se and abs(hits / runs - em) > 9 * se
