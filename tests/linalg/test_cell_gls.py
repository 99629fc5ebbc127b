"""The dense GLS over the cells (matmech.linalg.gls.cell_gls): its variances are the row sums
of W ∘ (J⁺Wᵀ)ᵀ, never the m × m covariance unless asked for, and its memory is estimated
and refused up front (matmech.validate.memory, the rule of every dense path in linalg).

Checked against an independent dense computation: numpy's pinv of J = Σ Qᵢᵀ Pᵢ Qᵢ and the
full W J⁺ Wᵀ, on small random records, J of full rank and singular."""

import re

import numpy as np
import pytest

from matmech import limits, validate
from matmech.estimators.gls import estimate
from matmech.linalg import gls
from matmech.linalg.gls import cell_gls, cell_gls_bytes, precision
from matmech.linalg.linop import Dense
from matmech.measurements.record import MeasurementRecord


def _records(rng, n, *, rank):
    """Two records over n cells whose stacked queries have the given rank: (parts for
    cell_gls, the dense J, a matrix whose rows span the row space of J)."""
    basis = rng.normal(size=(rank, n))
    parts = []
    for k, common in ((7, 0.0), (5, np.inf)):  # i.i.d.-per-row noise, then an unknown offset
        Q = rng.normal(size=(k, rank)) @ basis
        v = rng.uniform(0.5, 3.0, size=k)
        parts.append((Q, rng.normal(size=k), precision(v, common)))
    J = sum(Q.T @ P @ Q for Q, _, P in parts)
    return parts, J, basis


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("rank", [8, 5])  # J of full rank (n = 8), then singular
def test_the_diagonal_path_equals_the_dense_covariance(seed, rank):
    rng = np.random.default_rng(seed)
    n, m = 8, 11
    parts, J, basis = _records(rng, n, rank=rank)
    W = rng.normal(size=(m, rank)) @ basis  # in the row space of J
    Jp = np.linalg.pinv(J, rcond=1e-10, hermitian=True)
    cov = W @ Jp @ W.T
    h = sum(Q.T @ P @ y for Q, y, P in parts)
    got = cell_gls(parts, W)
    assert got.covariance is None  # nothing m × m formed
    np.testing.assert_allclose(got.variances, np.diag(cov), rtol=1e-9)
    np.testing.assert_allclose(got.values, W @ (Jp @ h), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got.cov(), cov, rtol=1e-9, atol=1e-9 * np.abs(cov).max())
    full = cell_gls(parts, W, covariance=True)
    np.testing.assert_allclose(full.covariance, cov, rtol=1e-9, atol=1e-9 * np.abs(cov).max())
    np.testing.assert_allclose(full.variances, got.variances, rtol=1e-12)
    assert full.values.tobytes() == got.values.tobytes()
    values_only = cell_gls(parts, W, variances=False)
    assert values_only.variances is None
    assert values_only.values.tobytes() == got.values.tobytes()
    if rank == n:  # the cells themselves: W = I
        cells = cell_gls(parts)
        np.testing.assert_allclose(cells.variances, np.diag(Jp), rtol=1e-9)
    else:  # a row outside the row space of J is refused on every path
        out = W.copy()
        out[0] += np.linalg.svd(basis)[2][-1]  # a direction J does not see
        for kw in ({}, {"covariance": True}, {"variances": False}):
            with pytest.raises(ValueError, match="not in the row space"):
                cell_gls(parts, out, **kw)


def _limit(monkeypatch, nbytes):
    from matmech import limits

    monkeypatch.setattr(limits, "memory_room", lambda: limits.Room(int(nbytes), "a test limit"))


def test_memory_is_refused_up_front_with_m_the_bytes_and_the_limit(monkeypatch):
    rng = np.random.default_rng(0)
    n, m = 8, 40
    parts, _, basis = _records(rng, n, rank=n)
    W = rng.normal(size=(m, n))
    need, need_cov = cell_gls_bytes(m, n), cell_gls_bytes(m, n, covariance=True)
    assert need == 8 * (4 * n * n + 3 * m * n) and need_cov == need + 8 * 3 * m * m
    _limit(monkeypatch, need - 1)
    monkeypatch.setattr(gls, "_psd_factor", lambda J: pytest.fail("J factorised before the check"))
    msg = (
        f"the dense GLS of m={m} answers over {n} cells needs about "
        f"{limits.format_bytes(need)} of memory, more than the "
        f"{limits.format_bytes(need - 1)}"
    )
    with pytest.raises(ValueError, match=re.escape(msg)) as err:
        cell_gls(parts, W)
    assert isinstance(err.value, validate.SizeError)
    monkeypatch.undo()
    # between the two: the variances fit, the m × m covariance does not (also on demand)
    _limit(monkeypatch, need_cov - 1)
    got = cell_gls(parts, W)
    with pytest.raises(ValueError, match=f"with their {m}×{m} covariance needs about"):
        cell_gls(parts, W, covariance=True)
    with pytest.raises(ValueError, match=f"with their {m}×{m} covariance needs about"):
        got.cov()
    _limit(monkeypatch, need_cov)
    assert got.cov().shape == (m, m)


def test_estimate_gives_many_variances_without_the_covariance(monkeypatch):
    """estimate() of records with per-row noise (the dense GLS) and m ≫ n rows under a
    memory limit below the m × m covariance: the diagonal path answers, equal to the dense
    inverse; the covariance asked for afterwards is refused."""
    rng = np.random.default_rng(3)
    n, m = 6, 1500
    recs = [
        MeasurementRecord(query=Dense(np.eye(n)), values=rng.normal(size=n), variance=[1.0] * n),
        MeasurementRecord(
            query=Dense(np.ones((1, n))), values=[0.5], variance=[4.0], common_variance=0.0
        ),
        MeasurementRecord(
            query=Dense(rng.integers(0, 2, size=(3, n)).astype(float)),
            values=rng.normal(size=3),
            variance=[1.0, 2.0, 3.0],
        ),
    ]
    W = rng.integers(0, 2, size=(m, n)).astype(float)
    _limit(monkeypatch, cell_gls_bytes(m, n))
    got = estimate(recs, Dense(W))
    Q = np.vstack([r.query.dense() for r in recs])
    Pinv = np.concatenate([np.broadcast_to(r.variance, r.values.shape) for r in recs])
    J = Q.T @ (Q / Pinv[:, None])
    want = np.einsum("ij,jk,ik->i", W, np.linalg.inv(J), W)
    np.testing.assert_allclose(got.variances, want, rtol=1e-10)
    with pytest.raises(ValueError, match=f"{m:,}×{m:,} covariance"):
        got.cov()
