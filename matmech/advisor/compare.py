"""Compare strategies for a workload analytically (no data is touched).

This module owns three things the advisor shares:

* the fixed candidate family (identity, b-ary hierarchies, Haar): :func:`fixed_family`,
  its branchings (:func:`family_branchings`, one place for which b and why) and the
  per-attribute products :func:`fixed_candidates` that ``matmech compare`` lists;
* the ranking record :class:`Candidate` (also importable as ``Row``) and :func:`evaluate`,
  which fills it from the closed forms of :mod:`matmech.error`;
* the one table printer :func:`format_table` (``matmech compare`` and ``Advice.table()``).

:mod:`matmech.advisor.advise` searches the same family exhaustively (the branching by exact
error) and :func:`matmech.advisor.choice.fixed_choice` ranks the listed members.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from matmech import strategies as S
from matmech.error import MAX_VARIANCE_ROWS, error_figures, lower_bound, sensitivity
from matmech.linalg.intervals import Intervals
from matmech.linalg.linop import Kron, LinOp, VStack
from matmech.privacy.params import check_neighbors, check_privacy_params
from matmech.validate import linear, named_operators
from collections.abc import Mapping
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # names used only in annotations
    import numpy.typing as npt


# -- the fixed candidate family ---------------------------------------------------------------

#: Branchings listed by ``matmech compare`` and ranked by ``fixed_choice``: the powers of
#: two up to 32, one per tree height that matters for domains of up to ~10⁶ cells.
LISTED_BRANCHINGS = (2, 4, 8, 16, 32)
#: Branchings :func:`matmech.advise` searches (by exact error): every b up to twice the
#: largest listed one, so the search is a superset of the list.
SEARCHED_BRANCHINGS = tuple(range(2, 2 * LISTED_BRANCHINGS[-1] + 1))
#: The branching of ``strategy="hierarchical"``: b = 16, recommended with least squares by
#: Qardaji, Yang, Li (VLDB 2013).
DEFAULT_BRANCHING = 16
#: Up to this many cells per attribute every branching of :data:`SEARCHED_BRANCHINGS` is
#: scored; above it those with block-spectral trees (nested aligned blocks, error in closed
#: form, cheapest) and the :data:`CORE_BRANCHINGS`. Any tree's exact error costs
#: O(n · levels) (:class:`~matmech.linalg.spectral.NestedCovariance`), about 10 ms at
#: n = 10⁴ and 0.5 s at n = 10⁶ per branching on a busy two-core machine.
DENSE_TREE_LIMIT = 20_000
#: Branchings always searched above :data:`DENSE_TREE_LIMIT` cells (fewer above
#: :data:`LARGE_TREE_LIMIT`, where each costs ~n·levels).
CORE_BRANCHINGS = (2, 3, 4, 6, 8, 12, 16, 24, 32)
#: Above this many cells only :data:`LARGE_BRANCHINGS` and the block-spectral ones are searched.
LARGE_TREE_LIMIT = 200_000
LARGE_BRANCHINGS = (4, 8, 16, 32)
#: Kept for callers of the previous API: the branchings of a domain without a better choice.
FALLBACK_BRANCHINGS = (2, DEFAULT_BRANCHING)


def family_branchings(n=None, *, search=False):
    """The hierarchy branchings of the fixed family on n cells.

    ``search=False``: :data:`LISTED_BRANCHINGS` (n is ignored; names line up across
    attributes). ``search=True``: the :data:`SEARCHED_BRANCHINGS` below n; above
    :data:`DENSE_TREE_LIMIT` cells only the block-spectral ones and :data:`CORE_BRANCHINGS`
    (above :data:`LARGE_TREE_LIMIT`: :data:`LARGE_BRANCHINGS`).
    """
    if not search:
        return LISTED_BRANCHINGS
    small = [b for b in SEARCHED_BRANCHINGS if b < n]
    if n <= DENSE_TREE_LIMIT:
        return tuple(small)
    core = CORE_BRANCHINGS if n <= LARGE_TREE_LIMIT else LARGE_BRANCHINGS
    regular = [b for b in small if b in core or _nested(n, b)]
    return tuple(regular)


def _nested(n, b):
    """Whether the b-ary hierarchy on n cells has nested aligned blocks (b^L divides n)."""
    s = 1
    while s * b < n:
        s *= b
    return n % s == 0


def domain_of(W):
    """Attribute sizes of W's domain, read from its Kronecker structure (else one attribute)."""
    if isinstance(W, Kron):
        return tuple(f.shape[1] for f in W.factors)
    if isinstance(W, VStack):
        doms = {domain_of(b) for b in W.blocks}
        if len(doms) == 1:
            return doms.pop()
    return (W.shape[1],)


def fixed_family(n, branchings=LISTED_BRANCHINGS):
    """[(name, params, strategy)] of the fixed 1-D strategies on n cells, in a fixed order:
    the identity, the b-ary hierarchy with and without its root for every b in
    ``branchings`` (``params`` = {"branching": b, "root": bool}; for b ≥ n these are the
    leaves with or without a total), and the Haar wavelet. Names and order do not depend
    on n, so the families of several attributes line up."""
    out: list[tuple[str, dict, LinOp]] = [("identity", {}, S.identity(n))]
    for b in branchings:
        for root in (True, False):
            name = f"hierarchical b={b}" + ("" if root else ", no root")
            out.append((name, {"branching": b, "root": root}, S.hierarchical(n, b, root=root)))
    out.append(("haar", {}, S.haar(n)))
    return out


def uniform_sizes(n, b, *, root=True):
    """The block sizes of the b-ary hierarchy on n cells (those of ``hierarchical(n, b,
    root=root).sizes``) when its blocks nest (bˡ divides n), else None."""
    if not _nested(n, b):
        return None
    return tuple(S.level_sizes(n, b, root=root))


def signature(A):
    """A structural key: equal keys mean equal matrices (used to drop repeated candidates);
    a uniform hierarchy's is its block sizes (:func:`uniform_sizes`)."""
    if isinstance(A, Kron):
        return tuple(signature(f) for f in A.factors)
    sizes = getattr(A, "sizes", None)
    if sizes is not None and isinstance(A, Intervals):
        return ("sizes", tuple(sizes))
    if isinstance(A, Intervals):
        lo, hi = A.bounds()
        return (A.n, lo.tobytes(), hi.tobytes())
    return (type(A).__name__, A.shape)


def distinct(candidates, domain):
    """The candidates (tuples whose last item is the strategy) without the hierarchies equal
    to an earlier candidate or to the identity (the leaves alone) on ``domain``."""
    leaves = [S.hierarchical(d, max(d, 2), root=False) for d in domain]
    seen, out = {signature(leaves[0] if len(domain) == 1 else Kron(*leaves))}, []
    for cand in candidates:
        name, A = cand[0], cand[-1]
        key = signature(A) if name.startswith("hierarchical") else name
        if key not in seen:
            seen.add(key)
            out.append(cand)
    return out


def fixed_candidates(W, *, branchings=LISTED_BRANCHINGS, workload=True):
    """[(name, strategy)]: identity, hierarchical b (with/without root), Haar, and W itself
    unless ``workload=False``.

    On a multi-attribute domain each candidate is the Kronecker product of the 1-D
    strategy of the same name (:func:`fixed_family`) on every attribute. Hierarchies that
    coincide with an earlier candidate (b at least the attribute size) are left out.
    """
    domain = domain_of(W)
    families = [fixed_family(d, branchings) for d in domain]
    out = []
    for k, (name, _, A) in enumerate(families[0]):
        out.append((name, A if len(domain) == 1 else S.kron(*[f[k][2] for f in families])))
    return [*distinct(out, domain), *([("workload", W)] if workload else [])]


# -- the ranking record ------------------------------------------------------------------------


def _frozen(params):
    return params if isinstance(params, MappingProxyType) else MappingProxyType(dict(params or {}))


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One ranked (or skipped) strategy; errors in squared counts, RMSE in counts.

    ``total`` is the expected total squared error (alias ``error``), ``ratio_to_bound`` its
    ratio to the SVD lower bound (alias ``ratio``); a skipped candidate has ``skipped`` (the
    reason) and no figures.
    """

    name: str
    sensitivity: float | None = None
    total: float | None = None
    rmse: float | None = None
    max_variance: float | None = None
    ratio_to_bound: float | None = None
    seconds: float = 0.0
    strategy: LinOp | None = field(default=None, repr=False, compare=False)
    params: Mapping = field(default_factory=lambda: MappingProxyType({}))
    skipped: str | None = None
    #: What a release runs for this row (:mod:`matmech.advisor.planner`): ``"strategy"``
    #: (``strategy`` measured on the histogram of W's support), ``"residual"`` (the tables
    #: route's residual plan), ``"gmarginal"`` (a generalised marginal strategy measured from
    #: marginal tables) or ``"split"`` (W in parts, the budget divided between them).
    kind: str = "strategy"
    #: The optimiser family the row comes from (None: a fixed candidate, W itself, a split).
    family: str | None = None
    #: Why the row is what it is, in one sentence (the planner's reason).
    reason: str = ""
    #: What a release needs to build the row's plan (:func:`matmech.plans.planned.build_plan`):
    #: the workload read for planning (``"target"``), the note, the parts of a split, ...;
    #: empty for a row only ranked (``matmech compare``).
    recipe: Mapping = field(default_factory=lambda: MappingProxyType({}), repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "params", _frozen(self.params))

    @property
    def error(self):
        """Expected total squared error (same as ``total``)."""
        return self.total

    @property
    def ratio(self):
        """Total error over the SVD lower bound (same as ``ratio_to_bound``)."""
        return self.ratio_to_bound

    def as_dict(self):
        """The figures as JSON-ready values (no strategy; ``skipped`` only when set)."""
        out = {
            "name": self.name,
            "params": _jsonable(dict(self.params)),
            "sensitivity": self.sensitivity,
            "total": self.total,
            "rmse": self.rmse,
            "max_variance": self.max_variance,
            "ratio_to_bound": self.ratio_to_bound,
            "seconds": self.seconds,
            "kind": self.kind,
            "family": self.family,
            "reason": self.reason,
        }
        if self.skipped is not None:
            out["skipped"] = self.skipped
        return out


#: The name :func:`compare` used for its rows.
Row = Candidate


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return repr(x)


# -- scoring -------------------------------------------------------------------------------------


#: Above this many workload rows :func:`evaluate` leaves the largest per-query variance out
#: (None): it is computed row by row (10 s for the 3.4·10⁷ ranges of n = 8192).
MAX_RANKED_MAX_ROWS = 4_000_000


def evaluate(
    W,
    A,
    eps=1.0,
    delta=0.0,
    *,
    name="strategy",
    bound=None,
    neighbors="add_remove",
    params=None,
    max_variance=True,
):
    """The analytic figures of strategy A on W as a :class:`Candidate` (``max_variance``
    None above :data:`MAX_RANKED_MAX_ROWS` rows, or when not asked for)."""
    t0 = time.perf_counter()
    # the largest per-query variance goes row by row: left out (None) for very many rows
    measures = (
        ("total", "rmse", "max")
        if max_variance and W.shape[0] <= MAX_RANKED_MAX_ROWS
        else ("total", "rmse")
    )
    # continuous noise: the figures scale as 1/ε² and sit above the SVD bound, which the ranking uses
    fig = error_figures(
        W, A, eps, delta, measures=measures, neighbors=neighbors, noise="continuous"
    )
    fig.setdefault("max", None)
    total = fig["total"]
    return Candidate(
        name=name,
        params=params,
        sensitivity=sensitivity(A, 1 if delta == 0 else 2, neighbors),
        total=total,
        rmse=fig["rmse"],
        max_variance=fig["max"],
        ratio_to_bound=total / bound if bound else None,
        seconds=time.perf_counter() - t0,
        strategy=A,
    )


def compare(
    W: LinOp | npt.ArrayLike,
    eps: float = 1.0,
    delta: float = 0.0,
    *,
    candidates: Sequence | None = None,
    neighbors: str = "add_remove",
) -> tuple[list, list]:
    """Rows for every candidate strategy, best (lowest total error) first, and the skipped ones.

    Returns ``(rows, skipped)``; ``skipped`` lists ``(name, reason)`` for candidates that
    cannot answer W or are too large for an exact figure.

    Parameters
    ----------
    W, eps, delta : LinOp or array_like, float, float
        The workload, ε (default 1.0) and δ (default 0.0), as :func:`~matmech.error.expected_error`.
    candidates : list or tuple of (name, LinOp), optional
        Strategies to rank instead of the fixed family (identity, hierarchies, Haar, W).
    neighbors : {"add_remove", "substitute"}, default "add_remove"
        The neighbouring relation.

    Returns
    -------
    rows : list
        One ranking record per candidate (``name``, ``sensitivity``, ``total``, ``rmse``, ...),
        best first.
    skipped : list of (str, str)
        The candidates that could not be scored, with the reason.

    Raises
    ------
    ValueError
        ε/δ out of range or an unknown ``neighbors``.
    TypeError
        ``candidates`` not a list or tuple, or W not a matrix or operator.

    Examples
    --------
    >>> from matmech import workloads as W
    >>> rows, skipped = compare(W.prefix(8), 1.0)
    >>> rows[0].name, skipped
    ('identity', [])
    """
    (eps, delta), _, W = (
        check_privacy_params(eps, delta),
        check_neighbors(neighbors),
        linear(W, "W"),
    )  # bad input: refused up front
    candidates = (
        fixed_candidates(W) if candidates is None else named_operators(candidates, "candidates")
    )
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


# -- the table printer -----------------------------------------------------------------------------


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


def _opt(x, spec):
    return "-" if x is None else format(x, spec)


#: (heading, cell(rank, row), left-aligned, shown only with detail=True)
_COLUMNS = (
    ("#", lambda i, r: str(i), False, True),
    ("strategy", lambda i, r: r.name, True, False),
    ("parameters", lambda i, r: _short_params(r.params), True, True),
    ("sensitivity", lambda i, r: _opt(r.sensitivity, ".4g"), False, False),
    ("total error", lambda i, r: f"{r.total:.4e}", False, False),
    ("RMSE/query", lambda i, r: f"{r.rmse:.4f}", False, False),
    ("max variance", lambda i, r: _opt(r.max_variance, ".4g"), False, False),
    ("error/bound", lambda i, r: _opt(r.ratio_to_bound, ".3f"), False, False),
    ("seconds", lambda i, r: f"{r.seconds:.2f}", False, True),
)


def format_table(rows, *, bound_rmse=None, bound_total=None, skipped=(), detail=False):
    """A plain-text table of ranked rows (best first), then the SVD lower bound and one
    ``skipped NAME: REASON`` line per ``(name, reason)`` in ``skipped``.

    ``detail``: also the rank, parameters and seconds columns (``Advice.table()``).
    """
    cols = [c for c in _COLUMNS if detail or not c[3]]
    lines = [tuple(c[0] for c in cols)]
    lines += [tuple(c[1](i, r) for c in cols) for i, r in enumerate(rows, 1)]
    widths = [max(len(line[k]) for line in lines) for k in range(len(cols))]

    def fmt(line):
        return "  ".join(s.ljust(w) if c[2] else s.rjust(w) for s, w, c in zip(line, widths, cols))

    out = [fmt(lines[0]), "  ".join("-" * w for w in widths), *map(fmt, lines[1:])]
    if bound_rmse is not None or bound_total is not None:
        parts = ([] if bound_total is None else [f"total {bound_total:.4e}"]) + (
            [] if bound_rmse is None else [f"RMSE/query {bound_rmse:.4f}"]
        )
        out.append("SVD lower bound (Li & Miklau 2013): " + ", ".join(parts))
    out += [f"skipped {name}: {why}" for name, why in skipped]
    return "\n".join(out)
