"""Argument checks shared by the sparse vector and top-c mechanisms.

Every check runs before any randomness is drawn or any budget is spent, and a
failure names the argument, the value received and what was expected.  Private
data never appears in a message: for ``values`` only the kind of defect is
reported, not where it is.  Numbers and sizes go through :mod:`matmech.validate`
(the one rule at the public boundary: an int too large for a float, such as
10**400, is a ValueError naming it, never an OverflowError; a ragged nested list
is a ValueError naming its first ragged row).
"""

from __future__ import annotations

import math
import numbers
from typing import Optional, Union

import numpy as np

from matmech.validate import MAX_INDEX, integer, real, rectangular


Ratio = Union[str, float]


def check_real(name: str, x, *, positive: bool = True, allow_zero: bool = False) -> float:
    """``x`` as a finite float; ``positive`` demands x > 0 (x >= 0 with ``allow_zero``)."""
    v = real(x, name)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {x!r}")
    if positive and (v < 0 or (v == 0 and not allow_zero)):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {bound}, got {x!r}")
    return v


def check_int(name: str, x, *, what: str, minimum: int = 1) -> int:
    """``x`` as a Python int in [``minimum``, 2**62]; bools and non-integers are refused
    (2**62 = :data:`matmech.validate.MAX_INDEX`: no count of queries or positives is larger,
    and every derived figure stays a finite float)."""
    return integer(x, f"{name} ({what})", min=minimum, max=MAX_INDEX)


def check_c(c) -> int:
    return check_int("c", c, what="the number of positives to report")


def check_eps(eps, eps_answer=0.0) -> tuple[float, float]:
    """(eps, eps_answer) with eps > 0 and 0 <= eps_answer < eps."""
    e = check_real("eps", eps)
    e3 = check_real("eps_answer", eps_answer, allow_zero=True)
    if e3 >= e:
        raise ValueError(
            f"eps_answer must be smaller than the total eps (eps1 + eps2 need a share), "
            f"got eps_answer={eps_answer!r} with eps={eps!r}"
        )
    return e, e3


def check_ratio(ratio) -> Ratio:
    """``"optimal"`` or r > 0 in eps1:eps2 = 1:r."""
    if isinstance(ratio, str):
        if ratio != "optimal":
            raise ValueError(
                f'ratio must be "optimal" or a number r > 0 (eps1:eps2 = 1:r), got {ratio!r}'
            )
        return ratio
    return check_real("ratio", ratio)


def check_sensitivity(sensitivity) -> float:
    return check_real("sensitivity", sensitivity)


def check_values(values, name: str = "values") -> np.ndarray:
    """A 1-D array of finite reals (integer dtypes are kept as they are)."""
    if isinstance(values, (str, bytes)) or values is None:
        raise TypeError(f"{name} must be a 1-D sequence of numbers, got {type(values).__name__}")
    rectangular(
        values, name
    )  # a ragged nested list: ValueError naming the row (lengths only, no values)
    try:
        arr = np.asarray(values)
    except (ValueError, OverflowError):
        raise ValueError(
            f"{name} must be a 1-D sequence of numbers, got one numpy cannot read as an array"
        ) from None
    if arr.ndim != 1:
        raise ValueError(
            f"{name} must be a 1-D sequence of numbers, got an array of shape {arr.shape}"
        )
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    if arr.dtype.kind == "f" and arr.size and not np.isfinite(arr).all():
        # Do not echo private values or their positions in the message.
        raise ValueError(f"{name} must be finite: NaN or inf found")
    return arr


def check_threshold(threshold, n: Optional[int]) -> np.ndarray:
    """A finite scalar, or (when ``n`` is given) one finite threshold per value."""
    if isinstance(threshold, (str, bytes, bool, np.bool_)) or threshold is None:
        raise TypeError(
            f"threshold must be a real number or a sequence of them, got {type(threshold).__name__}: "
            f"{threshold!r}"
        )
    if (
        isinstance(threshold, numbers.Integral)
        and not isinstance(threshold, np.generic)
        and not -(2**63) <= int(threshold) < 2**63
    ):
        threshold = real(
            threshold, "threshold"
        )  # beyond int64: a float, or ValueError past 1.8e308
    rectangular(threshold, "threshold")
    try:
        t = np.asarray(threshold)
    except (ValueError, OverflowError):
        raise ValueError(
            "threshold must be a real number or a 1-D sequence of them, got one numpy cannot read "
            "as an array"
        ) from None
    if t.dtype.kind not in "biuf":
        raise TypeError(
            f"threshold must be a real number or a sequence of them, got dtype {t.dtype}"
        )
    if t.ndim > 1 or (t.ndim == 1 and n is None):
        raise ValueError(f"threshold must be a scalar here, got shape {t.shape}")
    if t.ndim == 1 and t.shape[0] != n:
        raise ValueError(
            f"threshold has length {t.shape[0]} but values has length {n}; "
            f"pass a scalar or one threshold per value"
        )
    bad = np.flatnonzero(~np.isfinite(np.atleast_1d(t).astype(np.float64)))
    if bad.size:
        i = int(bad[0])
        where = "" if t.ndim == 0 else f" at index {i}"
        raise ValueError(f"threshold must be finite, got {np.atleast_1d(t)[i]!r}{where}")
    return t


def check_candidates(n: int, c: int, rule: str) -> None:
    """The candidates a mechanism needs for ``c`` picks: ``"any"`` (a threshold scan),
    ``"pick"`` (c <= n: the exponential mechanism) or ``"runner-up"`` (c < n, n >= 2: the
    last gap is to the unselected runner-up, [DWZK19] Noisy Top-c with Gap)."""
    if rule == "pick":
        if n == 0:
            raise ValueError("values must hold at least one candidate, got an empty sequence")
        if c > n:
            raise ValueError(f"c must be at most the number of candidates ({n}), got c={c}")
    elif rule == "runner-up":
        if n < 2:
            raise ValueError(
                f"values must hold at least two candidates (a selection and its runner-up), got {n}"
            )
        if c >= n:
            raise ValueError(
                f"c must be less than the number of candidates ({n}) for the gap to the runner-up, got c={c}"
            )


def check_flag(name: str, value) -> bool:
    """A real boolean: ``"False"`` or ``1`` must not switch on a noise-halving option."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__}: {value!r}")
    return bool(value)


def check_beta(beta) -> float:
    """A failure probability in the open interval (0, 1)."""
    b = check_real("beta", beta)
    if not 0.0 < b < 1.0:
        raise ValueError(f"beta must be in (0, 1), got {beta!r}")
    return b
