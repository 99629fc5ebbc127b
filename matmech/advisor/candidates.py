"""The advisor's fixed candidates: the identity, the best hierarchy with and without its root
and Haar for a 1-D workload; on a product domain their Kronecker products per attribute and
the best fixed strategy per attribute; and the workload itself as a strategy (Li, Miklau,
Hay, McGregor and Rastogi, "The matrix mechanism", VLDB J. 2015, §5: the workload and the
identity as strategies)."""

from __future__ import annotations

import math

import numpy as np

from matmech import strategies as S
from matmech.advisor.compare import family_branchings, signature, uniform_sizes
from matmech.error import error_figures, sensitivity
from matmech.privacy.calibration import noise_variance
from matmech.linalg.linop import Kron, LinOp, Scaled, VStack
from matmech.linalg.quadratic import quadratic_trace
from matmech.linalg.spectral import BlockSpectral
from matmech.privacy.calibration import measurement_variance, neighbor_sensitivity
from matmech.optimizers.marginal_lattice import MarginalStrategy
from matmech.optimizers.marginal_workloads import kron_blocks, marginal_workload


# -- candidate construction ---------------------------------------------------------------------


def attributes(W):
    """Per-attribute effective 1-D workloads [(n_i, workload_i)] for a Kronecker/union W, else None."""
    blocks = kron_blocks(W)
    if blocks is None:
        return None
    d = len(blocks[0][1])
    out = []
    for i in range(d):
        parts, weights = [], []
        for w2, fs in blocks:
            parts.append(fs[i])
            weights.append(math.sqrt(w2))
        eff = parts[0] if len(parts) == 1 else VStack(parts, weights=weights)
        out.append((fs[i].shape[1], eff))
    return out


def _unit_error(W, A, delta):
    """sens² · trace term in the units of :func:`error_figures` (ε = 1)."""
    return error_figures(W, A, 1.0, delta, measures=("total",), noise="continuous")["total"]


#: Up to this many cells the 1-D candidates of one attribute are scored from one dense gram
#: of its workload and a Cholesky factor of each AᵀA (:func:`scorer`): the same figure as
#: :func:`_unit_error` up to rounding, without building each strategy's structured inverse
#: (250 such evaluations were half of a five-attribute advise).
DENSE_SCORE_N = 256


def scorer(W, delta):
    """``score(A)``: A's unit error on the 1-D workload W (:func:`_unit_error`; a ValueError
    when A cannot answer W); densely up to :data:`DENSE_SCORE_N` cells, where a strategy
    whose AᵀA is not positive definite goes the exact way (which raises or answers)."""
    n = W.shape[1]
    if n > DENSE_SCORE_N:
        return lambda A: _unit_error(W, A, delta)
    from matmech.linalg.lazy import sla

    G = np.asarray(W.gram().dense(), dtype=np.float64)
    eye = np.eye(n)
    p = 1 if delta == 0 else 2

    def score(A):
        a = np.asarray(A.dense(), dtype=np.float64)
        try:
            factor = sla.cho_factor(a.T @ a, lower=True)
        except np.linalg.LinAlgError:
            return _unit_error(W, A, delta)
        trace = float(np.sum(G * sla.cho_solve(factor, eye)))
        return noise_variance(1.0, delta, sensitivity=sensitivity(A, p)) * trace

    return score


def _uniform_error(W, n, sizes, delta):
    """:func:`_unit_error` of the uniform hierarchy with block ``sizes`` without building it:
    its gram is Σ_ℓ s_ℓ E_{s_ℓ} (block-spectral, :mod:`matmech.linalg.spectral`) and every
    cell lies in one block per level, so its L1 sensitivity is the number of levels (L2:
    its square root): the same figures :func:`error_figures` reads from the built tree."""
    M = BlockSpectral(n, sizes, np.cumsum(sizes, dtype=np.float64)).pinv()
    levels = float(len(sizes))
    sens = neighbor_sensitivity(levels if delta == 0 else math.sqrt(levels), "add_remove")
    return measurement_variance(1.0, delta, sens, discrete=False) * quadratic_trace(W, M)


def _best_hierarchies(n, W, delta, score=None):
    """{root: (params, strategy)} of the searched hierarchies of least exact error, with and
    without the root. Hierarchies equal to an earlier one or to the identity (the leaves
    alone) are skipped, as :func:`matmech.advisor.compare.distinct` does. Uniform ones (bˡ
    dividing n) are scored from their block sizes and only the winners built: at 2²⁴ cells a
    tree holds up to 2²⁵ nodes, and building all twelve cost more than the release."""
    score = score or scorer(W, delta)
    seen = {("sizes", (1,))}  # the leaves alone: the identity
    best: dict = {}
    for b in family_branchings(n, search=True):
        for root in (True, False):
            sizes = uniform_sizes(n, b, root=root)
            A = None if sizes is not None else S.hierarchical(n, b, root=root)
            key = ("sizes", sizes) if A is None else signature(A)
            if key in seen:
                continue
            seen.add(key)
            try:
                e = _uniform_error(W, n, sizes, delta) if A is None else score(A)
            except ValueError:
                continue
            if root not in best or e < best[root][0]:
                best[root] = (e, b, A)
    return {
        root: (
            {"branching": b, "root": root},
            S.hierarchical(n, b, root=root) if A is None else A,
        )
        for root, (_, b, A) in best.items()
    }


def _fixed_1d(n, W, delta):
    """[(name, params, strategy)] for the 1-D workload W on n cells: the identity, the
    hierarchy with the lowest exact error with and without its root, and Haar."""
    out: list[tuple[str, dict, LinOp]] = [("identity", {}, S.identity(n))]
    best = _best_hierarchies(n, W, delta)
    for root in (True, False):
        if root in best:
            out.append(("hierarchical" if root else "hierarchical, no root", *best[root]))
    if n > 1:
        out.append(("haar", {}, S.haar(n)))
    return out


def _products(per):
    """[(name, params, Kron)] of the per-attribute candidates of the same name (names every attribute has)."""
    out = []
    for name, _, _ in per[0]:
        found = [next(((p, a) for nm, p, a in cands if nm == name), None) for cands in per]
        chosen = [c for c in found if c is not None]
        if len(chosen) != len(per):
            continue
        params = {"per_attribute": [c[0] for c in chosen]} if any(c[0] for c in chosen) else {}
        out.append((name, params, Kron(*[c[1] for c in chosen])))
    return out


def _best_per_attribute(attrs, per, delta):
    """("best fixed per attribute", params, Kron): each attribute's fixed 1-D strategy of least 1-D error."""
    picks = []
    for (_, eff), cands in zip(attrs, per):
        scored = []
        score = scorer(eff, delta)
        for name, params, A in cands:
            try:
                scored.append((score(A), name, params, A))
            except ValueError:
                continue
        picks.append(min(scored, key=lambda r: r[0]))
    return (
        "best fixed per attribute",
        {"per_attribute": [dict(name=p[1], **p[2]) for p in picks]},
        Kron(*[p[3] for p in picks]),
    )


def searched_fixed(W, delta):
    """[(name, params, strategy)]: the fixed candidates of W (per attribute on a product domain)."""
    attrs = attributes(W)
    if attrs is None or len(attrs) == 1:
        return _fixed_1d(W.shape[1], attrs[0][1] if attrs else W, delta)
    per, seen = [], {}
    for n, eff in attrs:  # attributes with the same 1-D workload (Loans: four prefix(101)) once
        key = _gram_key(n, eff)
        if key is None or key not in seen:
            got = _fixed_1d(n, eff, delta)
            if key is not None:
                seen[key] = got
        per.append(got if key is None else seen[key])
    return [*_products(per), _best_per_attribute(attrs, per, delta)]


def _gram_key(n, eff):
    """A key equal for attributes whose 1-D workloads have the same gram (their candidates and
    errors are the same), up to :data:`DENSE_SCORE_N` cells; else None."""
    if n > DENSE_SCORE_N:
        return None
    try:
        g = np.asarray(eff.gram().dense(), dtype=np.float64)
    except (ValueError, MemoryError, TypeError):
        return None
    return (n, g.tobytes())


def workload_strategy(W: LinOp) -> LinOp:
    """W itself; a union of marginals as the equal :class:`MarginalStrategy` (same rows, with a
    structured pseudo-inverse)."""
    marg = marginal_workload(W)
    if marg is not None:
        terms, domain = marg
        theta = np.zeros(1 << len(domain))
        for w2, subset in terms:
            theta[sum(1 << i for i in subset)] += math.sqrt(w2)
        if np.all(
            np.bincount([sum(1 << i for i in s) for _, s in terms], minlength=theta.size) <= 1
        ):
            return MarginalStrategy(domain, theta)
    return W.base if isinstance(W, Scaled) else W
