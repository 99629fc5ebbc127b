"""Any marginal of the lattice from the noisy residuals, in closed form (post-processing).

The residuals are orthogonal and each is measured exactly once (one full orthonormal basis of
its subspace), so the least-squares estimate of every marginal is unique and explicit
(Xiao et al., NeurIPS 2023, §4):

    M̂_S = Σ_{T⊆S} (⊗_{i∈T} Qᵢᵀ ⊗ ⊗_{i∈S∖T} 1/nᵢ) ŷ_T ,

and, the noises being independent, the variance of each cell is
Σ_{T⊆S} [(⊗_{i∈T} Qᵢ∘Qᵢ)ᵀ v_T] / Π_{i∈S∖T} nᵢ², v_T the exact per-coordinate variances of
residual T (:mod:`matmech.measurements.residual`). Per residual the lifted vector over T's cells
is computed once and shared by every marginal that contains T.

``nonneg_consistent`` is optional post-processing: it clips negative cells and rescales
every marginal to the noisy total; the result is private but biased, and the analytic
variances no longer describe it.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from matmech.measurements.residual import ResidualMeasurement
from matmech.linalg.answers import Answers
from matmech.linalg.residual import (
    apply_axes,
    apply_axes_batched,
    contrast_operators,
    exact_cell_variances,
    lift_row_variances,
)


_CHUNK = 1 << 20  # cells of the marginals built as one stack (8 MB temporaries: under
# glibc's 32 MB mmap ceiling they are reused from the heap instead of faulted in afresh)


_PER_MARGINAL = 1 << 12  # cells of a marginal from which its variances are lifted alone


def _slots(offsets, K, cells):
    """For marginals ``K`` (indices into the row ``offsets``) at equal distances in the
    rows (one, two, or consecutive ones), a function giving their rows of an output array
    as one (len(K), cells) strided view; else None."""
    gaps = {int(offsets[b]) - int(offsets[a]) for a, b in zip(K, K[1:])}
    if len(gaps) > 1:
        return None
    step = gaps.pop() if gaps else cells
    first = int(offsets[K[0]])

    def view(arr):
        return np.lib.stride_tricks.as_strided(
            arr[first:], shape=(len(K), cells), strides=(step * arr.itemsize, arr.itemsize)
        )

    return view


def _batch_last(arrays):
    """The arrays stacked on a new last axis (one array: a view of it, no copy)."""
    if len(arrays) == 1:
        return np.asarray(arrays[0])[..., None]
    return np.stack(arrays, axis=-1)


def _lift(coords, domain, T):
    return apply_axes(coords, [contrast_operators(domain[i])[1] for i in T])


class MarginalReconstructor:
    """Marginals and their exact per-cell variances from a :class:`ResidualMeasurement`.

    ``marginal(S)`` → (estimate, variance), arrays of shape (nᵢ, i ∈ S). The lifted residuals
    are cached (memory: one float per cell of every residual's marginal, twice).
    """

    def __init__(self, measurement):
        if not isinstance(measurement, ResidualMeasurement):
            raise TypeError(f"expected a ResidualMeasurement, got {type(measurement).__name__}")
        self.measurement = measurement
        self.lattice = measurement.plan.plan.lattice
        self._res = set(self.lattice.residuals)
        self._est, self._var = {}, {}

    def _parts(self, T):
        if T not in self._est:
            d = self.lattice.domain
            self._est[T] = _lift(self.measurement.coords[T], d, T)
            self._var[T] = exact_cell_variances(d, T, self.measurement.row_variances[T])
        return self._est[T], self._var[T]

    def marginal(self, S):
        S = tuple(sorted(int(a) for a in S))
        d = self.lattice.domain
        shape = tuple(d[i] for i in S)
        est, var = np.zeros(shape), np.zeros(shape)
        for k in range(len(S) + 1):
            for mask in itertools.combinations(range(len(S)), k):
                T = tuple(S[j] for j in mask)
                if not all(d[i] > 1 for i in T):
                    continue
                if T not in self._res:
                    raise ValueError(f"residual {T} of the marginal on {S} was not measured")
                e, v = self._parts(T)
                view = tuple(d[i] if i in T else 1 for i in S)
                rest = math.prod(d[i] for i in S if i not in T)
                est += e.reshape(view) / rest
                var += v.reshape(view) / rest**2
        return est, var

    def stacked(self, subsets, weights=None):
        """(answers, variances) of the marginals on ``subsets`` one after another, each
        flattened row-major and scaled by its weight (default 1): the rows of a marginal
        workload in order. Marginals with the same attribute sizes are built as one stack
        (the same sums as :meth:`marginal`, in the same order); a marginal's own top residual
        is lifted in the stack and not cached."""
        subsets = [tuple(sorted(int(a) for a in s)) for s in subsets]
        weights = (
            np.ones(len(subsets)) if weights is None else np.asarray(weights, dtype=np.float64)
        )
        d = self.lattice.domain
        sizes = np.array([math.prod(d[i] for i in S) for S in subsets], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        answers, var = np.empty(int(offsets[-1])), np.empty(int(offsets[-1]))
        groups: dict[tuple[int, ...], list[int]] = {}
        for k, S in enumerate(subsets):
            groups.setdefault(tuple(d[i] for i in S), []).append(k)
        # one pair of stack buffers for every chunk (no fresh temporaries chunk by chunk)
        room = max(max(1, _CHUNK // max(1, math.prod(sh))) * math.prod(sh) for sh in groups)
        room = min(room, max(math.prod(sh) * len(m) for sh, m in groups.items()))
        bufs = (np.empty(room), np.empty(room))
        for shape, members in groups.items():
            step = max(1, _CHUNK // max(1, math.prod(shape)))
            for at in range(0, len(members), step):
                K = members[at : at + step]
                slots = _slots(offsets, K, math.prod(shape))
                if slots is not None:  # equally spaced in W's rows: built where they go
                    est, v = self._stack(
                        [subsets[k] for k in K], shape, (slots(answers), slots(var))
                    )
                    est, v = est.reshape(len(K), -1), v.reshape(len(K), -1)
                    for row, k in enumerate(K):
                        if weights[k] != 1.0:  # w·x in place: the same product
                            np.multiply(weights[k], est[row], out=est[row])
                            np.multiply(weights[k] * weights[k], v[row], out=v[row])
                    continue
                est, v = self._stack([subsets[k] for k in K], shape, bufs)
                est, v = est.reshape(len(K), -1), v.reshape(len(K), -1)
                for row, k in enumerate(K):  # each marginal is one slice: no index arrays
                    w, cut = weights[k], slice(offsets[k], offsets[k + 1])
                    np.multiply(w, est[row], out=answers[cut])
                    np.multiply(w * w, v[row], out=var[cut])
        return answers, var

    def answers(self, subsets, weights=None) -> Answers:
        """:meth:`stacked` as :class:`~matmech.linalg.answers.Answers` (the answers of the
        weighted marginals ``subsets`` and their exact variances), computed from the
        measurement's records (:attr:`ResidualMeasurement.records`)."""
        values, var = self.stacked(subsets, weights)
        return Answers(values, var, method="residual closed form (Xiao et al. 2023)")

    def _stack(self, Ss, shape, bufs=None):
        """(estimates, variances) of the marginals on ``Ss`` (all with attribute sizes
        ``shape``), stacked on axis 0: :meth:`marginal`'s sum, term by term (in ``bufs``,
        two float64 buffers, flat or one row per marginal, when given). The running sums
        are kept on the smallest grid their terms span (the total, then its sum with the
        one-way terms, ...) and written at full size only once they span every attribute:
        each cell is the same sequence of additions, computed once per distinct value. The
        marginal's own residual is lifted and added in one pass."""
        k, n = len(shape), len(Ss)
        full = (n, *shape)
        if bufs is None:
            bufs = (np.empty(math.prod(full)), np.empty(math.prod(full)))
        # views of the buffers (flat, or one row per marginal): never a copy
        out = tuple(
            np.reshape(b.reshape(-1)[: math.prod(full)] if b.ndim == 1 else b, full, copy=False)
            for b in bufs
        )
        run = [None, None]  # the running sums, the total first (0 + term: -0.0 becomes 0.0)

        def add(i, term):
            if run[i] is None:
                run[i] = np.add(term, 0.0)
            elif run[i] is out[i]:
                np.add(out[i], term, out=out[i])
            elif np.broadcast_shapes(run[i].shape, term.shape) == full:
                run[i] = np.add(run[i], term, out=out[i])
            else:
                run[i] = run[i] + term

        def written(i):
            if run[i] is not out[i]:
                np.copyto(out[i], run[i])
                run[i] = out[i]
            return out[i]

        for r in range(k + 1):
            for mask in itertools.combinations(range(k), r):
                if not all(shape[j] > 1 for j in mask):
                    continue
                Ts = [tuple(S[j] for j in mask) for S in Ss]
                for S, T in zip(Ss, Ts):
                    if T not in self._res:
                        raise ValueError(f"residual {T} of the marginal on {S} was not measured")
                if r == k and r > 0:  # each marginal's own residual: lifted as a stack, not kept
                    # (stacked batch-last, added without the /1: fewer full-size copies)
                    q = [contrast_operators(m) for m in shape]
                    est, var = written(0), written(1)
                    cs = _batch_last([self.measurement.coords[T] for T in Ts])
                    apply_axes_batched(cs, [c[1] for c in q], batch_last=True, add_to=est)
                    del cs
                    if math.prod(shape) < _PER_MARGINAL:
                        vs = _batch_last([self.measurement.row_variances[T] for T in Ts])
                        apply_axes_batched(vs, [c[2] for c in q], batch_last=True, add_to=var)
                        continue
                    for b, T in enumerate(Ts):  # large: one by one, on the norm classes
                        rv = self.measurement.row_variances[T]
                        np.add(var[b], lift_row_variances(shape, rv), out=var[b])
                    continue
                view = (n, *(shape[j] if j in mask else 1 for j in range(k)))
                rest = math.prod(shape[j] for j in range(k) if j not in mask)
                add(0, np.stack([self._parts(T)[0] for T in Ts]).reshape(view) / rest)
                add(1, np.stack([self._parts(T)[1] for T in Ts]).reshape(view) / rest**2)
        return written(0), written(1)


def nonneg_consistent(marginals, total=None):
    """Post-processing: clip each marginal at 0 and rescale it to ``total`` (default: the
    mean of the marginals' own sums, floored at 0). Returns new arrays; biased (the analytic
    error bars do not apply to them)."""
    sums = [float(np.sum(m)) for m in marginals.values()]
    t = max(0.0, float(np.mean(sums))) if total is None else max(0.0, float(total))
    out = {}
    for s, m in marginals.items():
        c = np.clip(np.asarray(m, dtype=np.float64), 0.0, None)
        tot = c.sum()
        out[s] = c * (t / tot) if tot > 0 else np.full(c.shape, t / c.size)
    return out
