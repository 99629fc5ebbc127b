"""The selection-bias benchmark (benchmarks/selection_bias.py) keeps each finished cell in a
checkpoint and ``--resume`` runs only the cells it lacks, with the seed of the cell's place
in the full grid; its headline table has one row per method and a column per set-up × path."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location(
        "selection_bias", ROOT / "benchmarks" / "selection_bias.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_resume_keeps_finished_cells_and_the_headline_has_every_cell(tmp_path, capsys):
    sb = _script()
    out = str(tmp_path / "sb")
    args = ["--answers", "12", "--setups", "zipf", "--paths", "factored", "--out", out]
    sb.main(args)
    ckpt = Path(out + ".partial.jsonl")
    first = [json.loads(line) for line in ckpt.read_text().splitlines()]
    assert len(first) == len(sb.METHODS)
    assert {r["cell"] for r in first} == set(range(7, 14))  # zipf factored: the grid's 2nd block
    assert all(r["all"]["n"] >= 12 and r["nan_coverage"] == 0 for r in first)
    capsys.readouterr()
    sb.main(args + ["--resume"])
    assert ckpt.read_text().count("\n") == len(sb.METHODS)  # nothing ran again
    assert not [line for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    saved = json.loads(Path(out + ".json").read_text())["cells"]
    assert [r["seconds"] for r in saved] == [r["seconds"] for r in first]
    md = Path(out + ".md").read_text()
    head = md[md.index("| method (mechanism)") : md.index("Every cell:")].strip().splitlines()
    assert head[0].count("zipf factored") == 1 and len(head) == 2 + len(sb.METHODS)
    # another target is another run: the checkpoint's cells are not reused
    sb.main(
        ["--answers", "13", "--setups", "zipf", "--paths", "factored", "--out", out, "--resume"]
    )
    assert ckpt.read_text().count("\n") == 2 * len(sb.METHODS)
