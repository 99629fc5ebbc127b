"""The release pipeline (issue 22, item 1): one runner over plans, one data-source protocol.

* :func:`matmech.run.runner.run_plan` on the Matrix Mechanism plan equals a dense
  recomputation of its own draws: the same noise redrawn from the same seed, y = A_g x + z,
  x̂ = A_g⁺ y, answers W x̂ and variances σ²·diag(W (A_gᵀA_g)⁺ Wᵀ) (Li et al., PODS 2010);
* every data form (histogram, records, marginal tables, a data engine) hands out the same
  tables, so one job gives byte-identical seeded answers from each form.

(The answers and variances of every path against an independent dense GLS of its records,
and the check → read → one spend → draw order of every plan type, are in tests/test_oracle.py.)
"""

import math

import numpy as np
import pytest

import matmech as mm
from matmech.sources.source import EngineSource, HistogramSource, TableSource, as_source
from matmech.plans.plan import Plan
from matmech.run.runner import run_plan
from matmech.plans.strategy import strategy_plan
from matmech.privacy import noise
from matmech.privacy.budget import PrivacyBudget

from oracle_problems import marginal_problem, problem

CASES = [
    (seed, strategy, delta)
    for seed in (1, 4, 9)
    for strategy in ("identity", "hierarchical", "workload")
    for delta in (0.0, 1e-6)
]


@pytest.mark.parametrize("seed, strategy, delta", CASES)
def test_the_strategy_plan_equals_a_dense_recomputation_of_its_draws(seed, strategy, delta):
    _, W, x, _ = problem(seed)
    A = W if strategy == "workload" else strategy
    budget = PrivacyBudget(2.0, 1e-3, accountant="basic")  # the sums: exactly what was charged
    rel = mm.release(x, W, 1.0, delta, strategy=A, budget=budget, rng=np.random.default_rng(seed))
    m = rel.measurement
    Ag = m.strategy.dense()
    src = noise.check_rng(np.random.default_rng(seed))
    p = Ag.shape[0]
    if m.grid == 1.0:
        draw = noise.discrete_laplace if m.noise == "discrete_laplace" else noise.discrete_gaussian
        z = draw(m.scale, p, rng=src).astype(np.float64)
    else:
        draw = noise.laplace if m.noise == "discrete_laplace" else noise.gaussian
        z = draw(m.scale, p, grid=m.grid, rng=src)
    y = Ag @ x.astype(np.float64) + z
    np.testing.assert_array_equal(m.y, y)  # the runner drew exactly these, after one spend
    Wd, pinv = W.dense(), np.linalg.pinv(Ag, rcond=1e-12)
    answers = Wd @ (pinv @ y)
    var = m.std**2 * np.einsum("ij,ij->i", Wd @ pinv, Wd @ pinv)
    scale = max(1.0, np.abs(answers).max())
    assert np.abs(rel.answers - answers).max() / scale <= 1e-8
    assert np.abs(rel.std**2 - var).max() / var.max() <= 1e-8
    assert budget.spent == (m.eps, m.delta) == rel.spent and len(budget.ledger) == 1
    (ev,) = budget.events  # the event charged is the noise drawn
    scale = ev.sigma if m.noise == "discrete_gaussian" else ev.scale
    assert (type(ev).kind, scale, ev.sensitivity, ev.grid) == (
        m.noise,
        m.scale,
        m.sensitivity,
        m.grid,
    )
    assert rel.measurements[0].values.tobytes() == m.y.tobytes()


def test_run_plan_on_a_hand_built_plan_is_the_release():
    """release() is run_plan of the plan it builds: a hand-built plan with the same seed gives
    the same bytes."""
    _, W, x, _ = problem(4)
    rel = mm.release(x, W, 1.0, strategy="identity", rng=np.random.default_rng(2))
    plan = strategy_plan(
        W, mm.strategies.identity(W.shape[1]), 1.0, name="identity", note=rel.strategy_note
    )
    assert isinstance(plan, Plan) and plan.subsets == ((0,),) and plan.sizes == (W.shape[1],)
    out = run_plan(plan, HistogramSource(x), budget=None, rng=np.random.default_rng(2))
    assert out.answers.tobytes() == rel.answers.tobytes() and out.std.tobytes() == rel.std.tobytes()
    assert not out.answers.flags.writeable and out.workload is W


def _forms(domain, x, codes):
    import pandas as pd

    from matmech.sources.tables import marginal_tables
    from matmech.io.domain import Domain, integer_range

    full = tuple(range(len(domain)))
    frame = pd.DataFrame({f"a{i}": codes[:, i] for i in range(len(domain))})
    dom = Domain(tuple(integer_range(f"a{i}", 0, n - 1) for i, n in enumerate(domain)))
    return {
        "histogram": HistogramSource(x),
        "records": TableSource(codes),
        "tables": TableSource(marginal_tables(codes, domain, [full])),
        "engine": EngineSource(frame, dom),
    }


@pytest.mark.parametrize("seed", (1, 4, 9))
def test_every_data_form_hands_out_the_same_tables(seed):
    domain, _, x, codes = problem(seed)
    d = len(domain)
    subsets = [(), *[(i,) for i in range(d)], tuple(range(d))] + ([(0, d - 1)] if d > 1 else [])
    forms = _forms(domain, x, codes)
    want = forms["histogram"].marginals(domain, subsets)
    for name, src in forms.items():
        got = src.marginals(domain, subsets)
        for s in subsets:
            np.testing.assert_array_equal(got[s], want[s], err_msg=f"{name} {s}")
    # the plan on all attributes of a one-attribute domain is the histogram itself
    hist = HistogramSource(x).marginals((math.prod(domain),), [(0,)])[(0,)]
    np.testing.assert_array_equal(hist, x)
    np.testing.assert_array_equal(hist.reshape(domain), want[tuple(range(d))])  # row-major cells


@pytest.mark.parametrize("seed", (1, 4))
@pytest.mark.parametrize("delta", (0.0, 1e-6))
def test_one_job_gives_the_same_seeded_answers_from_every_data_form(seed, delta):
    """The route follows from W and the strategy: the residual job on a histogram, records,
    tables or an engine reads the same tables and draws the same noise."""
    domain, Wm, x, codes = marginal_problem(seed)
    out = {}
    for name, src in _forms(domain, x, codes).items():
        rel = mm.release(src, Wm, 1.0, delta, strategy="residual", rng=np.random.default_rng(seed))
        out[name] = (rel.answers.tobytes(), rel.std.tobytes(), rel.strategy_note)
    assert len(set(out.values())) == 1, sorted(out)


def test_as_source_follows_the_form_of_x_only():
    x = np.arange(6)
    assert isinstance(as_source(x), HistogramSource)
    assert isinstance(as_source(x.tolist()), HistogramSource)
    assert isinstance(as_source(np.zeros((3, 2), dtype=int)), TableSource)
    assert isinstance(as_source({(0,): x}), TableSource)
    src = HistogramSource(x)
    assert as_source(src) is src


# -- lazy plans: a checked reader instead of eager tables; a plan-built result ----------------


@pytest.mark.parametrize("seed", (1, 4))
def test_every_checked_reader_hands_out_the_tables_of_marginals(seed):
    """``source.reader(sizes, subsets)`` (histogram, records, tables) reads, batch by batch,
    the tables ``marginals`` hands out; a data engine has no checked reader (TypeError)."""
    domain, _, x, codes = problem(seed)
    d = len(domain)
    subsets = [(), *[(i,) for i in range(d)], tuple(range(d))] + ([(0, d - 1)] if d > 1 else [])
    forms = _forms(domain, x, codes)
    want = forms["histogram"].marginals(domain, subsets)
    for name in ("histogram", "records", "tables"):
        reader = forms[name].reader(domain, subsets)
        for batch in (subsets[:2], subsets[2:]):
            got = reader(batch)
            for s in batch:
                np.testing.assert_array_equal(got[s], want[s], err_msg=f"{name} {s}")
    with pytest.raises(TypeError, match="engine"):
        forms["engine"].reader(domain, subsets)


def test_a_checked_reader_checks_the_data_when_it_is_made():
    domain, _, x, codes = problem(4)
    bad = codes.copy()
    bad[0, 0] = domain[0]
    with pytest.raises(ValueError, match="attribute 0"):
        TableSource(bad).reader(domain, [(0,)])
    with pytest.raises(ValueError):
        HistogramSource(np.append(x, 1)).reader(domain, [(0,)])
    from matmech.sources.tables import marginal_tables

    with pytest.raises(ValueError, match=r"no table given for attributes \(0, 1\)"):
        TableSource(marginal_tables(codes, domain, [(0,), (1,)])).reader(domain, [(0, 1)])


class _LazyTotal:
    """A lazy plan with its own result type: one noisy count, read through the reader."""

    workload = mm.workloads.total(6)
    eps, delta, neighbors, what = 1.0, 0.0, "add_remove", "a lazy total"
    sizes, subsets = (2, 3), ((0, 1), ())
    lazy = True

    def check(self, reader):
        assert callable(reader)  # the reader, not tables
        return reader

    def draw(self, reader, *, rng):
        from matmech.plans.plan import Draws

        total = int(reader([()])[()])
        return Draws((), total + int(noise.discrete_laplace(1.0, 1, rng=noise.check_rng(rng))[0]))

    def estimate(self, draws):
        return draws.state

    def result(self, est, *, budget_remaining):
        return ("lazy total", est, budget_remaining)


def test_a_lazy_plan_gets_the_reader_and_builds_its_own_result():
    plan = _LazyTotal()
    assert isinstance(plan, Plan)
    x = np.array([1, 2, 3, 4, 5, 6])
    budget = PrivacyBudget(2.0)
    kind, value, remaining = run_plan(
        plan, HistogramSource(x), budget=budget, rng=np.random.default_rng(0)
    )
    z = noise.discrete_laplace(1.0, 1, rng=noise.check_rng(np.random.default_rng(0)))[0]
    assert (kind, value, remaining) == ("lazy total", 21 + int(z), (1.0, 0.0))


def test_a_lazy_plan_on_a_source_without_a_reader_spends_nothing():
    class Eager:  # a DataSource with marginals only
        def marginals(self, sizes, subsets):
            raise AssertionError("read")

    budget = PrivacyBudget(2.0)
    with pytest.raises(TypeError, match="checked reader"):
        run_plan(_LazyTotal(), Eager(), budget=budget, rng=np.random.default_rng(0))
    assert budget.remaining == (2.0, 0.0)
