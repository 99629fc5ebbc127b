"""Random small release problems and the independent dense GLS oracle (tests/test_oracle.py and
benchmarks/oracle_table.py share them).

The oracle knows nothing of matmech's estimators: it reads the noisy measurement records a
release exposes (``Release.measurements``: query operator, values, noise covariance), forms
dense matrices, whitens each record by its covariance (an unknown common offset, Cov =
D + s·11ᵀ with s = ∞, by the limit of its precision) and solves the stacked least squares
with numpy's SVD: answers W x̂ and variances diag(W (MᵀΣ⁻¹M)⁺ Wᵀ).
"""

from __future__ import annotations

import math

import numpy as np

from matmech import workloads as wl

PATHS = ("histogram", "records", "residual", "gmarginal")
#: Paths that answer W without selection only (with select= the factored release measures the selected rows).
NO_SELECTION = ("residual", "gmarginal")
MODELS = {"pure": 0.0, "approx": 1e-6}
NEIGHBORS = ("add_remove", "substitute")
METHODS = ("none", "svt", "em", "topc-gap", "svt-gap", "adaptive-svt", "vector")
#: Relative tolerance of answers and variances against the oracle (issue 22).
RTOL = 1e-8


def _factor(kind, n, rng):
    if kind == "identity":
        return wl.identity(n)
    if kind == "total":
        return wl.total(n)
    if kind == "prefix":
        return wl.prefix(n)
    if kind == "range":
        lo = rng.integers(0, n, size=3)
        hi = np.minimum(lo + rng.integers(0, n, size=3), n - 1)
        return wl.ranges(n, list(zip(lo.tolist(), hi.tolist())))
    M = rng.integers(0, 2, size=(int(rng.integers(2, 4)), n)).astype(float)  # custom 0/1 rows
    M[0] = M[1] if M.shape[0] > 2 else M[0]  # a duplicate row inside a factor
    M[M.sum(1) == 0, 0] = 1.0
    return wl.from_matrix(M)


def problem(seed):
    """(domain, W, x, codes): 1-4 attributes, at most 200 cells; W a weighted union of 2-3
    Kronecker products (prefix / range / custom 0-1 / identity / total factors) with a block
    repeated (duplicate rows) and an identity next to a total on one attribute (dependent rows)."""
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 5))
    while True:
        domain = tuple(int(v) for v in rng.integers(2, 7, size=d))
        if math.prod(domain) <= 200:
            break
    kinds = ("identity", "total", "prefix", "range", "custom")
    blocks = []
    for _ in range(int(rng.integers(2, 4))):
        blocks.append(wl.kron(*[_factor(kinds[int(rng.integers(0, 5))], n, rng) for n in domain]))
    blocks.append(blocks[0])  # duplicate rows
    a = int(rng.integers(0, d))
    blocks.append(
        wl.kron(
            *[
                wl.stack(wl.identity(n), wl.total(n)) if i == a else wl.total(n)
                for i, n in enumerate(domain)
            ]
        )
    )  # total = sum of the identity rows
    weights = rng.choice([0.5, 1.0, 2.0, 3.0], size=len(blocks))
    W = wl.stack(*blocks, weights=weights)
    n = math.prod(domain)
    x = rng.integers(0, 40, size=n)
    x[rng.integers(0, n)] += 400  # a clear peak, so selected rows are clear
    cells = np.repeat(np.arange(n), x)
    codes = np.column_stack(np.unravel_index(cells, domain)) if d > 1 else cells[:, None]
    return domain, W, x, codes.astype(np.int64)


def select_options(method, W, x):
    """Selection options for ``method`` (None: no selection); thresholds from the true answers
    (a test fixture may look at the data) so that a few rows clear them."""
    if method == "none":
        return None
    q = W.dense() @ x
    thr = float(np.quantile(q, 0.8))
    return {
        "svt": dict(method="svt", c=3, eps=0.3, threshold=thr),
        "em": dict(method="em", c=3, eps=0.3),
        "topc-gap": dict(method="topc-gap", c=3, eps=0.3),
        "svt-gap": dict(method="svt-gap", c=3, eps=0.4, threshold=thr),
        "adaptive-svt": dict(method="adaptive-svt", c=3, eps=0.4, threshold=thr),
        "vector": dict(method="topc-gap", c=3, eps=0.3, vector=True),
    }[method]


def _whiten(rec):
    Q = rec.on_cells().dense()
    v = np.asarray(rec.variance, dtype=np.float64)
    s = float(rec.common_variance)
    if s == 0:
        R = np.diag(1.0 / np.sqrt(v))
    else:  # precision of diag(v) + s 11ᵀ (s = inf: its limit, the offset projected out)
        P = np.diag(1.0 / v) - np.outer(1.0 / v, 1.0 / v) / (
            np.sum(1.0 / v) + (0.0 if math.isinf(s) else 1.0 / s)
        )
        lam, U = np.linalg.eigh((P + P.T) / 2)
        R = (U * np.sqrt(np.clip(lam, 0.0, None))).T
    return R @ Q, R @ rec.values


def dense_gls(records, Wa):
    """(answers, variances) of the rows ``Wa`` (dense) from the records: SVD least squares."""
    parts = [_whiten(r) for r in records]
    M = np.vstack([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    U, S, Vt = np.linalg.svd(M, full_matrices=False)
    keep = S[0] * 1e-10 < S
    G = Wa @ Vt[keep].T / S[keep]
    return G @ (U[:, keep].T @ y), np.sum(G**2, axis=1)


def compare(rel, W):
    """(max |answer − oracle| / scale, max |var − oracle var| / max var) of a release."""
    Wd = W.dense()
    Wa = Wd if rel.selected is None else Wd[rel.selected]
    if Wa.shape[0] == 0:
        return 0.0, 0.0
    a, v = dense_gls(rel.measurements, Wa)
    da = float(np.abs(rel.answers - a).max() / max(1.0, np.abs(a).max()))
    dv = float(np.abs(rel.std**2 - v).max() / v.max())
    return da, dv


def source(path, x, codes):
    return x if path == "histogram" else codes


#: Strategies the oracle rotates through (names, and "workload": W itself, duplicate rows and all).
STRATEGIES = ("identity", "hierarchical", "workload", "haar")


def strategy_for(name, W):
    return W if name == "workload" else name


def marginal_problem(seed):
    """(domain, W, x, codes) with W a weighted union of marginals (duplicate block, total next
    to identity): the residual path's workloads."""
    domain, _, x, codes = problem(seed)
    d = len(domain)
    subsets = [(i,) for i in range(d)] + ([(0, d - 1)] if d > 1 else [])
    blocks = [
        wl.kron(*[wl.identity(n) if i in s else wl.total(n) for i, n in enumerate(domain)])
        for s in subsets
    ]
    blocks += [blocks[0], wl.kron(*[wl.total(n) for n in domain])]
    W = wl.stack(*blocks, weights=np.linspace(1.0, 2.0, len(blocks)))
    return domain, W, x, codes


def run(path, model, method, seed, *, neighbors="add_remove", strategy=None, rng=None):
    """One release of the oracle grid → (release, W)."""
    import matmech as mm

    if path == "residual":
        _, W, x, codes = marginal_problem(seed)
        strat = "residual"
    elif path == "gmarginal":
        _, W, x, codes = problem(seed)
        strat = "gmarginals"
    else:
        _, W, x, codes = problem(seed)
        strat = strategy_for(strategy or STRATEGIES[seed % len(STRATEGIES)], W)
        if path == "records" and method != "none":
            strat = "auto"  # the factored selection measures the selected rows themselves
    data = x if path == "histogram" else codes
    rel = mm.release(
        data,
        W,
        1.0,
        MODELS[model],
        strategy=strat,
        neighbors=neighbors,
        select=select_options(method, W, x),
        rng=np.random.default_rng(seed) if rng is None else rng,
    )
    return rel, W, x
