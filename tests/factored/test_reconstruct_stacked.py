"""The stacked reconstruction of every marginal (issue 24, adult speed): bit for bit the
marginal-by-marginal closed form, and that closed form equal to a dense computation."""

import itertools

import numpy as np
import pytest

from matmech.measurements import residual as fmeasure
from matmech.estimators.reconstruct import MarginalReconstructor
from matmech.release import release_factored
from matmech.linalg.terms import marginal_workload
from matmech.linalg import residual
from matmech.linalg.residual import orthonormal_contrasts

from factored_data import codes as _codes


def _measured(monkeypatch, codes, W):
    import matmech.plans.residual as frel

    seen = {}
    orig = fmeasure.measure_residuals

    def spy(mplan, tables, *, rng=None):
        seen["m"] = orig(mplan, tables, rng=rng)
        return seen["m"]

    monkeypatch.setattr(frel, "measure_residuals", spy)
    rel = release_factored(codes, W, 1.0, 1e-6, rng=np.random.default_rng(7))
    return rel, seen["m"]


# sizes 1-3 (one- and two-row contrasts, empty residuals) and a marginal of 17³ = 4,913
# cells (its variances lifted alone, on the norm classes)
@pytest.mark.parametrize(
    "domain,kmax", [((3, 1, 2, 3, 2, 1), 3), ((3, 1, 2, 17, 17, 17), 3), ((17, 17, 17), 3)]
)
def test_stacked_is_the_marginal_by_marginal_closed_form_bit_for_bit(monkeypatch, domain, kmax):
    subsets = [s for k in range(kmax + 1) for s in itertools.combinations(range(len(domain)), k)]
    weights = np.random.default_rng(3).uniform(0.5, 2.0, size=len(subsets))
    W = marginal_workload(domain, subsets, weights)
    rel, m = _measured(monkeypatch, _codes(domain, 800, seed=4), W)
    checked = []
    orig = residual._on_classes
    monkeypatch.setattr(residual, "_on_classes", lambda *a: checked.append(orig(*a)) or checked[-1])
    rec = MarginalReconstructor(m)
    answers, var = rec.stacked(subsets, weights)
    fresh = MarginalReconstructor(m)
    parts = [fresh.marginal(S) for S in subsets]
    want_a = np.concatenate([w * e.reshape(-1) for w, (e, _) in zip(weights, parts)])
    want_v = np.concatenate([w * w * v.reshape(-1) for w, (_, v) in zip(weights, parts)])
    np.testing.assert_array_equal(answers, want_a)
    np.testing.assert_array_equal(var, want_v)
    np.testing.assert_array_equal(rel.answers, answers)
    np.testing.assert_array_equal(rel.std, np.sqrt(var))
    # the exact variances have the norm-class form: the short lift ran wherever it applies
    assert all(checked) and (max(domain) < 17 or checked)


def test_the_largest_marginal_equals_a_dense_lift_of_its_residuals(monkeypatch):
    """Second method: every residual of the 17³ marginal lifted with dense Qᵀ and (Q∘Q)ᵀ
    by tensordot, summed with the 1/nᵢ factors of the closed form."""
    domain = (17, 17, 17)
    W = marginal_workload(domain, [(0, 1, 2)])
    rel, m = _measured(monkeypatch, _codes(domain, 3000, seed=5), W)
    Q = [orthonormal_contrasts(n) for n in domain]
    est, var = np.zeros(domain), np.zeros(domain)
    for k in range(4):
        for T in itertools.combinations(range(3), k):
            e, v = np.asarray(m.coords[T]), np.asarray(m.row_variances[T])
            for ax, i in enumerate(T):
                e = np.moveaxis(np.tensordot(Q[i].T, e, axes=([1], [ax])), 0, ax)
                v = np.moveaxis(np.tensordot((Q[i] ** 2).T, v, axes=([1], [ax])), 0, ax)
            view = tuple(domain[i] if i in T else 1 for i in range(3))
            rest = np.prod([domain[i] for i in range(3) if i not in T])
            est += e.reshape(view) / rest
            var += v.reshape(view) / rest**2
    np.testing.assert_allclose(rel.answers, est.reshape(-1), rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(rel.std**2, var.reshape(-1), rtol=1e-12)


@pytest.mark.parametrize("delta", [1e-6, 0.0])
def test_the_residual_draw_reads_each_table_once_and_leaves_the_given_tables(delta):
    """(ε, δ): the checked tables are handed out once each (then released), from the plan's
    own references; pure ε (its draw reads a table twice): the tables as they are."""
    from matmech.plans.factored import plan_path
    from matmech.measurements.residual import MAX_MEMORY
    from matmech.plans.residual import residual_plan
    from matmech.sources.tables import marginal_tables

    domain = (3, 4, 2)
    W = marginal_workload(domain, [(0, 1), (1, 2)])
    path, wt, _, _ = plan_path(W, 1.0, delta, strategy="residual")
    plan = residual_plan(
        W,
        wt,
        1.0,
        delta,
        neighbors="add_remove",
        max_records=None,
        objective="sum",
        max_memory=MAX_MEMORY,
        scale_bits=9,
        search="lattice",
    )
    tables = marginal_tables(_codes(domain, 50), domain, list(plan.subsets))
    checked = plan.check(tables)
    if delta == 0:
        assert checked is tables
        return
    assert len(checked) == len(tables) and set(checked) == set(tables)
    np.testing.assert_array_equal(checked[(0, 1)], tables[(0, 1)])
    with pytest.raises(KeyError, match=r"\(0, 1\) was read already"):
        checked[(0, 1)]
    assert (0, 1) in tables  # the caller's mapping is untouched
