"""Pictures of error (matplotlib is an optional extra: ``pip install 'matmech-dp[plot]'``).

* :func:`plot_rows` (``matmech plot SPEC --out FILE.png``): per-query RMSE of every
  strategy as bars with the SVD lower bound, and the distribution of per-query standard
  deviations (sorted, as quantiles) for the best strategies and identity, so a user sees
  whether a strategy wins everywhere or only on average. The command plots the rows of
  :func:`matmech.advise` (the optimiser included), so its best bar is advise's choice.
  A bar more than :data:`OUTLIER_FACTOR` times the best is clipped at the edge of the
  useful range, hatched, and annotated with its value, so one huge bar (the workload used
  as its own strategy, RMSE 16,408 next to 8) does not squeeze the others.
* :func:`plot_release`: the released answers with their 95% intervals, one bar per query
  (for ``Release.plot()`` in a notebook): every answer up to :data:`MAX_BARS`, else an
  evenly spaced sample in the workload's own order (``rows=`` picks the queries,
  ``top=`` the largest answers).
* :func:`figure_path`: the exact file a figure is written to (``--out adir`` → a file in
  that directory; a name without an image suffix gets ``.png``).
* :func:`plot_advice`: the RMSE per query of every candidate strategy of an
  :class:`~matmech.advise.Advice`, with the lower bound (for ``Advice.plot()``).

The notebook functions draw on the given ``ax`` or on a new pyplot figure, with whatever
backend is active, and return the Axes; save with ``ax.figure.savefig(path)``. The command
line uses :func:`require_matplotlib`, which selects the non-interactive Agg backend.
Every figure here is analytic or already released: nothing reads private data.
"""

from __future__ import annotations

import math

import numpy as np

from matmech.error import MAX_VARIANCE_ROWS, expected_error, per_query_variance
from matmech.linalg.intervals import Intervals
from matmech.linalg.linop import Kron


#: Per-query standard deviations drawn per curve (quantiles of the full vector).
CURVE_POINTS = 400
#: Most queries drawn by :func:`plot_release` unless ``top`` or ``rows`` asks for more.
MAX_BARS = 40
#: A bar longer than this many times the shortest is clipped (and annotated) in the bar chart.
OUTLIER_FACTOR = 10.0
#: Image formats a figure can be written in (matplotlib's Agg and vector backends).
FORMATS = ("png", "pdf", "svg", "jpg", "jpeg", "webp", "eps", "ps", "tif", "tiff")
#: Points kept in total when the quantiles of a Kronecker workload come from its factors.
KRON_POINTS = 4_000_000

_INSTALL = "plotting needs matplotlib: pip install 'matmech-dp[plot]'"
#: The best strategy's colour in every panel; the others take PALETTE in rank order.
BEST_COLOUR = "tab:green"
PALETTE = (
    "tab:blue",
    "tab:orange",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:olive",
    "tab:cyan",
    "tab:red",
    "tab:gray",
)


def _colours(rows):
    """One colour per row name, the same in every panel of a figure: the best (first) row
    green, the others from PALETTE in rank order (cycling)."""
    out: dict[str, str] = {}
    for r in rows:
        if r.name not in out:
            out[r.name] = BEST_COLOUR if not out else PALETTE[(len(out) - 1) % len(PALETTE)]
    return out


def _wrap(text, ax, fontsize=10):
    """``text`` wrapped to the width of ``ax`` (about 0.6·fontsize points a character), so a
    title is never cropped at the figure's edge."""
    import textwrap

    width_pt = ax.get_position().width * ax.figure.get_figwidth() * 72
    chars = max(20, int(width_pt / (0.6 * fontsize)))
    return "\n".join(textwrap.fill(line, chars) for line in str(text).split("\n"))


def require_matplotlib():
    """Import pyplot with the non-interactive Agg backend (for writing files), or explain
    how to install it."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError(_INSTALL) from None
    return plt


def _pyplot():
    """pyplot with the active backend (inline in a notebook), or the install hint."""
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError(_INSTALL) from None
    return plt


def _log_ticks(axis):
    """Plain numbers on a log axis; minor ticks labelled only when the axis spans few decades."""
    from matplotlib.ticker import LogFormatter

    axis.set_major_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1.2, 0.6)))
    axis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1.2, 0.6)))


def _fmt(v):
    """A short number for an annotation: 3 significant digits, no exponent below 10⁶."""
    a = abs(v)
    if a >= 1e6 or (0 < a < 1e-3):
        return f"{v:.3g}"
    if a >= 100:
        return f"{v:,.0f}"
    return f"{v:.3g}"


# -- the command line: strategies compared on a workload -----------------------------------


def _kron_quantiles(W, A, eps, delta, neighbors, q):
    """Quantiles of the per-query std of a Kronecker workload on a Kronecker strategy.

    The variance of row (i₁, …, i_d) is total · Πₖ vₖ[iₖ] / Σ vₖ, with vₖ the per-query
    variances of factor k: diag(W (AᵀA)⁺ Wᵀ) factorises and its sum is the total error.
    Each factor is reduced to evenly spaced order statistics (equal weights) so that the
    product set has at most KRON_POINTS values; deterministic, no sampling.
    """
    if not (isinstance(W, Kron) and isinstance(A, Kron) and len(W.factors) == len(A.factors)):
        return None
    if any(
        w.shape[1] != a.shape[1] or w.shape[0] > MAX_VARIANCE_ROWS
        for w, a in zip(W.factors, A.factors)
    ):
        return None
    keep = max(2, int(KRON_POINTS ** (1.0 / len(W.factors))))
    share = np.ones(1)  # the share of the total error of each (kept) row tuple
    for w, a in zip(W.factors, A.factors):
        v = np.sort(per_query_variance(w, a, 1.0, 0.0))
        v = v / v.sum()
        if (
            v.size > keep
        ):  # order statistics at evenly spaced ranks: the same distribution, fewer points
            v = v[np.linspace(0, v.size - 1, keep).round().astype(np.int64)]
        share = np.multiply.outer(share, v).ravel()
    total = expected_error(W, A, eps, delta, neighbors=neighbors)
    return np.quantile(np.sqrt(total * share), q)


def _quantile_curve(W, A, eps, delta, neighbors):
    """(percentiles, std quantiles, exact?) or None when the workload is too large."""
    if W.shape[0] <= MAX_VARIANCE_ROWS:
        std = np.sqrt(per_query_variance(W, A, eps, delta, neighbors=neighbors))
        q = np.linspace(0, 1, min(CURVE_POINTS, std.size))
        return q, np.quantile(std, q), True
    q = np.linspace(0, 1, CURVE_POINTS)
    try:
        curve = _kron_quantiles(W, A, eps, delta, neighbors, q)
    except (ValueError, MemoryError):
        curve = None
    return None if curve is None else (q, curve, False)


def plot_rows(
    W, rows, *, eps, delta=0.0, bound_rmse=None, title="", curves=4, neighbors="add_remove", ax=None
):
    """Draw comparison rows (from :func:`matmech.compare.compare` or an Advice); return the figure.

    ``ax``: a pair of Axes (bars, distribution) to draw on, or None for a new figure.
    """
    if ax is None:
        plt = require_matplotlib()
        fig, (left, right) = plt.subplots(
            1, 2, figsize=(13, 0.35 * len(rows) + 2.5), gridspec_kw={"width_ratios": [1, 1.2]}
        )
    else:
        left, right = ax
        fig = left.figure
    colours = _colours(rows)
    _rmse_bars(left, rows, bound_rmse, colours)
    left.set_title(
        _wrap(
            f"expected error per strategy; best (green, top): {_bar_label(rows[0])}"
            if rows
            else "no strategy",
            left,
        ),
        fontsize=10,
    )
    shown = [r for r in rows if r.strategy is not None][:curves]
    ident = [r for r in rows if r.name == "identity" and r not in shown and r.strategy is not None]
    drawn, approx = 0, False
    for r in shown + ident:
        curve = _quantile_curve(W, r.strategy, eps, delta, neighbors)
        if curve is not None:
            right.plot(
                100 * curve[0],
                curve[1],
                label=r.name,
                lw=2.5 if r is rows[0] else 1.2,
                color=colours[r.name],
                zorder=3 if r is rows[0] else 2,
            )  # the best on top of equal curves
            drawn += 1
            approx |= not curve[2]
    # no lower-bound line here: the SVD bound bounds the RMS over all queries (left panel),
    # not the std of each query, so a query may well lie below it
    right.set_xlabel("queries, sorted by their standard deviation (percentile)")
    right.set_ylabel("standard deviation of the answer (counts)")
    if drawn:
        right.set_yscale("log")
        _log_ticks(right.yaxis)
        right.set_title(
            _wrap(
                "distribution of per-query error (each query's std; the RMSE bound is on the left)"
                + (" (quantiles from the Kronecker factors)" if approx else ""),
                right,
            ),
            fontsize=10,
        )
        right.legend(fontsize=8)
    else:
        right.set_title("distribution of per-query error")
        right.text(
            0.5,
            0.5,
            f"not drawn: {W.shape[0]:,} queries\n(more than {MAX_VARIANCE_ROWS:,} variances, no Kronecker structure)",
            ha="center",
            va="center",
            transform=right.transAxes,
            fontsize=10,
            color="0.3",
        )
        right.set_xticks([])
        right.set_yticks([])
    fig.suptitle(
        _wrap(
            title
            or f"W: {W.shape[0]:,} queries over {W.shape[1]:,} cells, eps = {eps:g}, delta = {delta:g}",
            left,
            12 / 2.2,
        )
    )
    fig.tight_layout()
    return fig


def _bar_label(row):
    """The row's name, with the parameters that tell candidates of one family apart."""
    params = getattr(row, "params", None) or {}
    extra = [
        f"{'b' if k == 'branching' else k}={params[k]}" for k in ("branching", "p") if k in params
    ]
    if not extra:
        return row.name
    if row.name.endswith(")"):  # "optimized (pidentity)" -> "optimized (pidentity, p=4)"
        return f"{row.name[:-1]}, {', '.join(extra)})"
    return f"{row.name} ({', '.join(extra)})"


def _clip_edge(values):
    """The right edge of the useful range of ``values`` (> 0), or None when no bar is an
    outlier: bars up to OUTLIER_FACTOR × the smallest are all in range."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    if v.size == 0:
        return None
    useful = v[v <= OUTLIER_FACTOR * v.min()]
    return float(useful.max()) * 1.25 if useful.size < v.size else None


def _rmse_bars(ax, rows, bound_rmse, colours=None):
    """Horizontal RMSE bars, best (first row) at the top in green, the others in their
    strategy's colour (:func:`_colours`, shared with the other panel), values annotated; a bar
    beyond the useful range is clipped at its edge, hatched, and labelled with its value."""
    names = [_bar_label(r) for r in rows][::-1]
    rmse = np.array([r.rmse for r in rows][::-1], dtype=float)
    colours = _colours(rows) if colours is None else colours
    colors = [colours[r.name] for r in rows][::-1]
    edge = _clip_edge(rmse)
    shown = rmse if edge is None else np.minimum(rmse, edge)
    bars = ax.barh(
        np.arange(len(rows)), shown, color=colors, tick_label=names
    )  # numeric y: repeated names stay apart
    hi = float(shown.max()) if shown.size else 1.0
    if bound_rmse is not None and edge is None:
        hi = max(hi, bound_rmse)
    ax.set_xlim(0, hi * 1.3)
    for y, (v, bar) in enumerate(zip(rmse, bars)):
        clipped = edge is not None and v > edge
        if clipped:
            bar.set_hatch("//")
            bar.set_edgecolor("0.25")
        label = f"{_fmt(v)} (off scale)" if clipped else _fmt(v)
        ax.text(
            min(v, hi) + 0.01 * hi,
            y,
            label,
            va="center",
            fontsize=8,
            fontweight="bold" if clipped else None,
        )
    if bound_rmse is not None:
        ax.axvline(bound_rmse, color="k", ls="--", lw=1, label=f"SVD lower bound {bound_rmse:.3g}")
        ax.legend(loc="upper right", fontsize=8)
    ax.set_xlabel(
        "per-query RMSE (counts)"
        + (f"; bars beyond {_fmt(edge)} clipped (hatched)" if edge is not None else "")
    )


# -- notebooks: Release.plot() and Advice.plot() ----------------------------------------------


def _release_rows(release, top, rows=None):
    """(indices into release.answers, the matching workload rows, a note for the title).

    With a selection (``release(..., select=...)``) the answers cover only the selected
    rows, whose indices in W are ``release.selected``. ``rows``: workload rows to draw (in
    the order given; rows a selection did not answer are left out); else ``top``: the
    largest answers; else all answers up to MAX_BARS, or MAX_BARS of them evenly spaced in
    the workload's own order (deterministic, first and last included).
    """
    answers = np.asarray(release.answers, dtype=float)
    idx = np.flatnonzero(np.isfinite(answers))
    selected = getattr(release, "selected", None)
    wrows = idx if selected is None else np.asarray(selected, dtype=np.int64)[idx]
    note = ""
    if selected is not None:
        how = getattr(getattr(release, "selection", None), "method", None)
        note = f"{idx.size} of {release.workload.shape[0]} rows answered" + (
            f" (selected by {how})" if how else ""
        )
    if rows is not None and top is not None:
        raise ValueError("give rows= (which queries) or top= (the largest answers), not both")
    if rows is not None:
        want = _check_rows(rows, release.workload.shape[0])
        where = {int(w): i for i, w in zip(idx, wrows)}
        keep = np.array([where[w] for w in want if w in where], dtype=np.int64)
        missing = sum(1 for w in want if w not in where)
        if missing:
            note = "; ".join(
                filter(
                    None, [note, f"{missing} of the {len(want)} rows asked for were not answered"]
                )
            )
        return keep, (wrows[np.searchsorted(idx, keep)] if keep.size else keep), note
    limit = MAX_BARS
    if top is not None:
        if isinstance(top, bool) or not isinstance(top, (int, np.integer)) or top < 1:
            raise ValueError(
                f"top must be a positive integer (how many of the largest answers to draw), got {top!r}"
            )
        limit = int(top)
        if idx.size > limit:
            keep = np.sort(
                np.argsort(-answers[idx], kind="stable")[:limit]
            )  # shown in workload order
            note = "; ".join(filter(None, [note, f"the {limit} largest of {idx.size} answers"]))
            return idx[keep], wrows[keep], note
        return idx, wrows, note
    if idx.size > limit:
        keep = np.unique(np.linspace(0, idx.size - 1, limit).round().astype(np.int64))
        note = "; ".join(
            filter(
                None,
                [
                    note,
                    f"{keep.size} of {idx.size} answers, evenly spaced in workload order "
                    "(rows= picks queries, top= the largest)",
                ],
            )
        )
        return idx[keep], wrows[keep], note
    return idx, wrows, note


def _check_rows(rows, m):
    """Workload row indices: integers in [0, m), no repeats."""
    if isinstance(rows, (str, bytes)) or not hasattr(rows, "__iter__"):
        raise TypeError(
            f"rows must be a sequence of workload row indices, got {type(rows).__name__}: {rows!r}"
        )
    out = []
    for r in rows:
        if isinstance(r, (bool, np.bool_)) or not isinstance(r, (int, np.integer)):
            raise TypeError(f"rows must hold integer row indices, got {type(r).__name__}: {r!r}")
        if not 0 <= r < m:
            raise ValueError(f"row {r} is not a row of the workload (0..{m - 1})")
        out.append(int(r))
    if not out:
        raise ValueError("rows must name at least one workload row")
    if len(set(out)) != len(out):
        raise ValueError("rows repeats a workload row")
    return out


def _row_labels(W, wrows, labels):
    if labels is not None:
        from matmech.validate import check_labels

        labels = check_labels(labels, W.shape[0])
        return [str(labels[i]) for i in wrows]
    if isinstance(W, Intervals):
        lo, hi = W.bounds()
        return [f"[{lo[i]}, {hi[i]}]" for i in wrows]
    return [f"q{i}" for i in wrows]


def plot_release(release, *, ax=None, top=None, rows=None, labels=None, level=0.95):
    """Bars of the released answers with their ``level`` intervals (answer ± z·std); → Axes.

    One horizontal bar per query, in the workload's order, labelled (``labels``: one name
    per workload row, e.g. ``spec.labels``; default ``[lo, hi]`` for interval workloads,
    else ``q<i>``), with the interval as an error bar and written out as "answer ± z·std".
    Which queries: ``rows`` (workload row indices, drawn in that order); or ``top``, the
    ``top`` largest answers; by default every answer up to :data:`MAX_BARS`, else
    :data:`MAX_BARS` of them evenly spaced through the workload (the title says so). Rows a
    selection did not answer are left out.
    """
    from scipy.special import ndtri

    _require(
        release, "Release", ("answers", "std", "workload", "interval", "selected", "expected_error")
    )
    lower, upper = release.interval(level)  # validates level
    z = float(ndtri(0.5 + level / 2))
    idx, wrows, note = _release_rows(release, top, rows)
    names = _row_labels(release.workload, wrows, labels)
    answers = np.asarray(release.answers, dtype=float)[idx]
    half = (np.asarray(upper, dtype=float)[idx] - np.asarray(lower, dtype=float)[idx]) / 2
    if ax is None:
        plt = _pyplot()
        _, (ax, wide) = plt.subplots(
            1,
            2,
            figsize=(10, 0.27 * max(len(idx), 3) + 1.8),
            sharey=True,
            gridspec_kw={"width_ratios": [4, 1]},
        )
    else:
        wide = ax.inset_axes([1.04, 0, 0.22, 1], sharey=ax)
    y = np.arange(len(idx))
    ax.barh(y, answers, color="tab:blue", alpha=0.75)
    ax.errorbar(answers, y, xerr=half, fmt="none", ecolor="k", elinewidth=1.2, capsize=3)
    ax.set_yticks(y, names)
    ax.set_ylim(max(len(idx), 1) - 0.5, -0.5)  # first query at the top, no empty margin
    span = max(float(np.max(np.abs(answers) + half)) if len(idx) else 1.0, 1e-12)
    for yi, a, h in zip(y, answers, half):
        ax.text(max(a, 0) + h + 0.01 * span, yi, f"{_fmt(a)} ± {_fmt(h)}", va="center", fontsize=8)
    if not len(idx):
        ax.text(
            0.5,
            0.5,
            "no row was answered",
            ha="center",
            va="center",
            transform=ax.transAxes,
            color="0.3",
        )
    left = min(0.0, float(np.min(answers - half)) if len(idx) else 0.0)
    ax.set_xlim(left * 1.1, span * 1.3)
    ax.axvline(0, color="0.5", lw=0.8)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(5))  # large counts: few ticks, no overlapping labels
    ax.set_xlabel(f"released answer (counts); error bars: {100 * level:g}% interval, ± {z:.2f}·std")
    rmse = (
        math.sqrt(release.expected_error / release.answers.size)
        if release.answers.size
        else float("nan")
    )
    title = f"{release.answers.size} answers, eps = {release.eps:g}, delta = {release.delta:g}, strategy {release.strategy_name}"
    title += f", RMSE {_fmt(rmse)}" if release.answers.size else ""
    ax.set_title(_wrap(title + (f"\n{note}" if note else ""), ax), fontsize=10)
    _half_widths(wide, y, half, level)
    ax.figure.tight_layout()
    return ax


def _half_widths(ax, y, half, level):
    """The interval half-widths on their own scale, beside the answers: next to counts of
    10⁵ an error bar of ±14 is invisible on the answers' axis, here it has its own bar."""
    ax.barh(y, half, color="0.35", height=0.5)
    ax.set_xlim(0, (float(np.max(half)) if len(half) else 1.0) * 1.35 or 1.0)
    ax.tick_params(axis="y", left=False, labelleft=False)
    ax.set_xlabel(f"± {100 * level:g}% half-width", fontsize=9)
    ax.set_title("error (own scale)", fontsize=9)


def _require(obj, kind, attributes):
    """Plots take the records by their fields (this layer sits below release and advice)."""
    if type(obj).__name__ != kind or not all(hasattr(obj, a) for a in attributes):
        raise TypeError(
            f"expected {'an' if kind[0] in 'AEIOU' else 'a'} {kind}, got {type(obj).__name__}"
        )


def plot_advice(advice, *, ax=None):
    """Bars of the per-query RMSE of every candidate strategy, best first (green), with the
    SVD lower bound as a dashed line; → Axes. Skipped candidates are named in the title."""
    _require(advice, "Advice", ("rows", "skipped", "lower_bound", "queries", "cells", "delta"))
    if ax is None:
        plt = _pyplot()
        _, ax = plt.subplots(figsize=(8, 0.4 * len(advice.rows) + 1.8))
    bound = None if advice.lower_bound is None else math.sqrt(advice.lower_bound / advice.queries)
    _rmse_bars(ax, advice.rows, bound)
    model = "pure eps-DP" if advice.delta == 0 else f"delta = {advice.delta:g}"
    title = f"{advice.queries:,} queries over {advice.cells:,} cells, eps = {advice.eps:g}, {model}"
    if advice.skipped:
        title += "\nskipped: " + ", ".join(r.name for r in advice.skipped)
    ax.set_title(title, fontsize=10)
    ax.figure.tight_layout()
    return ax


def figure_path(out, *, name="figure"):
    """(path, format) a figure given ``out`` is written to, exactly.

    ``out`` an existing directory: ``out/<name>.png``. A file name whose suffix is an image
    format (:data:`FORMATS`): itself. Any other name: the name plus ``.png`` (so
    ``--out adir`` writes ``adir.png`` and says so, where matplotlib would add the suffix
    silently).
    """
    from pathlib import Path

    from matmech.validate import text

    text(name, "name")
    if not isinstance(out, (str, Path)) or not str(out):
        raise TypeError(f"out must be a file or directory name, got {type(out).__name__}: {out!r}")
    path = Path(out)
    if path.is_dir():
        path = path / f"{name}.png"
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        path = path.with_name(path.name + ".png")
        suffix = "png"
    return path, suffix
