"""The Kronecker families' factor fits: one 1-D fit per distinct factor of a Kronecker workload,
block coordinate descent over the factors of a union of Kronecker products (McKenna, Miklau,
Hay and Machanavajjhala, "Optimizing error of high-dimensional statistical queries under
differential privacy" (HDMM), PVLDB 2018, §6.2), and the 1-D fit both use (p-Identity under
pure ε, the certified L2 dual fixed point under (ε, δ))."""

from __future__ import annotations

import functools
import math

import numpy as np

from matmech.linalg.linop import Identity, Kron
from matmech.linalg.structured import pinv_gram
from matmech.optimizers import (
    general_marginal_error as gm_error,
    l2 as opt_l2,
    marginal_workloads,
    pure as opt_pure,
)
from matmech.optimizers.gram import GramOperator, distinct_by_id, factor_gram
from matmech.optimizers.pidentity import PIdentity


#: Rounds of block coordinate descent over the factors of a union of Kronecker products.
KRON_ROUNDS = 3
#: Largest memory (bytes) for the dense per-attribute grams of a union of Kronecker products
#: (terms × Σᵢ nᵢ² doubles): refused up front with a ValueError beyond it.
MAX_KRON_GRAM_BYTES = 4 << 30
#: Pure-ε Kronecker fits add this many deterministic random-like starts (Weyl fills,
#: :func:`matmech.optimizers.pure.fit_pidentity` ``fill_starts``) to every 1-D fit: on HDMM's
#: census workloads the hierarchy starts alone stop at RMSE 7.77 / 10.88 (HDMM 7.48 / 10.33).
KRON_FILL_STARTS = 1
#: ``method="auto"``: a union-of-Kronecker ``kron`` run (block coordinate descent) stops after
#: its first round when its total squared error is then above this multiple of the best
#: family's so far (10× in RMSE; recorded in ``params["tried"]["kron"]["stopped"]``). Not a
#: certified bound: the later rounds gain at most 36× in squared error on HDMM's suite
#: (adult_W2: RMSE 6750 after round 1, 1127 after 3; loans_W2 10520 → 2135; adultsmall_W2
#: 27.1 → 23.4), and where it stops (loans, adult) kron ends 8-84× above the best family.
KRON_CUTOFF_RATIO = 100.0
#: The quadratic-fill multistart of single-Kronecker factor fits is skipped for identity-total
#: factor grams a·I + b·11ᵀ (identities, totals, [I; T] stacks: cps_W1, adultsmall_W1): over
#: n ∈ {2, …, 128} and b/a ∈ {0, 0.1, …, 1000} (60 grams) the 20 extra starts lowered the
#: fitted trace once, by 1.5e-5 relative (n = 75, b/a = 10), at 5× the time.
KRON_SKIP_QUAD_FILLS_IT = True
#: ``method="auto"``: the ``kron`` family's 1-D factor fits of a single Kronecker workload (a
#: superset of the starts the ``kronstack`` family would run on the same factor) are reused by
#: ``kronstack`` for factors of at most this many cells (the key is the dense factor gram).
SHARE_FIT_MAX_N = 1024


def fit_1d(
    gram_op,
    delta,
    *,
    restarts,
    rng,
    maxiter,
    time_limit,
    callback,
    fill_starts=0,
    quad_fills=0,
    polish=None,
):
    """(strategy, value = sens² · trace(G (AᵀA)⁻¹), params) for one gram."""
    if delta > 0:
        inverse = opt_l2.tridiagonal_inverse(gram_op)
        fit = opt_l2.dual_l2(
            gram_op.dense(),
            maxiter=maxiter or 500,
            time_limit=time_limit,
            callback=callback,
            inverse=inverse,
        )
        return (
            fit.strategy,
            fit.value,
            {"dual": fit.dual, "gap": max(fit.gap, 0.0), "iterations": fit.iterations},
        )
    fit = opt_pure.fit_pidentity(
        gram_op,
        restarts=restarts,
        rng=rng,
        maxiter=maxiter,
        time_limit=time_limit,
        callback=callback,
        fill_starts=fill_starts,
        quad_fills=quad_fills,
        polish=polish,
    )
    ident = float(gram_op.diag.sum())  # Θ = 0: the identity, also in the family
    if ident <= fit.value:
        return Identity(gram_op.n), ident, {"init": "identity", "p": 0}
    params = {
        "p": int(fit.theta.shape[0]),
        "init": fit.init,
        "evaluations": fit.evaluations,
        "starts": fit.starts,
    }
    return PIdentity(fit.theta), fit.value, params


def _traces_with(grams_dense, strategy):
    """[sens² · trace(G (AᵀA)⁺)] for each G of ``grams_dense``, for a 1-D strategy with sens = 1
    (our optimisers' outputs); the dense (AᵀA)⁺ is formed once for all of them."""
    m, _ = pinv_gram(strategy)
    md = m.dense(max_entries=opt_pure.MAX_PIDENTITY_N**2) if not isinstance(m, Identity) else None
    return [float(np.trace(g)) if md is None else float((g * md).sum()) for g in grams_dense]


def check_kron_memory(blocks, limit=None):
    """Refuse (ValueError) a union of Kronecker products whose dense factor grams would not fit."""
    limit = MAX_KRON_GRAM_BYTES if limit is None else limit
    need = 8 * sum(f.shape[1] ** 2 for _, fs in blocks for f in fs)
    big = max(f.shape[1] for _, fs in blocks for f in fs)
    if big > opt_pure.MAX_PIDENTITY_N:
        raise ValueError(
            f"method='kron' on a union of Kronecker products needs attribute sizes <= {opt_pure.MAX_PIDENTITY_N}, got {big}"
        )
    if need > limit:
        raise ValueError(
            f"method='kron' on this union of {len(blocks)} Kronecker products needs about {need / 2**30:.1f} GiB "
            f"of dense factor grams (limit {limit / 2**30:.1f} GiB, MAX_KRON_GRAM_BYTES)"
        )
    return need


def fit_kron(W, delta, *, restarts, rng, maxiter, time_limit, report, cutoff=None, shared=None):
    blocks = marginal_workloads.kron_blocks(W)
    d = len(blocks[0][1])
    fit = functools.partial(  # one factor's fit, with the options of every fit here
        fit_1d,
        restarts=restarts,
        rng=rng,
        maxiter=maxiter,
        time_limit=time_limit,
        callback=None,
        fill_starts=KRON_FILL_STARTS,
    )
    if len(blocks) == 1:
        factors, values, params, done = [], [], [], {}
        prefit = {}  # pure ε: the factor fits, for the kronstack family (SHARE_FIT_MAX_N)
        for i, f in enumerate(blocks[0][1]):
            report(i / d, f"factor {i + 1}/{d} (n={f.shape[1]})")
            op = GramOperator.from_workload(f)
            # equal factors (e.g. all ranges on both axes) are optimised once
            key = (
                (op.kind, op.n, op.scale)
                if op.kind != "dense"
                else (op.kind, op.n, op.dense().tobytes())
            )
            if key not in done:
                # each distinct factor is fitted once here, so small ones get the deterministic
                # quadratic-fill multistart (opt_pure.QUAD_FILL_STARTS), except identity-total
                # grams a·I + b·11ᵀ (KRON_SKIP_QUAD_FILLS_IT)
                quad = opt_pure.QUAD_FILL_STARTS if op.n <= opt_pure.QUAD_FILL_MAX_N else 0
                if quad and KRON_SKIP_QUAD_FILLS_IT and gm_error.identity_total_gram(op.dense()):
                    quad = 0
                fa, fv, fp = fit(op, delta, quad_fills=quad)
                done[key] = (fa, fv, {**fp, "quad_fills": quad} if delta == 0 else fp)
            a, v, p = done[key]
            if delta == 0 and op.n <= SHARE_FIT_MAX_N:
                prefit[(op.n, op.dense().tobytes())] = (a, v)
            factors.append(a)
            values.append(v)
            params.append(p)
        out = {"factors": tuple(params), "rounds": 1}
        if shared is not None and prefit:
            shared["factor_fits"] = prefit
            shared["kron_factors"] = tuple(factors)
        if delta > 0:
            # the Kronecker product of factor optima is optimal (its dual point factors too):
            # the product of certified factor bounds bounds the product problem
            prim, dual = math.prod(values), math.prod(p["dual"] for p in params)
            out["gap"] = max(0.0, (prim - dual) / prim)
        return Kron(*factors), out
    # a union Σⱼ wⱼ² ⊗ᵢ Gᵢⱼ: block coordinate descent (HDMM §6.2)
    check_kron_memory(blocks)
    grams = [[factor_gram(f, opt_pure.MAX_PIDENTITY_N**2) for f in fs] for _, fs in blocks]
    # per attribute: the distinct gram arrays and each term's index among them
    distinct, uniq = [], []
    for i in range(d):
        arrays, at = distinct_by_id([row[i] for row in grams])
        distinct.append(arrays)
        uniq.append(at)
    w2 = np.array([w for w, _ in blocks])
    costs = np.array(
        [[float(np.trace(g)) for g in row] for row in grams]
    )  # start: identity factors
    factors = [Identity(grams[0][i].shape[0]) for i in range(d)]
    best, history = (math.inf, list(factors)), []
    steps, step = KRON_ROUNDS * d, 0
    for rnd in range(KRON_ROUNDS):
        for i in range(d):
            report(step / steps, f"round {rnd + 1}, factor {i + 1}/{d}")
            step += 1
            others = np.prod(np.delete(costs, i, axis=1), axis=1) * w2
            # Σ_k c_k G_ik over the distinct grams (terms repeat a few factors: factor_gram)
            g_eff = sum(
                float(c) * g for c, g in zip(np.bincount(uniq[i], weights=others), distinct[i])
            )
            op = GramOperator.from_gram(g_eff)
            a, _, _ = fit(op, delta)
            factors[i] = a
            costs[:, i] = np.asarray(_traces_with(distinct[i], a))[uniq[i]]
            total = float((w2 * np.prod(costs, axis=1)).sum())
            history.append(total)
            if total < best[0]:
                best = (total, list(factors))
        if cutoff is not None and rnd + 1 < KRON_ROUNDS and best[0] > cutoff:
            out = {
                "rounds": rnd + 1,
                "history": tuple(history),
                "stopped": f"after round {rnd + 1} of {KRON_ROUNDS}: above {KRON_CUTOFF_RATIO:g}x the best family so far",
            }
            return Kron(*best[1]), {**out, "trace": best[0]}
    return Kron(*best[1]), {"rounds": KRON_ROUNDS, "history": tuple(history), "trace": best[0]}
