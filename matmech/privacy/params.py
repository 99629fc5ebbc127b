"""Privacy parameters in one place: ε, δ, the neighbouring relation and exact splits.

Every public entry point validates its privacy parameters here, so one rule holds
everywhere: a parameter is a real number (``bool``, ``str`` and ``bytes`` are refused with
TypeError, never converted; the generic checks live in :mod:`matmech.validate`), ε is
positive and finite, δ is in [0, 1), and the neighbouring relation is one of
:data:`NEIGHBORS`.

Noise needs more than that: a mechanism (release, measure, selection) and every error
figure (error, advise, compare, optimize) accept ε in [:data:`EPS_MIN`, :data:`EPS_MAX`] =
[1e-4, 100] and δ = 0 or δ in [:data:`DELTA_MIN`, 1) = [1e-100, 1)
(:func:`check_privacy_params`). Outside that range the noise is not a usable float: the
exact samplers put noise of scale Δ/ε on a lattice no coarser than Δ, and above ε ≈ 700 the
variance of that discrete noise, about 2e^(−ε), underflows to 0 (least squares then divides
by it); Laplace Δ/ε underflows to 0 for ε ≈ 1e300, and the zCDP conversion of
Canonne-Kamath-Steinke 2020, Cor. 13, has no finite bracket for ε ≳ 1.3e154. 100 leaves a
wide margin below 700 and is far beyond any meaningful guarantee (e^100 ≈ 2.7e43); below
ε = 1e-4 the noise scale exceeds 10⁴·Δ, the exact samplers refuse most strategies and the
measurement of an optimised L2 strategy loses rank on its rounding lattice. Accounting alone
(:class:`~matmech.privacy.budget.PrivacyBudget`) accepts any positive finite ε.

Exact arithmetic convention (issue 21): a float ε means the number its shortest repr shows
(0.1 is 1/10). The budget charges that decimal (:func:`exact`), and the noise is calibrated
for the same number: every mechanism calibrates on :func:`calibrated_eps`, the largest float
whose binary value is at most the decimal, so b·ε >= Δ holds for the decimal ε the budget
charged (the binary float 0.1 is 1/10 + 5.6e-18, and calibrating on it would give noise for
slightly more than what was charged). :func:`rest_of` splits a total so that the parts add up
to at most the total under *both* readings, so each part's calibration stays within its share.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction

from matmech.validate import choice, real


#: The neighbouring relations and their sensitivity factor on the histogram: add/remove one
#: record changes one cell by 1; substituting one record changes two cells by 1.
NEIGHBORS = {"add_remove": 1.0, "substitute": 2.0}

#: The ε a mechanism or an error figure accepts (see the module docstring).
EPS_MIN = 1e-4
EPS_MAX = 100.0
#: The smallest positive δ a mechanism or an error figure accepts (δ = 0 is pure ε-DP).
DELTA_MIN = 1e-100


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


def check_noise_eps(eps, *, name: str = "eps") -> float:
    """ε for noise: a positive number in [EPS_MIN, EPS_MAX] = [1e-4, 100]."""
    e = check_eps(eps, name=name)
    if not EPS_MIN <= e <= EPS_MAX:
        raise ValueError(
            f"{name}={eps!r} is too {'small' if e < EPS_MIN else 'large'}: {name} must be in [{EPS_MIN:g}, {EPS_MAX:g}] "
            f"for a mechanism or an error figure (outside it the noise is not a usable float)"
        )
    return e


def check_noise_delta(delta, *, name: str = "delta") -> float:
    """δ for noise: 0 (pure ε-DP) or in [DELTA_MIN, 1) = [1e-100, 1)."""
    d = check_delta(delta, name=name)
    if 0 < d < DELTA_MIN:
        raise ValueError(
            f"{name} must be 0 or in [{DELTA_MIN:g}, 1) for a mechanism or an error figure, got {delta!r}"
        )
    return d


def check_privacy_params(eps, delta) -> tuple[float, float]:
    """(ε, δ) as floats for a mechanism or an error figure: ε in [1e-4, 100], δ = 0 or in
    [1e-100, 1); strings, booleans and NaN are refused, naming the value."""
    for name, v in (("eps", eps), ("delta", delta)):
        if (
            isinstance(v, (str, bytes, bool))
            or type(v).__name__ == "bool_"
            or not isinstance(v, numbers.Real)
        ):
            raise TypeError(
                f"eps and delta must be real numbers, got {name}={v!r} ({type(v).__name__})"
            )
    return check_noise_eps(eps), check_noise_delta(delta)


def check_neighbors(neighbors) -> str:
    """One of :data:`NEIGHBORS` (``"add_remove"`` or ``"substitute"``)."""
    return choice(neighbors, "neighbors", sorted(NEIGHBORS))


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


def calibrated_eps(eps) -> float:
    """The float a mechanism calibrates its noise with for a charged ``eps``: the largest float
    whose binary value is at most the decimal :func:`exact` reading the budget charges, so the
    charged and the calibrated ε are the same number (b·ε >= Δ holds for the decimal). Equal
    to ``eps`` whenever its binary value is already at most the decimal (0.5, 0.25, 1.0, 0.3, 0.7);
    one float below it otherwise (0.1, 0.2, 1e-4)."""
    e = float(eps)
    while e > 0 and Fraction(e) > exact(eps):
        e = math.nextafter(e, 0.0)
    return e


def rest_of(total, part) -> float:
    """total − part as a float, rounded down until part + rest <= total holds exactly both for
    the decimal reading (:func:`exact`, the budget's) and for the binary values (the noise's)."""
    rest = float(exact(total) - exact(part))
    while rest > 0 and (
        exact(rest) + exact(part) > exact(total)
        or Fraction(rest) + Fraction(float(part)) > Fraction(float(total))
    ):
        rest = math.nextafter(rest, 0.0)
    return max(rest, 0.0)
