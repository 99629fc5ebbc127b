"""Grams diagonalised by nested block averages: identity, uniform hierarchies and Haar.

Let E_s average a vector over aligned blocks of s cells (E_s = I_{n/s} ⊗ 11ᵀ/s). For block
sizes 1 = s₀ < s₁ < … < s_L with each dividing the next (and s_L dividing n) the operators
E_s commute, and Π_ℓ = E_{s_ℓ} − E_{s_{ℓ+1}} (Π_L = E_{s_L}) are orthogonal projectors that
sum to I. The gram of a uniform b-ary hierarchy, Σ_ℓ w_ℓ² s_ℓ E_{s_ℓ}, and of the
unnormalised Haar matrix (Xiao, Wang, Gehrke, ICDE 2010), Σ_ℓ s_{ℓ+1} Π_ℓ + n E_n, are
both Σ_ℓ λ_ℓ Π_ℓ. Their pseudo-inverses are Σ_ℓ λ_ℓ⁺ Π_ℓ, and
trace(G Π_ℓ) needs only the block energies Σ_B ‖W 1_B‖² of the workload.
"""

from __future__ import annotations

import numpy as np

from matmech.linalg.linop import LinOp, check_size

__all__ = ["BlockSpectral"]


class BlockSpectral(LinOp):
    """The symmetric operator Σ_ℓ λ_ℓ Π_ℓ over nested aligned block partitions."""

    def __init__(self, n, sizes, eigenvalues):
        n = check_size(n)
        sizes = [int(s) for s in sizes]
        lam = np.asarray(eigenvalues, dtype=np.float64)
        if not sizes or sizes[0] != 1 or lam.shape != (len(sizes),):
            raise ValueError(f"need block sizes starting at 1 and one eigenvalue per size, got sizes={sizes}, eigenvalues={lam.tolist()}")
        for a, b in zip(sizes, sizes[1:] + [n]):
            if b % a or (b == a and b != n):
                raise ValueError(f"block sizes must increase, each dividing the next and n={n}; got {sizes}")
        if not np.all(np.isfinite(lam)) or np.any(lam < 0):
            raise ValueError(f"eigenvalues must be finite and non-negative, got {lam.tolist()}")
        self.n, self.sizes, self.eigenvalues = n, tuple(sizes), lam
        self.shape = (n, n)

    def _averages(self, x):
        """E_s x for every block size s."""
        k = x.shape[1]
        return [np.repeat(x.reshape(self.n // s, s, k).mean(1), s, axis=0) for s in self.sizes]

    def _matmat(self, x):
        avg = self._averages(x) + [0.0]
        return sum(lam * (avg[i] - avg[i + 1]) for i, lam in enumerate(self.eigenvalues))

    _rmatmat = _matmat

    def _with(self, eigenvalues):
        return BlockSpectral(self.n, self.sizes, eigenvalues)

    def pinv(self, rtol=1e-10):
        lam = self.eigenvalues
        keep = lam > rtol * lam.max()
        return self._with(np.where(keep, 1.0 / np.where(keep, lam, 1.0), 0.0))

    def null_projector(self, rtol=1e-10):
        """The projector onto the null space (eigenvalue 0), or None when full rank."""
        lam = self.eigenvalues
        null = lam <= rtol * lam.max()
        return self._with(null.astype(np.float64)) if null.any() else None

    def level_weights(self):
        """Coefficients c with Σ_ℓ λ_ℓ Π_ℓ = Σ_ℓ c_ℓ E_{s_ℓ}."""
        return np.diff(self.eigenvalues, prepend=0.0)

    def diagonal(self):
        return np.full(self.n, float((self.level_weights() / np.asarray(self.sizes)).sum()))

    def _dense(self):
        return self._matmat(np.eye(self.n))

    def trace_against(self, block_energy):
        """trace(G · self) from a function s ↦ Σ_B ‖W 1_B‖² over blocks of size s."""
        return float(sum(c * block_energy(s) / s for c, s in zip(self.level_weights(), self.sizes)))

