"""Lockstep multistart (matmech.optimizers.multistart) against the sequential projected L-BFGS.

The second method is the sequential code itself: ``pure._lbfgs`` (projected_lbfgs on the
p-Identity objective) run from each start alone. Every start must end with the same value,
Θ, iteration and evaluation counts; the starts stop at different iterations, so the masking
of finished starts is exercised too.
"""

import numpy as np
import pytest

from matmech.linalg.intervals import AllRange, Prefix
from matmech.optimizers import pure
from matmech.optimizers.gram import GramOperator
from matmech.optimizers.multistart import (
    MIN_LOCKSTEP,
    lockstep_starts,
    pidentity_multistart,
    stack_objective,
)


def _gram(kind, n):
    if kind == "prefix":
        return GramOperator.from_workload(Prefix(n))
    if kind == "range":
        return GramOperator.from_workload(AllRange(n))
    b = np.random.default_rng(n).standard_normal((n + 3, n))  # a random PSD gram (dense path)
    return GramOperator.from_gram(b.T @ b)


def _starts(n, count):
    p = max(1, n // 16)
    return [pure.hdmm_theta(n)] + [pure.quadratic_fill(n, p, block=b) for b in range(count - 1)]


def _sequential(gram, th, maxiter, ftol):
    try:
        return pure._lbfgs(gram, th, maxiter, ftol, None, None)
    except np.linalg.LinAlgError:
        return None


@pytest.mark.parametrize("kind", ["prefix", "range", "random"])
@pytest.mark.parametrize(
    "n,count,maxiter", [(8, 12, 200), (50, 10, 200), (100, 8, 120), (128, 6, 80)]
)
def test_each_start_ends_where_it_ends_alone(kind, n, count, maxiter):
    gram = _gram(kind, n)
    starts = _starts(n, count)
    with np.errstate(all="ignore"):  # runaway all-range starts overflow in both codes alike
        batched = pidentity_multistart(gram, starts, maxiter=maxiter, ftol=1e-8)
        alone = [_sequential(gram, th, maxiter, 1e-8) for th in starts]
    assert len(batched) == len(starts)
    for i, (b, a) in enumerate(zip(batched, alone)):
        assert (a is None) == (b is None), f"start {i}: breakdown differs"
        if a is None:
            continue
        th_a, f_a, nit_a, ev_a = a
        th_b, f_b, nit_b, ev_b = b
        assert (nit_b, ev_b) == (nit_a, ev_a), f"start {i}: iterations/evaluations differ"
        if np.isfinite(f_a) and abs(f_a) < 1e12:
            assert f_b == pytest.approx(f_a, rel=1e-8, abs=0), f"start {i}"
            np.testing.assert_allclose(
                th_b, th_a, rtol=1e-8, atol=1e-12 * max(1.0, np.abs(th_a).max())
            )
        else:  # a runaway start (filtered later by fit_pidentity's _reliable): same value anyway
            assert f_b == f_a or (np.isnan(f_a) and np.isnan(f_b))
    if kind != "random":  # (random grams: all starts converge in the same ~13 iterations)
        # the starts stopped at different iterations (the masking was exercised)
        assert len({r[2] for r in alone if r is not None}) > 1


@pytest.mark.parametrize("kind", ["prefix", "range", "random"])
def test_stack_objective_is_the_objective(kind):
    n, p = 40, 3
    gram = _gram(kind, n)
    thetas = [pure.quadratic_fill(n, p, block=b) * (b + 1) for b in range(4)]
    f, g, ok = stack_objective(gram, p)(np.stack([th.ravel() for th in thetas]))
    assert ok.all()
    for i, th in enumerate(thetas):
        f1, g1 = pure.objective(th, gram)
        assert f[i] == pytest.approx(f1, rel=1e-12)
        np.testing.assert_allclose(
            g[i].reshape(p, n), g1, rtol=1e-10, atol=1e-10 * np.abs(g1).max()
        )
    # and against the definition trace(G (AᵀA)⁻¹), A = [I; Θ] D with D the column sums
    th = thetas[1]
    a = np.vstack([np.eye(n), th]) / (1.0 + th.sum(0))
    assert f[1] == pytest.approx(np.trace(gram.dense() @ np.linalg.inv(a.T @ a)), rel=1e-9)


def test_breakdown_is_none_where_the_sequential_run_raises():
    n = 16
    gram = _gram("prefix", n)
    good = pure.quadratic_fill(n, 2)
    bad = np.full((2, n), 1e9)  # two equal rows of 1e9: I + ΘΘᵀ is singular in floating point
    with np.errstate(all="ignore"):
        with pytest.raises(np.linalg.LinAlgError):
            pure._lbfgs(gram, bad, 20, 1e-8, None, None)
        out = pidentity_multistart(gram, [good, bad, good], maxiter=20, ftol=1e-8)
    assert out[1] is None
    assert out[0] is not None and out[2] is not None
    ref = pure._lbfgs(gram, good, 20, 1e-8, None, None)
    assert out[0][1] == pytest.approx(ref[1], rel=1e-8) and out[0][2] == ref[2]


def test_lockstep_starts_takes_the_largest_same_shape_group():
    n = 32
    gram = _gram("range", n)
    p = n // 16
    starts = [("tree", pure.quadratic_fill(n, 5))] + [
        (f"q{b}", pure.quadratic_fill(n, p, block=b)) for b in range(MIN_LOCKSTEP)
    ]
    out = lockstep_starts(gram, starts, maxiter=30, ftol=1e-8)
    assert set(out) == set(range(1, MIN_LOCKSTEP + 1))  # indices into starts; not the tree
    for i in (1, MIN_LOCKSTEP):
        ref = pure._lbfgs(gram, starts[i][1], 30, 1e-8, None, None)
        assert out[i][1] == pytest.approx(ref[1], rel=1e-8) and out[i][2] == ref[2]
        assert out[i][0].shape == (p, n)
    assert lockstep_starts(gram, starts[: MIN_LOCKSTEP - 1], maxiter=30, ftol=1e-8) == {}


def test_rejects_mixed_shapes():
    gram = _gram("prefix", 16)
    with pytest.raises(ValueError, match="one shape"):
        pidentity_multistart(gram, [np.ones((1, 16)), np.ones((2, 16))], maxiter=5, ftol=1e-8)


@pytest.mark.parametrize("W,quad", [(Prefix(100), 20), (AllRange(40), 10)])
def test_fit_pidentity_same_fit_with_and_without_lockstep(W, quad):
    gram = GramOperator.from_workload(W)
    fast = pure.fit_pidentity(gram, quad_fills=quad, fill_starts=1)
    # a callback makes fit_pidentity run every start alone (per-iteration calls)
    slow = pure.fit_pidentity(gram, quad_fills=quad, fill_starts=1, callback=lambda f: None)
    assert fast.value == pytest.approx(slow.value, rel=1e-9)
    assert fast.init == slow.init and fast.evaluations == slow.evaluations
    np.testing.assert_allclose(fast.theta, slow.theta, rtol=1e-8, atol=1e-12)
    assert [r[0] for r in fast.starts] == [r[0] for r in slow.starts]
    for a, b in zip(fast.starts, slow.starts):
        assert a[1:3] == b[1:3] and a[4] == b[4]
        assert a[3] == pytest.approx(b[3], rel=1e-9) or (
            not np.isfinite(a[3]) and not np.isfinite(b[3])
        )
    if (
        quad == 20
    ):  # the basin behind cps_W2 (pure.QUAD_FILL_STARTS): below the 1773.4 of the other starts
        assert fast.value < 1768.0
