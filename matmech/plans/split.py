"""A workload measured in parts, the budget divided between them: one plan, one spend.

A union W = [W₁; …; W_k] (blocks of a stack, in any grouping) can be answered part by part:
part i is measured by its own plan (a strategy on the histogram of its support, the residual
basis from marginal tables, a generalised marginal strategy, ...) with a share of the budget,
and answered by that plan's own estimator. :class:`SplitPlan` is those parts as one
:class:`~matmech.plans.plan.Plan`, so :func:`~matmech.run.runner.run_plan` reads every
part's tables once, runs every part's data checks before anything is spent, charges the
whole (ε, δ) once, and only then draws, part after part.

Composition (what the one charge covers): under pure ε the parts' ε add up (basic
composition; the shares are decimals whose exact sum is at most ε,
:func:`matmech.advisor.split.laplace_shares`); under (ε, δ) every part is a discrete Gaussian
measurement, ρ-zCDP with ρ = Δ₂²/(2σ²), zCDP composes by adding ρ (Bun and Steinke, TCC
2016), and the parts' ρ add up to at most the ρ of the one Gaussian calibration of (ε, δ)
(:func:`matmech.advisor.split.gaussian_shares`), which the conversion of Canonne, Kamath and Steinke (2020) turns
into (ε, δ)-DP: exactly the guarantee of a single Gaussian measurement at (ε, δ).

Each answer is its part's estimate (its part's generalised least squares), with that part's
exact variance; the answers are returned in W's row order. The release's records are every
part's records, each marked with its ``event["part"]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import numpy as np

from matmech.advisor.split import rho_of
from matmech.plans.plan import Draws, Estimate
from matmech.privacy.confidence import IntervalLaw
from matmech.privacy.events import ApproxDP, Concentrated
from matmech.privacy.params import exact


@dataclass(frozen=True, eq=False)
class Part:
    """One part of a split: its ``plan`` (over the same attribute sizes as the split) and the
    ``rows`` of W it answers (indices into W's rows, in the order of the plan's answers)."""

    plan: Any
    rows: np.ndarray = field(repr=False)
    label: str = ""


class _PartsLaw:
    """The answers' interval law: each part's own law (its release's), in W's row order."""

    def __init__(self, releases, rows, m):
        self.releases, self.rows, self.m = releases, rows, m

    def intervals(self, level, std):
        half, cov = np.empty(self.m), np.empty(self.m)
        how = np.empty(self.m, dtype=object)
        for rel, rows in zip(self.releases, self.rows):
            law = rel.interval_law(level)
            half[rows], cov[rows], how[rows] = law.half, law.coverage, law.method
        return IntervalLaw(level, half, cov, how.astype(str))


@dataclass(frozen=True, eq=False)
class SplitPlan:
    """W answered in :class:`Part` s measured separately (:class:`~matmech.plans.plan.Plan`);
    ``eps``/``delta`` the whole charge, ``shares`` each part's (ε_i, δ_i)."""

    workload: Any = field(repr=False)
    parts: tuple
    eps: float
    delta: float
    neighbors: str
    shares: tuple
    note: str = ""

    @property
    def events(self) -> tuple:
        """What the one charge covers (module docstring): pure ε the whole ε (the parts'
        shares add up to at most it); (ε, δ) the ρ of the one Gaussian calibration of (ε, δ),
        which the parts' ρ add up to at most, as one zCDP event calibrated to (ε, δ)."""
        if self.delta == 0:
            return (ApproxDP(self.eps, 0.0),)
        return (Concentrated(rho_of(self.eps, self.delta), eps=self.eps, delta=self.delta),)

    @property
    def what(self) -> str:
        return f"release {self.workload.shape[0]} queries in {len(self.parts)} parts (split)"

    @property
    def sizes(self) -> tuple:
        return tuple(self.parts[0].plan.sizes)

    @property
    def subsets(self) -> tuple:
        seen: dict = {}
        for p in self.parts:
            for s in p.plan.subsets:
                seen.setdefault(tuple(s), None)
        return tuple(seen)

    def check(self, tables):
        return tuple(
            p.plan.check({s: tables[tuple(s)] for s in p.plan.subsets}) for p in self.parts
        )

    def draw(self, checked, *, rng) -> Draws:
        draws = tuple(p.plan.draw(c, rng=rng) for p, c in zip(self.parts, checked))
        records = tuple(
            replace(r, event={**r.event, "part": i, "plan": "split"})
            for i, d in enumerate(draws)
            for r in d.records
        )
        return Draws(records)

    def estimate(self, draws: Draws) -> Estimate:
        from matmech.results.release import (  # post-processing: each part's own release record
            Release,
        )

        m = self.workload.shape[0]
        answers, var = np.empty(m), np.empty(m)
        releases, parts = [], []
        for i, p in enumerate(self.parts):
            # each part estimated from its own records (``event["part"]``), never another's
            d = Draws(tuple(r for r in draws.records if r.event["part"] == i))
            est = p.plan.estimate(d)
            answers[p.rows], var[p.rows] = est.answers, est.std**2
            fields = {
                "strategy": None,
                "strategy_name": "",
                "strategy_note": "",
                "measurement": None,
                "estimate": None,
                "measurements": d.records,
                **est.fields,
            }
            releases.append(
                Release(
                    answers=est.answers,
                    std=est.std,
                    expected_error=est.expected_error,
                    workload=p.plan.workload,
                    eps=self.shares[i][0],
                    delta=self.shares[i][1],
                    neighbors=self.neighbors,
                    budget_remaining=None,
                    **fields,
                )
            )
            parts.append(
                {
                    "part": i,
                    "label": p.label,
                    "rows": int(p.rows.size),
                    "eps": self.shares[i][0],
                    "delta": self.shares[i][1],
                    "strategy": fields["strategy_name"],
                    "note": fields["strategy_note"],
                    "expected_error": est.expected_error,
                }
            )
        measured = {
            "strategy": {"type": "split", "parts": parts},
            "noise": {
                "parts": [{"part": q["part"], "eps": q["eps"], "delta": q["delta"]} for q in parts]
            },
        }
        fields = dict(
            strategy_name="split",
            strategy_note=self.note,
            measured=MappingProxyType(measured),
            noise_law=_PartsLaw(tuple(releases), tuple(p.rows for p in self.parts), m),
        )
        return Estimate.of_variances(answers, var, fields)


def split_plan(W, parts, eps, delta, *, neighbors, shares, note="") -> SplitPlan:
    """The :class:`SplitPlan` of W from its ``parts`` (:class:`Part` s over one set of
    attribute sizes whose rows cover W's rows once each) and their ``shares`` (ε_i, δ_i);
    ValueError for parts that do not fit (data-independent)."""
    parts = tuple(parts)
    if len(parts) < 1 or len(shares) != len(parts):
        raise ValueError(
            f"a split needs one share per part, got {len(parts)} parts and {len(shares)} shares"
        )
    sizes = {tuple(p.plan.sizes) for p in parts}
    if len(sizes) != 1:
        raise ValueError(
            f"the parts of a split read tables over different attribute sizes: {sorted(sizes)}"
        )
    rows = np.concatenate([np.asarray(p.rows, dtype=np.int64) for p in parts])
    if rows.size != W.shape[0] or not np.array_equal(np.sort(rows), np.arange(W.shape[0])):
        raise ValueError("the parts of a split must answer every row of W exactly once")
    if delta == 0 and sum(exact(s[0]) for s in shares) > exact(eps):
        raise ValueError(f"the parts' eps {[s[0] for s in shares]} add up to more than eps={eps!r}")
    if delta > 0 and (
        any(s[1] != delta for s in shares)
        or sum(rho_of(s[0], delta) for s in shares) > rho_of(eps, delta)
    ):
        raise ValueError("the parts' zCDP rho add up to more than the calibration of (eps, delta)")
    for p, (e, d) in zip(parts, shares):
        if (p.plan.eps, p.plan.delta) != (e, d):
            raise ValueError("each part's plan must be calibrated at its own share")
    return SplitPlan(W, parts, float(eps), float(delta), neighbors, tuple(shares), note)
