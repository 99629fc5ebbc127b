"""``matmech release --synthetic``: labelled synthetic records from a release, checked before
anything is spent."""

import csv
from pathlib import Path

import numpy as np

from matmech.estimators.graphical import load_mbi as _load_mbi

_load_mbi()  # mbi is in the test extra (quietly imported): never skipped in CI

from matmech.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PEOPLE = ROOT / "examples" / "data"


def _spec(tmp_path):
    text = (PEOPLE / "people.toml").read_text()
    head = text[: text.index("[[queries]]")]
    spec = tmp_path / "people2.toml"
    spec.write_text(head + '[[queries]]\nkind = "marginals"\nk = 2\n')
    return spec


def test_release_writes_labelled_synthetic_records(tmp_path, capsys):
    spec = _spec(tmp_path)
    out = tmp_path / "synth.csv"
    args = [
        "release", str(spec), "--data", str(PEOPLE / "people.csv"), "--eps", "2",
        "--delta", "1e-6", "--synthetic", str(out), "--synthetic-rows", "3000",
    ]  # fmt: skip
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "no further privacy cost" in text and "no error bars" in text
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3000 and list(rows[0]) == ["age", "sex", "income", "state"]
    assert {r["sex"] for r in rows} <= {"F", "M", "other/unknown"}
    states = {"CA", "TX", "FL", "NY", "PA", "IL", "OH", "GA", "NC", "MI", "other"}
    assert {r["state"] for r in rows} <= states
    # the synthetic sex shares are near the data's (2,000 people, ε = 2: a few points)
    with (PEOPLE / "people.csv").open() as f:
        true = [r["sex"] for r in csv.DictReader(f)]
    for s in ("F", "M"):
        p_true = np.mean([t == s for t in true])
        p_syn = np.mean([r["sex"] == s for r in rows])
        assert abs(p_syn - p_true) < 0.1


def test_an_unwritable_synthetic_path_is_refused_before_the_spend(tmp_path, capsys):
    spec = _spec(tmp_path)
    ledger = tmp_path / "ledger.json"
    assert main(["budget", "init", str(ledger), "--eps", "5", "--delta", "1e-5"]) == 0
    exists = tmp_path / "exists.csv"
    exists.write_text("x\n")
    base = ["release", str(spec), "--data", str(PEOPLE / "people.csv"), "--eps", "1"]
    base += ["--delta", "1e-6", "--ledger", str(ledger)]
    for bad in (str(exists), str(tmp_path / "no" / "dir.csv")):
        assert main([*base, "--synthetic", bad]) == 2
    capsys.readouterr()
    assert main(["budget", "status", str(ledger)]) == 0
    assert ": 0 spend(s)" in capsys.readouterr().out  # nothing was charged
