"""Residual bases of marginal lattices (Xiao, He, Toksoz, Ding, Zhang, Kifer, "An Optimal and
Scalable Matrix Mechanism for Noisy Marginals under Convex Loss Functions", NeurIPS 2023).

Per attribute i of size nᵢ, ℝ^{nᵢ} splits into the constant vector 1 and its orthogonal
complement (the "difference" subspace, dimension nᵢ − 1). A product of these per-attribute
pieces is a *residual*: for an attribute subset T,

    R_T = ⊗_{i ∈ T} Qᵢ ⊗ ⊗_{i ∉ T} 1ᵀ ,

Qᵢ an (nᵢ−1)×nᵢ matrix with orthonormal rows orthogonal to 1. Residuals of different T are
orthogonal, and the marginal on S (identity on S, total elsewhere) decomposes into the
residuals on every T ⊆ S (paper §4, "residual basis"):

    M_S = Σ_{T ⊆ S} (⊗_{i ∈ T} Qᵢᵀ ⊗ ⊗_{i ∈ S∖T} 1/nᵢ) R_T ,

because I = 11ᵀ/n + QᵀQ on each attribute. So measuring every residual once, with
independent isotropic noise of variance u_T per coordinate, answers every marginal of the
lattice in closed form, and each cell of marginal S has variance

    v_S = Σ_{T ⊆ S} u_T · Π_{i ∈ T}(1 − 1/nᵢ) · Π_{i ∈ S∖T} nᵢ⁻²            (1)

(the total over the Π_{i∈S} nᵢ cells is Σ_{T⊆S} u_T Π_{i∈T}(nᵢ−1) / Π_{i∈S∖T} nᵢ). Every
column of R_T has squared L2 norm p_T = Π_{i∈T}(1 − 1/nᵢ), so the stacked measurement with
noise u_T has the same squared L2 sensitivity Σ_T p_T / u_T on every cell of the domain:
nothing domain-sized is ever needed.

The SVD bound (Li & Miklau, ICDT 2013) for W = [√w_S M_S] is (Σᵢ σᵢ(W))²/N per unit of
noise; the gram WᵀW is diagonal on the residual classes with eigenvalue
λ_T = Σ_{S ⊇ T} w_S Π_{i∉S} nᵢ and multiplicity m_T = Π_{i∈T}(nᵢ−1), so the bound is
(Σ_T m_T √(λ_T/N))², with λ_T/N = Σ_{S⊇T} w_S / Π_{i∈S} nᵢ (no domain-sized number).

Pure ε: a stack of scaled products [θ_T ⊗_{i∈T} Bᵢ ⊗ ⊗_{i∉T} 1ᵀ] has column L1 norms
Σ_T θ_T Π_{i∈T} ‖Bᵢ e_{cᵢ}‖₁ (‖1ᵀe‖₁ = 1), a sum of products of non-negative per-attribute
numbers with non-negative weights: non-decreasing in each, so its maximum over the cells
is Σ_T θ_T Π_{i∈T} maxᵢ, attained at the cell of per-attribute maximisers
(:func:`table_sensitivity1`, exact, no enumeration).

The exact measurement uses an *integer* basis: a tree of contrasts per attribute (a range
of m cells is split into A, B with |A| = m/q, q the smallest prime factor of m, or |A| = 1
when m is prime; the row is |B|·1_A − |A|·1_B divided by gcd(|A|, |B|), i.e. entries q−1
and −1, squared norm m(q−1) <= n²). Its rows are orthogonal, orthogonal to 1 and span the
difference subspace, so Qᵢ = Hᵢ/‖rows‖ is an orthonormal basis of it; the row norms are
small (the exact sampler's range) and take few distinct values (one noise table each).
"""

from __future__ import annotations

import functools
import itertools
import math
import numbers
from dataclasses import dataclass

import numpy as np

from matmech.linalg.linop import Dense, Kron, LinOp, Ones, check_size
from matmech.validate import vector


#: Largest attribute subset of a lattice (2^k residuals per marginal).
MAX_SUBSET_SIZE = 8


def _smallest_prime_factor(m):
    q = 2
    while q * q <= m:
        if m % q == 0:
            return q
        q += 1
    return m


@functools.lru_cache(maxsize=512)
def _haar(n):
    rows, norms = [], []

    def split(lo, hi):
        m = hi - lo
        if m < 2:
            return
        q = _smallest_prime_factor(m)
        left = 1 if q == m else m // q  # a 1/q : (q−1)/q split, entries q−1 and −1
        right = m - left
        g = math.gcd(left, right)
        row = np.zeros(n, dtype=np.int64)
        row[lo : lo + left] = right // g
        row[lo + left : hi] = -(left // g)
        rows.append(row)
        norms.append(left * right * m // (g * g))
        split(lo, lo + left)
        split(lo + left, hi)

    split(0, n)
    H = np.array(rows, dtype=np.int64).reshape(n - 1, n)
    nrm = np.array(norms, dtype=np.int64)
    H.setflags(write=False)
    nrm.setflags(write=False)
    return H, nrm


def haar_contrasts(n):
    """(H, norms2): the (n−1)×n integer contrast basis of attribute size n and its squared
    row norms. Rows are orthogonal, orthogonal to 1, and span its complement."""
    n = check_size(n)
    return _haar(n)


@functools.lru_cache(maxsize=512)
def _orth(n):
    H, nrm = _haar(n)
    Q = H / np.sqrt(nrm.astype(np.float64))[:, None]
    Q.setflags(write=False)
    return Q


def orthonormal_contrasts(n):
    """Q = H / row norms: (n−1)×n, orthonormal rows orthogonal to 1 (QᵀQ = I − 11ᵀ/n)."""
    return _orth(check_size(n))


def check_lattice(domain, subsets, weights=None):
    """(domain, subsets, weights) validated: attribute sizes, sorted attribute tuples
    without repeats, positive weights (default 1). Raises naming the bad value."""
    if not isinstance(domain, (tuple, list)) or not domain:
        raise TypeError(f"domain must be a non-empty tuple of attribute sizes, got {domain!r}")
    domain = tuple(check_size(d, f"domain[{i}]") for i, d in enumerate(domain))
    d = len(domain)
    if isinstance(subsets, (str, bytes)) or not hasattr(subsets, "__iter__"):
        raise TypeError(f"subsets must be a sequence of attribute tuples, got {subsets!r}")
    out = []
    for s in subsets:
        s = tuple(s) if isinstance(s, (tuple, list)) else (s,)
        for a in s:
            if isinstance(a, bool) or not isinstance(a, numbers.Integral) or not 0 <= int(a) < d:
                raise ValueError(
                    f"attribute {a!r} in subset {s} is not an index in [0, {d - 1}] of the domain"
                )
        if len(set(s)) != len(s):
            raise ValueError(f"attribute subset {s} repeats an attribute")
        if len(s) > MAX_SUBSET_SIZE:
            raise ValueError(
                f"attribute subset {s} has {len(s)} attributes; at most {MAX_SUBSET_SIZE} are supported"
            )
        out.append(tuple(sorted(int(a) for a in s)))
    if not out:
        raise ValueError("subsets must name at least one attribute subset")
    if weights is None:
        w = np.ones(len(out))
    else:
        w = vector(weights, "weights", finite=False)
        if w.shape != (len(out),):
            raise ValueError(f"expected {len(out)} weights (one per subset), got shape {w.shape}")
        if not np.all(np.isfinite(w)) or np.any(w <= 0):
            raise ValueError(f"weights must be positive and finite, got {w.tolist()[:8]}")
    return domain, tuple(out), w


def _nontrivial(domain, T):
    return all(domain[i] > 1 for i in T)


def closure(domain, subsets):
    """Every residual T needed by the marginals ``subsets``: all T ⊆ some S whose attributes
    all have size > 1 (a size-1 attribute has an empty difference subspace), ordered by size
    then lexicographically."""
    seen = set()
    for s in subsets:
        for k in range(len(s) + 1):
            for t in itertools.combinations(s, k):
                seen.add(t)
    return tuple(sorted((t for t in seen if _nontrivial(domain, t)), key=lambda t: (len(t), t)))


def residual_size(domain, T):
    """Number of coordinates of residual T: Π_{i∈T}(nᵢ − 1)."""
    return math.prod(domain[i] - 1 for i in T)


def column_norm2(domain, T):
    """p_T = Π_{i∈T}(1 − 1/nᵢ): the squared L2 norm of every column of R_T."""
    return math.prod(1.0 - 1.0 / domain[i] for i in T)


@dataclass(frozen=True, eq=False)
class Lattice:
    """A marginal workload and its residual lattice, with every (S, T ⊆ S) pair as arrays.

    ``residuals[j]`` is an attribute tuple T with ``sizes[j]`` = m_T coordinates and column
    norm² ``norm2[j]`` = p_T; pair k links marginal ``pair_s[k]`` to residual ``pair_t[k]``
    with ``pair_rest[k]`` = Π_{i ∈ S∖T} nᵢ; ``cells[i]`` = Π_{i∈S} nᵢ.
    """

    domain: tuple
    subsets: tuple
    weights: np.ndarray
    residuals: tuple
    sizes: np.ndarray
    norm2: np.ndarray
    cells: np.ndarray
    pair_s: np.ndarray
    pair_t: np.ndarray
    pair_rest: np.ndarray


def lattice(domain, subsets, weights=None):
    """The :class:`Lattice` of the marginals ``subsets`` (validated by :func:`check_lattice`).

    Vectorised over the marginals of each size: the residuals of S are its 2^|S| sub-tuples
    (those with a size-1 attribute dropped), keyed by integers and deduplicated with numpy.
    """
    domain, subsets, w = check_lattice(domain, subsets, weights)
    d = len(domain)
    dom = np.array(domain, dtype=np.int64)
    base = d + 1
    kmax = max(len(s) for s in subsets)
    if base ** max(kmax, 1) >= 2**62:
        raise ValueError(
            f"{d} attributes with subsets of up to {kmax} attributes are too many for the lattice keys"
        )
    key_parts: list[np.ndarray] = []
    ps: list[np.ndarray] = []
    rests: list[np.ndarray] = []
    by_size: dict[int, list[int]] = {}
    for i, s in enumerate(subsets):
        by_size.setdefault(len(s), []).append(i)
    for k, members in by_size.items():
        idx = np.array(members, dtype=np.int64)
        S = np.array([subsets[i] for i in idx], dtype=np.int64).reshape(len(idx), k)
        nS = dom[S]
        for mask in range(1 << k):
            sel = [j for j in range(k) if mask >> j & 1]
            other = [j for j in range(k) if not mask >> j & 1]
            key = np.zeros(len(idx), dtype=np.int64)
            ok = np.ones(len(idx), dtype=bool)
            for j in sel:  # ascending attributes: a positional key in base d+1
                key = key * base + S[:, j] + 1
                ok &= nS[:, j] > 1
            rest = np.prod(nS[:, other].astype(np.float64), axis=1) if other else np.ones(len(idx))
            key_parts.append(key[ok])
            ps.append(idx[ok])
            rests.append(rest[ok])
    keys = np.concatenate(key_parts)
    uniq, inv = np.unique(keys, return_inverse=True)
    decoded = []
    for key in uniq.tolist():
        t = []
        while key:
            key, r = divmod(key, base)
            t.append(r - 1)
        decoded.append(tuple(reversed(t)))
    order = sorted(range(len(decoded)), key=lambda j: (len(decoded[j]), decoded[j]))
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    residuals = tuple(decoded[j] for j in order)
    sizes = np.array([residual_size(domain, t) for t in residuals], dtype=np.float64)
    norm2 = np.array([column_norm2(domain, t) for t in residuals])
    cells = np.array([math.prod(domain[i] for i in s) for s in subsets], dtype=np.float64)
    out = Lattice(
        domain,
        subsets,
        w,
        residuals,
        sizes,
        norm2,
        cells,
        np.concatenate(ps),
        rank[inv],
        np.concatenate(rests),
    )
    for a in (w, sizes, norm2, cells, out.pair_s, out.pair_t, out.pair_rest):
        a.setflags(write=False)
    return out


def total_variance_coefficients(lat):
    """c_T with Σ_S w_S·(total variance of marginal S) = Σ_T c_T u_T (equation (1))."""
    vals = lat.weights[lat.pair_s] * lat.sizes[lat.pair_t] / lat.pair_rest
    return np.bincount(lat.pair_t, weights=vals, minlength=len(lat.residuals))


def cell_variance_coefficients(lat):
    """(rows, cols, vals) of the sparse matrix B with v = B u: vᵢ the per-cell variance of
    marginal subsets[i] (equation (1))."""
    return lat.pair_s, lat.pair_t, lat.norm2[lat.pair_t] / lat.pair_rest**2


def marginal_cell_variances(lat, u):
    """Per-cell variance of each marginal (every cell of a marginal has the same one) when
    residual T is measured with noise variance u[T] per orthonormal coordinate."""
    rows, cols, vals = cell_variance_coefficients(lat)
    return np.bincount(
        rows, weights=vals * np.asarray(u, dtype=np.float64)[cols], minlength=len(lat.subsets)
    )


def total_variance(lat, u, *, weighted=False):
    """Σ_S (w_S ×) cells_S × v_S: the (weighted) total variance of the marginals."""
    w = lat.weights if weighted else 1.0
    return float(np.sum(w * lat.cells * marginal_cell_variances(lat, u)))


def sensitivity2(lat, u):
    """Squared L2 sensitivity Σ_T p_T / u_T of the residual measurements scaled to unit noise
    (the same on every cell of the domain)."""
    return float(np.sum(lat.norm2 / np.asarray(u, dtype=np.float64)))


def svd_bound(lat):
    """The SVD lower bound (Σσᵢ(W))²/N on the total variance of any unit-L2-sensitivity
    Gaussian strategy for W = [√w_S M_S] (per unit noise variance), from the lattice's
    eigenvalues λ_T/N = Σ_{S⊇T} w_S/Π_{i∈S}nᵢ with multiplicities m_T."""
    vals = lat.weights[lat.pair_s] / lat.cells[lat.pair_s]
    lam = np.bincount(lat.pair_t, weights=vals, minlength=len(lat.residuals))
    return float(np.sum(lat.sizes * np.sqrt(lam)) ** 2)


def residual_operator(domain, T, *, integer=True):
    """R_T as a :class:`~matmech.linalg.linop.Kron` over the whole domain (integer Haar
    contrasts, or the orthonormal ones): for small domains, tests and explicit checks."""
    factors: list[LinOp] = []
    for i, n in enumerate(domain):
        if i in T:
            factors.append(Dense(haar_contrasts(n)[0] if integer else orthonormal_contrasts(n)))
        else:
            factors.append(Ones(1, n))
    return Kron(*factors)


def apply_axes(arr, mats):
    """Apply ``mats[k]`` (rows × nₖ, dense or scipy sparse) along axis k of ``arr`` for every
    k: one product per axis with that axis first (a contiguous 2-D view), then the new axis
    is rotated to the back (after d rotations the axis order is restored)."""
    t = np.asarray(arr, dtype=np.float64, order="C")  # (ascontiguousarray would make 0-d 1-d)
    if t.ndim != len(mats):
        raise ValueError(
            f"expected {t.ndim} matrices for an array of shape {t.shape}, got {len(mats)}"
        )
    for m in mats:
        rest = t.shape[1:]
        out = m @ t.reshape(t.shape[0], -1)
        out = np.asarray(out).reshape(out.shape[0], *rest)
        t = np.ascontiguousarray(np.moveaxis(out, 0, -1))
    return t


def apply_axes_batched(arr, mats, *, batch_last=False, add_to=None):
    """:func:`apply_axes` on each ``arr[b]`` of a stack (axis 0 the batch): the same
    per-axis products, each over the whole stack at once (one sparse product per axis
    instead of one per member). ``batch_last``: the stack is given with the batch on the
    LAST axis (e.g. ``np.stack(..., axis=-1)``), which saves the first rotation's copy; the
    result has the batch first either way. ``add_to``: a float64 array of the result's shape
    that the result is added to in place and returned (``add_to + result``, the same sums:
    the last rotation is read by the addition instead of copied first).

    The stack is rotated and converted to float64 in one copy; every product is the same
    sparse (or dense) product as :func:`apply_axes`, so each member's numbers are those of
    :func:`apply_axes` on it, bit for bit."""
    a = np.asarray(arr)
    if a.ndim != len(mats) + 1:
        raise ValueError(
            f"expected {a.ndim - 1} matrices for a stack of shape {a.shape}, got {len(mats)}"
        )
    # batch last; each step rotates one axis behind it (rotation and float64 in one copy)
    t = a if batch_last else np.moveaxis(a, 0, -1)
    if t.dtype != np.float64 or not t.flags.c_contiguous:
        t = _contiguous_float(t)
    for k, m in enumerate(mats):
        rest = t.shape[1:]
        out = m @ t.reshape(t.shape[0], -1)
        moved = np.moveaxis(np.asarray(out).reshape(out.shape[0], *rest), 0, -1)
        if add_to is not None and k == len(mats) - 1:
            return np.add(add_to, moved, out=add_to)
        t = np.ascontiguousarray(moved)
    if add_to is not None:
        return np.add(add_to, t, out=add_to)
    return t


def _contiguous_float(t):
    """A C-contiguous float64 copy of ``t`` in one pass (conversion and layout together)."""
    out = np.empty(t.shape, dtype=np.float64)
    np.copyto(out, t, casting="unsafe")  # as np.asarray(t, dtype=np.float64)
    return out


@functools.lru_cache(maxsize=512)
def contrast_operators(n):
    """Sparse (CSR) H, Qᵀ and (Q∘Q)ᵀ of attribute size n: a tree basis has about n·depth
    non-zeros, so applying them costs O(n log n) per fibre instead of O(n²)."""
    import scipy.sparse as sp

    H = sp.csr_matrix(haar_contrasts(n)[0].astype(np.float64))
    Q = orthonormal_contrasts(n)
    return H, sp.csr_matrix(Q.T), sp.csr_matrix((Q**2).T)


def exact_cell_variances(domain, T, row_variances):
    """Per-cell variance over the cells of the marginal on T of Σ_j Q_T[j]ᵀ e_j, e_j
    independent with variances ``row_variances`` (shape (nᵢ−1 for i ∈ T)):
    (⊗ Qᵢ∘Qᵢ)ᵀ applied to them (:func:`lift_row_variances`; C-contiguous)."""
    return np.ascontiguousarray(lift_row_variances([domain[i] for i in T], row_variances))


_CLASS_LIFT_MIN = 1 << 12  # entries from which the variances are lifted on the class grid


@functools.lru_cache(maxsize=512)
def _norm_classes(n):
    """(class of each contrast row of size n by its squared norm, first row of each class)."""
    norms = haar_contrasts(n)[1]
    _, first, inv = np.unique(norms, return_index=True, return_inverse=True)
    for a in (first, inv):
        a.setflags(write=False)
    return inv.reshape(-1), first


def _on_classes(v, g, inv):
    """v[j] == g[inv₁[j₁], inv₂[j₂], …] for every j: row by row of axis 0 against g
    expanded on the other axes (no array of v's size is built)."""
    rest = g
    for axis in range(1, v.ndim):
        rest = np.take(rest, inv[axis], axis=axis)
    return all(np.array_equal(v[j], rest[k]) for j, k in enumerate(inv[0].tolist()))


def lift_row_variances(sizes, row_variances):
    """(⊗ Qᵢ∘Qᵢ)ᵀ v for v of shape (nᵢ−1 for nᵢ in ``sizes``): bit for bit
    :func:`apply_axes` with the sparse (Q∘Q)ᵀ of :func:`contrast_operators`, possibly a
    non-contiguous view.

    Exact noise variances depend on a row only through its squared norm (the σ of a row is
    set by λ_j, :mod:`matmech.measurements.residual`), i.e. v[j] = g[k₁(j₁), …] for the
    per-attribute norm classes k_i (a few per attribute). When v has that form (checked
    entry by entry), each axis is lifted on the class grid and expanded only as it is
    applied: every output number is the same sequence of products and sums as the full
    product, but only the last axis is applied to a full-size array. Otherwise the full
    product."""
    sizes = [int(n) for n in sizes]
    v = np.asarray(row_variances, dtype=np.float64)
    ops = [contrast_operators(n)[2] for n in sizes]
    if v.ndim != len(sizes) or v.ndim == 0 or v.size < _CLASS_LIFT_MIN:
        return apply_axes(v, ops)
    cls = [_norm_classes(n) for n in sizes]
    g = v[np.ix_(*[first for _, first in cls])]
    if g.size * 8 > v.size or not _on_classes(v, g, [inv for inv, _ in cls]):
        return apply_axes(v, ops)
    t = g
    for axis, (m, (inv, _)) in enumerate(zip(ops, cls)):
        x = np.moveaxis(t, axis, 0)[inv]  # this axis expanded to its rows, first
        out = (m @ x.reshape(x.shape[0], -1)).reshape(m.shape[0], *x.shape[1:])
        t = np.moveaxis(np.asarray(out), 0, axis)
    return t


def max_column_l1(n, basis="identity"):
    """Largest column L1 norm of the per-attribute factor: the identity (1), the orthonormal
    contrasts Qᵢ (``"contrasts"``) or the integer ones Hᵢ (``"integer"``)."""
    n = check_size(n)
    if basis == "identity":
        return 1.0
    if basis == "contrasts":
        return float(np.abs(orthonormal_contrasts(n)).sum(axis=0).max()) if n > 1 else 0.0
    if basis == "integer":
        return float(np.abs(haar_contrasts(n)[0]).sum(axis=0).max()) if n > 1 else 0.0
    raise ValueError(f"basis must be 'identity', 'contrasts' or 'integer', got {basis!r}")


def table_sensitivity1(domain, subsets, theta, basis="identity"):
    """Exact L1 sensitivity (largest column L1 norm) of [θ_T ⊗_{i∈T} Bᵢ ⊗ ⊗_{i∉T} 1ᵀ] over
    ``subsets`` T, Bᵢ the ``basis`` factor of attribute i: Σ_T θ_T Π_{i∈T} max_column_l1(nᵢ)
    (module notes: the maximum of a monotone sum of products is at the per-attribute maxima)."""
    theta = np.asarray(theta, dtype=np.float64)
    if theta.shape != (len(subsets),) or np.any(theta < 0) or not np.all(np.isfinite(theta)):
        raise ValueError(
            f"theta must hold {len(subsets)} non-negative finite weights, got shape {theta.shape}"
        )
    norms = {}
    total = 0.0
    for t, w in zip(subsets, theta.tolist()):
        p = 1.0
        for i in t:
            if domain[i] not in norms:
                norms[domain[i]] = max_column_l1(domain[i], basis)
            p *= norms[domain[i]] if domain[i] > 1 else 1.0
        total += w * p
    return float(total)
