"""A step's measurement in exact integers, for any counts: y_t/g = K_t·x + m_t.

The measured factorization C_g has every entry on the grid g (a power of two), so
K = C_g/g is an integer matrix; the noise z_t = g·m_t has integer m_t; the counts are
integers. The measurement y_t = C_g[t]·x + z_t is therefore g times the integer
K_t·x + m_t, and computing that integer exactly is what makes the discrete noise's privacy
analysis hold for the floats actually computed (a rounding that depended on x would shift
y off the lattice; Mironov, CCS 2012). The released totals B_g·y are post-processing of y.

Nothing here checks the data against a bound. Counts are clamped per cell to a public ``cap``
(the declared ``max_records``; no cell of a stream within its declaration exceeds it), a
1-Lipschitz map of each cell, so neighbouring streams stay neighbours and the sensitivity is
unchanged; the total over the stream is not bounded at all. K_t·x is split into limbs:
x = Σ_j x_j·2^(w·j) with 0 ≤ x_j < 2^w, where w is the largest width with
‖K_t‖₁·2^w ≤ 2^62 for every row t (public: the grid and the factorization), so each limb's
int64 dot product and every partial sum in it is exact; the limbs and the noise are summed
in Python integers. The integer is then rounded once to float64 (correctly rounded, a
function of the exact y alone). The number of limbs, and so the work, depends only on
public values.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from matmech.privacy.measure import check_counts
from matmech.stream.factorizations import StreamFactorization
from matmech.validate import rectangular


_WORD_BITS = 62  # ‖K_t‖₁·2^w ≤ 2^62: every partial sum of a limb's dot product fits in int64


@dataclass(frozen=True)
class LimbLayout:
    """How a step splits the counts: ``limbs`` limbs of ``width`` bits cover [0, ``cap``]."""

    width: int
    limbs: int
    cap: int


def integer_factor(f: StreamFactorization, grid: float) -> np.ndarray:
    """K = C_g/g as int64: the Toeplitz column or the dense matrix (a window factorization:
    its dense matrix, for tests; the release builds its rows one by one)."""
    k = np.asarray(f.dense() if f.c is None else f.c, dtype=np.float64) / grid
    if not np.all(np.rint(k) == k) or np.abs(k).max() >= 2.0**62:
        raise ValueError(
            "the measured factorization is not on its grid (a corrupt stream file or plan)"
        )
    return k.astype(np.int64)


def limb_layout(
    f: StreamFactorization, grid: float, cap: int, *, k: np.ndarray | None = None
) -> LimbLayout:
    """The limb width and count for factorization ``f`` on ``grid`` with cells ≤ ``cap``;
    ``k``: its :func:`integer_factor` when the caller has built it already."""
    if isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap < 2**62:
        raise ValueError(f"cap must be an integer in [1, 2**62), got {cap!r}")
    if f.windows is not None:  # rows of ones: the largest row sum is the longest window
        l1 = float(f.windows.max()) / grid
    else:
        k = np.abs(integer_factor(f, grid) if k is None else k).astype(np.float64)
        # the largest row sum of |K|, bounded above (a float sum of ≤ 2^24 integers: rel. err < 2^-28)
        l1 = float(k.sum()) if f.toeplitz else float(k.sum(axis=1).max())
    l1 = l1 * (1.0 + 2.0**-20) + 1.0
    width = math.floor(_WORD_BITS - math.log2(l1))
    if width < 1:
        raise ValueError(
            f"the factorization's rows sum to {l1:.3g} grid steps: too many for exact int64 limbs; "
            "lower the precision of the grid (raise eps) or use a shorter horizon"
        )
    bits = cap.bit_length()
    return LimbLayout(width, 1 if width >= bits else -(-bits // width), cap)


def limbs_of(x: np.ndarray, layout: LimbLayout) -> np.ndarray:
    """x (int64 counts in [0, cap], any shape) as ``layout.limbs`` stacked limbs, int64."""
    if layout.limbs == 1:
        return x[None, ...].astype(np.int64, copy=True)
    mask = np.int64((1 << layout.width) - 1)
    return np.stack([(x >> np.int64(layout.width * j)) & mask for j in range(layout.limbs)])


def exact_measurement(
    k_row: np.ndarray, limbs: np.ndarray, z: np.ndarray, grid: float, layout: LimbLayout
) -> np.ndarray:
    """y_t = g·(K_t·x + z_t/g) per category: exact in integers, then rounded once to float64.

    ``k_row``: K[t, 0..t] (int64, oldest step first, contiguous); ``limbs``: the counts'
    limbs for steps 0..t, shape (limbs, t + 1, k); ``z``: the noise drawn on the grid
    (length k).
    """
    # int64, exact: ‖K_t‖₁·(2^w − 1) < 2^62 (see the module notes); einsum never uses BLAS
    # for integers, and with a contiguous k_row it is as fast as a float gemv
    parts = np.einsum("s,lsc->lc", k_row, limbs)
    total = [int(v) for v in z / grid]  # integral floats: exact
    for j in range(layout.limbs):
        shift = layout.width * j
        total = [a + (int(b) << shift) for a, b in zip(total, parts[j], strict=True)]
    return np.array([float(v) for v in total]) * grid  # float(int) rounds correctly; g = 2^e


def clamp_counts(counts, k: int, cap: int) -> np.ndarray:
    """One step's counts as int64 in [0, ``cap``]: every cell above ``cap`` becomes ``cap``.

    What a count is (a vector of k finite non-negative integers) is checked and named as
    :func:`~matmech.privacy.measure.check_counts` does; how large a count is never raises:
    Python integers of any size, uint64 and floats from 2^52 up (all integral) are clamped
    before that check, so its refusal of entries from 2^62 up is never reached.
    """
    if hasattr(counts, "to_numpy") and not isinstance(counts, np.ndarray):
        counts = counts.to_numpy()
    arr = np.atleast_1d(np.asarray(rectangular(counts, "counts")))
    if arr.dtype == object:  # Python integers beyond uint64 (or not numbers: refused below)
        flat = [
            max(-1, min(int(v), cap)) if isinstance(v, numbers.Integral) else v for v in arr.ravel()
        ]
        arr = np.asarray(flat).reshape(arr.shape)
    if arr.dtype.kind == "u":
        arr = np.minimum(arr, np.uint64(cap)).astype(np.int64)
    if arr.dtype.kind == "f":
        arr = np.where(np.isfinite(arr) & (arr >= 2.0**52), float(cap), arr)
    return np.minimum(check_counts(arr, k, name="counts"), np.int64(cap))
