"""1-D `auto` at scale (issue 32): the advisor's fixed candidates scored without building
every hierarchy, block overlaps in closed form and kept per block size. Second methods: the
hierarchies built and scored by ``error_figures`` (the previous path), dense block sums."""

import numpy as np
import pytest

from matmech import strategies as S
from matmech import workloads as wl
from matmech.advisor import candidates as cand
from matmech.advisor.compare import (
    distinct,
    family_branchings,
    fixed_family,
    signature,
    uniform_sizes,
)
from matmech.error import error_figures
from matmech.linalg import intervals as I
from matmech.linalg.intervals import Intervals


def _random_ranges(n, m, seed=0):
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, n, m), rng.integers(0, n, m)
    return Intervals(n, np.minimum(a, b), np.maximum(a, b))


@pytest.mark.parametrize("n", [1, 2, 6, 12, 64, 96])
def test_block_overlaps_match_dense_block_sums(n):
    W = _random_ranges(n, 300, seed=n)
    rows = W.rows(0, 300)
    for s in [d for d in range(1, n + 1) if n % d == 0]:
        want = (rows.reshape(300, n // s, s).sum(2) ** 2).sum(1)
        np.testing.assert_array_equal(W.block_overlaps(s), want)
        np.testing.assert_array_equal(W.block_overlaps(s, 10, 40), want[10:40])  # a chunk
        assert W.block_energy(s) == pytest.approx(want.sum(), rel=1e-15)


def test_kept_overlaps_stay_within_their_byte_bound(monkeypatch):
    W = _random_ranges(1 << 10, 1000)
    monkeypatch.setattr(I, "MAX_OVERLAP_BYTES", 3 * 8 * 1000)
    first = [W.block_overlaps(1 << k) for k in range(6)]
    kept = W.__dict__["_block_overlaps"]
    assert sorted(kept) == [1, 2, 4] and sum(v.nbytes for v in kept.values()) <= 3 * 8 * 1000
    assert W.block_overlaps(2) is first[1]  # kept: the same (read-only) vector
    assert not first[1].flags.writeable
    np.testing.assert_array_equal(W.block_overlaps(32), first[5])  # not kept: recomputed


@pytest.mark.parametrize("n,b,root", [(16, 2, True), (16, 4, False), (27, 3, True), (1, 2, True)])
def test_uniform_sizes_are_the_built_trees_sizes(n, b, root):
    A = S.hierarchical(n, b, root=root)
    assert uniform_sizes(n, b, root=root) == A.sizes
    assert signature(A) == ("sizes", A.sizes)
    assert uniform_sizes(10, 3) is None and S.hierarchical(10, 3).sizes is None


@pytest.mark.parametrize("n,b,root", [(16, 2, True), (64, 8, False), (27, 3, True), (10, 3, True)])
def test_regular_tree_column_norms_are_its_levels(n, b, root):
    A = S.hierarchical(n, b, root=root)
    for p in (1, 2):
        np.testing.assert_array_equal(A.col_norms(p), Intervals.col_norms(A, p))


def _previous_best(n, W, delta):
    """The previous path: every searched hierarchy built, duplicates dropped, each scored by
    error_figures."""
    family = distinct(fixed_family(n, family_branchings(n, search=True)), (n,))
    best = {}
    for name, params, A in family[1:-1]:
        e = error_figures(W, A, 1.0, delta, measures=("total",), noise="continuous")["total"]
        if params["root"] not in best or e < best[params["root"]][0]:
            best[params["root"]] = (e, params)
    return best


@pytest.mark.parametrize(
    "W,delta",
    [
        (wl.all_range(64), 0.0),  # b = 2, 4, 8, 16, 32 scored from their sizes, others built
        (wl.prefix(81), 1e-6),  # 3⁴: b = 3, 9, 27 nested
        (_random_ranges(96, 200, seed=4), 1e-5),
    ],
)
def test_searched_hierarchies_match_building_every_one(W, delta):
    n = W.shape[1]
    best = cand._best_hierarchies(n, W, delta)
    old = _previous_best(n, W, delta)
    assert set(best) == set(old)
    for root, (params, A) in best.items():
        assert dict(params) == dict(old[root][1])
        assert A.shape[1] == n and params["root"] == root
        e = error_figures(W, A, 1.0, delta, measures=("total",), noise="continuous")["total"]
        assert e == pytest.approx(old[root][0], rel=1e-12)
        if A.sizes is not None:  # the closed-form score is error_figures' number
            assert cand._uniform_error(W, n, A.sizes, delta) == pytest.approx(e, rel=1e-13)
    names = [name for name, _, _ in cand._fixed_1d(n, W, delta)]
    assert names == ["identity", "hierarchical", "hierarchical, no root", "haar"]
