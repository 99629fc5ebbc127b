"""The record a release returns: noisy answers, their exact error bars, and how they were made.

:class:`Release` is frozen and holds only DP outputs (the noisy answers, the selection) and
data-independent facts (workload, strategy, ε, δ, the analytic variances); it is shared by
the explicit release (:mod:`matmech.release`) and the factored one (:mod:`matmech.plans.factored`).
Variances are the Matrix-Mechanism formula σ²·diag(W (AᵀA)⁺ Wᵀ) (Li et al., PODS 2010); the
intervals come from the law of the noise actually drawn (:mod:`matmech.privacy.confidence`:
exact lattice quantiles, a binned convolution, or the normal / Cornish–Fisher quantile, one
method named per answer), and are computed once per level on first use.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from matmech.error import noise_weights
from matmech.linalg.intervals import Intervals
from matmech.privacy.confidence import (
    MAX_ROWS,
    IntervalLaw,
    cached_law,
    excess_kurtosis,
    law_intervals,
    normal_intervals,
)
from matmech.linalg.linop import LinOp
from matmech.linalg.storage import fingerprint
from matmech.privacy.measure import Measurement
from matmech.svt.methods import SELECTION_METHODS
from matmech.svt.rules import take_rows
from matmech.svt.select import Selection
from matmech.validate import check_labels
from typing import TYPE_CHECKING, Sequence, cast

if TYPE_CHECKING:
    from matmech.svt.gap import GapResult
    from matmech.svt.vector import VectorResult


#: The interval columns of every table of answers (Python, JSON and the CLI's CSV).
INTERVAL_COLUMNS = ("lower", "upper", "interval", "coverage")

#: Two-sided 95% normal quantile.
Z95 = 1.959963984540054


@dataclass(frozen=True, eq=False)
class Release:
    """Noisy answers to a workload with their analytic error bars.

    A frozen record; :func:`release` makes it. ``interval()``, ``full()``,
    ``to_dict()``, ``to_json()`` and ``plot()`` read it.

    ``answers`` = W x̂ for the answered rows; ``std`` the standard deviation of each answer;
    ``expected_error`` their total variance Σ std² (squared counts); ``strategy`` the
    matrix actually measured, chosen as ``strategy_name`` (``strategy_note`` says how);
    ``eps``/``delta`` what this release spent in total (``events``: the privacy events it
    charged, :mod:`matmech.privacy.events`); ``budget_remaining`` what is left of
    the budget passed (or None).

    Without selection every row of ``workload`` is answered, in order, and ``selected`` is
    None. With selection (``release(..., select=...)``) ``answers``/``std`` cover only the
    selected rows: ``selected`` holds their row indices in W (ascending), ``answered`` is
    the boolean mask over W's rows, ``selection`` the :class:`~matmech.svt.select.Selection`
    record and ``eps_select`` its share of ``eps``. The other rows have no answer at all —
    never a NaN in ``answers`` — and :func:`release_table` marks them (below threshold, not
    examined, or not among the top c). ``full(fill=...)`` spreads the answers over all rows
    with a fill value the caller must choose. ``measurements``: the
    :class:`MeasurementRecord` of every noisy measurement made; the answers and ``std`` are
    their generalised least squares. With selection they rest on the measurement of the
    selected rows alone, drawn after the selection (unbiased given it); a free-gap selection's
    gaps stay in ``selection.gap``, never in the answers (docs/guide/selection.md). When nothing is
    selected nothing is measured:
    ``answers`` is empty and ``measurement``/``strategy`` are None; the whole ``eps`` was charged
    with the selection (one atomic spend), so it is spent all the same.

    Parameters
    ----------
    answers, std : numpy.ndarray
        The answered rows' noisy answers and their standard deviations (counts).
    expected_error : float
        Σ std² (squared counts).
    workload, strategy : LinOp
        W and the matrix measured (None when nothing was selected).
    strategy_name, strategy_note : str
        How the strategy was chosen.
    eps, delta : float
        What the release spent in total.
    neighbors : str
        The neighbouring relation.
    budget_remaining : tuple or None
        What is left of the budget passed.
    measurement : Measurement or None
        The measurement made.
    estimate : numpy.ndarray or None
        The reconstructed histogram (explicit path).
    selected, selection, eps_select, select_options
        The selection, when ``release(..., select=...)`` was used.

    Examples
    --------
    >>> from matmech import workloads as W
    >>> r = release(histogram([0, 1, 1, 3], 4), W.prefix(4), 1.0, strategy="identity",
    ...             rng=np.random.default_rng(0))
    >>> lo, hi = r.interval()
    >>> bool((lo < r.answers).all() and (r.answers < hi).all())
    True
    """

    answers: np.ndarray
    std: np.ndarray
    expected_error: float
    workload: LinOp = field(repr=False)
    strategy: LinOp | None = field(repr=False)
    strategy_name: str
    strategy_note: str
    eps: float
    delta: float
    neighbors: str
    budget_remaining: tuple | None
    measurement: Measurement | None = field(repr=False)
    estimate: np.ndarray | None = field(repr=False)
    selected: np.ndarray | None = None
    selection: Selection | None = field(default=None, repr=False)
    eps_select: float = 0.0
    select_options: Mapping | None = field(default=None, repr=False)
    measurements: tuple = field(default=(), repr=False)
    #: The operator whose rows times ``estimate`` are the answers, over the measured domain,
    #: when it is not W (or W's selected rows): the factored Kronecker path's W_U.
    answered_workload: LinOp | None = field(default=None, repr=False)
    #: What the residual path measured when no matrix over the domain exists (``measurement``
    #: is then None): the noise and the strategy it stands for, for to_dict and re-analysis.
    measured: Mapping | None = field(default=None, repr=False)
    #: When ``measurement`` is None: the answers' noise law, an object whose
    #: ``intervals(level, std)`` gives their :class:`IntervalLaw` (the residual paths:
    #: :mod:`matmech.estimators.answer_noise`); data-independent.
    noise_law: object | None = field(default=None, repr=False)
    #: The privacy events this release charged (:mod:`matmech.privacy.events`: the noise it
    #: drew, the selection it ran), what its budget's accountant composed.
    events: tuple = field(default=(), repr=False)
    _laws: dict = field(default_factory=dict, init=False, repr=False)

    @property
    def spent(self):
        """(ε, δ) spent by this release (selection included)."""
        return (self.eps, self.delta)

    @property
    def answered(self):
        """Boolean mask over the rows of the workload: True where there is an answer."""
        mask = np.zeros(self.workload.shape[0], dtype=bool)
        mask[slice(None) if self.selected is None else self.selected] = True
        return mask

    def full(self, *, fill):
        """Answers as a vector over all rows of the workload, ``fill`` where there is none.

        ``fill`` has no default on purpose: choose 0, NaN or a sentinel knowingly.
        """
        out = np.full(self.workload.shape[0], fill, dtype=np.float64)
        out[slice(None) if self.selected is None else self.selected] = self.answers
        return out

    def interval_law(self, level=0.95) -> IntervalLaw:
        """Per-answer half-width, coverage and method at ``level`` (:mod:`matmech.privacy.confidence`).

        Answers of one measurement get the law of their own noise draws (exact lattice
        quantiles where the noise weights are integers, a binned convolution for a few
        draws, else the normal or Cornish–Fisher quantile), and so do residual-path
        answers (``noise_law``, :mod:`matmech.estimators.answer_noise`: pure ε their weights on
        the tables' discrete Laplace draws with multiplicities, (ε, δ) on the residual rows'
        discrete Gaussian draws; past a size cap the normal quantile if every σ ≥ 3, else
        Chebyshev's std/√(1 − level)), and so do the answers of a release with selection (on
        either path they rest on the measurement of the selected rows alone). ``coverage`` is
        never NaN: exact, a lower bound, or the Edgeworth estimate (normal, Cornish–Fisher).
        """
        _z(level)
        level = float(level)
        if level not in self._laws:
            self._laws[level] = self._law(level)
        return self._laws[level]

    def _law(self, level):
        m = self.measurement
        if m is None and self.noise_law is not None and self.answers.size:
            return self.noise_law.intervals(level, self.std)  # type: ignore[attr-defined]
        if m is None or self.answers.size == 0:  # no law evaluated (the general-marginal path)
            return normal_intervals(self.std, level)
        rows = self.answered_workload
        if rows is None:
            rows = (
                self.workload if self.selected is None else take_rows(self.workload, self.selected)
            )
        if self.answers.size > MAX_ROWS:  # too large to evaluate: the heaviest tails an
            one = excess_kurtosis(m.noise, m.scale / m.grid)  # answer can have, one draw's
            return normal_intervals(self.std, level, excess=one)

        def compute():
            C = noise_weights(rows, m.strategy)
            if C is None:
                one = excess_kurtosis(m.noise, m.scale / m.grid)
                return normal_intervals(self.std, level, excess=one)
            return law_intervals(C, m.noise, m.scale, m.grid, level)

        # the law depends on the rows, the strategy and the noise only, never on the data:
        # kept per (rows, strategy) content fingerprint, so a second release or level is cheap
        keys = (fingerprint(rows), fingerprint(m.strategy))
        if None in keys:
            return compute()
        return cached_law((*keys, m.noise, float(m.scale), float(m.grid), level), compute)

    def interval(self, level=0.95):
        """(lower, upper) = answer ∓ half-width of :meth:`interval_law` (answered rows)."""
        half = self.interval_law(level).half
        return self.answers - half, self.answers + half

    def plot(self, **kwargs):
        """Bars of the answers with their intervals (needs matplotlib); see :func:`matmech.plot.plot_release`."""
        from matmech.plot import plot_release

        return plot_release(self, **kwargs)

    def _selection_dict(self, sel: Selection, selected: np.ndarray):
        opts = dict(self.select_options or {})
        out = {
            "method": sel.method,
            "eps": self.eps_select,
            "eps_measure": None if self.measurement is None else self.measurement.eps,
            "c": sel.c,
            "threshold": opts["threshold"] if SELECTION_METHODS[sel.method].threshold else None,
            "selected": int(selected.size),
            "candidates": sel.n_candidates,
            "stopped_at_c": sel.stopped,
            "monotonic": sel.monotonic,
            "row_sensitivity": sel.sensitivity,
            "mechanism": sel.mechanism or sel.method,
        }
        if sel.gap is not None:
            # Selection.gap is annotated ``object``; a free-gap method stores one of these two.
            gap = cast("GapResult | VectorResult", sel.gap)
            out["gaps"] = [
                {"row": int(r), "gap": float(g), "branch": b}
                for r, g, b in zip(gap.positions, gap.gaps, gap.branches)
            ]
            out["gaps_combined"] = False  # biased given the selection: never in the answers
            out["eps_advised"] = bool(opts.get("_advised", False))
        if opts["threshold"] == "auto":
            out["target_rel_error"] = opts["target_rel_error"]
            out["threshold_rule"] = "row i is tested against std_i / target_rel_error"
        return out

    def to_dict(self, *, labels=None, include_estimate=False, queries=True):
        """A JSON-ready dict: the privacy spent, strategy, noise, selection, one row per query
        (``queries=False``: without them; :func:`iter_release_table` gives them one by one)."""
        m = self.measurement
        n_ans = self.answers.size
        out = {
            **spent_dict(self, self.expected_error, n_ans),
            "queries_total": self.workload.shape[0],
            "strategy": {
                "name": self.strategy_name,
                "note": self.strategy_note,  # no matrix over the domain
                **(self.measured["strategy"] if self.measured is not None else {}),
            }
            if m is None or self.strategy is None
            else {
                "name": self.strategy_name,
                "note": self.strategy_note,
                "type": type(self.strategy).__name__,
                "shape": list(self.strategy.shape),
                "rounded_to_grid": m.rounded,
            },
            "intervals": {"level": 0.95, "methods": self.interval_law(0.95).counts()},
            "noise": (None if self.measured is None else dict(self.measured["noise"]))
            if m is None
            else {
                "distribution": m.noise,
                "scale": m.scale,
                "std": m.std,
                "grid": m.grid,
                "sensitivity": m.sensitivity,
                "secure_randomness": m.secure,
            },
            "selection": None
            if self.selection is None or self.selected is None
            else self._selection_dict(self.selection, self.selected),
            "events": [e.to_dict() for e in self.events],
            "queries": release_table(self, labels) if queries else None,
        }
        if not queries:
            del out["queries"]
        if include_estimate and self.estimate is not None:
            out["estimate"] = self.estimate.tolist()
        return out

    def to_json(self, *, labels=None, include_estimate=False, **json_kwargs):
        """:meth:`to_dict` as a JSON string (keyword arguments go to ``json.dumps``)."""
        return json.dumps(
            self.to_dict(labels=labels, include_estimate=include_estimate), **json_kwargs
        )

    def __repr__(self):
        m = self.answers.size
        rmse = f"{math.sqrt(self.expected_error / m):.4g}" if m else "-"
        sel = (
            ""
            if self.selected is None or self.selection is None
            else f" of {self.workload.shape[0]} (selected by {self.selection.method})"
        )
        return (
            f"Release({m} answers{sel}, strategy={self.strategy_name!r}, eps={self.eps:g}, delta={self.delta:g}, "
            f"rmse={rmse})"
        )


def spent_dict(release, expected_error, answered) -> dict:
    """The head of a release's :meth:`~Release.to_dict` (a :class:`Release` or a
    :class:`~matmech.results.store.MarginalRelease`): the privacy spent, the budget left, the
    expected total error, its root mean square over the ``answered`` queries, their number."""
    left = release.budget_remaining
    return {
        "eps": release.eps,
        "delta": release.delta,
        "neighbors": release.neighbors,
        "budget_remaining": None if left is None else list(left),
        "expected_error": expected_error,
        "rmse": math.sqrt(expected_error / answered) if answered else None,
        "answered": answered,
    }


def _z(level):
    if isinstance(level, (bool, np.bool_)) or not isinstance(
        level, (int, float, np.integer, np.floating)
    ):
        raise TypeError(f"level must be a number in (0, 1), got {type(level).__name__}: {level!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    if level == 0.95:
        return Z95
    from scipy.special import ndtri

    return float(ndtri(0.5 + level / 2))


def _default_labels(W):
    if isinstance(W, Intervals):
        lo, hi = W.bounds()
        return [f"[{a}, {b}]" for a, b in zip(lo.tolist(), hi.tolist())]
    return [f"q{i}" for i in range(W.shape[0])]


def _unanswered_notes(release):
    """Why each row of W has no answer: SVT examines rows in order and stops at the c-th hit."""
    sel = release.selection
    m = release.workload.shape[0]
    method = SELECTION_METHODS[sel.method]
    if not method.threshold:
        return np.full(m, "not among the top c", dtype=object)
    notes = np.full(m, "below threshold", dtype=object)
    if sel.stopped and sel.rows.size:
        notes[int(sel.rows.max()) + 1 :] = f"not examined ({method.stop_reason})"
    return notes


def release_table(
    release: Release, labels: Sequence[str] | None = None, *, level: float = 0.95
) -> list[dict]:
    """One dict per query of the workload: ``query`` (label), ``answer``, ``std``, ``lower``,
    ``upper``, ``interval`` (the method) and ``coverage`` (:data:`INTERVAL_COLUMNS`).

    ``labels`` (one per row of the workload) defaults to ``"[lo, hi]"`` for interval
    workloads and ``"q<i>"`` otherwise; the interval at ``level`` (default 95%) is that of
    :meth:`Release.interval_law`: ``coverage`` is its exact coverage probability ("exact"),
    a lower bound on it ("convolution", "chebyshev"), or the Edgeworth estimate of it where
    the interval is a moment approximation ("normal", "cornish-fisher"); never None. For a release with selection every row of the workload is
    listed with ``selected`` (True/False) and ``status``: ``"answered"``, ``"below
    threshold"``, ``"not examined (c rows already found)"`` or ``"not among the top c"``;
    unanswered rows have ``None`` for answer, std and interval.

    Parameters
    ----------
    release : Release
        The release to tabulate.
    labels : sequence of str, optional
        One label per workload row.
    level : float, default 0.95
        Confidence level of the interval (:meth:`Release.interval_law`).

    Returns
    -------
    list of dict
        One dict per workload row (``query``, ``answer``, ``std`` and :data:`INTERVAL_COLUMNS`;
        plus ``selected`` and ``status`` with selection).

    Raises
    ------
    ValueError
        ``labels`` of the wrong length or ``level`` outside (0, 1).
    TypeError
        ``release`` is not a Release.

    Examples
    --------
    >>> from matmech import workloads as W
    >>> r = release(histogram([0, 1, 1, 3], 4), W.prefix(4), 1.0, strategy="identity",
    ...             rng=np.random.default_rng(0))
    >>> rows = release_table(r)
    >>> rows[0]["query"], sorted(rows[0])
    ('[0, 0]', ['answer', 'coverage', 'interval', 'lower', 'query', 'std', 'upper'])
    """
    return list(iter_release_table(release, labels, level=level))


def iter_release_table(
    release: Release,
    labels: Sequence[str] | None = None,
    *,
    level: float = 0.95,
    chunk: int = 1 << 16,
) -> Iterator[dict]:
    """The rows of :func:`release_table`, one at a time, built ``chunk`` rows at once: a
    table of 10⁸ rows is written without 10⁸ dicts in memory (the command line's answers).
    ``labels`` may be any sequence, including one computed on demand
    (:class:`matmech.io.labels.Labels`)."""
    if not isinstance(release, Release):
        raise TypeError(f"expected a Release, got {type(release).__name__}")
    m = release.workload.shape[0]
    labels = _default_labels(release.workload) if labels is None else check_labels(labels, m)
    law = release.interval_law(level)
    ans = np.asarray(release.answers, dtype=float)
    std = np.asarray(release.std, dtype=float)
    half = np.asarray(law.half, dtype=float)
    cov = np.asarray(law.coverage, dtype=float)

    def cells(k):  # the answers with indices k (an array), in that order
        a, h = ans[k], half[k]
        return [  # .tolist(): Python floats at once, not one numpy scalar per row
            {"answer": v, "std": s, "lower": lo, "upper": hi, "interval": str(how), "coverage": c}
            for v, s, lo, hi, how, c in zip(
                a.tolist(),
                std[k].tolist(),
                (a - h).tolist(),
                (a + h).tolist(),
                np.asarray(law.method)[k],
                cov[k].tolist(),
            )
        ]

    if release.selected is None:
        for a in range(0, m, chunk):
            b = min(m, a + chunk)
            for q, cell in zip(labels[a:b], cells(np.arange(a, b))):
                yield {"query": str(q), **cell}
        return
    notes = _unanswered_notes(release)
    empty = dict.fromkeys(("answer", "std") + INTERVAL_COLUMNS)
    answer_of = np.full(m, -1, dtype=np.int64)  # row -> its answer's index (-1: none)
    answer_of[np.asarray(release.selected, dtype=np.int64)] = np.arange(release.selected.size)
    for a in range(0, m, chunk):
        b = min(m, a + chunk)
        k = answer_of[a:b]
        filled = iter(cells(k[k >= 0]))
        for q, note, j in zip(labels[a:b], notes[a:b], k.tolist()):
            if j < 0:
                yield {"query": str(q), "selected": False, "status": note, **empty}
                continue
            yield {"query": str(q), "selected": True, "status": "answered", **next(filled)}
