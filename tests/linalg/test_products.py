"""The one reader of product structure (matmech.linalg.products) against dense matrices."""

import itertools
from functools import reduce

import numpy as np
import pytest

from matmech import workloads as wl
from matmech.linalg.terms import as_terms
from matmech.linalg.linop import Identity, Ones, Scaled, VStack, kron_terms
from matmech.linalg.products import interval_kind, marginal_terms, product_terms
from matmech.linalg.structured import _marginal_terms
from matmech.optimizers.kronstack import expand_terms
from matmech.optimizers.marginal_workloads import expand_marginals, kron_blocks, marginal_workload

K1 = wl.kron(wl.prefix(4), wl.identity(3))
K2 = wl.kron(wl.total(4), wl.all_range(3))
K3 = wl.kron(wl.stack(wl.identity(4), wl.total(4)), wl.prefix(3))
CASES = {
    "kron": K1,
    "weighted": VStack([K1, K2], weights=np.array([2.0, 0.5])),
    "nested": VStack(
        [VStack([K1, K2], weights=np.array([0.7, 1.3])), K3], weights=np.array([1.1, 0.9])
    ),
    "scaled_kron": Scaled(K1, -1.5),
    "stack_scaled": VStack([Scaled(K1, 1.5), K2], weights=np.array([0.3, 2.0])),
    "scaled_stack": Scaled(VStack([K1, K3], weights=np.array([0.3, 2.0])), 3.0),
    "duplicates": VStack([K1, K1]),
    "marginals": wl.marginals((4, 3, 2), 2),
}


def _dense_terms(terms, weight):
    return np.vstack([weight(t) * reduce(np.kron, [f.dense() for f in t.factors]) for t in terms])


@pytest.mark.parametrize("name", sorted(CASES))
def test_terms_rebuild_the_dense_rows_and_gram(name):
    W = CASES[name]
    terms = product_terms(W)
    A = W.dense()
    # row for row up to sign (a negative scaling is read by its absolute value)
    B = _dense_terms(terms, lambda t: t.weight)
    np.testing.assert_allclose(np.abs(B), np.abs(A), rtol=1e-13, atol=1e-13)
    # the squared weights give the gram
    G = sum(
        t.weight2 * reduce(np.kron, [(f.dense().T @ f.dense()) for f in t.factors]) for t in terms
    )
    np.testing.assert_allclose(G, A.T @ A, rtol=1e-12, atol=1e-12)
    assert all(t.weight >= 0 and t.weight2 == pytest.approx(t.weight**2, rel=1e-15) for t in terms)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_view_reads_the_same_terms(name):
    W = CASES[name]
    terms = product_terms(W)
    assert [(w, fs) for w, fs in kron_terms(W)] == [(t.weight, list(t.factors)) for t in terms]
    assert [(w2, fs) for w2, fs in kron_blocks(W)] == [(t.weight2, list(t.factors)) for t in terms]
    assert [w2 for w2, _ in expand_terms(W, expand=False)] == [t.weight2 for t in terms]
    at = as_terms(W)
    assert at.weights == tuple(t.weight for t in terms)
    assert at.factors == tuple(t.factors for t in terms)


def test_leaf_reading_splits_a_stacked_factor_only():
    f = Scaled(wl.stack(wl.identity(3), wl.total(3), weights=[2.0, 0.5]), 3.0)
    parts = product_terms(f, leaf=True)
    assert [len(t.factors) for t in parts] == [1, 1]
    assert [t.weight2 for t in parts] == [9.0 * 4.0, 9.0 * 0.25]
    np.testing.assert_allclose(_dense_terms(parts, lambda t: t.weight), f.dense())
    assert product_terms(K1, leaf=True)[0].factors == (K1,)
    assert product_terms(wl.prefix(3)) is None
    assert product_terms(wl.prefix(3), leaf=True)[0].factors[0].shape == (3, 3)


def test_mismatched_attribute_sizes_are_not_a_product():
    W = VStack([wl.kron(wl.identity(2), wl.identity(6)), wl.kron(wl.identity(3), wl.identity(4))])
    assert product_terms(W) is None and kron_terms(W) is None and kron_blocks(W) is None


def test_interval_kinds():
    assert interval_kind(wl.identity(5)) == "I"
    assert interval_kind(wl.total(5)) == "T"
    assert interval_kind(wl.prefix(5)) is None
    assert interval_kind(Identity(5)) is None  # not written as intervals
    assert interval_kind(Ones(1, 5)) is None


def test_marginal_reading_matches_the_subsets():
    domain = (4, 3, 2)
    subsets = list(itertools.combinations(range(3), 2))
    W = wl.marginals(domain, 2)
    terms, dom = marginal_terms(W)
    assert dom == domain
    assert sorted(tuple(sorted(s)) for _, s in terms) == subsets
    assert all(w2 == 1.0 for w2, _ in terms)
    assert _marginal_terms(W) == marginal_workload(W) == (terms, dom)
    # weighted: weight² per subset, in row order
    Ww = VStack(list(W.blocks), weights=np.array([0.5, 2.0, 3.0]))
    assert [w2 for w2, _ in marginal_terms(Ww)[0]] == [0.25, 4.0, 9.0]
    # not marginals: a prefix factor, a nested stack (flattened by expand_marginals first)
    assert marginal_terms(K1) is None
    nested = VStack([W, W])
    assert marginal_terms(nested) is None
    flat = expand_marginals(nested)
    assert [w2 for w2, _ in marginal_terms(flat)[0]] == pytest.approx([2.0] * 3, rel=1e-15)
    np.testing.assert_allclose(flat.dense().T @ flat.dense(), nested.dense().T @ nested.dense())
