"""Every operator and combinator agrees with its dense form."""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse.linalg import aslinearoperator

from matmech import workloads as wl
from matmech.linalg.linop import (
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
    as_linop,
)
from matmech.strategies import haar, hierarchical

SETTINGS = settings(max_examples=30, deadline=None)


def check_against_dense(op, rng):
    """matvec, rmatvec, blocks, gram, column norms, rows and sensitivity vs the dense matrix."""
    d = op.dense()
    m, n = op.shape
    assert d.shape == (m, n)
    x, y = rng.normal(size=n), rng.normal(size=m)
    np.testing.assert_allclose(op @ x, d @ x, atol=1e-9)
    np.testing.assert_allclose(op.T @ y, d.T @ y, atol=1e-9)
    xb = rng.normal(size=(n, 3))
    np.testing.assert_allclose(op @ xb, d @ xb, atol=1e-9)
    np.testing.assert_allclose(y @ op, y @ d, atol=1e-9)
    g = op.gram()
    np.testing.assert_allclose(g.dense(), d.T @ d, atol=1e-8)
    np.testing.assert_allclose(g @ x, d.T @ d @ x, atol=1e-8)
    np.testing.assert_allclose(op.col_norms(1), np.abs(d).sum(0), atol=1e-9)
    np.testing.assert_allclose(op.col_norms(2), np.linalg.norm(d, axis=0), atol=1e-9)
    assert op.sensitivity(1) == pytest.approx(np.abs(d).sum(0).max())
    lo, hi = (m // 3, m) if m > 1 else (0, 1)
    np.testing.assert_allclose(op.rows(lo, hi), d[lo:hi], atol=1e-12)


small = st.integers(1, 6)


@st.composite
def dense_ops(draw):
    m, n = draw(small), draw(small)
    seed = draw(st.integers(0, 2**31))
    return Dense(np.random.default_rng(seed).normal(size=(m, n)))


@st.composite
def structured_ops(draw):
    n = draw(st.integers(1, 9))
    kind = draw(
        st.sampled_from(
            ["all_range", "prefix", "identity", "total", "ranges", "hier", "haar", "ones", "eye"]
        )
    )
    if kind == "ranges":
        seed = draw(st.integers(0, 2**31))
        r = np.random.default_rng(seed)
        lo = r.integers(0, n, size=4)
        hi = np.array([r.integers(a, n) for a in lo])
        return wl.ranges(n, np.c_[lo, hi])
    if kind == "hier":
        return hierarchical(n, draw(st.integers(2, 4)), root=draw(st.booleans()))
    if kind == "ones":
        return Ones(draw(small), n)
    if kind == "eye":
        return Identity(n)
    return {
        "all_range": wl.all_range,
        "prefix": wl.prefix,
        "identity": wl.identity,
        "total": wl.total,
        "haar": haar,
    }[kind](n)


@SETTINGS
@given(op=st.one_of(dense_ops(), structured_ops()), seed=st.integers(0, 2**31))
def test_base_operators_match_dense(op, seed):
    check_against_dense(op, np.random.default_rng(seed))


@SETTINGS
@given(
    a=st.one_of(dense_ops(), structured_ops()),
    b=st.one_of(dense_ops(), structured_ops()),
    seed=st.integers(0, 2**31),
)
def test_kron_matches_dense(a, b, seed):
    k = Kron(a, b)
    np.testing.assert_allclose(k.dense(), np.kron(a.dense(), b.dense()))
    check_against_dense(k, np.random.default_rng(seed))
    assert k.sensitivity(1) == pytest.approx(np.abs(k.dense()).sum(0).max())


@SETTINGS
@given(op=structured_ops(), seed=st.integers(0, 2**31), w=st.floats(0.1, 3))
def test_stack_scale_subset_match_dense(op, seed, w):
    rng = np.random.default_rng(seed)
    n = op.shape[1]
    other = Dense(rng.normal(size=(2, n)))
    s = VStack([op, other], weights=[w, 1.0])
    np.testing.assert_allclose(s.dense(), np.vstack([w * op.dense(), other.dense()]))
    check_against_dense(s, rng)
    check_against_dense(Scaled(op, -w), rng)
    check_against_dense(2.0 * op, rng)
    idx = rng.integers(0, op.shape[0], size=3)
    sub = RowSubset(op, idx)
    np.testing.assert_allclose(sub.dense(), op.dense()[idx])
    check_against_dense(sub, rng)


def test_scale_factors_are_any_finite_real():
    # a Fraction is a numbers.Real, but np.isfinite refused it with an opaque ufunc TypeError
    from fractions import Fraction

    A = wl.prefix(4)
    for c in (Fraction(1, 3), np.float32(0.5), 3):
        np.testing.assert_allclose((A * c).dense(), float(c) * A.dense())
        np.testing.assert_allclose(Scaled(A, c).dense(), float(c) * A.dense())
    with pytest.raises(ValueError, match="a scale factor must be a finite number"):
        Scaled(A, float("inf"))
    with pytest.raises(ValueError, match="a scale factor must be a real number a float can hold"):
        Scaled(A, 10**400)
    with pytest.raises(TypeError, match="a scale factor must be a real number, got str"):
        Scaled(A, "2")


def test_three_factor_kron_and_sum():
    rng = np.random.default_rng(0)
    a, b, c = wl.prefix(3), haar(4), Dense(rng.normal(size=(2, 2)))
    k = Kron(a, b, c)
    np.testing.assert_allclose(k.dense(), np.kron(np.kron(a.dense(), b.dense()), c.dense()))
    check_against_dense(k, rng)
    s = Sum([a.gram(), Identity(3)])
    np.testing.assert_allclose(s.dense(), a.dense().T @ a.dense() + np.eye(3))


def test_sparse_and_scipy_interop():
    rng = np.random.default_rng(1)
    m = sp.random(7, 5, density=0.5, random_state=3)
    op = Sparse(m)
    check_against_dense(op, rng)
    for o in [
        op,
        wl.all_range(6),
        Kron(wl.prefix(2), haar(4)),
        VStack([wl.identity(5), wl.total(5)]),
    ]:
        lin = aslinearoperator(o)
        x = rng.normal(size=o.shape[1])
        np.testing.assert_allclose(lin @ x, o.dense() @ x)
        np.testing.assert_allclose(
            lin.rmatvec(rng.normal(size=o.shape[0]).copy()).shape, (o.shape[1],)
        )


def test_all_range_rows_are_never_built_for_shape():
    w = wl.all_range(4096)
    assert w.shape == (4096 * 4097 // 2, 4096)
    lo, hi = w.bounds(w.shape[0] - 2, w.shape[0])
    assert lo.tolist() == [4094, 4095] and hi.tolist() == [4095, 4095]
    assert w.col_norms(1)[0] == 4096


def test_closed_form_grams():
    n = 9
    i = np.arange(1, n + 1)
    np.testing.assert_allclose(
        wl.all_range(n).gram().dense(), np.minimum.outer(i, i) * (n - np.maximum.outer(i, i) + 1)
    )
    np.testing.assert_allclose(wl.prefix(n).gram().dense(), n - np.maximum.outer(i, i) + 1)


def test_dense_size_guard_and_shape_errors():
    with pytest.raises(ValueError, match="refusing to build a dense"):
        wl.all_range(4096).dense()
    with pytest.raises(ValueError, match=r"shape mismatch.*\(3,\)"):
        wl.prefix(4) @ np.ones(3)
    with pytest.raises(ValueError, match="5 columns"):
        VStack([wl.prefix(4), wl.prefix(5)])
    with pytest.raises(ValueError, match="weights must be positive"):
        VStack([wl.prefix(4)], weights=[np.nan])
    with pytest.raises(ValueError, match=r"must be finite; found nan"):
        Dense([[1.0, np.nan]])
    with pytest.raises(ValueError, match="out of range"):
        RowSubset(wl.prefix(4), [0, 4])
    with pytest.raises(TypeError, match="expected a LinOp"):
        as_linop("matrix")
    with pytest.raises(ValueError, match="p must be 1 or 2"):
        wl.prefix(3).col_norms(3)
    assert isinstance(as_linop(np.eye(2)), LinOp)


def test_sizes_follow_the_validation_layer_up_to_an_int64_index():
    """check_size = matmech.validate.size without a memory estimate: positive ints up to
    2**62 (a Kronecker factor or product domain may be far larger than memory), refusing
    bools, floats such as 8.0 and sizes beyond 2**62 naming the value."""
    from matmech.linalg.linop import check_size
    from matmech.validate import SizeError

    assert check_size(np.int64(8)) == 8 and type(check_size(np.int64(8))) is int
    assert Identity(2**62).shape == (2**62, 2**62) and Ones(1, 2**62).shape == (1, 2**62)
    for bad, err in [
        (True, TypeError),
        (8.0, TypeError),
        ("8", TypeError),
        (0, ValueError),
        (-3, ValueError),
    ]:
        with pytest.raises(err, match=f"n must be a positive integer, got .*{bad!s}"):
            Identity(bad)
    with pytest.raises(SizeError, match="n must be at most 2\\*\\*62 .*got 9223372036854775808"):
        Identity(2**63)
    # products and stacks: exact Python-int sizes (np.prod would wrap around to a negative int64)
    assert Kron([Identity(2**31), Identity(2**31)]).shape == (2**62, 2**62)
    with pytest.raises(
        SizeError, match="Kron rows must be at most 2\\*\\*62 .*got 9223372036854775808"
    ):
        Kron([Identity(2**31), Identity(2**32)])
    with pytest.raises(SizeError, match="VStack rows must be at most 2\\*\\*62"):
        VStack([Identity(2**61)] * 3)


def test_as_linop_names_ragged_rows_and_non_numbers():
    with pytest.raises(ValueError, match="matrix is ragged: row 1 has 1 entries, row 0 has 2"):
        as_linop([[1.0, 2.0], [1.0]])
    with pytest.raises(
        ValueError, match=r"matrix must be a 2-D array with at least one row .* shape \(0,\)"
    ):
        as_linop([])
    with pytest.raises(TypeError, match="matrix must be numeric"):
        as_linop([["1", "2"]])
    a = as_linop([[1, 2], [3, 4]])
    assert a.matrix.dtype == np.float64 and np.array_equal(a.dense(), [[1.0, 2.0], [3.0, 4.0]])


@pytest.mark.parametrize("p", [1, 2])
def test_stack_of_krons_sensitivity_is_the_max_of_its_column_norms_to_the_bit(p):
    """A stack of Kronecker products takes its sensitivity from one cell per class of cells on
    which every factor's column norms agree: the same number, bit for bit, as the largest entry
    of the full column-norm vector, and as the dense matrix's largest column norm."""
    rng = np.random.default_rng(3)
    contrast = Dense(np.linalg.qr(rng.normal(size=(5, 5)))[0][:4])  # norms equal up to rounding
    blocks = [
        Kron(contrast, Ones(1, 3), Identity(2)),
        Kron(Identity(5), Dense(rng.uniform(size=(2, 3))), Ones(2, 2)),
        Kron(Ones(1, 5), Identity(3), Dense(np.array([[1.0, 0.0], [1.0, 1.0]]))),
    ]
    V = VStack(blocks, weights=[0.7, 1.3, 0.2])
    full = V.col_norms(p)
    assert V.sensitivity(p) == float(full.max())
    dense = V.dense()
    want = np.abs(dense).sum(0).max() if p == 1 else np.sqrt((dense**2).sum(0)).max()
    assert V.sensitivity(p) == pytest.approx(want, rel=1e-12)
    # blocks whose factors do not line up keep the generic path
    odd = VStack([Kron(Identity(6), Ones(1, 5)), Kron(Identity(5), Identity(6))])
    assert odd.sensitivity(p) == float(odd.col_norms(p).max())
