"""Accountants: the one place privacy events are composed into the privacy spent.

An accountant turns the events a budget has charged (:mod:`matmech.privacy.events`) into
the (ε, δ) spent, decides whether a new list of events still fits the declared total (the
refusal rule), and says what remains. Three are registered (:data:`ACCOUNTANTS`):

``"basic"``
    Sequential composition (Dwork and Roth 2014, Thm. 3.16): the (ε, δ) every event was
    calibrated to add up, exactly (``Fraction``: 0.1 + 0.2 fits a 0.3 total).
``"zcdp"``
    Zero-concentrated DP (Bun and Steinke, TCC 2016): ρ adds; a Gaussian of σ at L2
    sensitivity Δ₂ is Δ₂²/(2σ²)-zCDP, a pure ε event ε²/2; events without a ρ (an opaque
    (ε, δ > 0), the threshold mechanism) add their (ε, δ) on top. The spent ε at δ is
    ε_op + ε(ρ, δ − δ_op) with the conversion of Canonne, Kamath and Steinke (NeurIPS 2020,
    Cor. 13), ε(ρ, δ) = inf_{α>1} αρ + (ln(1/δ) + (α−1) ln(1−1/α) − ln α)/(α−1), evaluated at
    the minimising α in 50-digit decimal arithmetic rounded outward (every α gives a valid
    bound, so the reported ε is never below the true one). The basic sum is valid too, so
    ``"zcdp"`` reports and refuses by the smaller of the two: it never charges more than
    ``"basic"`` (a pure-ε history on a δ > 0 budget keeps its sums).
``"pld"``
    Privacy loss distributions (Koskela et al. 2020; Doroshenko et al. 2022) of the noise
    actually drawn, through Google's ``dp_accounting`` (the optional extra ``pld``): the
    discrete Gaussian and discrete Laplace where the event says a neighbour moves
    ``unit_shifts`` coordinates by one lattice step, the continuous Gaussian exactly, every
    other event by the tight (ε, δ) privacy-loss pair of its guarantee; a Gaussian without
    that structure is accounted in zCDP and combined with the rest by sums, δ split over a
    fixed grid. ``dp_accounting``'s pessimistic estimates are upper bounds; the ε is further
    rounded up by 1e-9 relative. Also never above ``"zcdp"``.

The refusal rule is exact: a total (ε, δ) has a zCDP capacity ρ* (the largest float ρ whose
outward-rounded conversion at δ is at most ε, :func:`zcdp_capacity`), and a list
of events fits when Σρ <= ρ* in exact rationals, or its exact basic sums fit, or (``"pld"``)
its PLD bound does. k equal shares of ρ* (:meth:`~matmech.privacy.budget.PrivacyBudget.split`)
therefore meet the total exactly.
"""

from __future__ import annotations

import decimal
import functools
import math
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from matmech.privacy.calibration import minimise_over_alpha
from matmech.privacy.params import exact
from matmech.validate import choice
from matmech.privacy.events import (
    Concentrated,
    DiscreteGaussian,
    DiscreteLaplace,
    Event,
    Gaussian,
    decimal_up,
    float_down,
    float_up,
)


#: The PLD bound's outward rounding, relative.
_PLD_MARGIN = 1e-9
#: δ splits tried when a PLD part and a zCDP part are combined by sums.
_SPLITS = (0.01, 0.05, 0.1, 0.2, 0.35, 0.5, 0.65, 0.8, 0.9, 0.95, 0.99)
#: Above this σ / grid a discrete Gaussian's PLD (an array over ±12σ lattice points) is not
#: built; the event is accounted in zCDP.
_PLD_MAX_SIGMA_STEPS = 2**14


@dataclass(frozen=True)
class Total:
    """A budget's declared total: (``eps``, ``delta``), or ``rho`` (with ``delta`` the δ at
    which it is reported); exact rationals."""

    eps: Fraction | None
    delta: Fraction
    rho: Fraction | None = None


# ------------------------------------------------------------------------- zCDP → (ε, δ)

_DEC = decimal.Context(prec=50, rounding=decimal.ROUND_HALF_EVEN)


def _dec(q: Fraction) -> decimal.Decimal:
    return _DEC.divide(decimal.Decimal(q.numerator), decimal.Decimal(q.denominator))


def _eps_at(rho: Fraction, delta: Fraction, alpha: float) -> Fraction:
    """αρ + (ln(1/δ) + (α−1) ln(1−1/α) − ln α)/(α−1) at this α, in 50-digit decimals, plus a
    bound on their rounding error: an upper bound of the CKS Cor. 13 value at α."""
    c = _DEC
    a = decimal.Decimal(alpha)  # exact: a float is a finite binary fraction
    am1 = c.subtract(a, 1)
    t1 = c.multiply(a, _dec(rho))
    big_l = c.minus(_dec(delta).ln(c))
    t2 = c.multiply(am1, c.subtract(1, c.divide(1, a)).ln(c))
    t3 = a.ln(c)
    num = c.subtract(c.add(big_l, t2), t3)
    val = c.add(t1, c.divide(num, am1))
    scale = abs(t1) + (abs(big_l) + abs(t2) + abs(t3)) / am1
    err = Fraction(scale) * Fraction(1, 10**40) + Fraction(1, 10**300)
    return Fraction(val) + err


def _best_alpha(rho: float, delta: float) -> float:
    log_inv_delta = -math.log(delta)

    def eps_of(a):
        import numpy as np

        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return a * rho + (log_inv_delta + (a - 1) * np.log1p(-1 / a) - np.log(a)) / (a - 1)

    return minimise_over_alpha(eps_of)[1]


def zcdp_epsilon(rho, delta, *, alphas: Sequence[float] = ()) -> float:
    """An upper bound on the ε such that ρ-zCDP implies (ε, δ)-DP (CKS 2020, Cor. 13),
    rounded outward (module docstring; :func:`~matmech.privacy.events.decimal_up`): 0 for
    ρ = 0, inf for δ <= 0. ``alphas``: further orders to evaluate at (the smallest value is
    returned; each is a valid bound)."""
    b = _zcdp_bound(rho, delta, alphas=alphas)
    return b if isinstance(b, float) else decimal_up(b)


def _zcdp_bound(rho, delta, *, alphas: Sequence[float] = ()) -> Fraction | float:
    """:func:`zcdp_epsilon` before its rounding: the exact rational bound (or 0.0 / inf)."""
    rho, delta = Fraction(rho), Fraction(delta)
    if rho < 0:
        raise ValueError(f"rho must be non-negative, got {float(rho)!r}")
    if rho == 0:
        return 0.0
    if delta <= 0:
        return math.inf
    if delta >= 1:
        return 0.0
    best = min(_eps_at(rho, delta, a) for a in (_best_alpha(float(rho), float(delta)), *alphas))
    return max(best, Fraction(0))


@functools.lru_cache(maxsize=256)
def zcdp_capacity(eps: Fraction, delta: Fraction) -> tuple[Fraction, float]:
    """(ρ*, α): the largest float ρ* (as a Fraction) whose outward-rounded conversion at δ,
    evaluated at the order α, is at most ε. Every ρ <= ρ* has the same bound at α at most ε
    (it is increasing in ρ), so every list of events with Σρ <= ρ* is (ε, δ)-DP and is
    reported so. (0, 2.0) when ε or δ is not positive."""
    eps, delta = Fraction(eps), Fraction(delta)
    if eps <= 0 or delta <= 0:
        return Fraction(0), 2.0
    if delta >= 1:
        raise ValueError(f"delta must be below 1, got {float(delta)!r}")
    target = eps
    ft, fd = float_down(target), float(delta)
    from matmech.privacy.calibration import zcdp_to_approx_dp

    def g(log_rho):
        return zcdp_to_approx_dp(math.exp(log_rho), fd) - ft

    # ε ≈ ρ + 2 sqrt(ρ ln(1/δ)) (Bun and Steinke 2016): a bracket around it, widened
    start = math.log(max(ft * ft / (4.0 * (math.log(1.0 / fd) + ft)), 1e-300))
    lo, hi = start - 1.0, start + 1.0
    for _ in range(400):
        if g(lo) <= 0 or lo < -690:
            break
        lo -= 2.0
    for _ in range(400):
        if g(hi) > 0 or hi > 690:
            break
        hi += 2.0
    if not g(lo) <= 0 < g(hi):
        raise ValueError(
            f"no zCDP capacity for a total of eps={float(eps)!r} at delta={float(delta)!r}"
        )
    from scipy import optimize

    rho = math.exp(optimize.brentq(g, lo, hi, xtol=1e-14, rtol=1e-14))
    alpha = _best_alpha(rho, fd)
    for _ in range(10_000):  # certify with the outward-rounded conversion, stepping down
        if rho <= 0 or _eps_at(Fraction(rho), delta, alpha) <= target:
            break
        rho = math.nextafter(rho * (1 - 1e-13), 0.0)
    return Fraction(max(rho, 0.0)), alpha


# ------------------------------------------------------------------------- the accountants


@dataclass(frozen=True)
class _Parts:
    """A list of events read every way an accountant needs: the exact basic sums (None when
    an event declares no (ε, δ)), the summed ρ of the events that have one, and the
    (ε, δ) of those that do not."""

    basic: tuple[Fraction, Fraction] | None
    rho: Fraction
    op_eps: Fraction
    op_delta: Fraction
    leaves: tuple


def _parts(leaves: Sequence[Event], *, rho_too: bool = True) -> _Parts:
    be = bd = rho = oe = od = Fraction(0)
    basic_ok = True
    for ev in leaves:
        try:
            e, d = ev.approx_dp()
            be, bd = be + e, bd + d
        except ValueError:
            basic_ok = False
        if not rho_too:
            continue
        r = ev.zcdp()
        if r is None:
            e, d = ev.approx_dp()
            oe, od = oe + e, od + d
        else:
            rho += r
    return _Parts((be, bd) if basic_ok else None, rho, oe, od, tuple(leaves))


def _basic_fits(total: Total, p: _Parts) -> bool:
    return (
        total.eps is not None
        and p.basic is not None
        and p.basic[0] <= total.eps
        and p.basic[1] <= total.delta
    )


def _zcdp_cap(total: Total, p: _Parts) -> tuple[Fraction, tuple[float, ...]]:
    """(the ρ the events with a ρ may use, the order its bound was certified at): the
    declared ρ, or the capacity of what the events without one leave of (ε, δ)."""
    if total.rho is not None:
        return (total.rho if p.op_eps == 0 and p.op_delta == 0 else Fraction(-1)), ()
    if total.eps is None:  # a Total declares eps or rho (Total's invariant)
        raise ValueError("a budget total declares eps or rho; this one declares neither")
    e, d = total.eps - p.op_eps, total.delta - p.op_delta
    if e < 0 or d < 0:
        return Fraction(-1), ()
    cap, alpha = zcdp_capacity(e, d)
    return cap, (alpha,)


class Accountant:
    """The interface (and the ``"basic"`` accountant): exact sums of the declared (ε, δ)."""

    name = "basic"

    def parts(self, leaves: Sequence[Event]) -> _Parts:
        """``leaves`` read as this accountant needs them (the basic sums; ρ too below)."""
        return _parts(leaves, rho_too=self.name != "basic")

    def check_total(self, total: Total) -> None:
        if total.eps is None:
            raise ValueError(
                f"a budget declared in rho is accounted in zCDP, not by the {self.name!r} accountant"
            )

    def fits(self, total: Total, p: _Parts) -> bool:
        """Whether every event of ``p`` together fits ``total`` (exactly)."""
        return _basic_fits(total, p)

    def epsilon(self, p: _Parts, delta: Fraction, total: Total | None = None) -> float:
        """An upper bound on the ε spent at δ (inf when no bound at that δ); ``total``: the
        budget's, whose certified orders are tried too."""
        if p.basic is None or p.basic[1] > delta:
            return math.inf
        return decimal_up(p.basic[0])  # exact sums, rounded once (up, as a decimal)

    def spent(self, total: Total, p: _Parts) -> tuple[float, float]:
        """The (ε, δ) reported as spent (basic: the exact sums rounded once to float)."""
        if p.basic is None:
            return (math.inf, float(total.delta))
        return (decimal_up(p.basic[0]), decimal_up(p.basic[1]))

    def remaining(self, total: Total, p: _Parts) -> tuple[float, float]:
        """(ε, δ) a further release may still use."""
        if total.eps is None or p.basic is None:
            return (0.0, 0.0)
        return (
            float(max(total.eps - p.basic[0], Fraction(0))),
            float(max(total.delta - p.basic[1], Fraction(0))),
        )

    def remaining_rho(self, total: Total, p: _Parts) -> float | None:
        """The zCDP ρ a further release may use (None: this accountant has no ρ)."""
        return None


class ZcdpAccountant(Accountant):
    """``"zcdp"``: ρ adds (module docstring); never charges more than ``"basic"``."""

    name = "zcdp"

    def check_total(self, total: Total) -> None:
        if total.eps is None and not 0 < total.delta < 1:
            raise ValueError("a budget in rho needs a delta in (0, 1) to report epsilon at")

    def fits(self, total, p):
        return _basic_fits(total, p) or p.rho <= _zcdp_cap(total, p)[0]

    def _zcdp_eps(self, p: _Parts, delta: Fraction, alphas=()) -> float:
        d = delta - p.op_delta
        if d < 0 or (d == 0 and p.rho > 0):
            return math.inf
        b = _zcdp_bound(p.rho, d, alphas=alphas)
        return math.inf if b == math.inf else decimal_up(Fraction(b) + p.op_eps)

    def epsilon(self, p, delta, total: Total | None = None):
        alphas = _zcdp_cap(total, p)[1] if total is not None and delta == total.delta else ()
        return min(super().epsilon(p, delta), self._zcdp_eps(p, Fraction(delta), alphas))

    def spent(self, total, p):
        z = self._zcdp_eps(p, total.delta, _zcdp_cap(total, p)[1])
        b = p.basic if total.eps is not None else None
        # compared exactly: the sums' δ may be the total's δ, whose float is above its decimal
        if b is not None and b[1] <= total.delta and (z == math.inf or b[0] <= exact(z)):
            return super().spent(total, p)
        if p.rho == 0:
            return (decimal_up(p.op_eps), decimal_up(p.op_delta))
        return (z, float(total.delta))

    def remaining_rho(self, total, p):
        left = _zcdp_cap(total, p)[0] - p.rho
        return float_down(left) if left > 0 else 0.0

    def remaining(self, total, p):
        basic = super().remaining(total, p) if total.eps is not None else (0.0, 0.0)
        left = self.remaining_rho(total, p)
        d = total.delta - p.op_delta
        if not left or d <= 0:
            return basic
        from matmech.privacy.calibration import zcdp_to_approx_dp

        z = zcdp_to_approx_dp(left, float(d)) * (1 - 1e-9)  # inner: a release at it fits
        return basic if basic[0] >= z else (z, float(d))


class PldAccountant(ZcdpAccountant):
    """``"pld"``: numerical privacy loss distributions (module docstring)."""

    name = "pld"

    def check_total(self, total):
        if total.eps is None:
            raise ValueError("a budget declared in rho is accounted in zCDP: use accountant='zcdp'")
        _dp_accounting()

    def fits(self, total, p):
        if super().fits(total, p):
            return True
        if total.eps is None:  # refused by check_total: a budget in rho is not accounted here
            raise ValueError("the 'pld' accountant needs a budget declared in (eps, delta)")
        return _pld_epsilon(p.leaves, total.delta) <= total.eps

    def epsilon(self, p, delta, total=None):
        z = super().epsilon(p, delta, total)
        if not p.leaves:
            return z
        e = _pld_epsilon(p.leaves, delta)
        return min(z, decimal_up(Fraction(e)) if math.isfinite(e) else math.inf)

    def spent(self, total, p):
        base = super().spent(total, p)
        if not p.leaves:
            return base
        e = self.epsilon(p, total.delta, total)
        return base if base[0] <= e else (e, float(total.delta))


#: Every accountant by name.
ACCOUNTANTS: dict[str, Accountant] = {
    a.name: a for a in (Accountant(), ZcdpAccountant(), PldAccountant())
}


def accountant_for(name) -> Accountant:
    """The registered accountant called ``name`` (ValueError naming the choices)."""
    return ACCOUNTANTS[choice(name, "accountant", sorted(ACCOUNTANTS))]


# ------------------------------------------------------------------------- PLD


def _dp_accounting():
    try:
        from dp_accounting.pld import privacy_loss_distribution as pld
    except ImportError:
        raise ImportError(
            "the 'pld' accountant needs Google's dp_accounting: pip install 'matmech-dp[pld]'"
        ) from None
    return pld


def pld_available() -> bool:
    """Whether ``dp_accounting`` (the ``pld`` extra) can be imported."""
    try:
        _dp_accounting()
    except ImportError:
        return False
    return True


def _pld_key(ev: Event):
    """A hashable description of ``ev``'s PLD, or None for an event accounted in zCDP."""
    if isinstance(ev, DiscreteGaussian):
        if ev.grid is None or ev.unit_shifts is None or ev.sigma / ev.grid > _PLD_MAX_SIGMA_STEPS:
            return None
        return ("dg", ev.sigma / ev.grid, ev.unit_shifts)
    if isinstance(ev, Gaussian):
        return ("g", ev.sigma / ev.sensitivity, 1)
    if isinstance(ev, DiscreteLaplace) and ev.unit_shifts is not None:
        return ("dl", ev.grid / ev.scale, ev.unit_shifts)
    if isinstance(ev, Concentrated):
        return None  # ρ-zCDP with its noise unknown: accounted in zCDP
    e, d = ev.approx_dp()  # the tight privacy-loss pair of an (ε, δ) guarantee
    return ("dp", float_up(e), float_up(d))


def _pld_of(key):
    pld = _dp_accounting()
    kind, a, b = key
    if kind == "dg":
        one = pld.from_discrete_gaussian_mechanism(a, sensitivity=1)
        return one if b == 1 else one.self_compose(b)
    if kind == "dl":
        one = pld.from_discrete_laplace_mechanism(a, sensitivity=1)
        return one if b == 1 else one.self_compose(b)
    if kind == "g":
        return pld.from_gaussian_mechanism(a, sensitivity=1)
    from dp_accounting.pld.common import DifferentialPrivacyParameters

    return pld.from_privacy_parameters(DifferentialPrivacyParameters(a, b))


def _pld_epsilon(leaves: Sequence[Event], delta) -> float:
    """ε at δ of the PLD part composed, plus the zCDP part by sums (module docstring)."""
    keys: Counter = Counter()
    rho = Fraction(0)
    for ev in leaves:
        k = _pld_key(ev)
        if k is None:
            rho += ev.zcdp() or 0
        else:
            keys[k] += 1
    return _pld_epsilon_of(tuple(sorted(keys.items())), rho, float(delta))


@functools.lru_cache(maxsize=16)
def _composed(keys: tuple):
    composed = None
    for k, n in keys:
        d = _pld_of(k)
        d = d if n == 1 else d.self_compose(n)
        composed = d if composed is None else composed.compose(d)
    return composed


@functools.lru_cache(maxsize=256)
def _pld_epsilon_of(keys: tuple, rho: Fraction, delta: float) -> float:
    if not keys:
        return zcdp_epsilon(rho, delta)
    composed = _composed(keys)

    def pld_eps(dl):
        e = float(composed.get_epsilon_for_delta(dl))
        return e * (1 + _PLD_MARGIN) if math.isfinite(e) else math.inf

    if rho == 0:
        return max(pld_eps(delta), 0.0)
    return min(pld_eps(s * delta) + zcdp_epsilon(rho, (1 - s) * delta) for s in _SPLITS)
