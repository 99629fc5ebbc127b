"""``MarginalRelease.marginal(S)`` answers in the order asked (issue 31, item 5): ``(1, 0)``
returned the ``(0, 1)`` layout and ``(0.5,)`` was read as attribute 0. Checked against the
dense marginal of the same release's answers (its ``to_release`` rows)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from matmech import release_marginals
from matmech.linalg.terms import marginal_workload

DOMAIN = (3, 2, 4)


@pytest.fixture(scope="module", params=[0.0, 1e-6], ids=["pure", "gaussian"])
def rel(request):
    codes = np.random.default_rng(0).integers(0, 12, size=(400, 3)) % np.array(DOMAIN)
    W = marginal_workload(DOMAIN, [(0, 1, 2)])
    return release_marginals(codes, W, 1.0, request.param, rng=np.random.default_rng(1))


def test_every_order_of_the_attributes_is_the_sorted_marginal_transposed(rel):
    full, full_std = rel.marginal((0, 1, 2))
    lo_full, hi_full = rel.interval((0, 1, 2))
    for S in itertools.permutations(range(3)):
        values, std = rel.marginal(S)
        assert values.shape == tuple(DOMAIN[a] for a in S)
        np.testing.assert_array_equal(values, full.transpose(S))
        np.testing.assert_array_equal(std, full_std.transpose(S))
        lo, hi = rel.interval(S)
        np.testing.assert_array_equal(lo, lo_full.transpose(S))
        np.testing.assert_array_equal(hi, hi_full.transpose(S))
        assert not values.flags.writeable
    for S in itertools.permutations(range(3), 2):  # consistent: the full one summed out
        values, _ = rel.marginal(S)
        rest = tuple(a for a in range(3) if a not in S)
        want = full.sum(axis=rest).transpose([sorted(S).index(a) for a in S])
        np.testing.assert_allclose(values, want, rtol=1e-9, atol=1e-6)
    # the stored order is the row order of to_release
    np.testing.assert_array_equal(rel.to_release().answers, full.reshape(-1))


@pytest.mark.parametrize(
    "S, kind, text",
    [
        ((0.5,), TypeError, r"attribute indices \(integers\); S\[0\] is float: 0.5"),
        ((True, 1), TypeError, "is bool: True"),
        ((np.float64(1.0),), TypeError, r"attribute indices \(integers\)"),
        ("01", TypeError, "must be a list or tuple, got a str"),
        (2, TypeError, "got int: 2"),
        ((0, 0), ValueError, "distinct attribute indices in 0..2, got \\(0, 0\\)"),
        ((3,), ValueError, "got \\(3,\\)"),
        ((-1,), ValueError, "got \\(-1,\\)"),
    ],
)
def test_bad_attribute_indices_are_refused(rel, S, kind, text):
    with pytest.raises(kind, match=text):
        rel.marginal(S)
    with pytest.raises(kind, match=text):
        rel.interval(S)


def test_numpy_integers_are_indices_and_residuals_keep_their_stored_order(rel):
    np.testing.assert_array_equal(rel.marginal((np.int64(2), 0))[0], rel.marginal((2, 0))[0])
    y, v = rel.residual((0, 2))
    assert y.size == (DOMAIN[0] - 1) * (DOMAIN[2] - 1)
    with pytest.raises(ValueError, match=r"increasing order .* got \(2, 0\); ask for \(0, 2\)"):
        rel.residual((2, 0))
