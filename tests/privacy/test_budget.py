"""Tests for matmech.privacy.budget: exact sequential composition (the "basic" accountant and
what every accountant keeps of it). The zCDP and PLD accountants: test_accountant.py."""

import dataclasses
import threading
from fractions import Fraction

import numpy as np
import pytest

from matmech.privacy.budget import (
    BudgetExceededError,
    LedgerEntry,
    PrivacyBudget,
)
from matmech.privacy.events import ApproxDP


def test_decimal_amounts_compose_exactly():
    assert 0.1 + 0.2 > 0.3  # naive float accounting would refuse the second spend
    b = PrivacyBudget(0.3)
    b.spend(0.1)
    b.spend(0.2)
    assert b.remaining == (0.0, 0.0)
    assert not b.can_spend(1e-12)
    with pytest.raises(BudgetExceededError):
        b.spend(1e-12)


def test_ten_tenths_fill_a_unit_budget_and_no_more():
    b = PrivacyBudget(1.0)
    for _ in range(10):
        b.spend(0.1)
    assert b.spent == (1.0, 0.0)
    with pytest.raises(BudgetExceededError):
        b.spend(np.float64(1e-300))


def test_delta_is_tracked_exactly_too():
    b = PrivacyBudget(1.0, 1e-6)
    b.spend(0.1, 7e-7)
    b.spend(0.1, 3e-7)
    assert b.remaining == (0.8, 0.0)
    with pytest.raises(BudgetExceededError, match="delta"):
        b.spend(0.1, 1e-20)
    b.spend(0.1)  # pure-ε spends still fit
    assert b.spent == (0.3, 1e-6)  # the exact 3/10, not the float sum 0.30000000000000004
    assert b.spent[0] == float(Fraction(3, 10)) != 0.1 + 0.1 + 0.1


def test_refusal_changes_nothing_and_names_amounts():
    b = PrivacyBudget(1.0, 1e-5)
    b.spend(0.75, 1e-6, what="first")
    before = (b.spent, b.remaining, b.ledger, repr(b))
    with pytest.raises(BudgetExceededError) as err:
        b.spend(0.5, 0.0, what="measure H2")
    assert isinstance(err.value, ValueError)
    msg = str(err.value)
    assert "0.5" in msg and "0.25" in msg and "measure H2" in msg
    assert (b.spent, b.remaining, b.ledger, repr(b)) == before
    # and the budget still works afterwards
    b.spend(0.25, what="last")
    assert b.remaining[0] == 0.0


def test_ledger_records_what_eps_delta_in_order():
    b = PrivacyBudget(2.0, 1e-6)
    e1 = b.spend(0.5, what="select rows")
    b.spend(1.0, 5e-7, what="measure")
    assert b.ledger == (
        LedgerEntry("select rows", 0.5, 0.0),
        LedgerEntry("measure", 1.0, 5e-7),
    )
    assert e1 == b.ledger[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.ledger[0].eps = 0.0
    assert isinstance(b.ledger, tuple)


def test_can_spend_records_nothing():
    b = PrivacyBudget(1.0)
    assert b.can_spend(1.0) and not b.can_spend(1.0000001)
    assert b.spent == (0.0, 0.0) and b.ledger == ()


def test_properties_and_repr():
    b = PrivacyBudget(1.0, 1e-6)
    b.spend(0.25)
    assert b.total == (1.0, 1e-6)
    assert b.spent == (0.25, 0.0)
    assert b.remaining == (0.75, 1e-6)
    r = repr(b)
    assert "spent=(eps=0.25" in r and "total=(eps=1.0" in r


def test_concurrent_spends_never_overdraw():
    b = PrivacyBudget(1.0)
    refused = []

    def worker():
        for _ in range(50):
            try:
                b.spend(0.01)
            except BudgetExceededError:
                refused.append(1)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(b.ledger) == 100 and len(refused) == 100
    assert b.remaining == (0.0, 0.0)


@pytest.mark.parametrize("eps", [0, -0.1, float("nan"), float("inf")])
def test_bad_total_eps(eps):
    with pytest.raises(ValueError, match="eps") as err:
        PrivacyBudget(eps)
    assert repr(eps) in str(err.value)


@pytest.mark.parametrize("delta", [-1e-9, 1.0, 2.0, float("nan"), float("inf")])
def test_bad_delta(delta):
    with pytest.raises(ValueError, match=r"delta must be in \[0, 1\)") as err:
        PrivacyBudget(1.0, delta)
    assert repr(delta) in str(err.value)
    b = PrivacyBudget(1.0, 0.5)
    with pytest.raises(ValueError, match="delta"):
        b.spend(0.1, delta)
    assert b.ledger == ()


@pytest.mark.parametrize("eps", [-0.1, float("nan"), float("inf")])
def test_bad_spend_eps(eps):
    b = PrivacyBudget(1.0)
    with pytest.raises(ValueError, match="eps") as err:
        b.spend(eps)
    assert repr(eps) in str(err.value)
    with pytest.raises(ValueError, match="eps"):
        b.can_spend(eps)
    assert b.spent == (0.0, 0.0)


def test_bad_types():
    with pytest.raises(TypeError, match="str"):
        PrivacyBudget("1.0")
    with pytest.raises(TypeError, match="bool"):
        PrivacyBudget(1.0).spend(True)
    with pytest.raises(TypeError, match="what"):
        PrivacyBudget(1.0).spend(0.1, what=3)
    with pytest.raises(TypeError):
        PrivacyBudget(1.0).spend(0.1, 0.0, "positional what")


def test_subclass_storage_hooks_keep_the_interface():
    """PrivacyBudget's public methods go through _charge/_entries (the Ledger's hooks)."""
    calls = []

    class Logged(PrivacyBudget):
        def _charge(self, entry):
            calls.append((entry.events, entry.what))
            return super()._charge(entry)

    b = Logged(0.3)
    entry = b.spend(0.1, what="a")
    assert entry == LedgerEntry("a", 0.1, 0.0) and entry.time is None and entry.spec is None
    with pytest.raises(BudgetExceededError, match="for 'b'"):
        b.spend(0.25, what="b")
    assert calls == [
        ((ApproxDP(Fraction(1, 10), Fraction(0)),), "a"),
        ((ApproxDP(Fraction(1, 4), Fraction(0)),), "b"),
    ]
    assert b.ledger == (entry,) and b.remaining == (0.2, 0.0) and repr(b).startswith("Logged(")
    assert b.events == (ApproxDP(Fraction(1, 10), Fraction(0)),)


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_an_eps_whose_rho_is_beyond_the_float_range_is_refused_not_an_overflow(delta):
    """ε = 1e300 has ρ = ε²/2 beyond the largest float: kept exact, refused by the rule."""
    b = PrivacyBudget(1.0, delta)
    assert b.can_spend(1e300) is False
    with pytest.raises(BudgetExceededError, match="cannot spend"):
        b.spend(1e300)
    assert b.spent == (0.0, 0.0)
