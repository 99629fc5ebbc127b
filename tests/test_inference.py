"""Tests for matmech.estimators.gls: every fast path against the dense (weighted) pseudo-inverse."""

import networkx as nx
import numpy as np
import pytest

from matmech.estimators import gls as inference
from matmech.linalg import structured
from matmech import strategies as S
from matmech.estimators.gls import least_squares, solve, tree_plan
from matmech.linalg.linop import Dense, Identity, Kron, RowSubset, Scaled, Sparse, VStack
from matmech.privacy.measure import Measurement
from matmech.run.measure import measure
from matmech.strategies import Tree


def fake(A, y, std):
    """A Measurement with chosen y and std (inference only reads strategy, y and std)."""
    return Measurement(
        strategy=A,
        y=np.asarray(y, float),
        eps=1.0,
        delta=0.0,
        noise="discrete_laplace",
        scale=std,
        std=std,
        grid=1.0,
        sensitivity=1.0,
    )


def dense_gls(pairs):
    """argmin Σ ‖(Aᵢx − yᵢ)/σᵢ‖², minimum norm, via the dense pseudo-inverse of the stack."""
    B = np.vstack([A.dense() / s for A, _, s in pairs])
    b = np.concatenate([y / s for _, y, s in pairs])
    return np.linalg.pinv(B) @ b


def graph_tree():
    g = nx.DiGraph()
    g.add_edges_from(
        [
            ("r", "a"),
            ("r", "b"),
            ("r", "c"),
            ("a", "a1"),
            ("a", "a2"),
            ("a", "a3"),
            ("b", "b1"),
            ("a2", "u"),
            ("a2", "v"),
            ("c", "c1"),
            ("c", "c2"),
        ]
    )
    return g


STRUCTURED = {
    "identity": lambda: S.identity(7),
    "tree b=2": lambda: S.hierarchical(16, 2),
    "tree b=3 ragged": lambda: S.hierarchical(10, 3),
    "tree no root": lambda: S.hierarchical(27, 3, root=False),
    "tree b=16": lambda: S.hierarchical(300, 16),
    "tree one cell": lambda: S.hierarchical(1, 2),
    "tree from graph": lambda: S.hierarchical(graph_tree()),
    "tree from graph no root": lambda: S.hierarchical(graph_tree(), root=False),
    "haar 16": lambda: S.haar(16),
    "haar 1": lambda: S.haar(1),
    "haar 12 (not 2^k)": lambda: S.haar(12),
    "kron tree x haar": lambda: Kron(S.hierarchical(8, 2), S.haar(4)),
    "kron id x dense": lambda: Kron(S.identity(3), Dense(np.arange(20.0).reshape(5, 4) % 7 + 1)),
    "kron rank deficient": lambda: Kron(S.identity(2), Dense([[1.0, 1.0, 0.0], [2.0, 2.0, 0.0]])),
    "scaled tree": lambda: Scaled(S.hierarchical(9, 3), 0.5),
    "dense rank deficient": lambda: Dense([[1.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 1.0, 1.0]]),
    "row subset": lambda: RowSubset(
        S.hierarchical(8, 2), np.array([0, 1, 2, 7, 8, 9, 10, 11, 12, 13, 14])
    ),
}


@pytest.mark.parametrize("name", STRUCTURED)
def test_single_strategy_matches_pinv(name):
    A = STRUCTURED[name]()
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    Y = rng.normal(size=(A.shape[0], 3)) * 10
    ref = np.linalg.pinv(A.dense()) @ Y
    np.testing.assert_allclose(solve(A, Y), ref, atol=1e-9, rtol=1e-9)
    np.testing.assert_allclose(solve(A, Y[:, 0]), ref[:, 0], atol=1e-9, rtol=1e-9)
    np.testing.assert_allclose(
        least_squares(fake(A, Y[:, 1], 2.5)), ref[:, 1], atol=1e-9, rtol=1e-9
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: S.hierarchical(16, 2),
        lambda: S.hierarchical(10, 3),
        lambda: S.hierarchical(graph_tree()),
        lambda: S.hierarchical(300, 16),
    ],
)
def test_tree_fast_path_is_taken(make, monkeypatch):
    A = make()
    assert tree_plan(A) is not None
    monkeypatch.setattr(inference, "_generic", lambda *a, **k: pytest.fail("generic path used"))
    solve(A, np.ones(A.shape[0]))


def test_haar_and_kron_fast_paths_avoid_generic(monkeypatch):
    monkeypatch.setattr(inference, "_generic", lambda *a, **k: pytest.fail("generic path used"))
    solve(S.haar(64), np.ones(64))
    solve(Kron(S.hierarchical(8, 2), S.haar(8), S.identity(3)), np.ones(15 * 8 * 3))


def test_tree_with_unequal_node_variances_is_gls():
    A = S.hierarchical(9, 3)
    rng = np.random.default_rng(3)
    var = rng.uniform(0.5, 4.0, A.shape[0])
    y = rng.normal(size=(A.shape[0], 1))
    wt = 1 / np.sqrt(var)
    ref = np.linalg.pinv(A.dense() * wt[:, None]) @ (y[:, 0] * wt)
    np.testing.assert_allclose(inference._tree_solve(tree_plan(A), y, var)[:, 0], ref, atol=1e-10)


def test_invalid_trees_fall_back_to_generic():
    lo, hi = np.array([0, 0, 2]), np.array([3, 1, 3])
    overlapping = Tree(
        4, np.array([0, 0, 1, 2, 3]), np.array([3, 1, 1, 2, 3]), np.array([-1, 0, 0, 0, 0])
    )
    gap = Tree(
        4,
        np.array([0, 0, 3, 0, 1, 2, 3]),
        np.array([3, 1, 3, 0, 1, 2, 3]),
        np.array([-1, 0, 0, 1, 1, 2, 2]),
    )
    cycle = Tree(4, np.array([0, 0, 1, 2, 3]), np.array([3, 3, 1, 2, 3]), np.array([1, 0, 0, 0, 0]))
    not_cells = Tree(4, lo, hi, np.array([-1, 0, 0]))
    for T in (overlapping, gap, cycle, not_cells):
        assert tree_plan(T) is None
        y = np.arange(T.shape[0], dtype=float)
        np.testing.assert_allclose(solve(T, y), np.linalg.pinv(T.dense()) @ y, atol=1e-10)


def test_several_measurements_are_weighted_by_their_std():
    n = 16
    rng = np.random.default_rng(4)
    pairs = [
        (S.identity(n), rng.normal(size=n), 3.0),
        (S.hierarchical(n, 4), rng.normal(size=21), 1.5),
        (S.haar(n), rng.normal(size=n), 0.7),
    ]
    got = least_squares(*[fake(A, y, s) for A, y, s in pairs])
    np.testing.assert_allclose(got, dense_gls(pairs), atol=1e-10)
    # a list works too
    np.testing.assert_allclose(least_squares([fake(A, y, s) for A, y, s in pairs]), got)


def test_repeated_strategy_is_merged_exactly(monkeypatch):
    A = S.hierarchical(27, 3)
    rng = np.random.default_rng(5)
    pairs = [(A, rng.normal(size=A.shape[0]), s) for s in (1.0, 2.0, 0.5)]
    pairs.append((S.hierarchical(27, 3), rng.normal(size=A.shape[0]), 4.0))  # equal, not identical
    monkeypatch.setattr(inference, "_generic", lambda *a, **k: pytest.fail("generic path used"))
    got = least_squares(*[fake(B, y, s) for B, y, s in pairs])
    np.testing.assert_allclose(got, dense_gls(pairs), atol=1e-10)


def test_lsmr_path_matches_dense(monkeypatch):
    monkeypatch.setattr(inference, "DENSE_SOLVE_N", 8)
    n = 40
    rng = np.random.default_rng(6)
    D = Dense(rng.normal(size=(10, n)))
    pairs = [
        (VStack([S.identity(n), D]), rng.normal(size=n + 10), 1.0),
        (S.hierarchical(n, 4), rng.normal(size=S.hierarchical(n, 4).shape[0]), 2.0),
    ]
    got = least_squares(*[fake(A, y, s) for A, y, s in pairs], tol=1e-12)
    np.testing.assert_allclose(got, dense_gls(pairs), atol=1e-7)


def test_lsmr_warns_at_iteration_limit(monkeypatch):
    monkeypatch.setattr(inference, "DENSE_SOLVE_N", 8)
    A = Dense(np.random.default_rng(7).normal(size=(60, 30)))
    with pytest.warns(RuntimeWarning, match="iteration limit"):
        least_squares(fake(A, np.ones(60), 1.0), maxiter=2)


def test_nonneg_clips():
    y = np.array([3.0, -2.0, 0.5])
    assert least_squares(fake(Identity(3), y, 1.0), nonneg=True).tolist() == [3.0, 0.0, 0.5]
    assert least_squares(fake(Identity(3), y, 1.0)).tolist() == [3.0, -2.0, 0.5]


def test_bad_arguments():
    m = fake(Identity(3), np.zeros(3), 1.0)
    with pytest.raises(ValueError, match="at least one"):
        least_squares()
    with pytest.raises(TypeError, match="argument 1 must be a matmech Measurement"):
        least_squares(m, np.zeros(3))
    with pytest.raises(ValueError, match="different domains"):
        least_squares(m, fake(Identity(4), np.zeros(4), 1.0))
    with pytest.raises(TypeError, match="nonneg"):
        least_squares(m, nonneg="yes")
    with pytest.raises(ValueError, match="tol"):
        least_squares(m, tol=0)
    with pytest.raises(ValueError, match="shape mismatch"):
        solve(Identity(3), np.zeros(4))


def test_end_to_end_with_real_measurement():
    x = np.arange(32) % 5
    m = measure(x, S.hierarchical(32, 2), 1.0, rng=np.random.default_rng(8))
    np.testing.assert_allclose(
        least_squares(m), np.linalg.pinv(m.strategy.dense()) @ m.y, atol=1e-9
    )


def p_identity(n, p, seed):
    """HDMM's p-Identity shape [I; Θ]·D (columns scaled to unit L1 norm)."""
    theta = np.random.default_rng(seed).random((p, n))
    return np.vstack([np.eye(n), theta]) / (1 + theta.sum(0))


@pytest.mark.parametrize(
    "make",
    [
        lambda: Dense(p_identity(40, 6, 1)),
        lambda: VStack(
            [Scaled(S.identity(40), 0.7), Dense(np.random.default_rng(2).random((5, 40)))]
        ),
        lambda: Sparse(p_identity(40, 3, 3)),
    ],
)
def test_diagonal_plus_rows_uses_woodbury(make, monkeypatch):
    A = make()
    assert structured.split_diagonal(A) is not None
    y = np.random.default_rng(4).normal(size=(A.shape[0], 2))
    monkeypatch.setattr(inference, "_dense_normal", lambda *a: pytest.fail("dense path used"))
    np.testing.assert_allclose(solve(A, y), np.linalg.pinv(A.dense()) @ y, atol=1e-9)
    M, null = structured.gram_inverse(A)
    assert null is None
    np.testing.assert_allclose(
        M.dense(), np.linalg.inv(A.dense().T @ A.dense()), rtol=1e-8, atol=1e-10
    )


def test_split_diagonal_declines_when_not_applicable():
    assert (
        structured.split_diagonal(Dense(np.random.default_rng(5).random((20, 20)))) is None
    )  # no single-entry rows
    assert (
        structured.split_diagonal(Dense(np.vstack([np.eye(4)[:3], np.ones((1, 4))]))) is None
    )  # a zero diagonal


def test_square_dense_uses_lu_and_singular_falls_back(monkeypatch):
    rng = np.random.default_rng(6)
    A = Dense(rng.normal(size=(30, 30)))
    y = rng.normal(size=30)
    np.testing.assert_allclose(solve(A, y), np.linalg.solve(A.matrix, y), atol=1e-9)
    sing = Dense(np.vstack([A.matrix[:-1], A.matrix[0]]))  # repeated row: singular
    np.testing.assert_allclose(solve(sing, y), np.linalg.pinv(sing.matrix) @ y, atol=1e-8)


def test_gram_inverse_cholesky_and_singular():
    A = Dense(np.random.default_rng(7).random((50, 30)))
    M, _ = structured.gram_inverse(A)
    np.testing.assert_allclose(M.dense(), np.linalg.inv(A.matrix.T @ A.matrix), rtol=1e-7)
    assert structured.gram_inverse(Dense(np.ones((5, 3)))) is None


# -- the estimator over measurement records (issue 22): one Answers type ------------------------

import oracle_problems as op  # noqa: E402

from matmech.estimators.gls import estimate  # noqa: E402
from matmech.linalg.answers import Answers  # noqa: E402


@pytest.mark.parametrize(
    "path,model,method",
    [
        ("histogram", "pure", "none"),
        ("histogram", "approx", "none"),
        ("histogram", "pure", "topc-gap"),  # gaps with an unknown common offset
        ("histogram", "pure", "svt-gap"),  # gaps with a common threshold noise
        ("histogram", "approx", "adaptive-svt"),  # per-row gap variances
        ("histogram", "pure", "vector"),
        ("records", "approx", "none"),  # a record on the marginal of the support
        ("records", "pure", "svt-gap"),
        ("residual", "approx", "none"),  # one record per residual
        ("residual", "pure", "none"),  # one record per noisy table
        ("gmarginal", "approx", "none"),
    ],
)
def test_estimate_of_the_records_equals_the_dense_oracle(path, model, method):
    """estimate(records, W) is the GLS of every record, equal to an independent dense SVD
    least squares of the same records (tests/oracle_problems.py) to 1e-8 relative."""
    for seed in range(3):
        rel, W, _ = op.run(path, model, method, seed)
        Wd = W.dense() if rel.selected is None else W.dense()[rel.selected]
        if Wd.shape[0] == 0:
            continue
        a, v = op.dense_gls(rel.measurements, Wd)
        got = estimate(rel.measurements, Dense(Wd))
        assert isinstance(got, Answers)
        assert np.abs(got.values - a).max() <= op.RTOL * max(1.0, np.abs(a).max())
        assert np.abs(got.variances - v).max() <= op.RTOL * v.max()


def test_estimate_with_iid_records_takes_the_structured_path_and_its_variances(monkeypatch):
    """One strategy measurement: least_squares' x̂ exactly, and the Matrix Mechanism's
    variances σ²·diag(W (AᵀA)⁺ Wᵀ) against the dense pseudo-inverse."""
    from matmech import workloads as W
    from matmech.measurements.record import strategy_record

    A = S.hierarchical(16)
    m = measure(np.arange(16), A, 1.0, rng=np.random.default_rng(0))
    monkeypatch.setattr(inference, "cell_gls", lambda *a, **k: pytest.fail("dense GLS used"))
    ans = estimate([strategy_record(m)], W.prefix(16))
    np.testing.assert_array_equal(ans.values, W.prefix(16).matvec(least_squares(m)))
    Ad, Wd = A.dense(), W.prefix(16).dense()
    want = m.variance * np.einsum("ij,jk,ik->i", Wd, np.linalg.pinv(Ad.T @ Ad), Wd)
    np.testing.assert_allclose(ans.variances, want, rtol=1e-10)
    cells = estimate([strategy_record(m)])
    np.testing.assert_array_equal(cells.values, least_squares(m))
    assert estimate([strategy_record(m)], variances=False).variances is None


def test_estimate_refuses_answers_the_records_do_not_determine():
    from matmech.measurements.record import MeasurementRecord

    rec = MeasurementRecord(query=Dense(np.eye(4)[:2]), values=[1.0, 2.0], variance=[1.0, 2.0])
    got = estimate([rec], Dense(np.eye(4)[:2]))
    np.testing.assert_allclose(got.values, [1.0, 2.0])
    np.testing.assert_allclose(got.variances, [1.0, 2.0])
    with pytest.raises(ValueError, match="row space"):
        estimate([rec], Dense(np.eye(4)[1:3]))
    with pytest.raises(ValueError, match="at least one"):
        estimate([])


def test_answers_is_frozen_and_keeps_or_computes_its_covariance():
    a = Answers(
        np.array([1.0, 2.0]), np.array([1.0, 4.0]), covariance_of=lambda: np.diag([1.0, 4.0])
    )
    assert a.std.tolist() == [1.0, 2.0]
    np.testing.assert_array_equal(a.cov(), np.diag([1.0, 4.0]))
    with pytest.raises(ValueError):
        a.values[0] = 3.0
    with pytest.raises(ValueError, match="one entry per value"):
        Answers(np.zeros(2), np.zeros(3))
    with pytest.raises(ValueError, match="full covariance"):
        Answers(np.zeros(2), np.zeros(2)).cov()
