"""maximal_subsets: the index-based search equals the pairwise definition."""

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from matmech.factored.tables import maximal_subsets


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
