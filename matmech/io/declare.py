"""The attribute constructors of a declared domain: ``integer_range``, ``numeric_bins``,
``time_bins`` and ``categories`` (the kinds of cells are described in :mod:`matmech.io.domain`).

Each checks its declaration (names, bounds, the cell count against
:data:`~matmech.io.attribute.MAX_ATTRIBUTE_CELLS`) and returns a frozen
:class:`~matmech.io.attribute.Attribute`.
"""

from __future__ import annotations

import math
from typing import Any

from matmech.io.attribute import (
    MONDAY,
    MAX_ATTRIBUTE_CELLS,
    MISSING_POLICIES,
    TIME_UNITS,
    Attribute,
    RegularBins,
    check_int,
    check_name,
    check_real,
)
from matmech.io.attribute import trim_text
from matmech.validate import choice, sequence


def _policies(name, policy, missing, other):
    if missing is None:
        missing = policy if policy in MISSING_POLICIES else "error"
    return dict(policy=policy, missing=missing, other=other)


def _labels(labels):
    return None if labels is None else tuple(labels)


def integer_range(
    name, lo, hi, *, width=1, column=None, policy="error", missing=None, other=None, labels=None
) -> Attribute:
    """Integers lo … hi (inclusive) in cells of ``width`` consecutive values.

    ``missing`` defaults to ``policy`` (``"error"`` when policy is ``"clip"``).
    """
    check_name(name)
    lo, hi, width = (
        check_int(lo, "lo", name),
        check_int(hi, "hi", name),
        check_int(width, "width", name),
    )
    if hi < lo:
        raise ValueError(f"attribute {name!r}: need lo <= hi, got lo = {lo}, hi = {hi}")
    if width < 1:
        raise ValueError(f"attribute {name!r}: width must be a positive integer, got {width}")
    if (hi - lo) // width >= MAX_ATTRIBUTE_CELLS:
        raise ValueError(
            f"attribute {name!r}: lo = {lo}, hi = {hi}, width = {width} declare "
            f"{(hi - lo) // width + 1:,} cells; at most {MAX_ATTRIBUTE_CELLS:,}"
        )
    return Attribute(
        name,
        "range",
        column or name,
        lo=lo,
        hi=hi,
        width=width,
        labels=_labels(labels),
        **_policies(name, policy, missing, other),
    )


def numeric_bins(
    name,
    *,
    edges=None,
    lo=None,
    hi=None,
    width=None,
    bins=None,
    column=None,
    policy="error",
    missing=None,
    other=None,
    labels=None,
) -> Attribute:
    """Half-open numeric bins [a, b), declared by exactly one of ``edges`` (e₀ < … < e_k),
    ``lo``/``hi``/``width`` (regular bins from lo; the last ends at hi; held as
    :class:`RegularBins`, computed on demand, so 10⁹ bins cost no memory to declare) or
    explicit ``bins`` (increasing, non-overlapping (a, b) pairs; gaps are outside the domain)."""
    check_name(name)
    given = [k for k, v in (("edges", edges), ("width", width), ("bins", bins)) if v is not None]
    if len(given) != 1:
        raise ValueError(
            f"attribute {name!r}: declare bins by exactly one of edges, lo/hi/width or bins (got {given or 'none'})"
        )
    reg_width = None
    if edges is not None:
        edges = sequence(edges, f"attribute {name!r}: edges")
        e = [check_real(v, "an edge", name) for v in edges]
        if len(e) < 2 or any(b <= a for a, b in zip(e, e[1:])):
            raise ValueError(
                f"attribute {name!r}: edges must be at least two strictly increasing numbers, got {list(edges)!r}"
            )
        pairs: Any = tuple(zip(e, e[1:]))
    elif width is not None:
        if lo is None or hi is None:
            raise ValueError(f"attribute {name!r}: width needs lo and hi")
        lo, hi, reg_width = (
            check_real(lo, "lo", name),
            check_real(hi, "hi", name),
            check_real(width, "width", name),
        )
        if not (hi > lo and reg_width > 0):
            raise ValueError(
                f"attribute {name!r}: need lo < hi and width > 0, got lo = {lo!r}, hi = {hi!r}, width = {reg_width!r}"
            )
        ulp = math.ulp(max(abs(lo), abs(hi)))
        if reg_width < 4 * ulp:  # the engines' first guess of a bin is then within one bin
            raise ValueError(
                f"attribute {name!r}: width {reg_width!r} is below the float resolution at the "
                f"bounds lo = {lo!r}, hi = {hi!r} (bins must be at least {4 * ulp!r} wide there); "
                "use a wider width or declare edges"
            )
        try:
            pairs = RegularBins(lo, hi, reg_width)  # lazy: O(1) memory whatever the number of bins
        except ValueError as exc:
            raise ValueError(f"attribute {name!r}: {exc}") from None
    else:
        try:
            pairs = tuple(
                (check_real(a, "a bin bound", name), check_real(b, "a bin bound", name))
                for a, b in bins
            )
        except (TypeError, ValueError):
            raise TypeError(
                f"attribute {name!r}: bins must be a list of [lo, hi) number pairs, got {bins!r}"
            ) from None
        if (
            not pairs
            or any(a >= b for a, b in pairs)
            or any(p[1] > q[0] for p, q in zip(pairs, pairs[1:]))
        ):
            raise ValueError(
                f"attribute {name!r}: bins must be non-empty, increasing and non-overlapping [lo, hi) pairs, got {bins!r}"
            )
    if lo is not None and width is None:
        raise ValueError(
            f"attribute {name!r}: lo/hi go with width (edges and bins carry their own bounds)"
        )
    return Attribute(
        name,
        "bins",
        column or name,
        lo=lo if reg_width else None,
        hi=hi if reg_width else None,
        width=reg_width,
        bins=pairs,
        labels=_labels(labels),
        **_policies(name, policy, missing, other),
    )


def _epoch_seconds(value, what, name, zone=None) -> int:
    """Wall-clock seconds since 1970-01-01 of an ISO 8601 string, a date or a datetime: naive
    as it reads, zoned moved to ``zone``'s clock (UTC without one)."""
    import datetime as dt

    from matmech.io.zones import wall_seconds

    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(
                f"attribute {name!r}: {what} must be an ISO 8601 date or time such as '2013-01-01', "
                f"got {value!r}"
            ) from None
    elif isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        value = dt.datetime(value.year, value.month, value.day)
    if not isinstance(value, dt.datetime):
        raise TypeError(
            f"attribute {name!r}: {what} must be an ISO 8601 string, a date or a datetime, got {value!r}"
        )
    return wall_seconds(value, zone)


def _month_index(seconds: int) -> tuple[int, bool]:
    """(months since 1970-01, whether the instant is exactly the first of that month at 00:00)."""
    import datetime as dt

    t = dt.datetime(1970, 1, 1) + dt.timedelta(seconds=seconds)
    return (t.year - 1970) * 12 + t.month - 1, (t.day, t.hour, t.minute, t.second) == (1, 0, 0, 0)


def time_bins(
    name,
    start,
    end,
    unit="day",
    *,
    time_zone=None,
    column=None,
    policy="error",
    missing=None,
    other=None,
) -> Attribute:
    """Timestamps binned by ``unit`` ("hour", "day", "week" from Monday, "month") of the wall
    clock in ``time_zone`` (an IANA name such as ``"America/New_York"``; None: UTC), from
    ``start`` (aligned down to its unit) up to ``end`` (exclusive; the last bin is whole).

    ``start`` / ``end``: ISO 8601 strings, dates or datetimes, read like the values
    (:mod:`matmech.io.zones`): naive ones are wall-clock time in the zone, zoned ones are
    moved to it. The engines compute the bins (:mod:`matmech.sources.engines`): the cell of v is
    ⌊(wall seconds(v) − start) / width⌋, or its local month count since ``start``'s month."""
    check_name(name)
    choice(unit, f"attribute {name!r}: unit", TIME_UNITS)  # a non-string: TypeError
    if time_zone is not None:
        from matmech.io.zones import check_zone

        try:
            check_zone(time_zone)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"attribute {name!r}: {exc}") from None
    s = _epoch_seconds(start, "start", name, time_zone)
    e = _epoch_seconds(end, "end", name, time_zone)
    if e <= s:
        raise ValueError(
            f"attribute {name!r}: need start < end, got start = {start!r}, end = {end!r}"
        )
    if unit == "month":
        lo, _ = _month_index(s)
        last, exact_end = _month_index(e)
        k = last - lo + (0 if exact_end else 1)
        width = 1
    else:
        width = TIME_UNITS[unit]
        offset = MONDAY if unit == "week" else 0
        lo = (s - offset) // width * width + offset
        k = -(-(e - lo) // width)
    if k > MAX_ATTRIBUTE_CELLS:
        raise ValueError(
            f"attribute {name!r}: {k:,} {unit} bins; at most {MAX_ATTRIBUTE_CELLS:,}: use a coarser unit"
        )
    hi = lo + k * width
    return Attribute(
        name,
        "bins",
        column or name,
        lo=float(lo),
        hi=float(hi),
        width=float(width),
        bins=RegularBins(lo, hi, width),
        time=unit,
        time_zone=time_zone,
        **_policies(name, policy, missing, other),
    )


def categories(
    name, values, *, column=None, policy="error", missing=None, other=None, labels=None
) -> Attribute:
    """String categories, one cell each in the order given (values are trimmed of
    :data:`~matmech.io.attribute.WHITESPACE` before matching, on every engine)."""
    check_name(name)
    if not isinstance(values, str):
        values = sequence(values, f"attribute {name!r}: categories (a list of strings)")
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise TypeError(f"attribute {name!r}: categories must be a list of strings, got {values!r}")
    vals = tuple(values)
    if not vals or len(set(vals)) != len(vals) or any(v != trim_text(v) or not v for v in vals):
        raise ValueError(
            f"attribute {name!r}: categories must be distinct, non-empty and without surrounding "
            f"white space (spaces, tabs, line breaks), got {list(vals)!r}"
        )
    return Attribute(
        name,
        "categories",
        column or name,
        categories=vals,
        labels=_labels(labels),
        **_policies(name, policy, missing, other),
    )
