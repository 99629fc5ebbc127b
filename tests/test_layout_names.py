"""Test modules have unique basenames: pytest imports them by basename (rootdir mode, no
packages), so two files of one name in different folders stop the whole collection."""

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_test_module_basenames_are_unique():
    names = Counter(
        p.name for p in TESTS.rglob("*.py") if p.name != "__init__.py" and p.name != "conftest.py"
    )
    assert [n for n, k in names.items() if k > 1] == []
