"""issue 23: free-gap and vector calibrations validate their options before the cache.

An lru_cache keys by equality, and True == 1 == 1.0: validated inside the cache, a call with
eps=True after a valid eps=1.0 returned the cached calibration instead of a TypeError."""

import pytest

from matmech.svt.calibration import make_budget
from matmech.svt.gap_calibration import gap_calibration
from matmech.svt.vector import vector_calibration


@pytest.mark.parametrize("method", ["topc-gap", "svt-gap", "adaptive-svt"])
def test_gap_calibration_refuses_a_bool_after_an_equal_valid_call(method):
    gap_calibration(method, c=1, eps=1.0, monotonic=True, integer_values=False)  # fills the cache
    with pytest.raises(TypeError, match="eps"):
        gap_calibration(method, c=1, eps=True, monotonic=True, integer_values=False)
    with pytest.raises(TypeError, match="monotonic"):
        gap_calibration(method, c=1, eps=1.0, monotonic=1, integer_values=False)
    with pytest.raises(TypeError, match="c"):
        gap_calibration(method, c=True, eps=1.0, monotonic=True, integer_values=False)
    with pytest.raises(TypeError, match="integer_values"):
        gap_calibration(method, c=1, eps=1.0, monotonic=True, integer_values=0)
    with pytest.raises((TypeError, ValueError), match="ratio"):
        gap_calibration(method, c=1, eps=1.0, ratio=[2.0])  # unhashable: no "unhashable type" leak


def test_vector_calibration_refuses_a_bool_after_an_equal_valid_call():
    vector_calibration(
        "vector-top-c", c=1, eps=1.0, sensitivity=1.0, n_values=4, integer_values=True
    )
    with pytest.raises(TypeError, match="eps"):
        vector_calibration(
            "vector-top-c", c=1, eps=True, sensitivity=1.0, n_values=4, integer_values=True
        )
    with pytest.raises(TypeError, match="integer_values"):
        vector_calibration(
            "vector-top-c", c=1, eps=1.0, sensitivity=1.0, n_values=4, integer_values=1
        )
    with pytest.raises(ValueError, match="n_values"):
        vector_calibration(
            "vector-top-c", c=1, eps=1.0, sensitivity=1.0, n_values=True, integer_values=True
        )


def test_make_budget_cache_is_typed():
    kw = dict(
        c=1,
        eps=1.0,
        eps_answer=0.0,
        e1=0.5,
        e2=0.5,
        sensitivity=1.0,
        exact_on_grid=True,
        threshold_mult=1.0,
        query_mult=2.0,
    )
    a = make_budget(monotonic=False, **kw)
    b = make_budget(monotonic=0, **kw)  # not the cached record of monotonic=False
    assert a is not b
