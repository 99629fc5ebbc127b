"""The public surface stays small and the modules keep their private names private (issue 34).

Counted from the source (ast), as the issue counts them: the names across every ``__all__``
in ``matmech/`` (was 1,083; target ≤ 300) and the ``from matmech.… import _name`` statements
between modules (was 39; target ≤ 10). A shared helper gets a public name in the lower
module instead of being imported as ``_name``.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "matmech"

MAX_ALL_NAMES = 300
MAX_PRIVATE_IMPORTS = 10

#: The modules users import from, each with a deliberate ``__all__``.
PUBLIC_MODULES = (
    "matmech",
    "matmech.workloads",
    "matmech.strategies",
    "matmech.svt",
    "matmech.stream",
    "matmech.io",
    "matmech.cli",
)


def _trees():
    for path in sorted(PKG.rglob("*.py")):
        parts = path.relative_to(PKG.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, ast.parse(path.read_text(encoding="utf-8"))


def _all_names(tree):
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value:
            return list(ast.literal_eval(node.value))
    return None


def _private_imports(tree):
    return [
        (node.module, [a.name for a in node.names if a.name.startswith("_")])
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith("matmech")
        and any(a.name.startswith("_") and not a.name.startswith("__") for a in node.names)
    ]


def count_all_names():
    return sum(len(_all_names(tree) or ()) for _, tree in _trees())


def private_imports():
    return [(name, imp) for name, tree in _trees() for imp in _private_imports(tree)]


def test_the_names_across_all_the_all_lists_stay_at_most_300():
    n = count_all_names()
    assert 0 < n <= MAX_ALL_NAMES, f"{n} names across matmech's __all__ lists (at most 300)"


def test_at_most_ten_modules_import_a_private_name_of_another():
    found = private_imports()
    assert len(found) <= MAX_PRIVATE_IMPORTS, "\n".join(map(str, found))


def test_the_counters_are_not_vacuous():
    tree = ast.parse("from matmech.linalg.operator import _x, y\n__all__ = ['a', 'b']\n")
    assert _private_imports(tree) == [("matmech.linalg.operator", ["_x"])]
    assert _all_names(tree) == ["a", "b"]
    assert count_all_names() >= len(importlib.import_module("matmech").__all__)


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_each_public_module_has_a_deliberate_all_of_names_it_has(name):
    mod = importlib.import_module(name)
    assert isinstance(mod.__all__, list), name
    missing = [n for n in mod.__all__ if not hasattr(mod, n)]
    assert not missing, f"{name}.__all__ lists names it does not have: {missing}"


def test_no_two_public_classes_share_a_name():
    where: dict[str, list[str]] = {}
    for name, tree in _trees():
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                where.setdefault(node.name, []).append(name)
    assert {k: v for k, v in where.items() if len(v) > 1} == {}


def test_a_ledger_event_written_before_the_rename_still_loads():
    """The sparse vector event class is ``SparseVectorEvent`` (``matmech.svt.SparseVector`` is
    the interactive mechanism); a ledger stores the event's ``kind``, which stayed
    ``"sparse_vector"``, so an event column written by 0.1 reads back unchanged."""
    from matmech.privacy.events import SparseVectorEvent, events_from_json, events_to_json

    old_column = '[{"kind":"sparse_vector","eps":0.5}]'  # as 0.1 wrote it
    (event,) = events_from_json(old_column)
    assert type(event) is SparseVectorEvent and event.eps == 0.5
    assert events_to_json([event]) == old_column
