"""Private row selection on the factored path (issue 14, item 3): the sparse vector technique,
the exponential mechanism or a free-gap mechanism over the rows of a union of Kronecker
products (e.g. every cell of all 2-way marginals of 100 attributes), then a measurement of the
selected rows only — from marginal tables, never the histogram.

::

    W's terms, select options, ε, δ                          (no data)
      │ check_selection on W's entry range (row sensitivity, monotonic rule, thresholds, c);
      │ the worst case over every selection of at most c rows (sampler range, exact integers,
      │ the advised split of a gap method, threshold="auto"); memory; check_affordable
      ▼
    marginal tables of W's terms, each subset once → W x term by term, in W's row order
      ▼ budget.spend(ε, δ) once, before the first draw
    run_selection (matmech.svt.select: Lyu, Su, Li VLDB 2017; Ding et al. PVLDB 2019) → rows S
      ▼
    each selected row measured itself: row r of term j is w_j·u_r with u_r = ⊗ᵢ (row rᵢ of
    factor i) an integer rank-one Kronecker row, and

        y_r = u_r·x + Z_r,   Z_r ~ discrete Laplace(b), b·ε_m >= Δ₁(U_S)   (δ = 0)
                              Z_r ~ N_ℤ(0, σ²),  σ = gaussian_sigma(ε_m, δ, Δ₂(U_S))  (δ > 0)

    answers w_j·(P y)_r, P = U_S(U_SᵀU_S)⁺U_Sᵀ the least-squares projection (the identity
    when the rows are independent), from the Gram U_S U_Sᵀ of factor rows; covariance
    Var(Z)·(w wᵀ)∘P with the exact discrete variance (Li et al., PODS 2010). For a gap method
    the gaps are combined with these answers by GLS (:mod:`matmech.svt.combine`).

Privacy. The selection is ε_s-DP with the row sensitivity of W (as :func:`matmech.release`).
Given the selection S (a DP output), measuring the k rows U_S with i.i.d. discrete Laplace
noise of scale b >= Δ₁/ε_m, Δ₁ the largest column L1 norm of U_S (times 2 for substitution),
is ε_m-DP on the integer lattice (Canonne, Kamath, Steinke, NeurIPS 2020); with the discrete
Gaussian it is Δ₂²/(2σ²)-zCDP, hence (ε_m, δ)-DP by :func:`~matmech.privacy.calibration.gaussian_sigma`.
Δ_p is found from the factors, never by enumerating the domain: for marginal cells it is the
largest set of pairwise consistent cells (a maximum clique, exact; past a node cap a
colouring bound), otherwise :func:`matmech.linalg.normmax.factored_sensitivity` on the k
rank-one terms (exact by branch and bound, else its certified upper bound, and never more
than the same bound for the whole terms the rows come from). By adaptive composition the
release is (ε_s + ε_m, δ)-DP; the whole (ε, δ) is charged in one spend before the
selection's first draw. Every limit of the measurement (sampler range, exact integers) is
checked before any data for the worst selection (c rows, 2c − 1 for adaptive SVT), so
nothing after the spend can fail or branch on x.

This is the same mechanism as :func:`matmech.release` with ``select=`` and ``strategy="auto"``
on the histogram whenever its advisor measures the selected rows themselves (it does for
pure ε and selected marginal cells); its error bars are exact for the noise drawn. Rows
carry their weight only in the answer (the integer row u_r is what is measured), so the
factors must be integer-valued (identity, total, prefix, 0/1 custom factors).
"""

from __future__ import annotations


import functools
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from matmech.factored.tables import MAX_TABLE_CELLS
from matmech.factored.terms import as_terms
from matmech.linalg.gls import row_space_basis
from matmech.linalg.linop import Dense, Identity, LinOp, Ones
from matmech.linalg.normmax import factored_sensitivity
from matmech.privacy import noise
from matmech.privacy.calibration import gaussian_sigma
from matmech.privacy.measure import SENS_MARGIN, check_counts, check_records, laplace_scale_up
from matmech.privacy.params import NEIGHBORS, rest_of
from matmech.pipeline.plan import Draws, Estimate
from matmech.pipeline.run import run_plan
from matmech.pipeline.selected import NOTHING_SELECTED
from matmech.pipeline.source import as_table_source
from matmech.record import MeasurementRecord, gap_record
from matmech.svt.combine import combine_selection
from matmech.svt.curse import DEFAULT_MARGIN, guard
from matmech.svt.select import (
    SELECTION_METHODS,
    SelectionPlan,
    advised_select_eps,
    check_select_options,
    check_selection,
    declared_calibration,
    run_selection,
    selection_mechanism,
    selection_arguments,
    shown_select_options,
    take_rows,
)

__all__ = [
    "FactoredSelectionPlan",
    "SelectedRowsPlan",
    "plan_factored_selection",
    "release_selected",
    "row_values",
    "rows_sensitivity",
    "row_basis",
    "MEASURE_STRATEGIES",
    "CLIQUE_NODE_CAP",
]

#: The ``strategy`` values a factored release with selection accepts: the selected rows are
#: measured themselves (the choice the advisor makes for selected marginal cells).
MEASURE_STRATEGIES = ("auto", "optimize")

#: Branch-and-bound nodes of the exact sensitivity of selected marginal cells (a maximum
#: clique) before the certified colouring bound is used instead.
CLIQUE_NODE_CAP = 20_000

_EXACT = 2.0**53


class _RowRange(LinOp):
    """W's row count, entry range and largest column norms, from its factors: all that
    :func:`~matmech.svt.select.check_selection` and :func:`~matmech.svt.select.selection_mechanism`
    read (a marginal workload over 10¹⁰⁰ cells has no explicit rows to scan)."""

    def __init__(self, rows, lo, hi, terms):
        self.shape = (int(rows), 1)
        self._range = (float(lo), float(hi))
        self._terms = terms

    def entry_range(self):
        return self._range

    def sensitivity(self, p=1):
        t = self._terms
        if all(fs is None for fs in t.factors):  # marginals: one cell of each term per column
            return float(np.sum(np.abs(t.weights) ** p)) ** (1 / p)
        d = len(t.domain)
        return factored_sensitivity(
            [(abs(w), [_factor(t, j, i) for i in range(d)]) for j, w in enumerate(t.weights)], p
        ).value

    def _matmat(self, x):
        raise TypeError("a row-range stand-in has no entries")

    _rmatmat = _matmat


# -- the data-independent plan ---------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class FactoredSelectionPlan:
    """Everything a factored release with selection decides before it reads data.

    ``subsets[j]``: the attributes where term j is not a total (its marginal table);
    ``offsets``: first row of each term (and the row count last); ``opts``: the checked
    options (``eps`` filled in when advised); ``select``: the keyword arguments of
    :func:`~matmech.svt.select.check_selection` (thresholds resolved); ``sensitivity``,
    ``monotonic``, ``thr``: its results; ``integer_values``: W x is held as exact int64;
    ``worst_sensitivity``: the bound on Δ_p (neighbours factor included) of any selection
    (``max_selected`` rows: c, 2c − 1 for adaptive SVT); ``worst_variance``: the noise variance
    at that bound (each answer's variance is at most w_j² times it); ``memory``: the bytes
    planned; ``mechanism``/``joint_sensitivity``: the selection mechanism
    (:func:`~matmech.svt.select.selection_mechanism`); ``value_bound``: the declared bound on
    abs(W x) (max_records times W's largest abs(entry)) the selection's grid holds."""

    terms: object
    opts: Mapping
    eps: float
    eps_measure: float
    delta: float
    neighbors: str
    max_records: int
    select: Mapping
    sensitivity: float
    monotonic: bool
    thr: np.ndarray | None
    subsets: tuple
    offsets: np.ndarray
    integer_values: bool
    worst_sensitivity: float
    worst_variance: float
    memory: int
    mechanism: str = ""
    joint_sensitivity: float = 0.0
    max_selected: int = 0
    value_bound: float = 0.0

    @property
    def rows(self):
        return int(self.offsets[-1])


def _factor(terms, j, i):
    """Factor i of term j (a marginal workload's terms are identity/total by kind)."""
    fs = terms.factors[j]
    if fs is not None:
        return fs[i]
    return _marginal_factor(terms.domain[i], terms.kinds[j][i])


@functools.lru_cache(maxsize=1024)
def _marginal_factor(n, kind):
    return Identity(n) if kind == "I" else Ones(1, n)


def _term_shape(terms, j, S):
    fs = terms.factors[j]
    return tuple(terms.domain[i] if fs is None else int(fs[i].shape[0]) for i in S)


def _max_abs(f):
    lo, hi = f.entry_range()
    return max(abs(lo), abs(hi))


def _noise_for(sens, eps_m, delta):
    """(kind, scale, variance) of the measurement at sensitivity ``sens`` (neighbours factor
    and margin included): exactly :func:`matmech.privacy.measure.plan_measurement`'s rule for
    an integer strategy (grid 1)."""
    if delta == 0:
        b = laplace_scale_up(eps_m, sens)
        if b > noise.MAX_LAPLACE_SCALE:
            raise ValueError(
                f"the selected rows need a discrete Laplace scale of {b:.4g}, beyond the exact sampler's "
                f"{noise.MAX_LAPLACE_SCALE:.4g}; the measurement's eps={eps_m!r} is too small"
            )
        return "discrete_laplace", b, noise.discrete_laplace_variance(b)
    s = gaussian_sigma(eps_m, delta, sens)
    if s > noise.MAX_SIGMA:
        raise ValueError(
            f"the selected rows need a discrete Gaussian σ of {s:.4g}, beyond the exact sampler's "
            f"{noise.MAX_SIGMA:.4g}; the measurement's eps={eps_m!r} is too small"
        )
    return "discrete_gaussian", s, noise.discrete_gaussian_variance(s)


def _scaled_sens(value, p, neighbors):
    """Δ_p with the neighbours factor; integer L1 norms are exact, an L2 norm gets the margin."""
    s = NEIGHBORS[neighbors] * value
    return s if p == 1 else s * SENS_MARGIN


def _worst_case(terms, offsets, c, p):
    """A certified bound on the largest column p-norm (to the power p for p = 2: squared) of
    ANY c rows of the unweighted terms: the c largest row maxima (each row of term j is at
    most Πᵢ max|factor| per entry, one column), never more than the whole terms' bound."""
    d, k = len(terms.domain), len(terms.kinds)
    if all(fs is None for fs in terms.factors):  # marginals: one cell of each term per column
        maxima = np.ones(k)
    else:
        maxima = np.array(
            [math.prod(_max_abs(_factor(terms, j, i)) for i in range(d)) for j in range(k)]
        )
    counts = np.diff(offsets)
    order = np.argsort(-maxima, kind="stable")
    left, top = c, 0.0
    for j in order.tolist():
        take = min(left, int(counts[j]))
        top += take * maxima[j] ** p
        left -= take
        if left == 0:
            break
    if all(fs is None for fs in terms.factors):
        whole = float(k)
    else:
        whole = (
            factored_sensitivity(
                [(1.0, [_factor(terms, j, i) for i in range(d)]) for j in range(k)], p
            ).value
            ** p
        )
    return min(top, whole), float(maxima.max())


def plan_factored_selection(
    W, eps, delta, *, select, strategy="auto", neighbors="add_remove", max_records, max_memory
):
    """The data-independent part of :func:`release_selected` → :class:`FactoredSelectionPlan`.

    Raises (ValueError/TypeError naming the value) for bad options, a strategy other than
    :data:`MEASURE_STRATEGIES`, non-integer factors, a measurement the exact samplers could
    not make for some selection of c rows, or a plan above ``max_memory`` bytes.
    """
    if not (isinstance(strategy, str) and strategy in MEASURE_STRATEGIES):
        shown = strategy if isinstance(strategy, str) else type(strategy).__name__
        raise ValueError(
            f"with select= the factored release measures the selected rows themselves "
            f"(strategy='auto'); got strategy={shown!r}"
        )
    opts = check_select_options(select, eps)
    terms = as_terms(W, name="W")
    d = len(terms.domain)
    subsets, shapes = [], []
    for j, ks in enumerate(terms.kinds):
        S = tuple(i for i, k in enumerate(ks) if k != "T")
        for i in S:
            f = _factor(terms, j, i)
            if not f.integer_valued():
                raise ValueError(
                    f"term {j} has a non-integer factor on attribute {i} ({type(f).__name__}); the "
                    "factored selection measures the selected rows on the integer lattice and needs "
                    "integer factors (identity, total, prefix, 0/1)"
                )
        subsets.append(S)
        shapes.append(_term_shape(terms, j, S))
    counts = [math.prod(s) for s in shapes]
    offsets = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)
    rows = int(offsets[-1])
    c = opts["c"]
    if isinstance(c, (bool, np.bool_)) or not isinstance(c, numbers.Integral):
        raise TypeError(
            f"c must be a positive integer (the most rows to select), got {type(c).__name__}: {c!r}"
        )
    if c < 1:
        raise ValueError(f"c must be a positive integer (the most rows to select), got {c!r}")
    # memory: one table per distinct subset (the maximal ones counted, the rest summed out of
    # them), W x (and W x unweighted), one threshold per row
    table_cells = 0
    for s in set(subsets):
        cells = math.prod(terms.domain[i] for i in s)
        if cells > MAX_TABLE_CELLS:
            raise ValueError(
                f"the marginal on {s} has {cells:,} cells; at most {MAX_TABLE_CELLS:,} are built"
            )
        table_cells += cells
    need = 8 * table_cells + 8 * 3 * rows
    if need > max_memory:
        raise ValueError(
            f"the factored selection would use about {need / 2**30:.2f} GiB (> max_memory "
            f"{max_memory / 2**30:.2f} GiB): {rows:,} rows and {table_cells:,} table cells"
        )
    # W's entry range from its factors (that of the explicit Kron stack)
    lo = hi = 0.0
    for j, w in enumerate(terms.weights):
        a, b = (
            (0.0, 1.0) if terms.factors[j] is None else (1.0, 1.0)
        )  # a marginal's entries are 0/1
        for i in range(d if terms.factors[j] is not None else 0):
            fl, fh = _factor(terms, j, i).entry_range()
            prods = (a * fl, a * fh, b * fl, b * fh)
            a, b = min(prods), max(prods)
        a, b = min(a, 0.0), max(b, 0.0)
        a, b = (w * a, w * b) if w >= 0 else (w * b, w * a)
        lo, hi = min(lo, a), max(hi, b)
    proxy = _RowRange(rows, lo, hi, terms)
    p = 1 if delta == 0 else 2
    kmax = SELECTION_METHODS[opts["method"]].max_rows(
        c
    )  # Ding et al.: adaptive SVT up to 2c − 1 positives
    worst, max_entry = _worst_case(terms, offsets, min(kmax, rows), p)
    worst_sens = _scaled_sens(worst if p == 1 else math.sqrt(worst), p, neighbors)
    if max_records * max_entry >= _EXACT:
        raise ValueError(
            f"max_records={max_records:,} is too many for exact integer row answers "
            f"(largest row entry {max_entry:g}; need max_records·entry < 2**53)"
        )
    w2 = np.repeat(np.square(np.asarray(terms.weights, dtype=np.float64)), counts)
    if opts["eps"] is None:  # a gap method: the split advised for the worst case (data independent)
        mean_w2 = float(w2.mean())
        opts["eps"] = advised_select_eps(
            proxy,
            eps,
            opts,
            lambda e_m: mean_w2 * _noise_for(worst_sens, e_m, delta)[2],
            neighbors=neighbors,
            integer_values=all(float(w).is_integer() for w in terms.weights),
        )
        opts["_advised"] = True
    eps_m = rest_of(eps, opts["eps"])
    _, _, worst_var = _noise_for(
        worst_sens, eps_m, delta
    )  # raises if some selection could not be measured
    threshold = opts["threshold"]
    if isinstance(
        threshold, str
    ):  # "auto": std_i is at most |w_j|·sqrt(worst_var) for any selection
        threshold = np.sqrt(w2 * worst_var) / opts["target_rel_error"]
    del w2
    sel = selection_arguments(opts, c=c, threshold=threshold, neighbors=neighbors)
    c, sens, mono, thr = check_selection(proxy, **sel)
    integer_values = (
        all(float(w).is_integer() for w in terms.weights) and max_records * sens < _EXACT
    )
    bound = float(max_records) * max(abs(lo), abs(hi))
    mech, joint = selection_mechanism(
        proxy,
        method=opts["method"],
        c=c,
        eps=opts["eps"],
        sensitivity=sens,
        monotonic=mono,
        ratio=opts["ratio"],
        neighbors=neighbors,
        vector=opts["vector"],
        integer_values=integer_values,
        value_bound=bound,
    )
    # every magnitude check of the selection, from the declaration (max_records, W's entry range)
    _, bound = declared_calibration(
        proxy,
        method=opts["method"],
        mechanism=mech,
        c=c,
        eps=opts["eps"],
        sensitivity=sens,
        monotonic=mono,
        ratio=opts["ratio"],
        sigma=opts["sigma"],
        joint=joint,
        thr=thr,
        integer_values=integer_values,
        max_records=max_records,
    )
    return FactoredSelectionPlan(
        terms,
        MappingProxyType(opts),
        eps,
        eps_m,
        delta,
        neighbors,
        max_records,
        MappingProxyType(sel),
        sens,
        mono,
        thr,
        tuple(subsets),
        offsets,
        integer_values,
        float(worst_sens),
        float(worst_var),
        int(need),
        mech,
        float(joint),
        min(kmax, rows),
        bound,
    )


# -- reading the data: W x term by term ------------------------------------------------------


def row_values(plan, tables):
    """Unweighted integer row answers u·x of every term (a list of int64 vectors, term order,
    each row-major over the term's non-total factors: W's row order) from the marginal tables."""
    terms, out = plan.terms, []
    for j, S in enumerate(plan.subsets):
        arr = np.asarray(tables[S], dtype=np.int64)
        for k, i in enumerate(S):
            if terms.kinds[j][i] == "I":
                continue
            m = np.rint(terms.factors[j][i].dense()).astype(
                np.int64
            )  # integer factor: exact in int64
            arr = np.moveaxis(np.tensordot(m, arr, axes=([1], [k])), 0, k)
        out.append(np.ascontiguousarray(arr).reshape(-1))
    return out


def _weighted(plan, parts):
    w = plan.terms.weights
    if plan.integer_values:
        return np.concatenate([np.int64(int(wj)) * u for wj, u in zip(w, parts)])
    return np.concatenate([wj * u.astype(np.float64) for wj, u in zip(w, parts)])


# -- the measurement of the selected rows -----------------------------------------------------


def _locate(plan, rows):
    """(term, multi-index over its non-total factors) of each row."""
    terms = np.searchsorted(plan.offsets, rows, side="right") - 1
    out = []
    for r, j in zip(rows.tolist(), terms.tolist()):
        shape = _term_shape(plan.terms, j, plan.subsets[j])
        out.append(
            (
                j,
                tuple(int(v) for v in np.unravel_index(r - int(plan.offsets[j]), shape))
                if shape
                else (),
            )
        )
    return out


class _Cap(Exception):
    pass


def _max_clique(adj, cap):
    """(size of a maximum clique or None past ``cap`` nodes, an upper bound on it) of the graph
    with bitmask adjacency ``adj`` (branch and bound with a greedy-colouring bound, Tomita &
    Seki 2003; past the cap the bound is the number of colours of a greedy colouring)."""
    best, nodes = 0, 0

    def colour(P):
        order, colours, U, c = [], [], P, 0
        while U:
            c += 1
            Q = U
            while Q:
                v = (Q & -Q).bit_length() - 1
                Q &= ~adj[v] & ~(1 << v)
                U &= ~(1 << v)
                order.append(v)
                colours.append(c)
        return order, colours

    def expand(size, P):
        nonlocal best, nodes
        nodes += 1
        if nodes > cap:
            raise _Cap
        order, colours = colour(P)
        for v, c in zip(reversed(order), reversed(colours)):
            if size + c <= best:
                return
            Q = P & adj[v]
            if Q:
                expand(size + 1, Q)
            elif size + 1 > best:
                best = size + 1
            P &= ~(1 << v)

    try:
        expand(0, (1 << len(adj)) - 1)
    except _Cap:
        return None, max(colour((1 << len(adj)) - 1)[1], default=0)  # colours bound the clique
    return best, best


def _cells_sensitivity(plan, loc, p):
    """Δ_p of selected marginal cells (every factor identity or total): a column is one cell
    of the domain, and the cells containing it are pairwise consistent (equal values on the
    attributes they share) — conversely pairwise consistent cells share a column. So Δ₁ =
    Δ₂² = the largest set of pairwise consistent cells: a maximum clique → (Δ_p, exact); past
    :data:`CLIQUE_NODE_CAP` nodes the smaller of a greedy colouring's number of colours and
    the number of distinct marginals (a record is in one cell of each), not exact."""
    cells = [dict(zip(plan.subsets[j], idx)) for j, idx in loc]
    adj = [0] * len(cells)
    for a in range(len(cells)):
        for b in range(a + 1, len(cells)):
            if all(cells[b].get(i, v) == v for i, v in cells[a].items()):
                adj[a] |= 1 << b
                adj[b] |= 1 << a
    size, bound = _max_clique(adj, CLIQUE_NODE_CAP)
    if size is not None:
        return float(size) ** (1.0 / p), True
    return float(min(bound, len({j for j, _ in loc}))) ** (1.0 / p), False


def rows_sensitivity(plan, rows, p):
    """(Δ_p, exact, method) of the unweighted rows ``rows`` of W (no neighbours factor): the
    largest column p-norm of the stack of rank-one Kronecker rows, from the factors
    (:func:`~matmech.linalg.normmax.factored_sensitivity`: exact or its certified upper
    bound), never above the same bound for the whole terms the rows belong to."""
    terms, d = plan.terms, len(plan.terms.domain)
    loc = _locate(plan, np.asarray(rows, dtype=np.int64))
    if all(k != "O" for j, _ in loc for k in terms.kinds[j]):
        value, exact = _cells_sensitivity(plan, loc, p)
        return (
            value,
            exact,
            "maximum clique of consistent cells"
            if exact
            else "colouring bound of consistent cells",
        )
    ones = [Ones(1, n) for n in terms.domain]
    cache, stack = {}, []
    for j, idx in loc:
        fs = list(ones)
        for i, r in zip(plan.subsets[j], idx):
            key = (j, i, r)
            if key not in cache:
                row = np.zeros((1, terms.domain[i]))
                if terms.kinds[j][i] == "I":
                    row[0, r] = 1.0
                else:
                    row[:] = np.rint(
                        np.asarray(_factor(terms, j, i).dense()[r : r + 1], dtype=np.float64)
                    )
                cache[key] = Dense(row)
            fs[i] = cache[key]
        stack.append((1.0, fs))
    by_rows = factored_sensitivity(stack, p)
    hit = sorted({j for j, _ in loc})
    by_terms = factored_sensitivity(
        [(1.0, [_factor(terms, j, i) for i in range(d)]) for j in hit], p
    )
    if by_rows.exact or by_rows.value <= by_terms.value:
        return by_rows.value, by_rows.exact, by_rows.method
    return by_terms.value, False, "upper bound of the whole terms"


def _row_vectors(plan, rows):
    """Per attribute, the k × nᵢ matrix of the selected rows' factor rows (totals: ones)."""
    terms = plan.terms
    V = [None] * len(terms.domain)
    for a, (j, idx) in enumerate(_locate(plan, rows)):
        for i, r in zip(plan.subsets[j], idx):
            if V[i] is None:
                V[i] = np.ones((rows.size, terms.domain[i]))
            if terms.kinds[j][i] == "I":
                V[i][a] = 0.0
                V[i][a, r] = 1.0
            else:
                V[i][a] = np.rint(np.asarray(_factor(terms, j, i).dense()[r], dtype=np.float64))
    return V


def row_basis(plan, rows):
    """B (k × r, orthonormal) spanning the range of the unweighted selected rows U_S (the space
    U_S x lives in), from the Gram U_S U_Sᵀ = ∘ᵢ VᵢVᵢᵀ/nᵢ (columns scaled per attribute by
    1/√nᵢ, which leaves the range unchanged), never from the domain. The factor rows are
    integers, so the rank r is decided exactly (:func:`matmech.linalg.gls.row_space_basis`):
    duplicate and dependent rows never depend on rounding."""
    k = len(rows)
    G = np.ones((k, k))
    exact = np.ones((k, k), dtype=np.int64).astype(object)
    for i, V in enumerate(_row_vectors(plan, np.asarray(rows, dtype=np.int64))):
        if V is not None:
            VV = V @ V.T
            G *= VV / plan.terms.domain[i]
            exact = exact * np.rint(VV).astype(np.int64).astype(object)
    return row_space_basis(G, exact=exact)


@dataclass(frozen=True, eq=False)
class _Drawn:
    """The selection and, when a row was selected, the noisy measurement of the selected rows."""

    sel: object
    rows: np.ndarray
    y: np.ndarray | None = None
    nvar: float = 0.0
    note: str = ""


@dataclass(frozen=True, eq=False)
class SelectedRowsPlan:
    """Selection then measurement of the selected rows from marginal tables: one adaptive
    plan charged once (:class:`~matmech.pipeline.plan.Plan`) around a
    :class:`FactoredSelectionPlan` ``plan``; ``workload`` the Release's W."""

    plan: FactoredSelectionPlan = field(repr=False)
    workload: LinOp = field(repr=False)

    @property
    def eps(self) -> float:
        return self.plan.eps

    @property
    def delta(self) -> float:
        return self.plan.delta

    @property
    def neighbors(self) -> str:
        return self.plan.neighbors

    @property
    def what(self) -> str:
        return (
            f"release with selection ({self.plan.opts['method']}, up to {self.plan.select['c']} "
            f"of {self.plan.rows} queries, factored)"
        )

    @property
    def sizes(self) -> tuple:
        return tuple(self.plan.terms.domain)

    @property
    def subsets(self) -> tuple:
        return tuple(self.plan.subsets) + ((),)

    def check(self, tables):
        """The declared bound on the records, then W x term by term (exact integers)."""
        plan = self.plan
        count = check_counts(np.atleast_1d(tables[()]), 1, name="the record count")
        check_records(count, plan.max_records)
        parts = row_values(plan, tables)
        return parts, _weighted(plan, parts)

    def draw(self, data, *, rng) -> Draws:
        plan, W = self.plan, self.workload
        parts, values = data
        del data
        sel = run_selection(
            SelectionPlan(
                values=values,
                threshold=plan.select["threshold"],
                thr=plan.thr,
                method=plan.select["method"],
                c=int(plan.select["c"]),
                eps=float(plan.opts["eps"]),
                sensitivity=plan.sensitivity,
                monotonic=plan.monotonic,
                ratio=plan.select["ratio"],
                n_rows=plan.rows,
                sigma=plan.select["sigma"],
                mechanism=plan.mechanism,
                joint_sensitivity=plan.joint_sensitivity,
                value_bound=plan.value_bound,
            ),
            rng=rng,
        )
        del values
        rows = np.sort(np.asarray(sel.rows, dtype=np.int64))
        rows.setflags(write=False)
        if rows.size == 0:
            return Draws((), _Drawn(sel, rows))
        # -- measure the selected rows: depends on the selection (a DP output) and W only ------
        p = 1 if plan.delta == 0 else 2
        value, exact, how = rows_sensitivity(plan, rows, p)
        sens = _scaled_sens(value, p, plan.neighbors)
        if rows.size <= plan.max_selected:  # the worst case bounds this selection (and was checked)
            sens = min(sens, plan.worst_sensitivity)
        kind, scale, nvar = _noise_for(sens, plan.eps_measure, plan.delta)
        terms = np.searchsorted(plan.offsets, rows, side="right") - 1
        u = np.array(
            [int(parts[j][r - plan.offsets[j]]) for r, j in zip(rows.tolist(), terms.tolist())],
            dtype=np.int64,
        )
        del parts
        if kind == "discrete_laplace":
            z = noise.discrete_laplace(scale, rows.size, rng=rng)
        else:
            z = noise.discrete_gaussian(scale, rows.size, rng=rng)
        y = (u + z).astype(np.float64)  # the released integers; below: post-processing
        w = np.asarray(plan.terms.weights, dtype=np.float64)[terms]
        norm = "L1" if p == 1 else "L2"
        note = (
            f"the {rows.size} selected rows measured themselves, answers by least squares on them "
            f"(exact {kind.replace('_', ' ')}, scale {scale:.6g}, {norm} sensitivity {sens:.6g} of the "
            f"selected rows, {'exact' if exact else 'certified upper bound'} ({how}) from the "
            f"factors); measurement eps {plan.eps_measure:.6g}"
        )
        # the record in W's rows (row i of U_S scaled by its known weight wᵢ): nothing domain-sized
        record = MeasurementRecord(
            query=take_rows(W, rows),
            values=w * y,
            variance=nvar * w * w,
            event={
                "mechanism": "selected rows",
                "eps": plan.eps_measure,
                "delta": plan.delta,
                "noise": kind,
                "scale": scale,
                "sensitivity": sens,
                "neighbors": plan.neighbors,
            },
        )
        return Draws((record,), _Drawn(sel, rows, y, nvar, note))

    def estimate(self, draws: Draws) -> Estimate:
        plan, d = self.plan, draws.state
        shown = shown_select_options(plan.opts)
        fields: dict = dict(
            selected=d.rows,
            selection=d.sel,
            eps_select=float(plan.opts["eps"]),
            select_options=MappingProxyType(shown),
        )
        if d.y is None:
            empty = np.zeros(0)
            fields.update(strategy_name="none", strategy_note=NOTHING_SELECTED)
            return Estimate(empty, empty, 0.0, fields)
        rows, sel = d.rows, d.sel
        terms = np.searchsorted(plan.offsets, rows, side="right") - 1
        w = np.asarray(plan.terms.weights, dtype=np.float64)[terms]
        B = row_basis(plan, rows)
        P = B @ B.T  # least squares: y projected on the range of U_S
        answers, cov = w * (P @ d.y), d.nvar * np.outer(w, w) * P
        var = np.clip(np.diag(cov), 0.0, None)
        note = d.note
        fields["strategy_name"] = "selected rows"
        if sel.gap is not None:
            measured, mvar = answers, var
            answers, var, more, gm = combine_selection(
                answers, cov, rows, sel, plan.select["threshold"], basis=w[:, None] * B
            )
            gaps = gap_record(take_rows(self.workload, np.asarray(gm.positions)), gm, sel)
            fields["measurements"] = tuple(draws.records) + (gaps,)
            note += more
            answers, var, near = guard(measured, mvar, answers, var, rows, sel)
            near.setflags(write=False)
            fields["near_threshold"] = near
            if near.any():
                note += (
                    f"; {int(near.sum())} row(s) selected by less than {DEFAULT_MARGIN:g} std "
                    "answered from the measurement alone (flagged in near_threshold)"
                )
            shown["_combined"] = True
            shown["_mechanism"] = sel.mechanism
            fields["select_options"] = MappingProxyType(shown)
        fields["strategy_note"] = note
        var = np.asarray(var, dtype=np.float64)
        return Estimate(
            np.asarray(answers, dtype=np.float64), np.sqrt(var), float(var.sum()), fields
        )


def release_selected(
    data,
    W,
    eps,
    delta,
    *,
    select,
    strategy="auto",
    budget=None,
    rng=None,
    neighbors="add_remove",
    max_records,
    max_memory,
):
    """Select rows of W privately from marginal tables of ``data``, measure only those →
    :class:`matmech.release.Release` (``selected``, ``selection``, ``eps_select`` as for
    :func:`matmech.release` with ``select=``). Called by
    :func:`matmech.factored.release.release_factored`; ``eps``/``delta`` are checked there.

    Order (:func:`matmech.pipeline.run.run_plan`): every data-independent check
    (:func:`plan_factored_selection`, the rng, the budget's affordability) → the marginal
    tables and the declared bound on the records → W x → one atomic spend of (ε, δ) → the
    selection's noise → the measurement's noise.
    """
    plan = plan_factored_selection(
        W,
        eps,
        delta,
        select=select,
        strategy=strategy,
        neighbors=neighbors,
        max_records=max_records,
        max_memory=max_memory,
    )
    noise.check_rng(rng)
    return run_plan(SelectedRowsPlan(plan, W), as_table_source(data), budget=budget, rng=rng)
