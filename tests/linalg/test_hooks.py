"""The structure hooks of every operator agree with its dense form (issue 11)."""

import numpy as np
import pytest
import scipy.sparse as sp

from matmech import strategies as S
from matmech import workloads as wl
from matmech.linalg.intervals import AllRange, Intervals, Prefix
from matmech.linalg.linop import (
    REGISTRY,
    Dense,
    Identity,
    Kron,
    LinOp,
    Ones,
    RowSubset,
    Scaled,
    Sparse,
    Sum,
    VStack,
)
from matmech.linalg.structured import RoundedDense, RoundedSparse, pinv_gram
from matmech.optimizers.l2 import L2Strategy
from matmech.optimizers.marginal_lattice import MarginalStrategy, ResidualStrategy
from matmech.optimizers.pidentity import PIdentity

R = np.random.default_rng(11)


def _ops():
    return {
        "dense": Dense(R.normal(size=(5, 4))),
        "dense int": Dense(np.array([[2.0, -1.0, 0.0], [1.0, 3.0, 0.0]])),
        "sparse": Sparse(
            sp.random(6, 4, density=0.5, random_state=1)
            - sp.random(6, 4, density=0.3, random_state=2)
        ),
        "identity": Identity(4),
        "ones": Ones(2, 4),
        "scaled": Scaled(Dense(R.normal(size=(3, 4))), -1.5),
        "scaled int": Scaled(Identity(4), 3.0),
        "kron": Kron(Dense([[1.0, -2.0], [0.5, 1.0]]), Prefix(3)),
        "vstack": VStack([Identity(4), Dense(R.normal(size=(2, 4)))], weights=[2.0, 0.5]),
        "sum": Sum([Identity(4), Dense(np.ones((4, 4)))]),
        "row subset": RowSubset(Dense(R.normal(size=(5, 4))), np.array([4, 0, 2])),
        "intervals": Intervals(6, np.array([0, 2, 3]), np.array([4, 2, 5])),
        "all range": AllRange(5),
        "prefix": Prefix(5),
        "tree": S.hierarchical(8, 2),
        "graph-like tree": S.hierarchical(10, 3, root=False),
        "haar": S.haar(8),
        "haar n=6": S.haar(6),
        "pidentity": PIdentity(R.random((2, 5))),
        "rounded dense": RoundedDense(np.round(R.normal(size=(5, 4)), 3)),
        "rounded sparse": RoundedSparse(sp.random(6, 4, density=0.5, random_state=3)),
        "l2": L2Strategy(R.normal(size=(5, 4))),
        "marginal": MarginalStrategy((2, 3), [0.0, 1.0, 0.5, 2.0]),
        "residual": ResidualStrategy((2, 3), [1.0, 2.0, 0.5, 1.5]),
        "marginal workload": wl.marginals((2, 3), 1),
    }


OPS = _ops()


@pytest.mark.parametrize("name", OPS)
def test_integer_valued_and_entry_range(name):
    A = OPS[name]
    d = A.dense()
    assert A.integer_valued() <= bool(
        np.all(d == np.rint(d))
    )  # never claims a real entry is an integer
    lo, hi = A.entry_range()
    assert (lo, hi) == pytest.approx((min(0.0, d.min()), max(0.0, d.max())))


def test_integer_valued_where_known():
    for name in (
        "dense int",
        "identity",
        "ones",
        "scaled int",
        "intervals",
        "all range",
        "prefix",
        "tree",
        "haar",
        "marginal workload",
    ):
        assert OPS[name].integer_valued(), name
    for name in ("dense", "scaled", "pidentity", "l2"):
        assert not OPS[name].integer_valued(), name


@pytest.mark.parametrize("name", OPS)
def test_explicit_and_rounded_matrix(name):
    A = OPS[name]
    d = A.dense()
    m = A.explicit_matrix()
    if m is not None:
        np.testing.assert_array_equal(m.toarray() if sp.issparse(m) else m, d)
    g = 2.0**-4
    r = A.rounded_matrix(g)
    r = r.toarray() if sp.issparse(r) else r
    np.testing.assert_allclose(r, g * np.rint(d / g), atol=1e-12)


@pytest.mark.parametrize("name", OPS)
def test_gram_pinv_and_eigenvalues(name):
    A = OPS[name]
    g = A.dense().T @ A.dense()
    m, _ = pinv_gram(A)
    np.testing.assert_allclose(m.dense(), np.linalg.pinv(g, rcond=1e-10, hermitian=True), atol=1e-7)
    out = A.gram_pinv()
    if out is not None:
        np.testing.assert_allclose(out[0].dense(), m.dense(), atol=1e-7)
    lam = A.gram_eigenvalues()
    if lam is not None:
        np.testing.assert_allclose(np.sort(lam), np.linalg.eigvalsh(g), atol=1e-8)


@pytest.mark.parametrize("name", OPS)
def test_row_blocks_linear_terms_take_rows(name):
    A = OPS[name]
    d = A.dense()
    blocks = A.row_blocks()
    if blocks is not None:
        np.testing.assert_allclose(np.vstack([w * b.dense() for w, b in blocks]), d)
    terms = A.linear_terms()
    if terms is not None:
        np.testing.assert_allclose(sum(c * t.dense() for c, t in terms), d)
    rows = np.array([A.shape[0] - 1, 0])
    np.testing.assert_array_equal(A.take_rows(rows).dense(), d[rows])


def test_every_storable_class_is_registered_under_its_name():
    from matmech.io.store import TYPES, _registry

    reg = _registry()
    assert set(reg) == set(TYPES)
    assert all(cls.store_name == name and issubclass(cls, LinOp) for name, cls in reg.items())
    assert REGISTRY is reg


def test_constructor_attributes():
    assert S.hierarchical(16, 4).branching == 4 and S.hierarchical(16, 4).sizes == (1, 4, 16)
    W = wl.marginals((2, 3), attrs=[(0,), (0, 1)])
    assert W.domain == (2, 3) and W.subsets == ((0,), (0, 1))
    assert VStack([Identity(3)]).subsets is None
    with pytest.raises(ValueError, match="both domain and subsets"):
        VStack([Identity(3)], domain=(3,))
    with pytest.raises(ValueError, match="one attribute subset per block"):
        VStack([Identity(3)], domain=(3,), subsets=[(0,), ()])
