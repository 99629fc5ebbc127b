"""``matmech compare`` and ``matmech plot`` as subprocesses, and one-line errors."""

import json

from cli_cases import run


def test_compare_prints_ranked_table(root):
    out = run("compare", str(root / "workloads/all_range_1024.toml"), "--eps", "1")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "524,800 queries over 1,024 cells" in lines[0]
    body = [line for line in lines[3:] if line.startswith(("hier", "haar", "identity", "workload"))]
    rmse = [float(line.split()[-3]) for line in body]
    assert rmse == sorted(rmse) and len(body) == 13
    assert "SVD lower bound" in out.stdout and "squared counts" in out.stdout


def test_compare_json_and_delta(root):
    out = run(
        "compare",
        str(root / "workloads/ranges_2d_64x64.toml"),
        "--eps",
        "0.5",
        "--delta",
        "1e-6",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["delta"] == 1e-6 and data["cells"] == 4096
    totals = [r["total"] for r in data["rows"]]
    assert totals == sorted(totals) and all(r["ratio_to_bound"] >= 1 for r in data["rows"])


def test_cli_errors_are_one_line(root, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('domain = [4]\n[[queries]]\nkind = "cube"\n')
    for args, text in [
        (["compare", str(tmp_path / "missing.toml")], "no such spec file"),
        (["compare", str(bad)], "queries[0].kind: expected one of"),
        (
            ["compare", str(root / "workloads/prefix_4096.toml"), "--eps", "0"],
            "eps must be a positive finite number, got 0",
        ),
        (
            ["compare", str(root / "workloads/prefix_4096.toml"), "--delta", "1"],
            "delta must be in [0, 1)",
        ),
    ]:
        out = run(*args)
        assert out.returncode == 2
        assert out.stderr.count("\n") == 1 and text in out.stderr and "Traceback" not in out.stderr


def test_plot_writes_png(root, tmp_path):
    out_file = tmp_path / "err.png"
    out = run("plot", str(root / "workloads/age_bands.toml"), "--out", str(out_file))
    assert out.returncode == 0, out.stderr
    assert out_file.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out_file.stat().st_size > 10_000
    bad = run(
        "plot", str(root / "workloads/age_bands.toml"), "--out", str(tmp_path / "no/such/dir/x.png")
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and bad.stderr.count("\n") == 1
