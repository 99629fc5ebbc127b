"""``matmech release``: answer files, strategies, selection, declared domains, CSV and
Parquet inputs, and every error path spending nothing."""

import csv
import json

import numpy as np
import pytest

from matmech.cli import main
from matmech.io.store import load_strategy

import cli_cases
from cli_cases import run, read_csv, release_args, _main_error, _spends, _umask, PEOPLE

files = cli_cases.files  # the fixture, bound by name
people = cli_cases.people  # the fixture, bound by name


def test_release_writes_one_row_per_query(files):
    d, data, truth, _ = files
    out_csv = d / "answers.csv"
    out = run(
        *release_args(d, data, "--eps", "1", "--strategy", "hierarchical", "--out", str(out_csv)),
    )
    assert out.returncode == 0, out.stderr
    assert (
        "records" not in out.stdout.replace("record count is private", "")
        and "5 queries answered" in out.stdout
        and "(secure randomness)" in out.stdout
    )
    rows = read_csv(out_csv)
    assert list(rows[0]) == ["query", "answer", "std", "lower", "upper", "interval", "coverage"]
    assert [r["query"] for r in rows] == ["0-7", "8-15", "16-23", "24-31", "all"]
    for r, t in zip(rows, truth):
        a, s = float(r["answer"]), float(r["std"])
        assert abs(a - t) < 10 * s
        assert (
            float(r["upper"]) - a == pytest.approx(a - float(r["lower"])) and float(r["upper"]) > a
        )
        assert r["interval"] in ("exact", "convolution", "normal", "cornish-fisher")
        assert r["coverage"] == "" or float(r["coverage"]) >= 0.95


def test_release_with_a_saved_strategy_and_json(files):
    d, data, truth, _ = files
    assert (
        run(
            "advise", str(d / "bands.toml"), "--eps", "1", "--save-strategy", str(d / "s.npz")
        ).returncode
        == 0
    )
    out = run(
        *release_args(d, data, "--eps", "1", "--strategy", str(d / "s.npz"), "--json"),
    )
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["strategy_file"] == str(d / "s.npz") and "records" not in res and res["out"] is None
    assert res["noise"]["secure_randomness"] is True and res["selection"] is None
    assert [q["query"] for q in res["queries"]] == ["0-7", "8-15", "16-23", "24-31", "all"]
    assert all(abs(q["answer"] - t) < 10 * q["std"] for q, t in zip(res["queries"], truth))


def test_release_with_svt_selection(files):
    d, data, truth, _ = files
    out_csv = d / "selected.csv"
    out = run(
        *release_args(
            d,
            data,
            "--eps",
            "1",
            "--strategy",
            "identity",
            "--select",
            "svt",
            "--threshold",
            "600",
            "--c",
            "5",
            "--select-eps",
            "0.5",
            "--out",
            str(out_csv),
        ),
    )
    assert out.returncode == 0, out.stderr
    assert "3 of 5 queries answered" in out.stdout and "selection: svt, eps 0.5" in out.stdout
    rows = read_csv(out_csv)
    assert list(rows[0]) == [
        "query",
        "answer",
        "std",
        "lower",
        "upper",
        "interval",
        "coverage",
        "selected",
        "status",
    ]
    picked = [r["query"] for r in rows if r["selected"] == "true"]
    assert picked == ["0-7", "8-15", "all"]  # ~1500, ~1500, 3040 records; the others ~20
    for r in rows:
        if r["selected"] == "false":
            assert (
                r["answer"] == r["std"] == r["lower"] == r["interval"] == ""
                and r["status"] == "below threshold"
            )
        else:
            assert r["status"] == "answered" and float(r["std"]) > 0
    js = run(
        *release_args(
            d, data, "--eps", "1", "--json", "--select", "em", "--c", "2", "--select-eps", "0.4"
        ),
    )
    assert js.returncode == 0, js.stderr
    sel = json.loads(js.stdout)["selection"]
    assert sel["method"] == "em" and sel["selected"] == 2 and sel["eps"] == 0.4


def test_release_two_columns_for_a_two_attribute_spec(files):
    d, data, _, (age8, city) = files
    out_csv = d / "grid.csv"
    out = run(
        "release",
        str(d / "grid.toml"),
        "--data",
        str(data),
        "--column",
        "age8",
        "--column",
        "city",
        "--eps",
        "2",
        "--strategy",
        "identity",
        "--out",
        str(out_csv),
    )
    assert out.returncode == 0, out.stderr
    rows = read_csv(out_csv)
    assert [r["query"] for r in rows] == [f"age={i}" for i in range(8)] + [
        f"city={j}" for j in range(4)
    ] + ["total"]
    truth = (
        list(np.bincount(age8, minlength=8)) + list(np.bincount(city, minlength=4)) + [age8.size]
    )
    assert all(abs(float(r["answer"]) - t) < 10 * float(r["std"]) for r, t in zip(rows, truth))


def test_release_and_advise_errors_as_subprocesses(files):
    d, data, _, _ = files
    bad_spec = d / "bad.toml"
    bad_spec.write_text('domain = [4]\n[[queries]]\nkind = "cube"\n')
    wide = d / "wide.csv"
    wide.write_text("age\n3\n40\n")
    base = release_args(d, data, "--out", str(d / "o.csv"), "--eps", "1")
    for args, text in [
        (["advise", str(d / "missing.toml")], "no such spec file"),
        (["advise", str(bad_spec)], "queries[0].kind"),
        (
            ["advise", str(d / "bands.toml"), "--eps", "0"],
            "eps must be a positive finite number, got 0",
        ),
        (
            [
                "release",
                str(bad_spec),
                "--data",
                str(data),
                "--column",
                "age",
                "--out",
                "o.csv",
                "--eps",
                "1",
            ],
            "queries[0].kind",
        ),
        ([*base[:3], str(d / "nope.csv"), *base[4:]], "nope.csv: no such data file"),
        ([*base, "--eps", "-1"], "eps must be a positive finite number, got -1"),
        (
            [*base[:5], "height", *base[6:]],
            "no column 'height' in the header line (4 name(s), not shown",
        ),
        (
            [*base[:3], str(wide), *base[4:]],
            "column 'age': a value is outside the spec's domain",
        ),
    ]:
        out = run(*args)
        assert out.returncode == 2, (args, out.stdout)
        assert (
            out.stderr.count("\n") == 1 and text in out.stderr and "Traceback" not in out.stderr
        ), out.stderr
    assert not (d / "o.csv").exists()


def test_more_error_paths_in_process(files, capsys):
    d, data, _, _ = files
    for name, text in [
        ("text.csv", "age\n3\nabc\n"),
        ("frac.csv", "age\n2.5\n"),
        ("empty.csv", ""),
        ("header.csv", "age\n"),
    ]:
        (d / name).write_text(text)
    base = release_args(d, data, "--eps", "1", "--out", str(d / "o.csv"))
    for args, text in [
        (
            [*base[:3], str(d / "text.csv"), *base[4:]],
            "column 'age': an entry is not a number",
        ),
        (
            [*base[:3], str(d / "frac.csv"), *base[4:]],
            "a value is outside the spec's domain (expected an integer code 0..31)",
        ),
        ([*base[:3], str(d / "empty.csv"), *base[4:]], "the data file is empty"),
        ([*base, "--column", "city"], "give one --column per attribute"),
        ([*base, "--delta", "1"], "delta must be in [0, 1)"),
        ([*base, "--strategy", "wavelets"], "'wavelets' is neither"),
        ([*base, "--strategy", str(data)], "not a matmech strategy file"),
        ([*base, "--threshold", "5"], "--threshold: only used with --select"),
        ([*base, "--select", "svt", "--c", "2"], "--select needs --select-eps"),
        (
            [*base, "--select", "svt", "--c", "2", "--select-eps", "1"],
            "must be less than release's total eps = 1.0",
        ),
        ([*base, "--select", "svt", "--c", "2", "--select-eps", "0.2"], "needs a threshold"),
        (
            [*base, "--select", "svt", "--c", "2", "--select-eps", "0.2", "--threshold", "lots"],
            "--threshold must be a number or 'auto'",
        ),
        (
            [*base, "--select", "svt", "--c", "9", "--select-eps", "0.2", "--threshold", "9"],
            "c = 9 is more than the 5 rows",
        ),
        (
            [*base, "--select", "em", "--c", "2", "--select-eps", "0.2", "--threshold", "9"],
            "takes no threshold",
        ),
        ([*base[:-1], str(d / "no/dir/o.csv")], "does not exist"),
        (base[:-2], "give --out FILE.csv"),
        (
            ["advise", str(d / "bands.toml"), "--save-strategy", str(d / "no/dir/s.npz")],
            "does not exist",
        ),
        (
            ["advise", str(d / "bands.toml"), "--time-budget", "-3"],
            "--time-budget must be a positive number",
        ),
    ]:
        assert text in _main_error(capsys, *args), args
    assert not (d / "o.csv").exists()


def test_release_people_csv_with_declared_domains_labels_and_postprocessing(people, capsys):
    d, csv_path, _, led = people
    capsys.readouterr()
    out = d / "tables.csv"
    args = [
        "release",
        str(PEOPLE / "people.toml"),
        "--data",
        str(csv_path),
        "--eps",
        "0.5",
        "--strategy",
        "identity",
        "--ledger",
        led,
        "--out",
        str(out),
        "--round",
        "0",
        "--nonnegative",
    ]
    assert main(args) == 0
    assert "charged eps = 0.5" in capsys.readouterr().out
    rows = read_csv(out)
    labels = [r["query"] for r in rows]
    assert (
        labels[:2] == ["age 0-19", "age 20-39"]
        and "sex=F, state=CA" in labels
        and "sex=other/unknown, state=other" in labels
    )
    assert (
        "income [20k, 30k)" in labels and labels[-1] == "total" and len(rows) == 5 + 3 * 11 + 5 + 1
    )
    for r in rows:  # post-processing: whole, non-negative answers and intervals; std untouched
        for k in ("answer", "lower", "upper"):
            assert float(r[k]) >= 0 and float(r[k]) == round(float(r[k]))
        assert float(r["std"]) > 0 and float(r["std"]) != round(float(r["std"]))
    assert (out.stat().st_mode & 0o777) == 0o666 & ~_umask()
    assert sorted(p.name for p in d.iterdir()) == [
        "budget.db",
        "people.parquet",
        "tables.csv",
    ]  # no temporary file left


def test_release_people_parquet_age_bands_json(people, capsys):
    d, _, parquet, led = people
    capsys.readouterr()
    assert (
        main(
            [
                "release",
                str(PEOPLE / "age_bands.toml"),
                "--data",
                str(parquet),
                "--eps",
                "0.25",
                "--json",
                "--strategy",
                "identity",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    labels = [q["query"] for q in out["queries"]]
    assert labels == [
        "age 0-17",
        "age 18-24",
        "age 25-34",
        "age 35-44",
        "age 45-54",
        "age 55-64",
        "age 65-74",
        "age 75-99",
        "total",
    ]
    assert out["postprocessing"] == {"round": None, "nonnegative": False}


def test_bare_size_spec_reads_codes_from_parquet(files, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    d, _, truth, (age8, city) = files
    path = tmp_path / "codes.parquet"
    pq.write_table(pa.table({"age8": age8, "city": city}), path)
    assert (
        main(
            [
                "release",
                str(d / "grid.toml"),
                "--data",
                str(path),
                "--column",
                "age8",
                "--column",
                "city",
                "--eps",
                "1",
                "--json",
                "--strategy",
                "identity",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["queries"][-1]["query"] == "total" and len(out["queries"]) == 8 + 4 + 1


def test_csv_with_bom_semicolons_and_latin1(files, tmp_path, capsys):
    d, _, _, (age8, _) = files
    bom = tmp_path / "bom.csv"
    bom.write_bytes(
        "\ufeffage;name\n".encode("utf-8") + "".join(f"{a};Zoë\n" for a in age8 * 4).encode("utf-8")
    )
    latin = tmp_path / "latin.csv"
    latin.write_bytes(
        "age,name\n".encode() + "".join(f"{a},Zoë\n" for a in age8 * 4).encode("latin-1")
    )
    base = [
        "release",
        str(d / "bands.toml"),
        "--column",
        "age",
        "--eps",
        "1",
        "--json",
        "--strategy",
        "identity",
    ]
    assert main([*base, "--data", str(bom)]) == 0
    capsys.readouterr()
    assert main([*base, "--data", str(latin), "--encoding", "latin-1"]) == 0
    capsys.readouterr()
    err = _main_error(capsys, *base, "--data", str(latin))
    assert "latin.csv: not valid utf-8 text" in err and "--encoding" in err


def test_every_release_error_path_spends_nothing(people, capsys):
    d, csv_path, parquet, led = people
    spec = str(PEOPLE / "people.toml")
    strict = d / "strict.toml"
    strict.write_text(
        '[[attributes]]\nname = "age"\nrange = [0, 99]\npolicy = "error"\nmissing = "drop"\n'
        '[[queries]]\nkind = "total"\n'
    )
    nocol = d / "nocol.toml"
    nocol.write_text(
        '[[attributes]]\nname = "height"\nrange = [0, 9]\n[[queries]]\nkind = "total"\n'
    )
    latin = d / "latin.csv"
    latin.write_bytes(
        "age,sex,income,state\n1,F,2.0,CA\n".encode() + "3,F,Zoë,CA\n".encode("latin-1")
    )
    (d / "outdir").mkdir()
    (d / "afile").write_text("x")
    base = [
        "release",
        spec,
        "--data",
        str(csv_path),
        "--eps",
        "0.5",
        "--ledger",
        led,
        "--strategy",
        "identity",
    ]
    before = _spends(led)
    for args, text in [
        ([*base, "--out", str(d / "outdir")], "is a directory"),
        ([*base, "--out", str(csv_path)], "is the same file as --data"),
        ([*base, "--out", led], "is the same file as --ledger"),
        ([*base, "--out", spec], "is the same file as spec"),
        ([*base, "--out", str(d / "afile" / "o.csv")], "does not exist"),
        ([*base, "--out", str(d / "o.csv"), "--column", "age"], "drop --column"),
        ([*base, "--out", str(d / "o.csv"), "--round", "-1"], "--round takes a number of decimals"),
        (
            ["release", str(strict), *base[2:], "--out", str(d / "o.csv")],
            "column 'age' (attribute 'age') has values outside",
        ),
        (["release", str(nocol), *base[2:], "--out", str(d / "o.csv")], "no column(s) ['height']"),
        (
            ["release", spec, "--data", str(latin), *base[4:], "--out", str(d / "o.csv")],
            "not valid utf-8 text",
        ),
        (
            [
                "release",
                spec,
                "--data",
                str(d / "people.xlsx"),
                *base[4:],
                "--out",
                str(d / "o.csv"),
            ],
            "expected a .csv",
        ),
        (
            [
                "release",
                spec,
                "--data",
                str(d / "nope.parquet"),
                *base[4:],
                "--out",
                str(d / "o.csv"),
            ],
            "no such data file",
        ),
        ([*base[:5], "3", *base[6:], "--out", str(d / "o.csv")], "cannot spend"),
    ]:
        err = _main_error(capsys, *args)
        assert text in err, (args, err)
        assert _spends(led) == before, args
        assert not (d / "o.csv").exists() and not [
            p for p in d.iterdir() if p.name.endswith(".tmp")
        ], args
    assert csv_path.stat().st_size > 40_000 and (d / "afile").read_text() == "x"
    # the policy error names the column only: no value of the table is in the message
    err = _main_error(capsys, "release", str(strict), *base[2:], "--json")
    assert not any(ch.isdigit() for ch in err.split("has values")[1])


def test_release_of_a_large_declared_domain_uses_marginal_tables(tmp_path, capsys):
    """8 attributes of 20 values (2.56·10¹⁰ cells): the CLI answers the spec's 2-way marginals
    from marginal tables counted by the engine; the histogram is never built, and the labels
    come from the declaration."""
    rng = np.random.default_rng(3)
    names = [f"a{i}" for i in range(8)]
    rows = rng.integers(0, 20, size=(300, 8))
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
            ]
        )
        == 0
    )
    table = list(csv.DictReader(out.open()))
    assert len(table) == 28 * 400
    assert table[0]["query"].startswith("a0=0") and all(
        np.isfinite(float(r["std"])) for r in table[:50]
    )
    printed = capsys.readouterr().out.replace(str(tmp_path), "<tmp>")
    assert "300" not in printed  # no record count (pytest's own tmp path may hold "300")


# -- no command overwrites a file unasked; a charged release that cannot write says so (issue 23) --


def test_no_command_overwrites_an_existing_file_unless_told(files, capsys):
    d, data, _, _ = files
    spec = str(d / "bands.toml")
    victim = d / "precious.npz"
    victim.write_bytes(b"not yours")
    err = _main_error(capsys, "advise", spec, "--eps", "1", "--save-strategy", str(victim))
    assert "the file exists; pass --overwrite" in err and victim.read_bytes() == b"not yours"
    out_csv = d / "answers.csv"
    out_csv.write_text("keep me\n")
    base = [
        "release",
        spec,
        "--data",
        str(data),
        "--column",
        "age",
        "--eps",
        "1",
        "--strategy",
        "identity",
    ]
    err = _main_error(capsys, *base, "--out", str(out_csv))
    assert "pass --overwrite" in err and out_csv.read_text() == "keep me\n"
    assert not [p for p in d.iterdir() if p.name.endswith(".tmp")]  # no temporary file left behind
    assert main([*base, "--out", str(out_csv), "--overwrite"]) == 0
    assert out_csv.read_text().startswith("query,answer,std")
    assert main(["advise", spec, "--eps", "1", "--save-strategy", str(victim), "--overwrite"]) == 0

    assert load_strategy(victim).shape[1] == 32


def test_a_release_that_cannot_write_its_answers_says_the_budget_was_spent(
    files, capsys, monkeypatch
):
    import errno

    import matmech.cli.release as cli  # the release command writes through its own name

    d, data, _, _ = files
    led = str(d / "budget.db")
    assert main(["budget", "init", led, "--eps", "2"]) == 0
    capsys.readouterr()

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cli, "write_answers", disk_full)
    out = d / "o.csv"
    args = release_args(d, data, "--eps", "0.5", "--strategy", "identity", "--out", str(out))
    err = _main_error(capsys, *args, "--ledger", led)
    assert "No space left on device" in err and "AFTER the noise was drawn" in err
    assert "budget of this release is spent (eps = 0.5" in err and f"charged to ledger {led}" in err
    assert [e.eps for e in _spends(led)] == [0.5]  # the spend is on the ledger, as the message says
    assert not out.exists() and not [p for p in d.iterdir() if p.name.endswith(".tmp")]
    # without a ledger the message says the spend is recorded nowhere
    err = _main_error(capsys, *args)
    assert "not recorded in any ledger, but spent all the same" in err


def test_release_reads_a_gzip_csv_like_the_plain_one(files, capsys):
    import gzip

    d, data, _, _ = files
    packed = d / "people.csv.gz"
    with gzip.open(packed, "wb") as f:
        f.write(data.read_bytes())
    outs = []
    for src, name in ((data, "a.csv"), (packed, "b.csv")):
        assert (
            main(
                release_args(d, src, "--eps", "1", "--strategy", "identity", "--out", str(d / name))
            )
            == 0
        )
        outs.append([r.split(",")[0] for r in (d / name).read_text().splitlines()])
    assert outs[0] == outs[1] and len(outs[0]) > 1
