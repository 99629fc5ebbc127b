"""Generalised marginal strategies and their exact factored error on unions of Kronecker products.

HDMM's OPT_M with per-attribute factor strategies (McKenna et al., "Optimizing error of
high-dimensional statistical queries under differential privacy", PVLDB 2018, §6.3 with the
p-Identity factors of §5.1): the strategy operator :class:`GeneralMarginalStrategy`, its
factored generalised inverse, the exact error trace(WᵀW (AᵀA)⁻) from the factors
(:func:`general_marginal_error`) and the L2 sensitivity (:func:`general_marginal_sensitivity2`).
The optimisers are in :mod:`matmech.optimizers.general_marginals`.
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from matmech.linalg.structured import (
    class_projector_factors,
    subset_inplace,
    superset_inplace,
    superset_sum,
)
from matmech.linalg.linop import (
    Dense,
    Identity,
    Kron,
    Ones,
    Scaled,
    Sum,
    VStack,
    as_linop,
    register,
)
from matmech.optimizers.gram import FactorGrams, distinct_by_id
from matmech.optimizers.marginal_workloads import (
    identity_like,
    total_like,
    kron_blocks,
    subset_weights,
)


#
# A generalised marginal strategy measures, for every attribute subset S with θ_S > 0, the rows
# θ_S ⊗ᵢ(Qᵢ if i ∈ S else 1ᵀ), with one factor strategy Qᵢ per attribute (identity, or HDMM's
# p-Identity [I; Θ]D for ordered attributes), shared by every subset containing i. With
# Bᵢ = QᵢᵀQᵢ = LᵢᵀLᵢ (invertible) the gram Σ_S θ_S² ⊗_{i∈S} Bᵢ ⊗_{i∉S} 11ᵀ is
# (⊗Lᵢ)ᵀ [Σ_S θ_S² ⊗_{i∈S} I ⊗_{i∉S} uᵢuᵢᵀ] (⊗Lᵢ) with uᵢ = Lᵢ⁻ᵀ1: a marginal lattice in which
# the "total" direction of attribute i is uᵢ (of squared length gᵢ = 1ᵀBᵢ⁻¹1) instead of 1.
# The bracket is diagonal on the classes T (complement of uᵢ on the attributes in T, uᵢ
# elsewhere) with λ_T = Σ_{S ⊇ T} θ_S² Π_{i∉S} gᵢ, so a symmetric generalised inverse of the
# gram is Σ_T λ_T⁻¹ ⊗ᵢ Nᵢ^{[i∈T]} with, for yᵢ = Bᵢ⁻¹1,
#     Nᵢ^out = yᵢyᵢᵀ/gᵢ,  Nᵢ^in = Bᵢ⁻¹ − yᵢyᵢᵀ/gᵢ,
# and the error of any union of Kronecker products W = [v₁ ⊗ᵢWᵢ₁; …] is, exactly,
#     trace(G_W (AᵀA)⁻) = Σ_T η_T / λ_T,   η_T = Σ_k v_k² Πᵢ a_ik^{[i∈T]},
#     a_ik^out = yᵢᵀC_ik yᵢ/gᵢ,  a_ik^in = trace(C_ik Bᵢ⁻¹) − a_ik^out   (C_ik = Wᵢₖᵀ Wᵢₖ),
# a product over the attributes per lattice class: no domain-sized object (2^k classes × K
# terms). Qᵢ = I gives the marginal lattice above (gᵢ = dᵢ). Every factor has column L1 norm 1
# (p-Identity, identity, 1ᵀ), so sens₁ = Σ θ_S. The Θᵢ are optimised jointly with θ: F
# depends on Bᵢ⁻¹ only through gᵢ and the a_ik, whose gradient Γᵢ = ∂F/∂Bᵢ⁻¹ turns the
# p-Identity objective of :mod:`matmech.optimizers.pure` (linear in its gram) into ∂F/∂Θᵢ.

#: Largest number of attributes of a generalised marginal strategy (2^k lattice classes).
MAX_GENERAL_ATTRIBUTES = 16
#: Largest attribute size given a p-Identity factor (dense dᵢ×dᵢ algebra per attribute).
MAX_FACTOR_N = 1024
#: Largest number of (workload term, lattice class) pairs of the generalised marginal error.
MAX_GENERAL_WORK = 1 << 25
#: Numerical floor (relative) below which a per-class trace counts as zero.
_ZERO = 1e-11


def _factor_inverse(Q, n):
    """B⁻¹ = (QᵀQ)⁻¹ of one attribute's factor strategy (dense n×n), Q = None meaning I."""
    from matmech.optimizers.pidentity import PIdentity

    if Q is None or isinstance(Q, Identity):
        return np.eye(n)
    if isinstance(Q, PIdentity):
        return Q.gram_pinv()[0]._dense()
    b = Q.gram().dense(max_entries=MAX_FACTOR_N**2)
    return np.linalg.inv(b)


def live_grams(prob, i):
    """(gram, weight) of attribute ``i``'s distinct non-total factor grams in ``prob``
    (a :class:`_GeneralProblem`), each weighted by the squared row weights of the terms
    using it: what a per-attribute fit of the union sees."""
    lst, idx = prob.uniq[i]
    weight = np.bincount(idx, weights=prob.v2, minlength=len(lst))
    return [(c, wt) for c, wt in zip(lst, weight) if not total_gram(c)]


def total_gram(c):
    """True if the dense gram c is a multiple of 11ᵀ (a total query, or copies of it)."""
    return bool(np.all(c == c.flat[0]))


def _outer_products(g):
    """Π_{i∉S} gᵢ for every mask S (bit i = attribute i in S)."""
    out = np.ones(1)
    for gi in g:
        out = np.concatenate([out * float(gi), out])
    return out


class _GeneralProblem:
    """The exact error of generalised marginal strategies for one union of Kronecker products.

    ``terms``: [(v_k², [C_1k, …, C_dk])] dense factor grams; ``free``: the attributes whose
    factor is a p-Identity [I; Θᵢ]D (the others are the identity). Evaluates
    F(θ, Θ) = (Σθ)² Σ_T η_T/λ_T and its gradient in θ and every Θᵢ.
    """

    def __init__(self, terms, domain, free):
        self.domain = tuple(int(d) for d in domain)
        self.k = len(self.domain)
        self.v2 = np.array([w2 for w2, _ in terms], dtype=np.float64)
        self.C = [[cs[i] for _, cs in terms] for i in range(self.k)]  # C[i][k]
        self.free = tuple(free)
        # per attribute: the distinct grams (by object) and their index per term
        self.uniq = [distinct_by_id(self.C[i]) for i in range(self.k)]
        #: per attribute, trace C of each distinct gram (the 1-D fits' weights)
        self.traces = [[float(np.trace(c)) for c in lst] for lst, _ in self.uniq]
        # the classes a term reaches: T ⊆ Z_k, Z_k = the attributes where C_ik is not ∝ 11ᵀ
        # (a_in = trace(C N_in) = 0 exactly when C ∝ 11ᵀ, since N_in 1 = 0): η and its
        # gradient are sums over these Σ_k 2^|Z_k| entries, not over K × 2^k
        total = [[total_gram(c) for c in lst] for lst, _ in self.uniq]  # per distinct gram
        term_idx, masks = [], []
        support = []  # per term: the mask of Z_k
        for kk in range(self.v2.size):
            z = [i for i in range(self.k) if not total[i][self.uniq[i][1][kk]]]
            sub = np.zeros(1, dtype=np.int64)
            for i in z:
                sub = np.concatenate([sub, sub | (1 << i)])
            term_idx.append(np.full(sub.size, kk))
            masks.append(sub)
            support.append(sum(1 << i for i in z))
        #: per term k, the mask of the attributes where its gram is not ∝ 11ᵀ (its support)
        self.support = np.array(support, dtype=np.int64)
        self.term_idx = np.concatenate(term_idx)
        self.masks = np.concatenate(masks)
        if self.masks.size > MAX_GENERAL_WORK:
            raise ValueError(
                f"the workload reaches {self.masks.size:,} (term, lattice class) pairs, more than {MAX_GENERAL_WORK:,}"
            )
        self.bits = ((self.masks[:, None] >> np.arange(self.k)[None, :]) & 1).astype(bool)
        self._sym, self._pick = {}, None
        self._starts = self._free_bits = None  # full()'s per-term sums, set on first use

    def _symmetric(self, i):
        """True if every distinct gram of attribute i equals its transpose exactly."""
        if i not in self._sym:
            self._sym[i] = all(np.array_equal(c, c.T) for c in self.uniq[i][0])
        return self._sym[i]

    def attribute_numbers(self, i, minv):
        """(g, a_out[K], a_in[K], y) of attribute i for the factor inverse B⁻¹ = minv."""
        y = minv.sum(1)
        g = float(y.sum())
        lst, idx = self.uniq[i]
        ao = np.empty(len(lst))
        ai = np.empty(len(lst))
        for j, c in enumerate(lst):
            cy = c @ y
            ao[j] = float(y @ cy) / g
            tr = float((c * minv).sum())
            ai[j] = tr - ao[j]
            scale = max(tr, 1e-300)
            if ai[j] <= _ZERO * scale:
                ai[j] = 0.0
            if ao[j] <= _ZERO * scale:
                ao[j] = 0.0
        return g, ao[idx], ai[idx], y

    def numbers(self, minvs, fixed=None):
        """(g, a_out, a_in, ys) of every attribute; ``fixed``: {i: attribute_numbers(i, ·)} of
        attributes whose factor inverse does not change (reused, not recomputed)."""
        g = np.empty(self.k)
        K = self.v2.size
        a_out, a_in, ys = np.empty((K, self.k)), np.empty((K, self.k)), []
        for i in range(self.k):
            nums = (
                fixed[i]
                if fixed is not None and i in fixed
                else self.attribute_numbers(i, minvs[i])
            )
            g[i], a_out[:, i], a_in[:, i], y = nums
            ys.append(y)
        return g, a_out, a_in, ys

    def entries(self, a_out, a_in):
        """Πᵢ a_ik^{[i∈T]} for every (term k, class T ⊆ Z_k) entry."""
        if self._pick is None:  # flat index of a_in[t, i] or a_out[t, i] in [a_out, a_in] (k, 2)
            cols = 2 * np.arange(self.k)[None, :] + self.bits
            self._pick = self.term_idx[:, None] * (2 * self.k) + cols
        both = np.stack([a_out, a_in], axis=2)  # (K, k, 2)
        return both.reshape(-1)[self._pick].prod(1)

    def eta(self, a_out, a_in):
        w = self.v2[self.term_idx] * self.entries(a_out, a_in)
        return np.bincount(self.masks, weights=w, minlength=1 << self.k)

    def value(self, theta, minvs):
        """F = (Σθ)² Σ_T η_T/λ_T (inf when a class with workload mass has λ_T = 0)."""
        g, a_out, a_in, _ = self.numbers(minvs)
        eta = self.eta(a_out, a_in)
        lam = superset_sum(np.asarray(theta) ** 2 * _outer_products(g), self.k)
        need = eta > 0
        if np.any(lam[need] <= 1e-300):
            return math.inf
        return float(np.sum(theta)) ** 2 * float((eta[need] / lam[need]).sum())

    def theta_objective(self, minvs):
        """(μ, mult, out_prod) for :func:`marginal_objective` with the factors fixed."""
        g, a_out, a_in, _ = self.numbers(minvs)
        eta = self.eta(a_out, a_in)
        return eta, np.ones_like(eta), _outer_products(g)

    def full(self, theta, minvs, fixed=None):
        """(F, ∂F/∂θ, {i: Γᵢ = ∂F/∂Bᵢ⁻¹} for the free attributes); ``fixed`` as in :meth:`numbers`."""
        k = self.k
        g, a_out, a_in, ys = self.numbers(minvs, fixed)
        E = self.entries(a_out, a_in)
        eta = np.bincount(self.masks, weights=self.v2[self.term_idx] * E, minlength=1 << k)
        outg = _outer_products(g)
        th = np.asarray(theta, dtype=np.float64)
        lam = superset_inplace(th * th * outg, k)
        need = eta > 0
        if np.any(lam[need] <= 1e-300):
            return math.inf, np.zeros_like(th), {}
        R = np.zeros_like(lam)
        R[need] = 1.0 / lam[need]
        s = float(th.sum())
        err = float((eta * R).sum())
        F = s * s * err
        # θ: as marginal_objective with μ = η, out_prod = Π_{i∉S} gᵢ
        sub = subset_inplace(eta * R * R, k)
        dth = 2.0 * s * err - s * s * 2.0 * th * outg * sub
        grads = {}
        if self.free:
            # ∂F/∂a_ik^b = s² v_k² Σ_{T: bit i of T = b} R_T Π_{j≠i} a_jk^{T_j}: the class sums of
            # E·R divided by a_ik^b. Where a_ik^b = 0 its derivative is not needed: a_in = 0 only
            # for totals (C ∝ 11ᵀ, then ∂a_in/∂B⁻¹ = 0) and a_out = 0 only when C y = 0 (then
            # ∂a_out/∂B⁻¹ = 0), so those entries are set to 0.
            # every free attribute at once: the entries of a term are contiguous (term_idx is
            # sorted, each term has the class ∅), so the per-term sums are one reduceat
            if self._starts is None:
                self._starts = np.flatnonzero(np.diff(self.term_idx, prepend=-1))
                self._free_bits = self.bits[:, list(self.free)].astype(np.float64)
            ER = E * R[self.masks]
            all_sums = np.add.reduceat(ER, self._starts)
            in_sums = np.add.reduceat(ER[:, None] * self._free_bits, self._starts, axis=0)
            ai, ao = a_in[:, self.free], a_out[:, self.free]
            scale = (s * s) * self.v2[:, None]
            d_in = np.divide(in_sums, ai, out=np.zeros_like(in_sums), where=ai > 0)
            d_in *= scale
            d_out = np.divide(all_sums[:, None] - in_sums, ao, out=np.zeros_like(ao), where=ao > 0)
            d_out *= scale
            d_out -= d_in
            # ∂F/∂gᵢ = −s² Σ_{S ∌ i} θ_S² (Π_{j∉S} g_j)/gᵢ Σ_{T⊆S} η_T/λ_T²
            base = th * th * outg * sub
            for j, i in enumerate(self.free):
                # the masks without bit i: the first half of every block of 2^(i+1)
                dg = -s * s * float(base.reshape(-1, 2, 1 << i)[:, 0, :].sum()) / g[i]
                y = ys[i]
                lst, idx = self.uniq[i]
                beta = np.bincount(idx, weights=d_in[:, j], minlength=len(lst))
                cvec = np.bincount(idx, weights=d_out[:, j], minlength=len(lst))
                n = self.domain[i]
                Cb = np.zeros((n, n))
                Cc = np.zeros((n, n))
                for j, c in enumerate(lst):
                    if beta[j] != 0.0:
                        Cb += beta[j] * c
                    if cvec[j] != 0.0:
                        Cc += cvec[j] * c
                cy = Cc @ y
                # Γ = Cb + (cy1ᵀ + 1cyᵀ)/g + (dg − yᵀcy/g²)11ᵀ, formed in place
                gam = cy[:, None] + cy[None, :]
                gam /= g[i]
                gam += Cb
                gam += dg - float(y @ cy) / g[i] ** 2
                # symmetric already (to the bit) when every gram of attribute i is
                grads[i] = gam if self._symmetric(i) else 0.5 * (gam + gam.T)
        return F, dth, grads


def pidentity_minv(theta):
    """(B⁻¹, s) of the p-Identity [I; Θ]D: D⁻¹(I + ΘᵀΘ)⁻¹D⁻¹ with D⁻¹ = diag(1 + 1ᵀΘ)."""
    s = 1.0 + theta.sum(0)
    p = theta.shape[0]
    r = np.eye(p) + theta @ theta.T
    mid = -theta.T @ np.linalg.solve(r, theta)
    mid[np.diag_indices_from(mid)] += 1.0
    return s[:, None] * mid * s[None, :]


@register("GeneralMarginalStrategy")
class GeneralMarginalStrategy(VStack):
    """Weighted union of generalised marginals: rows θ_S ⊗ᵢ(Qᵢ if i ∈ S else 1ᵀ) for θ_S > 0.

    ``factors[i]`` is attribute i's factor strategy Qᵢ (an Identity or a
    :class:`~matmech.optimizers.pidentity.PIdentity`; every column of L1 norm 1, so sens₁ = Σθ_S).
    ``gram_pinv()`` is the factored generalised inverse Σ_T λ_T⁻¹ ⊗ᵢ Nᵢ^{[i∈T]} (see the
    comment above; the Moore–Penrose inverse when every λ_T > 0, otherwise a symmetric
    generalised inverse giving the same W(AᵀA)⁻Wᵀ for every W in the row space), and
    :func:`general_marginal_error` scores unions of Kronecker products against it from the
    factors. With identity factors it is the :class:`MarginalStrategy` of the same θ.
    """

    def __init__(self, domain, weights, factors):
        domain, k, w = subset_weights(domain, weights)
        factors = tuple(Identity(d) if f is None else as_linop(f) for f, d in zip(factors, domain))
        if len(factors) != k:
            raise ValueError(f"need one factor strategy per attribute ({k}), got {len(factors)}")
        for i, (f, d) in enumerate(zip(factors, domain)):
            if f.shape[1] != d:
                raise ValueError(
                    f"factor {i} has {f.shape[1]} columns, expected the attribute size {d}"
                )
            if d > MAX_FACTOR_N and not isinstance(f, Identity):
                raise ValueError(
                    f"factor {i}: attribute size {d} exceeds {MAX_FACTOR_N} for a non-identity factor"
                )
        self.theta, self.factors = w, factors
        masks = np.flatnonzero(w > 0)
        subsets = tuple(tuple(i for i in range(k) if (m >> i) & 1) for m in masks)
        ones = [Ones(1, d) for d in domain]  # one total per attribute, shared by the blocks
        blocks = [Kron(*[factors[i] if (m >> i) & 1 else ones[i] for i in range(k)]) for m in masks]
        super().__init__(blocks, weights=w[masks])
        self.domain_sizes = domain
        self.attribute_subsets = subsets

    def factor_inverses(self):
        """[Bᵢ⁻¹] (dense dᵢ×dᵢ; the identity for identity factors)."""
        return [_factor_inverse(f, d) for f, d in zip(self.factors, self.domain_sizes)]

    def eigenvalues(self):
        """λ_T for every class mask T (bit i: attribute i in the complement of uᵢ)."""
        minvs = self.factor_inverses()
        g = [float(m.sum()) for m in minvs]
        return superset_sum(self.theta**2 * _outer_products(g), len(self.domain_sizes))

    def sensitivity_details(self, p=1):
        from matmech.linalg.normmax import factored_sensitivity
        from matmech.linalg.linop import kron_terms

        return factored_sensitivity(kron_terms(self), p)

    def gram_pinv(self):
        domain, k = self.domain_sizes, len(self.domain_sizes)
        minvs = self.factor_inverses()
        parts = []
        for m in minvs:
            y = m.sum(1)
            out = np.outer(y, y) / float(y.sum())
            parts.append((Dense(out), Dense(m - out) if m.shape[0] > 1 else None))
        lam = superset_sum(self.theta**2 * _outer_products([float(m.sum()) for m in minvs]), k)
        top = float(lam.max())
        pos, null = [], []
        for mask in range(1 << k):
            if any((mask >> i) & 1 and parts[i][1] is None for i in range(k)):
                continue  # an attribute of size 1 has no complement: empty class
            if lam[mask] > 1e-12 * top:
                pos.append(
                    Scaled(Kron(*[parts[i][(mask >> i) & 1] for i in range(k)]), 1.0 / lam[mask])
                )
            else:
                # a PSD operator whose range is the class's share of null(A): yᵢ on attributes
                # outside T, the mean-zero vectors on T (its range, not an orthogonal projector)
                null.append(
                    Kron(*class_projector_factors(domain, mask))
                    if all(isinstance(f, Identity) for f in self.factors)
                    else Kron(
                        *[
                            Dense(np.eye(d) - 1.0 / d) if (mask >> i) & 1 else parts[i][0]
                            for i, d in enumerate(domain)
                        ]
                    )
                )
        return Sum(pos), (Sum(null) if null else None)

    def factored_trace(self, W):
        """trace(WᵀW (AᵀA)⁻) from the factors (see :func:`general_marginal_error`) when W is
        a union of Kronecker products over the same attributes, else None. Raises ValueError
        when a query of W is outside the row space. A hook for the error analysis: it costs
        2^k classes × K terms, never a domain-sized vector."""
        blocks = kron_blocks(W)  # one read of W's terms (matmech.linalg.products)
        if blocks is None or tuple(f.shape[1] for f in blocks[0][1]) != self.domain_sizes:
            return None
        return _general_trace(W, self)

    def to_dict(self, out):
        return {
            "domain": list(self.domain_sizes),
            "theta": out.array(self.theta),
            "factors": [out.node(f) for f in self.factors],
        }

    @classmethod
    def from_dict(cls, node, src):
        return cls(
            tuple(src.ints(node, "domain")),
            src.array(node, "theta", "float", 1),
            src.children(node, "factors"),
        )


def identity_total_gram(c):
    """True if the dense gram c is a·I + b·11ᵀ (identities, totals and stacks of them)."""
    n = c.shape[0]
    if n == 1:
        return True
    b = c[0, 1]
    a = c[0, 0] - b
    return bool(
        np.allclose(c, a * np.eye(n) + b, rtol=1e-12, atol=1e-12 * max(abs(a) + abs(b), 1e-300))
    )


#: The last few workloads' factor grams, by identity (a weak reference guards against id
#: reuse): ``optimize`` scores one W in several families, each reading the same grams (Loans
#: ≤3-way: 3,588 dense factor grams, 0.4 s per read without this cache).
_TERMS_CACHE: dict = {}
_TERMS_CACHE_SIZE = 4


def _terms(W):
    """(terms [(v², [C_ik])], domain, blocks) of a union of Kronecker products W, cached for
    the last few W (linear operators are immutable). Raises ValueError when W is not one or
    is too large for the dense factor algebra."""
    hit = _TERMS_CACHE.get(id(W))
    if hit is not None and hit[0]() is W:
        return hit[1]
    out = _read_terms(W)
    try:
        ref = weakref.ref(W)
    except TypeError:  # not weakly referenceable: not cached
        return out
    for key in [k for k, (r, _) in _TERMS_CACHE.items() if r() is None]:
        del _TERMS_CACHE[key]
    while len(_TERMS_CACHE) >= _TERMS_CACHE_SIZE:
        del _TERMS_CACHE[next(iter(_TERMS_CACHE))]
    _TERMS_CACHE[id(W)] = (ref, out)
    return out


def _read_terms(W):
    blocks = kron_blocks(W)
    if blocks is None:
        raise ValueError(
            "generalised marginals need a Kronecker workload or a union of Kronecker products over the same attributes"
        )
    domain = tuple(f.shape[1] for f in blocks[0][1])
    k = len(domain)
    if k > MAX_GENERAL_ATTRIBUTES:
        raise ValueError(
            f"generalised marginals support at most {MAX_GENERAL_ATTRIBUTES} attributes, got {k}"
        )
    big = [
        d
        for i, d in enumerate(domain)
        if d > MAX_FACTOR_N
        and not all(identity_like(fs[i]) or total_like(fs[i]) for _, fs in blocks)
    ]
    if big:
        raise ValueError(
            f"generalised marginals need attribute sizes <= {MAX_FACTOR_N} for non-identity factors, got {big[0]}"
        )
    grams = FactorGrams(MAX_FACTOR_N**2)
    terms = []
    for w2, fs in blocks:
        cs = []
        for f in fs:
            if f.shape[1] > MAX_FACTOR_N:  # identity or total on a large attribute: closed forms
                raise ValueError(f"attribute size {f.shape[1]} exceeds {MAX_FACTOR_N}")
            cs.append(grams(f))
        terms.append((w2, cs))
    return terms, domain, blocks


def general_marginal_problem(W, free=None):
    """(problem, domain, blocks) of the generalised marginal error for a union of Kronecker
    products W; ``free``: the attributes with a free factor (None: those queried by more than
    identities and totals, grams aI + b11ᵀ)."""
    terms, domain, blocks = _terms(W)
    if free is None:
        # the terms share a few gram arrays (FactorGrams): each distinct one is checked once
        grams = [distinct_by_id([cs[i] for _, cs in terms])[0] for i in range(len(domain))]
        free = [i for i, gs in enumerate(grams) if not all(identity_total_gram(c) for c in gs)]
    return _GeneralProblem(terms, domain, free), domain, blocks


def general_marginal_error(W, A, *, p=1):
    """sens_p(A)² · trace(WᵀW (AᵀA)⁻) for a union of Kronecker products W on a
    :class:`GeneralMarginalStrategy` A, exactly, from the factors: the total error in units of
    the noise variance of a unit-sensitivity measurement (times 2/ε² for Laplace; σ² of the
    unit-L2 Gaussian for p=2, where sens₂² is :func:`general_marginal_sensitivity2`).
    Raises ValueError if some query of W is outside A's row space."""
    if not isinstance(A, GeneralMarginalStrategy):
        raise TypeError(f"expected a GeneralMarginalStrategy, got {type(A).__name__}")
    if p not in (1, 2):
        raise ValueError(f"p must be 1 (pure eps) or 2 (Gaussian), got {p!r}")
    if p == 2:
        return general_marginal_sensitivity2(
            A.theta, [factor_col_norm2(f) for f in A.factors]
        ) * _general_trace(W, A)
    return float(A.sensitivity(1)) ** 2 * _general_trace(W, A)


def factor_col_norm2(Q):
    """Largest squared column L2 norm maxⱼ ‖Q eⱼ‖² of one attribute's factor strategy (1 for
    the identity and for the total 1ᵀ)."""
    if isinstance(Q, Identity):
        return 1.0
    return float(np.max(np.asarray(Q.col_norms(2), dtype=np.float64))) ** 2


def inside_products(c):
    """Π_{i∈S} cᵢ for every mask S (bit i = attribute i in S)."""
    out = np.ones(1)
    for ci in c:
        out = np.concatenate([out, out * float(ci)])
    return out


def general_marginal_sensitivity2(theta, col2):
    """The squared L2 sensitivity Δ₂² = Σ_S θ_S² Π_{i∈S} cᵢ of the strategy with lattice weights
    ``theta`` (one per mask S, bit i = attribute i in S) and per-attribute factors whose largest
    squared column L2 norms are ``col2`` (cᵢ, :func:`factor_col_norm2`).

    Exact, not a bound: the column (j₁, …, j_k) of θ_S ⊗ᵢ(Qᵢ if i ∈ S else 1ᵀ) stacked over S has
    squared norm Σ_S θ_S² Π_{i∈S} ‖Qᵢ e_{jᵢ}‖² (the total 1ᵀ has unit columns), a sum of products
    of non-negative per-attribute numbers, non-decreasing in each; so its maximum over the product
    domain is attained jointly at every attribute's largest column. The one function used by the
    L2 weight optimiser here and by the (ε, δ) measurement
    (:func:`matmech.measurements.gmarginal.plan_gmarginal`), so the two agree."""
    th = np.asarray(theta, dtype=np.float64)
    c = [float(v) for v in col2]
    if th.shape != (1 << len(c),):
        raise ValueError(
            f"need {1 << len(c)} lattice weights for {len(c)} attributes, got shape {th.shape}"
        )
    return float(np.dot(th * th, inside_products(c)))


def _general_trace(W, A):
    """trace(WᵀW (AᵀA)⁻) of :func:`general_marginal_error` (no sensitivity)."""
    prob, domain, _ = general_marginal_problem(W, free=())
    if domain != A.domain_sizes:
        raise ValueError(
            f"workload attributes {domain} differ from the strategy's {A.domain_sizes}"
        )
    minvs = A.factor_inverses()
    g, a_out, a_in, _ = prob.numbers(minvs)
    eta = prob.eta(a_out, a_in)
    lam = superset_sum(A.theta**2 * _outer_products(g), prob.k)
    need = eta > 0
    zero = lam <= 1e-12 * float(lam.max())
    if np.any(need & zero):
        r = float(eta[need & zero].sum() / eta[need].sum())
        raise ValueError(
            f"the workload's rows are not in the strategy's row space (relative residual {r:.3g}): "
            "some queries cannot be answered from these measurements"
        )
    ok = need & ~zero
    return float((eta[ok] / lam[ok]).sum())
