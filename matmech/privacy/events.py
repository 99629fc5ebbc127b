"""Privacy events: what a measurement or a selection did, in one frozen vocabulary.

Every mechanism that reads private data describes the noise it drew (or the guarantee it
has) as an event; the accountant (:mod:`matmech.privacy.accountant`) turns a list of events
into the privacy spent, and the ledger stores them. An event states facts about the
mechanism, never about the data:

=======================  =====================================================================
:class:`Laplace`         continuous Laplace noise of scale b at L1 sensitivity Δ₁: ε = Δ₁/b
:class:`DiscreteLaplace` the discrete Laplace drawn on the lattice grid·ℤ (Canonne, Kamath,
                         Steinke 2020): ε = Δ₁/b, as for the continuous one
:class:`Gaussian`        continuous Gaussian noise σ at L2 sensitivity Δ₂: ρ = Δ₂²/(2σ²)-zCDP
                         (Bun and Steinke, TCC 2016, Prop. 1.6)
:class:`DiscreteGaussian` the discrete Gaussian drawn on grid·ℤ: ρ = Δ₂²/(2σ²)-zCDP (CKS 2020,
                         Thm. 14, for independent coordinates)
:class:`SparseVectorEvent` a sparse vector technique run of total ε (Lyu, Su, Li, VLDB 2017)
:class:`ExponentialMechanism` an exponential mechanism / noisy top-c run of total ε
:class:`Threshold`       the threshold mechanism of partition selection, (ε, δ)
:class:`Concentrated`    a ρ-zCDP mechanism whose noise is fixed later (its plan calibrated
                         it to ρ), e.g. a measurement whose strategy follows a selection
:class:`ApproxDP`        an opaque (ε, δ)-DP mechanism (``budget.spend(eps, delta)``)
:class:`Stream`          a continual release: its factorization, steps and per-step noise
:class:`Composition`     several events charged together
=======================  =====================================================================

Each event has two readings: :meth:`Event.approx_dp` is the (ε, δ) it was calibrated to (what
the ``"basic"`` accountant sums, as matmech always has: a float means its shortest decimal,
:func:`~matmech.privacy.params.exact`), and :meth:`Event.zcdp` its zCDP ρ, or None for an
approximate-DP event without one. ρ is the exact rational of the floats, rounded *up* to the
nearest float, so sums of ρ are exact dyadic fractions and never below the truth. Pure ε
events enter zCDP as ε²/2 (Bun and Steinke 2016, Prop. 1.4).

``unit_shifts`` (discrete noise only): when every column of the measured operator has
entries in {0, ±1} on the lattice (identity, interval trees, marginals, add/remove
neighbours), a neighbour moves at most ``unit_shifts`` coordinates by one lattice step; the
privacy loss is then at most that of ``unit_shifts`` composed one-step mechanisms (a column
with fewer non-zeros is their marginal, a post-processing), which the ``"pld"`` accountant
evaluates exactly for the noise drawn. None: no such structure is claimed.
"""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass, field, fields
from fractions import Fraction
from typing import Any, ClassVar

from matmech.privacy.params import exact
from matmech.validate import integer, positive_real, real


#: The largest float, exactly.
_FLOAT_MAX = Fraction(sys.float_info.max)


def float_up(q: Fraction) -> float:
    """The smallest float >= q (q finite, non-negative)."""
    f = float(q)
    if Fraction(f) < q:
        f = math.nextafter(f, math.inf)
    return f


def float_down(q: Fraction) -> float:
    """The largest float <= q (q non-negative)."""
    f = float(q)
    if Fraction(f) > q:
        f = math.nextafter(f, 0.0)
    return f


def decimal_up(q: Fraction) -> float:
    """The smallest float whose decimal reading (:func:`~matmech.privacy.params.exact`, its
    shortest repr: what a float means to a budget) is >= q: how a spent ε is reported, so that
    a figure at most a declared total never prints above it (q finite, non-negative)."""
    f = float_down(q)
    while exact(f) < q:
        f = math.nextafter(f, math.inf)
    return f


# ------------------------------------------------------------------------- validation


def _eps(v, name: str = "eps", *, allow_zero: bool = False) -> float:
    x = real(v, name)
    if not math.isfinite(x) or x < 0 or (x == 0 and not allow_zero):
        raise ValueError(f"{name} must be a positive finite number, got {v!r}")
    return x


def _delta(v, name: str = "delta", *, positive: bool = False) -> float:
    x = real(v, name)
    if not (0 < x < 1 if positive else 0 <= x < 1):
        raise ValueError(f"{name} must be in {'(0, 1)' if positive else '[0, 1)'}, got {v!r}")
    return x


def _grid(v) -> float:
    x = positive_real(v, "grid")
    m, _ = math.frexp(x)
    if m != 0.5:
        raise ValueError(f"grid must be a power of two (the sampler's lattice), got {v!r}")
    return x


def _shifts(v) -> int | None:
    return None if v is None else integer(v, "unit_shifts", min=1, max=2**53)


@dataclass(frozen=True)
class Event:
    """The base of every privacy event (frozen dataclasses; see the module docstring)."""

    kind: ClassVar[str] = ""

    def approx_dp(self) -> tuple[Fraction, Fraction]:
        """The (ε, δ) this event was calibrated to, exactly (the ``"basic"`` charge)."""
        raise NotImplementedError

    def zcdp(self) -> Fraction | None:
        """Its zCDP ρ rounded up to a float (as a Fraction), or None for an approximate-DP
        event that has none."""
        raise NotImplementedError

    def leaves(self) -> tuple[Event, ...]:
        """The events an accountant composes (a composition's parts, a stream's noise)."""
        return (self,)

    def to_dict(self) -> dict:
        """A JSON-ready dict (``kind`` and the fields; floats round-trip exactly)."""
        out: dict[str, Any] = {"kind": self.kind}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Event):
                v = v.to_dict()
            elif isinstance(v, tuple):
                v = [e.to_dict() for e in v]
            elif isinstance(v, Fraction):
                v = f"{v.numerator}/{v.denominator}"
            out[f.name] = v
        return out


def _pure_rho(eps: float | Fraction) -> Fraction:
    q = exact(eps) ** 2 / 2
    return Fraction(float_up(q)) if q <= _FLOAT_MAX else q  # exact beyond the float range


def _gauss_rho(sigma: float, sensitivity: float) -> Fraction:
    return Fraction(float_up(Fraction(sensitivity) ** 2 / (2 * Fraction(sigma) ** 2)))


def _declared_eps(eps, scale: float, sensitivity: float) -> float:
    """The ε a Laplace event declares: Δ₁/b rounded up when not given; a given ε must be at
    least Δ₁/b (a smaller one would under-charge the noise)."""
    intrinsic = Fraction(sensitivity) / Fraction(scale)
    if eps is None:
        return float_up(intrinsic)
    e = _eps(eps)
    if exact(e) < intrinsic:
        raise ValueError(
            f"eps={eps!r} is below sensitivity/scale = {float(intrinsic)!r}: the noise does not give it"
        )
    return e


@dataclass(frozen=True)
class Laplace(Event):
    """Continuous Laplace noise of ``scale`` b at L1 ``sensitivity`` Δ₁: (Δ₁/b)-DP (Dwork,
    McSherry, Nissim, Smith 2006). ``eps``: the ε it was calibrated to (default Δ₁/b)."""

    scale: float
    sensitivity: float
    eps: float | None = field(default=None, kw_only=True)

    kind: ClassVar[str] = "laplace"

    def __post_init__(self):
        object.__setattr__(self, "scale", positive_real(self.scale, "scale"))
        object.__setattr__(self, "sensitivity", positive_real(self.sensitivity, "sensitivity"))
        object.__setattr__(self, "eps", _declared_eps(self.eps, self.scale, self.sensitivity))

    def approx_dp(self):
        return exact(self.eps), Fraction(0)

    def zcdp(self):
        return _pure_rho(exact(self.eps))


@dataclass(frozen=True)
class DiscreteLaplace(Laplace):
    """The discrete Laplace of ``scale`` b drawn on grid·ℤ (CKS 2020, Alg. 2) at L1
    ``sensitivity`` Δ₁ (a multiple of the grid): (Δ₁/b)-DP. ``unit_shifts``: module docstring."""

    grid: float = field(default=1.0, kw_only=True)
    unit_shifts: int | None = field(default=None, kw_only=True)

    kind: ClassVar[str] = "discrete_laplace"

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "grid", _grid(self.grid))
        object.__setattr__(self, "unit_shifts", _shifts(self.unit_shifts))


@functools.lru_cache(maxsize=4096)
def _cks_delta(rho: float, eps: float) -> float:
    """δ of ρ-zCDP at ε (CKS Cor. 13; cached: a ledger re-reads its events on every spend)."""
    from matmech.privacy.calibration import approx_dp_delta

    return approx_dp_delta(rho, eps)


def _check_declared_gaussian(ev) -> None:
    """(eps, delta) both given or both None; a declared pair must follow from ρ (CKS Cor. 13),
    up to the 1e-6 relative slack of two numerical inversions of the same conversion."""
    if (ev.eps is None) != (ev.delta is None):
        raise ValueError("a Gaussian event declares both eps and delta, or neither")
    if ev.eps is None:
        return
    object.__setattr__(ev, "eps", _eps(ev.eps))
    object.__setattr__(ev, "delta", _delta(ev.delta, positive=True))
    r = float(ev.zcdp())
    if 1e-4 <= ev.eps <= 100 and _cks_delta(r, ev.eps) > ev.delta * (1 + 1e-6):
        raise ValueError(
            f"a Gaussian with rho={r!r} is not (eps={ev.eps!r}, delta={ev.delta!r})-DP "
            "(Canonne, Kamath, Steinke 2020, Cor. 13): the declared guarantee would under-charge it"
        )


def _declared_dp(ev, what: str):
    """The (ε, δ) a zCDP event ``ev`` declares it was calibrated to; ``what`` names it."""
    if ev.eps is None:
        raise ValueError(
            f"{what} declares no (eps, delta): it can be charged under the 'zcdp' or 'pld' "
            "accountant only"
        )
    return exact(ev.eps), exact(ev.delta)


@dataclass(frozen=True)
class Gaussian(Event):
    """Continuous Gaussian noise ``sigma`` at L2 ``sensitivity`` Δ₂: ρ = Δ₂²/(2σ²)-zCDP.
    ``eps``/``delta``: the (ε, δ) it was calibrated to (both or neither; the ``"basic"``
    accountant needs them)."""

    sigma: float
    sensitivity: float
    eps: float | None = field(default=None, kw_only=True)
    delta: float | None = field(default=None, kw_only=True)

    kind: ClassVar[str] = "gaussian"

    def __post_init__(self):
        object.__setattr__(self, "sigma", positive_real(self.sigma, "sigma"))
        object.__setattr__(self, "sensitivity", positive_real(self.sensitivity, "sensitivity"))
        self._extra()
        _check_declared_gaussian(self)

    def _extra(self):
        pass

    def approx_dp(self):
        return _declared_dp(self, f"{type(self).__name__}(sigma={self.sigma!r})")

    def zcdp(self):
        return _gauss_rho(self.sigma, self.sensitivity)


@dataclass(frozen=True)
class DiscreteGaussian(Gaussian):
    """The discrete Gaussian of parameter ``sigma`` drawn on grid·ℤ (CKS 2020) at L2
    ``sensitivity`` Δ₂: ρ = Δ₂²/(2σ²)-zCDP (CKS Thm. 14). ``unit_shifts``: module docstring.
    ``grid`` None: coordinates on lattices of their own, σ and Δ₂ in one common scale (the
    residual measurement: every residual's coordinates divided by their σ_T/σ); no
    ``unit_shifts`` then."""

    grid: float | None = field(default=1.0, kw_only=True)
    unit_shifts: int | None = field(default=None, kw_only=True)

    kind: ClassVar[str] = "discrete_gaussian"

    def _extra(self):
        object.__setattr__(self, "grid", None if self.grid is None else _grid(self.grid))
        object.__setattr__(self, "unit_shifts", _shifts(self.unit_shifts))
        if self.grid is None and self.unit_shifts is not None:
            raise ValueError("unit_shifts needs the lattice the noise is drawn on (grid=)")


@dataclass(frozen=True)
class _Pure(Event):
    eps: float

    def __post_init__(self):
        object.__setattr__(self, "eps", _eps(self.eps))

    def approx_dp(self):
        return exact(self.eps), Fraction(0)

    def zcdp(self):
        return _pure_rho(self.eps)


@dataclass(frozen=True)
class SparseVectorEvent(_Pure):
    """A sparse vector technique run (any variant matmech ships, free gaps included) of total
    ``eps`` (Lyu, Su, Li, VLDB 2017; Ding et al., PVLDB 2019): pure ε-DP."""

    kind: ClassVar[str] = "sparse_vector"


@dataclass(frozen=True)
class ExponentialMechanism(_Pure):
    """An exponential mechanism or noisy top-c run of total ``eps`` (McSherry and Talwar
    2007; Ding et al. 2019 for the gaps): pure ε-DP."""

    kind: ClassVar[str] = "exponential_mechanism"


@dataclass(frozen=True)
class Threshold(Event):
    """The threshold mechanism of partition selection (Desfontaines et al., PoPETs 2022):
    (``eps``, ``delta``)-DP with δ > 0; no zCDP ρ (composed by sums)."""

    eps: float
    delta: float

    kind: ClassVar[str] = "threshold"

    def __post_init__(self):
        object.__setattr__(self, "eps", _eps(self.eps))
        object.__setattr__(self, "delta", _delta(self.delta, positive=True))

    def approx_dp(self):
        return exact(self.eps), exact(self.delta)

    def zcdp(self):
        return None


@dataclass(frozen=True)
class Concentrated(Event):
    """A ``rho``-zCDP mechanism (Bun and Steinke 2016) whose noise is fixed later, calibrated
    to this ρ; ``eps``/``delta``: the (ε, δ) it was calibrated to (both or neither)."""

    rho: float
    eps: float | None = field(default=None, kw_only=True)
    delta: float | None = field(default=None, kw_only=True)

    kind: ClassVar[str] = "concentrated"

    def __post_init__(self):
        object.__setattr__(self, "rho", positive_real(self.rho, "rho"))
        if (self.eps is None) != (self.delta is None):
            raise ValueError("a Concentrated event declares both eps and delta, or neither")
        if self.eps is not None:
            object.__setattr__(self, "eps", _eps(self.eps))
            object.__setattr__(self, "delta", _delta(self.delta))

    def approx_dp(self):
        return _declared_dp(self, f"Concentrated(rho={self.rho!r})")

    def zcdp(self):
        return Fraction(self.rho)


@dataclass(frozen=True)
class ApproxDP(Event):
    """An opaque (``eps``, ``delta``)-DP mechanism, what ``budget.spend(eps, delta)`` charges:
    δ = 0 is pure ε (ρ = ε²/2); δ > 0 has no ρ and is composed by sums."""

    eps: float | Fraction
    delta: float | Fraction = 0.0

    kind: ClassVar[str] = "approx_dp"

    def __post_init__(self):
        e = _eps(self.eps, allow_zero=True)
        d = _delta(self.delta)
        if e == 0 and d == 0:
            raise ValueError(
                f"a spend must cost something: eps={self.eps!r} and delta={self.delta!r} are both 0"
            )
        # a Fraction is kept as it is (exact), anything else becomes its float
        object.__setattr__(self, "eps", self.eps if isinstance(self.eps, Fraction) else e)
        object.__setattr__(self, "delta", self.delta if isinstance(self.delta, Fraction) else d)

    def approx_dp(self):
        return exact(self.eps), exact(self.delta)

    def zcdp(self):
        return _pure_rho(self.eps) if self.delta == 0 else None


_NOISE = (Laplace, Gaussian)


@dataclass(frozen=True)
class Stream(Event):
    """A continual release (Denisov et al., NeurIPS 2022): ``steps`` steps of a
    ``factorization`` B·C of the prefix matrix whose noise is ``noise`` (a Laplace or
    Gaussian event whose sensitivity is C's largest column norm): the whole stream costs
    what that noise costs."""

    factorization: str
    steps: int
    noise: Event

    kind: ClassVar[str] = "stream"

    def __post_init__(self):
        if not isinstance(self.factorization, str) or not self.factorization:
            raise TypeError(f"factorization must be a non-empty string, got {self.factorization!r}")
        object.__setattr__(self, "steps", integer(self.steps, "steps", min=1, max=2**53))
        if not isinstance(self.noise, _NOISE):
            raise TypeError(
                f"a stream's noise must be a Laplace or Gaussian event, got {type(self.noise).__name__}"
            )

    def approx_dp(self):
        return self.noise.approx_dp()

    def zcdp(self):
        return self.noise.zcdp()

    def leaves(self):
        return self.noise.leaves()


@dataclass(frozen=True)
class Composition(Event):
    """Several ``events`` charged together (sequential composition; the accountant decides
    how they add up)."""

    events: tuple

    kind: ClassVar[str] = "composition"

    def __post_init__(self):
        evs = tuple(self.events) if not isinstance(self.events, Event) else (self.events,)
        for e in evs:
            if not isinstance(e, Event):
                raise TypeError(f"a composition holds events, got {type(e).__name__}")
        if not evs:
            raise ValueError("a composition needs at least one event")
        object.__setattr__(self, "events", evs)

    def approx_dp(self):
        pairs = [e.approx_dp() for e in self.events]
        return sum((p[0] for p in pairs), Fraction(0)), sum((p[1] for p in pairs), Fraction(0))

    def zcdp(self):
        rs = [r for e in self.events if (r := e.zcdp()) is not None]
        return sum(rs, Fraction(0)) if len(rs) == len(self.events) else None

    def leaves(self):
        return tuple(leaf for e in self.events for leaf in e.leaves())


#: Every event type by its ``kind`` (the ledger's JSON names them).
EVENT_KINDS: dict[str, type[Event]] = {
    c.kind: c
    for c in (
        Laplace,
        DiscreteLaplace,
        Gaussian,
        DiscreteGaussian,
        SparseVectorEvent,
        ExponentialMechanism,
        Threshold,
        Concentrated,
        ApproxDP,
        Stream,
        Composition,
    )
}


def event_from_dict(d: Any) -> Event:
    """The event a :meth:`Event.to_dict` made (validated as a new one would be)."""
    if not isinstance(d, dict) or d.get("kind") not in EVENT_KINDS:
        kind = d.get("kind") if isinstance(d, dict) else type(d).__name__
        raise ValueError(f"not a privacy event: kind {kind!r} (known: {sorted(EVENT_KINDS)})")
    cls = EVENT_KINDS[d["kind"]]
    args = {k: v for k, v in d.items() if k != "kind"}
    if cls is ApproxDP:  # exact amounts are stored as "p/q"
        for k in ("eps", "delta"):
            if isinstance(args.get(k), str):
                try:
                    args[k] = Fraction(args[k])
                except (ValueError, ZeroDivisionError):
                    raise ValueError(f"an approx_dp event's {k} is {args[k]!r}, not p/q") from None
    if cls is Stream:
        args["noise"] = event_from_dict(args.get("noise"))
    if cls is Composition:
        args["events"] = tuple(event_from_dict(e) for e in args.get("events") or ())
    try:
        return cls(**args)
    except TypeError as exc:
        raise ValueError(f"a {d['kind']} event with fields {sorted(args)}: {exc}") from None


def events_to_json(events) -> str:
    """A list of events as compact JSON (the ledger's ``events`` column)."""
    import json

    return json.dumps([e.to_dict() for e in events], separators=(",", ":"), allow_nan=False)


def events_from_json(text: str) -> tuple[Event, ...]:
    """The events :func:`events_to_json` wrote."""
    import json

    data = json.loads(text)
    if not isinstance(data, list):
        raise ValueError("a list of events was expected")
    return tuple(event_from_dict(d) for d in data)
