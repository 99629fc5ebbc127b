"""Privacy-audit regressions of ``matmech release`` (the CLI): a neighbouring pair is never
told apart by a refusal, and no message quotes a record or its line (each failed before)."""

from __future__ import annotations

import contextlib
import io

import pytest

from matmech.cli import main

from cli_cases import release_args

SPEC = """
name = "bands"
domain = [32]
attributes = ["age"]
[[queries]]
kind = "ranges"
intervals = [[0, 7], [0, 31]]
"""


def _release(tmp_path, body, *extra):
    (tmp_path / "bands.toml").write_text(SPEC)
    data = tmp_path / "data.csv"
    data.write_text(body)
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        rc = main(
            release_args(tmp_path, data, "--eps", "1", "--strategy", "identity", "--json", *extra)
        )
    return rc, err.getvalue()


# F1 (cli.py:308-309): the integer-codes path refuses an EMPTY dataset. The empty dataset and
# its neighbour with one record are both valid; one is released and the other refused, so
# the refusal itself tells them apart (and says "the record count is 0"). The library's own
# paths (mm.histogram, the engines, records, every selection method) release on zero records.
def test_cli_releases_on_an_empty_dataset_as_on_its_neighbour(tmp_path):
    rc_one, _ = _release(tmp_path, "age\n3\n")
    rc_empty, err = _release(tmp_path, "age\n")
    assert rc_one == 0
    assert rc_empty == rc_one, err


# F2 (cli.py:301, 321): errors name the line of the defective record. A row position of a
# record (issue 21: "messages quote no row label or index of the data"); when the defect is
# in the last record the line number is the record count + 1.
@pytest.mark.parametrize("bad", ["x", "40"])
def test_cli_errors_name_no_line_of_the_data(tmp_path, bad):
    rc, err = _release(tmp_path, "age\n3\n4\n5\n" + bad + "\n")
    assert rc == 2 and "column 'age'" in err
    assert "line 5" not in err, err


# F3 (cli.py:289): a CSV written without a header line: the CLI quotes its first record as
# "the header" (the engines and discover_categories no longer do, see test_audit_findings).
def test_cli_does_not_quote_a_headerless_first_record(tmp_path):
    rc, err = _release(tmp_path, "alice-smith,4711\nbob,17\n")
    assert rc == 2
    assert "alice-smith" not in err and "4711" not in err, err
