"""Factorizations prefix = B·C with C lower-triangular, for releasing running totals online.

Continual counting by matrix factorization (Denisov, McMahan, Rush, Smith, Thakurta,
NeurIPS 2022): measure y = C·x + z step by step (row t of C only reads x_0..x_t, so y_t is
drawn when x_t arrives) and release the running totals B·y = prefix·x + B·z. With unit
noise the variance of step t is ‖B_t‖² (row norm) and the sensitivity is the largest column
Lp norm of C (p = 2 for Gaussian noise, p = 1 for Laplace noise under pure ε), so at unit
sensitivity (:meth:`StreamFactorization.errors`)

    mean error = Δ_p(C)² · (1/n) Σ_t ‖B_t‖²,    max error = Δ_p(C)² · max_t ‖B_t‖².

The noise variance is proportional to Δ_p² in both cases (Laplace: 2(Δ₁/ε)²; Gaussian:
σ² ∝ Δ₂²), so these figures rank factorizations exactly for the norm of the noise drawn. A
factorization good for one norm can be poor for the other: the square root has Δ₂ ≈ √(ln n)
but Δ₁ ≈ 2√(n/π).

Builders (registry :data:`FACTORIZATIONS`, each ``build(n, *, objective)``):

* ``sqrt``: C = B = the Toeplitz series (1 − x)^(−1/2), c_k = binom(2k, k)/4^k (Fichtenberger,
  Henzinger, Upadhyay ICML 2023; Henzinger, Upadhyay, Upadhyay SODA 2023), closed form.
* ``blt``: a buffered linear Toeplitz C optimised for the objective (:mod:`matmech.stream.blt`).
* ``banded``: the square root truncated to its first b diagonals, b chosen for the objective
  (Kalinin & Lampert, NeurIPS 2024); c has positive decreasing coefficients, so c(x) has no
  root in the unit disc (Eneström–Kakeya) and C⁻¹ stays bounded.
* ``dense``: the certified mean-optimal strategy X = AᵀA of :func:`matmech.optimizers.l2.dual_l2`
  factored as X = CᵀC with C lower-triangular (a reversed Cholesky), n ≤ :data:`MAX_DENSE_N`.
* ``hierarchical``: the m-ary tree in square form (a Fenwick tree for m = 2; Dwork, Naor,
  Pitassi, Rothblum STOC 2010; Chan, Shi, Song TISSEC 2011; branching m as Qardaji, Yang, Li
  VLDB 2013): step t measures the sum of the largest m-adic block ending at t (length m^j,
  m^j | t), and the running total is the sum of the blocks of t's base-m digits, so
  ‖B_t‖² is t's base-m digit sum and C has 0/1 entries with at most one block per level in
  a column (Δ₁ = Δ₂² ≤ levels). m is chosen for the objective and the norm; integer C, so it
  is measured on g = 1. Kept as its window lengths (O(n), any n).
* ``identity`` (C = I, B = prefix) and ``prefix`` (C = prefix, B = I): the two naive ends.

Builders take ``norm`` (1 or 2, :data:`NORMS`): ``banded`` and ``hierarchical`` choose their
width for it; ``blt`` and ``dense`` are L2 optima whatever the norm.
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


#: Objectives a factorization is chosen for.
OBJECTIVES = ("mean", "max")
#: Column norms a sensitivity is measured in: 1 (Laplace noise, pure ε), 2 (Gaussian noise).
NORMS = (1, 2)
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


def check_norm(norm) -> int:
    """The sensitivity norm p as 1 or 2, or a ValueError naming it."""
    if isinstance(norm, bool) or norm not in NORMS:
        raise ValueError(f"norm must be 1 (Laplace noise) or 2 (Gaussian noise), got {norm!r}")
    return int(norm)


@dataclass(frozen=True, eq=False)
class StreamFactorization:
    """prefix_n = B·C with C lower-triangular: Toeplitz (first column ``c``), dense ``matrix``,
    or ``windows``: row t is ones over the last w_t steps (t − w_t < s ≤ t), O(n) numbers
    (the m-ary tree at any n).

    ``params`` records how it was built (e.g. BLT decays and scales); ``objective`` what
    it was chosen for.
    """

    name: str
    n: int
    c: np.ndarray | None = None
    matrix: np.ndarray | None = None
    params: tuple = ()
    objective: str = "mean"
    windows: np.ndarray | None = None

    def __post_init__(self):
        if sum(a is not None for a in (self.c, self.matrix, self.windows)) != 1:
            raise ValueError(
                "a StreamFactorization needs exactly one of c (Toeplitz), matrix (dense) and "
                "windows"
            )
        if self.windows is not None:
            w = self.windows
            t = np.arange(1, self.n + 1)
            if w.shape != (self.n,) or w.dtype.kind not in "iu" or np.any(w < 1) or np.any(w > t):
                raise ValueError(
                    f"windows must be n={self.n} integers with 1 <= w_t <= t + 1 (0-based t)"
                )
            return
        if any(a is not None and not np.all(np.isfinite(a)) for a in (self.c, self.matrix)):
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

    @property
    def form(self) -> str:
        """How C is kept: "toeplitz", "dense" or "windows"."""
        return (
            "toeplitz" if self.c is not None else "dense" if self.matrix is not None else "windows"
        )

    def integer_valued(self) -> bool:
        """Every entry of C an integer (then C is measured on the grid 1)."""
        if self.windows is not None:
            return True
        return bool(np.all(np.mod(self._col() if self.toeplitz else self._mat(), 1.0) == 0.0))

    @functools.cached_property
    def _window_parents(self) -> np.ndarray:
        """t − w_t (−1: none): the step whose running total B·y at t adds y_t to."""
        w = self.windows if self.windows is not None else np.ones(self.n, dtype=np.int64)
        return np.arange(self.n, dtype=np.int64) - w.astype(np.int64)

    def _window_chain(self, t: int) -> list[int]:
        """The steps whose y make up the running total at t: t, t − w_t, … (B_t's ones)."""
        par, out = self._window_parents, []
        while t >= 0:
            out.append(t)
            t = int(par[t])
        return out

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
        """B = prefix·C⁻¹: its first column (Toeplitz) or the dense matrix (windows: dense,
        for tests; the release uses :meth:`b_row`)."""
        if self.windows is not None:
            out = np.zeros((self.n, self.n))
            for t in range(self.n):
                out[t, self._window_chain(t)] = 1.0
            return out
        if self.toeplitz:
            return prefix_coefs(self._col())
        inv = sla.solve_triangular(self._mat(), np.eye(self.n), lower=True)
        return np.cumsum(inv, axis=0)

    def c_row(self, t: int) -> np.ndarray:
        """C[t, 0..t]."""
        if self.windows is not None:
            row = np.zeros(t + 1)
            row[t + 1 - int(self.windows[t]) :] = 1.0
            return row
        return self._col()[t::-1] if self.toeplitz else self._mat()[t, : t + 1]

    @functools.cached_property
    def _b_reversed(self) -> np.ndarray:
        return np.ascontiguousarray(self.b[::-1])

    def b_row(self, t: int) -> np.ndarray:
        """B[t, 0..t] (contiguous: a reversed Toeplitz view would make the product 10× slower)."""
        if self.windows is not None:
            row = np.zeros(t + 1)
            row[self._window_chain(t)] = 1.0
            return row
        return self._b_reversed[self.n - 1 - t :] if self.toeplitz else self.b[t, : t + 1]

    def column_norms(self, p: int = 2) -> np.ndarray:
        """Lp norms of the columns of C (Toeplitz: of the prefixes of c, longest first)."""
        if self.windows is not None:  # 0/1 entries: the number of windows covering column s
            t = np.arange(self.n, dtype=np.int64)
            starts = np.bincount(t + 1 - self.windows, minlength=self.n + 1)
            ends = np.bincount(t + 1, minlength=self.n + 1)
            return np.cumsum(starts - ends)[: self.n].astype(np.float64) ** (1.0 / p)
        if self.toeplitz:
            a = np.abs(self._col()[::-1]) ** p
            return np.cumsum(a)[::-1] ** (1.0 / p)
        return np.linalg.norm(self._mat(), ord=p, axis=0)

    def sensitivity(self, p: int = 2) -> float:
        """Largest Lp column norm of C (one record changes one x_t by 1)."""
        return float(self.column_norms(p).max())

    def sup_norm(self) -> float:
        """Largest |C_tj|: y_t is at most sup_norm·Σx in magnitude."""
        if self.windows is not None:
            return 1.0
        return float(np.abs(self._col() if self.toeplitz else self._mat()).max())

    def step_variances(self) -> np.ndarray:
        """‖B_t‖² for every step t (unit noise)."""
        if self.windows is not None:  # chain lengths: v_t = 1 + v_(t − w_t), in step order
            v = [0] * self.n
            for t, q in enumerate(self._window_parents.tolist()):
                v[t] = 1 + (v[q] if q >= 0 else 0)
            return np.array(v, dtype=np.float64)
        return np.cumsum(self.b**2) if self.toeplitz else np.einsum("ij,ij->i", self.b, self.b)

    def errors(self, p: int = 2) -> tuple[float, float]:
        """(mean, max) variance of a running total at unit noise times Δ_p(C)²: in σ² units
        at unit L2 sensitivity (p = 2), or in units of (Laplace scale at unit L1
        sensitivity)² (p = 1)."""
        v = self.step_variances()
        s2 = self.sensitivity(check_norm(p)) ** 2
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

        if self.windows is not None:
            if not float(1.0 / grid).is_integer():
                raise ValueError(f"a window factorization is measured on grid 1, not {grid}")
            return self
        if self.toeplitz:
            return StreamFactorization(
                self.name, self.n, c=r(self._col()), params=self.params, objective=self.objective
            )
        return StreamFactorization(
            self.name, self.n, matrix=r(self._mat()), params=self.params, objective=self.objective
        )

    def dense(self) -> np.ndarray:
        """C as a dense matrix (tests, small n)."""
        if self.windows is not None:
            return np.array([np.pad(self.c_row(t), (0, self.n - t - 1)) for t in range(self.n)])
        return toeplitz_dense(self._col()) if self.toeplitz else self._mat()


def square_root_coefs(n: int) -> np.ndarray:
    """c_k = binom(2k, k)/4^k = Π_{j≤k} (2j − 1)/(2j): the series of (1 − x)^(−1/2)."""
    k = np.arange(1, n, dtype=np.float64)
    return np.concatenate([[1.0], np.cumprod((2.0 * k - 1.0) / (2.0 * k))])


def _sqrt(n: int, *, objective: str = "mean", norm: int = 2) -> StreamFactorization:
    return StreamFactorization("sqrt", n, c=square_root_coefs(n), objective=objective)


def _blt(
    n: int, *, objective: str = "mean", norm: int = 2, max_buffers: int = 5
) -> StreamFactorization:
    theta, omega, _ = optimize_blt(n, objective=objective, max_buffers=max_buffers)
    params = (
        ("theta", tuple(map(float, theta))),
        ("omega", tuple(map(float, omega))),
        ("state", theta.size),
    )
    return StreamFactorization(
        "blt", n, c=blt_coefs(theta, omega, n), params=params, objective=objective
    )


def _banded(
    n: int, *, objective: str = "mean", norm: int = 2, bands: int | None = None
) -> StreamFactorization:
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
    return min((make(b) for b in cands), key=lambda f: f.errors(norm)[which])


def _dense(
    n: int, *, objective: str = "mean", norm: int = 2, tol: float = 1e-8
) -> StreamFactorization:
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


def _identity(n: int, *, objective: str = "mean", norm: int = 2) -> StreamFactorization:
    c = np.zeros(n)
    c[0] = 1.0
    return StreamFactorization("identity", n, c=c, params=(("state", 1),), objective=objective)


def _prefix(n: int, *, objective: str = "mean", norm: int = 2) -> StreamFactorization:
    return StreamFactorization(
        "prefix", n, c=np.ones(n), params=(("state", 1),), objective=objective
    )


def hierarchical_block_lengths(n: int, m: int) -> np.ndarray:
    """w_t for t = 1..n: the length of the largest m-adic block ending at t (the largest m^j
    dividing t), the row of C measured at step t − 1 (0-based)."""
    t = np.arange(1, n + 1, dtype=np.int64)
    w = np.ones(n, dtype=np.int64)
    p = m
    while p <= n:
        w[t % p == 0] = p
        p *= m
    return w


def hierarchical_branchings(n: int) -> list[int]:
    """The branchings m the tree is chosen among: every m ≤ n + 1 up to n = 1024 (m > n is
    the identity); above, 2..64 and m ± 3 around n^(1/L) for L = 2..6 (the optimum of an
    L-level tree: Δ ≈ L, digit sums ≈ L(m − 1)/2), and n + 1."""
    if n <= 1024:
        return list(range(2, n + 2))
    near = {round(n ** (1.0 / lv)) + d for lv in range(2, 7) for d in range(-3, 4)}
    return sorted({m for m in (*range(2, 65), *near, n + 1) if 2 <= m <= n + 1})


def hierarchical_score(n: int, m: int) -> tuple[int, float, float]:
    """(Δ₁ = Δ₂², mean ‖B_t‖², max ‖B_t‖²) of the m-ary tree over t = 1..n in O(levels), by
    counting digits: Δ₁ is the number of levels (column 1 lies in a measured block of every
    level j with m^j ≤ n); the digit sums of 0..n summed position by position (full cycles
    of m^(j+1), then the partial one); the largest digit sum of a t ≤ n is n's own or, for a
    non-zero digit d_i of n, the digits above i, d_i − 1, and m − 1 in every lower place."""
    levels, p = 0, 1
    while p <= n:
        levels, p = levels + 1, p * m
    total, p = 0, 1
    for _ in range(levels):
        cycle = p * m
        full, rem = divmod(n + 1, cycle)
        q, r = divmod(rem, p)
        total += full * p * m * (m - 1) // 2 + p * q * (q - 1) // 2 + r * q
        p = cycle
    digits, x = [], n
    while x:
        x, d = divmod(x, m)
        digits.append(d)
    best = sum(digits)
    above = 0
    for i in range(len(digits) - 1, -1, -1):
        if digits[i]:
            best = max(best, above + digits[i] - 1 + (m - 1) * i)
        above += digits[i]
    return levels, total / n, float(best)


def hierarchical_errors(n: int, m: int) -> tuple[np.ndarray, int]:
    """(‖B_t‖² for every step, Δ₁ = Δ₂²) of the m-ary tree, in O(n·levels) without C (the
    check of :func:`hierarchical_score`): ‖B_t‖²
    is t's base-m digit sum; column s lies in one block per level j (the one ending at
    e = ⌈s/m^j⌉·m^j), which is measured iff e ≤ n and m^(j+1) ∤ e."""
    t = np.arange(1, n + 1, dtype=np.int64)
    digits = np.zeros(n, dtype=np.int64)
    cover = np.zeros(n, dtype=np.int64)
    q, p = t.copy(), 1
    while p <= n:
        digits += q % m
        q //= m
        e = -(-t // p) * p
        cover += (e <= n) & (e % (p * m) != 0)
        p *= m
    return digits.astype(np.float64), int(cover.max())


def _hierarchical(
    n: int, *, objective: str = "mean", norm: int = 2, branching: int | None = None
) -> StreamFactorization:
    if branching is None:
        which = OBJECTIVES.index(objective)

        def score(m):
            cover, mean, mx = hierarchical_score(n, m)
            s2 = float(cover) ** (2 if norm == 1 else 1)  # Δ₁² or Δ₂² (0/1 entries)
            return s2 * (mean, mx)[which]

        branching = min(hierarchical_branchings(n), key=score)
    elif isinstance(branching, bool) or not isinstance(branching, int) or branching < 2:
        raise ValueError(f"branching must be an integer >= 2, got {branching!r}")
    w = hierarchical_block_lengths(n, branching)
    levels, p = 1, branching
    while p <= n:
        levels, p = levels + 1, p * branching
    params = (("branching", int(branching)), ("levels", levels))
    return StreamFactorization("hierarchical", n, windows=w, params=params, objective=objective)


#: Factorization builders by name: ``build(n, *, objective, norm, **options)``.
FACTORIZATIONS: dict[str, Callable[..., StreamFactorization]] = {
    "sqrt": _sqrt,
    "blt": _blt,
    "banded": _banded,
    "dense": _dense,
    "hierarchical": _hierarchical,
    "identity": _identity,
    "prefix": _prefix,
}


def build(
    name: str, n: int, *, objective: str = "mean", norm: int = 2, **options
) -> StreamFactorization:
    """The factorization ``name`` for horizon n chosen for ``objective`` ("mean" or "max")
    and the sensitivity ``norm`` (1: Laplace noise, 2: Gaussian noise)."""
    n = check_horizon(n)
    _check_objective(objective)
    norm = check_norm(norm)
    if not isinstance(name, str):
        raise TypeError(
            f"the factorization must be named by a string, one of {sorted(FACTORIZATIONS)}; "
            f"got {type(name).__name__}: {name!r}"
        )
    if name not in FACTORIZATIONS:
        raise ValueError(
            f"unknown factorization {name!r}; expected one of {sorted(FACTORIZATIONS)}"
        )
    return FACTORIZATIONS[name](n, objective=objective, norm=norm, **options)
