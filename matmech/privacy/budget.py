"""Privacy budget accounting: exact sequential composition, advanced composition.

Sequential composition (Dwork & Roth 2014, Thm. 3.16): running (εᵢ, δᵢ)-DP mechanisms on
the same data is (Σεᵢ, Σδᵢ)-DP. :class:`PrivacyBudget` keeps these sums exactly: each
amount is the ``Fraction`` of the float's shortest decimal repr, so spending 0.1 and 0.2
of a 0.3 budget is allowed, and anything more is refused, with no float drift. The same
interface is kept on disk by :class:`matmech.privacy.ledger.Ledger` (a subclass), so a budget
can outlive the process that spends it.

Advanced composition (Dwork, Rothblum, Vadhan, FOCS 2010, Thm. 3.3): k adaptively chosen
(ε, δ)-DP mechanisms are together (ε′, kδ + δ′)-DP for
ε′ = ε·sqrt(2k·ln(1/δ′)) + k·ε·(e^ε − 1).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

from matmech.privacy.params import check_delta, check_eps, exact, real
from matmech.validate import integer

__all__ = [
    "PrivacyBudget",
    "BudgetExceededError",
    "LedgerEntry",
    "ApproxDP",
    "advanced_composition",
    "per_step_eps",
    "check_budget",
    "check_affordable",
]


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
    """One recorded spend: what it was for and its (ε, δ). A persistent
    :class:`~matmech.privacy.ledger.Ledger` also records the UTC ``time`` and optional
    ``spec`` / ``data`` fingerprints (None for an in-memory :class:`PrivacyBudget`)."""

    what: str
    eps: float
    delta: float
    time: str | None = None
    spec: str | None = None
    data: str | None = None


class ApproxDP(NamedTuple):
    """An (ε, δ)-DP guarantee."""

    eps: float
    delta: float


# ------------------------------------------------------------------------- validation


def _check_k(k) -> int:
    return integer(k, "k", min=1, max=2**53)


def _check_slack(delta_slack) -> float:
    d = real(delta_slack, "delta_slack")
    if not 0 < d < 1:
        raise ValueError(f"delta_slack must be in (0, 1), got {delta_slack!r}")
    return d


# ------------------------------------------------------------------------- the budget


class PrivacyBudget:
    """A total (ε, δ) spent by sequential composition, with an exact ledger.

    Call :meth:`spend` BEFORE drawing noise: it either records the spend or raises
    :class:`BudgetExceededError` and changes nothing. Thread-safe.

    This class is also the interface every budget keeps (release, measure and select accept
    any instance): :meth:`spend`, :meth:`can_spend`, :attr:`total`, :attr:`spent`,
    :attr:`remaining` and :attr:`ledger`. A subclass that stores spends elsewhere (the
    persistent :class:`~matmech.privacy.ledger.Ledger`) sets ``_total`` and overrides the
    three storage hooks :meth:`_spent_exact`, :meth:`_charge` and :meth:`_entries`; the
    validation, the exact comparison and the refusal message stay here.

    Parameters
    ----------
    eps : float
        The total ε (any positive finite number).
    delta : float, default 0.0
        The total δ.

    Returns
    -------
    PrivacyBudget
        An empty budget of that total.

    Raises
    ------
    ValueError
        A non-positive or non-finite ε, or δ outside [0, 1).
    TypeError
        ε or δ not a real number.
    BudgetExceededError
        From :meth:`spend`, when a spend would exceed the total.

    Examples
    --------
    >>> budget = PrivacyBudget(1.0)
    >>> _ = budget.spend(0.4, what="first release")
    >>> budget.remaining, budget.can_spend(0.7)
    ((0.6, 0.0), False)
    """

    def __init__(self, eps: float, delta: float = 0.0) -> None:
        check_eps(eps)
        check_delta(delta)
        self._total = (exact(eps), exact(delta))
        self._spent = (Fraction(0), Fraction(0))
        self._ledger: list[LedgerEntry] = []
        self._lock = threading.Lock()

    # -- storage hooks (in memory here) -------------------------------------------------------

    def _spent_exact(self) -> tuple[Fraction, Fraction]:
        """The exact (ε, δ) spent so far."""
        with self._lock:
            return self._spent

    def _charge(self, e: Fraction, d: Fraction, entry: LedgerEntry) -> LedgerEntry:
        """Atomically: refuse (raise :meth:`_refusal`) if (e, d) does not fit, else record it."""
        with self._lock:
            if not self._fits(self._spent, e, d):
                raise self._refusal(e, d, entry.what, self._spent)
            self._spent = (self._spent[0] + e, self._spent[1] + d)
            self._ledger.append(entry)
            return entry

    def _entries(self) -> tuple[LedgerEntry, ...]:
        with self._lock:
            return tuple(self._ledger)

    # -- shared logic --------------------------------------------------------------------------

    def _validate(self, eps, delta) -> tuple[Fraction, Fraction]:
        e = check_eps(eps, allow_zero=True)
        d = check_delta(delta)
        if e == 0 and d == 0:
            raise ValueError(
                f"a spend must cost something: eps={eps!r} and delta={delta!r} are both 0"
            )
        return exact(eps), exact(delta)

    @staticmethod
    def _check_what(what) -> str:
        if not isinstance(what, str):
            raise TypeError(f"what must be a str, got {type(what).__name__}: {what!r}")
        return what

    def _fits(self, spent, e: Fraction, d: Fraction) -> bool:
        return spent[0] + e <= self._total[0] and spent[1] + d <= self._total[1]

    def _refusal(self, e: Fraction, d: Fraction, what: str, spent) -> BudgetExceededError:
        rem = (float(self._total[0] - spent[0]), float(self._total[1] - spent[1]))
        label = f" for {what!r}" if what else ""
        return BudgetExceededError(
            f"cannot spend (eps={float(e)!r}, delta={float(d)!r}){label}: "
            f"only (eps={rem[0]!r}, delta={rem[1]!r}) remains of "
            f"(eps={float(self._total[0])!r}, delta={float(self._total[1])!r})"
        )

    def can_spend(self, eps, delta=0.0) -> bool:
        """Whether (eps, delta) fits in what is left (records nothing). The amounts are
        validated as :meth:`spend` validates them: (0, 0), NaN or a negative ε is refused."""
        e, d = self._validate(eps, delta)
        return self._fits(self._spent_exact(), e, d)

    def spend(self, eps, delta=0.0, *, what: str = "") -> LedgerEntry:
        """Record a spend of (eps, delta) for ``what``; raise BudgetExceededError, leaving
        the budget unchanged, if it does not fit."""
        self._check_what(what)
        e, d = self._validate(eps, delta)
        return self._charge(e, d, LedgerEntry(what, float(e), float(d)))

    @property
    def total(self) -> tuple[float, float]:
        """(eps, delta) of the whole budget."""
        return (float(self._total[0]), float(self._total[1]))

    @property
    def spent(self) -> tuple[float, float]:
        """(eps, delta) spent so far (exact sums, rounded once to float)."""
        s = self._spent_exact()
        return (float(s[0]), float(s[1]))

    @property
    def remaining(self) -> tuple[float, float]:
        """(eps, delta) still available."""
        s = self._spent_exact()
        return (float(self._total[0] - s[0]), float(self._total[1] - s[1]))

    @property
    def ledger(self) -> tuple[LedgerEntry, ...]:
        """Every recorded spend, in order."""
        return self._entries()

    def __repr__(self) -> str:
        s, t = self.spent, self.total
        return (
            f"{type(self).__name__}(spent=(eps={s[0]!r}, delta={s[1]!r}) of "
            f"total=(eps={t[0]!r}, delta={t[1]!r}), {len(self.ledger)} spends)"
        )


# ------------------------------------------------------------------------- advanced composition


def advanced_composition(eps: float, delta: float, k: int, *, delta_slack: float) -> ApproxDP:
    """(ε′, kδ + δ′) for k-fold adaptive composition of (ε, δ)-DP mechanisms
    (Dwork, Rothblum, Vadhan 2010, Thm. 3.3): ε′ = ε·sqrt(2k ln(1/δ′)) + kε(e^ε − 1),
    with δ′ = ``delta_slack``.

    Parameters
    ----------
    eps, delta : float
        The per-run privacy parameters.
    k : int
        The number of runs.
    delta_slack : float
        δ′ in (0, 1).

    Returns
    -------
    ApproxDP
        ``(eps, delta)`` of the composition.

    Raises
    ------
    ValueError
        Non-positive ε, δ out of range, k < 1 or a bad ``delta_slack``.
    TypeError
        Arguments of the wrong kind.

    Examples
    --------
    >>> total = advanced_composition(0.1, 0.0, 10, delta_slack=1e-6)
    >>> round(total.eps, 3), total.delta
    (1.767, 1e-06)
    """
    e = check_eps(eps, allow_zero=True)
    d = check_delta(delta)
    k = _check_k(k)
    slack = _check_slack(delta_slack)
    eps_total = _advanced_total(e, k, slack)
    if not math.isfinite(eps_total):
        raise ValueError(
            f"advanced composition of k={k} steps of eps={eps!r} overflows a float (e^eps); use eps <= 700"
        )
    return ApproxDP(eps_total, min(1.0, k * d + slack))


def _advanced_total(e: float, k: int, slack: float) -> float:
    """ε·sqrt(2k ln(1/δ′)) + kε(e^ε − 1), inf where it overflows."""
    if e > 700:
        return math.inf
    return e * math.sqrt(2.0 * k * -math.log(slack)) + k * e * math.expm1(e)


def per_step_eps(eps_total, k, *, delta_slack) -> float:
    """The largest per-step ε whose k-fold advanced composition (with δ′ = ``delta_slack``)
    has total ε′ <= ``eps_total`` (bisection to float precision). For small k basic
    composition, ``eps_total / k``, can be larger: compare both."""
    target = check_eps(eps_total, name="eps_total")
    k = _check_k(k)
    slack = _check_slack(delta_slack)

    def total(e):
        return _advanced_total(e, k, slack)

    lo, hi = 0.0, target
    while total(hi) <= target:  # possible when 2k ln(1/δ′) < 1 (ends: total is inf past 700)
        lo, hi = hi, 2.0 * hi
    while True:
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            if lo == 0:
                raise ValueError(
                    f"no positive per-step eps composes to eps_total={eps_total!r} over k={k} steps "
                    f"with delta_slack={delta_slack!r} (it would be below the smallest float)"
                )
            return lo
        if total(mid) <= target:
            lo = mid
        else:
            hi = mid


def check_budget(budget):
    """``budget`` if it is None or a :class:`PrivacyBudget` (a Ledger included), else TypeError."""
    if budget is not None and not isinstance(budget, PrivacyBudget):
        raise TypeError(
            f"budget must be a matmech.PrivacyBudget or None, got {type(budget).__name__}"
        )
    return budget


def check_affordable(budget, eps, delta, *, what):
    """Raise BudgetExceededError now if (eps, delta) does not fit: run before any check on
    private data, so that a caller with an exhausted budget sees the same error whatever
    the data is. The spend itself comes later, after every check, before the first noise."""
    if budget is not None and not budget.can_spend(eps, delta):
        budget.spend(eps, delta, what=what)  # refused: raises, saying what is left
