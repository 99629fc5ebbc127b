"""Start-up (issue 32): ``import matmech`` and ``matmech --version`` load nothing heavy, and
every public name still resolves on first use.

Checked in fresh interpreters (this test process has imported everything already) by what is
in ``sys.modules``; the start-up time itself is measured by ``benchmarks/import_time.py``,
never here (a loaded machine would make a time limit flaky).
"""

import json
import subprocess
import sys

import pytest

import matmech
from conftest import ROOT

#: Modules that neither ``import matmech`` nor ``matmech --version`` may load.
HEAVY = (
    "numpy",
    "scipy",
    "scipy.sparse",
    "cvxpy",
    "networkx",
    "scipy.optimize",
    "duckdb",
    "polars",
)


def _loaded_after(code):
    """{module: loaded?} for HEAVY and every ``matmech.*`` module, after ``code`` runs in a
    fresh interpreter (its stdout is returned too)."""
    probe = (
        f"{code}\nimport json as _j, sys as _s\n"
        f"print(_j.dumps({{'heavy': [m for m in {HEAVY!r} if m in _s.modules], "
        f"'matmech': sorted(m for m in _s.modules if m.startswith('matmech'))}}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    *printed, last = out.stdout.strip().splitlines()
    return json.loads(last), printed


def test_import_matmech_loads_no_heavy_module():
    loaded, _ = _loaded_after("import matmech")
    assert loaded["heavy"] == []
    assert loaded["matmech"] == ["matmech"], "no submodule is imported by the package import"


def test_the_probe_sees_a_module_once_a_name_is_used():
    """The check above can fail: using a name imports its module (and numpy with it), and a
    heavy module imported by anyone is seen."""
    loaded, _ = _loaded_after("import matmech; matmech.advise; import networkx")
    assert {"numpy", "networkx"} <= set(loaded["heavy"])
    assert "matmech.advisor.advise" in loaded["matmech"]


def test_matmech_version_loads_nothing_but_the_version():
    code = "from matmech.cli import main\nassert main(['--version']) == 0"
    loaded, printed = _loaded_after(code)
    assert printed == [f"matmech {matmech.__version__}"]
    assert loaded["heavy"] == []
    assert set(loaded["matmech"]) <= {
        "matmech",
        "matmech.cli",
        "matmech.cli.common",
        "matmech.cli.progress",
    }


@pytest.mark.parametrize("argv", [["-m", "matmech", "--version"], ["-m", "matmech.cli", "-V"]])
def test_version_through_python_m(argv):
    out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout == f"matmech {matmech.__version__}\n", out.stderr


def test_the_full_parser_prints_the_same_version(capsys):
    """``--version`` among other arguments goes through argparse, with the same text."""
    from matmech.cli import build_parser

    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(["--version", "advise"])
    assert stop.value.code == 0
    assert capsys.readouterr().out == f"matmech {matmech.__version__}\n"


def test_every_public_name_resolves_in_a_fresh_interpreter():
    """``from matmech import X`` and ``getattr`` for every name of ``__all__``, each to the
    object its module defines; ``dir(matmech)`` lists them all."""
    code = (
        "import importlib, matmech\n"
        "from matmech import *\n"
        "bad = [n for n in matmech.__all__ if getattr(matmech, n) is not globals()[n]]\n"
        "assert not bad, bad\n"
        "missing = sorted(set(matmech.__all__) - set(dir(matmech)))\n"
        "assert not missing, missing\n"
        "print(sorted(matmech.__all__))"
    )
    _, printed = _loaded_after(code)
    assert printed == [str(sorted(matmech.__all__))]


@pytest.mark.parametrize("name", sorted(matmech.__all__))
def test_each_public_name_is_its_modules_object(name):
    import importlib

    value = getattr(matmech, name)
    where = matmech._LAZY[name]
    if where is None:  # a submodule
        assert value is importlib.import_module(f"matmech.{name}")
    else:
        assert value is getattr(importlib.import_module(where), name)
    assert name in dir(matmech)


def test_release_is_the_function_even_after_its_module_is_imported_first():
    """``matmech.release`` names both a submodule and the function; the package attribute
    is the function whichever is imported first (the import system binds a submodule on its
    parent package)."""
    code = (
        "from matmech.release import Release\n"
        "import matmech, matmech.release as r\n"
        "import sys\n"
        "print(callable(matmech.release), matmech.release.__module__, r is matmech.release, "
        "type(sys.modules['matmech.release']).__name__)"
    )
    _, printed = _loaded_after(code)
    assert printed == ["True matmech.release True module"]


def test_unknown_names_and_submodules():
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        _ = matmech.no_such_name
    assert not hasattr(matmech, "no_such_name")
    assert matmech.svt.__name__ == "matmech.svt"  # a submodule, imported on first use
    with pytest.raises(AttributeError, match="no attribute 'sparse_vector'"):
        _ = matmech.sparse_vector  # the 0.1 alias is gone (0.2.0): matmech.svt.sparse_vector


def test_every_subpackage_and_top_level_module_imports_first():
    """With nothing imported eagerly, any subpackage or module may be the first one a
    program imports; an import cycle that the old eager order hid (``matmech.plans`` →
    ``matmech.results`` → ``matmech.run.runner``) fails here. One interpreter, its
    ``matmech`` modules dropped before each import."""
    pkg = ROOT / "matmech"
    names = sorted(
        f"matmech.{p.parent.name if p.name == '__init__.py' else p.stem}"
        for p in [*pkg.glob("*/__init__.py"), *pkg.glob("*.py")]
        if p.name not in ("__init__.py", "__main__.py") or p.parent != pkg
    )
    code = (
        "import importlib, sys\n"
        f"bad = []\nfor n in {names!r}:\n"
        "    for m in [m for m in sys.modules if m.split('.')[0] == 'matmech']:\n"
        "        del sys.modules[m]\n"
        "    try:\n        importlib.import_module(n)\n"
        "    except Exception as e:\n        bad.append(f'{n}: {e!r}')\n"
        "print(bad)"
    )
    _, printed = _loaded_after(code)
    assert len(names) >= 15 and "matmech.plans" in names and "matmech.release" in names
    assert printed == ["[]"], printed
