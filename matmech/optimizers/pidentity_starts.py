"""Starting points of the p-Identity optimiser: hierarchies, hats and HDMM's fills.

Deterministic Θ starts for :func:`matmech.optimizers.pure.fit_pidentity` (McKenna et al.,
"Optimizing error of high-dimensional statistical queries under differential privacy",
PVLDB 2018, §5.1: the p-Identity family contains every hierarchy without its leaves'
weights, and HDMM starts OPT₀ from p = n/16 rows uniform on [0, 1)): :func:`tree_theta`,
:func:`hat_theta`, :func:`hdmm_theta` and :func:`quadratic_fill`.
"""

from __future__ import annotations

import numpy as np

from matmech.linalg.linop import check_size
from matmech.strategies import hierarchical


# -- starting points --------------------------------------------------------------------------


def tree_theta(n, branching, root, weights=None):
    """Θ whose rows are the internal nodes of the regular b-ary hierarchy (leaves = the I block).

    ``weights[ℓ]`` scales the nodes at depth ℓ below the top (default 1: then [I; Θ]D is
    exactly ``hierarchical(n, b, root)`` rescaled to sensitivity 1). Returns (Θ, depth).
    """
    tree = hierarchical(n, branching, root)
    lo, hi = tree.bounds()
    internal = np.flatnonzero(hi > lo)
    if internal.size == 0:
        return np.zeros((0, n)), np.zeros(0, dtype=int)
    depth = _depths(tree, internal)
    th = np.zeros((internal.size, n))
    cols = np.arange(n)
    mask = (cols[None, :] >= lo[internal, None]) & (cols[None, :] <= hi[internal, None])
    th[mask] = 1.0
    if weights is not None:
        th *= np.asarray(weights, dtype=np.float64)[depth][:, None]
    return th, depth


def hat_theta(n, branching, root=True, weights=None):
    """Θ of overlapping triangles ("hats") on the levels of a b-ary hierarchy. Returns (Θ, depth).

    Level k (block size b^k < n) has m = round(n / b^k) hats of half-width h = n/m centred
    at (i + ½)h, the row being max(0, 1 − |j + ½ − c|/h) on cell j; each hat overlaps half
    of each neighbour, so a level sums to 1 away from the ends. ``root`` adds the hat of
    half-width n over the whole domain (depth 0). The optimised p-Identity rows for interval
    workloads are such bumps rather than blocks, so this start begins much nearer the
    optimum than the hierarchy; for n = b^L the hats sit exactly on the hierarchy's nodes
    (same rows, same depths as :func:`tree_theta`), and for other n they stay evenly spread
    where the hierarchy's blocks would be uneven. ``weights[ℓ]`` scales depth ℓ.
    """
    n, b = check_size(n), check_size(branching, "branching")
    x = np.arange(n, dtype=np.float64) + 0.5
    counts, size = [], b
    while size < n:
        m = max(1, round(n / size))
        if m > 1 and m not in counts:
            counts.append(m)
        size *= b
    rows: list[np.ndarray] = []
    depths: list[np.ndarray] = []
    for k, m in enumerate(counts):  # finest first
        h = n / m
        c = (np.arange(m) + 0.5) * h
        rows.append(np.clip(1.0 - np.abs(x[None, :] - c[:, None]) / h, 0.0, None))
        depths.append(np.full(m, len(counts) - k, dtype=int))
    if root:
        rows.append(np.clip(1.0 - np.abs(x - n / 2.0) / n, 0.0, None)[None, :])
        depths.append(np.zeros(1, dtype=int))
    if not rows:
        return np.zeros((0, n)), np.zeros(0, dtype=int)
    th, depth = np.vstack(rows[::-1]), np.concatenate(depths[::-1])
    if not root:
        depth = depth - 1
    if weights is not None:
        th *= np.asarray(weights, dtype=np.float64)[depth][:, None]
    return th, depth


#: Additive-recurrence step of :func:`hdmm_theta` without an rng: (√5 − 1)/2, the golden
#: ratio's fractional part (the Weyl sequence frac(½ + kα) is equidistributed on [0, 1)).
WEYL_STEP = (np.sqrt(5.0) - 1.0) / 2.0


def hdmm_theta(n, p=None, rng=None):
    """HDMM's own OPT₀ starting point (McKenna et al. 2018, §5.1): p = max(1, n // 16) rows
    (or ``p``), Θ uniform on [0, 1). With an ``rng`` (a ``numpy.random.Generator``) Θ is
    ``rng.random((p, n))`` (one draw of p·n numbers, HDMM's ``np.random.rand`` under the
    caller's generator); without one it is the deterministic equidistributed fill
    Θ_ij = frac(½ + (i·n + j + 1)·α), α = (√5 − 1)/2, so that ``rng=None`` keeps meaning
    "deterministic starts only" (no seed, no global generator)."""
    n = check_size(n)
    p = max(1, n // 16) if p is None else check_size(p, "p")
    if rng is not None:
        return rng.random((p, n))
    k = np.arange(1, p * n + 1, dtype=np.float64)
    return np.mod(0.5 + k * WEYL_STEP, 1.0).reshape(p, n)


#: Up to this many cells a second deterministic HDMM-like start (:func:`quadratic_fill`) joins
#: HDMM's: at n = 128 (prefix) the linear fill of :func:`hdmm_theta` stalls at RMSE 11.36 within
#: a dozen iterations while seeded U[0, 1) starts reach 6.291; the quadratic fill reaches 6.291.
QUADRATIC_FILL_MAX_N = 512


def quadratic_fill(n, p=None, block=0):
    """A deterministic U[0, 1)-like p×n start (p = n/16 by default): Θ_ij = frac(½ + k²√2 + kα),
    k = block·p·n + i·n + j + 1, α = (√5 − 1)/2 (a quadratic Weyl sequence: equidistributed,
    without the row-to-row regularity of the linear fill). ``block`` = r ≥ 1 gives the r-th
    further p·n numbers of the same sequence (the :data:`QUAD_FILL_STARTS` multistart)."""
    n = check_size(n)
    p = max(1, n // 16) if p is None else check_size(p, "p")
    block = int(block)
    if block < 0:
        raise ValueError(f"block must be >= 0, got {block}")
    k = np.arange(block * p * n + 1, (block + 1) * p * n + 1, dtype=np.float64)
    return np.mod(0.5 + np.mod(k * k * np.sqrt(2.0), 1.0) + k * WEYL_STEP, 1.0).reshape(p, n)


def _depths(tree, rows):
    depth = np.zeros(tree.shape[0], dtype=int)
    for r in range(tree.shape[0]):
        par = tree.parent[r]
        depth[r] = 0 if par < 0 else depth[par] + 1
    return depth[rows] - depth[rows].min()
