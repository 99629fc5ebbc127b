"""One spend protocol (issue 34): the budget is charged in one place in the library, the
runner (:func:`matmech.run.runner.run_plan`), outside the budget itself.

Read from the source with ``ast``, so a spend written anywhere (in a function, a method, a
lambda) is found.
"""

import ast
from collections import Counter
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "matmech"

#: The budget's spending methods (:class:`matmech.privacy.budget.PrivacyBudget`): an opaque
#: spend, a spend of events, and the storage hook both reach.
SPENDS = {"spend", "spend_events", "_charge"}

#: The budget itself: where the spend is defined and stored.
BUDGET = {"privacy/budget.py", "privacy/ledger.py"}


def _spend_calls():
    """{module path: number of calls of a budget spend} over the library."""
    found = Counter()
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in SPENDS
            ):
                found[path.relative_to(PKG).as_posix()] += 1
    return found


def test_the_runner_is_the_one_spend_outside_the_budget():
    calls = _spend_calls()
    outside = {p: n for p, n in calls.items() if p not in BUDGET}
    assert outside == {"run/runner.py": 1}, f"spend calls outside the budget: {outside}"


def test_the_scan_finds_spends():
    """Not vacuous: the budget's own modules call its spend (the refusal of an unaffordable
    spend, a share charging its parent) and the scan sees them."""
    calls = _spend_calls()
    assert calls["privacy/budget.py"] >= 2
