"""Every public name has a reference entry with a usable docstring (issue 26).

Public names are those in the ``__all__`` of ``matmech`` and of its subpackages and public
modules that export names (``matmech.workloads``, ``matmech.strategies``, ``matmech.svt``;
the other subpackages export none). Each needs, in numpydoc form: a one-line summary, and
``Parameters``, ``Returns``, ``Raises`` and ``Examples`` sections (a record documents its
fields under ``Parameters``, as numpydoc does for classes; an exception class documents the
conditions that raise it under ``Raises``). A record that is a frozen dataclass needs no
``Returns``/``Raises`` saying so: the test checks it is frozen instead. The API reference page must list every name, and
every ``Examples`` section must run (its ``>>>`` lines are executed as a doctest, outputs
checked where they are shown).
"""

from __future__ import annotations

import dataclasses
import doctest
import importlib
import inspect
import re

import numpy as np
import pytest

from conftest import ROOT

NAMESPACES = (
    "matmech",
    "matmech.workloads",
    "matmech.strategies",
    "matmech.svt",
    "matmech.advisor",
    "matmech.privacy",
    "matmech.io",
    "matmech.linalg",
    "matmech.optimizers",
)
SECTIONS = ("Parameters", "Returns", "Raises", "Examples")


def public_names():
    seen, out = set(), []
    for ns in NAMESPACES:
        mod = importlib.import_module(ns)
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name)
            if inspect.ismodule(obj) or id(obj) in seen:
                continue
            seen.add(id(obj))
            out.append((f"{ns}.{name}", obj))
    return out


PUBLIC = public_names()


def sections(doc: str) -> set[str]:
    return set(re.findall(r"^(\w[\w ]*)\n-{3,}\s*$", doc, re.M))


def test_the_public_names_are_found():
    names = {n for n, _ in PUBLIC}
    assert {
        "matmech.release",
        "matmech.workloads.all_range",
        "matmech.svt.noisy_top_c_gap",
    } <= names
    assert len(PUBLIC) >= 70


def test_section_finder_is_not_vacuous():
    doc = "Summary.\n\nParameters\n----------\nx : int\n\nReturns\n-------\nint\n"
    assert sections(doc) == {"Parameters", "Returns"}


@pytest.mark.parametrize("name,obj", PUBLIC, ids=[n for n, _ in PUBLIC])
def test_docstring_has_every_section(name, obj):
    doc = inspect.getdoc(obj) or ""
    summary = doc.split("\n\n", 1)[0]
    assert summary.strip() and len(summary) <= 300, f"{name}: no one-paragraph summary"
    required = SECTIONS
    if dataclasses.is_dataclass(obj) and obj.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        required = ("Parameters", "Examples")  # FrozenInstanceError on assignment, checked below
        field = dataclasses.fields(obj)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            object.__new__(obj).__setattr__(field, None)
    missing = [s for s in SECTIONS if s in required and s not in sections(doc)]
    assert not missing, f"{name}: docstring lacks {missing}"


@pytest.mark.parametrize("name,obj", PUBLIC, ids=[n for n, _ in PUBLIC])
def test_docstring_example_runs(name, obj):
    doc = inspect.getdoc(obj) or ""
    example = doc.split("Examples\n--------", 1)[-1]
    namespace = importlib.import_module(name.rsplit(".", 1)[0])
    # the names it exports, as a reader has them (a lazy package holds them only once used)
    exported = {n: getattr(namespace, n) for n in getattr(namespace, "__all__", ())}
    test = doctest.DocTestParser().get_doctest(
        example, {**vars(namespace), **exported, "np": np}, name, None, 0
    )
    assert test.examples, f"{name}: the Examples section has no >>> lines"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.failures == 0, (
        f"{name}: its example fails (run pytest -s to see the doctest report)"
    )


def test_the_api_page_lists_every_public_name():
    page = (ROOT / "docs" / "api" / "index.rst").read_text(encoding="utf-8")
    listed = set(re.findall(r"^   (\w+)$", page, re.M))
    missing = sorted(n for n, obj in PUBLIC if n.rsplit(".", 1)[1] not in listed)
    assert not missing, f"not in docs/api/index.rst: {missing}"


def test_a_wrong_example_fails():
    """The example runner is not vacuous: a wrong output is a failure."""
    test = doctest.DocTestParser().get_doctest(">>> 1 + 1\n3\n", {}, "wrong", None, 0)
    runner = doctest.DocTestRunner()
    runner.run(test, out=lambda s: None)
    assert runner.failures == 1
