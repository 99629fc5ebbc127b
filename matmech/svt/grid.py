"""Exact grid arithmetic and noise streams for the sparse vector mechanisms.

Every comparison ``q_i + nu_i >= T_i + rho`` of an SVT run is made exactly, in
int64 multiples ("units") of the run's power-of-two grid ``g``: values and
(public) thresholds are converted to units, and the noise is discrete Laplace
in units (Laplace on g*Z; Canonne, Kamath, Steinke 2020, Alg. 2, via
:func:`matmech.privacy.noise.discrete_laplace`).

Long scans draw query noise in growing chunks so that a run stopping at its
c-th positive wastes little; from :data:`PARALLEL_MIN` candidates on, two
threads draw the chunks from two independent sources.  Child sources come
from ``Generator.spawn`` (seeded runs stay reproducible, no seed integers are
made here) or are fresh secure sources (secure runs).
"""

from __future__ import annotations

import math
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from matmech.privacy import noise
from matmech.privacy.randomness import RandomSource


# Chunking of the vectorised scan: start small (c positives are often found
# early, and unused noise is wasted work), grow geometrically to bound memory.
CHUNK_FIRST = 1 << 12
CHUNK_MAX = 1 << 20
# From this many candidates on, query noise is drawn by two threads.
PARALLEL_MIN = 1 << 22
# Values and thresholds are held as int64 multiples of the grid; keep a wide
# margin below 2**63 so that value + noise - threshold cannot overflow.
MAX_UNITS = float(2**60)
#: A run planned from a declaration holds the declared bound on abs(values) (``max_records`` times
#: W's largest abs(entry)), every public threshold and sigma within this many grid units: half of
#: MAX_UNITS, so float rounding of W x and the noise never reach the int64 limit.
DECLARED_UNITS = float(2**59)


# --------------------------------------------------------------------------
# Grid arithmetic
# --------------------------------------------------------------------------
def range_check(max_abs: float, g: float, name: str) -> None:
    """Refuse magnitudes that would not fit in int64 units of the grid ``g``."""
    if max_abs / g >= MAX_UNITS:
        raise ValueError(
            f"{name} too large in magnitude for exact grid arithmetic "
            f"(|x|/grid must stay below 2**60 with grid={g!r}, a power of two set by the sensitivity and eps); "
            "rescale the inputs or raise the sensitivity"
        )


def grid_for_bound(value_bound: float) -> float:
    """The finest power-of-two grid on which every value of magnitude <= ``value_bound`` is at
    most :data:`DECLARED_UNITS` units (0.0 when there is no bound): the plan coarsens the
    calibration's grid to at least this, so no input within the declaration can overflow it."""
    b = float(value_bound)
    if not (math.isfinite(b) and b >= 0):
        raise ValueError(
            f"value_bound must be a finite non-negative number (a declared bound on |values|), got {value_bound!r}"
        )
    if b == 0:
        return 0.0
    m, e = math.frexp(b / DECLARED_UNITS)  # b / 2**59 = m * 2**e, 0.5 <= m < 1
    return math.ldexp(1.0, e - 1) if m == 0.5 else math.ldexp(1.0, e)


def declared_values(arr: np.ndarray, value_bound: float) -> np.ndarray:
    """``arr`` held to [-value_bound, value_bound]: a no-op for every input within the
    declaration (the plan checked the declared bound before the spend), and a guarantee that
    nothing after the spend can overflow the grid or raise on the data (clipping is
    1-Lipschitz, so it never raises a sensitivity)."""
    if arr.dtype.kind in "biu":
        b = int(value_bound)
        return np.clip(arr, -b, b)
    return np.clip(arr, -float(value_bound), float(value_bound))


def check_public_units(values, g: float, name: str) -> None:
    """Refuse a public magnitude (thresholds, sigma) beyond :data:`DECLARED_UNITS` grid units,
    naming it and the largest magnitude that fits; the plan calls this before any spend."""
    tt = np.abs(np.atleast_1d(np.asarray(values, dtype=np.float64)))
    if tt.size and float(tt.max()) / g > DECLARED_UNITS:
        i = int(np.argmax(tt))
        where = "" if tt.size == 1 else f" (index {i})"
        raise ValueError(
            f"{name}{where} = {float(np.atleast_1d(values)[i])!r} is too large in magnitude for exact grid "
            f"arithmetic: with grid {g!r} it must be at most {DECLARED_UNITS * g:.6g} in magnitude"
        )


def range_checks(arr: np.ndarray, t: np.ndarray, g: float) -> None:
    """:func:`range_check` on the values and the thresholds of a run."""
    if arr.size:
        range_check(max(abs(float(arr.min())), abs(float(arr.max()))), g, "values")
    tt = np.atleast_1d(t)
    if tt.size:
        range_check(max(abs(float(tt.min())), abs(float(tt.max()))), g, "threshold")


def checked_or_declared(arr: np.ndarray, t, g: float, value_bound) -> np.ndarray:
    """The values of a run, ready for :func:`to_units`.

    ``value_bound`` None (a mechanism called on values directly, with no budget): the values
    and thresholds ``t`` are range-checked (:func:`range_checks`) before any draw. Otherwise
    the caller planned the run from a declared bound and checked the public thresholds
    before its spend (:func:`check_public_units`): nothing here reads the values to decide
    anything, they are only held to the bound (:func:`declared_values`).
    """
    if value_bound is None:
        if t is None:
            if arr.size:
                range_check(max(abs(float(arr.min())), abs(float(arr.max()))), g, "values")
        else:
            range_checks(arr, t, g)
        return arr
    if t is not None:
        check_public_units(t, g, "threshold")
    return declared_values(arr, value_bound)


def to_units(arr: np.ndarray, g: float) -> np.ndarray:
    """Values -> int64 multiples of the grid ``g`` (a power of two <= 1).

    Integer dtypes are already on the grid; anything else is snapped
    (:func:`matmech.privacy.noise.snap`, which costs ``g`` of extra sensitivity).
    """
    if arr.dtype.kind in "biu":
        return arr.astype(np.int64) * np.int64(round(1.0 / g))
    # snap() returns exact multiples of g; dividing by a power of two is exact.
    return (noise.snap(arr, g) / g).astype(np.int64)


def threshold_units(t: np.ndarray, g: float) -> np.ndarray:
    """The (public) thresholds rounded to the grid, as a 1-D array; costs no privacy."""
    return to_units(np.atleast_1d(t), g)


def draw(scale: float, size: int, g: float, src) -> np.ndarray:
    """Laplace(scale) on the grid g*Z, in grid units: discrete Laplace(scale/g).

    Every scale is a whole number of grid steps (see :mod:`matmech.svt.calibration`).
    """
    return np.asarray(noise.discrete_laplace(int(round(scale / g)), size, rng=src), dtype=np.int64)


# --------------------------------------------------------------------------
# Query noise in chunks, optionally drawn by two threads
# --------------------------------------------------------------------------
def chunk_bounds(n: int):
    """Consecutive (start, end) slices of 0..n, growing from CHUNK_FIRST to CHUNK_MAX."""
    pos, chunk = 0, CHUNK_FIRST
    while pos < n:
        end = min(n, pos + chunk)
        yield pos, end
        pos = end
        chunk = min(chunk * 4, CHUNK_MAX)


def worker_sources(rng, n: int):
    """Two independent random sources for drawing query noise in parallel, or None.

    Exact sampling dominates the run time on long inputs, and it parallelises:
    the noise of different chunks is independent, so two threads may draw it
    from two independent sources.  Secure runs (``rng`` None or a secure
    source) get two fresh secure sources.  A seeded Generator gets two
    children from ``Generator.spawn`` (independent streams derived from its
    SeedSequence; reproducible, and no seed integer is ever drawn).  Any other
    source, or a Generator without a SeedSequence, is used as is, by one
    thread.  The choice depends on ``n`` only, never on the machine.
    """
    if n < PARALLEL_MIN:
        return None
    if rng is None or (isinstance(rng, RandomSource) and rng.secure):
        return [noise.check_rng(None), noise.check_rng(None)]
    if isinstance(rng, np.random.Generator):
        try:
            children = rng.spawn(2)
        except TypeError:  # a bit generator made without a SeedSequence cannot spawn
            return None
        return [noise.check_rng(child) for child in children]
    return None


def noise_chunks(scale_units: int, bounds, src, workers):
    """Yield discrete Laplace(scale_units) arrays of sizes end - start, in order.

    With ``workers``, chunk k is drawn by ``workers[k % 2]`` (each source is
    used by one task at a time and in order, so seeded runs are deterministic)
    while the caller scans the previous chunk.  Close the generator when done
    early: pending draws nobody will read are cancelled.
    """
    if workers is None:
        for a, b in bounds:
            yield noise.discrete_laplace(scale_units, b - a, rng=src)
        return
    bounds = iter(bounds)
    ex = ThreadPoolExecutor(max_workers=len(workers), thread_name_prefix="matmech-svt-noise")
    try:
        pending: deque = deque()
        for w in workers:
            ab = next(bounds, None)
            if ab is None:
                break
            pending.append(
                (ex.submit(noise.discrete_laplace, scale_units, ab[1] - ab[0], rng=w), w)
            )
        while pending:
            fut, w = pending.popleft()
            out = fut.result()
            ab = next(bounds, None)
            if ab is not None:
                pending.append(
                    (ex.submit(noise.discrete_laplace, scale_units, ab[1] - ab[0], rng=w), w)
                )
            yield out
    finally:
        ex.shutdown(wait=False, cancel_futures=True)


class NoiseBuffer:
    """Independent Laplace draws in grid units, handed out a few at a time.

    For callers that need one or a handful of draws at a time (the interactive
    SVT, retraversal passes over a few candidates): the exact sampler has a
    fixed cost per call, so draws are made in blocks that double from
    ``first`` up to ``largest``.  Draws are i.i.d. and independent of the data,
    so drawing some ahead of use, or never using them, changes nothing about
    the output distribution.
    """

    __slots__ = ("_units", "_src", "_buf", "_pos", "_block", "_largest")

    def __init__(
        self, scale: float, g: float, src, *, first: int = 4, largest: int = CHUNK_FIRST
    ) -> None:
        self._units = int(round(scale / g))
        self._src = src
        self._buf = np.empty(0, dtype=np.int64)
        self._pos = 0
        self._block = first
        self._largest = largest

    def take(self, k: int) -> np.ndarray:
        """The next ``k`` draws (int64 grid units)."""
        if k <= 0:
            return np.empty(0, dtype=np.int64)
        out = []
        while k > 0:
            if self._pos == self._buf.size:
                size = max(self._block, min(k, self._largest))
                self._buf = np.asarray(
                    noise.discrete_laplace(self._units, size, rng=self._src), dtype=np.int64
                )
                self._pos = 0
                self._block = min(2 * self._block, self._largest)
            part = self._buf[self._pos : self._pos + k]
            self._pos += part.size
            k -= part.size
            out.append(part)
        return out[0] if len(out) == 1 else np.concatenate(out)

    def one(self) -> int:
        """The next draw as a Python int."""
        return int(self.take(1)[0])
