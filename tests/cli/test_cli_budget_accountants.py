"""``matmech budget`` with accountants (issue 33): init --accountant/--rho/--keys, status under
each accountant, migrate."""

import json

import numpy as np
import pytest

import matmech as mm
from matmech.cli import main
from matmech.privacy.accountant import pld_available
from matmech.privacy.ledger import Ledger


def _err(capsys, *argv):
    assert main(list(argv)) == 2
    return capsys.readouterr().err


def test_status_shows_the_spent_budget_under_each_accountant(tmp_path, capsys):
    led = str(tmp_path / "l.db")
    assert main(["budget", "init", led, "--eps", "4", "--delta", "1e-5"]) == 0
    assert "accountant zcdp" in capsys.readouterr().out
    L = Ledger.open(led)
    x = mm.histogram(np.random.default_rng(0).integers(0, 8, 300), 8)
    for _ in range(3):
        mm.release(x, mm.workloads.identity(8), 1.0, 1e-6, budget=L, strategy="identity")
    assert main(["budget", "status", led, "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["accountant"] == "zcdp" and st["spends"] == 3
    under = st["spent_under"]
    assert under["basic"]["eps"] == 3.0 and under["basic"]["delta"] == 3e-6
    assert under["zcdp"]["eps"] < 3.0 and st["spent"] == under["zcdp"]
    if pld_available():
        assert under["pld"]["eps"] <= under["zcdp"]["eps"]
    assert 0 < st["remaining_rho"] < st["total_rho"]
    assert main(["budget", "status", led]) == 0
    text = capsys.readouterr().out
    assert "spent under each accountant" in text and "remaining  rho" in text
    assert main(["budget", "history", led, "--json"]) == 0
    hist = json.loads(capsys.readouterr().out)["spends"]
    assert [h["events"][0]["kind"] for h in hist] == ["discrete_gaussian"] * 3


def test_init_with_rho_an_accountant_or_a_key_directory(tmp_path, capsys):
    led = str(tmp_path / "rho.db")
    assert main(["budget", "init", led, "--rho", "0.5", "--delta", "1e-6"]) == 0
    assert "total rho = 0.5" in capsys.readouterr().out
    assert Ledger.open(led).total_rho == 0.5
    assert "not both" in _err(
        capsys, "budget", "init", str(tmp_path / "x.db"), "--eps", "1", "--rho", "1"
    )
    assert "needs --eps" in _err(capsys, "budget", "init", str(tmp_path / "x.db"))
    assert "invalid choice" in (
        pytest.raises(
            SystemExit,
            main,
            ["budget", "init", str(tmp_path / "x.db"), "--eps", "1", "--accountant", "renyi"],
        )
        and capsys.readouterr().err
    )
    keys = tmp_path / "keys"
    b = str(tmp_path / "basic.db")
    assert (
        main(
            [
                "budget",
                "init",
                b,
                "--eps",
                "1",
                "--delta",
                "1e-6",
                "--accountant",
                "basic",
                "--keys",
                str(keys),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert list(keys.glob("*.json"))
    assert "no key record" in _err(capsys, "budget", "status", b)  # not in the default directory
    assert main(["budget", "status", b, "--keys", str(keys), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["accountant"] == "basic"
    assert main(["budget", "migrate", b, "--keys", str(keys), "--accountant", "zcdp"]) == 0
    assert "accountant zcdp from now on" in capsys.readouterr().out
    assert Ledger.open(b, keys=keys).accountant == "zcdp"
