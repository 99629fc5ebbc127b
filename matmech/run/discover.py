"""Categories discovered privately: which values of a column to declare, under (ε, δ)-DP.

A :class:`~matmech.io.domain.Domain` must be declared, never read off the data: the set of
values present is itself private (one record can add a value). When the curator cannot list
a column's values (16 carriers, 105 destinations), the *threshold mechanism* of differentially
private partition selection (Desfontaines, Voss, Gipson, Mandayam, "Differentially private
partition selection", PoPETs 2022, §3; Korolova et al. 2009) finds them:

* count the records per distinct value v (each record adds 1 to exactly one count, so under
  add/remove neighbours the counts of the values present in both datasets change by at most
  1 in total: L1 sensitivity 1);
* add exact discrete Laplace noise Z_v with scale t = 1/ε (Canonne, Kamath, Steinke, NeurIPS
  2020, Alg. 2; :func:`matmech.privacy.noise.discrete_laplace`) to every count;
* release the values whose noisy count reaches the threshold τ, never the counts.

A value held by a single record is released only if 1 + Z ≥ τ. For the discrete Laplace,
P[Z ≥ k] = e^{−k/t} / (1 + e^{−1/t}) (k ≥ 1); τ is the smallest integer with
P[Z ≥ τ − 1] ≤ δ (:func:`threshold`). Then the release is (ε, δ)-DP: the ε of the Laplace
mechanism on the shared values, δ for the value only one dataset has (Desfontaines et al.,
Lemma 2 for the Laplace variant). Only add/remove neighbours are supported (a substitution
moves a record between two values: twice the sensitivity and two values that may appear).

The budget is charged, with (ε, δ), after every data-independent check and before the
first noise draw, and every check that can fail runs before it; values are strings trimmed
of :data:`~matmech.io.attribute.WHITESPACE` as every engine trims them, missing and empty
values are not candidates,
and the released values are sorted (their order tells nothing about the counts). The
mechanism is a :class:`~matmech.plans.discovery.DiscoveryPlan` run by
:func:`~matmech.run.runner.run_plan` (the one spend protocol, issue 34).
"""

from __future__ import annotations

import math
from fractions import Fraction

from matmech.io.domain import categories
from matmech.plans.discovery import Discovery, DiscoveryPlan
from matmech.privacy import noise
from matmech.privacy.budget import check_budget, privacy_target
from matmech.privacy.params import check_privacy_params
from matmech.run.runner import run_plan


#: Denominator of the noise scale: t = ⌈2¹⁶/ε⌉ / 2¹⁶ is used exactly by the sampler.
_SCALE_BITS = 16


def _scale(eps: float) -> Fraction:
    """t ≥ 1/ε on a 2⁻¹⁶ grid (rounded up: more noise, never less privacy)."""
    q = 1 << _SCALE_BITS
    return Fraction(math.ceil(Fraction(q) / Fraction(eps)), q)


def release_probability(k: int, scale) -> float:
    """P[Z ≥ k] for Z discrete Laplace with P[z] ∝ e^{−|z|/t} (k ≥ 1): e^{−k/t} / (1 + e^{−1/t})."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    t = float(scale)
    return math.exp(-k / t) / (1.0 + math.exp(-1.0 / t))


def threshold(eps: float, delta: float) -> tuple[int, float]:
    """(τ, t): the smallest integer threshold τ ≥ 2 with P[1 + Z ≥ τ] ≤ δ for the scale
    t = 1/ε (rounded up to the sampler's grid)."""
    eps, delta = check_privacy_params(eps, delta)
    if delta <= 0:
        raise ValueError(
            "partition selection needs delta > 0: the values present are only hidden with probability 1 - delta"
        )
    t = _scale(eps)
    tf = float(t)
    k = max(1, math.ceil(tf * math.log(1.0 / (delta * (1.0 + math.exp(-1.0 / tf))))))
    while release_probability(k, tf) > delta * (1.0 - 1e-12):  # float margin: err towards privacy
        k += 1
    while k > 1 and release_probability(k - 1, tf) <= delta * (1.0 - 1e-12):
        k -= 1
    return k + 1, tf


def discover_categories(
    source,
    column: str,
    eps: float | None = None,
    delta: float | None = None,
    *,
    name: str | None = None,
    budget=None,
    rng=None,
    other: str | None = "other",
    encoding: str = "utf-8",
    delimiter: str | None = None,
) -> Discovery:
    """The values of ``column`` released by the threshold mechanism under (ε, δ)-DP
    (add/remove neighbours; see the module docstring) → :class:`Discovery`.

    ``source``: a DataFrame, an Arrow table, a mapping of columns, or a CSV/Parquet path.
    ``name``: the attribute's name (default the column). ``other``: the label of an extra cell
    for every value not released (policy ``"other"``; None: such records are errors when the
    attribute is applied, policy ``"error"``). ``budget`` is charged the threshold event
    (ε, δ) (:class:`~matmech.privacy.events.Threshold`: no zCDP ρ, composed by sums) after
    every check and before the first draw; ``eps`` and ``delta`` left out, ``budget`` must be
    a share of an (ε, δ) total split under the ``"basic"`` accountant, whose (ε, δ) the
    discovery takes (a share in ρ cannot pay for a mechanism without ρ); ``rng`` as in
    :func:`matmech.release`.
    """
    check_budget(budget)
    if eps is None:
        target = privacy_target(None, delta, budget)  # TypeError unless budget is a share
        if target.rho is not None:
            raise ValueError(
                "the threshold mechanism is (eps, delta)-DP with no zCDP rho: a share in rho cannot "
                "pay for it; split the budget under the 'basic' accountant for it, or pass eps and "
                "delta with the budget itself"
            )
        eps, delta = target.eps, target.delta
    eps, delta = check_privacy_params(eps, delta)
    noise.check_rng(rng)  # a bad rng is refused first, before the other arguments
    if not isinstance(column, str) or not column:
        raise TypeError(f"column must be a non-empty string, got {column!r}")
    name = column if name is None else name
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty string, got {name!r}")
    if other is not None and (not isinstance(other, str) or not other):
        raise TypeError(f"other must be a non-empty label or None, got {other!r}")
    policy = "other" if other is not None else "error"
    # the attribute built after the spend, declared now with a stand-in value: whatever it
    # refuses (a name, a label) is refused before anything is read or charged
    categories(
        name,
        ["x" if other != "x" else "y"],
        column=column,
        other=other,
        policy=policy,
        missing=policy,
    )
    tau, _ = threshold(eps, delta)
    plan = DiscoveryPlan(
        column,
        name,
        eps,
        delta,
        _scale(eps),
        tau,
        other,
        policy,
        encoding=encoding,
        delimiter=delimiter,
    )
    return run_plan(plan, source, budget=budget, rng=rng)
