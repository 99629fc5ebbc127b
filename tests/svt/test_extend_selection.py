"""A new selection method is one test-local definition and one register_method call
(docs/guide/extending.md): it runs through select_rows and release(select=...) on the
histogram and on records, charged once, and its answers equal the dense GLS of the records."""

import numpy as np
import oracle_problems as op
import pytest

import matmech as mm
from matmech import workloads as wl
from matmech.privacy import noise
from matmech.privacy.budget import PrivacyBudget
from matmech.privacy.calibration import laplace_scale_up
from matmech.svt import methods
from matmech.svt import select as svt_select
from matmech.svt.select import select_rows


def one_shot_top_c(values, *, c, eps, sensitivity, rng, **_):
    """Noisy top-c in one shot: every answer plus discrete Laplace noise of scale 2cΔ/ε, the c
    largest (Ding et al., PVLDB 2019: the indices are ε-DP). Integer answers only."""
    b = laplace_scale_up(eps, 2 * c * sensitivity)
    noisy = np.asarray(values, dtype=np.int64) + noise.discrete_laplace(
        b, len(values), rng=noise.check_rng(rng)
    )
    return np.argsort(-noisy, kind="stable")[:c], True


def _needs_small_c(*, c, eps, **_):
    if c > 8:
        raise ValueError(f"one-shot-top-c takes c <= 8, got c={c}")


TOY = methods.SelectionMethod(
    "one-shot-top-c",
    "one-shot-noisy-top-c",
    gap=False,
    threshold=False,
    run=one_shot_top_c,
    calibrate=_needs_small_c,
)


@pytest.fixture
def toy():
    methods.register_method(TOY)
    try:
        yield TOY
    finally:
        del methods.SELECTION_METHODS[TOY.name]  # MECHANISMS follows the registry


def _data():
    x = np.full(16, 20, dtype=np.int64)
    x[[3, 9, 12]] = [900, 700, 500]  # three clear peaks
    return x


def test_a_registered_method_runs_through_select_rows(toy):
    W = wl.identity(16)
    sel = select_rows(W, _data(), c=3, eps=1.0, method=toy.name, rng=np.random.default_rng(0))
    assert sorted(sel.rows.tolist()) == [3, 9, 12] and sel.method == toy.name
    with pytest.raises(ValueError, match="c <= 8"):
        select_rows(W, _data(), c=9, eps=1.0, method=toy.name, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="takes no threshold"):
        select_rows(W, _data(), c=3, eps=1.0, threshold=5.0, method=toy.name)


class _CountingBudget(PrivacyBudget):
    def __init__(self, *args):
        super().__init__(*args)
        self.spends = 0

    def spend_events(self, *args, **kwargs):  # every spend goes through it
        self.spends += 1
        return super().spend_events(*args, **kwargs)


@pytest.mark.parametrize("path", ["histogram", "records"])
@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_a_registered_method_runs_through_release_charged_once(toy, path, delta):
    dom = (4, 4)
    W = wl.stack(wl.kron(wl.identity(4), wl.identity(4)), wl.kron(wl.prefix(4), wl.total(4)))
    x = _data()
    codes = np.column_stack(np.unravel_index(np.repeat(np.arange(16), x), dom))
    budget = _CountingBudget(2.0, 1e-5)
    rel = mm.release(
        x if path == "histogram" else codes,
        W,
        1.0,
        delta,
        budget=budget,
        select=dict(method=toy.name, c=3, eps=0.4),
        rng=np.random.default_rng(1),
    )
    assert rel.selected.size == 3 and rel.to_dict()["selection"]["method"] == toy.name
    assert budget.spends == 1 and budget.spent == (1.0, delta)
    da, dv = op.compare(rel, W)
    assert da <= op.RTOL and dv <= op.RTOL


def test_register_method_refuses_a_taken_name_and_gaps():
    with pytest.raises(ValueError, match="registered already"):
        methods.register_method(methods.SelectionMethod("svt", "x", False, True, run=print))
    with pytest.raises(ValueError, match="gap=False"):
        methods.register_method(methods.SelectionMethod("new-gap", "x", True, False, run=print))
    with pytest.raises(TypeError, match="callable run"):
        methods.register_method(methods.SelectionMethod("no-run", "x", False, False))


def test_mechanisms_is_read_from_the_registry():
    """MECHANISMS is a dict derived from SELECTION_METHODS (in its order) on every read:
    registering and removing a method shows in it, in matmech.svt.select's re-export too."""

    def derived():
        return {n: m.mechanism for n, m in methods.SELECTION_METHODS.items()}

    before = methods.MECHANISMS
    assert type(before) is dict and before == derived()
    assert list(before) == list(methods.METHODS) == list(methods.SELECTION_METHODS)
    methods.register_method(TOY)
    try:
        for view in (methods.MECHANISMS, svt_select.MECHANISMS):
            assert view == derived() and list(view)[-1] == TOY.name
            assert view[TOY.name] == "one-shot-noisy-top-c"
        assert TOY.name not in before  # a value read earlier is a snapshot, not the registry
    finally:
        del methods.SELECTION_METHODS[TOY.name]
    assert TOY.name not in methods.MECHANISMS and before == methods.MECHANISMS
    assert before == svt_select.MECHANISMS
    with pytest.raises(AttributeError, match="no attribute 'MECHANISM'"):
        _ = methods.MECHANISM  # a typo is still an AttributeError
