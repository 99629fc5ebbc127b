"""The public :func:`select_rows`: which rows of W are worth answering, chosen privately.

A :class:`~matmech.plans.row_selection.RowSelectionPlan` run by
:func:`~matmech.run.runner.run_plan` (the one spend protocol, issue 34). Order: every
data-independent check (:func:`~matmech.svt.select.check_selection`) → an exhausted budget is
refused (the same error whatever x is) → x read and checked, W x computed, every magnitude
check from the declared bounds (:func:`~matmech.svt.select.plan_selection`), no message
carrying a value of x → the budget is charged → the selection's noise is drawn
(:func:`~matmech.svt.select.run_selection`).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from matmech import validate
from matmech.linalg.linop import as_linop
from matmech.plans.row_selection import RowSelectionPlan
from matmech.privacy.budget import check_budget, privacy_target
from matmech.privacy.randomness import check_rng
from matmech.run.runner import run_plan
from matmech.sources.source import HistogramSource
from matmech.svt.select import Selection, check_selection

if TYPE_CHECKING:  # names used only in annotations
    import numpy.typing as npt

    from matmech.linalg.linop import LinOp
    from matmech.privacy.budget import PrivacyBudget
    from matmech.privacy.randomness import Rng


def select_rows(
    W: LinOp | npt.ArrayLike,
    x: npt.ArrayLike,
    *,
    c: int,
    eps: float | None = None,
    threshold: Any = None,
    method: str = "svt",
    monotonic: bool | str = "auto",
    ratio: float | str = "optimal",
    neighbors: str = "add_remove",
    budget: PrivacyBudget | None = None,
    rng: Rng = None,
    max_records: int | None = None,
    sigma: float | str = "auto",
    vector: bool | str = "auto",
) -> Selection:
    """Choose up to ``c`` rows of W privately; spends ``eps`` (pure ε-DP).

    ``method="svt"``: the first c rows (in row order) whose answer clears ``threshold`` (a
    scalar or one value per row; data-independent) by Lyu et al. Alg. 7 with ε₁:ε₂ from
    ``ratio``. ``method="em"``: the c rows with the largest answers by the exponential
    mechanism (no threshold). ``monotonic="auto"`` uses monotonic noise exactly when it
    is valid; ``True`` where it is not valid raises. ``max_records``: the declared bound
    on Σx (see :func:`matmech.measure`). Free-gap methods (:mod:`matmech.svt.gap`):
    "topc-gap", "svt-gap", "adaptive-svt" (``sigma``: its top-branch margin, "auto" or a
    number). ``vector``: "auto" runs "topc-gap"/"svt-gap" as the Laplace mechanism on the
    whole vector W x (:mod:`matmech.svt.vector`) when that has less noise per score; True
    forces it, False never. Every check runs before ``budget`` is charged (one
    :class:`~matmech.plans.row_selection.RowSelectionPlan` run by
    :func:`~matmech.run.runner.run_plan`).

    Parameters
    ----------
    W : LinOp or array_like
        The workload whose rows are candidates.
    x : array_like of int
        The histogram.
    c : int
        At most c rows are selected.
    eps : float, optional
        The selection's ε; left out only with a share as ``budget`` (its pure ε: sqrt(2ρ)
        for a share in ρ).
    threshold : float, array_like or "auto", optional
        SVT's threshold (not for ``"em"``).
    method : str, default "svt"
        ``"svt"``, ``"em"``, ``"topc-gap"``, ``"svt-gap"`` or ``"adaptive-svt"``.
    monotonic : bool or "auto", default "auto"
        Monotonic noise where valid.
    ratio : float or "optimal"
        SVT's ε₁:ε₂.
    neighbors : {"add_remove", "substitute"}, default "add_remove"
        The neighbouring relation.
    budget : PrivacyBudget, optional
        Charged before any noise.
    rng : numpy.random.Generator, optional
        None (default) for the secure CTR_DRBG; a Generator is NOT secure.
    max_records : int, optional
        The declared bound on Σx.
    sigma : float or "auto"
        Adaptive SVT's margin.
    vector : bool or "auto"
        Run the gap methods as the vector Laplace selection when less noisy.

    Returns
    -------
    Selection
        The selected rows and how they were chosen.

    Raises
    ------
    ValueError
        Bad options (unknown method, c < 1, a threshold with ``"em"``, ...) or bad counts.
    TypeError
        Arguments of the wrong kind.
    BudgetExceededError
        The budget cannot afford ``eps``.

    Examples
    --------
    >>> from matmech import workloads as W
    >>> x = histogram(np.repeat(np.arange(8), [50, 0, 3, 80, 1, 0, 60, 2]), 8)
    >>> sel = select_rows(W.identity(8), x, c=2, eps=1.0, method="em",
    ...                   rng=np.random.default_rng(0))
    >>> sorted(sel.rows.tolist()), sel.method
    ([3, 6], 'em')
    """
    W = as_linop(validate.linear(W, "W"))
    check_budget(budget)
    eps = privacy_target(eps, 0.0, budget).eps  # left out: a share's pure ε, sqrt(2ρ)
    check_rng(rng)
    options = dict(
        c=c,
        eps=eps,
        threshold=threshold,
        method=method,
        monotonic=monotonic,
        ratio=ratio,
        neighbors=neighbors,
        sigma=sigma,
        vector=vector,
    )
    check_selection(W, **options)  # every data-independent refusal, before the plan exists
    what = f"select up to {c} of {W.shape[0]} rows ({method})"
    plan = RowSelectionPlan(W, MappingProxyType(options), max_records, what)
    return run_plan(plan, HistogramSource(x), budget=budget, rng=rng)
