"""Intervals from the noise law (matmech.privacy.confidence), one truth for the error, and
the structured / cached / capped paths of issue 23. Second methods: brute-force convolution,
exact enumeration, dense pseudo-inverses, Monte Carlo within 4 SE."""

import json
import math

import numpy as np
import pytest

import matmech as mm
from matmech import strategies as S
from matmech import workloads as wl
from matmech.error import expected_error, noise_weights
from matmech.privacy import confidence as C
from matmech.privacy.noise import discrete_laplace, discrete_laplace_variance
from matmech.results.release import INTERVAL_COLUMNS


def _brute(noise, t, weights):
    """pmf of Σ c_j z_j (integer c) by direct convolution of the stretched pmfs."""
    _, p = C.noise_pmf(noise, t)
    out = np.array([1.0])
    for c in weights:
        s = np.zeros((p.size - 1) * c + 1)
        s[::c] = p
        out = np.convolve(out, s)
    return out


@pytest.mark.parametrize(
    "noise,t,w",
    [
        ("discrete_laplace", 0.43, [1]),
        ("discrete_laplace", 1.3, [1, 1, 2]),
        ("discrete_gaussian", 0.6, [1, 3]),
        ("discrete_gaussian", 2.0, [1, 1, 1, 1]),
    ],
)
def test_sum_pmf_matches_direct_convolution(noise, t, w):
    _, ps = C.sum_pmf(noise, t, w)
    ref = _brute(noise, t, w)
    mid = (ref.size - 1) // 2
    half = (ps.size - 1) // 2
    np.testing.assert_allclose(ps, ref[mid - half : mid + half + 1], atol=1e-14)
    assert ps.sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("t", [0.1, 0.43, 1.0, 3.7, 10.0])
def test_exact_interval_is_the_smallest_integer_half_width_reaching_the_level(t):
    law = C.law_intervals(np.array([[1.0, 0.0], [1.0, 1.0]]), "discrete_laplace", t, 1.0)
    assert list(law.method) == ["exact", "exact"]
    for row, w in enumerate(([1], [1, 1])):
        ref = _brute("discrete_laplace", t, w)
        mid = (ref.size - 1) // 2
        r = int(law.half[row])
        assert law.half[row] == r
        cov = ref[mid - r : mid + r + 1].sum()
        assert law.coverage[row] == pytest.approx(cov, abs=1e-12) and cov >= 0.95
        if r > 0:
            assert ref[mid - r + 1 : mid + r].sum() < 0.95


def test_single_laplace_draw_coverage_matches_closed_form():
    """P(|Z| ≤ r) = 1 − 2p^{r+1}/(1+p) for the two-sided geometric."""
    t = 2.0
    law = C.law_intervals(np.eye(1), "discrete_laplace", t, 1.0)
    p, r = math.exp(-1 / t), int(law.half[0])
    assert law.coverage[0] == pytest.approx(1 - 2 * p ** (r + 1) / (1 + p), rel=1e-12)


def test_convolution_lower_bound_holds_by_monte_carlo():
    rng = np.random.default_rng(3)
    c = np.array([[0.61, 0.3, -0.2, 0.11]])
    t = 1.5
    law = C.law_intervals(c, "discrete_laplace", t, 1.0)
    assert law.method[0] == "convolution"
    z = discrete_laplace(t, (4, 200_000), rng=rng).astype(float)
    mc = float((np.abs(c @ z) <= law.half[0]).mean())
    se = math.sqrt(mc * (1 - mc) / 200_000)
    assert mc >= law.coverage[0] - 4 * se and law.coverage[0] >= 0.95
    assert mc <= 0.95 + 0.01  # and it is not much wider than needed


def test_moments_method_names_itself_and_uses_the_kurtosis():
    c = np.ones((1, 400)) * np.linspace(0.5, 1.5, 400)  # 400 distinct weights: beyond MAX_TERMS
    lap = C.law_intervals(c, "discrete_laplace", 50.0, 1.0)
    gau = C.law_intervals(c, "discrete_gaussian", 50.0, 1.0)
    assert lap.method[0] in ("normal", "cornish-fisher") and gau.method[0] == "normal"
    # never NaN: the Edgeworth estimate (the level for Cornish-Fisher, whose quantile removes
    # the kurtosis term; level - phi(z)(z^3 - 3z) k4 / 12 for the normal quantile)
    assert lap.coverage[0] == pytest.approx(0.95, abs=C.NORMAL_TOLERANCE)
    assert 0.949 <= gau.coverage[0] <= 0.951
    assert C.edgeworth_coverage(0.0, 0.95) == 0.95
    assert C.edgeworth_coverage(3.0, 0.95) == pytest.approx(0.926, abs=1e-3)  # one Laplace draw
    one = C.normal_intervals(np.ones(3), 0.95, excess=3.0)
    assert np.all(one.coverage == C.edgeworth_coverage(3.0, 0.95)) and set(one.method) == {"normal"}
    assert C.excess_kurtosis("discrete_laplace", 500.0) == pytest.approx(3.0, abs=1e-3)


def test_noise_weights_match_the_dense_pseudo_inverse():
    W, A = wl.all_range(8), S.hierarchical(8, 2)
    Ad = A.dense()
    ref = W.dense() @ np.linalg.pinv(Ad.T @ Ad) @ Ad.T
    np.testing.assert_allclose(noise_weights(W, A), ref, atol=1e-12)
    np.testing.assert_allclose(noise_weights(W, S.identity(8)), W.dense())


def test_release_intervals_cover_as_reported_identity_monte_carlo():
    """ε = 2.3: the normal interval 1.96·std < 1 missed every ±1 error (81.7%); the exact one
    has half-width 1 and covers P(|Z| ≤ 1), checked by Monte Carlo over 400 releases."""
    x = np.arange(16) * 5
    W = wl.identity(16)
    rng = np.random.default_rng(11)
    hits, reported = 0, None
    for _ in range(400):
        r = mm.release(x, W, 2.3, strategy="identity", rng=rng)
        lo, hi = r.interval()
        hits += int(((lo <= x) & (x <= hi)).sum())
        reported = r.interval_law()
    assert set(reported.method) == {"exact"}
    mc = hits / (400 * 16)
    p = float(reported.coverage[0])
    assert abs(mc - p) <= 4 * math.sqrt(p * (1 - p) / (400 * 16)) and p >= 0.95


def test_expected_error_is_the_noise_drawn_and_continuous_is_an_option():
    W = wl.all_range(16)
    x = np.arange(16)
    for strat, A in (("identity", S.identity(16)), ("hierarchical", None)):
        r = mm.release(x, W, 2.0, strategy=strat, rng=np.random.default_rng(0))
        A = r.strategy
        assert expected_error(W, A, 2.0) == pytest.approx(r.expected_error, rel=1e-9)
        sens = A.sensitivity(1)
        ratio = discrete_laplace_variance(sens / 2.0) / (2 * (sens / 2.0) ** 2)
        assert expected_error(W, A, 2.0, noise="continuous") * ratio == pytest.approx(
            r.expected_error, rel=1e-9
        )
    with pytest.raises(ValueError, match="noise must be one of"):
        expected_error(W, S.identity(16), 1.0, noise="laplace")
    k, pmf = C.noise_pmf("discrete_laplace", 1.0)  # second method: the pmf's second moment
    assert discrete_laplace_variance(1.0) == pytest.approx(float((k * k * pmf).sum()), rel=1e-12)


def test_columns_are_named_once_for_python_json_and_csv():
    r = mm.release(
        np.arange(8), wl.identity(8), 1.0, strategy="identity", rng=np.random.default_rng(1)
    )
    row = mm.release_table(r)[0]
    assert (
        set(INTERVAL_COLUMNS) <= set(row) and row["interval"] == "exact" and row["coverage"] >= 0.95
    )
    js = json.loads(r.to_json())
    assert set(INTERVAL_COLUMNS) <= set(js["queries"][0]) and js["intervals"]["methods"] == {
        "exact": 8
    }


def test_residual_path_records_strategy_and_noise():
    rng = np.random.default_rng(0)
    dom = (3, 4, 5)
    rec = np.stack([rng.integers(0, d, 300) for d in dom], 1)
    W = wl.marginals(dom, 2)
    for delta, dist in ((0.0, "discrete_laplace"), (1e-6, "discrete_gaussian")):
        r = mm.release(rec, W, 1.0, delta, strategy="residual", rng=rng)
        js = json.loads(r.to_json())
        assert js["noise"]["distribution"] == dist and js["strategy"]["name"] == "residual"
        assert js["strategy"]["type"] in ("weighted marginal tables", "residual basis")


def test_marginal_strategy_stays_structured_and_matches_dense_gls():
    dom = (2, 3, 4)
    W = wl.marginals(dom, 2)
    x = np.random.default_rng(2).poisson(4, 24)
    from matmech.optimizers.marginal_lattice import MarginalStrategy

    given = MarginalStrategy(dom, np.linspace(0.1, 1.0, 8))  # explicit: the histogram route
    r = mm.release(x, W, 1.0, strategy=given, rng=np.random.default_rng(5), domain=24)
    A = r.strategy.dense()
    xhat = np.linalg.pinv(A) @ r.measurement.y
    np.testing.assert_allclose(r.answers, W.dense() @ xhat, atol=1e-8)
    var = r.measurement.std**2 * np.einsum(
        "ij,jk,ik->i", W.dense(), np.linalg.pinv(A.T @ A), W.dense()
    )
    np.testing.assert_allclose(r.std**2, var, rtol=1e-8)
    from matmech.optimizers.marginal_lattice import MarginalStrategy

    m = MarginalStrategy(dom, np.linspace(0.1, 1.0, 8))
    g = 2.0**-10
    rounded = m.rounded_operator(g)
    assert isinstance(rounded, MarginalStrategy)
    assert np.all(np.abs(rounded.dense() / g - np.rint(rounded.dense() / g)) == 0)
    assert np.abs(rounded.dense() - m.dense()).max() <= g / 2


def test_auto_choice_is_cached_per_workload_fingerprint():
    from matmech.advisor import cache
    from matmech.advisor.choice import choose_strategy

    cache.clear()
    W = wl.all_range(16)
    A1, _, _ = choose_strategy(W, 1.0, 0.0)
    A2, _, _ = choose_strategy(wl.all_range(16), 1.0, 0.0)
    A3, _, _ = choose_strategy(W, 2.0, 0.0)
    assert A1 is A2 and len(cache._CACHE) == 2 and A3 is not A1
    assert cache.fingerprint(wl.prefix(8)) != cache.fingerprint(wl.prefix(9))
    assert cache.fingerprint(wl.prefix(8)) != cache.fingerprint(wl.all_range(8))


def test_public_entry_points_cap_blas_threads():
    from threadpoolctl import threadpool_info

    from matmech.optimizers.blas import capped

    seen = []

    @capped
    def probe():
        seen.extend(d["num_threads"] for d in threadpool_info() if d["user_api"] == "blas")

    probe()
    assert seen and set(seen) == {1}
    assert (
        getattr(mm.release, "__wrapped__", None) is not None
        and getattr(mm.optimize, "__wrapped__", None) is not None
    )


def test_marginal_tables_that_suffice_for_w_are_accepted_under_pure_eps():
    """Only W's 2-way tables, default strategy, δ = 0: the residual path answers from them
    (the Kronecker path would need the full table); the same numbers as strategy='residual'
    on the records with the same draws."""
    import itertools

    from matmech.sources.tables import marginal_tables

    rng = np.random.default_rng(0)
    dom = (3, 4, 5)
    rec = np.stack([rng.integers(0, d, 300) for d in dom], 1)
    W = wl.marginals(dom, 2)
    tables = marginal_tables(rec, dom, list(itertools.combinations(range(3), 2)))
    from matmech.release import release_factored

    a = mm.release(dict(tables), W, 1.0, rng=np.random.default_rng(9))
    # given tables: the table weights are searched over W's lattice only (what the tables hold)
    b = release_factored(
        rec, W, 1.0, strategy="residual", search="lattice", rng=np.random.default_rng(9)
    )
    assert a.strategy_name == "residual"
    np.testing.assert_array_equal(a.answers, b.answers)
    np.testing.assert_array_equal(a.std, b.std)
    # records with the default strategy take the same route (the route follows W, not the data form)
    assert mm.release(rec, W, 1.0, rng=np.random.default_rng(9)).strategy_name == "residual"
