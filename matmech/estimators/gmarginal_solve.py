"""Generalised least squares of a generalised marginal measurement, in the factored space.

The measured rows are θ_S ⊗ᵢ(Q'ᵢ if i ∈ S else 1ᵀ) with independent noise of variance v_S
per row of block S (:mod:`matmech.measurements.gmarginal`). Weighting block S by
v_S^{-1/2} gives a :class:`~matmech.optimizers.general_marginal_error.GeneralMarginalStrategy` A with
θ_S = v_S^{-1/2}, whose gram G = AᵀA has the factored generalised inverse (McKenna et al.,
VLDB 2018, §6.3; :meth:`GeneralMarginalStrategy.gram_pinv`)

    G⁻ = Σ_T λ_T⁻¹ ⊗ᵢ (Nᵢ if i ∈ T else yᵢyᵢᵀ/gᵢ),
    Bᵢ = Q'ᵢᵀQ'ᵢ, yᵢ = Bᵢ⁻¹1, gᵢ = 1ᵀyᵢ, Nᵢ = Bᵢ⁻¹ − yᵢyᵢᵀ/gᵢ,  λ_T = Σ_{S⊇T} θ_S² Π_{i∉S} gᵢ.

The products Nᵢ·(yᵢyᵢᵀ/gᵢ) vanish and 1ᵀNᵢ = 0, so G⁻ is reflexive (G⁻GG⁻ = G⁻) and the GLS
estimate x̂ = G⁻ Aᵀ Σ^{-1/2} y splits over the classes T:

    Aᵀ Σ^{-1/2} y = Σ_S u_S ⊗ 1_{S^c},   u_S = v_S⁻¹ (⊗_{i∈S} Q'ᵢᵀ) y_S,
    x̂ = Σ_T ŝ_T ⊗ (yᵢ, i ∉ T),   ŝ_T = λ_T⁻¹ (⊗_{i∈T} Nᵢ) r_T,
    r_T = Σ_{S ⊇ T} u_S contracted with yᵢ/gᵢ on every axis of S∖T,

a table on T per class (Pᵢ 1 = yᵢ for the rank-one part, Nᵢ 1 = 0, so only T ⊆ S reach u_S).
A term w ⊗ᵢ Fᵢ of W (non-total on Z) is answered as

    w Σ_{T⊆Z} (⊗_{i∈T} Fᵢ) ŝ_T ⊗ (Fᵢyᵢ, i ∈ Z∖T) · Π_{i∉Z} gᵢ,

and, the noise being whitened, Cov(W x̂) = W G⁻ Wᵀ: per answer

    w² Σ_{T⊆Z} λ_T⁻¹ ⊗_{i∈Z} (diag(Fᵢ Nᵢ Fᵢᵀ) if i ∈ T else (Fᵢyᵢ)²/gᵢ) · Π_{i∉Z} gᵢ.

A class T ⊆ Z with Fᵢ Nᵢ ≠ 0 on T but λ_T = 0 means the term is not in the row space of the
strategy: refused. Every operation is on tables of the measured subsets, of the classes and
of W's answers; no domain-sized vector exists. Post-processing only.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from matmech.linalg.terms import Terms
from matmech.linalg.answers import Answers
from matmech.linalg.linop import Identity
from matmech.optimizers.general_marginal_error import GeneralMarginalStrategy


#: Largest dense workload factor (entries) the answers use.
MAX_FACTOR_ENTRIES = 1 << 24
_ZERO = 1e-10  # relative size below which Fᵢ Nᵢ counts as zero (a total-like factor)


def _along(arr, m, axis):
    """``m`` (rows × n) applied along ``axis`` of ``arr``."""
    return np.moveaxis(np.tensordot(m, arr, axes=([1], [axis])), 0, axis)


def _contract(arr, vec, axis):
    return np.tensordot(arr, vec, axes=([axis], [0]))


class GMarginalSolver:
    """The factored GLS of a GeneralMarginalStrategy whose θ_S are the inverse noise stds
    (:meth:`matmech.measurements.gmarginal.GMarginalMeasurementPlan.gls_strategy`).

    Data-independent on construction (factor inverses, λ_T); :meth:`variances` and
    :meth:`check` read only the workload; :meth:`estimate` and :meth:`answers` are
    post-processing of the measurement.
    """

    def __init__(self, strategy, subsets):
        if not isinstance(strategy, GeneralMarginalStrategy):
            raise TypeError(f"expected a GeneralMarginalStrategy, got {type(strategy).__name__}")
        self.strategy = strategy
        self.domain = strategy.domain_sizes
        self.subsets = tuple(tuple(s) for s in subsets)
        minvs = strategy.factor_inverses()
        self.y = [m.sum(axis=1) for m in minvs]
        self.g = [float(v.sum()) for v in self.y]
        self.N = [m - np.outer(v, v) / g for m, v, g in zip(minvs, self.y, self.g)]
        self.lam = strategy.eigenvalues()
        self.top = float(self.lam.max())
        # the classes: T ⊆ some measured S, every attribute of T of size > 1
        cls: set[tuple[int, ...]] = set()
        for S in self.subsets:
            S2 = [i for i in S if self.domain[i] > 1]
            for k in range(len(S2) + 1):
                cls.update(itertools.combinations(S2, k))
        self.classes = tuple(sorted(cls, key=lambda t: (len(t), t)))
        self._wf = {}

    # -- the workload side (no data) --------------------------------------------------------

    def _lam(self, T):
        return float(self.lam[sum(1 << i for i in T)])

    def _wfactor(self, f, i, kind):
        """(Fᵢyᵢ, Fᵢ (dense), diag(FᵢNᵢFᵢᵀ), FᵢNᵢ ≠ 0) for workload factor f on attribute i."""
        key = (id(f), i, kind)
        if key not in self._wf:
            n = self.domain[i]
            if kind == "I" or isinstance(f, Identity):
                F = None
                fy = self.y[i]
                fn_diag = np.diag(self.N[i]).copy()
                nonzero = n > 1
            elif kind == "T":
                F = np.ones((1, n))
                fy = np.array([self.g[i]])
                fn_diag = np.zeros(1)
                nonzero = False
            else:
                if f.shape[0] * n > MAX_FACTOR_ENTRIES:
                    raise ValueError(
                        f"a workload factor on attribute {i} has {f.shape[0]:,}×{n:,} entries; "
                        f"at most {MAX_FACTOR_ENTRIES:,} are used densely"
                    )
                F = np.asarray(f.dense(max_entries=MAX_FACTOR_ENTRIES), dtype=np.float64)
                fy = F @ self.y[i]
                FN = F @ self.N[i]
                fn_diag = np.einsum("ij,ij->i", FN, F)
                scale = max(float(np.abs(F).max()) * float(np.abs(self.N[i]).max()) * n, 1e-300)
                nonzero = float(np.abs(FN).max()) > _ZERO * scale
            self._wf[key] = (f, fy, F, fn_diag, nonzero)
        return self._wf[key][1:]

    def _term_parts(self, terms, j):
        """(w, Z, {i: parts}, classes T ⊆ Z', Π_{i∉Z} gᵢ) of term j; raises if not answerable."""
        fs, ks = terms.factors[j], terms.kinds[j]
        w = float(terms.weights[j])
        Z = [i for i, k in enumerate(ks) if k != "T"]
        parts = {}
        for i in Z:
            f = None if fs is None else fs[i]
            parts[i] = self._wfactor(f, i, "I" if fs is None else ks[i])
        outside = math.prod(self.g[i] for i, k in enumerate(ks) if k == "T")
        live = [i for i in Z if parts[i][3]]
        classes = []
        for k in range(len(live) + 1):
            for T in itertools.combinations(live, k):
                lam = self._lam(T)
                if not lam > 1e-12 * self.top:
                    raise ValueError(
                        f"term {j} of W is not in the strategy's row space: its queries reach the "
                        f"attribute class {T}, which no measured subset covers"
                    )
                classes.append(T)
        return w, Z, parts, classes, outside

    def check(self, terms):
        """Raise if some term of W (a :class:`~matmech.linalg.terms.Terms`) cannot be answered."""
        self._check_terms(terms)
        for j in range(len(terms.weights)):
            self._term_parts(terms, j)

    def _check_terms(self, terms):
        if not isinstance(terms, Terms):
            raise TypeError(f"expected the workload's Terms, got {type(terms).__name__}")
        if tuple(terms.domain) != tuple(self.domain):
            raise ValueError(
                f"the workload's attribute sizes {terms.domain} differ from the strategy's {self.domain}"
            )

    def variances(self, terms):
        """Per-answer variances diag(W G⁻ Wᵀ) in W's row order (unit: the whitened noise)."""

        def part(T, Z, parts):
            vec = np.ones(())
            for i in Z:
                fy, _, fn_diag, _ = parts[i]
                vec = np.multiply.outer(vec, fn_diag if i in T else fy * fy / self.g[i])
            return vec / self._lam(T)

        return self._by_term(terms, part, squared=True)

    def _by_term(self, terms, part, *, squared):
        """Σ over each term's classes T of ``part(T, Z, parts)``, times the term's weight
        (squared: for variances) and its factor outside Z, the terms stacked in W's row order."""
        self._check_terms(terms)
        out = []
        for j in range(len(terms.weights)):
            w, Z, parts, classes, outside = self._term_parts(terms, j)
            acc = np.zeros(tuple(len(parts[i][0]) for i in Z))
            for T in classes:
                acc += part(T, Z, parts)
            out.append(((w * w if squared else w) * outside) * acc.reshape(-1))
        return np.concatenate(out) if out else np.zeros(0)

    # -- post-processing of the measurement --------------------------------------------------

    def estimate(self, y, variances):
        """{T: ŝ_T} from the released blocks ``y`` ({S: array}) with noise ``variances`` (one
        per measured subset, in order)."""
        qt = {
            i: f.dense().T
            for i, f in enumerate(self.strategy.factors)
            if not isinstance(f, Identity)
        }
        r: dict[tuple[int, ...], np.ndarray] = {}
        for S, v in zip(self.subsets, variances):
            u = np.asarray(y[S], dtype=np.float64)
            for a, i in enumerate(S):
                if i in qt:
                    u = _along(u, qt[i], a)
            u = u / float(v)
            S2 = [a for a, i in enumerate(S) if self.domain[i] > 1]
            for k in range(len(S2) + 1):
                for keep in itertools.combinations(S2, k):
                    part = u
                    for a in reversed([a for a in range(len(S)) if a not in keep]):
                        i = S[a]
                        part = _contract(part, self.y[i] / self.g[i], a)
                    T = tuple(S[a] for a in keep)
                    r[T] = part + r[T] if T in r else part
        out = {}
        for T in self.classes:
            s = r[T]
            for a, i in enumerate(T):
                s = _along(s, self.N[i], a)
            out[T] = s / self._lam(T)
        return out

    def answers(self, terms, shat):
        """W x̂ in W's row order from the class tables ``shat`` of :meth:`estimate`."""

        def part(T, Z, parts):
            t = shat[T]
            for a, i in enumerate(T):
                F = parts[i][1]
                if F is not None:
                    t = _along(t, F, a)
            rest = [i for i in Z if i not in T]
            for i in rest:
                t = np.multiply.outer(t, parts[i][0])
            order = list(T) + rest
            perm = [order.index(i) for i in Z]
            return np.transpose(t, perm) if perm else t

        return self._by_term(terms, part, squared=False)

    def solve(self, terms, records) -> Answers:
        """The answers to W (``terms``) from the measurement records, one per measured subset
        S in order (:func:`matmech.plans.gmarginal` makes them: values = y_S
        row-major, variance v_S), with their variances diag(W G⁻ Wᵀ):
        :class:`~matmech.linalg.answers.Answers`. Post-processing only."""
        records = tuple(records)
        if len(records) != len(self.subsets):
            raise ValueError(
                f"expected one record per measured subset ({len(self.subsets)}), got {len(records)}"
            )
        y, variances = {}, []
        for S, rec in zip(self.subsets, records):
            if tuple(rec.attributes or ()) != tuple(S):
                raise ValueError(
                    f"the records are not in the plan's subset order: {rec.attributes} for {S}"
                )
            shape = tuple(self.strategy.factors[i].shape[0] for i in S)
            y[S] = np.asarray(rec.values, dtype=np.float64).reshape(shape)
            v = np.asarray(rec.variance, dtype=np.float64)
            if v.size and not np.all(v == v.flat[0]):
                raise ValueError(f"the record of subset {S} must have one noise variance")
            variances.append(float(v.flat[0]) if v.size else 1.0)
        values = self.answers(terms, self.estimate(y, variances))
        return Answers(values, self.variances(terms), method="factored GLS (generalised marginals)")

    def memory(self, terms):
        """Bytes the estimate and the answers need (tables of the subsets and classes, answers)."""
        sub = sum(
            math.prod(self.domain[i] for i in S) for S in self.subsets
        )  # y_S, u_S and contractions
        cls = sum(math.prod(self.domain[i] for i in T) for T in self.classes)  # r_T, ŝ_T
        return 8 * (4 * sub + 3 * cls + 3 * terms.rows + 3 * sum(n * n for n in self.domain))
