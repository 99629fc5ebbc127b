"""Every ```python block of README.md and of every docs page runs as written (issues 15, 26).

Each page (README.md, and every ``docs/**/*.md`` page: getting started, the user guide,
including guide pages other branches add) is run on its own. Its blocks run in order in ONE
namespace (a later block may use names an earlier one defined, as a reader running the page
top to bottom would), in a fresh Python subprocess
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

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: Markdown pages of the documentation site (built output and generated pages excluded).
DOC_PAGES = sorted(
    p
    for p in (ROOT / "docs").rglob("*.md")
    if not {"_build", "auto_examples", "generated"} & set(p.relative_to(ROOT / "docs").parts)
)
PAGES = [README, *DOC_PAGES]
DATA_DIRS = ("examples", "workloads")
TIMEOUT = 600  # seconds for the whole page

_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)

_DRIVER = r"""
import json, sys, traceback
blocks = json.load(open(sys.argv[1], encoding="utf-8"))
namespace = {"__name__": "__main__"}
results = []
for i, (line, code) in enumerate(blocks):
    try:
        exec(compile(code, f"{sys.argv[2]} block {i + 1} (line {line})", "exec"), namespace)
        results.append({"block": i + 1, "line": line, "ok": True})
    except BaseException:  # noqa: BLE001 - report every failure, SystemExit included
        results.append({"block": i + 1, "line": line, "ok": False, "error": traceback.format_exc(limit=-3)})
    sys.stdout.flush()
print("@@RESULTS@@" + json.dumps(results))
"""


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


def _run_page(tmp_path, blocks, page="README.md"):
    for name in DATA_DIRS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, tmp_path / name)
    (tmp_path / "blocks.json").write_text(json.dumps(blocks), encoding="utf-8")
    (tmp_path / "driver.py").write_text(_DRIVER, encoding="utf-8")
    path = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p
    )  # this checkout
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0", "PYTHONPATH": path}
    proc = subprocess.run(
        [sys.executable, "driver.py", "blocks.json", page],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    marker = proc.stdout.rfind("@@RESULTS@@")
    assert marker >= 0, f"the page driver crashed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout[marker + len("@@RESULTS@@") :])


def test_the_docs_pages_are_found():
    """The page list is not vacuous: the guide's own pages are in it, build output is not."""
    names = {p.relative_to(ROOT).as_posix() for p in DOC_PAGES}
    assert {"docs/getting-started.md", "docs/guide/selection.md", "docs/guide/budgets.md"} <= names
    assert not any("_build" in n or "auto_examples" in n for n in names)


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_python_block_of_a_page_runs(tmp_path, page):
    blocks = python_blocks(page.read_text(encoding="utf-8"))
    if not blocks:
        return  # a page without python blocks has nothing to run
    name = page.relative_to(ROOT).as_posix()
    results = _run_page(tmp_path, blocks, name)
    assert len(results) == len(blocks)  # none skipped
    failed = [r for r in results if not r["ok"]]
    report = "\n\n".join(
        f"block {r['block']} ({name} line {r['line']}: {blocks[r['block'] - 1][1].splitlines()[0][:70]!r}):\n{r['error']}"
        for r in failed
    )
    assert not failed, f"{len(failed)} of {len(blocks)} python blocks of {name} fail:\n\n{report}"


def test_a_failing_block_is_reported_with_its_number(tmp_path):
    """The harness would catch a broken block (and keeps running the later ones)."""
    results = _run_page(
        tmp_path, [(1, "a = 1\n"), (5, "b = undefined_name\n"), (9, "c = a + 1\nassert c == 2\n")]
    )
    assert [r["ok"] for r in results] == [True, False, True]
    assert "undefined_name" in results[1]["error"] and "line 5" in results[1]["error"]
