"""Lower bounds on the error of any factorization of the prefix workload, and the tree.

σ² units at unit sensitivity, for prefix_n = B·C:

* mean (Li & Miklau, ICDT 2013, the SVD bound): (1/n)·Σ_t ‖B_t‖²·Δ(C)² ≥ (Σ_k σ_k)² / n²,
  σ_k = 1 / (2 sin((2k − 1)π / (4n + 2))) the singular values of the n×n prefix matrix.
* max: max_t ‖B_t‖²·Δ(C)² ≥ γ₂(prefix)², and for unit vectors u, v
  γ₂(W) ≥ ‖diag(u)·W·diag(v)‖_* (trace norm; Lee, Shraibman, Špalek, CCC 2008, Thm. 9). Uniform
  weights give the square root of the mean bound; :func:`gamma2_bound` also tries
  u_i ∝ i^a, v_j ∝ (n + 1 − j)^a for a few a (by SVD, n ≤ 1024) and keeps the largest. γ₂
  of a submatrix is at most γ₂ of the matrix, so the value at 1024 bounds every n ≥ 1024.

The binary tree (Dwork, Naor, Pitassi, Rothblum STOC 2010; Chan, Shi, Song TISSEC 2011)
is not a square factorization; :func:`tree_errors` gives its exact variances with each
node replaced by its least-squares estimate from its own subtree (Honaker, TPDP 2015; the
bottom-up pass of Hay et al., VLDB 2010), which is the least-squares estimate of the
running total from every node complete at step t (those nodes are the subtrees of the
dyadic decomposition of [1, t], independent of each other).
"""

from __future__ import annotations

import functools
import math

import numpy as np


_GAMMA2_N = 1024
_EXPONENTS = (0.0, 0.1, 0.2)


def prefix_singular_values(n: int) -> np.ndarray:
    """Singular values of the n×n prefix matrix, closed form."""
    k = np.arange(1, n + 1, dtype=np.float64)
    return 1.0 / (2.0 * np.sin((2.0 * k - 1.0) * math.pi / (4.0 * n + 2.0)))


def svd_bound(n: int) -> float:
    """(Σσ_k)²/n²: no factorization has a smaller mean variance (σ² units, unit sensitivity)."""
    return float(prefix_singular_values(n).sum()) ** 2 / n**2


@functools.lru_cache(maxsize=64)
def _weighted_trace_norm(n: int, a: float) -> float:
    i = np.arange(1, n + 1, dtype=np.float64)
    u = i**a
    v = (n + 1 - i) ** a
    u, v = u / np.linalg.norm(u), v / np.linalg.norm(v)
    m = np.tril(np.ones((n, n))) * u[:, None] * v[None, :]
    return float(np.linalg.svd(m, compute_uv=False).sum())


def gamma2_bound(n: int) -> float:
    """A certified lower bound on γ₂(prefix_n)², hence on every factorization's max variance."""
    m = min(n, _GAMMA2_N)
    best = max(_weighted_trace_norm(m, a) for a in _EXPONENTS) ** 2
    return max(best, svd_bound(n))


def tree_errors(n: int, *, least_squares: bool = True) -> tuple[float, float, int]:
    """(mean, max, levels) of the binary tree mechanism over n steps, σ² units at unit
    sensitivity (Δ² = number of levels)."""
    levels = max(1, int(n).bit_length())  # node levels 0..levels−1 cover every t ≤ n
    v = np.ones(levels)
    if least_squares:
        for h in range(1, levels):
            v[h] = 1.0 / (1.0 + 1.0 / (2.0 * v[h - 1]))
    t = np.arange(1, n + 1, dtype=np.int64)
    var = np.zeros(n)
    for h in range(levels):
        var += ((t >> h) & 1) * v[h]
    return levels * float(var.mean()), levels * float(var.max()), levels
