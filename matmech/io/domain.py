"""Declared data domains: what each attribute's values are, and what becomes of the rest.

The histogram x of the Matrix Mechanism (Li, Miklau, Hay, McGregor and Rastogi, "The matrix
mechanism", VLDB J. 2015, §2: x counts the records in each cell of a fixed, public domain)
is only private if its cells do not depend on the data: a domain learned from the records
(the distinct values present, the observed minimum and maximum) would itself disclose
records. So a :class:`Domain` is always *declared*, here or in a spec's ``[[attributes]]``
tables, and never inferred.

An :class:`Attribute` declares one column's cells:

* ``integer_range(name, lo, hi, width=1)``: integers lo … hi; value v falls in the cell i
  with lo + i·width ≤ v < lo + (i + 1)·width (so a real value is floored, 34.7 → 34);
* ``numeric_bins(name, edges=... | lo=, hi=, width=... | bins=[(lo, hi), ...])``: half-open
  bins [a, b), v in the bin whose [a, b) contains it. With ``width`` the edges are
  lo + i·width computed exactly and rounded once (:class:`RegularBins`; the last bin ends at
  hi), the numbers the labels show; explicit bins may leave gaps, whose values are out of
  the domain;
* ``time_bins(name, start, end, unit, time_zone=None)``: timestamps by hour, day, week or
  month of a zone's wall clock (:mod:`matmech.io.zones`);
* ``categories(name, values)``: strings compared exactly after trimming spaces, tabs and
  line breaks (:data:`matmech.io.attribute.WHITESPACE`).

Every attribute may add an ``other`` cell (the last one) and has two policies:
``policy`` for an out-of-domain value (``"clip"`` to the first / last numeric cell,
``"other"``, ``"drop"`` the record, ``"error"``) and ``missing`` for a missing one (null,
NaN, empty, or text that is not a number in a numeric attribute: ``"other"``, ``"drop"``,
``"error"``). A record dropped by any attribute is dropped from every count.

Cells are row-major over the attributes in order, the last fastest
(:mod:`matmech.sources.histogram`, :class:`matmech.linalg.linop.Kron`). Labels come from the
declaration: ``age 18-24``, ``sex=F, state=CA``, ``income [20k, 30k)``, and ``dep_delay -60
to -51`` when a range has a negative end.

The attribute record is :mod:`matmech.io.attribute`, its constructors :mod:`matmech.io.declare`
(both re-exported here); this module only declares; :mod:`matmech.sources.engines` applies a
domain to data.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from matmech.io.attribute import (
    Attribute,
)
from matmech.io.declare import categories, integer_range, numeric_bins, time_bins

#: The domain and its attribute builders, imported together (``from matmech.io.domain import
#: Domain, categories``); the builders live in :mod:`matmech.io.declare`.
__all__ = ["Domain", "categories", "integer_range", "numeric_bins", "time_bins"]


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
