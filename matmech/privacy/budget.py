"""Privacy budgets: a declared total, the events charged to it, and an accountant.

A :class:`PrivacyBudget` holds a total (ε, δ) (or a zCDP ρ, :meth:`PrivacyBudget.from_rho`),
the privacy events every mechanism charged to it (:mod:`matmech.privacy.events`) and the
accountant that composes them (:mod:`matmech.privacy.accountant`): ``"basic"`` (exact sums
of (ε, δ), the default when δ = 0), ``"zcdp"`` (ρ adds, the default when δ > 0; never more
than the basic sums) or ``"pld"`` (numerical privacy loss distributions, the ``pld`` extra).
Every mechanism charges its events BEFORE drawing noise: the budget either records them or
raises :class:`BudgetExceededError` and changes nothing, by an exact rule. The same
interface is kept on disk by :class:`matmech.privacy.ledger.Ledger` (a subclass).

Amounts keep the exact convention of :func:`~matmech.privacy.params.exact`: a float means
its shortest decimal, so spending 0.1 and 0.2 of a 0.3 budget is allowed and anything more
refused, with no float drift.

:meth:`PrivacyBudget.split` carves what remains into shares (equal, or by weights): a share
is a budget whose total is its part of the parent (in ρ under ``"zcdp"``/``"pld"``, in
(ε, δ) under ``"basic"``), and every spend on it is charged through to the parent. A share
given as ``budget=`` with ``eps`` left out calibrates the release to itself
(:meth:`PrivacyBudget.target`): Gaussian noise to its ρ, pure-ε noise to ε = sqrt(2ρ).
"""

from __future__ import annotations

import math
import numbers
import sys
import threading
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Sequence

from matmech.privacy.accountant import Total, accountant_for, zcdp_epsilon
from matmech.privacy.events import ApproxDP, Composition, Event, float_down
from matmech.privacy.params import check_delta, check_eps, exact, real
from matmech.validate import integer


class BudgetExceededError(ValueError):
    """A spend would exceed the privacy budget; nothing was recorded.

    Parameters
    ----------
    message : str
        Says what was asked and what remains (never anything about the data).

    Returns
    -------
    BudgetExceededError
        A ``ValueError`` subclass.

    Raises
    ------
    BudgetExceededError
        Raised by :meth:`PrivacyBudget.spend` (and so by every mechanism) before any noise
        is drawn or data read.

    Examples
    --------
    >>> budget = PrivacyBudget(0.5)
    >>> try:
    ...     budget.spend(1.0)
    ... except BudgetExceededError:
    ...     print("refused", budget.spent)
    refused (0.0, 0.0)
    """


@dataclass(frozen=True)
class LedgerEntry:
    """One recorded spend: what it was for, its (ε, δ) (the sums of what its events were
    calibrated to) and its ``events``. A persistent :class:`~matmech.privacy.ledger.Ledger`
    also records the UTC ``time`` and optional ``spec`` / ``data`` fingerprints (None for an
    in-memory :class:`PrivacyBudget`)."""

    what: str
    eps: float
    delta: float
    time: str | None = None
    spec: str | None = None
    data: str | None = None
    events: tuple = field(default=(), compare=False)


@dataclass(frozen=True)
class Target:
    """What a release calibrates its noise to when it takes ``eps`` from a share
    (:meth:`PrivacyBudget.target`): ``eps`` and ``delta`` (δ = 0: pure ε), and ``rho`` when the
    Gaussian noise is calibrated to a zCDP ρ directly ((ε, δ) then the guarantee it implies)."""

    eps: float
    delta: float
    rho: float | None = None


def default_accountant(delta) -> str:
    """``"zcdp"`` for a total with δ > 0, ``"basic"`` for pure ε (δ = 0)."""
    return "zcdp" if delta > 0 else "basic"


def _as_events(events) -> tuple[Event, ...]:
    evs = (events,) if isinstance(events, Event) else tuple(events)
    if not evs:
        raise ValueError("nothing to charge: the list of events is empty")
    for e in evs:
        if not isinstance(e, Event):
            raise TypeError(
                f"events must be matmech.privacy.events.Event instances, got {type(e).__name__}"
            )
    return evs


def entry_amounts(events: Sequence[Event], delta) -> tuple[Fraction, Fraction]:
    """The exact (ε, δ) a spend of ``events`` shows: the sums of what they were calibrated
    to, or, when one declares none, the zCDP ε of them all at ``delta`` (the budget's δ: a
    guarantee they have on their own)."""
    comp = Composition(tuple(events))
    try:
        return comp.approx_dp()
    except ValueError:
        rho = comp.zcdp() or Fraction(0)
        return exact(zcdp_epsilon(rho, delta)), Fraction(delta)


class PrivacyBudget:
    """A total privacy budget, the events charged to it and the accountant composing them.

    Call :meth:`spend` (an opaque (ε, δ)) or :meth:`spend_events` BEFORE drawing noise: it
    either records the spend or raises :class:`BudgetExceededError` and changes nothing.
    Thread-safe.

    This class is also the interface every budget keeps (release, measure and select accept
    any instance). A subclass that stores spends elsewhere (the persistent
    :class:`~matmech.privacy.ledger.Ledger`) sets ``_total`` and ``_acct`` and overrides the
    two storage hooks :meth:`_charge` and :meth:`_entries`; the accounting stays here.

    Parameters
    ----------
    eps : float
        The total ε (any positive finite number).
    delta : float, default 0.0
        The total δ.
    accountant : {"basic", "zcdp", "pld"}, optional
        How events compose (:mod:`matmech.privacy.accountant`); default ``"zcdp"`` when
        δ > 0, ``"basic"`` when δ = 0.

    Returns
    -------
    PrivacyBudget
        An empty budget of that total.

    Raises
    ------
    ValueError
        A non-positive or non-finite ε, δ outside [0, 1), or an unknown accountant.
    TypeError
        ε or δ not a real number.
    BudgetExceededError
        From :meth:`spend`, when a spend would exceed the total.

    Examples
    --------
    >>> budget = PrivacyBudget(1.0)
    >>> _ = budget.spend(0.4, what="first release")
    >>> budget.remaining, budget.can_spend(0.7), budget.accountant
    ((0.6, 0.0), False, 'basic')
    """

    def __init__(self, eps: float, delta: float = 0.0, *, accountant: str | None = None) -> None:
        check_eps(eps)
        check_delta(delta)
        self._init(
            Total(exact(eps), exact(delta)),
            default_accountant(delta) if accountant is None else accountant,
        )

    def _init(self, total: Total, accountant: str) -> None:
        self._acct = accountant_for(accountant)
        self._acct.check_total(total)
        self._total = total
        self._charged: list[LedgerEntry] = []
        self._lock = threading.Lock()

    @classmethod
    def from_rho(cls, rho: float, delta: float) -> PrivacyBudget:
        """A budget declared in zCDP: total ``rho`` (ρ-zCDP, Bun and Steinke 2016), reported
        as ε at ``delta`` (in (0, 1)); accountant ``"zcdp"``. Opaque (ε, δ > 0) spends have
        no ρ and are refused.

        Examples
        --------
        >>> b = PrivacyBudget.from_rho(0.5, 1e-6)
        >>> b.remaining_rho, round(b.total[0], 3)
        (0.5, 5.222)
        """
        r = real(rho, "rho")
        if not (math.isfinite(r) and r > 0):
            raise ValueError(f"rho must be a positive finite number, got {rho!r}")
        d = check_delta(delta, positive=True)
        b = cls.__new__(cls)
        b._init(Total(None, exact(d), exact(r)), "zcdp")
        return b

    # -- storage hooks (in memory here) -------------------------------------------------------

    def _entries(self) -> tuple[LedgerEntry, ...]:
        """Every recorded spend, in order."""
        with self._lock:
            return tuple(self._charged)

    def _charge(self, entry: LedgerEntry) -> LedgerEntry:
        """Atomically: refuse (raise :meth:`_refusal`) if ``entry``'s events do not fit
        with everything already charged, else record it."""
        with self._lock:
            self._check_fits(self._charged, entry)
            self._charged.append(entry)
            return entry

    # -- accounting ----------------------------------------------------------------------------

    def _parts(self, entries, extra: Sequence[Event] = ()):
        leaves = [leaf for e in entries for ev in e.events for leaf in ev.leaves()]
        leaves += [leaf for ev in extra for leaf in ev.leaves()]
        return self._acct.parts(leaves)

    def _check_fits(self, entries, entry: LedgerEntry) -> None:
        if not self._acct.fits(self._total, self._parts(entries, entry.events)):
            raise self._refusal(entry, entries)

    def _refusal(self, entry: LedgerEntry, entries) -> BudgetExceededError:
        p = self._parts(entries)
        rem = self._acct.remaining(self._total, p)
        rho = self._acct.remaining_rho(self._total, p)
        label = f" for {entry.what!r}" if entry.what else ""
        asked = f"(eps={entry.eps!r}, delta={entry.delta!r})"
        evs = Composition(tuple(entry.events))
        if evs.zcdp() is not None and self._acct.name != "basic":
            rho_asked = min(evs.zcdp() or 0, Fraction(sys.float_info.max))  # float at most
            asked += f" (rho={float(rho_asked)!r})"
        elif self._total.rho is not None:
            asked += " (an approximate-DP event without a zCDP rho: a budget in rho cannot take it)"
        left = f"(eps={rem[0]!r}, delta={rem[1]!r})" + ("" if rho is None else f", rho={rho!r}")
        t = self.total
        return BudgetExceededError(
            f"cannot spend {asked}{label}: only {left} remains of "
            f"(eps={t[0]!r}, delta={t[1]!r}) under the {self._acct.name!r} accountant"
        )

    def _entry(self, events, what) -> LedgerEntry:
        if not isinstance(what, str):
            raise TypeError(f"what must be a str, got {type(what).__name__}: {what!r}")
        evs = _as_events(events)
        if self._acct.name == "basic":
            Composition(evs).approx_dp()  # raises for an event without a declared (ε, δ)
        e, d = entry_amounts(evs, self._total.delta)
        return LedgerEntry(what, float(e), float(d), events=evs)

    def spend_events(self, events, *, what: str = "") -> LedgerEntry:
        """Charge privacy ``events`` (one event or a sequence) for ``what``: raise
        BudgetExceededError, leaving the budget unchanged, if they do not fit under the
        accountant."""
        return self._charge(self._entry(events, what))

    def can_spend_events(self, events) -> bool:
        """Whether ``events`` fit in what is left (records nothing)."""
        entry = self._entry(events, "")
        p = self._parts(self._entries(), entry.events)
        return self._acct.fits(self._total, p)

    def spend(self, eps, delta=0.0, *, what: str = "") -> LedgerEntry:
        """Record an opaque (eps, delta)-DP spend for ``what`` (an
        :class:`~matmech.privacy.events.ApproxDP` event: pure ε enters zCDP as ε²/2, δ > 0 is
        composed by sums); raise BudgetExceededError, leaving the budget unchanged, if it does
        not fit."""
        if not isinstance(what, str):
            raise TypeError(f"what must be a str, got {type(what).__name__}: {what!r}")
        return self.spend_events((self._opaque(eps, delta),), what=what)

    def can_spend(self, eps, delta=0.0) -> bool:
        """Whether an opaque (eps, delta) fits in what is left (records nothing). The amounts
        are validated as :meth:`spend` validates them: (0, 0), NaN or a negative ε is refused."""
        return self.can_spend_events((self._opaque(eps, delta),))

    @staticmethod
    def _opaque(eps, delta) -> ApproxDP:
        check_eps(eps, allow_zero=True)
        check_delta(delta)
        # the exact amounts the caller meant (0.1 is 1/10; a Fraction as it is)
        return ApproxDP(exact(eps), exact(delta))

    # -- what is spent and what remains --------------------------------------------------------

    @property
    def accountant(self) -> str:
        """The accountant's name (``"basic"``, ``"zcdp"`` or ``"pld"``)."""
        self._entries()  # a ledger reads the accountant in force with its rows
        return self._acct.name

    @property
    def total(self) -> tuple[float, float]:
        """(eps, delta) of the whole budget (a budget in ρ: ε at its δ, rounded up)."""
        t = self._total
        if t.eps is None:
            return (zcdp_epsilon(t.rho, t.delta), float(t.delta))
        return (float(t.eps), float(t.delta))

    @property
    def total_rho(self) -> float | None:
        """The zCDP ρ of the whole budget: declared, or the capacity of (ε, δ) under
        ``"zcdp"``/``"pld"``; None under ``"basic"``."""
        self._entries()  # a ledger reads the accountant in force with its rows
        return self._acct.remaining_rho(self._total, self._acct.parts(()))

    @property
    def spent(self) -> tuple[float, float]:
        """(eps, delta) spent so far under the accountant (exact sums under ``"basic"``; the
        smaller of the sums and the converted composition otherwise), rounded up."""
        p = self._parts(self._entries())  # first: a ledger reads its accountant with its rows
        return self._acct.spent(self._total, p)

    @property
    def remaining(self) -> tuple[float, float]:
        """(eps, delta) still available: under ``"basic"`` total − spent; under ``"zcdp"`` /
        ``"pld"`` the larger of that and the ε at the remaining δ of the remaining ρ (a
        Gaussian release calibrated to it fits; pure-ε noise fits at sqrt(2·remaining_rho))."""
        p = self._parts(self._entries())  # first: a ledger reads its accountant with its rows
        return self._acct.remaining(self._total, p)

    @property
    def remaining_rho(self) -> float | None:
        """The zCDP ρ still available (None under ``"basic"``), rounded down."""
        p = self._parts(self._entries())  # first: a ledger reads its accountant with its rows
        return self._acct.remaining_rho(self._total, p)

    def epsilon(self, delta=None) -> float:
        """The ε spent at ``delta`` (default: the total's δ) under the accountant, an upper
        bound rounded up; inf when the events give no bound at that δ."""
        d = self._total.delta if delta is None else exact(check_delta(delta))
        p = self._parts(self._entries())
        return self._acct.epsilon(p, d, self._total)

    def spent_under(self, accountant: str) -> tuple[float, float]:
        """(eps, delta) these events would be reported as spent under another accountant
        (a view: nothing changes; a budget in ρ has no ``"basic"`` view)."""
        acct = accountant_for(accountant)
        if self._total.eps is None and acct.name != "zcdp":
            raise ValueError(f"a budget in rho has no {acct.name!r} view")
        return acct.spent(self._total, acct.parts(self._parts(self._entries()).leaves))

    @property
    def ledger(self) -> tuple[LedgerEntry, ...]:
        """Every recorded spend, in order."""
        return self._entries()

    @property
    def events(self) -> tuple[Event, ...]:
        """Every event charged, in order."""
        return tuple(ev for e in self._entries() for ev in e.events)

    # -- shares ---------------------------------------------------------------------------------

    def split(self, parts) -> tuple[Share, ...]:
        """What remains, split into shares: ``parts`` an int k (k equal shares) or a sequence
        of positive weights. A share's total is its part of the remainder now (ρ under
        ``"zcdp"``/``"pld"``, rounded down; (ε, δ) exactly under ``"basic"``); a spend on it
        is refused beyond that and is charged through to this budget, so the shares together
        meet the total exactly. Shares reserve nothing: other spends on this budget still
        compete with them.

        Examples
        --------
        >>> shares = PrivacyBudget(1.0, 1e-6).split(10)
        >>> len(shares), round(shares[0].remaining_rho, 6)
        (10, 0.002436)
        """
        weights = _weights(parts)
        p = self._parts(self._entries())
        ws = sum(weights, Fraction(0))
        out = []
        if self._acct.name == "basic":
            used = p.basic or (Fraction(0), Fraction(0))
            e = max((self._total.eps or Fraction(0)) - used[0], Fraction(0))
            d = max(self._total.delta - used[1], Fraction(0))
            if e == 0:
                raise BudgetExceededError("nothing remains of the budget to split")
            for i, w in enumerate(weights):
                out.append(Share(self, Total(e * w / ws, d * w / ws), "basic", i, len(weights)))
        else:
            rho = Fraction(self._acct.remaining_rho(self._total, p) or 0)
            d = self._total.delta - p.op_delta
            if rho == 0 or d <= 0:
                raise BudgetExceededError(
                    "no zCDP rho remains of the budget to split"
                    + (" (its delta is used up by approximate-DP spends)" if d <= 0 else "")
                )
            for i, w in enumerate(weights):
                share_rho = Fraction(float_down(rho * w / ws))
                if share_rho == 0:
                    raise ValueError(f"share {i + 1}'s rho rounds to 0; use fewer shares")
                out.append(Share(self, Total(None, d * w / ws, share_rho), "zcdp", i, len(weights)))
        return tuple(out)

    def target(self, *, delta=None) -> Target:
        """What a release that leaves out ``eps`` calibrates to: all that remains of this
        share. Gaussian noise (``delta`` None and a share with δ > 0) to its ρ (or its (ε, δ)
        under ``"basic"``); pure-ε noise (``delta=0``, or a pure-ε share) to its ε, which is
        sqrt(2ρ) for a share in ρ. Only a :class:`Share` calibrates a release: leaving ``eps``
        out never spends a whole budget by omission."""
        raise TypeError(
            "eps can be left out only when budget= is a share (budget.split(k)); pass eps "
            "(and delta) explicitly"
        )

    def __repr__(self) -> str:
        s, t = self.spent, self.total
        return (
            f"{type(self).__name__}(spent=(eps={s[0]!r}, delta={s[1]!r}) of "
            f"total=(eps={t[0]!r}, delta={t[1]!r}), {self._acct.name}, {len(self.ledger)} spends)"
        )


def _weights(parts) -> list[Fraction]:
    if isinstance(parts, numbers.Integral) and not isinstance(parts, bool):
        k = integer(parts, "parts", min=1, max=10**6)
        return [Fraction(1)] * k
    ordered = isinstance(parts, Sequence) or type(parts).__name__ == "ndarray"
    if isinstance(parts, (str, bytes)) or not ordered:
        raise TypeError(
            f"parts must be a number of shares or a sequence of weights, got {type(parts).__name__}"
        )
    ws = []
    for i, w in enumerate(parts):
        v = real(w, f"weight {i}")
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"weight {i} must be a positive finite number, got {w!r}")
        ws.append(exact(v))
    if not ws:
        raise ValueError("parts must hold at least one weight")
    return ws


class Share(PrivacyBudget):
    """A part of a parent budget (:meth:`PrivacyBudget.split`): its own total and events,
    every spend charged through to the parent (which may still refuse it)."""

    def __init__(self, parent: PrivacyBudget, total: Total, accountant: str, index: int, of: int):
        self._parent = parent
        self._index, self._of = index, of
        self._init(total, accountant)

    @property
    def parent(self) -> PrivacyBudget:
        """The budget this share is charged through to."""
        return self._parent

    def can_spend_events(self, events) -> bool:
        """Whether ``events`` fit in this share and in its parent (records nothing)."""
        return super().can_spend_events(events) and self._parent.can_spend_events(events)

    def _charge(self, entry: LedgerEntry) -> LedgerEntry:
        with self._lock:
            self._check_fits(self._charged, entry)
            what = f"share {self._index + 1}/{self._of}" + (f": {entry.what}" if entry.what else "")
            charged = self._parent.spend_events(entry.events, what=what)
            self._charged.append(entry)
            return charged

    def target(self, *, delta=None) -> Target:
        t = self._total
        p = self._parts(self._entries())
        if delta is not None:
            check_delta(delta)
            if delta != 0 and t.rho is not None:
                raise ValueError(
                    "a share in rho calibrates Gaussian noise to its rho: leave delta out (or 0 for pure eps)"
                )
        if t.rho is not None:
            rho = Fraction(self._acct.remaining_rho(t, p) or 0)
            if rho == 0:
                raise BudgetExceededError(f"nothing remains of share {self._index + 1}")
            if delta == 0:
                return Target(_decimal_at_most(lambda e: e * e / 2 <= rho, math.sqrt(2 * rho)), 0.0)
            d_ref = float_down(t.delta)
            return Target(zcdp_epsilon(rho, d_ref), d_ref, float(rho))
        used = p.basic or (Fraction(0), Fraction(0))
        e, d = (t.eps or Fraction(0)) - used[0], t.delta - used[1]
        if e <= 0:
            raise BudgetExceededError(f"nothing remains of share {self._index + 1}")
        eps = _decimal_at_most(lambda x: x <= e, float(e))
        if delta == 0 or d <= 0:
            return Target(eps, 0.0)
        if delta is not None:  # a δ asked for: at most what is left
            if exact(delta) > d:
                raise BudgetExceededError(
                    f"delta={delta!r} is more than share {self._index + 1} has left ({float(d)!r})"
                )
            return Target(eps, float(delta))
        return Target(eps, _decimal_at_most(lambda x: x <= d, float(d)))


def _decimal_at_most(ok, start: float) -> float:
    """The largest float at or below ``start`` whose decimal reading (:func:`exact`) passes
    ``ok`` (so that what a release charges stays within the share)."""
    f = start
    for _ in range(1000):
        if ok(exact(f)):
            return f
        f = math.nextafter(f, 0.0)
    raise ValueError("no float fits the share")  # pragma: no cover - a few steps always do


# ------------------------------------------------------------------------- helpers for callers


def privacy_target(eps, delta, budget) -> Target:
    """What a mechanism calibrates to: (``eps``, ``delta``) when ``eps`` is given (``delta``
    None is 0), else what remains of ``budget``, which must be a share
    (:meth:`PrivacyBudget.target`). Validates nothing else: the mechanism checks the numbers."""
    if eps is not None:
        return Target(eps, 0.0 if delta is None else delta)
    if budget is None:
        raise TypeError(
            "eps is required, or budget= a share (budget.split(k)) with eps left out to calibrate to it"
        )
    return check_budget(budget).target(delta=delta)


def plan_events(plan: Any) -> tuple[Event, ...]:
    """The events a plan charges: its ``events`` when it has them, else an opaque
    (``plan.eps``, ``plan.delta``) (composed by sums: correct, never tighter)."""
    evs = getattr(plan, "events", None)
    return tuple(evs) if evs else (ApproxDP(plan.eps, plan.delta),)


def check_budget(budget):
    """``budget`` if it is None or a :class:`PrivacyBudget` (a Ledger included), else TypeError."""
    if budget is not None and not isinstance(budget, PrivacyBudget):
        raise TypeError(
            f"budget must be a matmech.PrivacyBudget or None, got {type(budget).__name__}"
        )
    return budget


def check_events_affordable(budget, events, *, what):
    """Raise BudgetExceededError now if ``events`` do not fit: run before any check on private
    data, so that a caller with an exhausted budget sees the same error whatever the data is.
    The spend itself comes later, after every check, before the first noise."""
    if budget is not None and not budget.can_spend_events(events):
        budget.spend_events(events, what=what)  # refused: raises, saying what is left


def check_affordable(budget, eps, delta, *, what):
    """:func:`check_events_affordable` for an opaque (eps, delta)."""
    if budget is not None:
        check_events_affordable(budget, (ApproxDP(eps, delta),), what=what)
