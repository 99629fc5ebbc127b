"""Privacy parameters in one place: ε, δ, the neighbouring relation and exact splits.

Every public entry point validates its privacy parameters here, so one rule holds
everywhere: a parameter is a real number (``bool``, ``str`` and ``bytes`` are refused with
TypeError, never converted), ε is positive and finite, δ is in [0, 1), and the neighbouring
relation is one of :data:`NEIGHBORS`.

Exact arithmetic convention: a float parameter means the number its shortest repr shows
(0.1 is 1/10) for accounting (:func:`exact`, as the budget reads it), and the binary value it
holds for calibration. :func:`rest_of` splits a total so that the parts add up to at most
the total under *both* readings, so neither the ledger nor the noise can exceed it.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction

import numpy as np

__all__ = [
    "NEIGHBORS",
    "real",
    "positive_real",
    "check_eps",
    "check_delta",
    "check_privacy_params",
    "check_neighbors",
    "neighbor_factor",
    "exact",
    "rest_of",
]

#: The neighbouring relations and their sensitivity factor on the histogram: add/remove one
#: record changes one cell by 1; substituting one record changes two cells by 1.
NEIGHBORS = {"add_remove": 1.0, "substitute": 2.0}


def real(x, name: str) -> float:
    """``x`` as a float; TypeError for anything that is not a real number (bool included)."""
    if isinstance(x, (bool, np.bool_, str, bytes)) or not isinstance(x, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(x).__name__}: {x!r}")
    return float(x)


def positive_real(x, name: str) -> float:
    """A positive finite real number, or a ValueError/TypeError naming ``name``."""
    v = real(x, name)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a positive finite number, got {x!r}")
    return v


def check_eps(eps, *, name: str = "eps", allow_zero: bool = False) -> float:
    """ε > 0 finite (ε >= 0 with ``allow_zero``)."""
    e = real(eps, name)
    if not math.isfinite(e) or e < 0 or (e == 0 and not allow_zero):
        what = "a non-negative" if allow_zero else "a positive"
        raise ValueError(f"{name} must be {what} finite number, got {eps!r}")
    return e


def check_delta(delta, *, name: str = "delta", positive: bool = False) -> float:
    """δ in [0, 1) (in (0, 1) with ``positive``, as Gaussian noise needs)."""
    d = real(delta, name)
    if positive and not 0 < d < 1:
        raise ValueError(f"{name} must be in (0, 1) for Gaussian noise, got {delta!r}")
    if not 0 <= d < 1:
        raise ValueError(f"{name} must be in [0, 1), got {delta!r}")
    return d


def check_privacy_params(eps, delta):
    """(ε, δ) as floats: ε > 0 finite, δ in [0, 1); strings and booleans are refused."""
    for name, v in (("eps", eps), ("delta", delta)):
        if isinstance(v, (str, bytes, bool, np.bool_)) or not isinstance(v, numbers.Real):
            raise TypeError(f"eps and delta must be real numbers, got {name}={v!r} ({type(v).__name__})")
    return check_eps(eps), check_delta(delta)


def check_neighbors(neighbors) -> str:
    """One of :data:`NEIGHBORS` (``"add_remove"`` or ``"substitute"``)."""
    if not isinstance(neighbors, str) or neighbors not in NEIGHBORS:
        raise ValueError(f"neighbors must be one of {sorted(NEIGHBORS)}, got {neighbors!r}")
    return neighbors


def neighbor_factor(neighbors) -> float:
    """The factor the neighbouring relation puts on every sensitivity (1 or 2)."""
    return NEIGHBORS[check_neighbors(neighbors)]


def exact(x) -> Fraction:
    """The exact value a caller meant: a Fraction or integer as is, a float via its shortest
    decimal repr (so 0.1 means 1/10)."""
    if isinstance(x, Fraction):
        return x
    if isinstance(x, numbers.Integral):
        return Fraction(int(x))
    return Fraction(repr(float(x)))


def rest_of(total, part) -> float:
    """total − part as a float, rounded down until part + rest <= total holds exactly both for
    the decimal reading (:func:`exact`, the budget's) and for the binary values (the noise's)."""
    rest = float(exact(total) - exact(part))
    while rest > 0 and (exact(rest) + exact(part) > exact(total)
                        or Fraction(rest) + Fraction(float(part)) > Fraction(float(total))):
        rest = math.nextafter(rest, 0.0)
    return max(rest, 0.0)
