"""Compare strategies for a workload analytically (no data is touched).

Each row holds the L_p sensitivity, the expected total squared error, the per-query RMSE,
the largest per-query variance and the ratio of the total error to the SVD lower bound,
all from the closed forms of :mod:`matmech.error`.

This module owns the fixed strategies: :func:`fixed_family` is the one list of 1-D
classics (identity, hierarchies, Haar), :func:`fixed_candidates` their per-attribute
products for ``matmech compare``, and :func:`evaluate` the figures of one strategy.
:mod:`matmech.advise` picks from the same family (the branching by exact error) and
scores with the same :func:`evaluate`.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from matmech import strategies as S
from matmech.error import MAX_VARIANCE_ROWS, error_figures, lower_bound, sensitivity
from matmech.linalg.intervals import Intervals
from matmech.linalg.linop import Kron, LinOp, VStack

__all__ = ["Row", "domain_of", "fixed_family", "distinct", "fixed_candidates", "evaluate", "compare", "format_table"]

#: Branchings tried for hierarchical strategies.
BRANCHINGS = (2, 4, 8, 16, 32)


@dataclass(frozen=True)
class Row:
    """One strategy's analytic figures (variances in squared counts, RMSE in counts)."""

    name: str
    sensitivity: float
    total: float
    rmse: float
    max_variance: float | None
    ratio_to_bound: float | None
    seconds: float
    strategy: LinOp | None = None

    def as_dict(self):
        d = asdict(self)
        d.pop("strategy")
        return d


def domain_of(W):
    """Attribute sizes of W's domain, read from its Kronecker structure (else one attribute)."""
    if isinstance(W, Kron):
        return tuple(f.shape[1] for f in W.factors)
    if isinstance(W, VStack):
        doms = {domain_of(b) for b in W.blocks}
        if len(doms) == 1:
            return doms.pop()
    return (W.shape[1],)


def fixed_family(n, branchings=BRANCHINGS):
    """[(name, params, strategy)] of the fixed 1-D strategies on n cells, in a fixed order:
    the identity, the b-ary hierarchy with and without its root for every b in
    ``branchings`` (``params`` = {"branching": b, "root": bool}; for b ≥ n these are the
    leaves with or without a total), and the Haar wavelet. Names and order do not depend
    on n, so the families of several attributes line up."""
    out = [("identity", {}, S.identity(n))]
    for b in branchings:
        for root in (True, False):
            name = f"hierarchical b={b}" + ("" if root else ", no root")
            out.append((name, {"branching": b, "root": root}, S.hierarchical(n, b, root=root)))
    out.append(("haar", {}, S.haar(n)))
    return out


def _signature(A):
    """A structural key: equal keys mean equal matrices (used to drop repeated candidates)."""
    if isinstance(A, Kron):
        return tuple(_signature(f) for f in A.factors)
    if isinstance(A, Intervals):
        lo, hi = A.bounds()
        return (A.n, lo.tobytes(), hi.tobytes())
    return (type(A).__name__, A.shape)


def distinct(candidates, domain):
    """The candidates (tuples whose last item is the strategy) without the hierarchies equal
    to an earlier candidate or to the identity (the leaves alone) on ``domain``."""
    leaves = [S.hierarchical(d, max(d, 2), root=False) for d in domain]
    seen, out = {_signature(leaves[0] if len(domain) == 1 else Kron(*leaves))}, []
    for cand in candidates:
        name, A = cand[0], cand[-1]
        key = _signature(A) if name.startswith("hierarchical") else name
        if key not in seen:
            seen.add(key)
            out.append(cand)
    return out


def fixed_candidates(W, *, branchings=BRANCHINGS):
    """[(name, strategy)]: identity, hierarchical b (with/without root), Haar, W itself.

    On a multi-attribute domain each candidate is the Kronecker product of the 1-D
    strategy of the same name (:func:`fixed_family`) on every attribute. Hierarchies that
    coincide with an earlier candidate (b at least the attribute size) are left out.
    """
    domain = domain_of(W)
    families = [fixed_family(d, branchings) for d in domain]
    out = []
    for k, (name, _, A) in enumerate(families[0]):
        out.append((name, A if len(domain) == 1 else S.kron(*[f[k][2] for f in families])))
    return [*distinct(out, domain), ("workload", W)]


def evaluate(W, A, eps=1.0, delta=0.0, *, name="strategy", bound=None, neighbors="add_remove"):
    """The analytic figures of strategy A on W as a :class:`Row`."""
    t0 = time.perf_counter()
    fig = error_figures(W, A, eps, delta, neighbors=neighbors)
    total, worst = fig["total"], fig["max"]
    sens = sensitivity(A, 1 if delta == 0 else 2, neighbors)
    return Row(
        name=name,
        sensitivity=sens,
        total=total,
        rmse=fig["rmse"],
        max_variance=worst,
        ratio_to_bound=total / bound if bound else None,
        seconds=time.perf_counter() - t0,
        strategy=A,
    )


def compare(W, eps=1.0, delta=0.0, *, candidates=None, neighbors="add_remove"):
    """Rows for every candidate strategy, best (lowest total error) first, and the skipped ones.

    Returns ``(rows, skipped)``; ``skipped`` lists ``(name, reason)`` for candidates that
    cannot answer W or are too large for an exact figure.
    """
    candidates = fixed_candidates(W) if candidates is None else candidates
    try:
        bound = lower_bound(W, eps, delta, neighbors=neighbors)
    except ValueError:
        bound = None
    rows, skipped = [], []
    for name, A in candidates:
        if name == "workload" and isinstance(W, Intervals) and W.shape[0] > MAX_VARIANCE_ROWS:
            skipped.append((name, f"{W.shape[0]:,} rows"))
            continue
        try:
            rows.append(evaluate(W, A, eps, delta, name=name, bound=bound, neighbors=neighbors))
        except ValueError as exc:
            skipped.append((name, str(exc)))
    rows.sort(key=lambda r: r.total)
    return rows, skipped


def format_table(rows, *, bound_rmse=None):
    """A plain-text table of comparison rows."""
    head = ("strategy", "sensitivity", "total error", "RMSE/query", "max variance", "error/bound")
    lines = [head]
    for r in rows:
        lines.append(
            (
                r.name,
                f"{r.sensitivity:.4g}",
                f"{r.total:.4e}",
                f"{r.rmse:.3f}",
                "-" if r.max_variance is None else f"{r.max_variance:.4g}",
                "-" if r.ratio_to_bound is None else f"{r.ratio_to_bound:.3f}",
            )
        )
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    fmt = lambda row: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))  # noqa: E731
    out = [fmt(lines[0]), "  ".join("-" * w for w in widths), *map(fmt, lines[1:])]
    if bound_rmse is not None:
        out.append(f"SVD lower bound (Li & Miklau 2013): RMSE/query >= {bound_rmse:.3f}")
    return "\n".join(out)
