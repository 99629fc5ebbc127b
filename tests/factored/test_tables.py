"""maximal_subsets and marginal_tables against their definitions."""

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from matmech.factored.tables import marginal_tables, maximal_subsets


def _pairwise(subsets):
    uniq = sorted({tuple(sorted(s)) for s in subsets}, key=lambda s: (-len(s), s))
    out = []
    for s in uniq:
        if not any(set(s) <= set(m) for m in out):
            out.append(s)
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sets(st.integers(0, 7), max_size=8), min_size=1, max_size=15))
def test_maximal_subsets_equal_the_pairwise_definition(subsets):
    assert maximal_subsets(subsets) == _pairwise(subsets)


def test_maximal_subsets_of_a_lattice_and_the_empty_subset():
    pairs = list(itertools.combinations(range(6), 2))
    assert maximal_subsets(pairs + [(0,), (3,), ()]) == pairs
    assert maximal_subsets([()]) == [()]
    assert maximal_subsets([(2, 1), (1, 2), (1,)]) == [(1, 2)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sets(st.integers(0, 4), max_size=5), min_size=1, max_size=10), st.integers(0, 2**31))
def test_marginal_tables_down_the_lattice_equal_direct_counts(subsets, seed):
    # subsets need not be closed downwards: (0, 1, 2) and (0,) without (0, 1) take the
    # fallback through the counted superset; the others are summed one axis at a time
    domain = [2, 3, 4, 2, 3]
    codes = np.random.default_rng(seed).integers(0, domain, size=(200, len(domain)))
    got = marginal_tables(codes, domain, [tuple(sorted(s)) for s in subsets])
    for s, table in got.items():
        direct = np.zeros([domain[i] for i in s], dtype=np.int64)
        if s:
            np.add.at(direct, tuple(codes[:, i] for i in s), 1)
        else:
            direct += codes.shape[0]
        assert table.shape == direct.shape and np.array_equal(table, direct), s
