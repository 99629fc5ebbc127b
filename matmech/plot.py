"""Pictures of analytic error (matplotlib is an optional extra: ``pip install matmech[plot]``).

Left: per-query RMSE of every strategy as bars, with the SVD lower bound as a line. Right:
the distribution of per-query standard deviations (sorted, as quantiles) for the best
strategies and identity, so a user sees whether a strategy wins everywhere or on average.
"""

from __future__ import annotations

import numpy as np

from .error import MAX_VARIANCE_ROWS, per_query_variance

__all__ = ["plot_rows", "require_matplotlib"]

#: Per-query standard deviations drawn per curve (quantiles of the full vector).
CURVE_POINTS = 400


def require_matplotlib():
    """Import pyplot with a non-interactive backend, or explain how to install it."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("plotting needs matplotlib: pip install 'matmech[plot]'") from None
    return plt


def _quantile_curve(W, A, eps, delta, neighbors):
    if W.shape[0] > MAX_VARIANCE_ROWS:
        return None
    std = np.sqrt(per_query_variance(W, A, eps, delta, neighbors=neighbors))
    q = np.linspace(0, 1, min(CURVE_POINTS, std.size))
    return q, np.quantile(std, q)


def plot_rows(W, rows, *, eps, delta=0.0, bound_rmse=None, title="", curves=4, neighbors="add_remove", ax=None):
    """Draw comparison rows (from :func:`matmech.compare.compare` or an Advice); return the figure."""
    plt = require_matplotlib()
    if ax is None:
        fig, (left, right) = plt.subplots(1, 2, figsize=(13, 0.35 * len(rows) + 2.5), gridspec_kw={"width_ratios": [1, 1.2]})
    else:
        left, right = ax
        fig = left.figure
    names = [r.name for r in rows][::-1]
    rmse = [r.rmse for r in rows][::-1]
    colors = ["tab:green" if i == len(rows) - 1 else "tab:blue" for i in range(len(rows))]
    left.barh(names, rmse, color=colors)
    if bound_rmse is not None:
        left.axvline(bound_rmse, color="k", ls="--", lw=1, label=f"SVD lower bound {bound_rmse:.3g}")
        left.legend(loc="lower right")
    left.set_xscale("log")
    left.set_xlabel("per-query RMSE (counts), log scale")
    left.set_title("expected error per strategy (best at the top, green)")
    shown = [r for r in rows if r.strategy is not None][:curves]
    ident = [r for r in rows if r.name == "identity" and r not in shown]
    for r in shown + ident:
        curve = _quantile_curve(W, r.strategy, eps, delta, neighbors)
        if curve is not None:
            right.plot(100 * curve[0], curve[1], label=r.name, lw=2 if r is rows[0] else 1.2)
    if bound_rmse is not None:
        right.axhline(bound_rmse, color="k", ls="--", lw=1, label="lower bound (RMSE)")
    right.set_xlabel("queries, sorted by their standard deviation (percentile)")
    right.set_ylabel("standard deviation of the answer (counts)")
    right.set_yscale("log")
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda v, _: f"{v:g}")
    right.yaxis.set_major_formatter(plain)
    right.yaxis.set_minor_formatter(plain)
    left.xaxis.set_major_formatter(plain)
    left.xaxis.set_minor_formatter(plain)
    right.set_title("distribution of per-query error")
    right.legend(fontsize=8)
    fig.suptitle(title or f"W: {W.shape[0]:,} queries over {W.shape[1]:,} cells, eps = {eps:g}, delta = {delta:g}")
    fig.tight_layout()
    return fig
