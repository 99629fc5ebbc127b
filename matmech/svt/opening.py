"""The opening every selection mechanism starts from: checked input, calibration, grid, declared
bound and randomness, as one frozen :class:`Opening`.

A mechanism ([LSL17] Alg. 7, [DWZK19] Noisy Top-c / SVT with gap, the exponential mechanism,
the Laplace vector, or a registered method: :mod:`matmech.svt.methods`) then holds only its
own loop: it reads ``op.units()`` (the values in int64 units of the run's power-of-two grid),
``op.threshold_units()`` and draws noise with ``op.draw(scale, size)`` from ``op.src``.

The steps, in the one order every mechanism used (all before any randomness):

1. the values (1-D, finite; integer dtypes kept) and the public thresholds (scalar or one per
   value), then ``c`` and the candidate count the mechanism needs (:func:`open_selection`:
   the public boundary of a direct call);
2. the calibration, from the public inputs, whether the values are integers (then no snapping
   to the grid, :func:`matmech.privacy.noise.snap_sensitivity`) and the declared bound on
   abs(values) the grid must hold (:func:`matmech.svt.split.declared_grid`);
3. the values range-checked against the grid (no declaration: a direct call with no budget) or
   held to the declared bound (:func:`matmech.svt.grid.checked_or_declared`: a planned run
   whose magnitudes were checked before the spend), and the public margin ``sigma`` of an
   adaptive run checked against the grid;
4. the random source: ``rng=None`` the secure CTR_DRBG, a ``numpy.random.Generator`` a
   reproducible, NOT secure source (:func:`matmech.privacy.noise.check_rng`).

:func:`opening` starts at step 2 for inputs that are already checked (a planned selection,
:func:`matmech.svt.select.run_selection`): validation happens once, at the boundary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from matmech.privacy import noise
from matmech.svt.checks import check_c, check_candidates, check_threshold, check_values
from matmech.svt.grid import (
    check_public_units,
    checked_or_declared,
    draw,
    threshold_units,
    to_units,
)

if TYPE_CHECKING:  # names used only in annotations
    from matmech.privacy.randomness import RandomSource, Rng


@dataclass(frozen=True, eq=False)
class Opening:
    """What a selection mechanism starts from (module docstring): ``values`` checked and ready
    for the grid, ``thresholds`` (None for a top-c mechanism), ``c``, the public
    ``calibration`` (its ``grid`` the run's power-of-two grid), the random source ``src`` and
    the caller's ``rng`` (from which :func:`~matmech.svt.grid.worker_sources` derives the
    sources of a two-thread scan), and the declared ``value_bound`` (None: none)."""

    values: np.ndarray = field(repr=False)
    thresholds: np.ndarray | None = field(repr=False)
    c: int
    calibration: Any
    src: RandomSource = field(repr=False)
    rng: Rng = field(repr=False)
    value_bound: float | None = None

    @property
    def n(self) -> int:
        """The number of candidates."""
        return int(self.values.shape[0])

    @property
    def grid(self) -> float:
        """The run's power-of-two grid."""
        return float(self.calibration.grid)

    def units(self, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """Values ``lo:hi`` in int64 grid units (:func:`~matmech.svt.grid.to_units`)."""
        return to_units(self.values[lo:hi], self.grid)

    def threshold_units(self) -> np.ndarray:
        """The public thresholds rounded to the grid, one or one per value (1-D int64)."""
        if self.thresholds is None:
            raise TypeError("a top-c mechanism's opening holds no thresholds")
        return threshold_units(self.thresholds, self.grid)

    def draw(self, scale: float, size: int) -> np.ndarray:
        """``size`` draws of Laplace(``scale``) on the grid, in grid units (discrete Laplace)."""
        return draw(scale, size, self.grid, self.src)


def taking(calibration: Callable[..., Any], *names: str, **fixed: Any) -> Callable[..., Any]:
    """A registry calibration hook (:mod:`matmech.svt.methods`): ``calibration(**fixed, ...)``
    with the public inputs it takes, ``names``; the registry passes them all."""

    def hook(**public: Any) -> Any:
        return calibration(**fixed, **{k: v for k, v in public.items() if k in names})

    return hook


#: The public inputs every calibration takes.
COMMON = ("c", "eps", "sensitivity", "monotonic", "integer_values", "value_bound")


def open_selection(
    values: Any,
    threshold: Any,
    *,
    c: Any,
    calibrate: Callable[..., Any],
    rng: Rng = None,
    value_bound: float | None = None,
    candidates: str = "any",
    **public: Any,
) -> Opening:
    """Check a direct call's input (values, thresholds: None for a top-c mechanism, ``c`` and
    the ``candidates`` rule of :func:`~matmech.svt.checks.check_candidates`), then
    :func:`opening`. Raises before any randomness."""
    arr = check_values(values)
    t = None if threshold is None else check_threshold(threshold, arr.shape[0])
    c = check_c(c)
    check_candidates(arr.shape[0], c, candidates)
    return opening(arr, t, c=c, calibrate=calibrate, rng=rng, value_bound=value_bound, **public)


def opening(
    values: np.ndarray,
    thresholds: np.ndarray | None,
    *,
    c: int,
    calibrate: Callable[..., Any],
    rng: Rng = None,
    value_bound: float | None = None,
    **public: Any,
) -> Opening:
    """The :class:`Opening` of checked input: ``calibrate(c=, integer_values=, value_bound=,
    n_candidates=, **public)`` (a method's calibration hook, :mod:`matmech.svt.methods`), the
    values range-checked or held to ``value_bound``, ``sigma`` on the grid, the source."""
    cal = calibrate(
        c=c,
        integer_values=values.dtype.kind in "biu",
        value_bound=value_bound or 0.0,
        n_candidates=int(values.shape[0]),
        **public,
    )
    arr = checked_or_declared(values, thresholds, cal.grid, value_bound)
    sigma = getattr(cal, "sigma", None)
    if sigma is not None:
        check_public_units(sigma, cal.grid, "sigma (the top-branch margin)")
    return Opening(arr, thresholds, c, cal, noise.check_rng(rng), rng, value_bound)
