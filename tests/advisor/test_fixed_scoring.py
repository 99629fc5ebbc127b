"""The fixed candidates' dense scoring (advisor.candidates.scorer) against the exact error, and
attributes with the same 1-D workload planned once with the same candidates."""

from __future__ import annotations

import numpy as np
import pytest

from matmech import strategies as S
from matmech import workloads as wl
from matmech.advisor import candidates as C
from matmech.advisor.compare import distinct, family_branchings, fixed_family
from matmech.error import expected_error
from matmech.linalg.linop import Kron, VStack


@pytest.mark.parametrize("delta", [0.0, 1e-6])
@pytest.mark.parametrize(
    "W",
    [
        wl.prefix(50),
        wl.all_range(37),
        wl.identity(20),
        VStack([wl.prefix(30), wl.total(30)], weights=[1.0, 3.0]),
    ],
    ids=["prefix50", "ranges37", "identity20", "prefix+total30"],
)
def test_dense_scores_equal_the_exact_unit_error_of_every_fixed_candidate(W, delta):
    n = W.shape[1]
    assert n <= C.DENSE_SCORE_N
    score = C.scorer(W, delta)
    family = distinct(fixed_family(n, family_branchings(n, search=True)), (n,))
    assert len(family) > 5
    for _, _, A in family:
        exact = expected_error(W, A, 1.0, delta, noise="continuous")
        assert score(A) == pytest.approx(exact, rel=1e-10)


def test_a_strategy_that_cannot_answer_goes_the_exact_way_and_is_refused():
    W = wl.prefix(8)
    A = S.hierarchical(8, 2).dense()[:5]  # rank 5 < 8: AᵀA singular
    from matmech.linalg.linop import Dense

    with pytest.raises(ValueError):
        C.scorer(W, 0.0)(Dense(A))


def test_equal_attributes_get_the_same_candidates_as_when_planned_alone():
    W = Kron(wl.prefix(24), wl.prefix(24), wl.identity(5))
    got = C.searched_fixed(W, 0.0)
    one = C._fixed_1d(24, wl.prefix(24), 0.0)
    hier = next(p for name, p, _ in got if name == "hierarchical")
    assert hier["per_attribute"][0] == hier["per_attribute"][1] == one[1][1]
    best = next(p for name, p, _ in got if name == "best fixed per attribute")
    first, second = best["per_attribute"][:2]
    assert first == second
    # the best per attribute is the least exact 1-D error among the attribute's candidates
    errs = {nm: expected_error(wl.prefix(24), A, 1.0, 0.0, noise="continuous") for nm, _, A in one}
    assert first["name"] == min(errs, key=errs.get)
    assert np.isfinite(min(errs.values()))
