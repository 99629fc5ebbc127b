"""Local time in a declared time zone: what a day, a week or a month of a timestamp is.

A time attribute (:func:`matmech.io.declare.time_bins`) bins *wall-clock* time: the seconds
since 1970-01-01 00:00 as the clocks of its declared zone show them (UTC when none is
declared). A day bin is then a local calendar day (23 or 25 hours long across a daylight
saving change), a month a local calendar month. The convention for the values:

* a timestamp with a zone or an offset (``2013-01-01T10:00:00Z``, ``…+05:00``, a pandas /
  Arrow / DuckDB zoned column) is an instant: it is moved to the declared zone's clock;
* a naive timestamp (no offset; a naive pandas or Arrow column, DuckDB ``TIMESTAMP``) is
  already wall-clock time in the declared zone and is binned as it reads.

Text is a timestamp only in the ISO 8601 form :data:`ISO_TEXT` (``2013-01-01``,
``2013-01-01 05:30``, ``2013-01-01T05:30:00.25+01:00``); any other text is a missing value,
on every engine alike. The zone's offsets come from Python's :mod:`zoneinfo` (the IANA
database), once, as a table of transitions that every engine applies with the same integer
arithmetic, so all engines bin alike whatever their own time-zone database.
"""

from __future__ import annotations

import datetime as dt
from functools import lru_cache


_DATE, _TIME, _OFFSET = (
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}",
    r"[T ]([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9](\.[0-9]{1,6})?)?",
    r"(Z|[+-]([01][0-9]|2[0-3])(:?[0-5][0-9])?)",
)
#: Text accepted as a timestamp (matched whole, after the surrounding white space is trimmed):
#: a date, an optional time (after ``T`` or a space; hours 00-23, at most microseconds), an
#: optional offset after a time (``Z`` or ±hh[[:]mm]). An impossible date (2013-02-30) is
#: missing too.
ISO_TEXT = f"{_DATE}({_TIME}{_OFFSET}?)?"
#: An :data:`ISO_TEXT` value that carries an offset: an instant rather than wall-clock time.
ISO_ZONED = f"{_DATE}{_TIME}{_OFFSET}"
_EPOCH = dt.datetime(1970, 1, 1)
_FIRST, _LAST = -62135596800, 253402300799  # 0001-01-01 and 9999-12-31 23:59:59, in seconds
_DAY = 86400


def check_zone(zone) -> str:
    """An IANA time-zone name that :mod:`zoneinfo` knows (``"America/New_York"``, ``"UTC"``)."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if not isinstance(zone, str) or not zone:
        raise TypeError(
            f"time_zone must be an IANA time-zone name such as 'America/New_York', got {zone!r}"
        )
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"time_zone must be an IANA time-zone name such as 'America/New_York' or 'UTC', got {zone!r}"
        ) from None
    return zone


def wall_seconds(value: dt.datetime, zone: str | None) -> int:
    """Wall-clock seconds since 1970-01-01 of a declared bound: a naive datetime as it reads,
    a zoned one moved to ``zone``'s clock (to UTC when no zone is declared)."""
    if value.tzinfo is not None:
        from zoneinfo import ZoneInfo

        value = value.astimezone(ZoneInfo(zone) if zone else dt.timezone.utc).replace(tzinfo=None)
    return int((value - _EPOCH) // dt.timedelta(seconds=1))


def _offset(zone, u: int) -> int:
    from zoneinfo import ZoneInfo

    offset = dt.datetime.fromtimestamp(u, ZoneInfo(zone)).utcoffset()
    if offset is None:  # pragma: no cover - a ZoneInfo datetime is aware
        raise ValueError(f"time zone {zone!r} gives no UTC offset")
    return int(offset.total_seconds())


@lru_cache(maxsize=64)
def offset_table(
    zone: str | None, first: int, last: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(transitions, offsets) of ``zone`` for instants around wall-clock seconds first … last:
    the offset of UTC second u is offsets[i] for the i transitions t ≤ u (offsets[0] before
    the first). Instants more than two days outside keep the end offsets (their wall-clock
    time is outside first … last whatever the zone). Found by stepping a day at a time and
    bisecting each change to the second."""
    if zone is None:
        return (), (0,)
    a, b = max(first - 2 * _DAY, _FIRST + _DAY), min(last + 2 * _DAY, _LAST - _DAY)
    times: list[int] = []
    offsets = [_offset(zone, a)]
    u = a
    while u < b:
        nxt = min(u + _DAY, b)
        o = _offset(zone, nxt)
        if o != offsets[-1]:
            lo, hi = u, nxt  # offset(lo) = offsets[-1] != offset(hi)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if _offset(zone, mid) == offsets[-1] else (lo, mid)
            times.append(hi)
            offsets.append(o)
        u = nxt
    return tuple(times), tuple(offsets)


def _month_start(months: int) -> int:
    """Seconds since 1970-01-01 of the first of the month ``months`` after 1970-01."""
    y, m = divmod(int(months), 12)
    y = min(max(1970 + y, 1), 9999)
    return int((dt.datetime(y, m + 1, 1) - _EPOCH) // dt.timedelta(seconds=1))


def zone_table(attribute) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """:func:`offset_table` of a time attribute (its zone, over its declared bins)."""
    lo, hi = int(attribute.lo), int(attribute.hi)
    if attribute.time == "month":
        lo, hi = _month_start(lo), _month_start(hi)
    return offset_table(attribute.time_zone, lo, hi)
