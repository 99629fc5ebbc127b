"""The options of ``release(..., select=...)``: their names, defaults and checks.

One place for both release paths (the histogram's :mod:`matmech.plans.selected` and the
factored :mod:`matmech.plans.factored_selected`): :func:`check_select_options` validates and fills
in the defaults, :func:`selection_arguments` turns them into the keyword arguments of
:func:`matmech.svt.select.check_selection`, :func:`shown_select_options` into what a
release records. Nothing here reads data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from matmech.validate import positive_real
from matmech.svt.methods import SELECTION_METHODS


#: Keys of ``release(..., select=...)`` (the rest of select_rows' options come from release).
SELECT_OPTIONS = (
    "method",
    "eps",
    "c",
    "threshold",
    "target_rel_error",
    "monotonic",
    "ratio",
    "sigma",
    "vector",
)


#: threshold="auto" answers a row when its std is at most this fraction of its count.
DEFAULT_TARGET_REL_ERROR = 0.1


def check_select_options(select, eps):
    """The validated options of ``release(..., select=...)`` (defaults filled in), the rules of
    both release paths; ``eps`` is the release's total. Raises before anything is read or spent."""
    if not isinstance(select, Mapping):
        raise TypeError(
            "select must be a dict of select_rows options, e.g. dict(method='svt', threshold=2000, c=50, eps=0.3), "
            f"got {type(select).__name__}: {select!r}"
        )
    unknown = sorted(str(k) for k in select if k not in SELECT_OPTIONS)
    if unknown:
        raise ValueError(
            f"unknown select option(s) {unknown}: expected keys from {list(SELECT_OPTIONS)} "
            "(neighbors, budget and rng are release's own arguments)"
        )
    method = select.get("method")
    entry = SELECTION_METHODS.get(method) if isinstance(method, str) else None
    gap_method = entry is not None and entry.gap
    for key in ("c",) if gap_method else ("eps", "c"):
        if key not in select:
            raise ValueError(f"select needs {key!r} (got keys {sorted(map(str, select))})")
    opts: dict[str, Any] = dict(
        method="svt",
        threshold=None,
        target_rel_error=None,
        monotonic="auto",
        ratio="optimal",
        sigma="auto",
        vector="auto",
    )
    opts.update(select)
    if not (isinstance(opts["method"], str) and opts["method"] in SELECTION_METHODS):
        raise ValueError(
            f"select method must be one of {tuple(SELECTION_METHODS)}, got {opts['method']!r}"
        )
    if "eps" not in select:  # a gap method: the split is advised later (data independent)
        opts["eps"] = None
        return _check_threshold_options(opts)
    opts["eps"] = positive_real(opts["eps"], "select eps")
    if opts["eps"] >= eps:
        raise ValueError(
            f"select eps = {opts['eps']!r} must be less than release's total eps = {eps!r}: "
            "the selection's eps comes out of the total and the rest measures the selected rows"
        )
    return _check_threshold_options(opts)


def _check_threshold_options(opts):
    """The threshold / target_rel_error part of :func:`check_select_options`."""
    thr = opts["threshold"]
    is_auto = isinstance(thr, str) and thr == "auto"
    if SELECTION_METHODS[opts["method"]].threshold:
        if thr is None or (isinstance(thr, str) and not is_auto):
            raise ValueError(
                f"select method={opts['method']!r} needs a threshold: a number, one number per row, "
                f"or 'auto'; got {thr!r}"
            )
    elif thr is not None:
        raise ValueError(
            f"select method={opts['method']!r} picks the c largest rows and takes no threshold; "
            f"got threshold={thr!r}"
        )
    if is_auto:
        t = (
            DEFAULT_TARGET_REL_ERROR
            if opts["target_rel_error"] is None
            else opts["target_rel_error"]
        )
        opts["target_rel_error"] = positive_real(t, "select target_rel_error")
    elif opts["target_rel_error"] is not None:
        raise ValueError(
            f"select target_rel_error is only used with threshold='auto' (threshold is {thr!r})"
        )
    return opts


def selection_arguments(opts, *, c, threshold, neighbors) -> dict:
    """The keyword arguments of :func:`check_selection` / :func:`select_rows` for checked
    ``release(select=...)`` options ``opts`` (:func:`check_select_options`), with the
    selection's ``c``, its (resolved) ``threshold`` and the neighbour relation: one place
    for both release paths."""
    return dict(
        c=c,
        eps=opts["eps"],
        threshold=threshold,
        method=opts["method"],
        monotonic=opts["monotonic"],
        ratio=opts["ratio"],
        neighbors=neighbors,
        sigma=opts["sigma"],
        vector=opts["vector"],
    )


def shown_select_options(opts):
    """The checked select options as a release records them (a dict): a per-row threshold
    array is summarised as "one per row"."""
    out = dict(opts)
    thr = out["threshold"]
    if thr is not None and not isinstance(thr, str):
        out["threshold"] = float(thr) if np.ndim(thr) == 0 else "one per row"
    return out
