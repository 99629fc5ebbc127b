"""The counting plan every engine runs: grouping sets, sentinel codes and the tables built from them.

A marginal is x summed over the other attributes (Li et al., "The matrix mechanism", VLDB J. 2015, §2; McKenna et al., "Optimizing error of
high-dimensional statistical queries under differential privacy", PVLDB 2018, §3). Every
engine maps each record to one code per attribute (a cell, or a sentinel: drop, out of
domain, missing), groups by the requested subsets and hands back (codes, dropped, counts);
:func:`grouped_tables` turns those into the marginal tables, applying the "error" policies in one
place so every engine refuses the same data.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Engine:
    """One counting engine, an entry of :data:`matmech.sources.engines.ENGINE_REGISTRY`.

    ``groups(source, kind, domain, sets, *, where, encoding, delimiter)`` counts the records
    per code of every grouping set → {set: (codes (rows × |set|) int64, dropped bool rows,
    counts int64 rows)}, read by :func:`grouped_tables`; ``check(kind)`` raises TypeError when the
    engine cannot count a source of that kind (:func:`matmech.sources.files.source_kind`).
    """

    name: str
    groups: Callable[..., dict]
    check: Callable[[str], None]
    #: ``tables(source, kind, domain, subsets, *, where, encoding, delimiter, memory)`` →
    #: {subset: int64 table}, every table in one scan of the data (None: the engine counts
    #: through ``groups``)
    tables: Callable[..., dict] | None = None


def not_spark(kind: str, engine: str) -> None:
    """The rule every engine but spark shares: a Spark DataFrame stays in Spark."""
    if kind == "spark":
        raise TypeError(f"a Spark DataFrame is counted by the spark engine, not {engine!r}")


DROP, OOD, MISS = -1, -2, -3


def _may(attr, action):
    return action in (attr.policy, attr.missing)


def grouping_sets(domain, wanted):
    """The distinct requested subsets, plus a singleton for every "error" attribute not in one."""
    sets = list(dict.fromkeys(wanted))
    covered = {j for s in sets for j in s}
    sets += [(j,) for j, a in enumerate(domain.attributes) if _may(a, "error") and j not in covered]
    return sets


def needs_drop_flag(domain):
    return any(_may(a, "drop") for a in domain.attributes)


def refuse_defects(a, col):
    """Raise when the codes ``col`` of attribute ``a`` hold a value its "error" policies
    refuse (out of domain, missing); the message names the column, never a value or count."""
    if a.policy == "error" and np.any(col == OOD):
        raise ValueError(
            f"column {a.column!r} (attribute {a.name!r}) has values outside its declared domain and its policy "
            "is 'error'; declare policy = 'clip', 'other' or 'drop', or widen the domain (values are not shown)"
        )
    if a.missing == "error" and np.any(col == MISS):
        raise ValueError(
            f"column {a.column!r} (attribute {a.name!r}) has missing values (null, NaN, empty or not a "
            "number) and its missing policy is 'error'; declare missing = 'other' or 'drop'"
        )


def grouped_tables(domain, sets, groups, wanted):
    """``groups``: {set: (codes (rows × |set|) int64, dropped bool rows, counts int64 rows)}."""
    for s in sets:  # an "error" attribute refuses the data if any record needs it, dropped or not
        codes = groups[s][0]
        for k, j in enumerate(s):
            refuse_defects(domain.attributes[j], codes[:, k])
    out = {}
    for s in dict.fromkeys(wanted):
        codes, dropped, counts = groups[s]
        keep = ~dropped & np.all(codes >= 0, axis=1)
        sizes = domain.subset_sizes(s)
        table = np.zeros(math.prod(sizes), dtype=np.int64)
        if s:
            idx = np.ravel_multi_index(tuple(codes[keep].T), sizes)
            np.add.at(table, idx, counts[keep])
        else:
            table[0] = counts[keep].sum()
        out[s] = table.reshape(sizes)
    return out


def actions(a):
    """(code for a missing value, for one below / above / between the declared cells)."""
    other = {"other": a.other_code, "drop": DROP, "error": MISS}
    miss = other[a.missing]
    ood = {"other": a.other_code, "drop": DROP, "error": OOD, "clip": OOD}[
        a.policy
    ]  # clip: no gaps
    low = 0 if a.policy == "clip" else ood
    high = a.declared_size - 1 if a.policy == "clip" else ood
    return miss, low, high, ood
