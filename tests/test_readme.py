"""Every ```python block of README.md runs as written (issue 15).

The blocks run in order in ONE namespace (a later block may use names an earlier one
defined, as a reader running the page top to bottom would), in a fresh Python subprocess
whose working directory is a temporary directory holding copies of the repository's
``examples/`` and ``workloads/`` folders (the data files the README refers to), with a
non-interactive matplotlib backend. No block is skipped: a failing block is reported with
its number, its first line and the traceback, and the remaining blocks still run so that one
run lists every failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DATA_DIRS = ("examples", "workloads")
TIMEOUT = 600  # seconds for the whole page

_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)

_DRIVER = r'''
import json, sys, traceback
blocks = json.load(open(sys.argv[1], encoding="utf-8"))
namespace = {"__name__": "__main__"}
results = []
for i, (line, code) in enumerate(blocks):
    try:
        exec(compile(code, f"README.md block {i + 1} (line {line})", "exec"), namespace)
        results.append({"block": i + 1, "line": line, "ok": True})
    except BaseException:  # noqa: BLE001 - report every failure, SystemExit included
        results.append({"block": i + 1, "line": line, "ok": False, "error": traceback.format_exc(limit=-3)})
    sys.stdout.flush()
print("@@RESULTS@@" + json.dumps(results))
'''


def python_blocks(text: str):
    """(line number, code) of every ```python fenced block, in order."""
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in _FENCE.finditer(text)]


def test_extraction_finds_every_python_fence():
    """The extractor is not vacuous: it finds each ```python fence and nothing else."""
    text = README.read_text(encoding="utf-8")
    blocks = python_blocks(text)
    assert len(blocks) == len(re.findall(r"^```python[ \t]*$", text, re.M)) >= 1
    sample = "x\n```python\na = 1\n```\n```bash\nls\n```\n```python\nb = a + 1\n```\n"
    assert python_blocks(sample) == [(3, "a = 1\n"), (9, "b = a + 1\n")]


def _run_page(tmp_path, blocks):
    for name in DATA_DIRS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, tmp_path / name)
    (tmp_path / "blocks.json").write_text(json.dumps(blocks), encoding="utf-8")
    (tmp_path / "driver.py").write_text(_DRIVER, encoding="utf-8")
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0"}
    proc = subprocess.run([sys.executable, "driver.py", "blocks.json"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)
    marker = proc.stdout.rfind("@@RESULTS@@")
    assert marker >= 0, f"the README driver crashed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout[marker + len("@@RESULTS@@"):])


def test_every_readme_python_block_runs(tmp_path):
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    results = _run_page(tmp_path, blocks)
    assert len(results) == len(blocks)  # none skipped
    failed = [r for r in results if not r["ok"]]
    report = "\n\n".join(
        f"block {r['block']} (README.md line {r['line']}: {blocks[r['block'] - 1][1].splitlines()[0][:70]!r}):\n{r['error']}"
        for r in failed
    )
    assert not failed, f"{len(failed)} of {len(blocks)} README python blocks fail:\n\n{report}"


def test_a_failing_block_is_reported_with_its_number(tmp_path):
    """The harness would catch a broken block (and keeps running the later ones)."""
    results = _run_page(tmp_path, [(1, "a = 1\n"), (5, "b = undefined_name\n"), (9, "c = a + 1\nassert c == 2\n")])
    assert [r["ok"] for r in results] == [True, False, True]
    assert "undefined_name" in results[1]["error"] and "line 5" in results[1]["error"]
