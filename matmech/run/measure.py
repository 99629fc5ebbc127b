"""The public :func:`measure`: one strategy measured on a histogram, the budget charged once.

A :class:`~matmech.plans.measurement.PlainMeasurementPlan` run by
:func:`~matmech.run.runner.run_plan` (the one spend protocol, issue 34). Order (the module
notes of :mod:`matmech.privacy.measure`): the plan and every data-independent check → an
exhausted budget is refused (the same error whatever x is) → checks on x, whose messages never
carry a value of x → the budget is charged → the noise is drawn
(:func:`~matmech.privacy.measure.execute`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING


from matmech.linalg.linop import LinOp, as_linop
from matmech.plans.measurement import PlainMeasurementPlan
from matmech.privacy.budget import check_budget, privacy_target
from matmech.privacy.measure import Measurement, plan_measurement
from matmech.run.runner import run_plan
from matmech.sources.source import HistogramSource

if TYPE_CHECKING:  # names used only in annotations
    import numpy.typing as npt

    from matmech.privacy.budget import PrivacyBudget
    from matmech.privacy.randomness import Rng


def measure(
    x: npt.ArrayLike,
    A: LinOp | npt.ArrayLike,
    eps: float | None = None,
    delta: float | None = None,
    *,
    budget: PrivacyBudget | None = None,
    rng: Rng = None,
    neighbors: str = "add_remove",
    max_records: int | None = None,
) -> Measurement:
    """Measure strategy A on counts x with exact discrete noise → :class:`Measurement`.

    ``x``: the histogram (non-negative integer counts, length A.shape[1]). δ = 0: discrete
    Laplace with scale Δ₁(A)/ε; δ > 0: discrete Gaussian calibrated by zCDP (CKS 2020) to
    Δ₂(A). Real-valued A is first rounded to a power-of-two grid (see the module notes).
    ``neighbors``: ``"add_remove"`` (default) or ``"substitute"`` (sensitivity doubled).
    ``max_records``: the declared bound on Σx (default :data:`MAX_RECORDS`); x above it is
    refused before anything is spent, with a message that does not contain the total.
    ``budget``: a :class:`~matmech.privacy.budget.PrivacyBudget` charged the measurement's privacy
    event (the noise drawn, :mod:`matmech.privacy.events`) after all checks and before any
    noise; a share of one (``budget.split(k)``) with ``eps`` left out calibrates the noise to
    it (Gaussian to its ρ, or pure ε with ``delta=0``). ``rng``: None for the secure CTR_DRBG;
    a numpy Generator for reproducible experiments only (NOT secure).

    Parameters
    ----------
    x : array_like of int
        The histogram: non-negative integer counts, length ``A.shape[1]``.
    A : LinOp or array_like
        The strategy to measure.
    eps : float, optional
        ε in [1e-4, 100]; left out only with a share as ``budget``.
    delta : float, optional
        0 (default): discrete Laplace (pure ε); in [1e-100, 1): discrete Gaussian.
    budget : PrivacyBudget, optional
        Charged the measurement's event after all checks and before any noise.
    rng : numpy.random.Generator, optional
        None (default) for the secure CTR_DRBG; a Generator is reproducible and NOT secure.
    neighbors : {"add_remove", "substitute"}, default "add_remove"
        The neighbouring relation.
    max_records : int, optional
        The declared bound on Σx (default 2³²).

    Returns
    -------
    Measurement
        The noisy y = A x + z and its noise parameters.

    Raises
    ------
    ValueError
        Bad counts (naming the kind of defect, never a value), shapes, ε/δ, or Σx above
        ``max_records``; nothing is spent.
    TypeError
        Arguments of the wrong kind.
    BudgetExceededError
        The budget cannot afford (ε, δ); raised before x is read.

    Examples
    --------
    >>> from matmech import strategies as S
    >>> m = measure([1, 2, 0, 1], S.identity(4), 1.0, rng=np.random.default_rng(0))
    >>> m.noise, m.scale, m.y.shape, m.secure
    ('discrete_laplace', 1.0, (4,), False)
    """
    A = as_linop(A)
    check_budget(budget)
    t = privacy_target(eps, delta, budget)
    mplan = plan_measurement(
        A, t.eps, t.delta, neighbors=neighbors, max_records=max_records, rho=t.rho
    )
    what = f"measure {A.shape[0]}×{A.shape[1]} {type(A).__name__}"
    plan = PlainMeasurementPlan(mplan, what)
    return run_plan(plan, HistogramSource(x), budget=budget, rng=rng)
