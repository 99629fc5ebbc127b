"""The registry of private row-selection methods (one entry per method).

A method is a :class:`SelectionMethod` in :data:`SELECTION_METHODS`: the mechanism it runs
(Lyu, Su, Li, VLDB 2017; Ding, Wang, Zhang, Kifer, PVLDB 2019), whether it releases free gaps,
whether it tests rows against a threshold, the most rows it can select, and its own options.
The release paths, the CLI and the answer table read it; :mod:`matmech.svt.select` runs it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "SelectionMethod",
    "SELECTION_METHODS",
    "METHODS",
    "GAP_METHODS",
    "THRESHOLD_METHODS",
    "MECHANISMS",
]


@dataclass(frozen=True)
class SelectionMethod:
    """What the rest of the package needs to know about a selection method (the registry
    :data:`SELECTION_METHODS`; the release paths, the CLI and the answer table read it):
    ``mechanism`` it runs by default ([LSL17] / [DWZK19]), whether it releases free gaps (``gap``)
    (its ε share may be advised and the gaps are combined by GLS), whether it tests rows
    against a ``threshold`` (else it takes the c largest), the most rows it can select for a
    given c (``max_rows_factor``·c − ``max_rows_offset``), why rows after its last find were
    not examined (``stop_reason``) and the options only it takes (``own_options``)."""

    name: str
    mechanism: str
    gap: bool
    threshold: bool
    max_rows_factor: int = 1
    max_rows_offset: int = 0
    stop_reason: str = "c rows already found"
    own_options: tuple = ()

    def max_rows(self, c: int) -> int:
        """The most rows one run can select (Ding et al.: adaptive SVT up to 2c − 1)."""
        return self.max_rows_factor * int(c) - self.max_rows_offset


#: The selection methods, by name. A new method is one entry here plus its runner.
SELECTION_METHODS = {
    m.name: m
    for m in (
        SelectionMethod("svt", "sparse-vector", gap=False, threshold=True),
        SelectionMethod("em", "exponential", gap=False, threshold=False),
        SelectionMethod("topc-gap", "noisy-top-c-gap", gap=True, threshold=False),
        SelectionMethod("svt-gap", "sparse-vector-gap", gap=True, threshold=True),
        SelectionMethod(
            "adaptive-svt",
            "adaptive-sparse-vector",
            gap=True,
            threshold=True,
            max_rows_factor=2,
            max_rows_offset=1,
            stop_reason="budget used up",
            own_options=("sigma",),
        ),
    )
}


METHODS = tuple(SELECTION_METHODS)


#: The methods that release free gaps (Ding, Wang, Zhang, Kifer, PVLDB 2019; :mod:`matmech.svt.gap`).
GAP_METHODS = tuple(n for n, m in SELECTION_METHODS.items() if m.gap)


#: The methods that test rows against a threshold.
THRESHOLD_METHODS = tuple(n for n, m in SELECTION_METHODS.items() if m.threshold)


#: The mechanism each method runs by default; "topc-gap" and "svt-gap" run
#: :data:`~matmech.svt.vector.VECTOR_METHODS` instead when that has less noise (:func:`selection_mechanism`).
MECHANISMS = {n: m.mechanism for n, m in SELECTION_METHODS.items()}
