"""Regression tests for the privacy audit of the data readers (no value of the data in a message).

Each test is a reproducer of a finding: it failed before the fix (the message quoted a
record's values or the number of records) and passes after it. The records are private
(DESIGN.md, "The privacy boundary rule"): an error names a file, a column or a position in
the header, never a record's values, a row or a count.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import matmech as mm
from matmech.run.discover import discover_categories
from matmech.io.domain import Domain, integer_range, numeric_bins, time_bins
from matmech.sources.engines import histogram as engine_histogram
from matmech.sources.files import csv_header

#: A record whose values must never be echoed back (a CSV file written without a header line).
SECRET = ("alice-smith", "4711")


def _headerless(tmp_path, first=SECRET):
    path = tmp_path / "no_header.csv"
    path.write_text(",".join(first) + "\nbob-jones,17\n")
    return str(path)


def _assert_no_record(message, values=SECRET):
    for v in values:
        assert v not in message, (v, message)


def test_a_headerless_csv_is_refused_without_quoting_its_first_record(tmp_path):
    """Before: 'no column(s) ['age'] ...; the columns are ['alice-smith', '4711']' (duckdb engine)."""
    path = _headerless(tmp_path)
    with pytest.raises(ValueError, match=r"no column\(s\) \['age'\]") as info:
        engine_histogram(path, Domain((integer_range("age", 0, 99),)))
    _assert_no_record(str(info.value))
    assert "2 name(s), not shown" in str(info.value)
    with pytest.raises(ValueError) as info:  # the same through the top-level histogram
        mm.histogram(path, Domain((integer_range("age", 0, 99),)))
    _assert_no_record(str(info.value))


def test_a_repeated_header_name_is_named_by_its_position_only(tmp_path):
    """Before: 'the header must name every column once, got ['4711', '4711']': a record
    whose two fields are equal, read as the header of a file without one."""
    path = _headerless(tmp_path, first=("4711", "4711"))
    with pytest.raises(ValueError, match=r"position\(s\) \[1\]") as info:
        csv_header(path)
    _assert_no_record(str(info.value), ("4711",))
    with pytest.raises(ValueError) as info:
        engine_histogram(path, Domain((integer_range("age", 0, 99),)))
    _assert_no_record(str(info.value), ("4711",))
    empty = tmp_path / "empty_name.csv"
    empty.write_text("age,,city\n1,2,3\n")
    with pytest.raises(ValueError, match=r"position\(s\) \[1\] is empty or repeated"):
        csv_header(str(empty))


def test_discovery_on_a_headerless_csv_quotes_no_record(tmp_path):
    """Before: "column 'name': no such column; the columns are ['alice-smith', '4711']"; no
    budget is charged (the refusal comes before the spend)."""
    budget = mm.PrivacyBudget(1.0, 1e-5)
    with pytest.raises(ValueError, match="no such column") as info:
        discover_categories(_headerless(tmp_path), "name", 0.5, 1e-6, budget=budget)
    _assert_no_record(str(info.value))
    assert budget.spent == (0.0, 0.0)


def test_in_memory_frames_still_list_their_columns():
    """A DataFrame's column names are its schema, not a record: still listed (helpful)."""
    frame = pd.DataFrame({"age": [1, 2], "city": ["a", "b"]})
    with pytest.raises(ValueError, match=r"the columns are \['age', 'city'\]"):
        engine_histogram(frame, Domain((integer_range("height", 0, 9),)))
    with pytest.raises(ValueError, match=r"the columns are \['age', 'city'\]"):
        discover_categories(frame, "height", 0.5, 1e-6)


def test_columns_of_different_lengths_do_not_show_the_record_counts():
    """Before: 'the columns have different lengths [3, 2]': the numbers of records."""
    with pytest.raises(ValueError, match="different lengths") as info:
        mm.histogram([np.array([0, 1, 1]), np.array([0, 1])], (2, 2))
    assert "3" not in str(info.value) and "2]" not in str(info.value)


@pytest.mark.parametrize(
    "attribute",
    [
        integer_range("age", 0, 9, missing="drop"),
        integer_range("age", 0, 9, policy="clip", missing="other", other="n/a"),
        numeric_bins("age", lo=0, hi=10, width=2, missing="other", other="?"),
    ],
)
def test_a_non_number_in_a_csv_is_a_missing_value_not_a_refusal(tmp_path, attribute):
    """Before: DuckDB pushed TRY_CAST into its CSV scanner, so one record holding a non-number
    ("unknown") made the read fail ('the engine could not read the data') although the declared
    domain maps it to missing (drop / other): a valid dataset refused, its neighbour without
    that record released. Now the CSV counts as the same data in a DataFrame."""
    dom = Domain((attribute,))
    counts = {}
    for name, body in [("without", "age\n1\n3\n"), ("with", "age\n1\nunknown\n3\n")]:
        path = tmp_path / f"{name}.csv"
        path.write_text(body)
        counts[name] = engine_histogram(str(path), dom, engine="duckdb")
        frame = pd.read_csv(path, dtype=str)
        assert np.array_equal(counts[name], engine_histogram(frame, dom, engine="numpy"))
    assert counts["with"].sum() - counts["without"].sum() == (attribute.missing == "other")


def test_an_unparseable_time_in_a_csv_is_a_missing_value(tmp_path):
    """The same for a time attribute binned by month (the day unit already read)."""
    path = tmp_path / "t.csv"
    path.write_text("t\n2013-01-02\nnot-a-date\n2013-01-03 10:00\n")
    dom = Domain((time_bins("t", "2013-01-01", "2013-01-05", unit="month", missing="drop"),))
    assert engine_histogram(str(path), dom, engine="duckdb").tolist() == [2]


def test_a_uint64_value_beyond_int64_is_clipped_not_a_refused_read():
    """Before: a uint64 column holding a value from 2**63 up was cast to BIGINT by DuckDB and
    the read failed, while the numpy engine clipped it: a dataset the domain accepts (policy
    'clip' / 'drop') refused by one engine only."""
    frame = pd.DataFrame({"age": np.array([1, 3, 2**63 + 5], dtype=np.uint64)})
    for attribute in (
        integer_range("age", 0, 9, policy="clip"),
        integer_range("age", -5, 9, policy="drop", width=2),
    ):
        dom = Domain((attribute,))
        want = engine_histogram(frame, dom, engine="numpy")
        assert np.array_equal(engine_histogram(frame, dom, engine="duckdb"), want)


def test_zoned_timestamps_in_text_are_binned_in_utc_by_every_engine(tmp_path):
    """Before: DuckDB cast text to TIMESTAMP, keeping the wall-clock time of "…+05:00" (hour 5
    instead of 0 UTC; "+14:00" on the wrong day) while the numpy engine converts to UTC."""
    values = ["2013-01-02 05:00:00+05:00", "2013-01-02T05:00:00+14:00", "2013-01-02 05:00:00"]
    path = tmp_path / "t.csv"
    path.write_text("t\n" + "\n".join(values) + "\n")
    frame = pd.DataFrame({"t": values}, dtype=object)
    for unit in ("hour", "day"):
        dom = Domain((time_bins("t", "2012-12-31", "2013-01-04", unit=unit),))
        want = engine_histogram(frame, dom, engine="numpy")
        assert np.array_equal(engine_histogram(frame, dom, engine="duckdb"), want)
        assert np.array_equal(engine_histogram(str(path), dom, engine="duckdb"), want)
    dom = Domain((time_bins("t", "2012-12-31", "2013-01-04", unit="hour"),))
    hours = np.flatnonzero(engine_histogram(str(path), dom)).tolist()
    assert hours == [24 + 15, 48, 48 + 5]  # 2013-01-01 15:00, 01-02 00:00, 01-02 05:00 UTC
