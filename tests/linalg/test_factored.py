"""Sensitivity and error of Kronecker products, stacks of them and marginal strategies taken
from the factors (issue 12): equal to the dense forms on small domains, nothing domain-sized
on large ones."""

import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import matmech as mm
from matmech import workloads
from matmech.linalg.linop import (
    Dense,
    Identity,
    Kron,
    Ones,
    Scaled,
    VStack,
    kron_terms,
)
from matmech.linalg.normmax import factored_col_norms, factored_sensitivity
from matmech.optimizers.marginal_lattice import MarginalStrategy

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _dense_colnorm_max(A, p):
    d = A.dense()
    return float((np.abs(d).sum(0) if p == 1 else np.sqrt((d**2).sum(0))).max())


@st.composite
def kron_stacks(draw, *, full_rank=False, max_terms=4):
    """(VStack of weighted Krons of random small factors, sizes)."""
    k = draw(st.integers(2, 4))
    sizes = [draw(st.integers(2, 5)) for _ in range(k)]
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    terms = draw(st.integers(1, max_terms))
    blocks = []
    for _ in range(terms):
        fs = []
        for n in sizes:
            kind = rng.integers(0, 5)
            if kind == 0:
                fs.append(Identity(n))
            elif kind == 1:
                fs.append(Ones(1, n))
            else:
                m = rng.integers(1, 5)
                a = rng.normal(size=(m, n)) * (rng.random((m, n)) < 0.7)
                fs.append(Dense(a))
        blocks.append(Kron(*fs))
    weights = rng.uniform(0.1, 3.0, terms)
    return VStack(blocks, weights=weights), sizes, rng


@SETTINGS
@given(kron_stacks(), st.sampled_from([1, 2]))
def test_factored_sensitivity_equals_dense(case, p):
    V, _, _ = case
    terms = kron_terms(V)
    dense = V.dense()
    cn = np.abs(dense).sum(0) if p == 1 else np.sqrt((dense**2).sum(0))
    np.testing.assert_allclose(factored_col_norms(terms, p), cn, rtol=1e-10, atol=1e-12)
    res = factored_sensitivity(terms, p)
    assert res.exact
    assert res.value == pytest.approx(cn.max(), rel=1e-9, abs=1e-12)
    # the small-domain operator path is the dense one, unchanged
    assert V.sensitivity(p) == pytest.approx(cn.max(), rel=1e-12)
    # a scaled stack and a nested stack factor the same way
    nested = VStack([Scaled(V, -2.0), V.blocks[0]], weights=[1.0, 0.5])
    assert factored_sensitivity(kron_terms(nested), p).value == pytest.approx(
        _dense_colnorm_max(nested, p), rel=1e-9, abs=1e-12
    )


@SETTINGS
@given(kron_stacks(), st.sampled_from([1, 2]))
def test_node_cap_falls_back_to_certified_bound(case, p):
    V, _, _ = case
    terms = kron_terms(V)
    true = _dense_colnorm_max(V, p)
    res = factored_sensitivity(terms, p, node_cap=0)
    assert res.value >= true * (1 - 1e-12)
    if not res.exact:
        assert res.method == "upper bound"
        bound = sum(
            w**p * math.prod(float(f.col_norms(p).max()) ** p for f in fs) for w, fs in terms
        )
        assert res.value == pytest.approx(bound if p == 1 else math.sqrt(bound), rel=1e-12)
    else:
        assert res.value == pytest.approx(true, rel=1e-9, abs=1e-12)


def test_constant_and_single_term_methods():
    M = workloads.marginals((3, 4, 5), 2)
    assert factored_sensitivity(kron_terms(M), 1) == (3.0, True, "constant")
    K = Kron(Dense(np.array([[1.0, -2.0], [0.0, 1.0]])), workloads.prefix(3))
    r = factored_sensitivity(kron_terms(Scaled(K, 2.0)), 1)
    assert (
        r.exact
        and r.method == "single term"
        and r.value == pytest.approx(2 * _dense_colnorm_max(K, 1))
    )


def _full_rank_kron(sizes, rng):
    # identity rows keep every factor well conditioned, so that the dense reference is accurate
    return Kron(
        *[
            Dense(np.vstack([np.eye(n), 0.5 * rng.normal(size=(int(rng.integers(0, 3)), n))]))
            for n in sizes
        ]
    )


@SETTINGS
@given(kron_stacks(), st.sampled_from([0.0, 1e-6]))
def test_kron_strategy_error_equals_dense(case, delta):
    W, sizes, rng = case
    A = _full_rank_kron(sizes, rng)
    Wd, Ad = Dense(W.dense()), Dense(A.dense())
    for measure in ("total", "max", "rmse"):
        got = mm.expected_error(W, A, eps=0.7, delta=delta, measure=measure, noise="continuous")
        want = mm.expected_error(Wd, Ad, eps=0.7, delta=delta, measure=measure, noise="continuous")
        assert got == pytest.approx(want, rel=1e-7)
    np.testing.assert_allclose(
        mm.per_query_variance(W, A, delta=delta),
        mm.per_query_variance(Wd, Ad, delta=delta),
        rtol=1e-7,
        atol=1e-9,
    )


@st.composite
def marginal_cases(draw):
    k = draw(st.integers(2, 4))
    sizes = tuple(draw(st.integers(2, 5)) for _ in range(k))
    subsets = draw(
        st.lists(
            st.sets(st.integers(0, k - 1), max_size=k), min_size=1, max_size=4, unique_by=frozenset
        )
    )
    seed = draw(st.integers(0, 2**31 - 1))
    return sizes, [tuple(sorted(s)) for s in subsets], np.random.default_rng(seed)


@SETTINGS
@given(marginal_cases(), st.sampled_from([0.0, 1e-6]))
def test_marginal_strategies_error_equals_dense(case, delta):
    sizes, subsets, rng = case
    k = len(sizes)
    W = workloads.marginals(sizes, attrs=subsets)
    # a random full lattice (always supports W), the workload's own marginals, and W itself
    theta = rng.uniform(0.1, 2.0, 1 << k)
    own = np.zeros(1 << k)
    for s in subsets:
        own[sum(1 << i for i in s)] = 1.0
    for A in (MarginalStrategy(sizes, theta), MarginalStrategy(sizes, own), W):
        Ad, Wd = Dense(A.dense()), Dense(W.dense())
        for measure in ("total", "max", "rmse"):
            got = mm.expected_error(W, A, delta=delta, measure=measure, noise="continuous")
            want = mm.expected_error(Wd, Ad, delta=delta, measure=measure, noise="continuous")
            assert got == pytest.approx(want, rel=1e-7)
        np.testing.assert_allclose(
            mm.per_query_variance(W, A, delta=delta),
            mm.per_query_variance(Wd, Ad, delta=delta),
            rtol=1e-7,
            atol=1e-9,
        )
    # (the dense SVD reference takes square roots of round-off eigenvalues: ~1e-7 relative noise)
    assert mm.lower_bound(W, delta=delta) == pytest.approx(
        mm.lower_bound(Dense(W.dense()), delta=delta), rel=1e-5
    )


def test_marginal_strategy_outside_row_space_raises():
    W = workloads.marginals((3, 4, 2), attrs=[(0, 1)])
    A = MarginalStrategy((3, 4, 2), np.eye(8)[0b001] + np.eye(8)[0b010])  # 1-way marginals only
    with pytest.raises(ValueError, match="row space"):
        mm.expected_error(W, A)


# -- the reviewer's cases ------------------------------------------------------------------------


def test_marginal_workload_as_its_own_strategy():
    M = workloads.marginals((10,) * 4, 2)
    theta = np.zeros(16)
    for s in M.subsets:
        theta[sum(1 << i for i in s)] = 1.0
    same = MarginalStrategy((10,) * 4, theta)
    for delta in (0.0, 1e-6):
        for measure in ("total", "max", "rmse"):
            assert mm.expected_error(
                M, M, delta=delta, measure=measure, noise="continuous"
            ) == pytest.approx(
                mm.expected_error(M, same, delta=delta, measure=measure, noise="continuous"),
                rel=1e-9,
            )
    np.testing.assert_allclose(
        mm.per_query_variance(M, M), mm.per_query_variance(M, same), rtol=1e-9
    )


def test_sensitivity_of_stack_of_krons_over_1e17_cells():
    sizes = (10,) * 17
    blocks = [
        Kron(
            *[
                workloads.prefix(n) if i in (j, j + 1) else workloads.total(n)
                for i, n in enumerate(sizes)
            ]
        )
        for j in range(16)
    ]
    V = VStack(blocks, weights=np.linspace(1.0, 2.0, 16))
    tracemalloc.start()
    try:
        r1, r2 = V.sensitivity_details(1), V.sensitivity_details(2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50e6
    assert r1.exact and r2.exact
    # every prefix factor has its largest column norm at cell 0, so the bound is attained
    assert r1.value == pytest.approx(sum(w * 100.0 for w in V.weights))
    assert r2.value == pytest.approx(math.sqrt(sum(w**2 * 100.0 for w in V.weights)))
    assert V.sensitivity(1) == r1.value


ADULT = (85, 9, 100, 16, 7, 15, 6, 5, 2, 100, 100, 99, 42, 2)  # 14 attributes, ~6.4e17 cells


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_large_marginal_domain_factored(delta):
    M = workloads.marginals((10,) * 14, 2)
    tracemalloc.start()
    try:
        total = mm.expected_error(M, M, delta=delta)
        worst = mm.expected_error(M, M, delta=delta, measure="max")
        bound = mm.lower_bound(M, delta=delta)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (
        peak < 50e6
    )  # nothing domain-sized (10**14 or 6.4e17 cells) is built; timings: benchmarks/factored_timing.py
    assert bound <= total * (1 + 1e-9) and worst * M.shape[0] >= total * (1 - 1e-9)


def test_adult_like_domain_factored():
    n = math.prod(ADULT)
    assert n > 6e17
    W = workloads.marginals(ADULT, 2)
    P = VStack(
        [
            Kron(
                *[
                    workloads.prefix(d) if i in s else workloads.total(d)
                    for i, d in enumerate(ADULT)
                ]
            )
            for s in [(0, 2), (2, 9), (9, 10), (10, 11)]
        ],
        weights=[1.0, 2.0, 0.5, 1.5],
    )
    A = Kron(*[Identity(d) for d in ADULT])
    tracemalloc.start()
    try:
        s_w, s_p = W.sensitivity_details(1), P.sensitivity_details(2)
        e_lattice = mm.expected_error(W, W, measure="max")
        e_kron = mm.expected_error(P, A, noise="continuous")  # the closed form below is 2Δ₁²/ε²
        lb = mm.lower_bound(W)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (
        peak < 50e6
    )  # nothing domain-sized (10**14 or 6.4e17 cells) is built; timings: benchmarks/factored_timing.py
    assert s_w == (91.0, True, "constant")
    assert s_p.exact and s_p.method == "branch and bound"
    # identity strategy: total = 2 · Σ_j w_j² · Π_i ‖factor columns‖² summed over cells
    expect = 2.0 * sum(
        w**2 * math.prod((d * (d + 1) / 2 if i in s else d) for i, d in enumerate(ADULT))
        for w, s in zip(P.weights, [(0, 2), (2, 9), (9, 10), (10, 11)])
    )
    assert e_kron == pytest.approx(expect, rel=1e-9)
    assert e_lattice > 0 and lb > 0


def test_plain_marginal_union_has_structured_pinv():
    from matmech.linalg.structured import pinv_gram

    M = workloads.marginals((10,) * 4, 2)
    P, _ = pinv_gram(M)
    theta = np.zeros(16)
    for s in M.subsets:
        theta[sum(1 << i for i in s)] = 1.0
    P2, _ = pinv_gram(MarginalStrategy((10,) * 4, theta))
    x = np.random.default_rng(0).normal(size=10**4)
    np.testing.assert_allclose(P @ x, P2 @ x, rtol=1e-10, atol=1e-12)


def test_huge_kron_col_norms_refused_but_sensitivity_factors():
    K = Kron(*[workloads.prefix(10)] * 17)
    with pytest.raises(ValueError, match="column norms"):
        K.col_norms(1)
    assert K.sensitivity_details(1) == (10.0**17, True, "kron")
    assert Scaled(K, -0.5).sensitivity(2) == pytest.approx(0.5 * math.sqrt(10.0) ** 17)
    small = workloads.marginals((3, 4), 1)
    assert small.sensitivity_details(1) == (2.0, True, "dense")
