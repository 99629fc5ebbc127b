"""The operator contract: :class:`LinOp`, its algebra and explicit matrices.

Every workload W and strategy A in matmech is a :class:`LinOp`: it knows its ``shape``,
applies itself to vectors and blocks (``A @ x``, ``A.T @ y``), and returns its ``gram``
(AᵀA) and ``col_norms`` using its structure wherever it has one, so that a workload with
millions of rows is never materialised. ``dense()`` builds the explicit matrix for small
operators only (it refuses beyond ``max_entries``). Here: the contract, its algebra
(scalings, transposes, products, row subsets) and explicit matrices; Kronecker products
and stacks are in :mod:`matmech.linalg.combinators`.

The contract follows the operator classes of HDMM/ektelo (McKenna et al., "Optimizing
error of high-dimensional statistical queries under differential privacy", PVLDB 2018, §3)
and ``scipy.sparse.linalg.LinearOperator``: any LinOp can be passed to
``scipy.sparse.linalg.aslinearoperator``.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import scipy.sparse as sp

from matmech.linalg.normmax import SensitivityResult, check_p as _check_p
from matmech.linalg.storage import register
from matmech import validate
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # names used only in annotations
    import numpy.typing as npt


#: Largest number of entries ``dense()`` builds by default (8·10⁷ doubles = 640 MB).
DEFAULT_MAX_ENTRIES = 80_000_000

#: Largest number of entries of an operator without a structured rounding that
#: :meth:`LinOp.rounded_matrix` materialises (row block by row block) to round it to a grid.
MAX_DENSE_ROUNDING = 50_000_000

#: Domains above this many cells take the sensitivity of Kronecker products and stacks of
#: them from the factors (:func:`factored_sensitivity`); up to it the column-norm vector is built.
FACTORED_SENSITIVITY_N = 1 << 22


def is_int(c):
    return float(c) == math.floor(float(c))


def rint(m, g):
    return g * np.rint(m / g)


def _finite(array, what):
    if not np.all(np.isfinite(array)):
        bad = np.argwhere(~np.isfinite(np.asarray(array)))[0]
        raise ValueError(
            f"{what} must be finite; found {np.asarray(array)[tuple(bad)]} at index {tuple(int(i) for i in bad)}"
        )


class LinOp:
    """An m×n matrix known through its action.

    Subclasses implement ``_matmat`` (n×k → m×k) and ``_rmatmat`` (m×k → n×k); they
    override ``gram``, ``col_norms``, ``_dense`` and ``rows`` where their structure gives
    something cheaper than the generic fallbacks below.

    Structure hooks (the defaults mean "no such structure"; the analysis modules call
    these instead of testing types): :meth:`gram_pinv`, :meth:`gram_eigenvalues`,
    :meth:`integer_valued`, :meth:`entry_range`, :meth:`explicit_matrix`,
    :meth:`rounded_matrix`, :meth:`row_blocks`, :meth:`linear_terms`; and
    :meth:`to_dict`/:meth:`from_dict` with :func:`register` for strategy files.

    Parameters
    ----------
    None
        ``LinOp`` is abstract: build operators with :mod:`matmech.workloads`,
        :mod:`matmech.strategies` or :func:`as_linop`. A subclass sets ``shape`` (m, n).

    Returns
    -------
    LinOp
        An m×n operator: ``A @ x``, ``A.T @ y``, ``A.gram()``, ``A.col_norms(p)``,
        ``A.sensitivity(p)`` and ``A.dense()`` (refused beyond 8·10⁷ entries).

    Raises
    ------
    ValueError
        ``A.dense()`` on an operator too large to materialise, or a product of operators
        whose shapes do not match.

    Examples
    --------
    >>> from matmech import workloads as W
    >>> A = W.prefix(4)
    >>> A.shape, A.sensitivity(1)
    ((4, 4), 4.0)
    >>> (A @ np.ones(4)).tolist()
    [1.0, 2.0, 3.0, 4.0]
    """

    #: The type name of a strategy file (set by :func:`register`; None: not storable).
    store_name = None

    shape: tuple[int, int]
    dtype = np.dtype(np.float64)
    __array_ufunc__ = None  # let ``ndarray @ LinOp`` reach __rmatmul__

    # -- application -------------------------------------------------------------------
    def _matmat(self, x: np.ndarray) -> np.ndarray:
        """A @ x for an n×k block x (every subclass implements it)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement _matmat")

    def _rmatmat(self, y: np.ndarray) -> np.ndarray:
        """Aᵀ @ y for an m×k block y (every subclass implements it)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement _rmatmat")

    def _apply(self, x, fn, inner, outer, side):
        x = np.asarray(x, dtype=np.float64)
        if x.ndim not in (1, 2) or x.shape[0] != inner:
            raise ValueError(
                f"shape mismatch: {type(self).__name__} of shape {self.shape} "
                f"cannot apply {side} an array of shape {x.shape} (expected first dimension {inner})"
            )
        out = fn(x.reshape(inner, -1))
        return out.reshape(outer) if x.ndim == 1 else out

    def matvec(self, x):
        """A @ x for a vector (or block) x."""
        return self._apply(x, self._matmat, self.shape[1], self.shape[0], "to")

    def rmatvec(self, y):
        """Aᵀ @ y."""
        return self._apply(y, self._rmatmat, self.shape[0], self.shape[1], "transposed to")

    matmat = matvec
    rmatmat = rmatvec

    def __matmul__(self, other):
        if isinstance(other, LinOp):
            return _Product(self, other)
        return self.matvec(other)

    def __rmatmul__(self, other):
        # y @ A == (Aᵀ yᵀ)ᵀ
        other = np.asarray(other, dtype=np.float64)
        return self.rmatvec(other.T).T

    def __mul__(self, c):
        if not isinstance(c, numbers.Real):
            return NotImplemented
        return Scaled(self, c)

    __rmul__ = __mul__

    @property
    def T(self):
        return _Transpose(self)

    # -- structure -------------------------------------------------------------------
    def gram(self):
        """AᵀA as a LinOp (structured where the operator has structure)."""
        return _Product(self.T, self)

    def col_norms(self, p=1):
        """Vector of the column p-norms (p = 1 or 2); generic path builds column blocks."""
        _check_p(p)
        n = self.shape[1]
        out = np.empty(n)
        step = max(1, min(n, 2_000_000 // max(1, self.shape[0])))
        for start in range(0, n, step):
            stop = min(n, start + step)
            block = np.zeros((n, stop - start))
            block[np.arange(start, stop), np.arange(stop - start)] = 1.0
            cols = self.matmat(block)
            out[start:stop] = np.abs(cols).sum(0) if p == 1 else np.sqrt((cols**2).sum(0))
        return out

    def sensitivity(self, p=1):
        """Largest column p-norm: the L_p sensitivity under add/remove neighbours.

        Kronecker products, scalings and weighted stacks of them over more than
        :data:`FACTORED_SENSITIVITY_N` cells take it from their factors
        (:func:`factored_sensitivity`); in the rare case the exact search exceeds its node cap
        that is a certified upper bound, which :meth:`sensitivity_details` reports.
        """
        return float(self.sensitivity_details(p).value)

    def sensitivity_details(self, p=1):
        """:class:`SensitivityResult` (value, exact, method) of :meth:`sensitivity`."""
        return SensitivityResult(float(self.col_norms(p).max()), True, "dense")

    def rows(self, start, stop):
        """Dense block of rows ``start:stop`` (the generic path applies Aᵀ to unit vectors)."""
        m = self.shape[0]
        if not (0 <= start <= stop <= m):
            raise ValueError(f"row range {start}:{stop} is outside 0:{m}")
        eye = np.zeros((m, stop - start))
        eye[np.arange(start, stop), np.arange(stop - start)] = 1.0
        return self.rmatmat(eye).T

    def dense(self, *, max_entries=DEFAULT_MAX_ENTRIES):
        """The explicit matrix; refuses when it would have more than ``max_entries`` entries."""
        m, n = self.shape
        if m * n > max_entries:
            raise ValueError(
                f"refusing to build a dense {m}×{n} matrix ({m * n:,} entries > max_entries={max_entries:,}); "
                "use the operator's structured methods (gram, col_norms, @) instead"
            )
        return self._dense()

    def _dense(self):
        return self.matmat(np.eye(self.shape[1]))

    # -- structure hooks -------------------------------------------------------------------
    def gram_pinv(self):
        """(M, N) with M = (AᵀA)⁺ as a structured LinOp and N the null-space projector (None
        when A has full column rank), or None when A knows no structured inverse (then
        :func:`matmech.linalg.structured.pinv_gram` uses the gram's closed form or a dense
        eigendecomposition)."""
        return None

    def gram_eigenvalues(self):
        """The n eigenvalues of AᵀA in closed form, or None when there is none."""
        return None

    def integer_valued(self):
        """True when every entry is an integer, so A x is exact on the integer lattice
        (:mod:`matmech.privacy.measure`); False when not, or not known cheaply."""
        return False

    def entry_range(self):
        """(min, max) over the entries of A and 0 (row sensitivities of private selection,
        :mod:`matmech.svt.select`); the default scans blocks of rows."""
        lo, hi = 0.0, 0.0
        step = max(1, 4_000_000 // self.shape[1])
        for start in range(0, self.shape[0], step):
            r = self.rows(start, min(self.shape[0], start + step))
            lo, hi = min(lo, float(r.min())), max(hi, float(r.max()))
        return lo, hi

    def explicit_matrix(self):
        """A as an ndarray or CSR matrix when that is cheap and exact, else None."""
        return None

    def rounded_matrix(self, g):
        """A's entries rounded to the nearest multiples of g, as an ndarray or CSR matrix
        (the grid of exact measurement, :mod:`matmech.privacy.measure`). The default rounds
        blocks of rows and refuses beyond :data:`MAX_DENSE_ROUNDING` entries."""
        m, n = self.shape
        if m * n > MAX_DENSE_ROUNDING:
            raise ValueError(
                f"cannot round this real-valued strategy ({m:,} rows x {n:,} cells) to the measurement grid without "
                f"materialising {m * n:,} entries (limit {MAX_DENSE_ROUNDING:,}); use a structured strategy (a "
                "Kronecker product of small factors), or strategy='auto' for a union of marginals (marginal tables)"
            )
        step = max(1, 4_000_000 // n)
        blocks = [sp.csr_matrix(rint(self.rows(i, min(m, i + step)), g)) for i in range(0, m, step)]
        return sp.vstack(blocks, format="csr")

    def take_rows(self, rows):
        """The operator made of the rows ``rows`` (in that order); the default is a
        :class:`RowSubset`, structured families keep their structure."""
        return RowSubset(self, rows)

    def row_blocks(self):
        """[(wᵢ, Bᵢ)] with A = [w₁B₁; …; w_kB_k] when A is a weighted stack (or a scaling,
        k = 1), else None: row-wise quadratic forms (error analysis) split over the blocks."""
        return None

    def linear_terms(self):
        """[(cᵢ, Tᵢ)] with A = Σ cᵢ Tᵢ when A is a scaling or a sum, else None: forms linear
        in A (traces, diagonals) split over the terms."""
        return None

    # -- strategy files (:mod:`matmech.io.store`) --------------------------------------------
    def to_dict(self, out):
        """The JSON description of this operator without its ``"type"``; ``out`` stores arrays
        (``out.array(a)``, ``out.sparse(m)`` return references) and children (``out.node(B)``)."""
        raise TypeError(f"cannot save an operator of type {type(self).__name__}")

    @classmethod
    def from_dict(cls, node, src):
        """Rebuild the operator from its description ``node``; ``src`` checks and reads fields
        (``src.field``, ``src.ints``, ``src.array``, ``src.sparse``, ``src.node``, ``src.children``)."""
        raise TypeError(f"cannot load an operator of type {cls.__name__}")

    def __repr__(self):
        return f"<{type(self).__name__} {self.shape[0]}×{self.shape[1]}>"


def as_linop(obj: LinOp | npt.ArrayLike) -> LinOp:
    """Coerce a LinOp, numpy array or scipy sparse matrix to a LinOp.

    Parameters
    ----------
    obj : LinOp, numpy.ndarray, nested list or scipy.sparse matrix
        The matrix. A LinOp is returned unchanged.

    Returns
    -------
    LinOp
        A dense or sparse operator with the same entries.

    Raises
    ------
    TypeError
        ``obj`` is none of the accepted kinds.
    ValueError
        A ragged nested list (naming the ragged row) or non-finite entries.

    Examples
    --------
    >>> A = as_linop(np.eye(3))
    >>> A.shape
    (3, 3)
    """
    if isinstance(obj, LinOp):
        return obj
    if sp.issparse(obj):
        return Sparse(obj)
    if isinstance(obj, (np.ndarray, list, tuple)):
        # a nested list: ragged rows and non-numbers named (validate.matrix); finiteness: Dense
        return Dense(validate.matrix(obj, "matrix", finite=False))
    raise TypeError(
        f"expected a LinOp, numpy array or scipy sparse matrix, got {type(obj).__name__}"
    )


@register("Dense")
class Dense(LinOp):
    """An explicit 2-D array."""

    def __init__(self, matrix):
        a = np.asarray(matrix, dtype=np.float64)
        if a.ndim != 2 or 0 in a.shape:
            raise ValueError(f"a matrix must be 2-D and non-empty, got shape {a.shape}")
        _finite(a, "matrix entries")
        self.matrix = a
        self.shape = a.shape

    def _matmat(self, x):
        return self.matrix @ x

    def _rmatmat(self, y):
        return self.matrix.T @ y

    def gram(self):
        return Dense(self.matrix.T @ self.matrix)

    def col_norms(self, p=1):
        _check_p(p)
        return np.abs(self.matrix).sum(0) if p == 1 else np.sqrt((self.matrix**2).sum(0))

    def rows(self, start, stop):
        return self.matrix[start:stop]

    def _dense(self):
        return self.matrix.copy()

    def integer_valued(self):
        return bool(np.all(self.matrix == np.rint(self.matrix)))

    def entry_range(self):
        return min(0.0, float(self.matrix.min())), max(0.0, float(self.matrix.max()))

    def explicit_matrix(self):
        return self.matrix

    def rounded_matrix(self, g):
        return rint(self.matrix, g)

    def to_dict(self, out):
        return {"matrix": out.array(self.matrix)}

    @classmethod
    def from_dict(cls, node, src):
        return cls(src.array(node, "matrix", "float", 2))


@register("Sparse")
class Sparse(LinOp):
    """A scipy sparse matrix (kept in CSR form)."""

    def __init__(self, matrix):
        a = sp.csr_matrix(matrix, dtype=np.float64)
        if 0 in a.shape:
            raise ValueError(f"a matrix must be non-empty, got shape {a.shape}")
        _finite(a.data, "matrix entries")
        self.matrix = a
        self.shape = a.shape

    def _matmat(self, x):
        return np.asarray(self.matrix @ x)

    def _rmatmat(self, y):
        return np.asarray(self.matrix.T @ y)

    def gram(self):
        return Sparse(self.matrix.T @ self.matrix)

    def col_norms(self, p=1):
        _check_p(p)
        a = abs(self.matrix) if p == 1 else self.matrix.multiply(self.matrix)
        out = np.asarray(a.sum(0)).ravel()
        return out if p == 1 else np.sqrt(out)

    def rows(self, start, stop):
        return self.matrix[start:stop].toarray()

    def _dense(self):
        return self.matrix.toarray()

    def integer_valued(self):
        data = self.matrix.data
        return bool(np.all(data == np.rint(data)))

    def entry_range(self):
        data = self.matrix.data
        return min(0.0, float(data.min())), max(0.0, float(data.max()))

    def explicit_matrix(self):
        return self.matrix

    def rounded_matrix(self, g):
        m = self.matrix.copy()
        m.data = rint(m.data, g)
        m.eliminate_zeros()
        return m

    def to_dict(self, out):
        return {"matrix": out.sparse(self.matrix)}

    @classmethod
    def from_dict(cls, node, src):
        return cls(src.sparse(node))


@register("Scaled")
class Scaled(LinOp):
    """c · A."""

    def __init__(self, base, c):
        c = validate.finite_real(c, "a scale factor")  # Fractions too (np.isfinite refuses them)
        self.base, self.c = as_linop(base), c
        self.shape = self.base.shape

    def _matmat(self, x):
        return self.c * self.base.matmat(x)

    def _rmatmat(self, y):
        return self.c * self.base.rmatmat(y)

    def gram(self):
        return Scaled(self.base.gram(), self.c**2)

    def col_norms(self, p=1):
        return abs(self.c) * self.base.col_norms(p)

    def sensitivity_details(self, p=1):
        r = self.base.sensitivity_details(p)
        return SensitivityResult(abs(self.c) * r.value, r.exact, r.method)

    def rows(self, start, stop):
        return self.c * self.base.rows(start, stop)

    def _dense(self):
        return self.c * self.base._dense()

    def gram_eigenvalues(self):
        lam = self.base.gram_eigenvalues()
        return None if lam is None else self.c**2 * lam

    def integer_valued(self):
        return is_int(self.c) and self.base.integer_valued()

    def entry_range(self):
        lo, hi = self.base.entry_range()
        return (self.c * lo, self.c * hi) if self.c >= 0 else (self.c * hi, self.c * lo)

    def explicit_matrix(self):
        base = self.base.explicit_matrix()
        return None if base is None else self.c * base

    def rounded_matrix(self, g):
        base = self.base.explicit_matrix()
        if base is None:
            return super().rounded_matrix(g)
        return as_linop(self.c * base).rounded_matrix(g)

    def row_blocks(self):
        return [(self.c, self.base)]

    def linear_terms(self):
        return [(self.c, self.base)]

    def to_dict(self, out):
        return {"c": float(self.c), "base": out.node(self.base)}

    @classmethod
    def from_dict(cls, node, src):
        return cls(src.node(src.field(node, "base", dict)), src.field(node, "c", (int, float)))


class _Transpose(LinOp):
    def __init__(self, base):
        self.base = base
        self.shape = base.shape[::-1]

    def _matmat(self, x):
        return self.base.rmatmat(x)

    def _rmatmat(self, y):
        return self.base.matmat(y)

    @property
    def T(self):
        return self.base

    def _dense(self):
        return self.base._dense().T


class _Product(LinOp):
    def __init__(self, left, right):
        if left.shape[1] != right.shape[0]:
            raise ValueError(f"shape mismatch: cannot multiply {left.shape} by {right.shape}")
        self.left, self.right = left, right
        self.shape = (left.shape[0], right.shape[1])

    def _matmat(self, x):
        return self.left.matmat(self.right.matmat(x))

    def _rmatmat(self, y):
        return self.right.rmatmat(self.left.rmatmat(y))


@register("RowSubset")
class RowSubset(LinOp):
    """The rows ``index`` of A (in the given order)."""

    def __init__(self, base, index):
        self.base = as_linop(base)
        idx = np.asarray(index)
        if idx.ndim != 1 or (idx.size and not np.issubdtype(idx.dtype, np.integer)):
            raise TypeError(
                f"row indices must be a 1-D integer array, got dtype {idx.dtype} and shape {idx.shape}"
            )
        m = self.base.shape[0]
        if idx.size == 0:
            raise ValueError("a row subset must keep at least one row")
        if idx.min() < 0 or idx.max() >= m:
            bad = idx[(idx < 0) | (idx >= m)][0]
            raise ValueError(f"row index {bad} is out of range for an operator with {m} rows")
        self.index = idx.astype(np.int64)
        self.shape = (idx.size, self.base.shape[1])

    def _matmat(self, x):
        return self.base.matmat(x)[self.index]

    def _rmatmat(self, y):
        full = np.zeros((self.base.shape[0], y.shape[1]))
        np.add.at(full, self.index, y)
        return self.base.rmatmat(full)

    def rows(self, start, stop):
        return (
            np.vstack([self.base.rows(i, i + 1) for i in self.index[start:stop]])
            if stop > start
            else np.zeros((0, self.shape[1]))
        )

    def integer_valued(self):
        return self.base.integer_valued()

    def entry_range(self):
        return self.base.entry_range()

    def to_dict(self, out):
        return {"index": out.array(self.index), "base": out.node(self.base)}

    @classmethod
    def from_dict(cls, node, src):
        return cls(src.node(src.field(node, "base", dict)), src.array(node, "index", "int", 1))
