"""Buffered linear Toeplitz (BLT) factorizations of the prefix workload and their optimiser.

A BLT with d buffers (Dvijotham, McMahan, Pillutla, Steinke, Thakurta, FOCS 2024, Def. 3.1)
is the lower-triangular Toeplitz C with c_0 = 1 and c_k = Σ_i ω_i θ_i^(k−1) (k ≥ 1): the
rational series C(x) = 1 + Σ_i ω_i x / (1 − θ_i x) = P(x)/Q(x), Q = Π_i (1 − θ_i x). Both C
and C⁻¹ = Q/P are applied online with d numbers of state, and B = prefix·C⁻¹ is the series
Q(x) / ((1 − x)·P(x)); their coefficients come from a linear recurrence (scipy's lfilter)
in O(n·d).

Errors (σ² units, unit noise, sensitivity ‖C e₁‖₂ — the first column is the longest):
mean = Δ²·(1/n)·Σ_k (n − k)·b_k², max = Δ²·Σ_k b_k² (the variance grows with t).
:func:`optimize_blt` minimises the log of either over θ ∈ (0, 1), ω > 0 by L-BFGS-B from
a few starts near the square root (a quadrature of its integral form), for
1..``max_buffers`` buffers, then polishes the best by Nelder–Mead.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["BLT_OBJECTIVES", "blt_coefs", "blt_errors", "blt_prefix_coefs", "optimize_blt"]

#: The objectives a BLT can be optimised for.
BLT_OBJECTIVES = ("mean", "max")


def _polys(theta: np.ndarray, omega: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P, Q) with C(x) = P(x)/Q(x), as coefficient arrays in increasing powers."""
    q = np.array([1.0])
    for th in theta:
        q = np.convolve(q, [1.0, -th])
    p = np.concatenate([q, [0.0]])
    for i, (th, om) in enumerate(zip(theta, omega)):
        rest = np.array([1.0])
        for j, other in enumerate(theta):
            if j != i:
                rest = np.convolve(rest, [1.0, -other])
        p[1:1 + rest.size] += om * rest
    return p[:q.size], q


def _impulse(num: np.ndarray, den: np.ndarray, n: int) -> np.ndarray:
    from scipy import signal  # lazy: a heavy import the release path does not need

    x = np.zeros(n)
    x[0] = 1.0
    return signal.lfilter(num, den, x)


def blt_coefs(theta, omega, n: int) -> np.ndarray:
    """First column of the BLT C (length n)."""
    p, q = _polys(np.asarray(theta, float), np.asarray(omega, float))
    return _impulse(p, q, n)


def blt_prefix_coefs(theta, omega, n: int) -> np.ndarray:
    """First column of B = prefix·C⁻¹ = Q / ((1 − x)·P) (length n)."""
    p, q = _polys(np.asarray(theta, float), np.asarray(omega, float))
    return _impulse(q, np.convolve(p, [1.0, -1.0]), n)


def blt_errors(theta, omega, n: int) -> tuple[float, float]:
    """(mean, max) variance of the BLT in σ² units at unit noise (see the module notes)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # a diverging C⁻¹ scores inf
        return _errors(np.asarray(theta, float), np.asarray(omega, float), n)


def _errors(theta: np.ndarray, omega: np.ndarray, n: int) -> tuple[float, float]:
    # Δ² = 1 + Σ_{k=1}^{n−1} (Σ_i ω_i θ_i^(k−1))², a finite geometric sum per pair (i, j)
    tt = np.outer(theta, theta)
    geo = np.where(np.abs(1.0 - tt) > 1e-12, -np.expm1((n - 1) * np.log(np.maximum(tt, 1e-300))) / (1.0 - tt), n - 1.0)
    sens2 = 1.0 + float(omega @ geo @ omega)
    b = blt_prefix_coefs(theta, omega, n)
    b2 = b * b
    if not np.all(np.isfinite(b2)):
        return math.inf, math.inf
    k = np.arange(n)
    return sens2 * float(((n - k) * b2).sum()) / n, sens2 * float(b2.sum())


def _unpack(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d = z.size // 2
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-z[:d])), np.exp(z[d:])


def _loss(z: np.ndarray, n: int, which: int) -> float:
    theta, omega = _unpack(z)
    v = blt_errors(theta, omega, n)[which]
    return math.log(v) if math.isfinite(v) and v > 0 else 1e3


def _starts(n: int, d: int) -> list[np.ndarray]:
    """Starts from a quadrature of (1 − x)^(−1/2) = (1/π)∫₀¹ s^(−1/2)(1 − s)^(−1/2) / (1 − (1 − s)x) ds
    on d geometric cells of s in [1/(4n), 1] (a BLT close to the square root), at two widths."""
    out = []
    for lo in (0.25 / n, 2.0 / n):
        edges = np.geomspace(lo, 1.0, d + 1)
        s = np.sqrt(edges[:-1] * edges[1:])
        w = np.sqrt(edges[1:]) - np.sqrt(edges[:-1])
        theta = np.clip(1.0 - s, 1e-6, 1 - 1e-12)
        omega = w * theta / w.sum()
        out.append(np.concatenate([np.log(theta / (1 - theta)), np.log(omega)]))
    return out


def optimize_blt(n: int, *, objective: str = "mean", max_buffers: int = 5,
                 maxiter: int = 300, polish: int = 1500) -> tuple[np.ndarray, np.ndarray, float]:
    """(θ, ω, error) of the best BLT found for horizon n and ``objective`` ("mean"/"max"),
    over 1..``max_buffers`` buffers, each warm-started from the best with one fewer, the
    best then polished by Nelder–Mead (at most ``polish`` evaluations)."""
    if objective not in BLT_OBJECTIVES:
        raise ValueError(f"objective must be one of {BLT_OBJECTIVES}, got {objective!r}")
    if not isinstance(max_buffers, int) or not 1 <= max_buffers <= 12:
        raise ValueError(f"max_buffers must be an integer in [1, 12], got {max_buffers!r}")
    from scipy import optimize

    which = BLT_OBJECTIVES.index(objective)
    best_z, best = None, math.inf
    for d in range(1, max_buffers + 1):
        starts = _starts(n, d)
        if best_z is not None:  # warm start: the previous optimum plus a slow, tiny buffer
            th, om = _unpack(best_z)
            th = np.append(th, 1.0 - 1.0 / (4.0 * n))
            om = np.append(om, 1e-3 * om.min())
            starts.append(np.concatenate([np.log(th / (1 - th)), np.log(om)]))
        for z0 in starts:
            res = optimize.minimize(_loss, z0, args=(n, which), method="L-BFGS-B",
                                    options={"maxiter": maxiter})
            if res.fun < best:
                best, best_z = float(res.fun), res.x
    if best_z is not None:  # L-BFGS-B on finite differences stalls on the flat max objective: polish
        res = optimize.minimize(_loss, best_z, args=(n, which), method="Nelder-Mead",
                                options={"maxfev": polish, "xatol": 1e-7, "fatol": 1e-12})
        if res.fun < best:
            best, best_z = float(res.fun), res.x
    if best_z is None:
        raise ValueError(f"no BLT with a bounded inverse was found for n={n}")
    theta, omega = _unpack(best_z)
    order = np.argsort(-theta)
    return theta[order], omega[order], math.exp(best)
