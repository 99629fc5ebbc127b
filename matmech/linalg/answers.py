"""The one output of every estimator: estimates with their exact error bars.

Every estimator of matmech (the generalised least squares over measurement records of
:func:`matmech.estimators.gls.estimate`, the residual closed form of
:class:`~matmech.estimators.reconstruct.MarginalReconstructor`, the factored GLS of
:class:`~matmech.estimators.gmarginal_solve.GMarginalSolver`, the answer-space GLS of
:func:`matmech.linalg.gls.gls`) returns an :class:`Answers`: the estimates, the variance of
each, and the full covariance where it was needed (or a way to compute it on demand). For
the GLS x̂ = J⁺ Σᵢ Qᵢᵀ Pᵢ yᵢ, J = Σᵢ Qᵢᵀ Pᵢ Qᵢ (Aitken 1935; Li et al., PODS 2010, for one
record), the answers W x̂ have covariance W J⁺ Wᵀ: the variances are its diagonal, exact
expectations over the noise draws, not estimates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


def _frozen(a, what):
    arr = np.array(a, dtype=np.float64, copy=True)
    if arr.ndim != 1 and what != "covariance":
        raise ValueError(f"{what} must be a vector, got shape {arr.shape}")
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False)
class Answers:
    """Estimates and their exact error bars, as every estimator returns them.

    Parameters
    ----------
    values : numpy.ndarray
        The estimates (the histogram x̂, or the answers W x̂ to a workload), read-only.
    variances : numpy.ndarray or None
        The variance of each estimate (the diagonal of the covariance), read-only; None only
        when the caller asked for the values alone.
    covariance : numpy.ndarray or None, optional
        The full covariance, when the estimator formed it.
    method : str, optional
        Which estimator (and path) produced them.
    covariance_of : callable, optional
        Computes the covariance on demand when it was not formed (:meth:`cov`).

    Returns
    -------
    Answers
        A frozen record.

    Raises
    ------
    ValueError
        Arrays whose shapes do not match.

    Examples
    --------
    >>> a = Answers(np.array([1.0, 2.0]), np.array([4.0, 9.0]), method="example")
    >>> a.std.tolist(), a.values.flags.writeable
    ([2.0, 3.0], False)
    """

    values: np.ndarray = field(repr=False)
    variances: np.ndarray | None = field(repr=False)
    covariance: np.ndarray | None = field(default=None, repr=False)
    method: str = ""
    covariance_of: Callable[[], np.ndarray] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        vals = _frozen(self.values, "values")
        object.__setattr__(self, "values", vals)
        if self.variances is not None:
            var = _frozen(self.variances, "variances")
            if var.shape != vals.shape:
                raise ValueError(
                    f"variances must have one entry per value ({vals.shape[0]}), got shape {var.shape}"
                )
            object.__setattr__(self, "variances", var)
        if self.covariance is not None:
            cov = _frozen(self.covariance, "covariance")
            if cov.shape != (vals.shape[0], vals.shape[0]):
                raise ValueError(
                    f"covariance must be {vals.shape[0]}×{vals.shape[0]}, got shape {cov.shape}"
                )
            object.__setattr__(self, "covariance", cov)

    @property
    def std(self) -> np.ndarray:
        """Standard deviation of each estimate (the square root of ``variances``)."""
        if self.variances is None:
            raise ValueError("these answers were computed without variances (variances=False)")
        return np.sqrt(np.clip(self.variances, 0.0, None))

    def cov(self) -> np.ndarray:
        """The full covariance: the one formed, else computed now by ``covariance_of``."""
        if self.covariance is not None:
            return self.covariance
        if self.covariance_of is None:
            raise ValueError(
                f"the {self.method or 'estimator'} did not keep a way to form the full covariance"
            )
        cov = _frozen(self.covariance_of(), "covariance")
        object.__setattr__(self, "covariance", cov)
        return cov

    def __repr__(self):
        return f"Answers({self.values.shape[0]} values, method={self.method!r})"
