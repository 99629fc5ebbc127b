"""The one planner (issue 32): every ranked row builds the plan a release runs, at the error
it was ranked by; advise, auto and optimize are views of the same rows; the cheap bounds hold."""

import math

import numpy as np
import pytest

import matmech as mm
from matmech import workloads as wl
from matmech.advisor.advise import advise
from matmech.advisor.choice import view
from matmech.advisor.planner import lift, rank_lower_bound, target_of
from matmech.error import expected_error
from matmech.linalg.terms import restrict
from matmech.optimizers.dispatch import optimize
from matmech.optimizers.general_marginal_error import GeneralMarginalStrategy
from matmech.optimizers.residual import marginal_lattice_plan, residual_total
from matmech.plans.residual import residual_error
from matmech.sources.source import HistogramSource
from matmech.run.runner import run_plan
from matmech.plans.planned import build_plan

JOBS = {
    "ranges": wl.all_range(24),
    "union": wl.stack(wl.prefix(20), wl.total(20), weights=[1.0, 2.0]),
    "kron": wl.kron(wl.prefix(6), wl.identity(4)),
    "marginals": wl.marginals((3, 4, 2), 2),
    "mixed": wl.stack(
        wl.kron(wl.identity(3), wl.identity(4), wl.total(12)),
        wl.kron(wl.total(3), wl.total(4), wl.all_range(12)),
    ),
}


@pytest.mark.parametrize("name", JOBS)
@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_every_ranked_row_builds_its_plan_at_the_error_it_was_ranked_by(name, delta):
    W = JOBS[name]
    adv = advise(W, 1.0, delta)
    for row in adv.rows:
        plan = build_plan(row, 1.0, delta)
        assert (plan.eps, plan.delta) == (1.0, delta)
        x = np.arange(W.shape[1]) % 5
        rel = run_plan(plan, HistogramSource(x), budget=None, rng=np.random.default_rng(0))
        # the release draws exact discrete noise (at most the continuous figure; its residual
        # plan's σ rounded up by at most 0.4%)
        assert 0.7 * row.total <= rel.expected_error <= row.total * 1.004, row.name
        assert rel.answers.shape == (W.shape[0],)


@pytest.mark.parametrize("name", JOBS)
def test_auto_and_optimize_are_views_of_the_ranked_table(name):
    W = JOBS[name]
    adv = advise(W, 1.0)
    x = np.ones(W.shape[1], dtype=np.int64)
    auto = mm.release(x, W, 1.0, rng=np.random.default_rng(0))
    assert f"{adv.best_row.name}, ranked 1 of {len(adv.rows)}" in auto.strategy_note
    opt_rows = view(adv, "optimize")
    if opt_rows:
        opt = mm.release(x, W, 1.0, strategy="optimize", rng=np.random.default_rng(0))
        rank = adv.rows.index(opt_rows[0]) + 1
        assert f"{opt_rows[0].name}, ranked {rank} of" in opt.strategy_note
        assert all(r.family is not None and r.kind != "split" for r in opt_rows)


def test_a_plan_fitted_on_the_support_is_the_plan_on_the_whole_domain():
    W = wl.kron(wl.total(3), wl.all_range(10), wl.total(2))
    t = target_of(W)
    assert t.U == (1,) and t.local and t.fit.shape == (W.shape[0], 10)
    assert np.allclose(t.fit.dense(), restrict(t.terms, (1,)).dense())
    x = np.random.default_rng(1).integers(0, 9, size=W.shape[1])
    rel = mm.release(x, W, 1.0, rng=np.random.default_rng(2))
    truth = W.dense() @ x
    assert np.all(np.abs(rel.answers - truth) <= 8 * rel.std)
    # the strategy over the 10 cells of the support, not the 60 of the domain
    assert rel.strategy is not None and rel.strategy.shape[1] == 10


def test_a_lifted_generalised_marginal_strategy_answers_with_the_same_error():
    domain = (3, 4, 5)
    W = wl.stack(
        wl.kron(wl.identity(3), wl.prefix(4), wl.total(5)),
        wl.kron(wl.identity(3), wl.total(4), wl.total(5)),
    )
    t = target_of(W)
    A = optimize(t.fit, 1.0, method="gmarginals").strategy
    full = lift(A, t.U, domain)
    assert isinstance(full, GeneralMarginalStrategy) and full.shape[1] == 60
    local = expected_error(t.fit, A, 1.0, noise="continuous")
    lifted = expected_error(W, full, 1.0, noise="continuous")
    assert lifted == pytest.approx(local, rel=1e-9)
    dense = expected_error(W.dense(), full.dense(), 1.0, noise="continuous")
    assert lifted == pytest.approx(dense, rel=1e-6)


@pytest.mark.parametrize("delta", [0.0, 1e-6])
@pytest.mark.parametrize("neighbors", ["add_remove", "substitute"])
def test_the_residual_rows_figure_against_the_releases(delta, neighbors):
    """The planner's continuous figure of the residual plan and the release's exact one:
    equal under (ε, δ) (both continuous σ before rounding), the discrete Laplace below the
    continuous under pure ε."""
    W = wl.marginals((5, 6, 4), 2)
    subsets, weights = target_of(W).terms.marginals()
    plan = marginal_lattice_plan((5, 6, 4), subsets, weights, delta)
    cont = residual_total(plan, 0.7, delta, neighbors)
    exact = residual_error(W, 0.7, delta, neighbors=neighbors)
    if delta:
        assert cont == pytest.approx(exact, rel=1e-12)
    else:
        assert 0.8 * cont <= exact <= cont


def test_the_rank_bound_is_a_lower_bound():
    rng = np.random.default_rng(0)
    for W in JOBS.values():
        assert 1 <= rank_lower_bound(W) <= np.linalg.matrix_rank(W.dense())
    M = wl.from_matrix(rng.integers(0, 2, size=(3, 7)).astype(float))
    assert rank_lower_bound(wl.kron(M, wl.identity(4))) == np.linalg.matrix_rank(M.dense()) * 4


def test_the_workload_row_skipped_by_the_bound_would_have_lost():
    W = JOBS["mixed"]
    adv = advise(W, 1.0)
    skipped = {r.name: r.skipped for r in adv.skipped}
    if "workload" in skipped and "cannot win" in skipped["workload"]:
        err = expected_error(W, W, 1.0, noise="continuous")
        assert err >= adv.best_row.total


def test_ties_go_to_the_residual_plan():
    adv = advise(wl.marginals((3, 4, 2), 2), 1.0)
    residual = next(r for r in adv.rows if r.kind == "residual")
    ties = [r for r in adv.rows if math.isclose(r.total, residual.total, rel_tol=1e-9)]
    assert ties[0] is residual
