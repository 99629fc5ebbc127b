"""Split plans (issue 32): a union measured in parts, the budget divided between them, one plan.

Every split release is checked against an independent dense GLS: the answers and variances of
each part's rows equal the dense generalised least squares of that part's own records
(``event["part"]``); the parts' shares compose to the declared (ε, δ) (pure ε: decimal ε add
up; (ε, δ): zCDP ρ add up to the one Gaussian calibration's); the runner checks, reads, spends
the whole budget once and only then draws; every data form gives the same draws.
"""

import math
import sys
from pathlib import Path

import numpy as np
import pytest

import matmech as mm
from matmech import workloads as wl
from matmech.advisor.advise import advise
from matmech.advisor.split import (
    gaussian_shares,
    laplace_shares,
    partitions,
    rho_of,
    shares_for,
)
from matmech.plans.planned import build_plan
from matmech.run.runner import run_plan
from matmech.sources.source import HistogramSource, TableSource
from matmech.plans.split import SplitPlan
from matmech.privacy.budget import BudgetExceededError, PrivacyBudget
from matmech.privacy.calibration import gaussian_sigma
from matmech.privacy.params import exact
from matmech.privacy.randomness import RandomSource

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import oracle_problems as op  # noqa: E402

MODELS = {"pure": 0.0, "approx": 1e-6}
#: Relative tolerance against the dense oracle. Looser than the oracle table's 1e-8: a part's
#: optimised real-valued strategy can be ill-conditioned (a lattice weight 1.5e-5 of the
#: largest: condition number 6.5e4, so 1e-16 round-off is amplified to ~4e-8 on both sides;
#: a pseudo-inverse at rcond 1e-15 sits between the two).
RTOL = 1e-6


def split_problem(seed):
    """(domain, W, x, codes): 2-3 attributes (≤ 200 cells), W a weighted stack of marginal
    blocks and of range / prefix / custom blocks on one or two attributes."""
    rng = np.random.default_rng(seed)
    d = int(rng.integers(2, 4))
    while True:
        domain = tuple(int(v) for v in rng.integers(2, 7, size=d))
        if math.prod(domain) <= 200:
            break

    def marg(s):
        return wl.kron(*[wl.identity(n) if i in s else wl.total(n) for i, n in enumerate(domain)])

    def on(i, f):
        return wl.kron(*[f if j == i else wl.total(n) for j, n in enumerate(domain)])

    blocks = [marg((0, 1)), marg((d - 1,))]
    a = int(rng.integers(0, d))
    blocks.append(on(a, wl.all_range(domain[a])))
    b = int(rng.integers(0, d))
    blocks.append(on(b, wl.prefix(domain[b]) if seed % 2 else op._factor("custom", domain[b], rng)))
    weights = rng.choice([0.5, 1.0, 2.0], size=len(blocks))
    W = wl.stack(*blocks, weights=weights)
    n = math.prod(domain)
    x = rng.integers(0, 30, size=n)
    cells = np.repeat(np.arange(n), x)
    codes = np.column_stack(np.unravel_index(cells, domain)).astype(np.int64)
    return domain, W, x, codes


#: Under (ε, δ) splits are ranked only without a joint optimiser row (the planner's rule):
#: the Gaussian splits are checked with the fixed candidates and the tables route.
NO_OPTIMISER = ("identity", "hierarchical", "haar", "workload", "tables", "split")


def split_rows(W, delta):
    cands = "all" if delta == 0 else NO_OPTIMISER
    rows = [r for r in advise(W, 1.0, delta, candidates=cands).rows if r.kind == "split"]
    assert rows, "the planner ranks at least one split of a stack of different blocks"
    return rows


def per_part_oracle(rel, plan, W):
    """(max answer difference, max variance difference) against each part's dense GLS."""
    Wd = W.dense()
    da = dv = 0.0
    for i, part in enumerate(plan.parts):
        recs = [r for r in rel.measurements if r.event["part"] == i]
        assert recs, f"part {i} exposes its records"
        a, v = op.dense_gls(recs, Wd[part.rows])
        da = max(da, float(np.abs(rel.answers[part.rows] - a).max() / max(1.0, np.abs(a).max())))
        dv = max(dv, float(np.abs(rel.std[part.rows] ** 2 - v).max() / v.max()))
    return da, dv


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("seed", range(6))
def test_every_split_release_equals_the_dense_gls_of_each_parts_records(model, seed):
    delta = MODELS[model]
    domain, W, x, codes = split_problem(seed)
    neighbors = op.NEIGHBORS[seed % 2]
    for row in split_rows(W, delta):
        plan = build_plan(row, 1.0, delta, neighbors=neighbors)
        assert isinstance(plan, SplitPlan) and len(plan.parts) >= 2
        rel = run_plan(plan, HistogramSource(x), budget=None, rng=np.random.default_rng(seed))
        assert rel.strategy_name == "split" and rel.answers.shape == (W.shape[0],)
        da, dv = per_part_oracle(rel, plan, W)
        assert da <= RTOL and dv <= RTOL, (row.name, da, dv)
        # the records of one part, stacked with another's, would move the answers: the
        # comparison can fail (each part is its own estimate)
        assert {r.event["part"] for r in rel.measurements} == set(range(len(plan.parts)))


def test_the_oracle_would_see_a_part_answered_from_the_wrong_records():
    domain, W, x, codes = split_problem(1)
    plan = build_plan(split_rows(W, 0.0)[0], 1.0, 0.0)
    rel = run_plan(plan, HistogramSource(x), budget=None, rng=np.random.default_rng(0))
    p0, p1 = plan.parts[:2]
    wrong = [r for r in rel.measurements if r.event["part"] == 1]
    a, _ = op.dense_gls(wrong, W.dense()[p1.rows])
    assert np.abs(rel.answers[p1.rows] - a).max() < 1e-6  # the right records agree
    shifted = [r for r in rel.measurements if r.event["part"] == 0]
    with pytest.raises((AssertionError, ValueError, np.linalg.LinAlgError)):
        a0, _ = op.dense_gls(shifted, W.dense()[p1.rows])
        assert np.abs(rel.answers[p1.rows] - a0).max() < 1e-6


@pytest.mark.parametrize("model", MODELS)
def test_the_shares_compose_to_the_declared_budget(model):
    delta = MODELS[model]
    domain, W, x, codes = split_problem(3)
    row = split_rows(W, delta)[0]
    for eps in (0.3, 1.0, 2.7):
        plan = build_plan(row, eps, delta)
        shares = plan.shares
        assert len(shares) == len(plan.parts) and (plan.eps, plan.delta) == (eps, delta)
        for part, (e, d) in zip(plan.parts, shares):
            assert (part.plan.eps, part.plan.delta) == (e, d) and e > 0
        if delta == 0:  # basic composition: the decimal ε add up to at most ε
            assert sum(exact(e) for e, _ in shares) <= exact(eps)
            assert float(sum(exact(e) for e, _ in shares)) == pytest.approx(eps, rel=1e-9)
        else:  # zCDP: Σ ρ_i at most the ρ of the one calibration of (ε, δ)
            rho = 1 / (2 * gaussian_sigma(eps, delta, 1.0) ** 2)
            parts = [1 / (2 * gaussian_sigma(e, d, 1.0) ** 2) for e, d in shares]
            assert sum(parts) <= rho and sum(parts) == pytest.approx(rho, rel=1e-6)


def test_laplace_and_gaussian_shares():
    shares = laplace_shares(1.0, [1.0, 2.0, 3.0])
    assert sum(exact(s) for s in shares) <= 1 and shares[0] == pytest.approx(1 / 6, rel=1e-3)
    g = gaussian_shares(1.0, 1e-6, [1.0, 3.0])
    r = [rho_of(e, d) for e, d in g]
    assert r[1] / r[0] == pytest.approx(3.0, rel=1e-6) and sum(r) <= rho_of(1.0, 1e-6)
    with pytest.raises(ValueError, match="positive and finite"):
        laplace_shares(1.0, [1.0, 0.0])
    with pytest.raises(ValueError, match="positive and finite"):
        gaussian_shares(1.0, 1e-6, [np.nan])


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_optimal_shares_beat_every_share_on_a_grid(delta):
    """ε_i ∝ E_i^{1/3} (pure ε) and ρ_i ∝ √E_i ((ε, δ)) minimise the split's total: no point
    of a 0.05 grid of shares does better (two parts)."""
    E = [5242.0, 34039.0]
    _, best = shares_for(1.0, delta, E)
    for a in np.arange(0.05, 1.0, 0.05):
        if delta == 0:
            total = E[0] / a**2 + E[1] / (1 - a) ** 2
        else:
            total = E[0] / a + E[1] / (1 - a)
        assert best <= total * (1 + 1e-6)


@pytest.mark.parametrize("model", MODELS)
def test_the_split_row_error_is_the_release_expected_error(model):
    """The row's figure (continuous noise) and the release's exact discrete figure agree to
    the discrete noise's difference (and the residual release's σ rounded up to 9 bits, at
    most 0.4%); and the plan's variances sum to the latter."""
    delta = MODELS[model]
    domain, W, x, codes = split_problem(2)
    for row in split_rows(W, delta):
        plan = build_plan(row, 1.0, delta)
        rel = run_plan(plan, HistogramSource(x), budget=None, rng=np.random.default_rng(1))
        assert rel.expected_error == pytest.approx(float(np.sum(rel.std**2)), rel=1e-12)
        assert 0.8 * row.total <= rel.expected_error <= row.total * 1.004, row.name


def test_the_split_spends_once_before_any_draw_and_reads_once():
    domain, W, x, codes = split_problem(4)
    plan = build_plan(split_rows(W, 1e-6)[0], 1.0, 1e-6)
    log = []

    class Budget(PrivacyBudget):
        def spend_events(self, events, *, what=""):  # every spend goes through it
            log.append(("spend", events))
            return super().spend_events(events, what=what)

    class Source(HistogramSource):
        def marginals(self, sizes, subsets):
            log.append(("read", len(subsets)))
            return super().marginals(sizes, subsets)

    class Rng(RandomSource):
        secure = False

        def __init__(self):
            super().__init__()
            self.g = np.random.default_rng(0)

        def _generate(self, n):
            log.append(("draw",))
            return self.g.integers(0, 1 << 64, size=n, dtype=np.uint64)

    budget = Budget(2.0, 1e-5)
    rel = run_plan(plan, Source(x), budget=budget, rng=Rng())
    kinds = [e[0] for e in log]
    assert kinds.count("read") == 1 and kinds.count("spend") == 1 and "draw" in kinds
    assert kinds.index("read") < kinds.index("spend") < kinds.index("draw")
    (event,) = log[kinds.index("spend")][1]  # the parts' summed rho: one zCDP event
    assert (event.eps, event.delta, event.rho) == (1.0, 1e-6, rho_of(1.0, 1e-6))
    assert rel.spent == (1.0, 1e-6) and budget.epsilon(1e-6) <= 1.0
    assert budget.remaining[0] >= 1.0  # zcdp: never less left than the basic sums leave
    # refused before anything is read: the whole (ε, δ) is checked, not a part's share
    small = Budget(0.8, 1e-6)  # the split is (1, 1e-6): refused under every accountant
    log.clear()
    with pytest.raises(BudgetExceededError, match="cannot spend"):
        run_plan(plan, Source(x), budget=small, rng=Rng())
    assert [e[0] for e in log] == ["spend"]  # the refusal (check_affordable): nothing read or drawn


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_every_data_form_gives_the_same_split_release(delta):
    domain, W, x, codes = split_problem(5)
    plan = build_plan(split_rows(W, delta)[0], 1.0, delta)
    a = run_plan(plan, HistogramSource(x), budget=None, rng=np.random.default_rng(3))
    b = run_plan(plan, TableSource(codes), budget=None, rng=np.random.default_rng(3))
    assert np.array_equal(a.answers, b.answers) and np.array_equal(a.std, b.std)


def test_split_intervals_are_each_parts_own_law():
    domain, W, x, codes = split_problem(0)
    plan = build_plan(split_rows(W, 0.0)[0], 1.0, 0.0)
    rel = run_plan(plan, HistogramSource(x), budget=None, rng=np.random.default_rng(2))
    law = rel.interval_law(0.9)
    assert law.half.shape == (W.shape[0],) and np.all(law.half > 0)
    assert rel.to_dict()["strategy"]["name"] == "split"
    # coverage over repeated releases is near nominal
    truth = W.dense() @ x
    hit = 0
    for t in range(60):
        r = run_plan(plan, HistogramSource(x), budget=None, rng=np.random.default_rng(100 + t))
        lo, hi = r.interval(0.9)
        hit += int(np.sum((lo <= truth) & (truth <= hi)))
    assert 0.85 <= hit / (60 * truth.size) <= 0.97


def test_partitions_keep_marginals_together_and_need_a_stack():
    domain = (3, 4, 5)
    W = wl.stack(
        wl.marginals(domain, 2),
        wl.kron(wl.total(3), wl.total(4), wl.all_range(5)),
        wl.kron(wl.prefix(3), wl.total(4), wl.total(5)),
    )
    groups = partitions(W)
    assert groups and all(2 <= len(p) <= 6 for _, p in groups)
    for _, parts in groups:
        assert sorted(i for p in parts for i in p) == list(range(len(W.blocks)))
    assert partitions(wl.prefix(8)) == [] and partitions(wl.marginals(domain, 2)) == []


def test_release_auto_takes_the_split_when_it_is_best():
    """The mixed job of the issue in miniature: 2-way marginals plus every range of a fine
    attribute; auto measures them in parts and beats every single plan."""
    domain = (4, 5, 6, 32)
    W = wl.stack(
        *[
            wl.kron(*[wl.identity(n) if i in s else wl.total(n) for i, n in enumerate(domain)])
            for s in [(0, 1), (0, 2), (1, 2)]
        ],
        wl.kron(wl.total(4), wl.total(5), wl.total(6), wl.all_range(32)),
    )
    adv = advise(W, 1.0)
    assert adv.best_row.kind == "split", adv.table()
    singles = [r for r in adv.rows if r.kind != "split"]
    assert adv.best_row.total < min(r.total for r in singles)
    x = np.random.default_rng(0).integers(0, 20, size=W.shape[1])
    budget = PrivacyBudget(1.0)
    rel = mm.release(x, W, 1.0, budget=budget, rng=np.random.default_rng(0))
    assert rel.strategy_name == "split" and budget.remaining[0] == pytest.approx(0.0)
    assert "split" in rel.strategy_note and "ranked 1" in rel.strategy_note


def test_under_eps_delta_a_joint_optimiser_row_stands_in_for_splits():
    domain, W, x, codes = split_problem(3)
    adv = advise(W, 1.0, 1e-6)
    assert not any(r.kind == "split" for r in adv.rows)
    assert any(r.kind == "split" and "Gaussian" in r.skipped for r in adv.skipped)
