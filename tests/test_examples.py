"""Smoke test: every example script runs to completion (each is meant to take under a minute)
and prints its key result line."""

import os
import subprocess
import sys

import pytest

from conftest import ROOT

EXAMPLES = sorted((ROOT / "examples").glob("*.py"))

#: A line each example prints only when its own checks passed (the scripts assert them).
KEY_OUTPUT = {
    "slides_walkthrough.py": "sensitivities I4, H4, Y4: [1.0, 3.0, 3.0]",
    "cohort_size_svt.py": "RESULT: SVT reported",
    "clipping_bound.py": "RESULT: clipping bound b =",
    "age_ranges_release.py": "RESULT: 9 age bands released",
    "svt_vs_em_zipf.py": "RESULT: mean SER over c: EM",
    "many_attributes_release.py": "RESULT: all 1- and 2-way marginals",
    "selection_modes.py": "RESULT: three selection modes compared",
    "census_table_release.py": "RESULT: 44 labelled table cells (API) and 9 age bands (CLI)",
    "pictures.py": "RESULT: drew the ranking of",
}


def test_there_are_examples():
    assert len(EXAMPLES) >= 1
    missing = sorted(set(KEY_OUTPUT) - {p.name for p in EXAMPLES})
    assert not missing, f"examples listed in KEY_OUTPUT but not shipped: {missing}"


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(script, tmp_path):
    path = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p
    )  # this checkout, installed or not
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip()
    expected = KEY_OUTPUT.get(script.name)
    if expected is not None:
        assert expected in out.stdout, out.stdout[-2000:]
