"""The registry of private row-selection methods: the one place the release paths, the CLI,
the rules and the runner look a method up.

A method is a :class:`SelectionMethod` in :data:`SELECTION_METHODS`: the :class:`Mechanism`
it runs ([LSL17] Lyu, Su, Li, VLDB 2017; [DWZK19] Ding, Wang, Zhang, Kifer, PVLDB 2019),
whether it tests rows against a threshold, the vector selection that may replace it
(:mod:`matmech.svt.vector`), the most rows it can select and the options only it takes.

A mechanism is three hooks, written in one module (the built-in ones: :mod:`matmech.svt.core`,
:mod:`matmech.svt.topc`, :mod:`matmech.svt.gap`, :mod:`matmech.svt.vector`):

* ``calibrate(*, c, eps, sensitivity, monotonic, ratio, sigma, integer_values, value_bound,
  n_candidates)``: the public calibration (a frozen record with the run's power-of-two
  ``grid`` and its ``eps``), from public inputs only; raises ValueError/TypeError on inputs it
  cannot take. It is called before anything is read or spent (its refusals are the
  selection's), and again to open the run;
* ``run(opening)``: the mechanism's own loop from an :class:`~matmech.svt.opening.Opening`
  (values on the grid, thresholds, the calibration, the random source): a result with
  ``positions`` and ``stopped`` (the free-gap ones also ``gaps`` and ``branches``), drawing
  noise only through the opening; ε-DP for the calibrated sensitivity;
* ``law(result, threshold)`` (free-gap mechanisms only): what the released gaps measure, a
  :class:`~matmech.svt.measurement.GapMeasurement` (:func:`matmech.svt.combine.gap_measurement`),
  and ``score_variance(calibration)``: the variance of the noise on one selection score, by
  which :func:`~matmech.svt.combine.advise_split` advises the selection's share of ε.

A new method, free-gap or not, is those hooks in one module and one :func:`register_method`
line (docs/guide/extending.md; ``tests/svt/test_extend_selection.py`` registers one).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from matmech.svt import core, gap, topc, vector


@dataclass(frozen=True)
class Mechanism:
    """A selection mechanism's hooks (module docstring): ``name`` (e.g. "sparse-vector"),
    ``calibrate``, ``run``, and for a free-gap mechanism ``law`` and ``score_variance``;
    ``joint``: calibrated for the L1 sensitivity of the whole vector W x (the vector
    selections) rather than the row sensitivity."""

    name: str
    calibrate: Callable[..., Any] = field(compare=False, repr=False)
    run: Callable[..., Any] = field(compare=False, repr=False)
    law: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    score_variance: Callable[[Any], float] | None = field(default=None, compare=False, repr=False)
    joint: bool = False

    @property
    def gap(self) -> bool:
        """Whether the mechanism releases free gaps (it has an output law)."""
        return self.law is not None


@dataclass(frozen=True)
class SelectionMethod:
    """What the rest of the package needs to know about a selection method (the registry
    :data:`SELECTION_METHODS`): the :class:`Mechanism` it runs, whether it tests rows against
    a ``threshold`` (else it takes the c largest), whether it needs an unselected
    ``runner_up`` (c below the number of rows: its last gap is to it), the ``vector`` mechanism that replaces it
    when less noisy ([DR14] Laplace on all of W x; None: never), the most rows it can select
    for a given c (``max_rows_factor``·c − ``max_rows_offset``), why rows after its last
    find were not examined (``stop_reason``) and the options only it takes (``own_options``).

    A free-gap method (its mechanism has a ``law``) releases its gaps; they are never
    combined into a release's answers (the winner's curse, docs/guide/selection.md)."""

    name: str
    mechanism: Mechanism
    threshold: bool
    vector: Mechanism | None = None
    runner_up: bool = False
    max_rows_factor: int = 1
    max_rows_offset: int = 0
    stop_reason: str = "c rows already found"
    own_options: tuple = ()

    @property
    def gap(self) -> bool:
        """Whether the method releases free gaps (its mechanism has an output law)."""
        return self.mechanism.gap

    def max_rows(self, c: int) -> int:
        """The most rows one run can select (Ding et al.: adaptive SVT up to 2c − 1)."""
        return self.max_rows_factor * int(c) - self.max_rows_offset

    def runs(self, name: str = "") -> Mechanism:
        """The mechanism named ``name`` (its vector selection, or its own; "" = its own)."""
        if self.vector is not None and name == self.vector.name:
            return self.vector
        return self.mechanism


def _vector_mechanism(name: str, run: Callable) -> Mechanism:
    return Mechanism(
        name,
        functools.partial(vector.calibrate, method=name),
        run,
        vector.value_law,
        lambda cal: cal.variance(),
        joint=True,
    )


def _threshold_gap_mechanism(name: str, calibrate: Callable, branch: str) -> Mechanism:
    """A sparse vector with gap ([DWZK19]): its selection scores carry the noise of
    ``branch`` plus the threshold noise."""
    return Mechanism(
        name,
        calibrate,
        gap.run_svt_gap,
        gap.threshold_law,
        lambda cal: cal.gap_variance(branch) + cal.gap_variance("threshold"),
    )


_VECTOR_TOP_C = _vector_mechanism("vector-top-c", vector.run_top_c)

_VECTOR_THRESHOLD = _vector_mechanism("vector-threshold", vector.run_threshold)

#: The selection methods, by name (the built-in ones, then those :func:`register_method` adds).
SELECTION_METHODS = {
    m.name: m
    for m in (
        SelectionMethod(
            "svt", Mechanism("sparse-vector", core.calibrate, core.run), threshold=True
        ),
        SelectionMethod("em", Mechanism("exponential", topc.calibrate, topc.run), threshold=False),
        SelectionMethod(
            "topc-gap",
            Mechanism(
                "noisy-top-c-gap",
                gap.calibrate_top_c,
                gap.run_top_c_gap,
                gap.top_c_law,
                lambda cal: cal.gap_variance("middle"),
            ),
            threshold=False,
            vector=_VECTOR_TOP_C,
            runner_up=True,
        ),
        SelectionMethod(
            "svt-gap",
            _threshold_gap_mechanism("sparse-vector-gap", gap.calibrate_svt_gap, "middle"),
            threshold=True,
            vector=_VECTOR_THRESHOLD,
        ),
        SelectionMethod(
            "adaptive-svt",
            # rows worth answering clear the threshold by a margin: the top branch's noise
            _threshold_gap_mechanism("adaptive-sparse-vector", gap.calibrate_adaptive, "top"),
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


#: The built-in methods that release free gaps ([DWZK19]; :mod:`matmech.svt.gap`).
GAP_METHODS = tuple(n for n, m in SELECTION_METHODS.items() if m.gap)


#: The built-in methods that test rows against a threshold.
THRESHOLD_METHODS = tuple(n for n, m in SELECTION_METHODS.items() if m.threshold)


#: The mechanism each method runs by default (a dict, derived from the registry on every
#: read: :func:`__getattr__`).
MECHANISMS: dict[str, str]  # no value bound: every read goes to __getattr__ (PEP 562)


def __getattr__(name: str) -> dict[str, str]:
    """``MECHANISMS``: the mechanism each method runs by default, read from
    :data:`SELECTION_METHODS` on every access (a new dict, in the registry's order), so that
    registering or removing a method is reflected; "topc-gap" and "svt-gap" run their vector
    selection instead when that has less noise (:func:`~matmech.svt.rules.selection_mechanism`)."""
    if name == "MECHANISMS":
        return {n: m.mechanism.name for n, m in SELECTION_METHODS.items()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def mechanism_named(name: str) -> Mechanism:
    """The registered mechanism called ``name`` (a method's own or its vector selection)."""
    for m in SELECTION_METHODS.values():
        for mech in (m.mechanism, m.vector):
            if mech is not None and mech.name == name:
                return mech
    raise ValueError(
        f"no registered selection mechanism is named {name!r} (a result of a registered "
        "method's run names its mechanism)"
    )


def register_method(method: SelectionMethod, *, replace: bool = False) -> SelectionMethod:
    """Add a selection method to :data:`SELECTION_METHODS`, so that ``select_rows(method=name)``
    and ``release(select=dict(method=name, ...))`` run it, on the histogram and on marginal
    tables alike.

    Parameters
    ----------
    method : SelectionMethod
        The entry; its mechanism's hooks are described in the module docstring.
    replace : bool, default False
        Replace a registered method of the same name (never a built-in one).

    Returns
    -------
    SelectionMethod
        ``method``.

    Raises
    ------
    TypeError
        ``method`` is not a SelectionMethod, or a hook is not callable.
    ValueError
        A name taken (by a built-in method, or by a registered one without ``replace``).

    Examples
    --------
    >>> "svt" in SELECTION_METHODS
    True
    """
    if not isinstance(method, SelectionMethod):
        raise TypeError(f"register_method takes a SelectionMethod, got {type(method).__name__}")
    for mech in (method.mechanism, method.vector):
        if mech is None:
            continue
        if not isinstance(mech, Mechanism):
            raise TypeError(
                f"method {method.name!r}: its mechanism must be a Mechanism, got {type(mech).__name__}"
            )
        hooks: list[tuple[str, Any]] = [("calibrate", mech.calibrate), ("run", mech.run)]
        if mech.gap:
            hooks.append(("score_variance", mech.score_variance))
        for what, hook in hooks:
            if not callable(hook):
                raise TypeError(f"method {method.name!r} needs a callable {what} hook")
    if method.name in METHODS or (method.name in SELECTION_METHODS and not replace):
        raise ValueError(f"a selection method named {method.name!r} is registered already")
    SELECTION_METHODS[method.name] = method
    return method
