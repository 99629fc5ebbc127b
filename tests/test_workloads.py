import itertools

import networkx as nx
import numpy as np
import pytest

from matmech import strategies as S
from matmech import workloads as W


def explicit_marginal(domain, subset):
    """Marginal matrix built cell by cell: one row per assignment of the attributes in subset."""
    cells = list(itertools.product(*[range(d) for d in domain]))
    keys = list(itertools.product(*[range(domain[i]) for i in subset]))
    m = np.zeros((len(keys), len(cells)))
    for j, c in enumerate(cells):
        m[keys.index(tuple(c[i] for i in subset)), j] = 1
    return m


@pytest.mark.parametrize("domain", [(2, 3), (3, 2, 2), (2, 2, 2, 3)])
def test_marginals_match_explicit_matrices(domain):
    for k in range(len(domain) + 1):
        w = W.marginals(domain, k)
        subsets = list(itertools.combinations(range(len(domain)), k))
        expect = np.vstack([explicit_marginal(domain, s) for s in subsets])
        np.testing.assert_array_equal(w.dense(), expect)
        np.testing.assert_allclose(w.gram().dense(), expect.T @ expect)
    w = W.marginals(domain, attrs=[(0, 1), (len(domain) - 1,)])
    expect = np.vstack(
        [explicit_marginal(domain, (0, 1)), explicit_marginal(domain, (len(domain) - 1,))]
    )
    np.testing.assert_array_equal(w.dense(), expect)


def test_basic_workloads_dense():
    np.testing.assert_array_equal(W.identity(3).dense(), np.eye(3))
    np.testing.assert_array_equal(W.total(3).dense(), np.ones((1, 3)))
    np.testing.assert_array_equal(W.prefix(3).dense(), np.tril(np.ones((3, 3))))
    np.testing.assert_array_equal(
        W.ranges(4, [(1, 2), (0, 3)]).dense(), [[0, 1, 1, 0], [1, 1, 1, 1]]
    )
    ar = W.all_range(3).dense()
    assert ar.shape == (6, 3) and {tuple(r) for r in ar} == {
        (1, 0, 0),
        (1, 1, 0),
        (1, 1, 1),
        (0, 1, 0),
        (0, 1, 1),
        (0, 0, 1),
    }
    two_d = W.kron(W.all_range(3), W.prefix(2))
    np.testing.assert_array_equal(two_d.dense(), np.kron(ar, np.tril(np.ones((2, 2)))))
    st = W.stack(W.identity(3), W.total(3), weights=[1, 2])
    np.testing.assert_array_equal(st.dense(), np.vstack([np.eye(3), 2 * np.ones((1, 3))]))
    np.testing.assert_array_equal(W.from_matrix(np.eye(2)).dense(), np.eye(2))


@pytest.mark.parametrize(
    "call, exc, text",
    [
        (lambda: W.prefix(0), ValueError, "got 0"),
        (lambda: W.all_range(2.5), TypeError, "2.5"),
        (lambda: W.identity(True), TypeError, "True"),
        (lambda: W.ranges(5, [(0, 5)]), ValueError, r"\(0, 5\) is invalid"),
        (lambda: W.ranges(5, [(3, 2)]), ValueError, r"\(3, 2\) is invalid"),
        (lambda: W.ranges(5, [(-1, 2)]), ValueError, r"\(-1, 2\)"),
        (lambda: W.ranges(5, [(0.5, 2)]), TypeError, "integers"),
        (lambda: W.ranges(5, []), ValueError, "non-empty"),
        (lambda: W.marginals((3, 0), 1), ValueError, r"domain\[1\]"),
        (lambda: W.marginals((3, 4), 3), ValueError, "k must be an integer in \\[0, 2\\]"),
        (lambda: W.marginals((3, 4), attrs=[(0, 2)]), ValueError, "attribute 2"),
        (lambda: W.marginals((3, 4)), ValueError, "exactly one"),
        (lambda: W.from_matrix(np.array([["a"]])), TypeError, "numeric"),
        (lambda: W.from_matrix(np.array([[np.inf]])), ValueError, "inf"),
        (lambda: W.stack(W.prefix(3), W.prefix(4)), ValueError, "shape mismatch"),
    ],
)
def test_bad_input(call, exc, text):
    with pytest.raises(exc, match=text):
        call()


def test_slides_matrices():
    """H₄ and Y₄ from the wavelet / matrix-mechanism slides, rows root first."""
    h4 = [
        [1, 1, 1, 1],
        [1, 1, 0, 0],
        [0, 0, 1, 1],
        [1, 0, 0, 0],
        [0, 1, 0, 0],
        [0, 0, 1, 0],
        [0, 0, 0, 1],
    ]
    y4 = [[1, 1, 1, 1], [1, 1, -1, -1], [1, -1, 0, 0], [0, 0, 1, -1]]
    np.testing.assert_array_equal(S.hierarchical(4, 2).dense(), h4)
    np.testing.assert_array_equal(S.haar(4).dense(), y4)
    h4_pinv = (
        np.array(
            [
                [3, 5, -2, 13, -8, -1, -1],
                [3, 5, -2, -8, 13, -1, -1],
                [3, -2, 5, -1, -1, 13, -8],
                [3, -2, 5, -1, -1, -8, 13],
            ]
        )
        / 21
    )
    np.testing.assert_allclose(np.linalg.pinv(S.hierarchical(4, 2).dense()), h4_pinv, atol=1e-12)
    y4_inv = [
        [0.25, 0.25, 0.5, 0.0],
        [0.25, 0.25, -0.5, 0.0],
        [0.25, -0.25, 0.0, 0.5],
        [0.25, -0.25, 0.0, -0.5],
    ]
    np.testing.assert_allclose(np.linalg.inv(S.haar(4).dense()), y4_inv, atol=1e-12)
    assert [
        S.identity(4).sensitivity(1),
        S.hierarchical(4, 2).sensitivity(1),
        S.haar(4).sensitivity(1),
    ] == [1, 3, 3]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 64])
def test_haar_any_n(n):
    a = S.haar(n).dense()
    assert np.linalg.matrix_rank(a) == n
    big = 1 << int(np.ceil(np.log2(n)))
    assert S.haar(n).sensitivity(1) == 1 + np.log2(big)
    rows = a @ a.T
    if big == n:  # orthogonal rows
        np.testing.assert_allclose(rows, np.diag(np.diag(rows)))
        np.testing.assert_allclose(S.haar(n).gram().dense(), a.T @ a)


@pytest.mark.parametrize(
    "n,b,root",
    [(16, 2, True), (16, 4, False), (10, 3, True), (27, 3, False), (12, 2, True), (1, 2, True)],
)
def test_hierarchical_structure(n, b, root):
    h = S.hierarchical(n, b, root=root)
    d = h.dense()
    assert np.linalg.matrix_rank(d) == n
    np.testing.assert_array_equal(d[-n:], np.eye(n))  # leaves last, in order
    block_levels = sum(1 for k in range(8) if b**k < n)  # block sizes 1, b, b², … below n
    assert h.sensitivity(1) == block_levels + (1 if root or n == 1 else 0)
    for r, p in enumerate(h.parent):  # each node is inside its parent
        if p >= 0:
            assert np.all(d[p] >= d[r])
    np.testing.assert_allclose(h.gram().dense(), d.T @ d)


def test_tree_strategy_from_networkx():
    g = nx.DiGraph()
    g.add_edges_from(
        [
            ("US", "East"),
            ("US", "West"),
            ("East", "NY"),
            ("East", "MA"),
            ("East", "PA"),
            ("West", "CA"),
        ]
    )
    t = S.hierarchical(g)
    assert t.shape == (7, 4)
    np.testing.assert_array_equal(t.dense()[:3], [[1, 1, 1, 1], [1, 1, 1, 0], [0, 0, 0, 1]])
    assert t.labels[:3] == ["US", "East", "West"] and t.parent[:3].tolist() == [-1, 0, 0]
    assert t.sensitivity(1) == 3
    no_root = S.hierarchical(g, root=False)
    assert no_root.shape == (6, 4) and no_root.parent[:2].tolist() == [-1, -1]
    bad = nx.DiGraph([(0, 1), (2, 1)])
    with pytest.raises(ValueError, match="not an arborescence"):
        S.hierarchical(bad)
    with pytest.raises(TypeError, match="DiGraph"):
        S.hierarchical(nx.Graph([(0, 1)]))
    with pytest.raises(ValueError, match="branching must be an integer >= 2"):
        S.hierarchical(8, 1)


def test_stack_adds_row_counts():
    """Issue 22: a stack's rows are the sum of its blocks' (they were multiplied, refusing
    8 × prefix(300) as 6.561e+19 rows); the refusal applies to the sum."""
    from matmech.linalg.linop import Ones
    from matmech.validate import SizeError

    Wk = W.stack(*[W.prefix(300)] * 8)
    assert Wk.shape == (2400, 300)
    x = np.arange(300.0)
    assert np.array_equal(Wk.matvec(x), np.tile(np.cumsum(x), 8))
    # a union in HDMM's census shape: 33 weighted Kronecker products over 4 attributes
    rng = np.random.default_rng(0)
    blocks = [
        W.kron(
            W.from_matrix(rng.integers(0, 2, (3, 2)).astype(float)),
            W.prefix(2),
            W.identity(3),
            W.total(5),
        )
        for _ in range(33)
    ]
    U = W.stack(*blocks, weights=np.linspace(1, 2, 33))
    assert U.shape == (33 * 18, 60)
    big = Ones(2**61, 2)
    with pytest.raises(SizeError, match="more than 2"):
        W.stack(big, big, big)  # 3 · 2**61 rows
