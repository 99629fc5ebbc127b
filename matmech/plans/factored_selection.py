"""The data-independent plan of a factored release with selection (issue 14, item 3).

:func:`plan_factored_selection` checks everything before any data is read, from W's factors
and the declaration: the options, integer factors, memory, W's entry range (that of the
explicit Kronecker stack), the row sensitivity and monotonic rule
(:func:`matmech.svt.select.check_selection` on a row-range stand-in), the selection's
mechanism and grid, and the worst case over every selection of at most c rows (2c − 1 for
adaptive SVT: Ding et al., PVLDB 2019): its sensitivity bound Δ_p and the noise the exact
samplers must be able to draw for it (discrete Laplace, b·ε_m >= Δ₁; discrete Gaussian,
σ = gaussian_sigma(ε_m, δ, Δ₂); Canonne, Kamath, Steinke, NeurIPS 2020).
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from matmech.sources.table_scan import MAX_TABLE_CELLS
from matmech.linalg.terms import as_terms
from matmech.limits import check_memory
from matmech.linalg.linop import Identity, LinOp, Ones
from matmech.linalg.normmax import factored_sensitivity
from matmech.privacy import calibration
from matmech.privacy.params import rest_of
from matmech.svt.methods import SELECTION_METHODS
from matmech.svt.options import check_select_options, selection_arguments
from matmech.svt.rules import advised_select_eps, declared_calibration, selection_mechanism
from matmech.svt.select import check_selection


#: The ``strategy`` values a factored release with selection accepts: the selected rows are
#: measured themselves (the choice the advisor makes for selected marginal cells).
MEASURE_STRATEGIES = ("auto", "optimize")


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
            [(abs(w), [term_factor(t, j, i) for i in range(d)]) for j, w in enumerate(t.weights)], p
        ).value

    def _matmat(self, x):
        raise TypeError("a row-range stand-in has no entries")

    _rmatmat = _matmat


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

    terms: Any
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


def term_factor(terms, j, i):
    """Factor i of term j (a marginal workload's terms are identity/total by kind)."""
    fs = terms.factors[j]
    if fs is not None:
        return fs[i]
    return _marginal_factor(terms.domain[i], terms.kinds[j][i])


@functools.lru_cache(maxsize=1024)
def _marginal_factor(n, kind):
    return Identity(n) if kind == "I" else Ones(1, n)


def term_shape(terms, j, S):
    fs = terms.factors[j]
    return tuple(terms.domain[i] if fs is None else int(fs[i].shape[0]) for i in S)


def _max_abs(f):
    lo, hi = f.entry_range()
    return max(abs(lo), abs(hi))


def measurement_noise(sens, eps_m, delta):
    """(kind, scale, variance) of the measurement at sensitivity ``sens`` (neighbours factor
    and margin included): :func:`matmech.privacy.calibration.noise_for` for an integer
    strategy (grid 1), refused beyond the exact samplers' range
    (:func:`~matmech.privacy.calibration.lattice_variance`)."""
    kind, scale = calibration.noise_for(eps_m, delta, sens)
    remedy = f"the measurement's eps={eps_m!r} is too small for the selected rows"
    return kind, scale, calibration.lattice_variance(kind, scale, 1.0, remedy=remedy)


def _worst_case(terms, offsets, c, p):
    """A certified bound on the largest column p-norm (to the power p for p = 2: squared) of
    ANY c rows of the unweighted terms: the c largest row maxima (each row of term j is at
    most Πᵢ max|factor| per entry, one column), never more than the whole terms' bound."""
    d, k = len(terms.domain), len(terms.kinds)
    if all(fs is None for fs in terms.factors):  # marginals: one cell of each term per column
        maxima = np.ones(k)
    else:
        maxima = np.array(
            [math.prod(_max_abs(term_factor(terms, j, i)) for i in range(d)) for j in range(k)]
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
                [(1.0, [term_factor(terms, j, i) for i in range(d)]) for j in range(k)], p
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
            f = term_factor(terms, j, i)
            if not f.integer_valued():
                raise ValueError(
                    f"term {j} has a non-integer factor on attribute {i} ({type(f).__name__}); the "
                    "factored selection measures the selected rows on the integer lattice and needs "
                    "integer factors (identity, total, prefix, 0/1)"
                )
        subsets.append(S)
        shapes.append(term_shape(terms, j, S))
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
    check_memory(
        need,
        f"the factored selection ({rows:,} rows, {table_cells:,} table cells)",
        after="; nothing was spent",
    )
    # W's entry range from its factors (that of the explicit Kron stack)
    lo = hi = 0.0
    for j, w in enumerate(terms.weights):
        a, b = (
            (0.0, 1.0) if terms.factors[j] is None else (1.0, 1.0)
        )  # a marginal's entries are 0/1
        for i in range(d if terms.factors[j] is not None else 0):
            fl, fh = term_factor(terms, j, i).entry_range()
            prods = (a * fl, a * fh, b * fl, b * fh)
            a, b = min(prods), max(prods)
        a, b = min(a, 0.0), max(b, 0.0)
        a, b = (w * a, w * b) if w >= 0 else (w * b, w * a)
        lo, hi = min(lo, a), max(hi, b)
    proxy = _RowRange(rows, lo, hi, terms)
    p = 1 if delta == 0 else 2
    kmax = SELECTION_METHODS[opts["method"]].max_rows(
        int(c)
    )  # Ding et al.: adaptive SVT up to 2c − 1 positives
    worst, max_entry = _worst_case(terms, offsets, min(kmax, rows), p)
    worst_sens = calibration.neighbor_sensitivity(
        worst if p == 1 else math.sqrt(worst), neighbors, margin=p == 2
    )
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
            lambda e_m: mean_w2 * measurement_noise(worst_sens, e_m, delta)[2],
            neighbors=neighbors,
            integer_values=all(float(w).is_integer() for w in terms.weights),
        )
        opts["_advised"] = True
    eps_m = rest_of(eps, opts["eps"])
    _, _, worst_var = measurement_noise(
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
