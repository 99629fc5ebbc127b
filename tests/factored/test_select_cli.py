"""``matmech release SPEC --data ... --select ...`` on a declared domain too large for the
histogram (issue 14 item 3): rows selected and answered from marginal tables only."""

import csv
import re

import numpy as np

from matmech.cli import main


def test_cli_selection_on_a_large_declared_domain(tmp_path, capsys, monkeypatch):
    import matmech.sources.engines as engines

    def no_histogram(*a, **k):
        raise AssertionError("the histogram must not be built")

    monkeypatch.setattr(engines, "histogram", no_histogram)
    rng = np.random.default_rng(3)
    names = [f"a{i}" for i in range(8)]  # 20⁸ = 2.56·10¹⁰ cells
    rows = rng.integers(0, 20, size=(413, 8))
    rows[:200, 1] = 7  # a few large cells to select
    rows[:200, 2] = 3
    data = tmp_path / "wide.csv"
    data.write_text(",".join(names) + "\n" + "\n".join(",".join(map(str, r)) for r in rows) + "\n")
    spec = tmp_path / "wide.toml"
    spec.write_text(
        'name = "wide"\n'
        + "".join(f'[[attributes]]\nname = "{n}"\nrange = [0, 19]\n\n' for n in names)
        + '[[queries]]\nkind = "marginals"\nk = 2\n'
    )
    out = tmp_path / "answers.csv"
    assert (
        main(
            [
                "release",
                str(spec),
                "--data",
                str(data),
                "--eps",
                "1",
                "--delta",
                "1e-6",
                "--out",
                str(out),
                "--select",
                "em",
                "--c",
                "3",
                "--select-eps",
                "0.4",
            ]
        )
        == 0
    )
    table = list(csv.DictReader(out.open()))
    assert len(table) == 28 * 400
    answered = [r for r in table if r["status"] == "answered"]
    assert len(answered) == 3 and all(r["selected"] == "true" for r in answered)
    assert {r["status"] for r in table} == {"answered", "not among the top c"}
    assert any(
        r["query"].startswith("a1=7, a2=3") for r in answered
    )  # 200 of 413 records: always on top
    printed = capsys.readouterr().out
    assert not re.search(r"(?<![\d.])413(?![\d.])", printed) and "3 row(s) selected" in printed
    # the JSON report: the selection record, every query with its status, no record count
    import json

    assert (
        main(
            [
                "release",
                str(spec),
                "--data",
                str(data),
                "--eps",
                "1",
                "--out",
                str(tmp_path / "b.csv"),
                "--json",
                "--select",
                "topc-gap",
                "--c",
                "2",
            ]
        )
        == 0
    )
    rep = json.loads(capsys.readouterr().out)
    assert rep["selection"]["method"] == "topc-gap" and rep["selection"]["eps_advised"] is True
    assert (
        rep["answered"] == 2
        and rep["queries_total"] == 28 * 400
        and len(rep["queries"]) == 28 * 400
    )
    assert not re.search(
        r"(?<![\d.])413(?![\d.])", json.dumps({k: v for k, v in rep.items() if k != "queries"})
    )
