"""What the CLI tests share: the subprocess runner, the small specs and data files (fixtures
``files`` and ``people``, bound by name in each test module), CSV reading and the in-process
error check."""

import csv
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from matmech.cli import main


def run(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "matmech.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


BANDS_SPEC = """
name = "bands"
domain = [32]
attributes = ["age"]
[[queries]]
kind = "ranges"
intervals = [[0, 7], [8, 15], [16, 23], [24, 31], [0, 31]]
labels = ["0-7", "8-15", "16-23", "24-31", "all"]
"""
GRID_SPEC = """
domain = [8, 4]
attributes = ["age", "city"]
[[queries]]
kind = "marginals"
attrs = [[0], [1], []]
"""


@pytest.fixture
def files(tmp_path):
    """A 1-D and a 2-D spec, and a data file whose ages are heavy in 0-15 and light above."""
    r = np.random.default_rng(0)
    age = np.concatenate([r.integers(0, 16, 3000), r.integers(16, 32, 40)])
    city = r.integers(0, 4, age.size)
    data = tmp_path / "people.csv"
    with open(data, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "age", "city", "age8"])
        for i, (a, c) in enumerate(zip(age, city)):
            w.writerow([i, a, c, a // 4])
    (tmp_path / "bands.toml").write_text(BANDS_SPEC)
    (tmp_path / "grid.toml").write_text(GRID_SPEC)
    truth = np.array(
        [
            np.sum((age >= lo) & (age <= hi))
            for lo, hi in [(0, 7), (8, 15), (16, 23), (24, 31), (0, 31)]
        ]
    )
    return tmp_path, data, truth, (age // 4, city)


def release_args(d, data, *rest, column="age") -> list[str]:
    """``matmech release`` of the bands spec in ``d`` on ``data``, one ``--column``, then
    ``rest``; positions 0-5 are always release, spec, --data, data, --column, column (tests
    slice the list there)."""
    return ["release", str(d / "bands.toml"), "--data", str(data), "--column", column, *rest]


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _main_error(capsys, *args):
    code = main(list(args))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("matmech: error: "), err
    return err


def _spends(path):
    from matmech.privacy.ledger import Ledger

    return Ledger.open(path).ledger


PEOPLE = Path(__file__).resolve().parents[2] / "examples" / "data"


@pytest.fixture
def people(tmp_path):
    """The shipped people table (CSV and a Parquet copy), its specs and a ledger with eps = 2."""
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    parquet = tmp_path / "people.parquet"
    pq.write_table(pacsv.read_csv(PEOPLE / "people.csv"), parquet)
    led = str(tmp_path / "budget.db")
    assert main(["budget", "init", led, "--eps", "2"]) == 0
    return tmp_path, PEOPLE / "people.csv", parquet, led


def _umask():
    import os

    m = os.umask(0)
    os.umask(m)
    return m
