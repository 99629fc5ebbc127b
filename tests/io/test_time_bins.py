"""Date/time attributes (issue 23 item 6): timestamps binned by hour/day/week/month in the engines."""

import datetime as dt

import numpy as np
import pandas as pd
import pytest

from matmech.io.domain import Domain, time_bins
from matmech.io.engines import histogram
from matmech.io.specs import parse_spec


def _reference(stamps, attr):
    """The cell of each timestamp computed with datetime arithmetic (a second method)."""
    start = (
        dt.datetime(1970, 1, 1) + dt.timedelta(seconds=int(attr.lo))
        if attr.time != "month"
        else None
    )
    out = np.zeros(attr.size, dtype=np.int64)
    for s in stamps:
        t = dt.datetime.fromisoformat(s)
        if attr.time == "month":
            code = (t.year - 1970) * 12 + t.month - 1 - int(attr.lo)
        else:
            code = int((t - start).total_seconds() // attr.width)
        out[code] += 1
    return out


@pytest.mark.parametrize(
    "unit, start, end",
    [
        ("hour", "2013-01-01T05:30", "2013-01-03"),
        ("day", "2013-01-01", "2013-03-01"),
        ("week", "2013-01-01", "2013-03-01"),
        ("month", "2013-01-15", "2014-01-01"),
    ],
)
@pytest.mark.parametrize("engine", ["numpy", "duckdb"])
def test_engines_bin_timestamps_like_datetime_arithmetic(unit, start, end, engine):
    a = time_bins("t", start, end, unit)
    lo = (
        dt.datetime(1970, 1, 1) + dt.timedelta(seconds=int(a.lo))
        if unit != "month"
        else dt.datetime(2013, 1, 1)
    )
    rng = np.random.default_rng(0)
    span = (dt.datetime.fromisoformat(end) - lo).total_seconds()
    stamps = [
        (lo + dt.timedelta(seconds=int(s))).isoformat(sep=" ")
        for s in rng.integers(0, int(span), 300)
    ]
    got = histogram(pd.DataFrame({"t": stamps}), Domain((a,)), engine=engine)
    np.testing.assert_array_equal(got, _reference(stamps, a))


def test_alignment_sizes_and_labels():
    w = time_bins("dep", "2013-01-01", "2013-02-01", "week")  # 2013-01-01 is a Tuesday
    assert w.size == 5 and w.cell_label(0) == "dep=week of 2012-12-31"
    d = time_bins("dep", dt.date(2013, 1, 1), dt.date(2014, 1, 1))
    assert (
        d.size == 365
        and d.cell_label(364) == "dep=2013-12-31"
        and d.span_label(0, 6) == "dep 2013-01-01 to 2013-01-07"
    )
    m = time_bins("dep", "2013-01-15", "2014-01-01", "month")
    assert (
        m.size == 12
        and m.cell_label(11) == "dep=2013-12"
        and m.span_labels([0], [2]) == ["dep 2013-01 to 2013-03"]
    )
    h = time_bins(
        "dep", "2013-01-01T05:30+02:00", "2013-01-02", "hour"
    )  # zoned: 03:30 UTC, aligned to 03:00
    assert h.cell_label(0) == "dep=2013-01-01 03:00" and h.size == 21
    with pytest.raises(ValueError, match="unit must be one of"):
        time_bins("dep", "2013-01-01", "2014-01-01", "year")
    with pytest.raises(ValueError, match="start < end"):
        time_bins("dep", "2013-01-02", "2013-01-01")
    with pytest.raises(ValueError, match="ISO 8601"):
        time_bins("dep", "01/02/2013", "2014-01-01")


def test_missing_and_out_of_range_times_follow_the_policies():
    a = time_bins("t", "2013-01-01", "2013-01-08", policy="other", other="outside", missing="other")
    vals = [
        "2013-01-01 05:00",
        "2013-01-01T23:59:59",
        "2013-01-03",
        " 2013-01-07 12:00 ",
        "2012-12-31 23:00",
        "garbage",
        None,
        "",
    ]
    for engine in ("numpy", "duckdb"):
        np.testing.assert_array_equal(
            histogram(pd.DataFrame({"t": vals}), Domain((a,)), engine=engine),
            [2, 0, 1, 0, 0, 0, 1, 4],
        )
    strict = time_bins("t", "2013-01-01", "2013-01-08")
    with pytest.raises(ValueError, match="'t'"):
        histogram(pd.DataFrame({"t": ["2014-01-01"]}), Domain((strict,)), engine="numpy")


def test_a_spec_declares_a_time_attribute_and_round_trips():
    spec = parse_spec(
        {
            "attributes": [
                {
                    "name": "day",
                    "column": "time_hour",
                    "time": "day",
                    "start": "2013-01-01",
                    "end": "2013-01-31",
                }
            ],
            "queries": [{"kind": "prefix"}],
        }
    )
    a = spec.schema.attributes[0]
    assert a.time == "day" and a.size == 30 and a.column == "time_hour"
    assert a.to_dict() == {
        "name": "day",
        "column": "time_hour",
        "time": "day",
        "start": "2013-01-01",
        "end": "2013-01-31",
        "policy": "error",
        "missing": "error",
    }
    assert spec.labels[0] == "day=2013-01-01" and spec.labels[-2:] == (
        "day 2013-01-01 to 2013-01-29",
        "total",
    )
    from matmech.io.specs import SpecError

    with pytest.raises(SpecError, match=r"with start and end \(and time_zone\) only"):
        parse_spec(
            {
                "attributes": [{"name": "day", "time": "day", "start": "2013-01-01"}],
                "queries": [{"kind": "prefix"}],
            }
        )
