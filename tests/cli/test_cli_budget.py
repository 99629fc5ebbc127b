"""``matmech budget`` and the ledger a release charges: init, status, history, and no spend
on a refused release."""

import json

from matmech.cli import main

import cli_cases
from cli_cases import run, _main_error, _spends, release_args

files = cli_cases.files  # the fixture, bound by name


def test_budget_ledger_init_release_status_history(files, capsys):
    d, data, _, _ = files
    led = str(d / "budget.db")
    assert main(["budget", "init", led, "--eps", "1", "--delta", "1e-6"]) == 0
    assert "created ledger" in capsys.readouterr().out
    rel = release_args(d, data, "--strategy", "identity", "--ledger", led)
    assert main([*rel, "--eps", "0.6", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ledger"] == led and out["budget_remaining"] == [0.4, 1e-6] and out["eps"] == 0.6
    assert main([*rel, "--eps", "0.3", "--delta", "1e-6", "--out", str(d / "a.csv")]) == 0
    text = capsys.readouterr().out
    assert f"ledger {led}: charged eps = 0.3, delta = 1e-06; remaining eps = 0.1, delta = 0" in text
    # a release the ledger cannot afford: exit 2, nothing written, nothing spent
    before = _spends(led)
    err = _main_error(capsys, *rel, "--eps", "0.2", "--out", str(d / "b.csv"))
    assert "cannot spend (eps=0.2" in err and "only (eps=0.1" in err
    assert _spends(led) == before and not (d / "b.csv").exists()
    assert main(["budget", "status", led, "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert (
        st["spends"] == 2 and st["spent"]["eps_exact"] == "9/10" and st["remaining"]["eps"] == 0.1
    )
    assert main(["budget", "status", led]) == 0
    assert "2 spend(s)" in capsys.readouterr().out
    assert main(["budget", "history", led, "--json"]) == 0
    hist = json.loads(capsys.readouterr().out)["spends"]
    assert [h["eps_exact"] for h in hist] == ["3/5", "3/10"] and hist[1][
        "delta_exact"
    ] == "1/1000000"
    assert all(
        h["spec"].startswith("hmac-sha256:") and h["data"].startswith("hmac-sha256:") for h in hist
    )
    assert main(["budget", "history", led]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and "release 5 queries (identity)" in lines[1]


def test_release_error_paths_spend_nothing_from_the_ledger(files, capsys):
    d, data, _, _ = files
    led = str(d / "budget.db")
    assert main(["budget", "init", led, "--eps", "2"]) == 0
    base = release_args(d, data, "--eps", "1", "--ledger", led, "--out", str(d / "o.csv"))
    for args, text in [
        ([*base[:-1], str(d / "no/dir/o.csv")], "does not exist"),
        ([*base[:3], str(d / "nope.csv"), *base[4:]], "no such data file"),
        ([*base[:5], "height", *base[6:]], "no column 'height'"),
        ([*base, "--strategy", "wavelets"], "'wavelets' is neither"),
        (
            [*base, "--select", "svt", "--c", "2", "--select-eps", "1"],
            "must be less than release's total eps",
        ),
        ([*base, "--delta", "1e-6"], "cannot spend"),  # the ledger has no delta
        ([*base, "--eps", "3"], "cannot spend (eps=3.0"),
        ([*base[:-3], str(d / "missing.db"), *base[-2:]], "no such ledger file"),
    ]:
        assert text in _main_error(capsys, *args), args
        assert _spends(led) == ()
    assert not (d / "o.csv").exists() and not (d / "missing.db").exists()


def test_budget_command_errors(files, capsys):
    d, _, _, _ = files
    led = str(d / "budget.db")
    assert "eps must be a positive finite number, got 0" in _main_error(
        capsys, "budget", "init", led, "--eps", "0"
    )
    assert "delta must be in [0, 1)" in _main_error(
        capsys, "budget", "init", led, "--eps", "1", "--delta", "1"
    )
    assert not (d / "budget.db").exists()
    assert main(["budget", "init", led, "--eps", "1"]) == 0
    capsys.readouterr()
    assert "the file exists" in _main_error(capsys, "budget", "init", led, "--eps", "5")
    assert "no such ledger file" in _main_error(capsys, "budget", "status", str(d / "missing.db"))
    (d / "junk.db").write_text("hello")
    assert "junk.db" in _main_error(capsys, "budget", "history", str(d / "junk.db"))
    assert main(["budget", "history", led]) == 0 and "no spends yet" in capsys.readouterr().out


def test_release_requires_eps_and_ledger_spends_as_a_subprocess(files):
    d, data, _, _ = files
    led = str(d / "budget.db")
    base = release_args(d, data, "--strategy", "identity", "--json")
    out = run(*base)
    assert (
        out.returncode == 2
        and "the following arguments are required: --eps" in out.stderr
        and not out.stdout
    )
    assert run("budget", "init", led, "--eps", "0.5").returncode == 0
    out = run(*base, "--eps", "0.5", "--ledger", led)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["budget_remaining"] == [0.0, 0.0]
    out = run(*base, "--eps", "0.5", "--ledger", led)
    assert (
        out.returncode == 2
        and "cannot spend" in out.stderr
        and out.stderr.count("\n") == 1
        and not out.stdout
    )
    st = json.loads(run("budget", "status", led, "--json").stdout)
    assert st["spends"] == 1 and st["remaining"]["eps_exact"] == "0/1"
