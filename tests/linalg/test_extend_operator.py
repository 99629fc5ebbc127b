"""Extension cost of a new operator (issue 22 item 4): ONE test-local LinOp subclass, with its
two products, two hooks and its registration, runs end to end through the public API: as a
workload (release, expected_error), as a strategy (release, expected_error) and in a strategy
file; every figure checked against the dense matrix."""

import numpy as np
import pytest

import matmech as mm
from matmech import strategies as S
from matmech import workloads as wl
from matmech.linalg.linop import REGISTRY, LinOp, register

N = 12


class Differences(LinOp):
    """The (n − 1)×n first differences x[i+1] − x[i] (the toy operator)."""

    def __init__(self, n):
        self.shape = (n - 1, n)

    def _matmat(self, x):
        return x[1:] - x[:-1]

    def _rmatmat(self, y):
        out = np.zeros((y.shape[0] + 1, y.shape[1]))
        out[1:] += y
        out[:-1] -= y
        return out

    def integer_valued(self):  # hook: measured exactly, no rounding grid
        return True

    def entry_range(self):  # hook: the declared range of W's entries (SVT sensitivities)
        return -1.0, 1.0

    def to_dict(self, out):
        return {"n": int(self.shape[1])}

    @classmethod
    def from_dict(cls, node, src):
        return cls(src.field(node, "n", int))


@pytest.fixture
def registered():
    cls = register("ToyDifferences")(Differences)
    yield cls
    REGISTRY.pop("ToyDifferences")


def _dense_diff(n):
    return np.diff(np.eye(n), axis=0)


def test_the_generic_fallbacks_agree_with_the_dense_matrix():
    D = Differences(N)
    np.testing.assert_array_equal(D.dense(), _dense_diff(N))
    np.testing.assert_allclose(D.gram().dense(), _dense_diff(N).T @ _dense_diff(N))
    assert D.sensitivity(1) == 2.0 and D.sensitivity(2) == pytest.approx(np.sqrt(2))


def test_as_a_workload_through_release_and_the_error():
    D = Differences(N)
    x = np.random.default_rng(1).integers(0, 20, size=N).astype(float)
    rel = mm.release(x, D, 1.0, strategy="identity", rng=np.random.default_rng(2))
    Wd = _dense_diff(N)
    assert rel.answers.shape == (N - 1,)
    # identity strategy: each answer's variance is W diag(v) Wᵀ with v the per-cell variance
    v = rel.measurement.std**2
    np.testing.assert_allclose(rel.std**2, np.diag(Wd @ Wd.T) * v)
    assert rel.expected_error == pytest.approx(mm.expected_error(D, S.identity(N), 1.0))
    np.testing.assert_allclose(rel.answers, Wd @ rel.estimate)
    err = mm.expected_error(D, S.identity(N), 1.0, noise="continuous")
    assert err == pytest.approx(2.0 * (Wd**2).sum())  # Laplace variance 2/eps² per cell


def test_as_a_strategy_and_in_a_strategy_file(registered, tmp_path):
    A = wl.stack(registered(N), wl.total(N))  # full column rank: differences and the total
    Ad = A.dense()
    W = wl.prefix(N)
    G = np.linalg.pinv(Ad.T @ Ad)
    sens = np.abs(Ad).sum(0).max()
    dense_err = 2.0 * sens**2 * np.trace(W.dense() @ G @ W.dense().T)
    assert mm.expected_error(W, A, 1.0, noise="continuous") == pytest.approx(dense_err, rel=1e-9)
    x = np.arange(N, dtype=float)
    rel = mm.release(x, W, 1.0, strategy=A, rng=np.random.default_rng(0))
    np.testing.assert_allclose(rel.answers, W.dense() @ rel.estimate)
    path = tmp_path / "diff.npz"
    mm.save_strategy(path, A)
    B = mm.load_strategy(path)
    assert isinstance(B.blocks[0], registered)
    np.testing.assert_array_equal(B.dense(), Ad)
