"""The registry of private row-selection methods (one entry per method).

A method is a :class:`SelectionMethod` in :data:`SELECTION_METHODS`: the mechanism it runs
(Lyu, Su, Li, VLDB 2017; Ding, Wang, Zhang, Kifer, PVLDB 2019), whether it releases free gaps,
whether it tests rows against a threshold, the most rows it can select, and its own options.
The release paths, the CLI and the answer table read it; :mod:`matmech.svt.select` runs it.

A new method that releases only the selected rows (no free gaps) is one
:func:`register_method` call with its ``run`` (and, optionally, ``calibrate``) hook
(docs/guide/extending.md); the built-in methods run through :mod:`matmech.svt.select`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "SelectionMethod",
    "SELECTION_METHODS",
    "register_method",
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
    (its ε share may be advised; the gaps are released, never combined into the answers), whether it tests rows
    against a ``threshold`` (else it takes the c largest), the most rows it can select for a
    given c (``max_rows_factor``·c − ``max_rows_offset``), why rows after its last find were
    not examined (``stop_reason``) and the options only it takes (``own_options``).

    A registered method (:func:`register_method`) brings its own mechanism: ``run(values, *,
    c, eps, sensitivity, monotonic, threshold, ratio, rng, value_bound)`` → (positions,
    stopped) selects from the true row answers ``values`` (int64 when exact, else float64)
    with noise drawn only from :mod:`matmech.privacy.noise` with ``rng``, and is ε-DP for row
    ``sensitivity`` (the budget is charged before it runs); ``calibrate(*, c, eps,
    sensitivity, monotonic, ratio)`` (optional) checks the public inputs and raises
    ValueError before anything is read or spent."""

    name: str
    mechanism: str
    gap: bool
    threshold: bool
    max_rows_factor: int = 1
    max_rows_offset: int = 0
    stop_reason: str = "c rows already found"
    own_options: tuple = ()
    run: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    calibrate: Callable[..., Any] | None = field(default=None, compare=False, repr=False)

    def max_rows(self, c: int) -> int:
        """The most rows one run can select (Ding et al.: adaptive SVT up to 2c − 1)."""
        return self.max_rows_factor * int(c) - self.max_rows_offset


#: The selection methods, by name (the built-in ones, then those :func:`register_method` adds).
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


#: The built-in methods (:data:`SELECTION_METHODS` also holds registered ones).
METHODS = tuple(SELECTION_METHODS)


#: The methods that release free gaps (Ding, Wang, Zhang, Kifer, PVLDB 2019; :mod:`matmech.svt.gap`).
GAP_METHODS = tuple(n for n, m in SELECTION_METHODS.items() if m.gap)


#: The methods that test rows against a threshold.
THRESHOLD_METHODS = tuple(n for n, m in SELECTION_METHODS.items() if m.threshold)


#: The mechanism each method runs by default (a dict, derived from the registry on every
#: read: :func:`__getattr__`).
MECHANISMS: dict[str, str]  # no value bound: every read goes to __getattr__ (PEP 562)


def __getattr__(name: str) -> dict[str, str]:
    """``MECHANISMS``: the mechanism each method runs by default, read from
    :data:`SELECTION_METHODS` on every access (a new dict, in the registry's order), so that
    registering or removing a method is reflected; "topc-gap" and "svt-gap" run
    :data:`~matmech.svt.vector.VECTOR_METHODS` instead when that has less noise
    (:func:`~matmech.svt.rules.selection_mechanism`)."""
    if name == "MECHANISMS":
        return {n: m.mechanism for n, m in SELECTION_METHODS.items()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register_method(method: SelectionMethod, *, replace: bool = False) -> SelectionMethod:
    """Add a selection method with its own ``run`` hook to :data:`SELECTION_METHODS`, so that
    ``select_rows(method=name)`` and ``release(select=dict(method=name, ...))`` run it.

    Parameters
    ----------
    method : SelectionMethod
        The entry, with ``run`` (and optionally ``calibrate``); ``gap`` must be False (free
        gaps need a gap measurement form, :mod:`matmech.svt.combine`).
    replace : bool, default False
        Replace a registered method of the same name (never a built-in one).

    Returns
    -------
    SelectionMethod
        ``method``.

    Raises
    ------
    TypeError
        ``method`` is not a SelectionMethod, or its ``run`` is not callable.
    ValueError
        A name taken (by a built-in method, or by a registered one without ``replace``), or
        ``gap=True``.

    Examples
    --------
    >>> "svt" in SELECTION_METHODS
    True
    """
    if not isinstance(method, SelectionMethod):
        raise TypeError(f"register_method takes a SelectionMethod, got {type(method).__name__}")
    if not callable(method.run):
        raise TypeError(f"method {method.name!r} needs a callable run hook (its mechanism)")
    if method.gap:
        raise ValueError(
            f"method {method.name!r}: a registered method releases the selected rows only (gap=False)"
        )
    if method.name in METHODS or (method.name in SELECTION_METHODS and not replace):
        raise ValueError(f"a selection method named {method.name!r} is registered already")
    SELECTION_METHODS[method.name] = method
    return method
