"""The record :func:`matmech.optimizers.dispatch.optimize` returns, and its making."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType

from matmech.error import lower_bound
from matmech.linalg.linop import LinOp
from matmech.privacy.calibration import noise_variance


@dataclass(frozen=True)
class OptimizeResult:
    """An optimised strategy and its analytic figures (errors in squared counts, RMSE in counts).

    A frozen record; :func:`optimize` makes it. ``summary()`` prints it.

    ``error`` is :func:`matmech.expected_error` of the strategy (total over the queries) with
    ``noise="continuous"``, the figure the optimisers minimise (a release draws discrete noise:
    ``expected_error``'s default gives its exact error),
    ``lower_bound`` the SVD bound of Li & Miklau (None where it cannot be computed),
    ``gap`` the relative duality gap (value − certified bound)/value for the L2 methods
    (None where the method has no certificate), ``seconds`` the optimisation time (the
    error and bound evaluations after it are not included; for ``method="auto"`` summed
    over the families tried, listed in ``params["tried"]``), ``params`` method details.

    Parameters
    ----------
    strategy : LinOp
        The optimised strategy.
    error, rmse : float
        Total expected error (squared counts) and RMSE per query (counts).
    lower_bound : float or None
        The SVD lower bound (total).
    method : str
        The family that produced the strategy.
    seconds : float
        Optimisation time.
    gap : float or None
        Relative duality gap of the L2 methods.
    eps, delta : float
        The privacy parameters optimised for.
    params : mapping
        Method details (``tried``, ``failed``, ...).

    Examples
    --------
    >>> from matmech import workloads as W
    >>> res = optimize(W.prefix(16), eps=1.0)
    >>> res.error >= res.lower_bound
    True
    """

    strategy: LinOp
    error: float
    rmse: float
    lower_bound: float | None
    method: str
    seconds: float
    gap: float | None
    eps: float
    delta: float
    params: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))

    @property
    def ratio(self):
        """error / lower_bound (≥ 1), or None without a bound."""
        return None if not self.lower_bound else self.error / self.lower_bound

    def summary(self):
        gap = "-" if self.gap is None else f"{self.gap:.2e}"
        bound = "-" if self.lower_bound is None else f"{self.ratio:.3f}"
        return f"{self.method}: total {self.error:.6g}, RMSE/query {self.rmse:.4f}, error/bound {bound}, gap {gap}, {self.seconds:.2f} s"


def optimize_result(W, eps, delta, chosen, strategy, gap, params, err, seconds, *, bound):
    lb = None
    if bound:
        try:
            lb = lower_bound(W, eps, delta)
        except ValueError:
            lb = None
    if gap is not None:
        unit = noise_variance(eps, delta, sensitivity=1.0) if delta > 0 else None
        if unit is not None and "dual_trace" in params:
            params["dual_bound"] = unit * params["dual_trace"]
    params = MappingProxyType(dict(params))
    return OptimizeResult(
        strategy, err, math.sqrt(err / W.shape[0]), lb, chosen, seconds, gap, eps, delta, params
    )
