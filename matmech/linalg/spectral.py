"""Grams diagonalised by nested block averages (identity, uniform hierarchies, Haar on 2^k
cells), and the covariance of trees and Haar on nested partitions of any sizes.

Let E_s average a vector over aligned blocks of s cells (E_s = I_{n/s} ⊗ 11ᵀ/s). For block
sizes 1 = s₀ < s₁ < … < s_L with each dividing the next (and s_L dividing n) the operators
E_s commute, and Π_ℓ = E_{s_ℓ} − E_{s_{ℓ+1}} (Π_L = E_{s_L}) are orthogonal projectors that
sum to I. The gram of a uniform b-ary hierarchy, Σ_ℓ w_ℓ² s_ℓ E_{s_ℓ}, and of the
unnormalised Haar matrix (Xiao, Wang, Gehrke, ICDE 2010), Σ_ℓ s_{ℓ+1} Π_ℓ + n E_n, are
both Σ_ℓ λ_ℓ Π_ℓ. Their pseudo-inverses are Σ_ℓ λ_ℓ⁺ Π_ℓ, and
trace(G Π_ℓ) needs only the block energies Σ_B ‖W 1_B‖² of the workload.
"""

from __future__ import annotations

import numpy as np

from matmech.linalg.linop import LinOp, check_size


class BlockSpectral(LinOp):
    """The symmetric operator Σ_ℓ λ_ℓ Π_ℓ over nested aligned block partitions."""

    def __init__(self, n, sizes, eigenvalues):
        n = check_size(n)
        sizes = [int(s) for s in sizes]
        lam = np.asarray(eigenvalues, dtype=np.float64)
        if not sizes or sizes[0] != 1 or lam.shape != (len(sizes),):
            raise ValueError(
                f"need block sizes starting at 1 and one eigenvalue per size, got sizes={sizes}, eigenvalues={lam.tolist()}"
            )
        for a, b in zip(sizes, sizes[1:] + [n]):
            if b % a or (b == a and b != n):
                raise ValueError(
                    f"block sizes must increase, each dividing the next and n={n}; got {sizes}"
                )
        if not np.all(np.isfinite(lam)) or np.any(lam < 0):
            raise ValueError(f"eigenvalues must be finite and non-negative, got {lam.tolist()}")
        self.n, self.sizes, self.eigenvalues = n, tuple(sizes), lam
        self.shape = (n, n)

    def _averages(self, x):
        """E_s x for every block size s."""
        k = x.shape[1]
        return [np.repeat(x.reshape(self.n // s, s, k).mean(1), s, axis=0) for s in self.sizes]

    def _matmat(self, x):
        avg = self._averages(x) + [0.0]
        return sum(lam * (avg[i] - avg[i + 1]) for i, lam in enumerate(self.eigenvalues))

    _rmatmat = _matmat

    def _with(self, eigenvalues):
        return BlockSpectral(self.n, self.sizes, eigenvalues)

    def pinv(self, rtol=1e-10):
        lam = self.eigenvalues
        keep = lam > rtol * lam.max()
        return self._with(np.where(keep, 1.0 / np.where(keep, lam, 1.0), 0.0))

    def null_projector(self, rtol=1e-10):
        """The projector onto the null space (eigenvalue 0), or None when full rank."""
        lam = self.eigenvalues
        null = lam <= rtol * lam.max()
        return self._with(null.astype(np.float64)) if null.any() else None

    def level_weights(self):
        """Coefficients c with Σ_ℓ λ_ℓ Π_ℓ = Σ_ℓ c_ℓ E_{s_ℓ}."""
        return np.diff(self.eigenvalues, prepend=0.0)

    def diagonal(self):
        return np.full(self.n, float((self.level_weights() / np.asarray(self.sizes)).sum()))

    def _dense(self):
        return self._matmat(np.eye(self.n))

    def trace_against(self, block_energy):
        """trace(G · self) from a function s ↦ Σ_B ‖W 1_B‖² over blocks of size s."""
        return float(sum(c * block_energy(s) / s for c, s in zip(self.level_weights(), self.sizes)))

    # -- quadratic-form hooks (matmech.linalg.quadratic) -------------------------------------
    def covariance_trace(self, W):
        """trace(W · self · Wᵀ) from W's block energies (interval workloads), else None."""
        be = getattr(W, "block_energy", None)
        return None if be is None else self.trace_against(be)

    def covariance_diag(self, W):
        """diag(W · self · Wᵀ) from W's block overlaps (interval workloads), else None."""
        bo = getattr(W, "block_overlaps", None)
        if bo is None:
            return None
        return sum(c * bo(s) / s for c, s in zip(self.level_weights(), self.sizes))


# -- nested partitions of any sizes: trees and Haar for every n --------------------------------------
#
# For a strategy whose rows are sums (or, for Haar, left-minus-right differences) of the
# blocks of nested partitions of the cells, the least-squares error of the block sums
# propagates top-down (Hay, Rastogi, Miklau, Suciu, VLDB 2010, §4, in belief-propagation
# form): with e_v the error of the estimate of block v's sum and c the children of v,
#
#     e_c = q_c e_v + r_c,   Σ_c q_c = 1,   Cov(r) = S_v (diag(q) − q qᵀ),
#
# the r of different blocks independent of each other and of e_v. For a tree with node noise
# variances o_v: V_v = o_v S_v / (o_v + S_v) bottom-up, S_v = Σ_c V_c, q_c = V_c / S_v; for
# Haar every two-child block has q = (½, ½) and S_v = the variance of its difference row.
# Prefix errors E(k) then have closed forms level by level (see NestedCovariance), so the
# error of any interval workload costs O(n · levels) with no constraint on the block sizes.


class NestedCovariance(LinOp):
    """(AᵀA)⁻¹ (the covariance of the least-squares cell estimates, unit noise) of a strategy
    whose errors follow the top-down model above, for any n and any block sizes.

    ``levels``: bottom-up list of (parent, q, S): ``parent[j]`` the block (at this level) of
    block j of the level below (level 0: the cells; non-decreasing), ``q[j]`` its share, ``S``
    per block of this level; the top level has one block, whose error variance is ``root_var``.
    """

    def __init__(self, n, levels, root_var):
        self.n = check_size(n)
        self.shape = (self.n, self.n)
        self.root_var = float(root_var)
        self.levels = []
        size = self.n
        for parent, q, S in levels:
            parent = np.asarray(parent, dtype=np.int64)
            q, S = np.asarray(q, dtype=np.float64), np.asarray(S, dtype=np.float64)
            if (
                parent.shape != (size,)
                or q.shape != (size,)
                or (
                    size
                    and (
                        parent[0] != 0 or np.any(np.diff(parent) < 0) or np.any(np.diff(parent) > 1)
                    )
                )
                or S.shape != (int(parent[-1]) + 1,)
            ):
                raise ValueError(
                    "nested levels must map every block below to a contiguous run of parents 0, 1, ..."
                )
            first = np.flatnonzero(np.r_[True, parent[1:] != parent[:-1]])
            Q = np.cumsum(q) - q
            Q -= np.repeat(Q[first], np.diff(np.r_[first, size]))
            self.levels.append((parent, q, S, Q, first))
            size = S.size
        if size != 1:
            raise ValueError(f"the top level must have one block, got {size}")

    @property
    def depth(self):
        return len(self.levels)

    # -- the covariance as an operator -----------------------------------------------------
    def _matmat(self, x):
        g = [x]
        for parent, q, S, Q, first in self.levels:
            g.append(np.add.reduceat(q[:, None] * g[-1], first, axis=0))
        val = self.root_var * g[-1]
        for lvl in range(len(self.levels) - 1, -1, -1):
            parent, q, S, Q, first = self.levels[lvl]
            gp = g[lvl + 1][parent]
            val = q[:, None] * val[parent] + (S[parent] * q)[:, None] * (g[lvl] - gp)
        return val

    _rmatmat = _matmat

    def diagonal(self):
        var = np.array([self.root_var])
        for parent, q, S, Q, first in reversed(self.levels):
            var = q * q * var[parent] + S[parent] * q * (1.0 - q)
        return var

    # -- prefix errors E(k) = Σ_{i<k} (x̂_i − x_i) -------------------------------------------
    def prefix_variances(self):
        """Var E(k) for k = 0..n (n+1 values), O(n · levels)."""
        alpha, rho, blk = np.ones(self.n), np.zeros(self.n), np.arange(self.n)
        for parent, q, S, Q, first in self.levels:
            qj, Qj = q[blk], Q[blk]
            new = Qj + qj * alpha
            blk = parent[blk]
            rho += S[blk] * (Qj + alpha * alpha * qj - new * new)
            alpha = new
        return np.concatenate([[0.0], alpha * alpha * self.root_var + rho])

    def functional_variance(self, f):
        """Var(Σ_i f_i (x̂_i − x_i)) = fᵀ M f, O(n · levels)."""
        a, total = np.asarray(f, dtype=np.float64), 0.0
        for parent, q, S, Q, first in self.levels:
            up = np.add.reduceat(q * a, first)
            total += float((S[parent] * q * a * a).sum() - (S * up * up).sum())
            a = up
        return total + float(a[0] ** 2) * self.root_var

    def _paths(self, cells):
        """Per level (0 = cells): the block index and α of the prefix ending at each cell."""
        blk, alpha = np.asarray(cells, dtype=np.int64), np.ones(len(cells))
        out = [(blk, alpha)]
        for parent, q, S, Q, first in self.levels:
            alpha = Q[blk] + q[blk] * alpha
            blk = parent[blk]
            out.append((blk, alpha))
        return out

    def prefix_covariances(self, a, b):
        """Cov(E(a), E(b)) for arrays 0 ≤ a ≤ b ≤ n, O(len · levels)."""
        a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
        out = np.zeros(a.size)
        live = (a > 0) & (b > 0)
        if not live.any():
            return out
        pa, pb = self._paths(np.maximum(a - 1, 0)), self._paths(np.maximum(b - 1, 0))
        top = len(self.levels)
        out = pa[top][1] * pb[top][1] * self.root_var
        active = live.copy()
        for lvl in range(top, 0, -1):
            parent, q, S, Q, first = self.levels[lvl - 1]
            (ja, aa), (jb, ab) = pa[lvl - 1], pb[lvl - 1]
            blk, av, bv = pa[lvl][0], pa[lvl][1], pb[lvl][1]
            same = active & (ja == jb)
            split = active & (ja != jb)
            s = S[blk]
            out = out + np.where(same, s * (Q[ja] + aa * ab * q[ja] - av * bv), 0.0)
            out = out + np.where(split, s * av * (1.0 - bv), 0.0)
            active = same
        return np.where(live, out, 0.0)

    def interval_variances(self, lo, hi, prefix=None):
        """Var of the estimate of Σ_{lo..hi} x for each interval (inclusive bounds)."""
        p = self.prefix_variances() if prefix is None else prefix
        a, b = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64) + 1
        return p[a] + p[b] - 2.0 * self.prefix_covariances(a, b)

    def interval_trace(self, W):
        """trace(W M Wᵀ) for an interval workload W (:class:`matmech.linalg.intervals.Intervals`)."""
        p = self.prefix_variances()
        kind = getattr(W, "kind", None)
        if kind == "all_range":  # (n+1)·Σ_k C_kk − 1ᵀC1, the second through u_i = n − i
            return float(
                (self.n + 1) * p.sum()
                - self.functional_variance(np.arange(self.n, 0, -1, dtype=np.float64))
            )
        if kind == "prefix":
            return float(p.sum())
        return float(
            sum(self.interval_variances(lo, hi, p).sum() for _, lo, hi in W._chunks(1 << 16))
        )

    # -- quadratic-form hooks (matmech.linalg.quadratic) -------------------------------------
    def covariance_trace(self, W):
        """trace(W · self · Wᵀ): interval workloads in closed form, the cells themselves
        (W = I, ``is_identity``) as the diagonal's sum; else None."""
        if getattr(W, "bounds", None) is not None and getattr(W, "_chunks", None) is not None:
            return self.interval_trace(W)
        if getattr(W, "is_identity", False):
            return float(self.diagonal().sum())
        return None

    def covariance_diag(self, W):
        """diag(W · self · Wᵀ) for interval workloads, else None."""
        if getattr(W, "bounds", None) is not None and getattr(W, "_chunks", None) is not None:
            return self.interval_diagonal(W)
        return None

    def interval_diagonal(self, W):
        p = self.prefix_variances()
        return np.concatenate(
            [self.interval_variances(lo, hi, p) for _, lo, hi in W._chunks(1 << 16)]
        )

    # -- builders -------------------------------------------------------------------------------
    @classmethod
    def from_tree(cls, n, lo, hi, parent, node_var=None):
        """The model of a tree strategy (rows: the nodes' interval sums, noise variances
        ``node_var``, default 1) whose leaves are the n cells; None when the nodes are not a
        tree of nested intervals with single-cell leaves."""
        lo, hi, parent = (np.asarray(a, dtype=np.int64) for a in (lo, hi, parent))
        N = lo.size
        var = np.ones(N) if node_var is None else np.asarray(node_var, dtype=np.float64)
        if parent.shape != (N,) or N == 0 or parent.min() < -1 or parent.max() >= N:
            return None
        depth = tree_depths(parent)
        if depth is None:
            return None
        has_child = np.zeros(N, dtype=bool)
        has_child[parent[parent >= 0]] = True
        leaves = np.flatnonzero(~has_child)
        if (
            leaves.size != n
            or np.any(lo[leaves] != hi[leaves])
            or np.any(np.bincount(lo[leaves], minlength=n) != 1)
        ):
            return None
        roots = np.flatnonzero(parent < 0)
        if (
            roots.size != 1 or lo[roots[0]] != 0 or hi[roots[0]] != n - 1
        ):  # a forest: virtual root, no row
            lo, hi = np.r_[lo, 0], np.r_[hi, n - 1]
            parent = np.where(parent < 0, N, parent)
            parent = np.r_[parent, -1]
            var, depth = np.r_[var, np.inf], np.r_[depth + 1, 0]
            has_child = np.r_[has_child, True]
            N += 1
        D = int(depth.max())
        leaf = ~has_child
        # level d: the nodes of depth d and the leaves above it (carried down unchanged)
        # breadth-first trees (hierarchical()) are sorted by depth, then lo: no sort needed
        dd, ll = depth, lo
        if np.all((dd[1:] > dd[:-1]) | ((dd[1:] == dd[:-1]) & (ll[1:] > ll[:-1]))):
            order = np.arange(N)
        else:
            order = np.lexsort((lo, depth))
        by_depth = np.split(order, np.searchsorted(depth[order], np.arange(1, D + 1)))
        members: list[np.ndarray] = []
        carried = np.zeros(0, dtype=np.int64)
        for d in range(D + 1):
            here = by_depth[d]
            members.append(
                here
                if carried.size == 0
                else (lambda m: m[np.argsort(lo[m], kind="stable")])(
                    np.concatenate([here, carried])
                )
            )
            if leaf[here].any():
                carried = np.concatenate([carried, here[leaf[here]]])
        for m in members:
            if lo[m[0]] != 0 or hi[m[-1]] != n - 1 or np.any(lo[m[1:]] != hi[m[:-1]] + 1):
                return None
        if members[D].size != n:
            return None
        pos = np.empty(N, dtype=np.int64)
        V = var[members[D]].copy()  # the leaves' own rows
        if not np.all(np.isfinite(V)) or np.any(V <= 0):
            return None
        levels = []
        for d in range(D, 0, -1):
            up, down = members[d - 1], members[d]
            pos[up] = np.arange(up.size)
            par_node = np.where(depth[down] == d, parent[down], down)
            par = pos[par_node]
            if (
                np.any(np.diff(par) < 0)
                or np.any(lo[down] < lo[up[par]])
                or np.any(hi[down] > hi[up[par]])
            ):
                return None
            first = np.flatnonzero(np.r_[True, par[1:] != par[:-1]])
            S = np.add.reduceat(V, first)
            own = np.where(depth[up] == d - 1, var[up], np.inf)  # a carried leaf has no new row
            own = np.where(
                leaf[up] & (depth[up] == d - 1), np.inf, own
            )  # its row sits at the bottom
            with np.errstate(invalid="ignore", divide="ignore"):
                newV = np.where(np.isfinite(own), own * S / (own + S), S)
            levels.append((par, V / S[par], S))
            V = newV
        return cls(n, levels, float(V[0]))

    @classmethod
    def haar(cls, n):
        """The model of the Haar strategy on n cells (:class:`matmech.strategies.Haar`):
        dyadic blocks cut at n, a block with an empty right half passed through unchanged."""
        n = check_size(n)
        levels, nc = [], n
        while nc > 1:  # nc blocks of the level below, paired left to right
            npar = -(-nc // 2)
            par = np.arange(nc) // 2
            pair = 2 * np.arange(npar) + 1 < nc
            levels.append((par, np.where(pair[par], 0.5, 1.0), pair.astype(np.float64)))
            nc = npar
        return cls(n, levels, 1.0)


def tree_depths(parent):
    """Depth of every node of a parent-pointer forest by pointer doubling (O(N log depth));
    None when ``parent`` has a cycle."""
    dist = (parent >= 0).astype(np.int64)
    nxt = parent.copy()
    for _ in range(max(1, parent.size).bit_length() + 2):
        live = np.flatnonzero(nxt >= 0)
        if live.size == 0:
            return dist
        up = nxt[live]
        dist[live] += dist[up]
        nxt[live] = nxt[up]
    return None
