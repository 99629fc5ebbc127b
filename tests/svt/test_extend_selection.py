"""A new selection method is one test-local module's worth of hooks and one register_method
line (docs/guide/extending.md): it runs through select_rows and release(select=...) on the
histogram, on records and on marginal tables (the factored path), charged once, and its
answers equal the dense GLS of the records.

Two methods are defined here, in this module only:

* "bottom-c-gap", a free-gap method: Noisy Top-c with Gap (Ding, Wang, Zhang, Kifer, PVLDB
  2019) on the negated scores, i.e. the c smallest rows and the gaps between them. Negating
  every score keeps the sensitivity (and monotonic scores monotonic), so it is exactly the
  audited mechanism on other public-transformed input: ε-DP. Its output law: the gaps
  measure the selected scores up to an unknown common offset.
* "one-shot-top-c", a method without gaps: every score plus Laplace noise of scale 2cΔ/ε, the
  c largest indices (the indices of Noisy Top-c with Gap alone: ε-DP).
"""

import dataclasses
import math

import numpy as np
import oracle_problems as op
import pytest

import matmech as mm
from matmech import svt
from matmech import workloads as wl
from matmech.privacy.budget import PrivacyBudget
from matmech.svt import gap, methods
from matmech.svt import select as svt_select
from matmech.svt.measurement import GapMeasurement
from matmech.run.select import select_rows

# -- "bottom-c-gap": calibration, run, output law, registry line -------------------------------


calibrate = gap.calibrate_top_c  # [DWZK19] Noisy Top-c's calibration: Lap(2cΔ/ε) per score


def run_bottom_c(o):
    """The c smallest noisy scores and the gaps between them (the last to the runner-up)."""
    cal = o.calibration
    noisy = -o.units() + o.draw(cal.query_scale, o.n)
    order = gap.top_c_order(noisy, o.c)
    gaps = noisy[order[:-1]] - noisy[order[1:]]
    return gap.GapResult(
        tuple(int(i) for i in order[:-1]),
        tuple(float(v) * o.grid for v in gaps),
        ("rank",) * o.c,
        cal.eps,
        cal.eps,
        True,
        o.n,
        cal,
        "noisy-bottom-c-gap",
    )


def bottom_c_law(result, threshold=None):
    """z_t = g_1 + ... + g_{t-1} = q_{j_t} − q_{j_1} + noise: the selected scores up to an
    unknown common offset, each with the variance of one score's noise."""
    pos = np.asarray(result.positions, dtype=np.int64)
    z = np.concatenate([[0.0], np.cumsum(result.gaps[:-1])])
    return GapMeasurement(pos, z, np.full(pos.size, result.calibration.gap_variance()), math.inf)


BOTTOM = methods.SelectionMethod(
    "bottom-c-gap",
    methods.Mechanism(
        "noisy-bottom-c-gap",
        calibrate,
        run_bottom_c,
        bottom_c_law,
        lambda cal: cal.gap_variance("middle"),
    ),
    threshold=False,
    runner_up=True,
)


# -- "one-shot-top-c": a method without gaps ----------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Picks:
    positions: tuple
    stopped: bool = True


def run_one_shot(o):
    noisy = o.units() + o.draw(o.calibration.query_scale, o.n)
    return Picks(tuple(np.argsort(-noisy, kind="stable")[: o.c].tolist()))


def needs_small_c(*, c, **kw):
    if c > 8:
        raise ValueError(f"one-shot-top-c takes c <= 8, got c={c}")
    return calibrate(c=c, **kw)


ONE_SHOT = methods.SelectionMethod(
    "one-shot-top-c",
    methods.Mechanism("one-shot-noisy-top-c", needs_small_c, run_one_shot),
    threshold=False,
)


@pytest.fixture
def registered():
    for m in (BOTTOM, ONE_SHOT):
        methods.register_method(m)  # the one line a new method needs
    try:
        yield
    finally:
        for m in (BOTTOM, ONE_SHOT):
            del methods.SELECTION_METHODS[m.name]  # MECHANISMS follows the registry


def _data():
    x = np.full(16, 500, dtype=np.int64)
    x[[3, 9, 12]] = [2, 40, 90]  # three clear troughs
    x[[5, 7]] = [900, 700]  # two clear peaks
    return x


def test_bottom_c_gap_is_noisy_top_c_gap_on_the_negated_scores(registered):
    """Draw for draw the registered run equals the built-in Noisy Top-c with Gap on −q: the
    privacy proof (and the exact audit of tests/svt) carries over."""
    x = _data()
    for seed in range(5):
        sel = select_rows(
            wl.identity(16), x, c=3, eps=1.0, method="bottom-c-gap", rng=seed_rng(seed)
        )
        ref = svt.noisy_top_c_gap(-x, 3, 1.0, monotonic=True, rng=seed_rng(seed))
        assert sel.rows.tolist() == list(ref.positions) and sel.gap.gaps == ref.gaps
        assert sel.mechanism == "noisy-bottom-c-gap" and sel.monotonic
    assert sorted(sel.rows.tolist()) == [3, 9, 12]
    with pytest.raises(ValueError, match="needs c below the 16 rows"):
        select_rows(wl.identity(16), x, c=16, eps=1.0, method="bottom-c-gap")
    with pytest.raises(ValueError, match="takes no threshold"):
        select_rows(wl.identity(16), x, c=3, eps=1.0, threshold=5.0, method="bottom-c-gap")


def seed_rng(seed):
    return np.random.default_rng(seed)


def test_bottom_c_gap_law_is_its_measurement(registered):
    """gap_measurement dispatches to the registered law; Monte Carlo over 600 runs with a fixed
    selection: z_t − (q_{j_t} − q_{j_1}) has mean 0 and variance 2·Var(η) (the stated law with
    its unknown offset projected out)."""
    x = _data()
    W = wl.identity(16)
    err = []
    for seed in range(600):
        sel = select_rows(W, x, c=3, eps=2.0, method="bottom-c-gap", rng=seed_rng(seed))
        gm = svt.gap_measurement(sel.gap)
        assert isinstance(gm, GapMeasurement) and gm.common_var == math.inf
        q = x[gm.positions].astype(float)
        err.append(gm.z - (q - q[0]))
    err = np.array(err)[:, 1:]
    var = sel.gap.calibration.gap_variance()
    assert np.all(np.abs(err.mean(axis=0)) < 4 * np.sqrt(2 * var / err.shape[0]))
    np.testing.assert_allclose(err.var(axis=0), 2 * var, rtol=0.2)


class _CountingBudget(PrivacyBudget):
    def __init__(self, *args):
        super().__init__(*args)
        self.spends = 0

    def spend_events(self, *args, **kwargs):  # every spend goes through it
        self.spends += 1
        return super().spend_events(*args, **kwargs)


@pytest.mark.parametrize("method", ["bottom-c-gap", "one-shot-top-c"])
@pytest.mark.parametrize("path", ["histogram", "records"])
@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_a_registered_method_runs_through_release_charged_once(registered, method, path, delta):
    dom = (4, 4)
    W = wl.stack(wl.kron(wl.identity(4), wl.identity(4)), wl.kron(wl.prefix(4), wl.total(4)))
    x = _data()
    codes = np.column_stack(np.unravel_index(np.repeat(np.arange(16), x), dom))
    budget = _CountingBudget(2.0, 1e-5)
    rel = mm.release(
        op.source(path, x, codes),
        W,
        1.0,
        delta,
        budget=budget,
        select=dict(method=method, c=3, eps=0.4),
        rng=seed_rng(1),
    )
    shown = rel.to_dict()["selection"]
    assert rel.selected.size == 3 and shown["method"] == method
    assert ("gaps" in shown) == (method == "bottom-c-gap")  # released, never combined
    assert budget.spends == 1 and budget.spent == (1.0, delta)
    da, dv = op.compare(rel, W)
    assert da <= op.RTOL and dv <= op.RTOL


def test_a_registered_free_gap_method_runs_on_the_factored_path(registered):
    """Marginal tables of six attributes (all 2-way marginals: 15 terms, 135 rows): the
    factored selection (matmech.plans.factored_selection) plans and runs the registered method through
    the same registry, measures only the selected rows, and equals the explicit release (and
    the dense oracle) draw for draw; with no select eps, the split is advised from its hooks."""
    dom = (3,) * 6
    W = wl.marginals(dom, 2)
    rng = np.random.default_rng(7)
    codes = np.column_stack([rng.integers(0, 3, 4000) for _ in dom])
    codes[:, 0] = np.where(rng.random(4000) < 0.02, 0, 1 + rng.integers(0, 2, 4000))  # 0 rare
    x = mm.histogram(codes, dom)
    budget = _CountingBudget(2.0, 0.0)
    sel = dict(method="bottom-c-gap", c=3, eps=0.3)
    b = mm.release(codes, W, 1.0, select=sel, budget=budget, rng=seed_rng(11))
    assert b.to_dict()["strategy"]["type"] == "selected rows"  # the factored measurement
    assert b.measurement is None and budget.spends == 1 and b.selected.size == 3
    assert b.selection.mechanism == "noisy-bottom-c-gap" and b.selection.gap is not None
    a = mm.release(x, W, 1.0, select=sel, rng=seed_rng(11))
    assert np.array_equal(a.selected, b.selected)
    np.testing.assert_allclose(b.answers, a.answers, rtol=0, atol=1e-9)
    np.testing.assert_allclose(b.std, a.std, rtol=1e-9)
    da, dv = op.compare(b, W)
    assert da <= op.RTOL and dv <= op.RTOL
    truth = W.dense() @ x
    assert W.shape[0] == 135 and np.all(truth[b.selected] < 100)  # cells of the rare value
    adv = mm.release(codes, W, 1.0, select=dict(method="bottom-c-gap", c=3), rng=seed_rng(3))
    assert adv.to_dict()["selection"]["eps_advised"] and 0 < adv.eps_select < 1.0


def test_a_registered_method_checks_its_inputs_before_the_spend(registered):
    W, x = wl.identity(16), _data()
    sel = select_rows(W, x, c=3, eps=1.0, method="one-shot-top-c", rng=seed_rng(0))
    assert {5, 7} <= set(sel.rows.tolist()) and sel.rows.size == 3
    assert sel.gap is None and sel.mechanism == "one-shot-noisy-top-c"
    budget = _CountingBudget(2.0, 0.0)
    with pytest.raises(ValueError, match="c <= 8"):
        select_rows(W, x, c=9, eps=1.0, method="one-shot-top-c", budget=budget)
    assert budget.spends == 0 and budget.spent == (0.0, 0.0)


def test_register_method_refuses_a_taken_name_and_bad_hooks():
    mech = methods.Mechanism("x", calibrate, run_one_shot)
    with pytest.raises(ValueError, match="registered already"):
        methods.register_method(methods.SelectionMethod("svt", mech, threshold=True))
    with pytest.raises(TypeError, match="callable run hook"):
        methods.register_method(
            methods.SelectionMethod("no-run", methods.Mechanism("y", calibrate, None), False)
        )
    with pytest.raises(TypeError, match="callable score_variance hook"):
        methods.register_method(
            methods.SelectionMethod(
                "no-score", methods.Mechanism("z", calibrate, run_bottom_c, bottom_c_law), False
            )
        )
    with pytest.raises(TypeError, match="must be a Mechanism"):
        methods.register_method(methods.SelectionMethod("bad", "sparse-vector", True))
    assert {"no-run", "no-score", "bad"}.isdisjoint(methods.SELECTION_METHODS)


def test_mechanisms_is_read_from_the_registry():
    """MECHANISMS is a dict derived from SELECTION_METHODS (in its order) on every read:
    registering and removing a method shows in it, in matmech.svt.select's re-export too."""

    def derived():
        return {n: m.mechanism.name for n, m in methods.SELECTION_METHODS.items()}

    before = methods.MECHANISMS
    assert type(before) is dict and before == derived()
    assert list(before) == list(methods.METHODS) == list(methods.SELECTION_METHODS)
    methods.register_method(ONE_SHOT)
    try:
        for view in (methods.MECHANISMS, svt_select.MECHANISMS):
            assert view == derived() and list(view)[-1] == ONE_SHOT.name
            assert view[ONE_SHOT.name] == "one-shot-noisy-top-c"
        assert ONE_SHOT.name not in before  # a value read earlier is a snapshot, not the registry
    finally:
        del methods.SELECTION_METHODS[ONE_SHOT.name]
    assert ONE_SHOT.name not in methods.MECHANISMS and before == methods.MECHANISMS
    assert before == svt_select.MECHANISMS
    with pytest.raises(AttributeError, match="no attribute 'MECHANISM'"):
        _ = methods.MECHANISM  # a typo is still an AttributeError
