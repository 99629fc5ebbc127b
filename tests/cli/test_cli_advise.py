"""``matmech advise`` (ranking, saved strategy); its progress bar: test_cli_progress.py."""

import json

from matmech.io.store import load_strategy

import cli_cases
from cli_cases import run

files = cli_cases.files  # the fixture, bound by name


def test_advise_prints_table_and_saves_the_best_strategy(files):
    d, _, _, _ = files
    out = run("advise", str(d / "bands.toml"), "--eps", "1", "--save-strategy", str(d / "best.npz"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("bands: 5 queries over 32 cells") and "RMSE/query" in out.stdout
    assert "SVD lower bound" in out.stdout and "saved the best strategy" in out.stdout
    assert out.stderr == ""  # no progress bar when stderr is not a terminal
    assert load_strategy(d / "best.npz").shape[1] == 32
    js = run("advise", str(d / "bands.toml"), "--eps", "0.5", "--delta", "1e-6", "--json")
    assert js.returncode == 0, js.stderr
    data = json.loads(js.stdout)
    assert data["spec"] == "bands" and data["delta"] == 1e-6 and data["saved_strategy"] is None
    totals = [r["total_error"] for r in data["ranked"]]
    assert totals == sorted(totals) and data["noise"] == "gaussian (L2)"


def test_advise_lists_the_split_plans_of_a_mixed_job(root):
    """Marginals plus every range over a fine attribute (workloads/mixed_marginals_ranges.toml):
    the split plan is ranked first, says how the budget is divided, and is what
    ``release --strategy auto`` runs (issue 32)."""
    spec = str(root / "workloads/mixed_marginals_ranges.toml")
    js = run("advise", spec, "--eps", "1", "--json")
    assert js.returncode == 0, js.stderr
    data = json.loads(js.stdout)
    splits = [r for r in data["ranked"] if r["kind"] == "split"]
    assert splits and data["ranked"][0]["kind"] == "split" and data["auto_plan"]["kind"] == "split"
    shares = [p["share"] for p in splits[0]["params"]["parts"]]
    assert len(shares) == 2 and abs(sum(shares) - 1) < 1e-3
    out = run("advise", spec, "--eps", "1")
    assert out.returncode == 0 and "split: " in out.stdout
    assert "runs row 1, split" in out.stdout and "divided optimally" in out.stdout
