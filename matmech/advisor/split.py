"""Split plans: a union measured in parts, the budget divided optimally between them (issue 32).

W = [W₁; …; W_k] (the blocks of a stack) is grouped into parts; each part gets the best single
plan :mod:`matmech.advisor.planner` finds for it alone (fitted to its own support, so a range
workload over one attribute is measured on that attribute's table, not on the whole domain),
and a share of the budget:

* pure ε: part i's total error at ε_i is E_i·(ε/ε_i)² (E_i its error at the whole ε), so at a
  fixed Σε_i = ε the optimum has ε_i ∝ E_i^{1/3} and total (Σ E_i^{1/3})³ (Lagrange);
* (ε, δ): every part is Gaussian, its error E_i·ρ/ρ_i, the parts' zCDP ρ_i adding up to the
  ρ of the one calibration of (ε, δ) (:func:`matmech.plans.split.gaussian_shares`), so
  ρ_i ∝ √E_i and total (Σ √E_i)².

The shares are rounded (pure ε to four significant digits of decimal ε) and the total
recomputed from them exactly. Under (ε, δ) a split is the stack of its parts' strategies
measured by one Gaussian mechanism (zCDP adds ρ exactly as the stack's L2 sensitivity adds),
answered part by part instead of jointly: so :mod:`matmech.advisor.advise` tries splits
under (ε, δ) only when no optimiser family ranked a joint plan for the whole workload. Parts tried: the marginal blocks together and the others grouped
by their support; the marginals apart from everything else; every block alone; at most
:data:`MAX_PARTS` parts each. The row's recipe builds a :class:`matmech.plans.split.SplitPlan`
(:func:`matmech.plans.planned.build_plan`).
"""

from __future__ import annotations

import math

import numpy as np

from matmech.advisor.compare import Candidate
from matmech.advisor.planner import target_of
from matmech.linalg.terms import as_terms
from matmech.linalg.linop import VStack
from matmech.privacy.calibration import gaussian_sigma, zcdp_to_approx_dp
from matmech.privacy.params import rest_of


#: The most parts a split is made of (each is planned on its own).
MAX_PARTS = 6
#: Relative slack kept off the parts' ρ under (ε, δ): the ε of each part's calibration comes
#: from a numerical minimisation (:func:`~matmech.privacy.calibration.zcdp_to_approx_dp`)
#: whose float error must not push the parts' ρ past the whole calibration's.
RHO_SLACK = 1e-9


def _blocks(W):
    """W's blocks as [(block, rows)] when W is a stack of two or more blocks, else None."""
    if not isinstance(W, VStack) or len(W.blocks) < 2:
        return None
    o = W.offsets
    return [(b, np.arange(o[i], o[i + 1])) for i, b in enumerate(W.blocks)]


def _block_class(b, i):
    """("marginals",) for a block of marginals, ("support", U) for another Kronecker block,
    ("block", i) for a block without Kronecker form; with the block's attribute sizes."""
    try:
        terms = as_terms(b, name="W")
    except (TypeError, ValueError):
        return ("block", i), (int(b.shape[1]),)
    if terms.marginals() is not None and len(terms.domain) > 1:
        return ("marginals",), tuple(terms.domain)
    return ("support", terms.support), tuple(terms.domain)


def partitions(W) -> list:
    """[(label, parts)]: the groupings of W's blocks a split tries, each a tuple of parts
    (tuples of block indices), 2 to :data:`MAX_PARTS` parts, distinct."""
    blocks = _blocks(W)
    if blocks is None:
        return []
    classes = [_block_class(b, i) for i, (b, _) in enumerate(blocks)]
    if len({sizes for _, sizes in classes}) != 1:
        return []  # parts read tables over one set of attribute sizes
    keys = [key for key, _ in classes]
    by_class: dict = {}
    for i, key in enumerate(keys):
        by_class.setdefault(key, []).append(i)
    marg = tuple(i for i, key in enumerate(keys) if key == ("marginals",))
    rest = tuple(i for i, key in enumerate(keys) if key != ("marginals",))
    out, seen = [], set()
    # the marginal blocks stay together: the residual plan of their union searches weights
    # over every table a split of them would measure, so it is never worse
    alone = ([marg] if marg else []) + [(i,) for i in rest]
    for label, parts in (
        ("by kind and support", [tuple(v) for v in by_class.values()]),
        ("marginals and the rest", [marg, rest]),
        ("every block alone", alone),
    ):
        kept = tuple(p for p in parts if p)
        key = frozenset(kept)
        if 2 <= len(kept) <= MAX_PARTS and key not in seen:
            seen.add(key)
            out.append((label, kept))
    return out


def part_workload(W, part):
    """(the part's workload, its rows in W): the blocks ``part`` of the stack W, weighted as
    in W, and their row indices in W in the part's row order."""
    o = W.offsets
    rows = np.concatenate([np.arange(o[i], o[i + 1]) for i in part])
    if len(part) == 1 and W.weights[part[0]] == 1.0:
        return W.blocks[part[0]], rows
    return VStack([W.blocks[i] for i in part], weights=W.weights[list(part)]), rows


def _describe(W, part):
    """A short label of a part: its block kinds and row count."""
    kinds = []
    for i in part:
        key, _ = _block_class(W.blocks[i], i)
        kinds.append(
            "marginals"
            if key[0] == "marginals"
            else ("block" if key[0] == "block" else "terms on " + "".join(map(str, key[1])))
        )
    return f"{'/'.join(dict.fromkeys(kinds))} ({sum(W.blocks[i].shape[0] for i in part):,} rows)"


def laplace_shares(eps: float, weights) -> tuple[float, ...]:
    """Decimal ε shares of a pure-ε total ``eps`` in proportion to ``weights`` (positive),
    rounded to four significant digits, the last part taking what is left so that their
    exact decimal sum is at most ``eps`` (:func:`matmech.privacy.params.rest_of`)."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size < 1 or not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise ValueError(f"the shares' weights must be positive and finite, got {w.tolist()}")
    left, out = float(eps), []
    for wi in (w / w.sum())[:-1].tolist():
        share = float(f"{eps * wi:.4g}")
        out.append(share)
        left = rest_of(left, share)
    if left <= 0:
        raise ValueError(f"eps={eps!r} cannot be split into {w.size} positive shares")
    return (*out, left)


def rho_of(eps: float, delta: float) -> float:
    """The ρ of the one Gaussian calibration of (ε, δ): σ = Δ/√(2ρ) of
    :func:`~matmech.privacy.calibration.gaussian_sigma` read back at Δ = 1 (its float margin
    makes this at most the calibration's own ρ)."""
    return 1.0 / (2.0 * gaussian_sigma(eps, delta, 1.0) ** 2)


def gaussian_shares(eps: float, delta: float, weights) -> tuple[tuple[float, float], ...]:
    """(ε_i, δ) per part for (ε, δ) split in zCDP: part i gets ρ_i = w_i ρ / Σw (times
    1 − :data:`RHO_SLACK`), ρ the one Gaussian calibration's, and is calibrated at the ε_i
    that ρ_i-zCDP gives with the same δ (CKS 2020, Cor. 13), so its discrete Gaussian has
    σ_i = Δ_i/√(2ρ_i) and Σρ_i ≤ ρ: the parts together are (ε, δ)-DP."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size < 1 or not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise ValueError(f"the shares' weights must be positive and finite, got {w.tolist()}")
    rho = rho_of(eps, delta) * (1.0 - RHO_SLACK)
    return tuple((zcdp_to_approx_dp(rho * wi, delta), delta) for wi in (w / w.sum()).tolist())


def shares_for(eps, delta, totals):
    """(shares, total): each part's (ε_i, δ_i) for parts of total error ``totals`` at the
    whole (ε, δ) (continuous noise), and the split's total error at those shares."""
    E = np.asarray(totals, dtype=np.float64)
    if delta == 0:
        shares = tuple((e, 0.0) for e in laplace_shares(eps, np.cbrt(E)))
        total = float(sum(Ei * (eps / e) ** 2 for Ei, (e, _) in zip(E.tolist(), shares)))
        return shares, total
    shares = gaussian_shares(eps, delta, np.sqrt(E))
    unit = gaussian_sigma(eps, delta, 1.0) ** 2
    total = float(
        sum(Ei * gaussian_sigma(e, d, 1.0) ** 2 / unit for Ei, (e, d) in zip(E.tolist(), shares))
    )
    return shares, total


def _support(W, part):
    """The attributes some block of ``part`` does not total over (None without Kronecker form)."""
    out: set = set()
    for i in part:
        try:
            out |= set(as_terms(W.blocks[i], name="W").support)
        except (TypeError, ValueError):
            return None
    return out


def split_rows(ctx, W, plan_part) -> list:
    """The split rows of W: for every grouping of :func:`partitions`, each part planned by
    ``plan_part(target)`` (its ranked rows, best first; skipped ones left out) and the budget
    divided optimally between the parts' best plans. A work rule bounds the planning: a
    grouping with a part as wide as W (its support every attribute of W's support, on two or
    more attributes, other than the part of marginals, which the tables route plans in closed
    form) is not planned: that part costs as much as the whole job again."""
    cache: dict = {}
    out = []
    whole = _support(W, range(len(W.blocks))) if isinstance(W, VStack) else None

    def too_wide(p):
        if all(_block_class(W.blocks[i], i)[0] == ("marginals",) for i in p):
            return False
        return _support(W, p) == whole

    for label, groups in partitions(W):
        if whole is not None and len(whole) > 1 and any(too_wide(p) for p in groups):
            continue
        parts = []
        for part in groups:
            if part not in cache:
                Wp, rows = part_workload(W, part)
                ranked = [r for r in plan_part(target_of(Wp)) if r.skipped is None and r.recipe]
                cache[part] = (_describe(W, part), rows, ranked[0] if ranked else None)
            parts.append(cache[part])
        if any(p[2] is None for p in parts):
            continue
        totals = [p[2].total for p in parts]
        try:
            shares, total = shares_for(ctx.eps, ctx.delta, totals)
        except ValueError:
            continue
        unit = "eps" if ctx.delta == 0 else "rho"
        if ctx.delta == 0:
            fraction = [e / ctx.eps for e, _ in shares]
        else:
            w = np.sqrt(np.asarray(totals))
            fraction = (w / w.sum()).tolist()
        desc = " + ".join(
            f"{p[0]}: {p[2].name} at {s:.3g} of {unit}" for p, s in zip(parts, fraction)
        )
        note = f"split ({label}): {desc}; each part measured separately, the budget charged once"
        m = W.shape[0]
        out.append(
            Candidate(
                name=f"split: {' + '.join(p[2].name for p in parts)}",
                total=total,
                rmse=math.sqrt(total / m),
                ratio_to_bound=total / ctx.bound if ctx.bound else None,
                seconds=sum(p[2].seconds for p in parts),
                params={
                    "grouping": label,
                    "parts": [
                        {
                            "part": p[0],
                            "plan": p[2].name,
                            "share": round(s, 4),
                            "rmse_alone": p[2].rmse,
                        }
                        for p, s in zip(parts, fraction)
                    ],
                },
                kind="split",
                reason=f"the parts measured separately with the {unit} divided optimally ({desc})",
                recipe={
                    "workload": W,
                    "parts": tuple(parts),
                    "errors": tuple(totals),
                    "note": note,
                },
            )
        )
    return out
