"""One declared attribute of a data domain (:class:`Attribute`): its cells, its policies for
out-of-domain and missing values, and the labels of its cells and spans.

Built by the constructors of :mod:`matmech.io.declare`; gathered in order into a
:class:`matmech.io.domain.Domain` (Li, Miklau, Hay, McGregor and Rastogi, "The matrix
mechanism", VLDB J. 2015, §2: the cells of x are fixed and public).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from matmech.validate import choice


#: The white space trimmed from both ends of every text value, on every engine (SQL's plain
#: ``trim`` removes spaces only, Python's ``strip()`` any Unicode white space: issue 31).
WHITESPACE = " \t\n\r\x0b\x0c"


def trim_text(s: str) -> str:
    """``s`` without the :data:`WHITESPACE` at its ends."""
    return s.strip(WHITESPACE)


#: What becomes of a value outside the declared cells.
POLICIES = ("clip", "other", "drop", "error")
#: What becomes of a missing value (null, NaN, empty text, non-numbers in a numeric attribute).
MISSING_POLICIES = ("other", "drop", "error")
#: Time units of :func:`time_bins`: the bin width in seconds (months: 1 month, counted in months).
TIME_UNITS = {"hour": 3600, "day": 86400, "week": 604800, "month": 1}
MONDAY = 4 * 86400  # 1970-01-05, a Monday, is 4 days after the epoch
#: Largest number of cells an attribute may declare (a dense histogram is 8 bytes per cell).
MAX_ATTRIBUTE_CELLS = 2**31


def _number(v) -> str:
    """A bin edge's label, read back as exactly that float (Python's shortest round-trip
    text): 20000 → 20k, 1500000 → 1.5M, 0.3 → 0.3, 1/3 → 0.3333333333333333. The label shown is
    the edge the engines compare values with (issue 31)."""
    v = float(v)
    if v == int(v) and abs(v) < 2**53:
        n = int(v)
        for scale, suffix in ((10**6, "M"), (10**3, "k")):
            if abs(n) >= scale and n % (scale // 10) == 0:  # at most one decimal: exact
                whole, tenths = divmod(abs(n) // (scale // 10), 10)
                return f"{'-' if n < 0 else ''}{whole}{f'.{tenths}' if tenths else ''}{suffix}"
        return str(n)
    return repr(v)


def declared_fraction(x: float) -> Fraction:
    """The exact number a declared bound or width stands for: the decimal the float prints as
    (``repr``, what was typed: 0.1 → 1/10, 2.5, 1e-3) when that has at most 15 significant
    digits, else the fraction with the smallest denominator that rounds to it (a computed
    width: 1/3 → 1/3). Either way ``float(declared_fraction(x)) == x``. Integers (a range's
    bounds, time bins) are taken exactly by :class:`RegularBins`."""
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"expected a finite number, got {x!r}")
    d = Decimal(repr(x))
    if len(d.as_tuple().digits) <= 15:
        return Fraction(d)
    f = Fraction(x)
    below, above = Fraction(math.nextafter(x, -math.inf)), Fraction(math.nextafter(x, math.inf))
    lo, hi = (f + below) / 2, (f + above) / 2  # the reals that round to x (ends: ties)
    out = -_simplest(-hi, -lo) if x < 0 else _simplest(lo, hi)
    return out if float(out) == x else f


def _simplest(a: Fraction, b: Fraction) -> Fraction:
    """The fraction with the smallest denominator in [a, b] (0 <= a <= b), by continued
    fractions (the Stern-Brocot descent)."""
    whole = a.numerator // a.denominator
    if whole == a:
        return a
    if whole + 1 <= b:
        return Fraction(whole + 1)
    return whole + 1 / _simplest(1 / (b - whole), 1 / (a - whole))


def _range_text(a: int, b: int) -> str:
    """The values a … b of a range: ``18``, ``18-24``; with a negative end ``-60 to -59``
    (``-60--59`` was unreadable)."""
    if a == b:
        return str(a)
    return f"{a} to {b}" if a < 0 or b < 0 else f"{a}-{b}"


def check_name(name, what="name"):
    if not isinstance(name, str) or not name:
        raise TypeError(f"an attribute {what} must be a non-empty string, got {name!r}")
    return name


def check_int(value, what, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"attribute {name!r}: {what} must be an integer, got {value!r}")
    return int(value)


def check_real(value, what, name):
    finite = isinstance(value, numbers.Real) and not isinstance(value, bool)
    try:
        finite = finite and math.isfinite(value)
    except OverflowError:  # an int beyond any float
        finite = False
    if not finite:
        raise TypeError(f"attribute {name!r}: {what} must be a finite number, got {value!r}")
    return float(value)


class RegularBins(Sequence):
    """The bins [e_i, e_{i+1}), i = 0 … k − 1, of lo … hi by width, computed on demand.

    The edges are what the labels show: e_i is the float nearest to the exact number
    lo + i·width, lo and width read as :func:`declared_fraction` (so with width 0.1, e_3 is
    0.3, not 0.1 + 0.1 + 0.1 = 0.30000000000000004), and the last edge is hi. The engines
    decide a value's bin by comparing it with these edges (issue 31: ⌊(v − lo) / width⌋ in
    floating point put 0.3 into [0.2, 0.3)). Held as integers: e_i =
    float(num0 + i·step) · scale / float(den) (scale is 1 unless den is), one rounding when
    num0 + i·step fits in 53 bits, the same operations in numpy, SQL and Python on every
    engine.

    ``numeric_bins(lo=, hi=, width=)`` used to build one Python tuple per bin (over a minute
    at 3·10⁷ bins, MemoryError at 10⁹); this sequence holds seven numbers and gives bin i (and
    ``bins[-1]``) in O(1). Slices are not taken (they would materialise the bins); iterate
    only over what you need."""

    __slots__ = ("den", "hi", "k", "lo", "num0", "scale", "step", "width")

    def __init__(self, lo: float, hi: float, width: float):
        a, b, w = (
            Fraction(x) if isinstance(x, numbers.Integral) else declared_fraction(x)
            for x in (lo, hi, width)
        )
        lo, hi, width = float(lo), float(hi), float(width)
        if not (b > a and w > 0):
            raise ValueError(
                f"need lo < hi and width > 0, got lo = {lo!r}, hi = {hi!r}, width = {width!r}"
            )
        den = math.lcm(a.denominator, w.denominator)
        num0, step = a.numerator * (den // a.denominator), w.numerator * (den // w.denominator)
        scale = math.gcd(num0, step) if den == 1 else 1  # 1e18 + i·1e18 = (1 + i)·1e18
        self.lo, self.hi, self.width = lo, hi, width
        self.num0, self.step, self.scale, self.den = num0 // scale, step // scale, float(scale), den
        k = math.ceil((b - a) / w)
        if k > MAX_ATTRIBUTE_CELLS:
            raise ValueError(
                f"lo/hi/width declare {k:,} bins (a histogram over them alone would need "
                f"{8 * k / 2**30:,.1f} GiB); at most {MAX_ATTRIBUTE_CELLS:,}: use a wider width"
            )
        if abs(self.num0) + (k + 1) * self.step >= 2**63:
            raise ValueError(
                f"lo = {lo!r} and width = {width!r} are written too finely for exact edges over "
                f"{k:,} bins; round them to fewer digits or declare the edges"
            )
        self.k = k
        if self._edge(0) != lo:
            raise ValueError(
                f"lo = {lo!r} is not an exact edge of width {width!r}; round lo or width to fewer digits"
            )
        while self.k > 1 and self._edge(self.k - 1) >= hi:  # a last bin empty in floats
            self.k -= 1

    def _edge(self, j: int) -> float:
        return float(self.num0 + j * self.step) * self.scale / float(self.den)

    def edges(self, j):
        """:meth:`edge` of an int64 array of j (the formula for j = k too: at least hi), in
        the operations every engine uses."""
        import numpy as np

        n = (self.num0 + np.asarray(j, dtype=np.int64) * self.step).astype(np.float64)
        return n * self.scale / float(self.den)

    def edge(self, j: int) -> float:
        """Edge j = 0 … k: the start of bin j (edge k is hi, the end of the last bin)."""
        if not 0 <= j <= self.k:
            raise IndexError(f"edge {j} is outside 0..{self.k}")
        return self.hi if j == self.k else self._edge(j)

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
        return (self.edge(j), self.edge(j + 1))

    def _key(self):
        return (self.lo, self.hi, self.width)

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
    time_zone: str | None = None  # IANA name whose wall clock time bins read (None: UTC)

    def __post_init__(self):
        check_name(self.name)
        if self.time is not None and (
            self.time not in TIME_UNITS or self.kind != "bins" or self.width is None
        ):
            raise ValueError(
                f"attribute {self.name!r}: time must be one of {list(TIME_UNITS)} on regular bins, got {self.time!r}"
            )
        if self.time_zone is not None:
            if self.time is None:
                raise ValueError(
                    f"attribute {self.name!r}: time_zone goes with time bins (time_bins), got {self.time_zone!r}"
                )
            from matmech.io.zones import check_zone

            try:
                check_zone(self.time_zone)
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"attribute {self.name!r}: {exc}") from None
        check_name(self.column, "column")
        choice(self.policy, f"attribute {self.name!r}: policy", POLICIES)
        choice(self.missing, f"attribute {self.name!r}: missing", MISSING_POLICIES)
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

    def _range(self) -> tuple[int, int, int]:
        """(lo, hi, width) of a range attribute, as ints."""
        if self.lo is None or self.hi is None or self.width is None:
            raise ValueError(
                f"attribute {self.name!r}: a range needs lo, hi and width, got {self.lo!r}, {self.hi!r}, {self.width!r}"
            )
        return int(self.lo), int(self.hi), int(self.width)

    @property
    def declared_size(self) -> int:
        """Cells declared by the range, bins or categories (without the other cell)."""
        if self.kind == "range":
            lo, hi, w = self._range()
            return -(-(hi - lo + 1) // w)
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
        """True for a range or bins declared by width: edges lo + i·width (:attr:`grid`)."""
        return self.kind == "range" or (self.kind == "bins" and self.width is not None)

    @property
    def grid(self) -> RegularBins:
        """The edges of a regular attribute (:class:`RegularBins`; a range's are lo + i·width,
        the last hi + 1), which every engine compares values with."""
        if self.kind == "range":
            lo, hi, w = self._range()
            return RegularBins(lo, hi + 1, w)
        if self.width is None:
            raise ValueError(
                f"attribute {self.name!r} has no regular grid (it is not declared by width)"
            )
        return self.bins

    # -- labels ---------------------------------------------------------------------------------

    def _span(self, code):
        """(first value, last value) of a range cell, or (a, b) of a bin."""
        if self.kind == "range":
            lo, hi, w = self._range()
            return lo + code * w, min(lo + (code + 1) * w - 1, hi)
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
            lo, hi, w = self._range()
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
            if self.time_zone is not None:
                out["time_zone"] = self.time_zone
        elif self.kind == "range":
            lo, hi, w = self._range()
            out["range"] = [lo, hi]
            if w != 1:
                out["width"] = w
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
