"""Records from several plans combined by one estimator call (issue 34: estimators take typed
measurement records, from one plan or several).

Two releases of one small histogram, each a plan run by the runner (an explicit strategy on
the cells, a Kronecker strategy on a marginal, a generalised-marginal strategy), expose their
:class:`~matmech.measurements.record.MeasurementRecord` s; one call of
:func:`matmech.estimators.gls.estimate` over the union gives the answers and variances of the
generalised least squares of every record, checked against a dense normal-equations solve
written here (x̂ = J⁺ Σ Qᵢᵀ yᵢ / vᵢ, J = Σ Qᵢᵀ Qᵢ / vᵢ; Cov = W J⁺ Wᵀ), and each release's own
answers equal the estimator's on its own records.
"""

import numpy as np
import pytest

from matmech import strategies as S
from matmech import workloads as wl
from matmech.estimators.gls import estimate
from matmech.linalg.terms import marginal_workload
from matmech.plans.strategy import strategy_plan
from matmech.release import release_factored
from matmech.run.runner import run_plan
from matmech.sources.source import HistogramSource

DOMAIN = (3, 4)
N = 12


def dense_oracle(records, Wd):
    """(answers, variances) of the rows ``Wd`` by the normal equations over the cells."""
    J = np.zeros((N, N))
    b = np.zeros(N)
    for r in records:
        Q = r.on_cells().dense()
        v = np.asarray(r.variance)
        J += Q.T @ (Q / v[:, None])
        b += Q.T @ (r.values / v)
    Jp = np.linalg.pinv(J, rcond=1e-12, hermitian=True)
    return Wd @ (Jp @ b), np.einsum("ij,jk,ik->i", Wd, Jp, Wd)


def histogram(seed):
    return np.random.default_rng(seed).integers(0, 40, size=N)


def codes_of(x):
    cells = np.repeat(np.arange(N), x)
    return np.column_stack(np.unravel_index(cells, DOMAIN)).astype(np.int64)


def explicit(x, A, eps, delta, seed):
    """A release of the cells measuring A (the plain histogram release's plan)."""
    plan = strategy_plan(wl.identity(N), A, eps, delta)
    return run_plan(plan, HistogramSource(x), budget=None, rng=np.random.default_rng(seed))


#: The second release: a Kronecker strategy on the marginal of attribute 0 (the factored
#: strategy plan), or the residual plan of the one-way marginals (its records: the residuals,
#: δ > 0, or the noisy marginal tables, pure ε).
SECOND = {
    "kron": (wl.kron(wl.prefix(3), wl.total(4)), "auto"),
    "residual": (marginal_workload(DOMAIN, [(0,), (1,)]), "residual"),
}


@pytest.mark.parametrize("second", sorted(SECOND))
@pytest.mark.parametrize("delta", [0.0, 1e-6])
@pytest.mark.parametrize("seed", range(3))
def test_records_of_two_plans_combine_into_the_dense_gls(second, delta, seed):
    x = histogram(seed)
    W = wl.stack(wl.all_range(N), wl.kron(wl.prefix(3), wl.total(4)))
    a = explicit(x, S.hierarchical(N, 2), 0.6, delta, seed)
    W2, name = SECOND[second]
    # measured on a factored path: records over marginals of x
    b = release_factored(codes_of(x), W2, 0.4, delta, rng=np.random.default_rng(seed + 10))
    assert b.strategy_name == name or name == "auto"
    assert all(r.attributes is not None for r in b.measurements)
    records = tuple(a.measurements) + tuple(b.measurements)
    got = estimate(records, W)
    want, var = dense_oracle(records, W.dense())
    scale = max(1.0, float(np.abs(want).max()))
    assert np.abs(got.values - want).max() / scale < 1e-8
    assert np.abs(got.variances - var).max() / var.max() < 1e-8
    # combining helps: every answer's variance is at most the first release's alone
    alone = estimate(tuple(a.measurements), W).variances
    assert np.all(got.variances <= alone * (1 + 1e-9))
    assert np.any(got.variances < alone * (1 - 1e-3))


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_each_release_is_the_estimator_of_its_own_records(delta):
    x = histogram(7)
    rel = explicit(x, S.hierarchical(N, 2), 1.0, delta, 7)
    own = estimate(tuple(rel.measurements), wl.identity(N))
    assert rel.answers.tobytes() == own.values.tobytes()
    np.testing.assert_allclose(rel.std**2, own.variances, rtol=1e-12)


def test_the_oracle_sees_a_record_left_out():
    """Not vacuous: dropping one plan's records moves the dense answers."""
    x = histogram(1)
    W = wl.all_range(N)
    a = explicit(x, S.identity(N), 0.5, 0.0, 1)
    c = explicit(x, S.hierarchical(N, 2), 0.5, 0.0, 2)
    both = estimate(tuple(a.measurements) + tuple(c.measurements), W).values
    want, _ = dense_oracle(tuple(a.measurements), W.dense())
    assert np.abs(both - want).max() > 1e-6
