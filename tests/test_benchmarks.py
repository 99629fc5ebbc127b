"""Every benchmark script has a smoke mode, and CI runs it (issue 31, item 6).

``benchmarks/factored_release_scale.py`` (the README's 200-attribute figures) failed for a
refactor nobody ran it after. Each script in ``benchmarks/`` now takes ``--smoke`` (tiny
sizes, seconds; its JSON/MD go to a temporary directory, never to ``benchmarks/results/``, and
a script whose peers' code or data is missing prints "skipped: <reason>"), and ``.ci/run``
runs every one of them after the tests. Here: the option exists in every script (read from
the source, no import), ``.ci/run`` loops over them, and the scale script's smoke run works
end to end in a subprocess.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py"))


def _options(path: Path) -> set:
    """The option strings of every ``add_argument(...)`` call in a script's source."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
        ):
            out |= {a.value for a in node.args if isinstance(a, ast.Constant)}
    return out


def test_every_benchmark_script_has_a_smoke_mode():
    assert len(SCRIPTS) >= 30, SCRIPTS
    missing = [p.name for p in SCRIPTS if "--smoke" not in _options(p)]
    assert not missing, f"benchmark scripts without --smoke: {missing}"


def test_ci_runs_every_benchmark_in_smoke_mode():
    text = (ROOT / ".ci" / "run").read_text()
    loop = text.index("for script in benchmarks/*.py")
    assert 'python "$script" --smoke' in text[loop:], "the CI loop no longer runs --smoke"
    assert text.index("python -m pytest -q") < loop, "the smoke runs come after the tests"


@pytest.mark.parametrize("script", ["factored_release_scale.py"])
def test_the_scale_benchmark_runs_in_smoke_mode(script, tmp_path):
    """The streamed release at 8 attributes × 10 values under both models, through the
    script's own stage wrappers; files in TMPDIR, none in benchmarks/results/."""
    results = ROOT / "benchmarks" / "results"
    before = {p.name: p.stat().st_mtime_ns for p in results.iterdir()}
    env = {**os.environ, "TMPDIR": str(tmp_path), "OPENBLAS_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--smoke"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (written,) = tmp_path.glob("matmech-smoke-*/factored_release_scale.json")
    rows = json.loads(written.read_text())["rows"]
    cases = {r["case"]: r for r in rows}
    assert {"8×10 ≤3-way", "8×10 ≤3-way, pure ε"} <= set(cases)
    for r in (cases["8×10 ≤3-way"], cases["8×10 ≤3-way, pure ε"]):
        # 1 + 8 + 28 + 56 marginals of 10^k cells: every answer reconstructed with its std
        assert r["marginals"] == 93 and r["answers"] == 1 + 80 + 2800 + 56000
        assert 0 < r["rmse_analytic"] < 1e3 and r["seconds"]["plan"] > 0
    assert {p.name: p.stat().st_mtime_ns for p in results.iterdir()} == before


def test_the_engines_benchmark_runs_in_smoke_mode(tmp_path):
    """benchmarks/engines_scale.py --smoke (issue 36): each release reads the Parquet file in
    one scan, the DuckDB release equals the in-memory one (same seed), the streamed release
    runs from DuckDB; files in TMPDIR, none in benchmarks/results/."""
    results = ROOT / "benchmarks" / "results"
    before = {p.name: p.stat().st_mtime_ns for p in results.iterdir()}
    env = {**os.environ, "TMPDIR": str(tmp_path), "OPENBLAS_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "engines_scale.py"), "--smoke"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (written,) = tmp_path.glob("matmech-smoke-engines-scale-*/engines_scale.json")
    out = json.loads(written.read_text())
    (row,) = out["duckdb"]
    assert "error" not in row["release"] and "error" not in row["anchor"], row
    # the 1- and 2-way marginals of 5 attributes × 10 values: 15 tables, one scan of the data
    assert row["release"]["scans"] == 1 and row["release"]["answers"] == 5 * 10 + 10 * 100
    assert [s.get("identical") for s in out["same"]] == [True]
    st = out["streamed"]
    assert "error" not in st and st["scans"] == 1 and st["first_cell"], st
    assert {p.name: p.stat().st_mtime_ns for p in results.iterdir()} == before
