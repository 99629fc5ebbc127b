"""One oracle for every release path (issue 22).

Every path (histogram, records → factored Kronecker / selected rows, records → residual,
records → generalised marginals) ×
privacy model (pure ε, (ε, δ)) × neighbour relation × selection method (none, svt, em,
topc-gap, svt-gap, adaptive-svt, vector) on random small problems (≤ 200 cells, 1-4
attributes, weighted unions with duplicate and dependent rows, prefix / range / custom 0-1 /
identity / total factors): the answers and reported variances equal an independent dense
GLS of the release's own noisy measurement records (``Release.measurements``) to 1e-8
relative; the 95% intervals cover the truth at their nominal rate (Monte Carlo, binomial
band); and a spy budget / spy randomness / spy data source see, on every plan, the
affordability check before any read, exactly one spend, and no draw before it.
"""

import math

import numpy as np
import oracle_problems as op
import pytest

import matmech as mm
from matmech.limits import steady_room
from matmech.privacy.budget import PrivacyBudget
from matmech.privacy.randomness import RandomSource

GRID = [
    (p, m, s)
    for p in op.PATHS
    for m in op.MODELS
    for s in (op.METHODS if p not in op.NO_SELECTION else ("none",))
]


@pytest.mark.parametrize("path, model, method", GRID, ids=["-".join(g) for g in GRID])
def test_answers_and_variances_equal_the_dense_gls_of_the_records(path, model, method):
    for seed in (
        2 * GRID.index((path, model, method)) % 11,
        7 + GRID.index((path, model, method)) % 5,
    ):
        rel, W, _ = op.run(path, model, method, seed, neighbors=op.NEIGHBORS[seed % 2])
        assert rel.measurements, "every release exposes its measurement records"
        if method in ("topc-gap", "svt-gap", "adaptive-svt", "vector") and rel.selected.size:
            # the gaps stay in the selection (biased given it: issue 31), never a record
            assert len(rel.measurements) == 1 and not rel.to_dict()["selection"]["gaps_combined"]
        da, dv = op.compare(rel, W)
        assert da <= op.RTOL and dv <= op.RTOL, (seed, da, dv)


def test_the_oracle_sees_an_extra_measurement():
    """The comparison can fail: adding the selection's gaps as a record (what the release
    did before issue 31) moves the oracle's variances."""
    from matmech import svt
    from matmech.measurements.record import MeasurementRecord

    rel, W, _ = op.run("histogram", "pure", "svt-gap", 3)
    Wa = W.dense()[rel.selected]
    gm = svt.gap_measurement(rel.selection.gap, rel.select_options["threshold"])
    extra = MeasurementRecord(
        query=W.take_rows(np.asarray(gm.positions)),
        values=gm.z,
        variance=gm.var,
        common_variance=float(gm.common_var),
    )
    assert op.compare(rel, W)[1] <= op.RTOL
    _, v = op.dense_gls(rel.measurements + (extra,), Wa)
    assert np.abs(rel.std**2 - v).max() / v.max() > 1e-3


# -- coverage of the 95% intervals ---------------------------------------------------------------

COVERAGE = [
    ("histogram", "pure", "none"),
    ("records", "approx", "none"),
    ("residual", "pure", "none"),
    ("gmarginal", "approx", "none"),
    ("records", "pure", "svt-gap"),
    ("histogram", "approx", "topc-gap"),
]
TRIALS = 120


def coverage(path, model, method, trials=TRIALS, seed=5):
    """Fraction of answers whose 95% interval covers the true answer over ``trials`` releases.
    The memory room is read once for all of them (limits.steady_room: each release's
    planning checks hundreds of small allocations, and reading /proc for each was a quarter
    of a residual release's time)."""
    hit = tot = 0
    with steady_room():
        for t in range(trials):
            rel, W, x = op.run(path, model, method, seed, rng=np.random.default_rng(1000 + t))
            truth = (W.dense() @ x)[rel.answered]
            lo, hi = rel.interval(0.95)
            hit += int(np.sum((lo <= truth) & (truth <= hi)))
            tot += truth.size
    return hit / tot


@pytest.mark.parametrize("path, model, method", COVERAGE, ids=["-".join(c) for c in COVERAGE])
def test_intervals_cover_at_the_nominal_rate(path, model, method):
    """Pooled over the answers of each release; the band is 4 binomial SE for ``TRIALS``
    independent releases (answers within one release are correlated, so the releases count),
    around 0.95 (below by at most the discrete Laplace's normal-approximation shortfall)."""
    c = coverage(path, model, method)
    se = math.sqrt(0.95 * 0.05 / TRIALS)
    assert 0.93 - 4 * se <= c <= min(1.0, 0.95 + 4 * se), c


# -- protocol: check → read → one spend → draws, on every plan ---------------------------------


class _Log(list):
    pass


class _SpyBudget(PrivacyBudget):
    def __init__(self, log, *a, **k):
        super().__init__(*a, **k)
        self._log = log

    def can_spend_events(self, events):  # can_spend(eps, delta) goes through it too
        self._log.append("afford")
        return super().can_spend_events(events)

    def spend_events(self, events, *, what=""):  # and spend(eps, delta)
        self._log.append("spend")
        return super().spend_events(events, what=what)


class _SpySource(RandomSource):
    secure = False

    def __init__(self, log, seed):
        super().__init__()
        self._log, self._rng = log, np.random.default_rng(seed)

    def _generate(self, n):
        self._log.append("draw")
        return self._rng.integers(0, 1 << 64, size=n, dtype=np.uint64)


class _SpyEngine:
    """Marginal tables from records, logging each read."""

    def __init__(self, log, codes, domain):
        self._log, self._codes, self._domain = log, codes, domain

    def marginal_counts(self, subsets):
        from matmech.sources.tables import marginal_tables

        self._log.append("read")
        return marginal_tables(self._codes, self._domain, subsets)


PLANS = [
    (p, m, s)
    for p in op.PATHS
    for m in op.MODELS
    for s in (op.METHODS if p not in op.NO_SELECTION else ("none",))
]


#: The plan type each path runs (every release is one run_plan of one plan).
PLAN_TYPES = {
    "histogram": ("StrategyPlan", "SelectedPlan"),
    "records": ("StrategyPlan", "SelectedRowsPlan"),
    "residual": ("ResidualPlan",),
    "gmarginal": ("GMarginalPlan",),
}


def _spy_runner(monkeypatch, log, plans):
    """Every module that runs plans, its run_plan wrapped: the plan is recorded and must be a
    :class:`matmech.plans.plan.Plan`, and its reads are logged."""
    import importlib

    from matmech.run import runner as run_module
    from matmech.plans.plan import Plan

    real = run_module.run_plan

    def spy(plan, data, **kw):
        assert isinstance(plan, Plan), type(plan)
        plans.append(type(plan).__name__)
        inner = data.marginals

        def marginals(sizes, subsets):
            log.append("read")
            return inner(sizes, subsets)

        data.marginals = marginals
        lazy = getattr(data, "reader", None)
        if lazy is not None:  # a lazy plan's checked reader: its creation and every batch

            def reader(sizes, subsets):
                log.append("read")
                inner_reader = lazy(sizes, subsets)
                return lambda batch: log.append("read") or inner_reader(batch)

            data.reader = reader
        return real(plan, data, **kw)

    # the one module that runs plans (issue 34: every release composes plan → run there)
    monkeypatch.setattr(importlib.import_module("matmech.release"), "run_plan", spy)


@pytest.mark.parametrize("path, model, method", PLANS, ids=["-".join(g) for g in PLANS])
def test_every_plan_checks_then_reads_then_spends_once_then_draws(path, model, method, monkeypatch):
    seed = 4
    log, plans = _Log(), []
    if path == "residual":
        domain, W, x, codes = op.marginal_problem(seed)
        strat = "residual"
    elif path == "gmarginal":
        domain, W, x, codes = op.problem(seed)
        strat = "gmarginals"
    else:
        domain, W, x, codes = op.problem(seed)
        strat = (
            "auto" if (path == "records" and method != "none") else op.strategy_for("identity", W)
        )
    _spy_runner(monkeypatch, log, plans)
    data = x if path == "histogram" else _SpyEngine(log, codes, domain)
    budget = _SpyBudget(log, 5.0, 1e-3, accountant="basic")  # the sums read below
    rel = mm.release(
        data,
        W,
        1.0,
        op.MODELS[model],
        strategy=strat,
        budget=budget,
        select=op.select_options(method, W, x),
        rng=_SpySource(log, seed),
        domain=None,
    )
    assert len(plans) == 1 and plans[0] == PLAN_TYPES[path][method != "none"], plans
    assert log.count("spend") == 1, log
    assert "afford" in log and "read" in log and "draw" in log, log
    first_read, spend = log.index("read"), log.index("spend")
    assert log.index("afford") < first_read < spend, log
    assert "draw" not in log[:spend], log
    assert budget.remaining[0] == pytest.approx(4.0) and rel.spent == (1.0, op.MODELS[model])


@pytest.mark.parametrize("form", ["records", "tables", "histogram"])
def test_the_streamed_plan_checks_then_reads_then_spends_once_then_draws(form, monkeypatch):
    """release_marginals is one run_plan of the lazy StreamedPlan: the reader (every check on
    the data) is made after the affordability check and before the one spend; no draw
    before the spend; the batches are read after it."""
    from matmech import MarginalRelease, release_marginals
    from matmech.sources.tables import marginal_tables

    log, plans = _Log(), []
    domain, W, x, codes = op.marginal_problem(4)
    data = {
        "records": codes,
        "tables": marginal_tables(codes, domain, [tuple(range(len(domain)))]),
        "histogram": x,
    }[form]
    _spy_runner(monkeypatch, log, plans)
    budget = _SpyBudget(log, 5.0, 1e-3, accountant="basic")  # the sums read below
    rel = release_marginals(data, W, 1.0, 1e-6, budget=budget, rng=_SpySource(log, 4))
    assert plans == ["StreamedPlan"] and isinstance(rel, MarginalRelease), plans
    assert log.count("spend") == 1, log
    first_read, spend = log.index("read"), log.index("spend")
    assert log.index("afford") < first_read < spend, log
    assert "draw" not in log[:spend] and "draw" in log, log
    assert "read" in log[spend:], log  # batch by batch, after the checks
    assert (
        budget.remaining == pytest.approx((4.0, 1e-3 - 1e-6))
        and rel.budget_remaining == budget.remaining
    )


def test_run_plan_refuses_before_reading_and_spends_nothing_on_a_failed_check():
    """An unaffordable plan reads nothing; a data check that fails spends nothing."""
    from matmech.sources.source import HistogramSource
    from matmech.run.runner import run_plan
    from matmech.plans.strategy import strategy_plan
    from matmech.privacy.budget import BudgetExceededError

    W = mm.workloads.prefix(8)
    plan = strategy_plan(W, mm.workloads.identity(8), 1.0, max_records=10)
    log = _Log()

    class Source(HistogramSource):
        def marginals(self, sizes, subsets):
            log.append("read")
            return super().marginals(sizes, subsets)

    with pytest.raises(BudgetExceededError):
        run_plan(plan, Source(np.ones(8)), budget=_SpyBudget(log, 0.5), rng=_SpySource(log, 0))
    assert log[0] == "afford" and "read" not in log and "draw" not in log, log
    log.clear()
    budget = _SpyBudget(log, 5.0)
    with pytest.raises(ValueError, match="max_records"):
        run_plan(plan, Source(np.full(8, 2)), budget=budget, rng=_SpySource(log, 0))
    assert "spend" not in log and "draw" not in log and budget.remaining[0] == 5.0


# -- discrete choices do not follow BLAS threads --------------------------------------------------

THREADED = [
    ("histogram", "pure", "svt-gap"),
    ("histogram", "approx", "em"),
    ("records", "pure", "topc-gap"),
    ("records", "approx", "vector"),
    ("residual", "approx", "none"),
    ("histogram", "pure", "adaptive-svt"),
]


@pytest.mark.parametrize("path, model, method", THREADED, ids=["-".join(c) for c in THREADED])
def test_selected_rows_strategy_and_answers_do_not_depend_on_blas_threads(path, model, method):
    from threadpoolctl import threadpool_limits

    out = []
    for threads in (1, 2):
        with threadpool_limits(limits=threads, user_api="blas"):
            rel, _, _ = op.run(path, model, method, 6)
        out.append(rel)
    a, b = out
    assert (a.selected is None and b.selected is None) or np.array_equal(a.selected, b.selected)
    assert a.strategy_name == b.strategy_name and a.strategy_note == b.strategy_note
    np.testing.assert_allclose(b.answers, a.answers, rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(b.std, a.std, rtol=1e-10)
