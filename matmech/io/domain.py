"""Declared data domains: what each attribute's values are, and what becomes of the rest.

The histogram x of the Matrix Mechanism (Li, Miklau, Hay, McGregor and Rastogi, "The matrix
mechanism", VLDB J. 2015, §2: x counts the records in each cell of a fixed, public domain)
is only private if its cells do not depend on the data: a domain learned from the records
(the distinct values present, the observed minimum and maximum) would itself disclose
records. So a :class:`Domain` is always *declared*, here or in a spec's ``[[attributes]]``
tables, and never inferred.

An :class:`Attribute` declares one column's cells:

* ``integer_range(name, lo, hi, width=1)``: integers lo … hi; value v falls in cell
  ⌊(v − lo) / width⌋ (so a real value is floored, 34.7 → 34);
* ``numeric_bins(name, edges=... | lo=, hi=, width=... | bins=[(lo, hi), ...])``: half-open
  bins [a, b). With ``width`` the cell of v is ⌊(v − lo) / width⌋ computed in float64 (the
  last bin ends at hi); with ``edges`` or explicit ``bins`` v falls in the bin whose
  [a, b) contains it (explicit bins may leave gaps, whose values are out of the domain);
* ``categories(name, values)``: strings compared exactly after trimming surrounding space.

Every attribute may add an ``other`` cell (the last one) and has two policies:
``policy`` for an out-of-domain value (``"clip"`` to the first / last numeric cell,
``"other"``, ``"drop"`` the record, ``"error"``) and ``missing`` for a missing one (null,
NaN, empty, or text that is not a number in a numeric attribute: ``"other"``, ``"drop"``,
``"error"``). A record dropped by any attribute is dropped from every count.

Cells are row-major over the attributes in order, the last fastest
(:mod:`matmech.io.data`, :class:`matmech.linalg.linop.Kron`). Labels come from the
declaration: ``age 18-24``, ``sex=F, state=CA``, ``income [20k, 30k)``, and ``dep_delay -60
to -51`` when a range has a negative end.

This module only declares; :mod:`matmech.io.engines` applies a domain to data.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Attribute",
    "Domain",
    "RegularBins",
    "time_bins",
    "TIME_UNITS",
    "integer_range",
    "numeric_bins",
    "categories",
    "POLICIES",
    "MISSING_POLICIES",
]

#: What becomes of a value outside the declared cells.
POLICIES = ("clip", "other", "drop", "error")
#: What becomes of a missing value (null, NaN, empty text, non-numbers in a numeric attribute).
MISSING_POLICIES = ("other", "drop", "error")
#: Time units of :func:`time_bins`: the bin width in seconds (months: 1 month, counted in months).
TIME_UNITS = {"hour": 3600, "day": 86400, "week": 604800, "month": 1}
_MONDAY = 4 * 86400  # 1970-01-05, a Monday, is 4 days after the epoch
#: Largest number of cells an attribute may declare (a dense histogram is 8 bytes per cell).
MAX_ATTRIBUTE_CELLS = 2**31


def _number(v):
    """A compact label for a bin edge: 20000 → 20k, 1500000 → 1.5M, 0.25 → 0.25."""
    v = float(v)
    if v == int(v):
        a = abs(v)
        if a >= 1e6 and (v / 1e6) * 10 == int((v / 1e6) * 10):
            return f"{v / 1e6:g}M"
        if a >= 1e3 and (v / 1e3) * 10 == int((v / 1e3) * 10):
            return f"{v / 1e3:g}k"
        return str(int(v))
    return f"{v:g}"


def _range_text(a: int, b: int) -> str:
    """The values a … b of a range: ``18``, ``18-24``; with a negative end ``-60 to -59``
    (``-60--59`` was unreadable)."""
    if a == b:
        return str(a)
    return f"{a} to {b}" if a < 0 or b < 0 else f"{a}-{b}"


def _check_name(name, what="name"):
    if not isinstance(name, str) or not name:
        raise TypeError(f"an attribute {what} must be a non-empty string, got {name!r}")
    return name


def _check_int(value, what, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"attribute {name!r}: {what} must be an integer, got {value!r}")
    return int(value)


def _check_real(value, what, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise TypeError(f"attribute {name!r}: {what} must be a finite number, got {value!r}")
    return float(value)


class RegularBins(Sequence):
    """The bins [lo + i·w, min(lo + (i+1)·w, hi)), i = 0 … k − 1, computed on demand.

    ``numeric_bins(lo=, hi=, width=)`` used to build one Python tuple per bin (over a minute
    at 3·10⁷ bins, MemoryError at 10⁹); this sequence holds four numbers and gives bin i (and
    ``bins[-1]``) in O(1), the same floats as before. Slices are not taken (they would
    materialise the bins); iterate only over what you need."""

    __slots__ = ("hi", "k", "lo", "width")

    def __init__(self, lo: float, hi: float, width: float, k: int):
        self.lo, self.hi, self.width, self.k = float(lo), float(hi), float(width), int(k)

    def __len__(self) -> int:
        return self.k

    def __getitem__(self, i):
        if isinstance(i, slice):
            raise TypeError(
                "regular bins are computed on demand: index them one at a time (bins[i])"
            )
        if isinstance(i, bool) or not isinstance(i, numbers.Integral):
            raise TypeError(f"bin indices must be integers, got {type(i).__name__}")
        j = int(i) + self.k if i < 0 else int(i)
        if not 0 <= j < self.k:
            raise IndexError(f"bin {i} is outside 0..{self.k - 1}")
        return (self.lo + j * self.width, min(self.lo + (j + 1) * self.width, self.hi))

    def _key(self):
        return (self.lo, self.hi, self.width, self.k)

    def __eq__(self, other):
        if isinstance(other, RegularBins):
            return self._key() == other._key()
        return NotImplemented

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return f"RegularBins(lo={self.lo!r}, hi={self.hi!r}, width={self.width!r}, k={self.k:,})"


@dataclass(frozen=True)
class Attribute:
    """One declared attribute (build it with :func:`integer_range`, :func:`numeric_bins`
    or :func:`categories`).

    ``kind``: ``"range"`` (``lo``, ``hi``, ``width``), ``"bins"`` (``bins``: (a, b) pairs,
    half-open, increasing; ``width`` set when they are the regular bins of lo … hi) or
    ``"categories"`` (``categories``). ``column``: the source column (default the name).
    ``other``: the label of an extra last cell, or None. ``policy`` / ``missing``: see the
    module docstring. ``labels``: optional names of the declared cells (not the other cell).
    """

    name: str
    kind: str
    column: str
    policy: str
    missing: str
    other: str | None = None
    lo: float | None = None
    hi: float | None = None
    width: float | None = None
    bins: Any = ()  # a tuple of (lo, hi) pairs, or a lazy RegularBins
    categories: tuple = ()
    labels: tuple | None = None
    time: str | None = (
        None  # "hour" | "day" | "week" | "month": regular bins of a timestamp (time_bins)
    )

    def __post_init__(self):
        _check_name(self.name)
        if self.time is not None and (
            self.time not in TIME_UNITS or self.kind != "bins" or self.width is None
        ):
            raise ValueError(
                f"attribute {self.name!r}: time must be one of {list(TIME_UNITS)} on regular bins, got {self.time!r}"
            )
        _check_name(self.column, "column")
        if self.policy not in POLICIES:
            raise ValueError(
                f"attribute {self.name!r}: policy must be one of {list(POLICIES)}, got {self.policy!r}"
            )
        if self.missing not in MISSING_POLICIES:
            raise ValueError(
                f"attribute {self.name!r}: missing must be one of {list(MISSING_POLICIES)}, got {self.missing!r}"
            )
        if self.other is not None and (not isinstance(self.other, str) or not self.other):
            raise TypeError(
                f"attribute {self.name!r}: other must be a non-empty label string, got {self.other!r}"
            )
        if "other" in (self.policy, self.missing) and self.other is None:
            raise ValueError(
                f"attribute {self.name!r}: policy 'other' needs an other cell: declare other = \"<label>\""
            )
        if self.policy == "clip" and self.kind == "categories":
            raise ValueError(
                f"attribute {self.name!r}: categories have no ends to clip to; use policy 'other', 'drop' or 'error'"
            )
        if (
            self.policy == "clip"
            and self.kind == "bins"
            and self.width is None
            and any(b[1] != c[0] for b, c in zip(self.bins, self.bins[1:]))
        ):
            raise ValueError(
                f"attribute {self.name!r}: policy 'clip' needs contiguous bins; these leave gaps"
            )
        if self.labels is not None:
            if len(self.labels) != self.declared_size or not all(
                isinstance(s, str) for s in self.labels
            ):
                raise ValueError(
                    f"attribute {self.name!r}: labels must be {self.declared_size} strings, one per declared cell, got {list(self.labels)!r}"
                )
        if self.size > MAX_ATTRIBUTE_CELLS:
            raise ValueError(
                f"attribute {self.name!r} declares {self.size:,} cells; at most {MAX_ATTRIBUTE_CELLS:,}"
            )

    # -- sizes ----------------------------------------------------------------------------------

    @property
    def declared_size(self) -> int:
        """Cells declared by the range, bins or categories (without the other cell)."""
        if self.kind == "range":
            return -(-(int(self.hi) - int(self.lo) + 1) // int(self.width))  # type: ignore[arg-type]  # set for ranges
        if self.kind == "bins":
            return len(self.bins)
        return len(self.categories)

    @property
    def size(self) -> int:
        """Number of cells, the other cell included."""
        return self.declared_size + (self.other is not None)

    @property
    def other_code(self) -> int | None:
        return self.declared_size if self.other is not None else None

    @property
    def numeric(self) -> bool:
        return self.kind != "categories"

    @property
    def regular(self) -> bool:
        """True when the cell of v is ⌊(v − lo) / width⌋ (a range, or bins declared by width)."""
        return self.kind == "range" or (self.kind == "bins" and self.width is not None)

    # -- labels ---------------------------------------------------------------------------------

    def _span(self, code):
        """(first value, last value) of a range cell, or (a, b) of a bin."""
        if self.kind == "range":
            lo, w = int(self.lo), int(self.width)
            return lo + code * w, min(lo + (code + 1) * w - 1, int(self.hi))
        return self.bins[code]

    def value_label(self, code: int) -> str:
        """The value part of a cell's label: ``F``, ``18``, ``18-24``, ``[20k, 30k)``."""
        if not 0 <= code < self.size:
            raise IndexError(f"attribute {self.name!r} has cells 0..{self.size - 1}, got {code}")
        if code == self.other_code:
            return str(self.other)  # other_code is set only with an other label
        if self.labels is not None:
            return self.labels[code]
        if self.kind == "categories":
            return self.categories[code]
        a, b = self._span(code)
        if self.time is not None:
            return _time_text(a, self.time)
        if self.kind == "range":
            return _range_text(a, b)
        return f"[{_number(a)}, {_number(b)})"

    def cell_label(self, code: int) -> str:
        """``sex=F``, ``age=18``, ``age 18-24``, ``delay -60 to -51``, ``income [20k, 30k)``."""
        text = self.value_label(code)
        if (
            code != self.other_code
            and self.labels is None
            and self.time is None
            and (
                self.kind == "bins"
                or (self.kind == "range" and self._span(code)[0] != self._span(code)[1])
            )
        ):
            return f"{self.name} {text}"
        return f"{self.name}={text}"

    def span_label(self, first: int, last: int) -> str:
        """The label of the cells first … last (inclusive): ``age 18-24``, ``income [20k, 50k)``."""
        if not 0 <= first <= last < self.size:
            raise IndexError(
                f"attribute {self.name!r}: need 0 <= first <= last < {self.size}, got ({first}, {last})"
            )
        if first == last:
            return self.cell_label(first)
        if first == 0 and last == self.size - 1:
            return "total"
        if (
            self.other_code is not None
            and last == self.other_code
            or self.labels is not None
            or self.kind == "categories"
        ):
            values = [self.value_label(c) for c in range(first, last + 1)]
            shown = values if len(values) <= 6 else [*values[:3], "...", *values[-2:]]
            return f"{self.name} in {{{', '.join(shown)}}}"
        a, b = self._span(first)[0], self._span(last)[1]
        if self.time is not None:
            return f"{self.name} {_time_text(a, self.time)} to {_time_text(self._span(last)[0], self.time)}"
        if self.kind == "range":
            return f"{self.name} {_range_text(a, b)}"
        return f"{self.name} [{_number(a)}, {_number(b)})"

    def span_labels(self, firsts, lasts) -> list:
        """:meth:`span_label` of many spans at once (arrays of first / last cells): the same
        strings, computed with array arithmetic for ranges and bins (2·10⁶ labels in about a
        second; one call per label took about 20 s)."""
        import numpy as np

        f, last = np.asarray(firsts), np.asarray(lasts)
        if f.shape != last.shape or f.ndim != 1:
            raise ValueError(
                f"firsts and lasts must be 1-D arrays of the same length, got shapes {f.shape} and {last.shape}"
            )
        if f.size and not (
            np.issubdtype(f.dtype, np.integer) and np.issubdtype(last.dtype, np.integer)
        ):
            raise TypeError(
                f"firsts and lasts must be integer cell indices, got dtypes {f.dtype} and {last.dtype}"
            )
        if f.size and (f.min() < 0 or last.max() >= self.size or np.any(f > last)):
            raise IndexError(
                f"attribute {self.name!r}: need 0 <= first <= last < {self.size} for every span"
            )
        fl, ll = f.tolist(), last.tolist()
        if (
            self.labels is not None
            or self.kind == "categories"
            or self.time is not None
            or (self.other_code is not None and f.size and last.max() == self.other_code)
        ):
            return [self.span_label(a, b) for a, b in zip(fl, ll)]
        total = (f == 0) & (last == self.size - 1) & (f != last)
        name = self.name
        if self.kind == "range":
            lo, w, hi = int(self.lo), int(self.width), int(self.hi)  # type: ignore[arg-type]  # set for ranges
            a = (lo + f.astype(np.int64) * w).tolist()
            b = np.minimum(lo + (last.astype(np.int64) + 1) * w - 1, hi).tolist()
            out = [f"{name}={x}" if x == y else f"{name} {_range_text(x, y)}" for x, y in zip(a, b)]
        else:
            out = [
                f"{name} [{_number(self.bins[x][0])}, {_number(self.bins[y][1])})"
                for x, y in zip(fl, ll)
            ]
        for i in np.flatnonzero(total).tolist():
            out[i] = "total"
        return out

    def to_dict(self) -> dict:
        """The declaration as a spec's ``[[attributes]]`` table (TOML/JSON-ready)."""
        out: dict[str, Any] = {"name": self.name}
        if self.column != self.name:
            out["column"] = self.column
        if self.time is not None:
            out.update(
                time=self.time,
                start=_time_iso(self.lo, self.time),
                end=_time_iso(self.hi, self.time),
            )
        elif self.kind == "range":
            out["range"] = [int(self.lo), int(self.hi)]  # type: ignore[arg-type]  # set for ranges
            if self.width != 1:
                out["width"] = int(self.width)  # type: ignore[arg-type]
        elif self.kind == "bins" and self.width is not None:
            out.update(lo=self.lo, hi=self.hi, width=self.width)
        elif self.kind == "bins":
            contiguous = all(b[1] == c[0] for b, c in zip(self.bins, self.bins[1:]))
            if contiguous:
                out["edges"] = [self.bins[0][0], *(b[1] for b in self.bins)]
            else:
                out["bins"] = [list(b) for b in self.bins]
        else:
            out["categories"] = list(self.categories)
        if self.other is not None:
            out["other"] = self.other
        out["policy"] = self.policy
        out["missing"] = self.missing
        if self.labels is not None:
            out["labels"] = list(self.labels)
        return out


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
    _check_name(name)
    lo, hi, width = (
        _check_int(lo, "lo", name),
        _check_int(hi, "hi", name),
        _check_int(width, "width", name),
    )
    if hi < lo:
        raise ValueError(f"attribute {name!r}: need lo <= hi, got lo = {lo}, hi = {hi}")
    if width < 1:
        raise ValueError(f"attribute {name!r}: width must be a positive integer, got {width}")
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
    _check_name(name)
    given = [k for k, v in (("edges", edges), ("width", width), ("bins", bins)) if v is not None]
    if len(given) != 1:
        raise ValueError(
            f"attribute {name!r}: declare bins by exactly one of edges, lo/hi/width or bins (got {given or 'none'})"
        )
    reg_width = None
    if edges is not None:
        e = [_check_real(v, "an edge", name) for v in edges]
        if len(e) < 2 or any(b <= a for a, b in zip(e, e[1:])):
            raise ValueError(
                f"attribute {name!r}: edges must be at least two strictly increasing numbers, got {list(edges)!r}"
            )
        pairs: Any = tuple(zip(e, e[1:]))
    elif width is not None:
        if lo is None or hi is None:
            raise ValueError(f"attribute {name!r}: width needs lo and hi")
        lo, hi, reg_width = (
            _check_real(lo, "lo", name),
            _check_real(hi, "hi", name),
            _check_real(width, "width", name),
        )
        if not (hi > lo and reg_width > 0):
            raise ValueError(
                f"attribute {name!r}: need lo < hi and width > 0, got lo = {lo:g}, hi = {hi:g}, width = {reg_width:g}"
            )
        k = math.ceil((hi - lo) / reg_width)
        if k > MAX_ATTRIBUTE_CELLS:
            raise ValueError(
                f"attribute {name!r}: lo/hi/width declare {k:,} bins (a histogram over them alone would "
                f"need {8 * k / 2**30:,.1f} GiB); at most {MAX_ATTRIBUTE_CELLS:,}: use a wider width"
            )
        pairs = RegularBins(lo, hi, reg_width, k)  # lazy: O(1) memory whatever k
    else:
        try:
            pairs = tuple(
                (_check_real(a, "a bin bound", name), _check_real(b, "a bin bound", name))
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


def _epoch_seconds(value, what, name) -> int:
    """Seconds since 1970-01-01 UTC of an ISO 8601 string, a date or a datetime (naive: UTC)."""
    import datetime as dt

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
    if value.tzinfo is not None:
        value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return int((value - dt.datetime(1970, 1, 1)) // dt.timedelta(seconds=1))


def _month_index(seconds: int) -> tuple[int, bool]:
    """(months since 1970-01, whether the instant is exactly the first of that month at 00:00)."""
    import datetime as dt

    t = dt.datetime(1970, 1, 1) + dt.timedelta(seconds=seconds)
    return (t.year - 1970) * 12 + t.month - 1, (t.day, t.hour, t.minute, t.second) == (1, 0, 0, 0)


def _time_iso(x, unit) -> str:
    import datetime as dt

    if unit == "month":
        y, m = divmod(int(x), 12)
        return f"{1970 + y:04d}-{m + 1:02d}-01"
    t = dt.datetime(1970, 1, 1) + dt.timedelta(seconds=int(x))
    return t.isoformat(sep=" ") if unit == "hour" else t.date().isoformat()


def _time_text(x, unit) -> str:
    """A time bin's label from its start: ``2013-01-01 05:00``, ``2013-01-01``, ``week of
    2013-01-07``, ``2013-01``."""
    if unit == "month":
        return _time_iso(x, unit)[:7]
    if unit == "hour":
        return _time_iso(x, unit)[:16]
    return ("week of " if unit == "week" else "") + _time_iso(x, unit)


def time_bins(
    name, start, end, unit="day", *, column=None, policy="error", missing=None, other=None
) -> Attribute:
    """Timestamps binned by ``unit`` ("hour", "day", "week" from Monday, "month") from ``start``
    (aligned down to its unit) up to ``end`` (exclusive; the last bin is whole). ``start`` /
    ``end``: ISO 8601 strings, dates or datetimes; naive times are UTC, zoned ones are
    converted to UTC. The engines compute the bins (:mod:`matmech.io.engines`): the cell of v
    is ⌊(seconds(v) − start) / width⌋, or its month count since ``start``'s month."""
    _check_name(name)
    if unit not in TIME_UNITS:
        raise ValueError(
            f"attribute {name!r}: unit must be one of {list(TIME_UNITS)}, got {unit!r}"
        )
    s, e = _epoch_seconds(start, "start", name), _epoch_seconds(end, "end", name)
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
        offset = _MONDAY if unit == "week" else 0
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
        bins=RegularBins(lo, hi, width, k),
        time=unit,
        **_policies(name, policy, missing, other),
    )


def categories(
    name, values, *, column=None, policy="error", missing=None, other=None, labels=None
) -> Attribute:
    """String categories, one cell each in the order given (values are trimmed before matching)."""
    _check_name(name)
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise TypeError(f"attribute {name!r}: categories must be a list of strings, got {values!r}")
    vals = tuple(values)
    if not vals or len(set(vals)) != len(vals) or any(v != v.strip() or not v for v in vals):
        raise ValueError(
            f"attribute {name!r}: categories must be distinct, non-empty and without surrounding spaces, got {list(vals)!r}"
        )
    return Attribute(
        name,
        "categories",
        column or name,
        categories=vals,
        labels=_labels(labels),
        **_policies(name, policy, missing, other),
    )


@dataclass(frozen=True)
class Domain:
    """Ordered declared attributes; cells are row-major, the last attribute fastest.

    Parameters
    ----------
    attributes : sequence of Attribute
        In cell order (:func:`integer_range`, :func:`categories`, ...); names distinct.

    Returns
    -------
    Domain
        Frozen, declared rather than read from data (Li et al., VLDB J. 2015, §2); ``n`` cells.

    Raises
    ------
    TypeError, ValueError
        For anything but a non-empty sequence of attributes; for a repeated name.

    Examples
    --------
    >>> from matmech.io.domain import categories, integer_range
    >>> Domain((integer_range("age", 0, 9), categories("sex", ["F", "M"]))).n
    20
    """

    attributes: tuple

    def __post_init__(self):
        attrs = tuple(self.attributes) if isinstance(self.attributes, Iterable) else ()
        if not attrs or not all(isinstance(a, Attribute) for a in attrs):
            raise TypeError(
                f"a Domain needs a non-empty sequence of Attribute, got {self.attributes!r}"
            )
        names = [a.name for a in attrs]
        if len(set(names)) != len(names):
            raise ValueError(f"attribute names must be distinct, got {names}")
        object.__setattr__(self, "attributes", attrs)

    @property
    def names(self) -> tuple:
        return tuple(a.name for a in self.attributes)

    @property
    def columns(self) -> tuple:
        return tuple(a.column for a in self.attributes)

    @property
    def sizes(self) -> tuple:
        return tuple(a.size for a in self.attributes)

    @property
    def n(self) -> int:
        """Number of cells (an exact Python int)."""
        return math.prod(self.sizes)

    def __len__(self):
        return len(self.attributes)

    def index(self, name) -> int:
        """Position of the attribute called ``name``."""
        try:
            return self.names.index(name)
        except ValueError:
            raise ValueError(f"no attribute {name!r}; the domain has {list(self.names)}") from None

    def subset_sizes(self, subset) -> tuple:
        return tuple(self.attributes[j].size for j in self.check_subset(subset))

    def check_subset(self, subset) -> tuple:
        """A tuple of distinct, increasing attribute indices (ValueError otherwise)."""
        try:
            s = tuple(int(j) for j in subset)
        except TypeError:
            raise TypeError(
                f"a subset is a sequence of attribute indices, got {subset!r}"
            ) from None
        if any(not 0 <= j < len(self) for j in s) or list(s) != sorted(set(s)):
            raise ValueError(
                f"a subset must be distinct increasing attribute indices in 0..{len(self) - 1}, got {subset!r}"
            )
        return s

    def unravel(self, cell, subset=None) -> tuple:
        """Per-attribute codes of a row-major cell of the domain (or of a marginal's table)."""
        sizes = self.sizes if subset is None else self.subset_sizes(subset)
        total = math.prod(sizes)
        if not 0 <= cell < total:
            raise IndexError(f"cell {cell} is outside 0..{total - 1}")
        codes = []
        for s in reversed(sizes):
            cell, c = divmod(cell, s)
            codes.append(c)
        return tuple(reversed(codes))

    def cell_label(self, cell, subset=None) -> str:
        """``sex=F, state=CA`` for a cell of the domain (``subset``: of that marginal's table;
        the empty subset's one cell is ``total``)."""
        subset = tuple(range(len(self))) if subset is None else self.check_subset(subset)
        if not subset:
            return "total"
        codes = self.unravel(cell, subset)
        return ", ".join(self.attributes[j].cell_label(c) for j, c in zip(subset, codes))

    def marginal_labels(self, subset) -> list:
        """Labels of every cell of the marginal on ``subset``, in row-major order."""
        subset = self.check_subset(subset)
        total = math.prod(self.subset_sizes(subset))
        return [self.cell_label(c, subset) for c in range(total)]

    def interval_label(self, first, last) -> str:
        """The label of cells first … last of a one-attribute domain: ``age 18-24``."""
        if len(self) != 1:
            raise ValueError(
                f"interval labels need a one-attribute domain; this one has {len(self)} attributes"
            )
        return self.attributes[0].span_label(first, last)

    def interval_labels(self, firsts, lasts) -> list:
        """:meth:`interval_label` of many intervals (arrays of first / last cells) at once."""
        if len(self) != 1:
            raise ValueError(
                f"interval labels need a one-attribute domain; this one has {len(self)} attributes"
            )
        return self.attributes[0].span_labels(firsts, lasts)

    def to_dicts(self) -> list:
        return [a.to_dict() for a in self.attributes]
