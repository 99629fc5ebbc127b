"""Exact privacy audit of the selection mechanisms (issue 10, finding 5), with power.

For small inputs the output distribution of every shipped SVT / EM is
computed exactly (tests/privacy_exact.py: discrete Laplace on the run's grid,
the threshold noise summed in closed form, the EM in Plackett-Luce form), on
adversarial neighbouring pairs: every pair around 0^4 with each query moving
by -1, 0 or +1 (one-directional moves for monotonic queries), the StatDP pairs
(Ding et al., CCS 2018) and the counterexample blocks of Lyu, Su, Li (VLDB 2017).
The privacy loss max_o |log P[M(D)=o] - log P[M(D')=o]| must be <= eps + 1e-9;
with every noise scale halved ("mutant", audited at the original eps) it must
exceed eps, as must the paper's non-private Alg. 3-6.  Seeded runs of the
shipped functions must match the exact probabilities (the sampling-based
second method; the Clopper-Pearson audit is tests/test_privacy_audit.py).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

import privacy_exact as pe
import svt_fixtures as fx
from matmech import svt
from matmech.privacy import noise
from matmech.svt import core as svt_core

TOL = 1e-9
CASES = pe.shipped_cases()
IDS = [c.name for c in CASES]
# The sampling check runs on one configuration of each code path.
SAMPLED = [
    "sparse_vector c=2",
    "sparse_vector monotonic c=1",
    "sparse_vector float values c=2",
    "sparse_vector c=1 eps_answer=0.5",
    "above_threshold",
    "SparseVector c=2",
    "SparseVector c=1 eps_answer=0.5",
    "sparse_vector_dpbook c=2",
    "sparse_vector_retraversal c=2 boost=0.5",
    "exponential_top_c c=2",
    "exponential_top_c monotonic c=1",
    "select_rows svt c=2",
    "select_rows em c=2",
]
RUNS = 3000


@pytest.fixture(scope="module")
def models():
    """(correct, mutant) exact models of every case, built once."""
    return {c.name: (c.build(1.0), c.build(0.5)) for c in CASES}


# --------------------------------------------------------------------------
# The exact engine
# --------------------------------------------------------------------------
def _direct(spec, t1, t2, k=6000):
    """sum over |rho| <= k of P[rho] prod P[top/bottom | rho], term by term (tails < 1e-40)."""
    total = 0.0
    for r in range(-k, k + 1):
        v = pe.dlap_pmf(r, t1)
        for top, d in spec:
            s = pe.dlap_tail(d + r, t2)
            v *= s if top else 1.0 - s
        total += v
    return total


@pytest.mark.parametrize("seed", range(4))
def test_closed_form_sum_matches_direct_summation(seed):
    rng = np.random.default_rng(seed)
    t1, t2 = rng.uniform(2, 40, size=2)
    spec = [(bool(rng.integers(2)), int(rng.integers(-60, 61))) for _ in range(5)]
    fs = [pe.above(d, t2) if top else pe.below(d, t2) for top, d in spec]
    assert math.isclose(pe.integrate(fs, t1, t2), _direct(spec, t1, t2), rel_tol=1e-12)


def test_discrete_laplace_closed_forms():
    t = 7.3
    ks = np.arange(-400, 401)
    pmf = np.array([pe.dlap_pmf(int(k), t) for k in ks])
    assert math.isclose(pmf.sum(), 1.0, rel_tol=1e-12)
    for m in (-5, 0, 1, 9):
        assert math.isclose(pe.dlap_tail(m, t), pmf[ks >= m].sum(), rel_tol=1e-12)


def test_answer_loss_is_the_supremum_over_released_numbers():
    t3, q, q2 = 5.0, 3, 1
    grid = range(-60, 61)
    best = max(abs(math.log(pe.dlap_pmf(a - q, t3) / pe.dlap_pmf(a - q2, t3))) for a in grid)
    assert math.isclose(pe.answer_loss([0], [q], [q2], t3), best, rel_tol=1e-12)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_exact_distributions_sum_to_one(case, models):
    model = models[case.name][0]
    for key in {k for pair in model.pairs[:: max(1, len(model.pairs) // 12)] for k in pair}:
        assert math.isclose(sum(model.pmf(key).values()), 1.0, abs_tol=1e-12), key


# --------------------------------------------------------------------------
# The audit and its mutation test
# --------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_shipped_mechanism_exact_loss_at_most_eps(case, models):
    model = models[case.name][0]
    loss = pe.audit_model(model)
    assert loss.value <= model.eps + TOL, f"{case.name}: {loss}"
    # The pairs are adversarial: a large part of eps is actually spent.
    assert loss.value > 0.5 * model.eps, f"{case.name}: {loss}"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_noise_halved_mutant_is_rejected(case, models):
    mutant = models[case.name][1]
    loss = pe.audit_model(mutant)
    assert loss.value > mutant.eps + 0.1, f"{case.name} with noise halved: {loss}"


def test_mutant_through_patched_calibration_is_rejected_and_matches_samples(monkeypatch):
    """Halve the scales inside the shipped calibration (as a calibration bug would) and
    audit the model built from what sparse_vector then reports and samples."""
    real = svt_core.calibrate  # Alg. 7's calibration hook, as sparse_vector opens its run
    case = next(c for c in CASES if c.name == "sparse_vector c=2")
    correct = svt_core.svt_budget(c=2, eps=1.0, integer_values=True)

    def halved(**kw):
        b = real(**kw)
        return type(b)(
            **{
                **b.__dict__,
                "threshold_scale": b.threshold_scale / 2,
                "query_scale": b.query_scale / 2,
            }
        )

    monkeypatch.setattr(svt_core, "calibrate", halved)
    model = case.build(1.0)  # reads the (now halved) budget from a shipped run
    assert pe.Scales.of(svt.sparse_vector([0], 0, c=2, eps=1.0).budget) == pe.Scales.of(
        correct, 0.5
    )
    assert pe.audit_model(model).value > model.eps + 0.1
    _check_sampling(model, case.sample_key, seed=99)


# --------------------------------------------------------------------------
# The model is the code: seeded runs match the exact probabilities
# --------------------------------------------------------------------------
def _counts(model, key, seed, runs=RUNS):
    src = noise.check_rng(np.random.default_rng(seed))
    out: dict = {}
    for _ in range(runs):
        o = model.sample(key, src)
        out[o] = out.get(o, 0) + 1
    return out


def _chi2_pvalue(counts, probs, runs):
    """Pearson chi-square of the counts against the exact pmf (cells with expectation < 5 pooled)."""
    big = [o for o, p in probs.items() if p * runs >= 5]
    obs = [counts.get(o, 0) for o in big]
    exp = [probs[o] * runs for o in big]
    rest_obs = runs - sum(obs)
    rest_exp = runs - sum(exp)
    if rest_exp >= 1e-9:
        obs.append(rest_obs)
        exp.append(rest_exp)
    stat = sum((a - e) ** 2 / e for a, e in zip(obs, exp))
    return float(stats.chi2.sf(stat, max(1, len(obs) - 1)))


def _check_sampling(model, key, seed, runs=RUNS):
    probs = (model.sample_pmf or model.pmf)(key)
    counts = _counts(model, key, seed, runs)
    assert set(counts) <= set(probs), (
        f"outputs the model gives probability 0: {set(counts) - set(probs)}"
    )
    for o, p in probs.items():
        k, mean = counts.get(o, 0), p * runs
        assert abs(k - mean) <= 5 * math.sqrt(mean * (1 - p)) + 1, (o, k, mean)
    assert _chi2_pvalue(counts, probs, runs) > 1e-6, counts
    return counts


@pytest.mark.parametrize("name", SAMPLED)
def test_shipped_runs_match_the_exact_model(name, models):
    case = next(c for c in CASES if c.name == name)
    correct, mutant = models[name]
    counts = _check_sampling(correct, case.sample_key, seed=sum(map(ord, name)))
    # Power: the same runs are incompatible with the noise-halved model.
    mprobs = (mutant.sample_pmf or mutant.pmf)(case.sample_key)
    assert _chi2_pvalue(counts, mprobs, RUNS) < 1e-6, name


# --------------------------------------------------------------------------
# The paper's variants ([LSL17] Fig. 1-2)
# --------------------------------------------------------------------------
@pytest.mark.parametrize("alg", [3, 4, 5, 6])
@pytest.mark.parametrize("c", [1, 2])
def test_paper_non_private_variants_are_rejected(alg, c):
    v = fx.VARIANTS[alg]
    assert not v.private
    loss = pe.audit_model(pe.variant_model(v, c=c))
    assert loss.value > 1.5, f"Alg. {alg} c={c}: {loss}"


def test_alg5_loss_is_infinite():
    """[LSL17] Thm. 3.5: (0, 1) vs (1, 0), output (bottom, top) impossible on D'."""
    v = fx.VARIANTS[5]
    m = pe.variant_model(v)
    assert pe.privacy_loss(m.pmf((0, (0, 1))), m.pmf((0, (1, 0))))[0] == math.inf


def test_alg3_loss_grows_with_the_number_of_bottoms():
    """[LSL17] Thm. 9.11: releasing q_i + nu_i makes each bottom cost about eps/2."""
    v, g = fx.VARIANTS[3], pe.VARIANT_GRID
    losses = []
    for m in (2, 4, 6):
        d, d2 = [0] * m + [1], [1] * m + [0]
        p = pe.variant_pmf(v, pe.units(d, g), 0, 1, 1.0, g, answers=(0,))
        p2 = pe.variant_pmf(v, pe.units(d2, g), 0, 1, 1.0, g, answers=(0,))
        losses.append(pe.privacy_loss(p, p2)[0])
    assert losses[0] < losses[1] < losses[2] and losses[2] > 2.0, losses


def test_alg1_fixture_passes_and_its_mutant_is_rejected():
    v = fx.VARIANTS[1]
    for c in (1, 2):
        assert pe.audit_model(pe.variant_model(v, c=c)).value <= 1.0 + TOL
        assert pe.audit_model(pe.variant_model(v, c=c, factor=0.5)).value > 1.1


# --------------------------------------------------------------------------
# The free-gap mechanisms (issue 16; Ding, Wang, Zhang, Kifer, PVLDB 2019)
# --------------------------------------------------------------------------
GAP_CASES = pe.gap_cases()
GAP_IDS = [c.name for c in GAP_CASES]


@pytest.fixture(scope="module")
def gap_models():
    return {c.name: (c.build(1.0), c.build(0.5)) for c in GAP_CASES}


@pytest.mark.parametrize("case", GAP_CASES, ids=GAP_IDS)
def test_gap_mechanism_exact_loss_at_most_eps(case, gap_models):
    """Loss over (positions, branches, gaps) at gap values 0 .. 60 value units, every pair."""
    model = gap_models[case.name][0]
    loss = pe.audit_model(model)
    assert loss.value <= model.eps + TOL, f"{case.name}: {loss}"
    assert loss.value > 0.55 * model.eps, f"{case.name}: {loss}"


@pytest.mark.parametrize("case", GAP_CASES, ids=GAP_IDS)
def test_gap_mechanism_noise_halved_is_rejected(case, gap_models):
    mutant = gap_models[case.name][1]
    loss = pe.audit_model(mutant)
    assert loss.value > mutant.eps + 0.1, f"{case.name} with noise halved: {loss}"


def test_gap_svt_model_sums_to_one_and_integrates_its_point_masses():
    """The gap-integrated model sums to 1, and summing the point masses over every gap value
    (a fine run of gaps, for a coarse-grid configuration) reproduces it."""
    sc = pe.GapScales(
        threshold=3.0, query=4.0, top=8.0, sigma=5, limit=0, grid=1.0
    )  # one positive at most
    d = [-1, 2, 0]
    full = pe.gap_svt_pmf(d, sc, None)
    assert math.isclose(sum(full.values()), 1.0, abs_tol=1e-12)
    pts = pe.gap_svt_pmf(d, sc, {"middle": tuple(range(600)), "top": tuple(range(5, 600))})
    for (pos, br, _), p in full.items():
        s = sum(v for k, v in pts.items() if k[:2] == (pos, br))
        assert math.isclose(s, p, rel_tol=1e-9, abs_tol=1e-14), (pos, br)


def test_topc_gap_model_sums_to_one():
    """All (order, gaps) masses of Noisy Top-2 with gap on a coarse grid sum to 1 (ties included)."""
    t = 2.0
    total = sum(pe.topc_gap_pmf([0, 1, 3], 2, t, tuple(range(60))).values())
    assert math.isclose(total, 1.0, rel_tol=1e-9)


@pytest.mark.parametrize("name", ["svt_gap c=2", "adaptive_svt c=2", "adaptive_svt monotonic c=2"])
def test_shipped_gap_svt_runs_match_the_exact_model(name, gap_models):
    """Seeded runs: (positions, branches) frequencies against the model with the gaps integrated out."""
    case = next(c for c in GAP_CASES if c.name == name)
    correct, mutant = gap_models[name]
    counts = _check_sampling(correct, case.sample_key, seed=sum(map(ord, name)), runs=2000)
    assert _chi2_pvalue(counts, mutant.sample_pmf(case.sample_key), 2000) < 1e-6, name


def test_topc_gap_runs_match_the_model_and_gap_moments():
    """Seeded Noisy Top-1 runs: P[selected] from the exact model, and the gap's mean and
    variance for well separated scores (q_0 - q_1 plus two Laplace draws)."""
    from matmech.svt.gap import noisy_top_c_gap

    rng = noise.check_rng(np.random.default_rng(5))
    q = np.array([2, 0, 1], dtype=np.int64)
    cal = noisy_top_c_gap(q, 1, 1.0, rng=rng).calibration
    u = int(round(1 / cal.grid))
    # P[j_1 = i]: sum the exact point masses over all gaps (coarsened: the pmf is summed in blocks)
    runs = 3000
    hits = np.bincount(
        [noisy_top_c_gap(q, 1, 1.0, rng=rng).positions[0] for _ in range(runs)], minlength=3
    )
    big = np.array([60 * u, 0, 30 * u], dtype=np.int64)
    gaps = np.array([noisy_top_c_gap(big // u, 1, 1.0, rng=rng).gaps[0] for _ in range(runs)])
    var = 2 * cal.gap_variance("middle")
    assert abs(gaps.mean() - 30.0) < 5 * math.sqrt(var / runs)
    assert abs(gaps.var() / var - 1) < 0.15
    # P[j_1 = 0] = P[eta_0 + 2 >= eta_1, eta_0 + 2 >= eta_2 + 1]: one integral over eta_0
    # (continuous Laplace; the grid changes it by ~2**-16)
    from scipy import integrate as si

    b = cal.query_scale
    f = lambda e: math.exp(-abs(e) / b) / (2 * b)  # noqa: E731
    F = lambda e: 1 - 0.5 * math.exp(-e / b) if e >= 0 else 0.5 * math.exp(e / b)  # noqa: E731
    p0 = si.quad(
        lambda e: f(e) * F(e + 2) * F(e + 1), -60 * b, 60 * b, points=[-2, -1, 0], limit=200
    )[0]
    assert abs(hits[0] - runs * p0) <= 5 * math.sqrt(runs * p0 * (1 - p0)) + 1, (hits, p0)


# --------------------------------------------------------------------------
# The vector selections (matmech.svt.vector): Laplace mechanism on all of W x
# --------------------------------------------------------------------------
VECTOR_CASES = pe.vector_cases()
VECTOR_IDS = [c.name for c in VECTOR_CASES]


@pytest.fixture(scope="module")
def vector_models():
    return {c.name: (c.build(1.0), c.build(0.5)) for c in VECTOR_CASES}


@pytest.mark.parametrize("case", VECTOR_CASES, ids=VECTOR_IDS)
def test_vector_selection_exact_loss_at_most_eps(case, vector_models):
    """Loss over (positions, released values, runner-up value) on every pair moving the
    vector by at most its L1 sensitivity; through select_rows the sensitivity is the one
    the library derives from W (add/remove and substitution)."""
    model = vector_models[case.name][0]
    loss = pe.audit_model(model)
    assert loss.value <= model.eps + TOL, f"{case.name}: {loss}"
    assert loss.value > 0.7 * model.eps, f"{case.name}: {loss}"


@pytest.mark.parametrize("case", VECTOR_CASES, ids=VECTOR_IDS)
def test_vector_selection_noise_halved_is_rejected(case, vector_models):
    mutant = vector_models[case.name][1]
    loss = pe.audit_model(mutant)
    assert loss.value > mutant.eps + 0.1, f"{case.name} with noise halved: {loss}"


def test_vector_models_sum_to_one():
    """On a coarse scale every output's mass, summed over a wide run of values, totals 1."""
    pts = range(-28, 32)
    top = pe.vector_top_c_pmf([0, 1, 3], 2, 1.0, pts)
    assert math.isclose(sum(top.values()), 1.0, rel_tol=1e-9)
    thr = pe.vector_threshold_pmf([0, 1, 3], 1, 2, 1.0, pts)
    assert math.isclose(sum(thr.values()), 1.0, rel_tol=1e-9)


def test_vector_sensitivity_too_small_is_caught():
    """A vector selection calibrated for L1 sensitivity 1 fails the audit on L1-2 pairs:
    the pairs are strong enough to catch a joint sensitivity taken as a row sensitivity."""
    case = pe.vector_case("vector_top_c sens=1", method="vector-top-c", c=1, sensitivity=1)
    model = case.build(1.0)
    wide = pe.keyed(pe.l1_pairs(3, 2), thresholds=(None,))
    loss = pe.audit_pairs(model.pmf, wide)
    assert loss.value > model.eps + 0.5, loss


def test_vector_runs_match_the_model_moments():
    """Seeded runs: the released value of a clear winner is q + DLap(scale) (mean, exact
    variance), and the gap to the runner-up is their difference."""
    from matmech.svt.vector import noisy_vector_top_c

    rng = noise.check_rng(np.random.default_rng(11))
    q = np.array([60, 0, 30], dtype=np.int64)
    runs = [noisy_vector_top_c(q, 1, 1.0, sensitivity=2.0, rng=rng) for _ in range(3000)]
    cal = runs[0].calibration
    vals = np.array([r.values[0] for r in runs])
    gaps = np.array([r.gaps[0] for r in runs])
    assert all(r.positions == (0,) for r in runs)
    var = cal.variance()
    assert math.isclose(var, 2 * (2.0 / 1.0) ** 2, rel_tol=1e-3)  # Lap(2/1) on a fine grid
    assert abs(vals.mean() - 60) < 5 * math.sqrt(var / vals.size)
    assert abs(vals.var() / var - 1) < 0.15
    assert abs(gaps.mean() - 30) < 5 * math.sqrt(2 * var / gaps.size)
