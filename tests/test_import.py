"""``import matmech`` stays light (issue 13 item 5): the solvers, plotting and data engines
are imported by the functions that use them, never by the package import itself.

Checked in a fresh interpreter (this test process has imported everything already); the
import time itself is measured in the benchmarks, not here (a loaded machine would make a
time limit flaky).
"""

import json
import subprocess
import sys

#: Heavy optional modules that ``import matmech`` must not import.
LAZY = ("cvxpy", "matplotlib", "pyspark", "duckdb", "polars")


def _imported_after(statement):
    code = f"import json, sys; {statement}; print(json.dumps({{m: m in sys.modules for m in {LAZY!r}}}))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_matmech_does_not_import_solvers_or_plotting():
    loaded = _imported_after("import matmech")
    assert not any(loaded.values()), {m: v for m, v in loaded.items() if v}


def test_the_check_can_fail():
    """The same probe sees a heavy module once something imports it (so the test above can fail)."""
    loaded = _imported_after("import matmech, matplotlib")
    assert loaded["matplotlib"] and not loaded["cvxpy"]


def test_scipy_linalg_is_executed_on_first_use():
    """scipy.linalg is a lazy module once matmech's linear algebra is imported (``import
    matmech`` alone loads neither) and a working one on first use (also through ``import
    scipy.linalg`` and the scipy package attribute)."""
    code = (
        "import sys, matmech, numpy as np; assert 'scipy.linalg' not in sys.modules; "
        "from matmech.linalg.lazy import sla; m = sys.modules['scipy.linalg']; "
        "print(type(m).__name__); import scipy, scipy.linalg; "
        "print(float(sla.cholesky(np.eye(2))[1, 1]), scipy.linalg is sla, type(m).__name__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "_LazyModule"
    assert lines[1] == "1.0 True module"
