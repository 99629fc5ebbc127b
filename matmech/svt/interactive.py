"""Interactive SVT: [LSL17] Alg. 7 answering a stream of queries one at a time.

[LSL17] = Lyu, Su, Li, VLDB 2017 (in ``shared/references``).  The noisy
threshold is drawn once, at construction; every :meth:`SparseVector.test`
draws fresh query noise; after the c-th positive the object refuses further
queries.  Queries may be chosen adaptively (Alg. 7 is private for adaptively
chosen streams, Thm. 4.7).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from matmech.privacy import noise
from matmech.svt.calibration import SVTCalibration, svt_budget
from matmech.svt.checks import Ratio, check_real, check_threshold
from matmech.svt.core import SVTResult
from matmech.svt.grid import NoiseBuffer, draw, range_check, to_units
from typing import Any
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # names used only in annotations
    from matmech.privacy.randomness import Rng


class SparseVectorExhausted(RuntimeError):
    """Raised when a :class:`SparseVector` is asked a query after its c-th positive.

    Parameters
    ----------
    message : str
        Says how many positives were reported after how many queries.

    Returns
    -------
    SparseVectorExhausted
        A ``RuntimeError`` subclass.

    Raises
    ------
    SparseVectorExhausted
        Raised by :meth:`SparseVector.test` after the c-th positive.

    Examples
    --------
    >>> sv = SparseVector(100, c=1, eps=1.0, rng=np.random.default_rng(0))
    >>> sv.test(500)
    True
    >>> try:
    ...     sv.test(1)
    ... except SparseVectorExhausted:
    ...     print("exhausted")
    exhausted
    """


class SparseVector:
    """Interactive SVT ([LSL17] Alg. 7): answer a stream of queries one at a time.

    >>> sv = SparseVector(100, c=2, eps=1.0, rng=np.random.default_rng(0))  # doctest: +SKIP
    >>> sv.test(3)      # q_1(D) = 3  -> almost surely False      # doctest: +SKIP

    The threshold noise is drawn at construction; each :meth:`test` uses
    fresh query noise (drawn a few at a time ahead of use, which changes
    nothing: the draws are independent of everything).  After the c-th
    positive the object refuses further queries (:class:`SparseVectorExhausted`).
    Queries may be chosen adaptively.  ``threshold`` may be overridden per query.

    Values arrive one at a time with unknown types, so the calibration always
    assumes grid rounding (sensitivity + grid step, see :mod:`matmech.svt.calibration`).

    ``value_bound``: a declared bound on abs(q_i(D)) (e.g. max_records times the largest
    abs(entry) of the query rows). The grid is chosen for it at construction and every value is
    held to it, so no query can raise on its value after the threshold noise is drawn
    (issue 21). None: each value is range-checked against the grid as it arrives.

    Parameters
    ----------
    threshold : float
        The default threshold T (``test`` may override it per query).
    c : int
        Positives before the object refuses further queries.
    eps, sensitivity, monotonic, ratio, eps_answer, rng
        As :func:`~matmech.svt.sparse_vector`.
    value_bound : float, optional
        A declared bound on abs(q_i(D)) (see above); None: values are range-checked as they arrive.

    Returns
    -------
    SparseVector
        An object whose ``test(value)`` returns True / False.

    Raises
    ------
    ValueError
        Bad parameters, at construction (before any randomness).
    SparseVectorExhausted
        ``test`` after the c-th positive.

    Examples
    --------
    >>> sv = SparseVector(100, c=1, eps=1.0, rng=np.random.default_rng(0))
    >>> sv.test(3), sv.test(500)
    (False, True)
    """

    def __init__(
        self,
        threshold: Any,
        *,
        c: int,
        eps: float,
        sensitivity: float = 1.0,
        monotonic: bool = False,
        ratio: Ratio = "optimal",
        eps_answer: float = 0.0,
        rng: Rng = None,
        value_bound: Optional[float] = None,
    ) -> None:
        t = check_threshold(threshold, None)
        if value_bound is not None:
            value_bound = check_real("value_bound", value_bound, allow_zero=True)
        self._value_bound = value_bound
        public: dict[str, Any] = dict(c=c, eps=eps, sensitivity=sensitivity, monotonic=monotonic)
        self._budget = svt_budget(
            **public, ratio=ratio, eps_answer=eps_answer, value_bound=value_bound or 0.0
        )

        g = self._budget.grid
        range_check(abs(float(t)), g, "threshold")
        self._threshold = float(t)
        self._src = noise.check_rng(rng)
        self._rho = int(draw(self._budget.threshold_scale, 1, g, self._src)[0])
        self._nu = NoiseBuffer(self._budget.query_scale, g, self._src)
        self._positions: list[int] = []
        self._answers: list[float] = []
        self._n = 0

    # -- state ------------------------------------------------------------
    @property
    def budget(self) -> SVTCalibration:
        """The data-independent calibration of this run."""
        return self._budget

    @property
    def eps(self) -> float:
        """Privacy cost of the whole interaction (paid once, whatever is asked)."""
        return self._budget.eps

    @property
    def c(self) -> int:
        """The most positives this object will report."""
        return self._budget.c

    @property
    def positions(self) -> tuple[int, ...]:
        """0-based indices (in the stream) of the queries answered True."""
        return tuple(self._positions)

    @property
    def answers(self) -> Optional[tuple[float, ...]]:
        """Noisy numeric answers of the positives (eps_answer > 0), else None."""
        return tuple(self._answers) if self._budget.answer_scale is not None else None

    @property
    def n_processed(self) -> int:
        """How many queries were tested."""
        return self._n

    @property
    def remaining(self) -> int:
        """How many more positives may be reported."""
        return self._budget.c - len(self._positions)

    @property
    def exhausted(self) -> bool:
        """True after the c-th positive: no further query can be answered."""
        return self.remaining == 0

    def result(self) -> SVTResult:
        """The interaction so far as an :class:`~matmech.svt.SVTResult`."""
        return SVTResult(
            positions=self.positions,
            answers=self.answers,
            eps=self.eps,
            stopped=self.exhausted,
            n_processed=self._n,
            budget=self._budget,
        )

    # -- the mechanism ----------------------------------------------------
    def test(self, value, *, threshold=None) -> bool:
        """Is q_i(D) = ``value`` above the threshold (noisily)?  Alg. 7 lines 5-13."""
        if self.exhausted:
            raise SparseVectorExhausted(
                f"SparseVector already reported its c={self._budget.c} positives after "
                f"{self._n} queries; no further queries can be answered with this budget"
            )
        v = check_real("value", value, positive=False)
        g = self._budget.grid
        if self._value_bound is None:
            range_check(abs(v), g, "value")
        else:  # the declared bound: held to it, never a data-dependent error mid-stream
            v = min(max(v, -self._value_bound), self._value_bound)
        if threshold is None:
            t = self._threshold
        else:
            t = float(check_threshold(threshold, None))
            range_check(abs(t), g, "threshold")
        vu = int(to_units(np.array([v]), g)[0])
        tu = int(to_units(np.array([t]), g)[0])
        nu = self._nu.one()
        index = self._n
        self._n += 1
        if vu + nu - tu >= self._rho:
            self._positions.append(index)
            if self._budget.answer_scale is not None:
                a = vu + int(draw(self._budget.answer_scale, 1, g, self._src)[0])
                self._answers.append(float(a) * g)
            return True
        return False

    def __repr__(self) -> str:
        return (
            f"SparseVector(c={self._budget.c}, eps={self._budget.eps}, "
            f"n_processed={self._n}, positives={len(self._positions)})"
        )
