"""The hand-off of measurement records to mbi, the fitted model and the records sampled from it.

Checked against dense computations: the LinearMeasurement's query on the true marginal is the
record's noiseless expectation (query over the cells times the histogram), its std the
record's; the total estimate is exact on noiseless records; a model fitted to nearly
noiseless marginals reproduces them; sampled records follow the model (exactly, up to the
randomized rounding, for the stratified draws).
"""

import dataclasses
import math

import numpy as np
import pytest

from matmech.estimators.graphical import load_mbi as _load_mbi

_load_mbi()  # mbi is in the test extra (quietly imported): never skipped in CI

import matmech  # noqa: E402
from matmech import workloads as W  # noqa: E402
from matmech.estimators.graphical import (  # noqa: E402
    _stratified,
    fit_model,
    linear_measurements,
    load_mbi,
    total_estimate,
)
from matmech.privacy.randomness import check_rng  # noqa: E402

SIZES = (2, 3, 4)
NAMES = ("a", "b", "c")


def _records(n=500, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2, n)
    b = (a + rng.integers(0, 2, n)) % 3
    c = (b + rng.integers(0, 3, n)) % 4
    return np.column_stack([a, b, c])


def _hist(X):
    return np.bincount(np.ravel_multi_index(X.T, SIZES), minlength=math.prod(SIZES)).astype(float)


def _marginal(X, attrs):
    shape = tuple(SIZES[i] for i in attrs)
    idx = np.ravel_multi_index(X[:, list(attrs)].T, shape) if attrs else np.zeros(len(X), int)
    return np.bincount(idx, minlength=math.prod(shape)).reshape(shape).astype(float)


def _releases(X):
    """Records of every kind that acts on marginals: residual (Gaussian), marginal tables
    (Laplace), generalised marginals (prefix factors), the histogram path over the whole
    domain."""
    rng = np.random.default_rng(1)
    W2 = W.marginals(SIZES, 2)
    Wg = W.stack(
        W.kron(W.identity(2), W.prefix(3), W.total(4)),
        W.kron(W.total(2), W.prefix(3), W.identity(4)),
    )
    return {
        "gmarginal": matmech.release(X, Wg, 1.0, 1e-6, strategy="gmarginals", rng=rng),
        "residual": matmech.release(X, W2, 1.0, 1e-6, rng=rng),
        "tables": matmech.release(X, W2, 1.0, 0.0, rng=rng),
        "histogram": matmech.release(_hist(X), W2, 1.0, 1e-6, strategy="identity", rng=rng),
    }


@pytest.mark.parametrize("kind", ["residual", "tables", "gmarginal", "histogram"])
def test_linear_measurements_match_the_dense_expectation_and_std(kind):
    mbi, jax = load_mbi()
    X = _records()
    rel = _releases(X)[kind]
    assert rel.measurements
    x = _hist(X)
    with jax.enable_x64(True):
        ms = linear_measurements(rel.measurements, names=NAMES, sizes=SIZES)
        assert len(ms) == len(rel.measurements)
        for rec, m in zip(rel.measurements, ms):
            attrs = tuple(range(3)) if rec.attributes is None else rec.attributes
            assert m.clique == tuple(NAMES[i] for i in attrs)
            expected = rec.on_cells().dense() @ x  # the record's noiseless expectation
            dom = mbi.Domain(m.clique, [SIZES[i] for i in attrs])
            f = mbi.Factor(dom, _marginal(X, attrs))
            w = 1.0 if m.query.weights is None else m.query.weights
            got = np.asarray(m.query(f)) / w  # unwhitened
            np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-7)
            np.testing.assert_allclose(m.query.apply(_marginal(X, attrs)) / w, expected, atol=1e-7)
            # std: mbi's std over the whitening weight is the record's std, cell by cell
            np.testing.assert_allclose(
                m.stddev / np.broadcast_to(w, rec.values.shape), np.sqrt(rec.variance)
            )
            np.testing.assert_allclose(np.asarray(m.noisy_measurement) / w, rec.values)
            # the bound mbi uses for its step size is at least the operator norm
            Qw = np.diag(np.broadcast_to(w, rec.values.shape)) @ rec.query.dense()
            assert m.query.op_norm_sq() >= np.linalg.norm(Qw, 2) ** 2 * (1 - 1e-9)


@pytest.mark.parametrize("kind", ["residual", "tables", "gmarginal", "histogram"])
def test_total_estimate_is_exact_on_noiseless_records_and_unbiased_in_form(kind):
    X = _records()
    rel = _releases(X)[kind]
    x = _hist(X)
    exact = [dataclasses.replace(r, values=r.on_cells().dense() @ x) for r in rel.measurements]
    t, v = total_estimate(exact, sizes=SIZES)
    assert t == pytest.approx(len(X), rel=1e-9)
    # its variance is that of the inverse-variance mean of the unbiased estimates used
    assert 0 < v <= min(np.sum(r.variance) for r in rel.measurements if r.attributes != ()) + 1e-9
    t_noisy, _ = total_estimate(rel.measurements, sizes=SIZES)
    assert abs(t_noisy - len(X)) < 8 * math.sqrt(v)


def test_a_model_fitted_to_nearly_exact_marginals_reproduces_them_consistently():
    X = _records()
    x = _hist(X)
    rel = _releases(X)["residual"]
    exact = [
        dataclasses.replace(r, values=r.on_cells().dense() @ x, variance=r.variance * 1e-6)
        for r in rel.measurements
    ]
    model = fit_model(exact, names=NAMES, sizes=SIZES, iters=2000)
    assert model.total == pytest.approx(len(X))
    for attrs in [(0, 1), (1, 2), (0, 2)]:
        t = model.table(attrs)
        assert t.min() >= 0
        np.testing.assert_allclose(t, _marginal(X, attrs), atol=0.02 * len(X) / t.size)
    # one distribution: the tables agree on shared attributes and sum to one total
    ab, bc = model.table(("a", "b")), model.table(("b", "c"))
    np.testing.assert_allclose(ab.sum(0), bc.sum(1), rtol=1e-6)
    np.testing.assert_allclose(model.table(["c", "a"]), model.table(["a", "c"]).T, rtol=1e-9)
    assert ab.sum() == pytest.approx(model.total)


def test_noisy_fit_tables_are_nonnegative_and_consistent():
    X = _records(60)
    rel = matmech.release(X, W.marginals(SIZES, 2), 0.2, 1e-6, rng=np.random.default_rng(3))
    assert (np.asarray(rel.answers) < 0).any()  # the unbiased answers go negative here
    model = fit_model(rel.measurements, names=NAMES, sizes=SIZES, iters=500)
    tabs = {s: model.table(s) for s in [(0, 1), (1, 2), (0, 2)]}
    assert all(t.min() >= 0 for t in tabs.values())
    np.testing.assert_allclose(tabs[(0, 1)].sum(0), tabs[(1, 2)].sum(1), rtol=1e-5)
    np.testing.assert_allclose(tabs[(0, 1)].sum(1), tabs[(0, 2)].sum(1), rtol=1e-5)


def test_stratified_draws_round_each_group_and_follow_the_conditional():
    src = check_rng(np.random.default_rng(0))
    cond = np.array([[0.5, 0.25, 0.25], [0.1, 0.0, 0.9], [1 / 3, 1 / 3, 1 / 3]])
    group = np.repeat([0, 1, 2], [400, 77, 1])
    for _ in range(20):
        pick = _stratified(cond, group, src)
        for g in range(3):
            counts = np.bincount(pick[group == g], minlength=3)
            # randomized rounding: every group's counts within one of c·p (never off by 2)
            assert np.all(np.abs(counts - cond[g] * (group == g).sum()) < 1 + 1e-9)
        assert not np.any(pick[group == 1] == 1)  # a zero-probability category is never drawn
    # the single record of group 2 is uniform over its categories (enumeration: 3,000 draws)
    hits = np.bincount([_stratified(cond, np.array([2]), src)[0] for _ in range(3000)], minlength=3)
    assert np.all(np.abs(hits - 1000) < 5 * math.sqrt(3000 * (1 / 3) * (2 / 3)))


def test_sampled_records_follow_the_model():
    X = _records(400)
    rel = matmech.release(X, W.marginals(SIZES, 2), 1.0, 1e-6, rng=np.random.default_rng(4))
    model = fit_model(rel.measurements, names=NAMES, sizes=SIZES, iters=300)
    n = 20_000
    codes = model.sample(n, rng=np.random.default_rng(5))
    assert codes.shape == (n, 3) and codes.dtype == np.int64
    for attrs in [(0,), (0, 1), (1, 2), (0, 2)]:
        p = model.table(attrs).reshape(-1) / model.total
        got = _marginal(codes, attrs).reshape(-1)
        # every cell within 5 binomial std of n·p (a pair not in one clique is sampled through
        # the chain: still the model's marginal)
        assert np.all(np.abs(got - n * p) <= 5 * np.sqrt(n * p * (1 - p)) + 1)
    # reproducible with the same generator, different with another
    again = model.sample(n, rng=np.random.default_rng(5))
    np.testing.assert_array_equal(codes, again)


def test_bad_records_are_refused_with_clear_messages():
    X = _records(100)
    rel = _releases(X)["residual"]
    r0 = rel.measurements[1]
    gap = dataclasses.replace(r0, common_variance=math.inf)
    with pytest.raises(ValueError, match="common variance"):
        linear_measurements([gap], names=NAMES, sizes=SIZES)
    with pytest.raises(ValueError, match="columns"):
        linear_measurements([r0], names=NAMES, sizes=(5, 5, 5))
    no_total = [r for r in rel.measurements if r.attributes not in ((),)]
    no_total = [dataclasses.replace(r, query=r.query) for r in no_total if len(r.attributes) >= 1]
    with pytest.raises(ValueError, match="total"):
        fit_model(no_total, names=NAMES, sizes=SIZES, iters=10)
    with pytest.raises(ValueError, match="iters"):
        fit_model(rel.measurements, names=NAMES, sizes=SIZES, iters=0)
    model = fit_model(rel.measurements, names=NAMES, sizes=SIZES, iters=10)
    with pytest.raises(ValueError, match="no attribute 'z'"):
        model.table(["z"])
    with pytest.raises(ValueError, match="n must be"):
        model.sample(-1)


def test_a_model_too_large_to_fit_is_refused_before_any_work():
    sizes = (10,) * 8
    X = np.random.default_rng(0).integers(0, 10, (200, 8))
    rel = matmech.release(X, W.marginals(sizes, 2), 1.0, 1e-6, rng=np.random.default_rng(0))
    names = tuple(f"v{i}" for i in range(8))
    with pytest.raises(ValueError, match="junction tree"):  # all pairs close into one clique
        fit_model(rel.measurements, names=names, sizes=sizes, max_cells=10**6)


def test_model_tables_match_mbi_own_inference():
    """The numpy variable elimination against mbi's projection, on sets inside and across
    the model's cliques."""
    X = _records(200)
    rel = matmech.release(
        X, W.marginals(SIZES, attrs=[(0, 1), (1, 2)]), 1.0, 1e-6, rng=np.random.default_rng(6)
    )
    model = fit_model(rel.measurements, names=NAMES, sizes=SIZES, iters=100)
    _, jax = load_mbi()
    for attrs in [("a",), ("c", "a"), ("a", "b", "c"), ("b", "c")]:
        with jax.enable_x64(True):
            ref = np.asarray(model.model.project(attrs).datavector(flatten=False))
        np.testing.assert_allclose(model.table(attrs), ref, rtol=1e-6, atol=1e-9)
