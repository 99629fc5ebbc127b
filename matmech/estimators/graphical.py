"""Measurement records -> a graphical model (private-pgm) -> consistent tables and records.

The hand-off (issue 35): every :class:`~matmech.measurements.record.MeasurementRecord` whose query acts on a
marginal (``attributes`` set: the residual, table and Kronecker records of the factored
paths; or, ``attributes`` None, the whole histogram of a product domain) is one
``mbi.LinearMeasurement``: ``y = Q·μ_T + e`` with μ_T the marginal on T, Q the record's query
as a linear map of that marginal (a residual basis over T is one), e independent with the
record's diagonal variance v. mbi takes one std per measurement, so a record whose variances
differ is whitened: y/√v with the query diag(1/√v)·Q and std 1 (the same weighted least
squares). A record with a common (unknown-offset) variance has no such form and is refused.

mbi (McKenna, Sheldon, Miklau, "Graphical-model based estimation and inference for
differential privacy", ICML 2019; ``mbi`` 2.x, JAX) fits the Markov random field whose
marginals minimise Σ‖(Q μ_T − y)/σ‖² over the marginal polytope (its mirror descent,
Algorithm 1): the tables it returns are non-negative, agree on every shared attribute and
sum to one total. That total is the inverse-variance mean of the unbiased estimates of N the
records allow (a record whose query's row space holds the all-ones functional; mbi itself
uses only identity queries), or the ``total`` given. Everything here is post-processing of
released values: no data is read, nothing is spent.

Records are sampled from the model by forward sampling along the junction tree's
elimination order, each column from its conditional given the earlier columns it shares a
clique with, with stratified uniforms (a random order within each parent group, one uniform
per rank: the randomized rounding of mbi's ``synthetic_data``), drawn from matmech's
random source (``rng``), never from numpy's global generator.

No error bars: the fitted tables are biased (non-negativity and consistency pull small cells
up and large ones down) and their error depends on the unknown data; no interval is given.
"""

from __future__ import annotations

import functools
import hashlib
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from matmech.privacy.randomness import check_rng


#: What to do when mbi is not installed.
MBI_MISSING = (
    "consistent tables and synthetic records need private-pgm's mbi (JAX): "
    "pip install 'matmech-dp[synth]'"
)

#: Largest graphical model (cells of its junction tree: 8 bytes each, several copies) fitted.
MAX_MODEL_CELLS = 1 << 25

#: Largest dense query (entries) a record with no Kronecker structure is handed over as.
MAX_DENSE_QUERY = 1 << 24


def load_mbi():
    """(mbi, jax), imported quietly (mbi warns about float32 and JAX's compilation cache at
    import; every fit here runs in float64). ImportError naming the extra when missing."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import jax
            import mbi
    except ImportError as e:
        raise ImportError(MBI_MISSING) from e
    return mbi, jax


@dataclass(frozen=True, eq=False)
class MarginalQuery:
    """A record's query as mbi calls it: ``f`` (an mbi Factor on the clique, axes in the
    clique's order) → ``weights · (⊗ factors) vec(f)``; ``factors`` one matrix per axis (a
    Kronecker query) or a single matrix over the flattened marginal (``kron`` False).
    Hashed and compared by value (mbi keeps the query as static JIT metadata: equal queries
    reuse one compiled fit, e.g. refitting the same release; the maps are constants of it)."""

    factors: tuple
    kron: bool
    weights: np.ndarray | None = field(default=None, repr=False)
    key: bytes = field(init=False, repr=False)

    def __post_init__(self):
        h = hashlib.blake2b(repr((self.kron, len(self.factors))).encode(), digest_size=20)
        for a in (*self.factors, self.weights):
            if a is None:
                h.update(b"none")
                continue
            a = np.ascontiguousarray(a, dtype=np.float64)
            h.update(repr(a.shape).encode())
            h.update(a.tobytes())
        object.__setattr__(self, "key", h.digest())

    def __call__(self, f):
        import jax.numpy as jnp

        t = f.datavector(flatten=not self.kron)
        if self.kron:
            for ax, M in enumerate(self.factors):
                t = jnp.moveaxis(jnp.tensordot(jnp.asarray(M), t, axes=([1], [ax])), 0, ax)
            t = t.reshape(-1)
        else:
            t = jnp.asarray(self.factors[0]) @ t
        return t if self.weights is None else t * jnp.asarray(self.weights)

    def apply(self, table: np.ndarray) -> np.ndarray:
        """The same map on a numpy table (axes in the clique's order): for checks."""
        t = np.asarray(table, dtype=float)
        if self.kron:
            for ax, M in enumerate(self.factors):
                t = np.moveaxis(np.tensordot(M, t, axes=([1], [ax])), 0, ax)
            t = t.reshape(-1)
        else:
            t = self.factors[0] @ t.reshape(-1)
        return t if self.weights is None else t * self.weights

    def op_norm_sq(self) -> float:
        """An upper bound on ‖query‖₂² (mbi's step size; an overestimate only slows it)."""
        w = 1.0 if self.weights is None else float(np.max(self.weights)) ** 2
        return w * math.prod(float(np.linalg.norm(M, 2)) ** 2 for M in self.factors)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MarginalQuery) and self.key == other.key


def _attributes(record, d: int) -> tuple[int, ...]:
    return tuple(range(d)) if record.attributes is None else tuple(record.attributes)


def _factors(record, sizes: Sequence[int]) -> tuple[tuple, bool]:
    """The record's query as per-axis matrices (Kronecker) or one dense matrix; ValueError
    when it does not act on the marginal of its attributes."""
    attrs = _attributes(record, len(sizes))
    shape = tuple(int(sizes[i]) for i in attrs)
    Q = record.query
    if Q.shape[1] != math.prod(shape):
        raise ValueError(
            f"a record's query has {Q.shape[1]:,} columns, not the {math.prod(shape):,} cells of "
            f"the marginal on attributes {attrs} of a domain of sizes {tuple(sizes)}"
        )
    kf = getattr(Q, "kron_factors", None)
    fs = kf() if callable(kf) else None
    if fs is not None and len(fs) == len(attrs) and all(f.shape[1] == k for f, k in zip(fs, shape)):
        return tuple(np.asarray(f.dense(), dtype=float) for f in fs), True
    if Q.shape[0] * Q.shape[1] > MAX_DENSE_QUERY:
        raise ValueError(
            f"a record's {Q.shape[0]:,}×{Q.shape[1]:,} {type(Q).__name__} query has no Kronecker "
            f"structure over its attributes and is too large to hand over densely "
            f"(at most {MAX_DENSE_QUERY:,} entries)"
        )
    return (np.asarray(Q.dense(max_entries=MAX_DENSE_QUERY), dtype=float),), False


def _std(record) -> np.ndarray:
    v = np.asarray(record.variance, dtype=float)
    if record.common_variance != 0:
        raise ValueError(
            "a record with a common variance (an unknown common offset, e.g. a selection's gaps) "
            "has no independent-noise form for mbi; pass the measurement records only"
        )
    if not np.all(np.isfinite(v) & (v > 0)):
        raise ValueError("a record's variances must be positive and finite to weight it")
    return np.sqrt(v)


def linear_measurements(records, *, names: Sequence, sizes: Sequence[int]) -> list:
    """mbi ``LinearMeasurement`` s of ``records`` (module docstring): one per record, its
    clique the record's attributes by ``names``, its query a :class:`MarginalQuery`."""
    mbi, _ = load_mbi()
    out = []
    for r in records:
        attrs = _attributes(r, len(sizes))
        factors, kron = _factors(r, sizes)
        sd = _std(r)
        y = np.asarray(r.values, dtype=float)
        clique = tuple(names[i] for i in attrs)
        if np.all(sd == sd.flat[0]):
            q = MarginalQuery(factors, kron)
            out.append(mbi.LinearMeasurement(y, clique, stddev=float(sd.flat[0]), query=q))
        else:
            q = MarginalQuery(factors, kron, weights=1.0 / sd)
            out.append(mbi.LinearMeasurement(y / sd, clique, stddev=1.0, query=q))
    return out


def _ones_coefficients(M: np.ndarray) -> np.ndarray | None:
    """c with Mᵀc = 1 (least norm), or None when 1 is not in M's row space."""
    c, *_ = np.linalg.lstsq(M.T, np.ones(M.shape[1]), rcond=None)
    return c if np.allclose(M.T @ c, 1.0, atol=1e-9, rtol=0) else None


def total_estimate(records, *, sizes: Sequence[int]) -> tuple[float, float] | None:
    """(N̂, Var N̂): the inverse-variance mean of the unbiased estimates cᵀy of the record
    count that the records allow (Qᵀc = 1, factor by factor for a Kronecker query), or None
    when no record determines it."""
    est, var = [], []
    for r in records:
        factors, kron = _factors(r, sizes)
        c = np.ones(1)
        for M in factors:
            ci = _ones_coefficients(M)
            if ci is None:
                break
            c = np.kron(c, ci)
        else:
            est.append(float(c @ np.asarray(r.values, dtype=float)))
            var.append(float(c**2 @ np.asarray(r.variance, dtype=float)))
    if not est:
        return None
    w = 1.0 / np.asarray(var)
    return float(w @ np.asarray(est) / w.sum()), float(1.0 / w.sum())


@dataclass(frozen=True, eq=False)
class GraphicalModel:
    """A fitted Markov random field over a product domain: ``table(attributes)`` its
    marginal (counts, non-negative, summing to ``total``, consistent across tables),
    ``sample(n, rng=...)`` records drawn from it. ``cliques``: the measured attribute sets
    (by name). No error bars (module docstring)."""

    names: tuple
    sizes: tuple
    total: float
    cliques: tuple
    model: Any = field(repr=False)
    _cache: dict = field(default_factory=dict, init=False, repr=False)

    def _names(self, attributes) -> tuple:
        out = []
        for a in attributes:
            if isinstance(a, (int, np.integer)) and not isinstance(a, bool):
                if not 0 <= a < len(self.names):
                    raise ValueError(f"attribute index {a} is outside 0..{len(self.names) - 1}")
                out.append(self.names[int(a)])
            elif a in self.names:
                out.append(a)
            else:
                raise ValueError(f"no attribute {a!r}; the domain has {list(self.names)}")
        if len(set(out)) != len(out):
            raise ValueError(f"attributes must be distinct, got {list(attributes)}")
        return tuple(out)

    def table(self, attributes) -> np.ndarray:
        """The model's marginal on ``attributes`` (names or indices; axes in that order),
        by variable elimination on its log-potentials in numpy (:func:`eliminate`)."""
        clique = self._names(attributes)
        if "factors" not in self._cache:
            _, jax = load_mbi()
            with jax.enable_x64(True):
                tables = self.model.potentials.tables
                self._cache["factors"] = [
                    (tuple(f.domain.attributes), np.asarray(f.values, dtype=float))
                    for f in tables.values()
                ]
        sizes = dict(zip(self.names, self.sizes))
        logp = eliminate(self._cache["factors"], clique, sizes)
        p = np.exp(logp - logp.max())
        return p * (self.total / p.sum())

    def sample(self, n: int, *, rng=None) -> np.ndarray:
        """``n`` records (an n × attributes int64 code array, the domain's column order)."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"n must be a non-negative integer number of records, got {n!r}")
        src = check_rng(rng)
        mbi, jax = load_mbi()
        with jax.enable_x64(True):
            dom = mbi.Domain(self.names, self.sizes)
            jtree, order = mbi.junction_tree.make_junction_tree(dom, list(self.cliques))
        nodes = [set(c) for c in jtree.nodes]
        codes = np.zeros((int(n), len(self.names)), dtype=np.int64)
        used: list = []
        for col in order[::-1]:
            parents = tuple(a for a in used if any(col in c and a in c for c in nodes))
            table = self.table(parents + (col,))
            k = table.shape[-1]
            cond = table.reshape(-1, k)
            tot = cond.sum(axis=1, keepdims=True)
            cond = np.where(tot > 0, cond / np.where(tot > 0, tot, 1.0), 1.0 / k)
            if parents:
                idx = [self.names.index(a) for a in parents]
                group = np.ravel_multi_index(codes[:, idx].T, table.shape[:-1])
            else:
                group = np.zeros(int(n), dtype=np.int64)
            codes[:, self.names.index(col)] = _stratified(cond, group, src)
            used.append(col)
        return codes


def _aligned(attrs: tuple, table: np.ndarray, union: tuple) -> np.ndarray:
    """``table`` over ``attrs`` as an array broadcastable over ``union`` (axes in its order)."""
    present = [a for a in union if a in attrs]
    t = np.transpose(table, [attrs.index(a) for a in present])
    return t.reshape([table.shape[attrs.index(a)] if a in attrs else 1 for a in union])


def _union_cells(facs, a, *, sizes) -> int:
    return math.prod(sizes[b] for b in {b for attrs, _ in facs if a in attrs for b in attrs})


def eliminate(factors, query: tuple, sizes: dict) -> np.ndarray:
    """log of the unnormalised marginal on ``query`` of exp(Σ factors) (each factor
    (attributes, log-table)): sum-product variable elimination in log space, the attribute
    whose elimination makes the smallest table first (Koller and Friedman 2009, Alg. 9.1)."""
    facs = list(factors)
    elim = {a for attrs, _ in facs for a in attrs} - set(query)
    while elim:
        a = min(sorted(elim), key=functools.partial(_union_cells, facs, sizes=sizes))
        elim.discard(a)
        hit = [f for f in facs if a in f[0]]
        facs = [f for f in facs if a not in f[0]]
        union = tuple(dict.fromkeys(b for attrs, _ in hit for b in attrs))
        total = sum(_aligned(attrs, t, union) for attrs, t in hit)
        ax = union.index(a)
        m = np.max(total, axis=ax, keepdims=True)
        m = np.where(np.isfinite(m), m, 0.0)
        out = np.log(np.sum(np.exp(total - m), axis=ax)) + np.squeeze(m, axis=ax)
        facs.append((union[:ax] + union[ax + 1 :], out))
    shape = tuple(sizes[a] for a in query)
    logp = np.zeros(shape)
    for attrs, t in facs:
        logp = logp + _aligned(attrs, t, query)
    return np.broadcast_to(logp, shape).copy()


def model_cells(dom, cliques, mbi) -> int:
    """Cells of the junction tree of ``cliques`` (attribute names) over the mbi Domain ``dom``."""
    jtree, _ = mbi.junction_tree.make_junction_tree(dom, [tuple(c) for c in cliques])
    return sum(math.prod(dom[a] for a in node) for node in jtree.nodes)


def _uniforms(src, n: int) -> np.ndarray:
    """n uniforms in [0, 1) from the random source (53 bits each)."""
    return (src.words64(n) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def _stratified(cond: np.ndarray, group: np.ndarray, src) -> np.ndarray:
    """For each row i, a category drawn from ``cond[group[i]]``: within each group the rows
    are put in a uniformly random order and the r-th of c gets the uniform (r + U)/c, so a
    group's counts are its conditional times c up to rounding (randomized rounding)."""
    n = group.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(src.words64(n), kind="stable")  # a uniformly random order
    order = order[np.argsort(group[order], kind="stable")]  # grouped, random within groups
    counts = np.bincount(group, minlength=cond.shape[0])
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - starts[group[order]]
    u = (rank + _uniforms(src, n)) / counts[group]
    k = cond.shape[1]
    cdf = np.cumsum(cond, axis=1)
    cdf[:, -1] = 1.0
    shifted = (cdf + np.arange(cond.shape[0])[:, None]).reshape(-1)
    pick = np.searchsorted(shifted, group + u, side="right") - group * k
    return np.clip(pick, 0, k - 1)


def fit_model(
    records,
    *,
    names: Sequence,
    sizes: Sequence[int],
    total: float | None = None,
    iters: int = 1000,
    warm_start: GraphicalModel | None = None,
    max_cells: int = MAX_MODEL_CELLS,
) -> GraphicalModel:
    """Fit mbi's Markov random field to ``records`` (module docstring) → :class:`GraphicalModel`.

    ``total``: the record count the tables sum to (a public or released figure); None takes
    the records' own estimate (ValueError when they have none). ``iters``: mirror-descent
    iterations. ``warm_start``: a model fitted earlier on the same domain (the adaptive loop).
    ``max_cells``: the largest model (cells of its junction tree) fitted; a larger one is
    refused before any work.
    """
    records = tuple(records)
    if not records:
        raise ValueError("no measurement records to fit a model to")
    names, sizes = tuple(names), tuple(int(s) for s in sizes)
    if len(names) != len(sizes) or len(set(names)) != len(names):
        raise ValueError(f"names {names} must be distinct, one per size in {sizes}")
    if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
        raise ValueError(f"iters must be a positive integer, got {iters!r}")
    if total is None:
        t = total_estimate(records, sizes=sizes)
        if t is None:
            raise ValueError(
                "the records do not determine the number of records (no query holds the total); "
                "pass total="
            )
        total = t[0]
    total = float(total)
    if not (math.isfinite(total) and total > 0):
        raise ValueError(f"total must be a positive number of records, got {total!r}")
    mbi, jax = load_mbi()
    with jax.enable_x64(True):
        ms = linear_measurements(records, names=names, sizes=sizes)
        dom = mbi.Domain(names, sizes)
        cells = model_cells(dom, [m.clique for m in ms if m.clique], mbi)
        if cells > max_cells:
            raise ValueError(
                f"the measured attribute sets make a graphical model of {cells:,} cells (its "
                f"junction tree), more than max_cells={max_cells:,}: measure fewer or smaller "
                "marginals (a union of overlapping marginals closes into large cliques)"
            )
        model = mbi.estimation.MirrorDescent().estimate(
            dom,
            ms,
            known_total=total,
            iters=iters,
            warm_start=None if warm_start is None else warm_start.model,
        )
    cliques = tuple(dict.fromkeys(m.clique for m in ms if m.clique))
    return GraphicalModel(names, sizes, total, cliques, model)
