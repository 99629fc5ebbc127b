"""Buffered linear Toeplitz (BLT) factorizations of the prefix workload and their optimiser.

A BLT with d buffers (Dvijotham, McMahan, Pillutla, Steinke, Thakurta, FOCS 2024, Def. 3.1)
is the lower-triangular Toeplitz C with c_0 = 1 and c_k = Σ_i ω_i θ_i^(k−1) (k ≥ 1): the
rational series C(x) = 1 + Σ_i ω_i x / (1 − θ_i x) = P(x)/Q(x), Q = Π_i (1 − θ_i x). Both C
and C⁻¹ are BLTs, applied online with d numbers of state; C⁻¹'s decays and scales come from
a d×d eigenproblem (:func:`_inverse`), and the coefficients of C and of B = prefix·C⁻¹
(partial sums of C⁻¹'s) are sums of d geometric sequences, O(n·d).

Errors (σ² units, unit noise, sensitivity ‖C e₁‖₂ — the first column is the longest;
closed-form geometric sums, O(d²) per evaluation at any n, :func:`blt_errors`):
mean = Δ²·(1/n)·Σ_k (n − k)·b_k², max = Δ²·Σ_k b_k² (the variance grows with t).
:func:`optimize_blt` minimises the log of either over θ ∈ (0, 1), ω > 0 by L-BFGS-B from
a few starts near the square root (a quadrature of its integral form), for
1..``max_buffers`` buffers, then polishes the best by Nelder–Mead.
"""

from __future__ import annotations

import math

import numpy as np


#: The objectives a BLT can be optimised for.
BLT_OBJECTIVES = ("mean", "max")


def _inverse(theta: np.ndarray, omega: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(θ̂, ω̂) of C⁻¹, itself a BLT (Dvijotham et al. 2024, Lemma 5.2). In y = 1/x,
    C = 1 + Σ_i ω_i/(y − θ_i): its zeros θ̂ are the eigenvalues of diag(θ) − 1·ωᵀ (a
    rank-one update; no polynomial is expanded, so decays near 1 stay accurate), and the
    residue of 1/C there is ω̂_j = −1 / Σ_i ω_i/(θ̂_j − θ_i)²."""
    if not (np.all(np.isfinite(theta)) and np.all(np.isfinite(omega))):
        return np.full(theta.shape, np.nan), np.full(theta.shape, np.nan)
    th_hat = np.linalg.eigvals(np.diag(theta) - np.outer(np.ones_like(theta), omega))
    th_hat = np.real_if_close(th_hat, tol=1e6)
    if np.iscomplexobj(th_hat):
        return th_hat, np.full(theta.shape, np.nan)
    om_hat = -1.0 / (omega[None, :] / (th_hat[:, None] - theta[None, :]) ** 2).sum(axis=1)
    return th_hat, om_hat


def _series(theta: np.ndarray, omega: np.ndarray, n: int) -> np.ndarray:
    """1, Σ_i ω_i θ_i^(k−1) for k = 1..n−1: the first column of a BLT."""
    k = np.arange(n - 1, dtype=np.float64)
    out = np.empty(n)
    out[0] = 1.0
    out[1:] = np.power(theta[None, :], k[:, None]) @ omega if n > 1 else out[1:]
    return out


def blt_coefs(theta, omega, n: int) -> np.ndarray:
    """First column of the BLT C (length n)."""
    return _series(np.asarray(theta, float), np.asarray(omega, float), n)


def blt_prefix_coefs(theta, omega, n: int) -> np.ndarray:
    """First column of B = prefix·C⁻¹: the partial sums of C⁻¹'s column (length n)."""
    th_hat, om_hat = _inverse(np.asarray(theta, float), np.asarray(omega, float))
    return np.cumsum(_series(th_hat, om_hat, n))


def _geo(r: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """G = Σ_{k<n} r^k and H = Σ_{k<n} (n − k) r^k, accurate for r near 1 (H = (n − r·G)/(1 − r))."""
    r = np.asarray(r, dtype=np.float64)
    d = 1.0 - r
    with np.errstate(divide="ignore", invalid="ignore"):
        rn = np.where(r > 0, np.exp(n * np.log(np.where(r > 0, r, 1.0))), np.power(r, n))
        pos = r > 0
        g = np.where(pos, -np.expm1(n * np.log(np.where(pos, r, 1.0))), 1.0 - rn) / d
        h = (n - r * g) / d
    small = np.abs(n * d) < 1e-4  # Taylor in d: G ≈ n − d·n(n−1)/2, H ≈ n(n+1)/2 − d·(n−1)n(n+1)/6
    g = np.where(small, n - d * n * (n - 1) / 2.0, g)
    h = np.where(small, n * (n + 1) / 2.0 - d * (n - 1) * n * (n + 1) / 6.0, h)
    return g, h


def blt_errors(theta, omega, n: int) -> tuple[float, float]:
    """(mean, max) variance of the BLT in σ² units at unit noise (see the module notes), in
    O(d²) whatever n: b_k = A + Σ_j β_j θ̂_j^k with A = 1/C(1), β_j = −ω̂_j/(1 − θ̂_j), so
    Σ b_k² and Σ (n − k)·b_k² are finite geometric sums."""
    with np.errstate(
        over="ignore", invalid="ignore", divide="ignore"
    ):  # a diverging C⁻¹ scores inf
        return _errors(np.asarray(theta, float), np.asarray(omega, float), n)


def _errors(theta: np.ndarray, omega: np.ndarray, n: int) -> tuple[float, float]:
    if not (np.all(np.isfinite(theta)) and np.all(np.isfinite(omega))):
        return math.inf, math.inf
    g, _ = _geo(np.outer(theta, theta), n - 1)
    sens2 = 1.0 + float(omega @ g @ omega)  # Δ² = 1 + Σ_{k=1}^{n−1} (Σ_i ω_i θ_i^(k−1))²
    th_hat, om_hat = _inverse(theta, omega)
    if not (np.all(np.isfinite(om_hat)) and np.all(np.abs(th_hat) < 1.0)):
        return math.inf, math.inf
    beta = -om_hat / (1.0 - th_hat)
    big_a = 1.0 - beta.sum()
    g1, h1 = _geo(th_hat, n)
    g2, h2 = _geo(np.outer(th_hat, th_hat), n)
    total = n * big_a**2 + 2.0 * big_a * float(beta @ g1) + float(beta @ g2 @ beta)
    weighted = (
        big_a**2 * n * (n + 1) / 2.0 + 2.0 * big_a * float(beta @ h1) + float(beta @ h2 @ beta)
    )
    if not (total > 0 and weighted > 0 and math.isfinite(total) and math.isfinite(weighted)):
        return math.inf, math.inf
    return float(sens2 * weighted / n), float(sens2 * total)


def _unpack(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d = z.size // 2
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-z[:d])), np.exp(z[d:])


def _loss(z: np.ndarray, n: int, which: int) -> float:
    theta, omega = _unpack(z)
    v = blt_errors(theta, omega, n)[which]
    return math.log(v) if math.isfinite(v) and v > 0 else 1e3


def _starts(n: int, d: int) -> list[np.ndarray]:
    """Starts near the square root: (1 − x)^(−1/2) = (1/π)∫₀¹ s^(−1/2)(1 − s)^(−1/2) / (1 − (1 − s)x) ds,
    by the trapezoid rule in u = logit(s) (weights h·√(s(1 − s))/π; Stenger's sinc quadrature)
    on d nodes from s ≈ a/n to s ≈ 0.8, for two a; normalised so that c_0 = 1."""
    out = []
    for a in (0.5, 2.0):
        u = (
            np.linspace(math.log(a / n), math.log(4.0), d)
            if d > 1
            else np.array([math.log(1.0 / n) / 2])
        )
        sv = 1.0 / (1.0 + np.exp(-u))
        w = np.sqrt(sv * (1.0 - sv))
        theta = np.clip(1.0 - sv, 1e-9, 1 - 1e-12)
        omega = w * theta / w.sum()
        out.append(np.concatenate([np.log(theta / (1 - theta)), np.log(omega)]))
    return out


def optimize_blt(
    n: int, *, objective: str = "mean", max_buffers: int = 5, maxiter: int = 300, polish: int = 1500
) -> tuple[np.ndarray, np.ndarray, float]:
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
            res = optimize.minimize(
                _loss, z0, args=(n, which), method="L-BFGS-B", options={"maxiter": maxiter}
            )
            if res.fun < best:
                best, best_z = float(res.fun), res.x
    if (
        best_z is not None
    ):  # L-BFGS-B on finite differences stalls on the flat max objective: polish
        res = optimize.minimize(
            _loss,
            best_z,
            args=(n, which),
            method="Nelder-Mead",
            options={"maxfev": polish, "xatol": 1e-7, "fatol": 1e-12},
        )
        if res.fun < best:
            best, best_z = float(res.fun), res.x
    if best_z is None:
        raise ValueError(f"no BLT with a bounded inverse was found for n={n}")
    theta, omega = _unpack(best_z)
    order = np.argsort(-theta)
    return theta[order], omega[order], math.exp(best)
