"""maximal_subsets and marginal_tables against their definitions."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matmech.sources.tables import marginal_tables, maximal_subsets


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
@given(
    st.lists(st.sets(st.integers(0, 4), max_size=5), min_size=1, max_size=10), st.integers(0, 2**31)
)
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


# -- tables given as a mapping (issue 23: keyed in any order, consistent) ----------------------

_DOM = (2, 3, 4)


def _joint(seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 9, size=_DOM)


def test_a_table_keyed_in_non_sorted_order_is_transposed_not_reshaped():
    x = _joint()
    t10 = x.sum(axis=2).T  # axes (attribute 1, attribute 0), as its key (1, 0) says
    got = marginal_tables({(1, 0): t10}, _DOM, [(0, 1)])[(0, 1)]
    assert np.array_equal(got, x.sum(axis=2))
    t20 = np.transpose(x.sum(axis=1))  # key (2, 0): shape (4, 2)
    got = marginal_tables({(2, 0): t20}, _DOM, [(0, 2), (0,), (2,)])
    assert np.array_equal(got[(0, 2)], x.sum(axis=1))
    assert np.array_equal(got[(2,)], x.sum(axis=(0, 1)))
    # a three-way table in a rotated order, and a flat one read row-major in key order
    t120 = np.transpose(x, (1, 2, 0))
    assert np.array_equal(marginal_tables({(1, 2, 0): t120}, _DOM, [(0, 1, 2)])[(0, 1, 2)], x)
    assert np.array_equal(
        marginal_tables({(1, 2, 0): t120.ravel()}, _DOM, [(0, 1, 2)])[(0, 1, 2)], x
    )


def test_a_table_in_the_wrong_orientation_is_refused_not_reshaped():
    x = _joint()
    with pytest.raises(ValueError, match=r"shape \(3, 2\), expected \(2, 3\)"):
        marginal_tables({(0, 1): x.sum(axis=2).T}, _DOM, [(0, 1)])
    with pytest.raises(ValueError, match=r"shape \(2, 3\), expected \(3, 2\)"):
        marginal_tables({(1, 0): x.sum(axis=2)}, _DOM, [(0, 1)])


def test_inconsistent_tables_are_refused_naming_only_the_subsets():
    x = _joint()
    y = x.copy()
    y[0, 0, 0] += 1  # another dataset: one record more
    tables = {(0, 1): x.sum(axis=2), (1, 2): y.sum(axis=0)}
    with pytest.raises(
        ValueError, match=r"\(0, 1\) and \(1, 2\) disagree on attributes \(1,\)"
    ) as exc:
        marginal_tables(tables, _DOM, [(0, 1), (1, 2)])
    for count in {str(int(v)) for v in np.concatenate([x.ravel(), y.ravel()]) if v > 9}:
        assert count not in str(exc.value)
    # same one-way margins but different totals over disjoint subsets
    z = x.copy()
    z[1, 2, 3] += 2
    with pytest.raises(ValueError, match="disagree on the record total"):
        marginal_tables({(0,): x.sum(axis=(1, 2)), (2,): z.sum(axis=(0, 1))}, _DOM, [(0,), (2,)])
    # consistent tables pass, in any key order
    ok = {(1, 0): x.sum(axis=2).T, (2, 1): x.sum(axis=0).T, (): x.sum()}
    got = marginal_tables(ok, _DOM, [(0, 1), (1, 2), ()])
    assert np.array_equal(got[(1, 2)], x.sum(axis=0)) and int(got[()]) == int(x.sum())


def test_a_subset_given_twice_or_a_bad_key_is_refused():
    x = _joint()
    with pytest.raises(ValueError, match="given twice"):
        marginal_tables({(0, 1): x.sum(axis=2), (1, 0): x.sum(axis=2).T}, _DOM, [(0, 1)])
    with pytest.raises(ValueError, match="distinct attribute indices"):
        marginal_tables({(0, 5): np.zeros((2, 2), int)}, _DOM, [(0,)])
    with pytest.raises(TypeError, match="tuple of attribute indices"):
        marginal_tables({("a", "b"): np.zeros((2, 3), int)}, _DOM, [(0,)])
    with pytest.raises(TypeError, match="array of counts"):
        marginal_tables({(0,): [[1, 2], [3]]}, _DOM, [(0,)])


def test_inconsistent_tables_spend_nothing():
    import matmech as mm
    from matmech.privacy.budget import PrivacyBudget
    from matmech.workloads import marginals

    x = _joint()
    y = x.copy()
    y[1, 1, 1] += 3
    W = marginals(_DOM, attrs=[(0, 1), (1, 2)])
    budget = PrivacyBudget(1.0, 1e-6)
    with pytest.raises(ValueError, match="disagree"):
        mm.release(
            {(0, 1): x.sum(axis=2), (1, 2): y.sum(axis=0)},
            W,
            0.5,
            1e-7,
            budget=budget,
            rng=np.random.default_rng(1),
        )
    assert budget.spent == (0.0, 0.0)


def test_tables_sharing_a_prefix_with_last_attributes_of_different_sizes_equal_the_histogram_sums():
    import itertools

    domain = (3, 1, 4, 2, 5, 3)
    rng = np.random.default_rng(11)
    codes = np.column_stack([rng.integers(0, n, size=500) for n in domain]).astype(np.int32)
    x = np.bincount(np.ravel_multi_index(codes.T, domain), minlength=int(np.prod(domain))).reshape(
        domain
    )
    subsets = [s for k in range(4) for s in itertools.combinations(range(len(domain)), k)]
    got = marginal_tables(codes, domain, subsets)
    for s in subsets:
        want = x.sum(axis=tuple(i for i in range(len(domain)) if i not in s))
        np.testing.assert_array_equal(got[s], want)
