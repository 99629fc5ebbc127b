"""All 2-way and 3-way marginals of a flights-shaped table released from the CLI with its
defaults (issue 22): pure ε, (ε, δ) and --select em take the tables route, answer every
query (or the selected ones) at an error no worse than the residual path's, and charge the
ledger once. A smaller version of workloads/nycflights_*.toml: the same six declared
attributes (ranges, categories with an "other" cell, numeric bins with a missing cell) on
synthetic raw values; no wall-clock assertion (timings: benchmarks/nycflights.py)."""

import csv
import json

import numpy as np
import pytest

from matmech.cli import main
from matmech.release import release_factored
from matmech.sources.engines import marginal_counts
from matmech.io.specs import load_spec

SPEC = """
name = "flights-shaped, all {k}-way marginals"

[[attributes]]
name = "month"
range = [1, 4]

[[attributes]]
name = "carrier"
categories = ["AA", "B6", "DL"]
other = "other"
policy = "other"

[[attributes]]
name = "origin"
categories = ["EWR", "JFK", "LGA"]

[[attributes]]
name = "hour"
range = [4, 23]
width = 5
policy = "clip"

[[attributes]]
name = "dep_delay"
edges = [-1000, 0, 30, 10000]
other = "cancelled"
policy = "clip"
missing = "other"

[[attributes]]
name = "distance"
edges = [0, 500, 1500, 6000]
policy = "clip"

[[queries]]
kind = "marginals"
k = {k}
"""


@pytest.fixture(scope="module")
def flights(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("flights")
    rng = np.random.default_rng(13)
    n = 3000
    path = tmp / "flights.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["month", "carrier", "origin", "hour", "dep_delay", "distance"])
        for _ in range(n):
            delay = "" if rng.random() < 0.03 else int(rng.integers(-20, 300))
            w.writerow(
                [
                    int(rng.integers(1, 5)),
                    ["AA", "B6", "DL", "UA", "WN"][rng.integers(0, 5)],
                    ["EWR", "JFK", "LGA"][rng.integers(0, 3)],
                    int(rng.integers(1, 24)),
                    delay,
                    int(rng.integers(80, 5000)),
                ]
            )
    specs = {}
    for k in (2, 3):
        specs[k] = tmp / f"flights_{k}way.toml"
        specs[k].write_text(SPEC.format(k=k))
    return tmp, path, specs


def _release(capsys, *args):
    capsys.readouterr()
    assert main(["release", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _residual_path(spec_path, data, delta):
    """The residual path from Python, as issue 22 measured it (strategy='residual', lattice search)."""
    spec = load_spec(spec_path)
    tables = marginal_counts(str(data), spec.schema, [tuple(range(len(spec.domain)))])
    return release_factored(
        tables,
        spec.workload,
        1.0,
        delta,
        strategy="residual",
        search="lattice",
        rng=np.random.default_rng(0),
    )


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_defaults_take_the_tables_route(flights, capsys, k, delta):
    _, data, specs = flights
    spec = load_spec(specs[k])
    out = _release(capsys, str(specs[k]), "--data", str(data), "--eps", "1", "--delta", str(delta))
    assert out["route"] == "tables" and out["strategy"]["name"] == "residual"
    assert out["answered"] == out["queries_total"] == spec.workload.shape[0] == len(out["queries"])
    ref = _residual_path(specs[k], data, delta)
    assert out["rmse"] <= np.sqrt(ref.expected_error / ref.answers.size) * (1 + 1e-9)
    # the published std are the plan's, whatever the data form: the Python release on the tables
    same = release_factored(
        marginal_counts(str(data), spec.schema, [tuple(range(6))]),
        spec.workload,
        1.0,
        delta,
        rng=np.random.default_rng(1),
    )
    np.testing.assert_allclose([q["std"] for q in out["queries"]], same.std, rtol=1e-12)


@pytest.mark.parametrize("k", [2, 3])
def test_select_em_charges_the_ledger_once_and_answers(flights, capsys, k):
    tmp, data, specs = flights
    ledger = tmp / f"ledger_{k}.db"
    if ledger.exists():
        ledger.unlink()
    assert main(["budget", "init", str(ledger), "--eps", "1.5"]) == 0
    out = _release(
        capsys,
        str(specs[k]),
        "--data",
        str(data),
        "--eps",
        "1",
        "--select",
        "em",
        "--select-eps",
        "0.1",
        "--c",
        "5",
        "--ledger",
        str(ledger),
    )
    assert out["route"] == "tables" and out["answered"] == 5
    assert out["budget_remaining"][0] == pytest.approx(0.5)
    capsys.readouterr()
    assert main(["budget", "history", str(ledger), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["spends"]) == 1


def test_advise_names_the_route_release_takes(flights, capsys):
    _, _, specs = flights
    capsys.readouterr()
    assert main(["advise", str(specs[2]), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["auto_plan"]["kind"] == "residual" and out["auto_plan"]["rmse"] > 0
    assert out["auto_plan"]["name"] == out["ranked"][0]["name"] == out["best"]
    assert out["deterministic"] is True and out["time_budget"] is None
    assert main(["advise", str(specs[2])]) == 0
    assert "release --strategy auto (the default) runs row 1, residual" in capsys.readouterr().out


def test_the_shipped_flights_specs_parse_to_the_documented_shape(root):
    for k, rows in ((2, 1114), (3, 11844)):
        spec = load_spec(root / f"workloads/nycflights_{k}way.toml")
        assert spec.domain == (12, 16, 3, 10, 6, 6) and spec.workload.shape == (rows, 207360)


@pytest.mark.parametrize(
    "extra", [[], ["--delta", "1e-6"], ["--select", "em", "--select-eps", "0.1", "--c", "4"]]
)
def test_the_shipped_3way_spec_with_integer_codes(root, tmp_path, capsys, extra):
    """workloads/marginals_3way_5attr.toml (bare sizes, codes): the histogram is summed into
    the tables, whatever the mode (issue 22: refused, or 315 GiB after minutes)."""
    codes = np.random.default_rng(4).integers(0, 10, size=(400, 5))
    data = tmp_path / "codes.csv"
    np.savetxt(data, codes, fmt="%d", delimiter=",", header="a,b,c,d,e", comments="")
    cols = [arg for c in "abcde" for arg in ("--column", c)]
    out = _release(
        capsys,
        str(root / "workloads/marginals_3way_5attr.toml"),
        "--data",
        str(data),
        *cols,
        "--eps",
        "1",
        *extra,
    )
    assert out["route"] == "tables"
    assert out["answered"] == (4 if extra and extra[0] == "--select" else 10_000)
