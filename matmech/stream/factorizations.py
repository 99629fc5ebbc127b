"""Factorizations prefix = B·C with C lower-triangular, for releasing running totals online.

Continual counting by matrix factorization (Denisov, McMahan, Rush, Smith, Thakurta,
NeurIPS 2022): measure y = C·x + z step by step (row t of C only reads x_0..x_t, so y_t is
drawn when x_t arrives) and release the running totals B·y = prefix·x + B·z. With unit
noise the variance of step t is ‖B_t‖² (row norm) and the sensitivity is the largest column
norm of C, so in σ² units at unit sensitivity

    mean error = Δ(C)² · (1/n) Σ_t ‖B_t‖²,    max error = Δ(C)² · max_t ‖B_t‖².

Builders (registry :data:`FACTORIZATIONS`, each ``build(n, *, objective)``):

* ``sqrt``: C = B = the Toeplitz series (1 − x)^(−1/2), c_k = binom(2k, k)/4^k (Fichtenberger,
  Henzinger, Upadhyay ICML 2023; Henzinger, Upadhyay, Upadhyay SODA 2023), closed form.
* ``blt``: a buffered linear Toeplitz C optimised for the objective (:mod:`matmech.stream.blt`).
* ``banded``: the square root truncated to its first b diagonals, b chosen for the objective
  (Kalinin & Lampert, NeurIPS 2024); c has positive decreasing coefficients, so c(x) has no
  root in the unit disc (Eneström–Kakeya) and C⁻¹ stays bounded.
* ``dense``: the certified mean-optimal strategy X = AᵀA of :func:`matmech.optimizers.l2.dual_l2`
  factored as X = CᵀC with C lower-triangular (a reversed Cholesky), n ≤ :data:`MAX_DENSE_N`.
* ``identity`` (C = I, B = prefix) and ``prefix`` (C = prefix, B = I): the two naive ends.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

from matmech.optimizers.l2 import dual_l2, tridiagonal_inverse
from matmech.stream.blt import blt_coefs, optimize_blt
from matmech.stream.series import prefix_coefs, toeplitz_dense
from matmech.validate import choice
from matmech.workloads import prefix

__all__ = [
    "FACTORIZATIONS",
    "MAX_DENSE_N",
    "MAX_N",
    "OBJECTIVES",
    "StreamFactorization",
    "build",
    "check_horizon",
    "square_root_coefs",
]

#: Objectives a factorization is chosen for.
OBJECTIVES = ("mean", "max")
#: Largest horizon for the dense optimum (two n×n float64 matrices: 270 MB at 4096).
MAX_DENSE_N = 4096
#: Largest horizon of a stream (Toeplitz factors are O(n) numbers).
MAX_N = 2**24


def check_horizon(n) -> int:
    """The horizon n as an int in [1, MAX_N], or a ValueError/TypeError naming it."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(
            f"horizon must be a positive integer (the number of steps), got {type(n).__name__}: {n!r}"
        )
    if not 1 <= int(n) <= MAX_N:
        raise ValueError(f"horizon must be in [1, {MAX_N}], got {n!r}")
    return int(n)


def _check_objective(objective: str) -> str:
    return choice(objective, "objective", OBJECTIVES)


@dataclass(frozen=True, eq=False)
class StreamFactorization:
    """prefix_n = B·C with C lower-triangular: Toeplitz (first column ``c``) or dense ``matrix``.

    ``params`` records how it was built (e.g. BLT decays and scales); ``objective`` what
    it was chosen for.
    """

    name: str
    n: int
    c: np.ndarray | None = None
    matrix: np.ndarray | None = None
    params: tuple = ()
    objective: str = "mean"

    def __post_init__(self):
        if (self.c is None) == (self.matrix is None):
            raise ValueError(
                "a StreamFactorization needs exactly one of c (Toeplitz) and matrix (dense)"
            )
        arr = self.c if self.c is not None else self.matrix
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"factorization {self.name!r} has non-finite entries")
        if self.c is not None and (self.c.shape != (self.n,) or self.c[0] == 0):
            raise ValueError(f"Toeplitz column must have length n={self.n} and c[0] != 0")
        if self.matrix is not None:
            m = self.matrix
            if m.shape != (self.n, self.n) or np.any(np.triu(m, 1)) or np.any(np.diag(m) == 0):
                raise ValueError(
                    f"C must be an invertible lower-triangular {self.n}×{self.n} matrix"
                )

    @property
    def toeplitz(self) -> bool:
        return self.c is not None

    def _col(self) -> np.ndarray:
        """c, for a Toeplitz factorization."""
        if self.c is None:
            raise ValueError(f"factorization {self.name!r} has no Toeplitz column")
        return self.c

    def _mat(self) -> np.ndarray:
        """The dense C, for a non-Toeplitz factorization."""
        if self.matrix is None:
            raise ValueError(f"factorization {self.name!r} has no dense matrix")
        return self.matrix

    @functools.cached_property
    def b(self) -> np.ndarray:
        """B = prefix·C⁻¹: its first column (Toeplitz) or the dense matrix."""
        if self.toeplitz:
            return prefix_coefs(self._col())
        inv = sla.solve_triangular(self._mat(), np.eye(self.n), lower=True)
        return np.cumsum(inv, axis=0)

    def c_row(self, t: int) -> np.ndarray:
        """C[t, 0..t]."""
        return self._col()[t::-1] if self.toeplitz else self._mat()[t, : t + 1]

    @functools.cached_property
    def _b_reversed(self) -> np.ndarray:
        return np.ascontiguousarray(self.b[::-1])

    def b_row(self, t: int) -> np.ndarray:
        """B[t, 0..t] (contiguous: a reversed Toeplitz view would make the product 10× slower)."""
        return self._b_reversed[self.n - 1 - t :] if self.toeplitz else self.b[t, : t + 1]

    def column_norms(self, p: int = 2) -> np.ndarray:
        """Lp norms of the columns of C (Toeplitz: of the prefixes of c, longest first)."""
        if self.toeplitz:
            a = np.abs(self._col()[::-1]) ** p
            return np.cumsum(a)[::-1] ** (1.0 / p)
        return np.linalg.norm(self._mat(), ord=p, axis=0)

    def sensitivity(self, p: int = 2) -> float:
        """Largest Lp column norm of C (one record changes one x_t by 1)."""
        return float(self.column_norms(p).max())

    def sup_norm(self) -> float:
        """Largest |C_tj|: y_t is at most sup_norm·Σx in magnitude."""
        return float(np.abs(self._col() if self.toeplitz else self._mat()).max())

    def step_variances(self) -> np.ndarray:
        """‖B_t‖² for every step t (unit noise)."""
        return np.cumsum(self.b**2) if self.toeplitz else np.einsum("ij,ij->i", self.b, self.b)

    def errors(self) -> tuple[float, float]:
        """(mean, max) variance in σ² units at unit sensitivity."""
        v = self.step_variances()
        s2 = self.sensitivity(2) ** 2
        return s2 * float(v.mean()), s2 * float(v.max())

    def memory_per_step(self) -> int:
        """Numbers of state kept between steps by the factorization's own recurrence: the
        buffers of a BLT, the band of a banded C, the whole history otherwise."""
        kind = dict(self.params).get("state")
        return int(kind) if kind is not None else self.n

    def rounded(self, grid: float) -> StreamFactorization:
        """C with every entry rounded to a multiple of ``grid`` (a power of two): what is measured."""

        def r(a):
            return np.rint(a / grid) * grid

        if self.toeplitz:
            return StreamFactorization(
                self.name, self.n, c=r(self._col()), params=self.params, objective=self.objective
            )
        return StreamFactorization(
            self.name, self.n, matrix=r(self._mat()), params=self.params, objective=self.objective
        )

    def dense(self) -> np.ndarray:
        """C as a dense matrix (tests, small n)."""
        return toeplitz_dense(self._col()) if self.toeplitz else self._mat()


def square_root_coefs(n: int) -> np.ndarray:
    """c_k = binom(2k, k)/4^k = Π_{j≤k} (2j − 1)/(2j): the series of (1 − x)^(−1/2)."""
    k = np.arange(1, n, dtype=np.float64)
    return np.concatenate([[1.0], np.cumprod((2.0 * k - 1.0) / (2.0 * k))])


def _sqrt(n: int, *, objective: str = "mean") -> StreamFactorization:
    return StreamFactorization("sqrt", n, c=square_root_coefs(n), objective=objective)


def _blt(n: int, *, objective: str = "mean", max_buffers: int = 5) -> StreamFactorization:
    theta, omega, _ = optimize_blt(n, objective=objective, max_buffers=max_buffers)
    params = (
        ("theta", tuple(map(float, theta))),
        ("omega", tuple(map(float, omega))),
        ("state", theta.size),
    )
    return StreamFactorization(
        "blt", n, c=blt_coefs(theta, omega, n), params=params, objective=objective
    )


def _banded(n: int, *, objective: str = "mean", bands: int | None = None) -> StreamFactorization:
    full = square_root_coefs(n)

    def make(b):
        c = full.copy()
        c[b:] = 0.0
        return StreamFactorization(
            "banded", n, c=c, params=(("bands", b), ("state", b)), objective=objective
        )

    if bands is not None:
        if isinstance(bands, bool) or not isinstance(bands, int) or not 1 <= bands <= n:
            raise ValueError(f"bands must be an integer in [1, n={n}], got {bands!r}")
        return make(bands)
    which = OBJECTIVES.index(objective)
    cands = sorted({min(n, 2**k) for k in range(int(math.log2(n)) + 1)} | {n})
    return min((make(b) for b in cands), key=lambda f: f.errors()[which])


def _dense(n: int, *, objective: str = "mean", tol: float = 1e-8) -> StreamFactorization:
    if n > MAX_DENSE_N:
        raise ValueError(
            f"the dense optimum needs O(n²) memory and O(n³) time; n={n} is above {MAX_DENSE_N}"
        )
    w = prefix(n)
    fit = dual_l2(w.gram().dense(), tol=tol, inverse=tridiagonal_inverse(w))
    a = fit.strategy.matrix
    x = a.T @ a
    # X = CᵀC with C lower-triangular: J X J = L Lᵀ (Cholesky), C = J Lᵀ J, J the reversal
    lo = np.linalg.cholesky(x[::-1, ::-1])
    c = np.ascontiguousarray(lo.T[::-1, ::-1])
    return StreamFactorization(
        "dense", n, matrix=np.tril(c), params=(("gap", fit.gap),), objective=objective
    )


def _identity(n: int, *, objective: str = "mean") -> StreamFactorization:
    c = np.zeros(n)
    c[0] = 1.0
    return StreamFactorization("identity", n, c=c, params=(("state", 1),), objective=objective)


def _prefix(n: int, *, objective: str = "mean") -> StreamFactorization:
    return StreamFactorization(
        "prefix", n, c=np.ones(n), params=(("state", 1),), objective=objective
    )


#: Factorization builders by name: ``build(n, *, objective, **options)``.
FACTORIZATIONS: dict[str, Callable[..., StreamFactorization]] = {
    "sqrt": _sqrt,
    "blt": _blt,
    "banded": _banded,
    "dense": _dense,
    "identity": _identity,
    "prefix": _prefix,
}


def build(name: str, n: int, *, objective: str = "mean", **options) -> StreamFactorization:
    """The factorization ``name`` for horizon n chosen for ``objective`` ("mean" or "max")."""
    n = check_horizon(n)
    _check_objective(objective)
    if not isinstance(name, str):
        raise TypeError(
            f"the factorization must be named by a string, one of {sorted(FACTORIZATIONS)}; "
            f"got {type(name).__name__}: {name!r}"
        )
    if name not in FACTORIZATIONS:
        raise ValueError(
            f"unknown factorization {name!r}; expected one of {sorted(FACTORIZATIONS)}"
        )
    return FACTORIZATIONS[name](n, objective=objective, **options)
