"""A statistical tester for pure epsilon-differential privacy (test helper, not library code).

Given a randomised mechanism, two neighbouring inputs D and D' and a few
output events E, run many seeded trials on each input, count how often each
event occurs, and bound the two probabilities with exact Clopper-Pearson
intervals.  eps-DP demands, for every event and both orders,

    P[M(D) in E] <= e^eps * P[M(D') in E].

The auditor *rejects* when, for some event and order,

    lower(P[M(A) in E]) / upper(P[M(B) in E]) > e^eps,

i.e. when the data prove (at the stated confidence) that the privacy loss
exceeds eps.  All one-sided bounds are Bonferroni-corrected over the events,
the two orders and the two bounds of each ratio, so a truly eps-DP mechanism
is rejected with probability at most 1 - confidence.  Accepting proves
nothing by itself; the tests pair every acceptance with a crafted event on
which a violation would be large and a power check on a mechanism whose true
epsilon is known.

This is the approach of Ding, Wang, Wang, Zhang, Kifer ("Detecting
violations of differential privacy", CCS 2018) with the event chosen by hand
from the counterexamples in Lyu, Su, Li (VLDB 2017) instead of searched for.

Usage::

    report = audit(sampler, D, D_prime, events, eps=1.0, trials=20_000, seed=1)
    assert not report.rejected, report.summary()

``sampler(data, n, rng)`` returns n outputs (any sequence or array whose
first axis is the trial); wrap a one-shot ``mechanism(data, rng)`` with
:func:`per_trial`.  Each event maps the batch of outputs to a boolean array
of length n; build them with :func:`where` (a per-output predicate) or
:func:`positions_equal`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from scipy import stats

__all__ = [
    "EventCheck",
    "AuditReport",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "audit",
    "audit_outputs",
    "per_trial",
    "where",
    "positions_equal",
]

Sampler = Callable[[Any, int, np.random.Generator], Sequence[Any]]
Event = Callable[[Sequence[Any]], np.ndarray]


def clopper_pearson_lower(k: int, n: int, alpha: float) -> float:
    """Exact one-sided lower bound: P[p >= bound] >= 1 - alpha (0 when k = 0)."""
    if k <= 0:
        return 0.0
    return float(stats.beta.ppf(alpha, k, n - k + 1))


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """Exact one-sided upper bound: P[p <= bound] >= 1 - alpha (1 when k = n)."""
    if k >= n:
        return 1.0
    return float(stats.beta.ppf(1.0 - alpha, k + 1, n - k))


@dataclass(frozen=True)
class EventCheck:
    """One (event, order) comparison: does P[M(A) in E] exceed e^eps P[M(B) in E]?"""

    event: str
    order: str  # "D/D'" or "D'/D"
    count_a: int
    count_b: int
    trials: int
    lower_a: float
    upper_b: float

    @property
    def eps_lower(self) -> float:
        """A lower confidence bound on the privacy loss shown by this event."""
        if self.lower_a <= 0.0:
            return -math.inf
        return math.log(self.lower_a / self.upper_b)

    @property
    def eps_estimate(self) -> float:
        """Plug-in estimate log(p_A / p_B) (inf when B never hit the event)."""
        if self.count_a == 0:
            return -math.inf
        if self.count_b == 0:
            return math.inf
        return math.log(self.count_a / self.count_b)


@dataclass(frozen=True)
class AuditReport:
    eps: float
    confidence: float
    trials: int
    checks: tuple[EventCheck, ...]

    @property
    def eps_lower(self) -> float:
        """Largest privacy loss proven by any event (at the stated confidence)."""
        return max((c.eps_lower for c in self.checks), default=-math.inf)

    @property
    def rejected(self) -> bool:
        """True when the data prove the mechanism is not eps-DP."""
        return self.eps_lower > self.eps

    def summary(self) -> str:
        lines = [
            f"audit at eps={self.eps:g}, {self.trials} trials per input, "
            f"confidence {self.confidence}: {'REJECTED' if self.rejected else 'accepted'} "
            f"(proven loss >= {self.eps_lower:.3f})"
        ]
        for c in self.checks:
            lines.append(
                f"  {c.event} [{c.order}] counts {c.count_a}/{c.count_b}: "
                f"estimate {c.eps_estimate:.3f}, lower bound {c.eps_lower:.3f}"
            )
        return "\n".join(lines)


def audit(
    sampler: Sampler,
    d: Any,
    d_prime: Any,
    events: Mapping[str, Event],
    *,
    eps: float,
    trials: int,
    seed: int,
    confidence: float = 0.999,
    both_orders: bool = True,
) -> AuditReport:
    """Run ``trials`` seeded trials on D and D' and test every event against e^eps.

    The two inputs get independent child streams of ``np.random.SeedSequence(seed)``,
    so reports are reproducible.
    """
    if not events:
        raise ValueError("give at least one event to test")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials!r}")
    rng_d, rng_dp = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    out_d = sampler(d, trials, rng_d)
    out_dp = sampler(d_prime, trials, rng_dp)
    return audit_outputs(
        out_d, out_dp, events, eps=eps, confidence=confidence, both_orders=both_orders
    )


def audit_outputs(
    out_d: Sequence[Any],
    out_dp: Sequence[Any],
    events: Mapping[str, Event],
    *,
    eps: float,
    confidence: float = 0.999,
    both_orders: bool = True,
) -> AuditReport:
    """The test of :func:`audit` on outputs already sampled (same number on each side).

    Lets one expensive batch of trials be audited at several epsilons.  The
    events must not have been chosen by looking at these outputs.
    """
    if not events:
        raise ValueError("give at least one event to test")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    trials = len(out_d)
    if len(out_dp) != trials:
        raise ValueError(f"need as many outputs for D' as for D, got {len(out_dp)} and {trials}")
    orders = 2 if both_orders else 1
    # Two one-sided bounds per comparison, one comparison per (event, order).
    alpha = (1.0 - confidence) / (2 * orders * len(events))
    checks = []
    for name, event in events.items():
        k_d = _count(event, out_d, trials, name)
        k_dp = _count(event, out_dp, trials, name)
        pairs = [("D/D'", k_d, k_dp)]
        if both_orders:
            pairs.append(("D'/D", k_dp, k_d))
        for order, ka, kb in pairs:
            checks.append(
                EventCheck(
                    event=name,
                    order=order,
                    count_a=ka,
                    count_b=kb,
                    trials=trials,
                    lower_a=clopper_pearson_lower(ka, trials, alpha),
                    upper_b=clopper_pearson_upper(kb, trials, alpha),
                )
            )
    return AuditReport(eps=float(eps), confidence=confidence, trials=trials, checks=tuple(checks))


def _count(event: Event, outputs, trials: int, name: str) -> int:
    hit = np.asarray(event(outputs), dtype=bool)
    if hit.shape != (trials,):
        raise ValueError(f"event {name!r} returned shape {hit.shape}, expected ({trials},)")
    return int(hit.sum())


# --------------------------------------------------------------------------
# Adapters
# --------------------------------------------------------------------------
def per_trial(mechanism: Callable[[Any, np.random.Generator], Any]) -> Sampler:
    """Turn a one-shot ``mechanism(data, rng)`` into a sampler (a Python loop)."""

    def sampler(data, n, rng):
        return [mechanism(data, rng) for _ in range(n)]

    return sampler


def where(predicate: Callable[[Any], bool]) -> Event:
    """An event from a per-output predicate."""

    def event(outputs):
        return np.fromiter((bool(predicate(o)) for o in outputs), dtype=bool, count=len(outputs))

    return event


def positions_equal(positions: Sequence[int]) -> Event:
    """Event "the mechanism reported exactly these positions, in this order".

    Works on outputs with a ``.positions`` attribute (matmech results) or on
    plain tuples of positions.
    """
    target = tuple(int(p) for p in positions)
    return where(lambda o: tuple(getattr(o, "positions", o)) == target)
