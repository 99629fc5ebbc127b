"""Rank candidate strategies for a workload: the fixed classics and the optimisers.

Every figure is analytic (:func:`matmech.compare.evaluate`); nothing touches data.
Candidates: the identity, the hierarchical strategy (branching chosen by exact error, with
and without the root), the Haar wavelet (all from :func:`matmech.compare.fixed_family`, the
list ``matmech compare`` shows), the workload itself, and :func:`matmech.optimize`.
On a multi-attribute (Kronecker) domain each fixed candidate is a Kronecker product of
per-attribute strategies, the hierarchical branching and the best fixed 1-D strategy being
chosen attribute by attribute. A candidate that cannot answer the workload, or is too big to
evaluate, is skipped with the reason recorded, never raised.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from matmech import strategies as S
from matmech.advisor.compare import distinct, evaluate, fixed_family
from matmech.error import error_figures, lower_bound
from matmech.privacy.params import NEIGHBORS, check_privacy_params
from matmech.linalg.linop import Kron, LinOp, Scaled, VStack, as_linop
from matmech.optimizers.marginals import MarginalStrategy, kron_blocks, marginal_workload
from matmech.optimizers.blas import blas_threads
from matmech.optimizers.dispatch import optimize

__all__ = ["advise", "Advice", "Candidate", "CANDIDATES"]

#: Candidate families, in the order they are evaluated.
CANDIDATES = ("identity", "hierarchical", "haar", "workload", "optimized")
#: Branchings tried for hierarchical strategies (those with b ≥ n are the identity).
BRANCHINGS = tuple(range(2, 65))
#: Above this many cells per attribute only branchings giving block-spectral trees (nested
#: aligned blocks, error in closed form) are tried: an irregular tree's exact error needs a
#: dense pseudo-inverse (0.02 s at n = 256, 0.7 s at n = 1024, per branching).
DENSE_TREE_LIMIT = 128
#: Branchings tried when no branching gives a block-spectral tree (n with no suitable factors).
FALLBACK_BRANCHINGS = (2, 16)


@dataclass(frozen=True)
class Candidate:
    """One ranked (or skipped) strategy; errors in squared counts, RMSE in counts."""

    name: str
    params: MappingProxyType
    sensitivity: float | None
    error: float | None
    rmse: float | None
    max_variance: float | None
    ratio: float | None
    seconds: float
    strategy: LinOp | None = field(default=None, repr=False, compare=False)
    skipped: str | None = None

    def as_dict(self):
        out = {
            "name": self.name,
            "params": _jsonable(dict(self.params)),
            "sensitivity": self.sensitivity,
            "total_error": self.error,
            "rmse": self.rmse,
            "max_variance": self.max_variance,
            "ratio_to_lower_bound": self.ratio,
            "seconds": self.seconds,
        }
        if self.skipped is not None:
            out["skipped"] = self.skipped
        return out


@dataclass(frozen=True)
class Advice:
    """Ranked candidates (best first), the skipped ones with reasons, and the context."""

    rows: tuple
    skipped: tuple
    eps: float
    delta: float
    lower_bound: float | None
    queries: int
    cells: int
    neighbors: str = "add_remove"

    @property
    def best(self):
        """The strategy (a LinOp) with the lowest total error."""
        return self.rows[0].strategy

    @property
    def best_row(self):
        return self.rows[0]

    def plot(self, **kwargs):
        """Per-query RMSE bars of the candidates with the lower bound (needs matplotlib); see :func:`matmech.plot.plot_advice`."""
        from matmech.plot import plot_advice

        return plot_advice(self, **kwargs)

    def to_dict(self):
        return {
            "eps": self.eps,
            "delta": self.delta,
            "neighbors": self.neighbors,
            "noise": "laplace (L1)" if self.delta == 0 else "gaussian (L2)",
            "queries": self.queries,
            "cells": self.cells,
            "lower_bound": self.lower_bound,
            "lower_bound_rmse": None if self.lower_bound is None else math.sqrt(self.lower_bound / self.queries),
            "best": self.rows[0].name if self.rows else None,
            "ranked": [r.as_dict() for r in self.rows],
            "skipped": [{"name": r.name, "reason": r.skipped} for r in self.skipped],
        }

    def to_json(self, indent=2):
        return json.dumps(self.to_dict(), indent=indent)

    def table(self):
        """A plain-text table, best first, with the lower bound and the skipped candidates."""
        head = ("#", "strategy", "parameters", "sensitivity", "total error", "RMSE/query", "max variance", "error/bound", "seconds")
        lines = [head]
        for i, r in enumerate(self.rows, 1):
            lines.append(
                (
                    str(i),
                    r.name,
                    _short_params(r.params),
                    f"{r.sensitivity:.4g}",
                    f"{r.error:.4e}",
                    f"{r.rmse:.4f}",
                    "-" if r.max_variance is None else f"{r.max_variance:.4g}",
                    "-" if r.ratio is None else f"{r.ratio:.3f}",
                    f"{r.seconds:.2f}",
                )
            )
        widths = [max(len(row[i]) for row in lines) for i in range(len(head))]

        def fmt(row):
            return "  ".join(c.ljust(w) if i in (1, 2) else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))

        model = f"eps={self.eps:g}, " + ("pure eps-DP (Laplace, L1 sensitivity)" if self.delta == 0 else f"delta={self.delta:g} (Gaussian, L2 sensitivity)")
        out = [f"{self.queries:,} queries over {self.cells:,} cells; {model}", fmt(lines[0]), "  ".join("-" * w for w in widths)]
        out += [fmt(row) for row in lines[1:]]
        if self.lower_bound is not None:
            out.append(f"SVD lower bound (Li & Miklau 2013): total {self.lower_bound:.4e}, RMSE/query {math.sqrt(self.lower_bound / self.queries):.4f}")
        for r in self.skipped:
            out.append(f"skipped {r.name}: {r.skipped}")
        return "\n".join(out)


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return repr(x)


def _short_params(params):
    items = []
    for k, v in params.items():
        if k in ("starts", "history", "theta", "factors_detail"):
            continue
        if isinstance(v, float):
            v = f"{v:.3g}"
        elif isinstance(v, (list, tuple)) and len(str(v)) > 40:
            v = str(v)[:37] + "..."
        items.append(f"{k}={v}")
    return ", ".join(items)


# -- candidate construction ---------------------------------------------------------------------


def _attributes(W):
    """Per-attribute effective 1-D workloads [(n_i, workload_i)] for a Kronecker/union W, else None."""
    blocks = kron_blocks(W)
    if blocks is None:
        return None
    d = len(blocks[0][1])
    out = []
    for i in range(d):
        parts, weights = [], []
        for w2, fs in blocks:
            parts.append(fs[i])
            weights.append(math.sqrt(w2))
        eff = parts[0] if len(parts) == 1 else VStack(parts, weights=weights)
        out.append((fs[i].shape[1], eff))
    return out


def _branchings(n):
    """Branchings (below n) whose hierarchies are scored exactly: all of :data:`BRANCHINGS` up
    to :data:`DENSE_TREE_LIMIT` cells, above it those with block-spectral trees, or
    :data:`FALLBACK_BRANCHINGS` when there is none."""
    small = [b for b in BRANCHINGS if b < n]
    if n <= DENSE_TREE_LIMIT:
        return small
    regular = [b for b in small if S.hierarchical(n, b, False).sizes is not None]
    return regular or [b for b in FALLBACK_BRANCHINGS if b < n]


def _unit_error(W, A, delta):
    """sens² · trace term in the units of :func:`error_figures` (ε = 1)."""
    return error_figures(W, A, 1.0, delta, measures=("total",))["total"]


def _fixed_1d(n, W, delta):
    """[(name, params, strategy)] for the 1-D workload W on n cells: the identity, the
    hierarchy with the lowest exact error with and without its root, and Haar."""
    family = distinct(fixed_family(n, _branchings(n)), (n,))
    out = [family[0]]  # the identity
    for root in (True, False):
        best = None
        for name, params, A in family:
            if not name.startswith("hierarchical") or params["root"] != root:
                continue
            try:
                e = _unit_error(W, A, delta)
            except ValueError:
                continue
            if best is None or e < best[0]:
                best = (e, params, A)
        if best is not None:
            out.append(("hierarchical" if root else "hierarchical, no root", best[1], best[2]))
    if n > 1:
        out.append(family[-1])  # Haar
    return out


def _fixed_candidates(W, delta):
    attrs = _attributes(W)
    if attrs is None or len(attrs) == 1:
        n = W.shape[1]
        eff = attrs[0][1] if attrs else W
        return _fixed_1d(n, eff, delta)
    per = [_fixed_1d(n, eff, delta) for n, eff in attrs]
    out = []
    names = [name for name, _, _ in per[0]]
    for name in names:
        chosen = [next(((p, a) for nm, p, a in cands if nm == name), None) for cands in per]
        if any(c is None for c in chosen):
            continue
        params = {"per_attribute": [c[0] for c in chosen]} if any(c[0] for c in chosen) else {}
        out.append((name, params, Kron(*[c[1] for c in chosen])))
    # the best fixed 1-D strategy attribute by attribute (by its own 1-D error)
    picks = []
    for (n, eff), cands in zip(attrs, per):
        scored = []
        for name, params, A in cands:
            try:
                scored.append((_unit_error(eff, A, delta), name, params, A))
            except ValueError:
                continue
        picks.append(min(scored, key=lambda r: r[0]))
    out.append(("best fixed per attribute", {"per_attribute": [dict(name=p[1], **p[2]) for p in picks]}, Kron(*[p[3] for p in picks])))
    return out


def _workload_candidate(W):
    """W itself; a union of marginals as the equal :class:`MarginalStrategy` (same rows, with a
    structured pseudo-inverse)."""
    marg = marginal_workload(W)
    if marg is not None:
        terms, domain = marg
        theta = np.zeros(1 << len(domain))
        for w2, subset in terms:
            theta[sum(1 << i for i in subset)] += math.sqrt(w2)
        if np.all(np.bincount([sum(1 << i for i in s) for _, s in terms], minlength=theta.size) <= 1):
            return MarginalStrategy(domain, theta)
    return W.base if isinstance(W, Scaled) else W


# -- the advisor ---------------------------------------------------------------------------------


def advise(W, eps=1.0, delta=0.0, *, candidates="all", time_budget=None, rng=None, progress=None, neighbors="add_remove"):
    """Rank strategies for W by expected total error under ε-DP (δ = 0) or (ε, δ)-DP.

    ``candidates``: "all", "fixed" (no optimiser) or an iterable of names from
    :data:`CANDIDATES`. ``time_budget`` (seconds) caps the whole call: the optimiser gets
    what is left after the fixed candidates, and candidates not reached are skipped with
    that reason (a time-limited run is not reproducible bit for bit; without a budget the
    result depends only on ``rng``). ``progress``: a callable(fraction, message) or None.
    ``neighbors``: "add_remove" (default) or "substitute" (doubles every sensitivity, so
    the ranking is the same and every error four times larger).
    Returns an :class:`Advice`; ``advice.best`` is the winning strategy.
    """
    eps, delta = check_privacy_params(eps, delta)
    W = as_linop(W)
    if candidates == "all":
        wanted = CANDIDATES
    elif candidates == "fixed":
        wanted = tuple(c for c in CANDIDATES if c != "optimized")
    else:
        if isinstance(candidates, str):
            raise ValueError(f"candidates must be 'all', 'fixed' or an iterable of names from {CANDIDATES}, got {candidates!r}")
        wanted = tuple(candidates)
        unknown = [c for c in wanted if c not in CANDIDATES]
        if unknown or not wanted:
            raise ValueError(f"unknown candidate names {unknown}; choose from {CANDIDATES}")
    if time_budget is not None and not (isinstance(time_budget, (int, float)) and time_budget > 0 and math.isfinite(time_budget)):
        raise ValueError(f"time_budget must be a positive number of seconds, got {time_budget!r}")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a callable(fraction, message) or None, got {progress!r}")
    if neighbors not in NEIGHBORS:
        raise ValueError(f"neighbors must be one of {sorted(NEIGHBORS)}, got {neighbors!r}")
    t_start = time.perf_counter()

    def left():
        return None if time_budget is None else time_budget - (time.perf_counter() - t_start)

    def report(fraction, message):
        if progress is not None:
            progress(min(max(fraction, 0.0), 1.0), message)

    try:
        bound = lower_bound(W, eps, delta, neighbors=neighbors)
    except ValueError:
        bound = None
    rows, skipped = [], []

    def add(name, params, build, seconds=None):
        t0 = time.perf_counter()
        remaining = left()
        if remaining is not None and remaining <= 0:
            skipped.append(_skip(name, params, "time budget exhausted"))
            return
        try:
            A = build() if callable(build) else build
            row = evaluate(W, A, eps, delta, name=name, bound=bound, neighbors=neighbors)
        except (ValueError, MemoryError, np.linalg.LinAlgError) as exc:
            skipped.append(_skip(name, params, str(exc), time.perf_counter() - t0))
            return
        spent = time.perf_counter() - t0 if seconds is None else seconds
        rows.append(Candidate(name, MappingProxyType(dict(params)), row.sensitivity, row.total, row.rmse, row.max_variance, row.ratio_to_bound, spent, A))

    fixed_wanted = [c for c in wanted if c in ("identity", "hierarchical", "haar")]
    n_steps = len(wanted) + 1
    if fixed_wanted:
        report(0.0, "fixed candidates")
        # many small dense solves: one BLAS thread (OpenBLAS threads spinning against other
        # processes made this 10× slower on a busy two-core machine)
        with blas_threads(1):
            try:
                fixed = _fixed_candidates(W, delta)
            except (ValueError, MemoryError) as exc:
                fixed = []
                skipped.append(_skip("fixed candidates", {}, str(exc)))
            for name, params, A in fixed:
                family = "hierarchical" if name.startswith("hierarchical") else name
                if family in fixed_wanted or (name == "best fixed per attribute" and len(fixed_wanted) == 3):
                    add(name, params, A)
    if "workload" in wanted:
        report(len(fixed_wanted) / n_steps, "workload as strategy")
        add("workload", {}, lambda: _workload_candidate(W))
    if "optimized" in wanted:
        report((n_steps - 2) / n_steps, "optimising")
        remaining = left()
        if remaining is not None and remaining <= 0:
            skipped.append(_skip("optimized", {}, "time budget exhausted"))
        else:
            t0 = time.perf_counter()
            try:
                res = optimize(
                    W,
                    eps,
                    delta,
                    "auto",
                    rng=rng,
                    restarts=2 if rng is not None else 1,
                    time_limit=remaining,
                    bound=False,
                    progress=(lambda f, m: report((n_steps - 2 + f) / n_steps, m)) if progress is not None else False,
                )
            except (ValueError, MemoryError, np.linalg.LinAlgError) as exc:
                skipped.append(_skip("optimized", {}, str(exc), time.perf_counter() - t0))
            else:
                params = {"method": res.method}
                if res.gap is not None:
                    params["gap"] = res.gap
                for key in ("p", "init", "iterations", "rounds"):
                    if key in res.params:
                        params[key] = res.params[key]
                # the optimiser's own time; the error evaluation is not charged to the budget
                add(f"optimized ({res.method})", params, res.strategy, seconds=time.perf_counter() - t0)
    report(1.0, "done")
    rows.sort(key=lambda r: r.error)
    if not rows:
        raise ValueError("no candidate strategy can answer this workload: " + "; ".join(f"{r.name}: {r.skipped}" for r in skipped))
    return Advice(tuple(rows), tuple(skipped), eps, delta, bound, W.shape[0], W.shape[1], neighbors)


def _skip(name, params, reason, seconds=0.0):
    return Candidate(name, MappingProxyType(dict(params)), None, None, None, None, None, seconds, None, reason)
