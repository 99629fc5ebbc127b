"""The p-Identity strategy [I; Θ]·D and its error objective (McKenna et al., VLDB 2018, §5.1).

HDMM's p-Identity strategies A(Θ) = [I; Θ]·D with Θ ≥ 0 (p×n) and D = diag(1/(1 + 1ᵀΘ))
have every column of L1 norm exactly 1, so sens₁ = 1 and the error is (HDMM §5.1, eq. 6)

    f(Θ) = trace(G̃ (I + ΘᵀΘ)⁻¹),   G̃ = D⁻¹ G D⁻¹,   G = WᵀW,

evaluated by :func:`objective` with the Woodbury identity at O(p²n) cost. The optimiser is
:func:`matmech.optimizers.pure.fit_pidentity`; its starting points are in
:mod:`matmech.optimizers.pidentity_starts`.
"""

from __future__ import annotations

import numpy as np
from matmech.linalg.lazy import sla

from matmech.optimizers.blas import blas_threads
from matmech.linalg.linop import LinOp, register


# -- objective ---------------------------------------------------------------------------------


def objective(theta, gram, *, gradient=True):
    """f(Θ) = trace(G (AᵀA)⁻¹) for A = [I; Θ]D (sens₁ = 1), and ∂f/∂Θ.

    With s = 1 + 1ᵀΘ, G̃ = diag(s) G diag(s), R = I + ΘΘᵀ, Y = ΘG̃, B = R⁻¹Θ:
    f = Σ s_j² G_jj − ⟨Y, B⟩; ∂f/∂Θ|_s = −2 R⁻¹(Y − (YΘᵀ)B) (HDMM eq. 7 via Woodbury) and
    ∂f/∂s_j = 2(s_j G_jj − Σ_k Y_kj B_kj / s_j), which enters every entry of column j.
    """
    th = np.ascontiguousarray(theta, dtype=np.float64)
    return Objective(gram, th.shape[0])(th, gradient=gradient)


class Objective:
    """:func:`objective` with its p×n work arrays allocated once (fresh large arrays cost
    page faults that dominate the O(p²n) arithmetic at p ≈ n/16).

    Four p×p-by-p×n products per gradient: R = I + ΘΘᵀ, U = R⁻¹Y, C = YΘᵀ and MΘ with
    M = R⁻¹CR⁻¹, since R⁻¹(Y − C R⁻¹Θ) = U − MΘ and Σ_k Y_kj B_kj = Σ_k U_kj Θ_kj (R⁻¹ is
    symmetric); the p×p algebra is O(p³), negligible next to O(p²n).
    """

    def __init__(self, gram, p):
        self.gram, self.p = gram, p
        shape = (p, gram.n)
        self.z, self.y, self.u, self.w = (np.empty(shape) for _ in range(4))
        self.evaluations = 0

    def __call__(self, th, gradient=True):
        gram, z, y, u, w = self.gram, self.z, self.y, self.u, self.w
        self.evaluations += 1
        s = th.sum(0)
        s += 1.0
        np.multiply(th, s, out=z)
        gram.rows(z, out=y, work=w)
        y *= s  # Y = Θ G̃
        r = th @ th.T
        r.flat[:: r.shape[0] + 1] += 1.0  # the diagonal (a strided view: no index arrays)
        ri = spd_inverse(r)
        np.matmul(ri, y, out=u)
        np.multiply(u, th, out=w)
        ybs = w.sum(0)
        f = float(np.dot(s * s, gram.diag) - ybs.sum())
        if not gradient:
            return f
        m = ri @ (y @ th.T) @ ri
        g = np.matmul(m, th, out=z)
        g -= u
        g *= 2.0
        ybs /= s
        np.subtract(s * gram.diag, ybs, out=ybs)
        ybs *= 2.0
        g += ybs[None, :]
        return f, g


def spd_inverse(r, *, lower=1):
    """Inverse of a symmetric positive definite matrix through its Cholesky factor (half the
    work of LU); ``lower``: which triangle LAPACK fills (the other one is mirrored from it).

    Raises np.linalg.LinAlgError when r is not numerically positive definite."""
    c, info = sla.lapack.dpotrf(r, lower=lower)
    if info != 0:
        raise np.linalg.LinAlgError(f"the matrix is not positive definite (LAPACK info {info})")
    inv, info = sla.lapack.dpotri(c, lower=lower)
    if info != 0:
        raise np.linalg.LinAlgError(f"the matrix is singular (LAPACK dpotri info {info})")
    # mirror the filled triangle into the other (cached index arrays; tril + tril.T cost more
    # than the factorisation at the p ≤ 10 of small factor fits)
    key = (inv.shape[0], lower)
    other = _UNFILLED.get(key)
    if other is None:
        n = inv.shape[0]
        other = _UNFILLED.setdefault(
            key, np.triu_indices(n, 1) if lower else np.tril_indices(n, -1)
        )
    inv[other] = inv.T[other]
    return inv


_UNFILLED: dict = {}  # (p, lower) -> the unfilled strict triangle's indices, for spd_inverse


# -- the strategy --------------------------------------------------------------------------------


class _PIdentityPinv(LinOp):
    """(AᵀA)⁻¹ = D⁻¹(I − Θᵀ(I + ΘΘᵀ)⁻¹Θ)D⁻¹ for A = [I; Θ]D (Woodbury)."""

    # the products are thin (p ≈ n/16 rows): one BLAS thread is faster than several and,
    # on a shared machine, avoids OpenBLAS threads spinning against other processes (4× at
    # n = 1024 for expected_error on two busy cores)

    def __init__(self, theta, s):
        self.theta, self.s = theta, s
        with blas_threads(1):
            self.b = spd_inverse(theta @ theta.T + np.eye(theta.shape[0])) @ theta
        self.shape = (theta.shape[1], theta.shape[1])

    def _matmat(self, x):
        z = self.s[:, None] * x
        with blas_threads(1):
            z = z - self.theta.T @ (self.b @ z)
        return self.s[:, None] * z

    _rmatmat = _matmat

    def _dense(self):
        with blas_threads(1):
            out = -(self.theta.T @ self.b)
        out[np.diag_indices_from(out)] += 1.0
        return self.s[:, None] * out * self.s[None, :]


@register("PIdentity")
class PIdentity(LinOp):
    """The p-Identity strategy A = [I; Θ]·D (McKenna et al., VLDB 2018, §5.1).

    Rows 0..n−1 measure each cell with weight d_j = 1/(1 + Σ_i Θ_ij); rows n..n+p−1 are the
    rows of Θ·D. Every column has L1 norm 1. ``gram_pinv()`` is the Woodbury form, so
    :func:`matmech.expected_error` never inverts an n×n matrix from scratch.
    """

    def __init__(self, theta):
        th = np.array(theta, dtype=np.float64, copy=True)
        if th.ndim != 2 or 0 in th.shape:
            raise ValueError(f"Θ must be a non-empty p×n matrix, got shape {th.shape}")
        if not np.all(np.isfinite(th)) or np.any(th < 0):
            raise ValueError("Θ must be finite and non-negative")
        self.theta = th
        self.s = 1.0 + th.sum(0)
        self.d = 1.0 / self.s
        self.p, self.n = th.shape
        self.shape = (self.n + self.p, self.n)

    def _matmat(self, x):
        dx = self.d[:, None] * x
        return np.vstack([dx, self.theta @ dx])

    def _rmatmat(self, y):
        return self.d[:, None] * (y[: self.n] + self.theta.T @ y[self.n :])

    def col_norms(self, p=1):
        if p == 1:
            return self.d * (1.0 + self.theta.sum(0))
        if p == 2:
            return self.d * np.sqrt(1.0 + (self.theta**2).sum(0))
        raise ValueError(f"p must be 1 or 2, got {p!r}")

    def rows(self, start, stop):
        if not (0 <= start <= stop <= self.shape[0]):
            raise ValueError(f"row range {start}:{stop} is outside 0:{self.shape[0]}")
        top = np.eye(self.n)[start : min(stop, self.n)] * self.d[None, :]
        bottom = (
            self.theta[max(start, self.n) - self.n : max(stop, self.n) - self.n] * self.d[None, :]
        )
        return np.vstack([top, bottom])

    def _dense(self):
        return np.vstack([np.diag(self.d), self.theta * self.d[None, :]])

    def gram_pinv(self):
        return _PIdentityPinv(self.theta, self.s), None

    def to_dict(self, out):
        return {"theta": out.array(self.theta)}

    @classmethod
    def from_dict(cls, node, src):
        return cls(src.array(node, "theta", "float", 2))
