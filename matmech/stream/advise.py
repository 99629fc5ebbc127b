"""Rank the stream factorizations for a horizon n and an objective, beside the lower bounds.

Every row is exact (σ² units at unit sensitivity, the noise multiplier of the chosen
privacy parameters applied by :func:`matmech.stream.plan.plan_stream`): the mean or max
per-step variance of B·z times Δ(C)², with the SVD bound (mean) and a γ₂ bound (max) of
:mod:`matmech.stream.bounds` beside them. The binary tree with least squares is listed for
comparison; it is not a square factorization and the streaming release does not offer it.
"""

from __future__ import annotations

from dataclasses import dataclass

from matmech.stream.bounds import gamma2_bound, svd_bound, tree_errors
from matmech.stream.factorizations import MAX_DENSE_N, OBJECTIVES, build, check_horizon
from matmech.validate import choice, flag, texts

__all__ = ["StreamAdvice", "StreamChoice", "advise_stream"]


@dataclass(frozen=True)
class StreamChoice:
    """One candidate: its mean and max variance, and numbers of state per step."""

    name: str
    mean: float
    max: float
    state: int
    releasable: bool = True
    note: str = ""


@dataclass(frozen=True)
class StreamAdvice:
    """Candidates ranked for ``objective`` (best first) and the two lower bounds."""

    n: int
    objective: str
    choices: tuple[StreamChoice, ...]
    mean_bound: float
    max_bound: float

    @property
    def best(self) -> StreamChoice:
        return next(c for c in self.choices if c.releasable)


def advise_stream(
    n: int,
    *,
    objective: str = "mean",
    dense: bool | None = None,
    names: tuple[str, ...] = ("sqrt", "blt", "banded", "identity", "prefix"),
) -> StreamAdvice:
    """Rank ``names`` (plus the dense optimum when ``dense``, default n ≤ 1024, and the tree)."""
    n = check_horizon(n)
    choice(objective, "objective", OBJECTIVES)
    names = texts(names, "names")
    if dense is not None:
        flag(dense, "dense")
    if dense is None:
        dense = n <= 1024
    if not names and not dense:
        raise ValueError("names must name at least one factorization (or pass dense=True)")
    if dense and n > MAX_DENSE_N:
        raise ValueError(f"dense=True needs n <= {MAX_DENSE_N}, got n={n}")
    rows = []
    for name in names + (("dense",) if dense else ()):
        f = build(name, n, objective=objective)
        mean, mx = f.errors()
        rows.append(StreamChoice(name, mean, mx, f.memory_per_step()))
    tm, tx, levels = tree_errors(n)
    rows.append(
        StreamChoice(
            "tree+ls", tm, tx, levels, False, "binary tree, online least squares; not a square C"
        )
    )
    key = 0 if objective == "mean" else 1
    rows.sort(key=lambda c: (c.mean, c.max)[key])
    return StreamAdvice(n, objective, tuple(rows), svd_bound(n), gamma2_bound(n))
