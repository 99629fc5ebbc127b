"""advise(): ranking, the winning strategy, JSON, time budget, bad input, and the candidate
family it shares with compare()."""

import importlib
import json
import math

import numpy as np
import pytest

from matmech import strategies as S
from matmech import workloads as wl
from matmech.advisor.advise import CANDIDATES, Advice, advise
from matmech.advisor.compare import (
    LISTED_BRANCHINGS,
    Row,
    SEARCHED_BRANCHINGS,
    compare,
    family_branchings,
    fixed_candidates,
    fixed_family,
    format_table,
)
from matmech.error import expected_error

DELTA = 1e-6
# the module (matmech.advise is also the name of the function at top level)
advise_module = importlib.import_module("matmech.advisor.advise")

WORKLOADS = {
    "all_range": wl.all_range(64),
    "prefix": wl.prefix(48),
    "union": wl.stack(wl.prefix(32), wl.total(32), weights=[1.0, 3.0]),
    "kron": wl.kron(wl.all_range(16), wl.prefix(8)),
    "marginals": wl.marginals((3, 4, 2, 3), 2),
}


@pytest.fixture(scope="module")
def advice():
    return {
        (name, delta): advise(W, 1.0, delta)
        for name, W in WORKLOADS.items()
        for delta in (0.0, DELTA)
    }


@pytest.mark.parametrize("name", WORKLOADS)
@pytest.mark.parametrize("delta", [0.0, DELTA])
def test_ranked_best_first_and_best_is_the_top_strategy(advice, name, delta):
    a = advice[(name, delta)]
    W = WORKLOADS[name]
    errors = [r.error for r in a.rows]
    assert all(x <= y * (1 + 1e-7) for x, y in zip(errors, errors[1:]))  # ties by kind
    assert a.best_row is a.rows[0]
    strategies = [r for r in a.rows if r.kind == "strategy"]
    assert a.best is (strategies[0].strategy if strategies else None)
    # advise ranks by the continuous figure (it scales as 1/ε² and sits above the SVD bound)
    for r in strategies:
        assert r.error == pytest.approx(
            expected_error(r.recipe["target"].fit, r.strategy, 1.0, delta, noise="continuous"),
            rel=1e-6,
        ), r.name
        assert r.sensitivity == pytest.approx(r.strategy.sensitivity(1 if delta == 0 else 2))
    for r in a.rows:
        assert r.rmse == pytest.approx(math.sqrt(r.error / W.shape[0]))
        assert r.ratio == pytest.approx(r.error / a.lower_bound)
        assert r.ratio >= 1 - 1e-9


@pytest.mark.parametrize("name", WORKLOADS)
@pytest.mark.parametrize("delta", [0.0, DELTA])
def test_optimised_rows_never_worse_than_the_best_fixed_candidate(advice, name, delta):
    a = advice[(name, delta)]
    optimised = [r for r in a.rows if r.family is not None]
    assert optimised and {r.name for r in optimised} <= {
        r.name for r in a.rows if r.name.startswith("optimized") or r.kind == "residual"
    }
    fixed = [r.error for r in a.rows if r.family is None and r.kind == "strategy"]
    # (the residual plan's sensitivity carries a 1e-9 float margin)
    assert optimised[0].error <= min(fixed, default=math.inf) * (1 + 1e-8)
    # and no worse than anything `matmech compare` lists
    rows, _ = compare(WORKLOADS[name], 1.0, delta)
    assert optimised[0].error <= min(r.total for r in rows) * (1 + 1e-8)
    if delta > 0 and "gap" in optimised[0].params:
        assert optimised[0].params["gap"] <= 1e-6


def test_hierarchy_branching_is_chosen_by_exact_error():
    # advise searches a superset of compare's branchings with the same family, so its
    # hierarchical rows are at least as good as every hierarchy compare shows
    W = wl.all_range(64)
    a = advise(W, candidates=["hierarchical"])
    by_name = {r.name: r for r in a.rows}
    rows, _ = compare(W)
    for root, name in ((True, "hierarchical"), (False, "hierarchical, no root")):
        listed = [
            r.total
            for r in rows
            if r.name.startswith("hierarchical") and r.name.endswith("no root") != root
        ]
        assert by_name[name].error <= min(listed) * (1 + 1e-12)
        b = by_name[name].params["branching"]
        assert by_name[name].error == pytest.approx(
            expected_error(W, S.hierarchical(64, b, root), noise="continuous"), rel=1e-12
        )


def test_compare_and_advise_share_the_fixed_family():
    names = [name for name, _, _ in fixed_family(64)]
    assert names[0] == "identity" and names[-1] == "haar"
    assert "hierarchical b=16" in names and "hierarchical b=16, no root" in names
    listed = [name for name, _ in fixed_candidates(wl.prefix(64))]
    assert set(listed) <= set(names) | {"workload"}


def test_one_family_listed_and_searched():
    # up to DENSE_TREE_LIMIT cells advise searches every listed branching (and more);
    # fixed_choice ranks exactly what compare lists
    assert set(LISTED_BRANCHINGS) <= set(family_branchings(64, search=True))
    assert set(family_branchings(40, search=True)) == set(range(2, 40))
    assert family_branchings(5000) == LISTED_BRANCHINGS
    assert set(family_branchings(1024, search=True)) <= set(SEARCHED_BRANCHINGS)
    from matmech.advisor.choice import fixed_choice

    W = wl.prefix(64)
    _, name, _ = fixed_choice(W, 1.0, 0.0, "add_remove")
    rows, _ = compare(W, candidates=fixed_candidates(W, workload=False))
    assert name == rows[0].name
    assert "workload" not in [n for n, _ in fixed_candidates(W, workload=False)]


def test_one_record_and_one_printer(advice):
    a = advice[("prefix", 0.0)]
    rows, _ = compare(WORKLOADS["prefix"])
    assert Row is advise_module.Candidate and type(rows[0]) is type(a.rows[0])
    r = a.rows[0]
    assert (r.error, r.ratio) == (r.total, r.ratio_to_bound)
    with pytest.raises(AttributeError):
        r.total = 0.0
    plain = format_table(rows, bound_rmse=1.0, skipped=[("x", "why")]).splitlines()
    assert (
        plain[0].startswith("strategy")
        and plain[-1] == "skipped x: why"
        and "SVD lower bound" in plain[-2]
    )
    detail = a.table().splitlines()[1]
    assert detail.split()[:3] == ["#", "strategy", "parameters"] and detail.split()[-1] == "seconds"


def test_json_round_trip(advice):
    a = advice[("kron", 0.0)]
    data = json.loads(a.to_json())
    assert set(data) >= {
        "eps",
        "delta",
        "neighbors",
        "noise",
        "queries",
        "cells",
        "lower_bound",
        "lower_bound_rmse",
        "best",
        "ranked",
        "skipped",
    }
    assert data["best"] == a.rows[0].name and data["queries"] == a.queries and data["cells"] == 128
    assert [r["name"] for r in data["ranked"]] == [r.name for r in a.rows]
    row = data["ranked"][0]
    assert set(row) >= {
        "name",
        "params",
        "sensitivity",
        "total_error",
        "rmse",
        "max_variance",
        "ratio_to_lower_bound",
        "seconds",
    }
    assert row["total_error"] == pytest.approx(a.rows[0].error)
    assert data["lower_bound_rmse"] == pytest.approx(math.sqrt(a.lower_bound / a.queries))
    text = a.table()
    assert text.splitlines()[0].startswith(f"{a.queries:,} queries over 128 cells")
    assert "SVD lower bound" in text and a.rows[0].name in text


def test_candidate_selection():
    W = wl.prefix(32)
    fixed = advise(W, candidates="fixed")
    assert not any(r.name.startswith("optimized") for r in fixed.rows)
    only = advise(W, candidates=["identity", "optimized"])
    assert sorted(r.name for r in only.rows) == ["identity", "optimized (pidentity)"]
    assert set(CANDIDATES) == {
        "identity",
        "hierarchical",
        "haar",
        "workload",
        "optimized",
        "tables",
        "split",
    }


class _Clock:
    """A fake perf_counter for advise(): every reading advances one second."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        self.now += 1.0
        return self.now


def test_time_budget_skips_what_it_does_not_reach(monkeypatch):
    monkeypatch.setattr(advise_module, "time", _Clock())
    a = advise(wl.prefix(32), time_budget=0.5)
    reasons = {r.name: r.skipped for r in a.skipped}
    assert a.rows and reasons
    assert reasons["optimized"] == "time budget exhausted"  # the optimiser comes last
    assert not {r.name for r in a.rows} & set(reasons)
    json.loads(a.to_json())  # skipped rows serialise too
    assert "skipped optimized: time budget exhausted" in a.table()


def test_time_budget_caps_the_optimiser(monkeypatch):
    """The optimiser gets what the fixed candidates leave as its own time limit (a structural
    check on the fake clock: no wall-clock assertion, issue 22)."""
    from matmech.advisor import planner

    clock, seen = _Clock(), []
    real = planner.fit_families

    def spy(*args, **kwargs):
        seen.append(kwargs["time_limit"])
        return real(*args, **{**kwargs, "time_limit": None})

    monkeypatch.setattr(advise_module, "time", clock)
    monkeypatch.setattr(planner, "fit_families", spy)
    a = advise(wl.prefix(64), time_budget=100.0)
    assert (
        len(seen) == 1 and 0 < seen[0] < 100.0
    )  # the fixed candidates' (fake) seconds were deducted
    assert a.rows


def test_an_exhausted_budget_still_ranks_the_fixed_candidates():
    """The fixed candidates are always scored (cheap, O(n · levels)), so advice has an answer;
    what the budget cuts is the optimiser (and the workload-as-strategy candidate)."""
    a = advise(wl.prefix(16), time_budget=1e-12)
    assert {r.name.split(",")[0] for r in a.rows} <= {"identity", "hierarchical", "haar"} and a.rows
    assert {r.name: r.skipped for r in a.skipped}.get("optimized") == "time budget exhausted"


def test_substitute_neighbours_scale_every_error_by_four():
    W = wl.prefix(24)
    a, b = advise(W, candidates="fixed"), advise(W, candidates="fixed", neighbors="substitute")
    assert [r.name for r in a.rows] == [r.name for r in b.rows]
    for x, y in zip(a.rows, b.rows):
        assert y.error == pytest.approx(4 * x.error)
    assert b.to_dict()["neighbors"] == "substitute"


def test_restarts_are_reproducible_under_a_seeded_rng():
    W = wl.all_range(48)
    runs = [advise(W, candidates=["optimized"], rng=np.random.default_rng(7)) for _ in range(2)]
    assert runs[0].rows[0].error == runs[1].rows[0].error


def test_progress_reports_fractions():
    seen = []
    advise(wl.prefix(32), progress=lambda f, m: seen.append((f, m)))
    assert seen[-1] == (1.0, "done")
    assert all(0.0 <= f <= 1.0 for f, _ in seen)


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        ({"candidates": ["identity", "nope"]}, ValueError, "nope"),
        ({"candidates": []}, ValueError, "unknown candidate"),
        ({"candidates": "everything"}, ValueError, "everything"),
        ({"eps": 0.0}, ValueError, "eps must be a positive finite number, got 0"),
        ({"eps": -1.0}, ValueError, "got -1"),
        ({"delta": 1.5}, ValueError, "1.5"),
        ({"time_budget": 0}, ValueError, "time_budget must be a positive number of seconds, got 0"),
        ({"time_budget": -2.0}, ValueError, "got -2.0"),
        ({"neighbors": "swap"}, ValueError, "swap"),
        ({"progress": "yes"}, TypeError, "progress"),
    ],
)
def test_bad_input_names_the_value(kwargs, error, text):
    eps = kwargs.pop("eps", 1.0)
    delta = kwargs.pop("delta", 0.0)
    with pytest.raises(error, match=text.replace("(", r"\(").replace(".", r"\.")):
        advise(wl.prefix(8), eps, delta, **kwargs)


def test_advice_is_frozen():
    a = advise(wl.prefix(8), candidates="fixed")
    assert isinstance(a, Advice)
    with pytest.raises(AttributeError):
        a.eps = 2.0
