"""A curator's release: raw table, declared domains, ledger
========================================================

A curator's release, start to finish: a raw people table → declared domains → a ledger →
labelled noisy tables, first with the Python API and then with the ``matmech`` command.

The table is examples/data/people.csv (2,000 synthetic records made by
examples/data/make_people.py: raw ages, 'F'/'M', float incomes, two-letter states, with
missing and out-of-domain values). The domains are declared in examples/data/people.toml and
age_bands.toml (never learned from the data); the mapping runs inside DuckDB. The budget is a
SQLite ledger with a total of eps = 1: the API release spends 0.5, the CLI release the other
0.5, and a third release is refused before reading anything.
"""

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from matmech import release
from matmech.sources.engines import histogram
from matmech.io.specs import load_spec
from matmech.privacy.ledger import Ledger
from matmech import release_table

DATA = (
    Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
) / "data"  # the docs gallery runs this file from examples/ without __file__


def main():
    t0 = time.perf_counter()
    spec = load_spec(DATA / "people.toml")
    print(
        f"spec {spec.name!r}: {spec.workload.shape[0]} queries over {spec.workload.shape[1]} cells"
    )
    for a in spec.schema.attributes:
        print(
            f"  {a.name:<7} {a.size:>2} cells, out-of-domain -> {a.policy}, missing -> {a.missing}: "
            f"{', '.join(a.value_label(c) for c in range(min(a.size, 4)))}{', ...' if a.size > 4 else ''}"
        )

    with tempfile.TemporaryDirectory() as tmp:
        ledger_path = Path(tmp) / "people_budget.db"
        ledger = Ledger.create(ledger_path, 1.0)

        # 1. Python API: the raw CSV is counted by DuckDB into the declared cells (x stays private)
        x = histogram(DATA / "people.csv", spec.schema)
        assert x.shape == (spec.workload.shape[1],)
        rel = release(x, spec.workload, 0.5, strategy="optimize", budget=ledger)
        rows = release_table(rel, spec.labels)
        print(
            f"\nAPI release, eps = 0.5 ({rel.strategy_name}), RMSE/query {np.sqrt(rel.expected_error / len(rows)):.2f}:"
        )
        for r in [rows[0], rows[1], rows[5], rows[6], rows[5 + 33], rows[-1]]:
            print(f"  {r['query']:<32} {r['answer']:>9.1f}  ± {1.96 * r['std']:.1f}")
        labels = {r["query"] for r in rows}
        assert {"age 20-39", "sex=F, state=CA", "income [20k, 30k)", "total"} <= labels

        # 2. The same table through the command line, on the other half of the budget
        out = Path(tmp) / "bands.csv"
        cmd = [
            sys.executable,
            "-m",
            "matmech.cli",
            "release",
            str(DATA / "age_bands.toml"),
            "--data",
            str(DATA / "people.csv"),
            "--eps",
            "0.5",
            "--ledger",
            str(ledger_path),
            "--out",
            str(out),
            "--round",
            "0",
            "--nonnegative",
        ]
        print(
            "\n$ matmech release examples/data/age_bands.toml --data examples/data/people.csv --eps 0.5 "
            "--ledger people_budget.db --out bands.csv --round 0 --nonnegative"
        )
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        print("  " + done.stdout.strip().replace("\n", "\n  "))
        bands = out.read_text().splitlines()
        print("  " + "\n  ".join(bands[:4]) + "\n  ...")
        assert bands[2].startswith("age 18-24,")

        # 3. The ledger is spent: a third release is refused before anything is read or drawn
        again = subprocess.run(
            [*cmd[:-5], "--out", str(Path(tmp) / "again.csv")], capture_output=True, text=True
        )
        assert (
            again.returncode == 2
            and "cannot spend" in again.stderr
            and not (Path(tmp) / "again.csv").exists()
        )
        print(f"\n$ (a third release) -> {again.stderr.strip()}")
        spent = Ledger.open(ledger_path).status()
        assert spent["spends"] == 2 and spent["remaining"]["eps"] == 0
        print(
            f"\nRESULT: {len(rows)} labelled table cells (API) and {len(bands) - 1} age bands (CLI) released from the raw "
            f"people table; ledger spent eps = {spent['spent']['eps']:g} of 1 in {spent['spends']} spends "
            f"({time.perf_counter() - t0:.1f} s)"
        )


if __name__ == "__main__":
    main()
