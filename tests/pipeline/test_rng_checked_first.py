"""A bad ``rng`` is refused before anything is read or spent, at every public entry point
that reads private data and charges a budget (issue 31, item 3): ``run_plan(plan, src,
budget=b, rng=5)`` used to charge, then raise TypeError. One rule
(:func:`matmech.privacy.randomness.check_rng`); the list below is checked complete."""

from __future__ import annotations

import importlib
import inspect
import itertools
import pkgutil

import numpy as np
import pytest

import matmech
import matmech as mm
from matmech import workloads as Wl
from matmech import release_marginals
from matmech.release import release_factored
from matmech.linalg.terms import marginal_workload
from matmech.run.discover import discover_categories
from matmech.sources.source import HistogramSource
from matmech.plans.strategy import strategy_plan
from matmech.run.runner import run_plan
from matmech.run.measure import measure
from matmech.stream.plan import StreamSpec
from matmech.stream.release import StreamRelease
from matmech.run.select import select_rows


class Untouchable:
    """A data source whose every read fails the test."""

    def marginals(self, sizes, subsets):
        raise AssertionError("data read")

    def marginal_counts(self, subsets):
        raise AssertionError("data read")

    def reader(self, sizes, subsets):
        raise AssertionError("data read")


W2 = marginal_workload((3,) * 4, list(itertools.combinations(range(4), 2)))
X = np.array([1.0, 2.0, 3.0, 4.0])

#: public name -> call(budget, rng) of every entry point that takes both a budget and an rng
#: (``[path]``: another path of that entry point, run through it)
CALLS = {
    "matmech.run.runner.run_plan": lambda b, rng: run_plan(
        strategy_plan(Wl.prefix(4), Wl.identity(4), 1.0), Untouchable(), budget=b, rng=rng
    ),
    "matmech.release.release": lambda b, rng: mm.release(X, Wl.prefix(4), 1.0, budget=b, rng=rng),
    "matmech.release.release_factored": lambda b, rng: release_factored(
        Untouchable(), W2, 1.0, budget=b, rng=rng
    ),
    "matmech.release.release_factored[select]": lambda b, rng: release_factored(
        Untouchable(), W2, 1.0, budget=b, rng=rng, select=dict(method="em", c=2, eps=0.5)
    ),
    "matmech.release.release_factored[gmarginal]": lambda b, rng: release_factored(
        Untouchable(), W2, 1.0, 1e-6, strategy="gmarginals", budget=b, rng=rng, max_cells=1
    ),
    "matmech.release.release_marginals": lambda b, rng: release_marginals(
        Untouchable(), W2, 1.0, 0.0, budget=b, rng=rng
    ),
    "matmech.run.measure.measure": lambda b, rng: measure(
        X, Wl.identity(4), 1.0, budget=b, rng=rng
    ),
    "matmech.run.select.select_rows": lambda b, rng: select_rows(
        Wl.identity(4), X, c=1, eps=0.5, threshold=2.0, budget=b, rng=rng
    ),
    "matmech.run.discover.discover_categories": lambda b, rng: discover_categories(
        {"v": ["a", "b"]}, "v", 1.0, 1e-6, budget=b, rng=rng
    ),
    "matmech.synthesis.synthesize_adaptive": lambda b, rng: mm.synthesize_adaptive(
        Untouchable(), (3,) * 4, budget=b, rng=rng
    ),
    "matmech.stream.release.StreamRelease.create": lambda b, rng: StreamRelease.create(
        None, StreamSpec(4, eps=1.0), budget=b, rng=rng
    ),
    "matmech.stream.release.StreamRelease.open": lambda b, rng: StreamRelease.open(
        "/nonexistent/stream.db", budget=b, rng=rng
    ),
}
#: internal steps whose callers validated rng (run after their own checks)
INTERNAL = {
    "matmech.svt.core.scan",
    "matmech.stream.release.StreamRelease",
    # routes of matmech.release.release, called after it checked rng
    "matmech.release.release_gmarginal",
    "matmech.release.release_selected",
}


def _public_with_rng_and_budget():
    out = set()
    for info in pkgutil.walk_packages(matmech.__path__, "matmech."):
        if info.name.endswith("__main__"):
            continue
        mod = importlib.import_module(info.name)
        # every public name the module defines (internal modules have no __all__)
        for name, obj in vars(mod).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != info.name:
                continue
            cands = [obj]
            if inspect.isclass(obj):
                cands += [getattr(obj, a) for a in vars(obj) if not a.startswith("_")]
            for f in cands:
                try:
                    params = inspect.signature(f).parameters
                except (TypeError, ValueError):
                    continue
                if "rng" in params and "budget" in params:
                    out.add(f"{f.__module__}.{f.__qualname__}")
    return out


def test_every_entry_point_with_a_budget_and_an_rng_is_listed():
    assert _public_with_rng_and_budget() - INTERNAL == {n.split("[")[0] for n in CALLS}


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("bad", [5, "seed", np.random.RandomState(0), 1.5])
def test_a_bad_rng_is_refused_before_anything_is_read_or_spent(name, bad):
    budget = mm.PrivacyBudget(10.0, 1e-3)
    with pytest.raises(TypeError, match=r"^rng must be None \(secure randomness\)"):
        CALLS[name](budget, bad)
    assert budget.remaining == (10.0, 1e-3)


def test_run_plan_still_runs_with_a_good_rng():
    budget = mm.PrivacyBudget(2.0)
    plan = strategy_plan(Wl.prefix(4), Wl.identity(4), 1.0)
    rel = run_plan(plan, HistogramSource([0, 1, 1, 3]), budget=budget, rng=np.random.default_rng(0))
    assert rel.answers.shape == (4,) and budget.remaining == (1.0, 0.0)
