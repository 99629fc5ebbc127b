"""Strategy files: exact round trips for every strategy type, clear errors for anything else."""

import json

import numpy as np
import pytest
import scipy.sparse as sp

import matmech as mm
from matmech import strategies as S
from matmech import workloads as Wk
from matmech.linalg.linop import Dense, Identity, Kron, Ones, RowSubset, Scaled, Sparse, VStack
from matmech.privacy.measure import plan_measurement
from matmech.optimizers.l2 import L2Strategy
from matmech.optimizers.marginal_lattice import MarginalStrategy, ResidualStrategy
from matmech.optimizers.pidentity import PIdentity
from matmech.io.store import load_strategy, save_strategy


def _geo_tree():
    import networkx as nx

    g = nx.DiGraph()
    g.add_edges_from(
        [
            ("all", "north"),
            ("all", "south"),
            ("north", "a"),
            ("north", "b"),
            ("north", "c"),
            ("south", "d"),
        ]
    )
    return S.hierarchical(g)


def _optimised(W, delta, method="auto"):
    return mm.optimize(W, 1.0, delta, method=method).strategy


R = np.random.default_rng(3)
CASES = {
    "identity": (Wk.all_range(16), lambda: S.identity(16)),
    "hierarchical": (Wk.all_range(16), lambda: S.hierarchical(16, 4)),
    "hierarchical ragged": (Wk.all_range(10), lambda: S.hierarchical(10, 3, root=False)),
    "tree from a graph": (Wk.all_range(4), _geo_tree),
    "haar": (Wk.all_range(16), lambda: S.haar(16)),
    "haar n=12": (Wk.all_range(12), lambda: S.haar(12)),
    "dense": (Wk.prefix(6), lambda: Dense(np.eye(6) + R.random((6, 6)) * 0.1)),
    "sparse": (Wk.prefix(6), lambda: Sparse(sp.csr_matrix(np.eye(6) * 2.0))),
    "scaled": (Wk.prefix(6), lambda: Scaled(S.identity(6), 0.5)),
    "vstack": (Wk.prefix(6), lambda: VStack([S.identity(6), Ones(1, 6)], weights=[1.0, 2.0])),
    "row subset": (
        Wk.prefix(6),
        lambda: RowSubset(S.hierarchical(6, 2), np.array([6, 7, 8, 9, 10, 11, 0])),
    ),
    "kron": (
        Wk.kron(Wk.all_range(4), Wk.prefix(8)),
        lambda: S.kron(S.haar(4), S.hierarchical(8, 2)),
    ),
    "workload": (Wk.all_range(8), lambda: Wk.all_range(8)),
    "interval list": (
        Wk.identity(8),
        lambda: Wk.ranges(8, [(0, 7), (0, 3), (4, 7), *[(i, i) for i in range(8)]]),
    ),
    "p-identity": (Wk.all_range(16), lambda: PIdentity(R.random((3, 16)))),
    "optimised pure": (Wk.all_range(64), lambda: _optimised(Wk.all_range(64), 0.0)),
    "optimised l2": (Wk.all_range(32), lambda: _optimised(Wk.all_range(32), 1e-6)),
    "marginal lattice": (
        Wk.marginals((3, 4, 2), 2),
        lambda: _optimised(Wk.marginals((3, 4, 2), 2), 0.0),
    ),
    "residual basis": (
        Wk.marginals((3, 4, 2), 2),
        lambda: _optimised(Wk.marginals((3, 4, 2), 2), 1e-6),
    ),
    "kron optimised": (
        Wk.kron(Wk.all_range(8), Wk.prefix(6)),
        lambda: _optimised(Wk.kron(Wk.all_range(8), Wk.prefix(6)), 0.0, "kron"),
    ),
    "general marginals": (
        Wk.kron(Wk.all_range(8), Wk.prefix(6)),
        lambda: _optimised(Wk.kron(Wk.all_range(8), Wk.prefix(6)), 0.0, "gmarginals"),
    ),
    "rounded to the grid": (
        Wk.all_range(16),
        lambda: plan_measurement(PIdentity(R.random((2, 16))), 1.0).strategy,
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_round_trip_is_exact(name, tmp_path):
    W, make = CASES[name]
    A = make()
    path = tmp_path / "strategy.npz"
    save_strategy(path, A)
    B = load_strategy(path)
    assert type(B) is type(A) and B.shape == A.shape
    np.testing.assert_array_equal(B.dense(), A.dense())
    for delta in (0.0, 1e-6):
        assert mm.expected_error(W, B, 1.0, delta) == mm.expected_error(W, A, 1.0, delta)
    # saving the loaded strategy gives the same description (nothing lost on the way)
    save_strategy(tmp_path / "again.npz", B)
    with np.load(path) as f1, np.load(tmp_path / "again.npz") as f2:
        assert str(f1["__matmech_strategy__"]) == str(f2["__matmech_strategy__"])


def test_the_optimised_cases_are_the_types_we_claim():
    assert isinstance(CASES["optimised pure"][1](), PIdentity)
    assert isinstance(CASES["optimised l2"][1](), L2Strategy)
    assert isinstance(CASES["marginal lattice"][1](), MarginalStrategy)
    assert isinstance(CASES["residual basis"][1](), ResidualStrategy)
    assert isinstance(CASES["kron optimised"][1](), Kron)
    assert type(CASES["general marginals"][1]()).__name__ == "GeneralMarginalStrategy"


def test_structure_survives(tmp_path):
    """A loaded hierarchy keeps its block-spectral gram (and so the fast error paths)."""
    A = S.hierarchical(4096, 16)
    save_strategy(tmp_path / "h.npz", A)
    B = load_strategy(tmp_path / "h.npz")
    assert B.sizes == A.sizes and B.branching == 16 and type(B.gram()).__name__ == "BlockSpectral"
    assert mm.expected_error(Wk.all_range(4096), B) == mm.expected_error(Wk.all_range(4096), A)
    m = Wk.marginals((3, 4), 1)
    save_strategy(tmp_path / "m.npz", m)
    assert load_strategy(tmp_path / "m.npz").subsets == m.subsets


def test_the_file_is_written_at_the_given_name(tmp_path):
    save_strategy(tmp_path / "plain", S.identity(3))  # numpy would append .npz; we do not
    assert (tmp_path / "plain").is_file() and not (tmp_path / "plain.npz").exists()
    assert isinstance(load_strategy(tmp_path / "plain"), Identity)


def test_unstorable_strategy_raises_and_writes_nothing(tmp_path):
    product = S.identity(4) @ S.identity(4)
    with pytest.raises(TypeError, match="cannot save a strategy of type _Product"):
        save_strategy(tmp_path / "x.npz", Kron(S.identity(2), product))
    with pytest.raises(TypeError, match="needs a matmech strategy"):
        save_strategy(tmp_path / "x.npz", np.eye(3))
    assert not (tmp_path / "x.npz").exists()


def _npz(path, **arrays):
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


def _desc(root, **extra):
    return np.array(json.dumps({"format": "matmech.strategy", "version": 1, "root": root, **extra}))


def test_bad_files_give_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such strategy file"):
        load_strategy(tmp_path / "missing.npz")
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"hello, this is not a zip archive")
    bad = {
        junk: "not a matmech strategy file",
        _npz(tmp_path / "plain.npz", a=np.eye(3)): "no '__matmech_strategy__' description",
        _npz(tmp_path / "json.npz", __matmech_strategy__=np.array("{not json")): "not valid JSON",
        _npz(
            tmp_path / "fmt.npz", __matmech_strategy__=np.array('{"format": "other"}')
        ): "does not declare format",
        _npz(
            tmp_path / "ver.npz",
            __matmech_strategy__=_desc({"type": "Identity", "n": 3}, version=99),
        ): "version",
        _npz(
            tmp_path / "type.npz", __matmech_strategy__=_desc({"type": "Evil", "n": 3})
        ): "unknown operator type 'Evil'",
        _npz(
            tmp_path / "arr.npz", __matmech_strategy__=_desc({"type": "Dense", "matrix": "a0"})
        ): "missing array 'a0'",
        _npz(tmp_path / "key.npz", __matmech_strategy__=_desc({"type": "Identity"})): "has no 'n'",
        _npz(
            tmp_path / "n.npz", __matmech_strategy__=_desc({"type": "Identity", "n": "3"})
        ): "wrong type",
        _npz(
            tmp_path / "neg.npz", __matmech_strategy__=_desc({"type": "Identity", "n": -3})
        ): "not a valid matmech strategy",
        _npz(
            tmp_path / "dt.npz",
            __matmech_strategy__=_desc({"type": "Dense", "matrix": "a0"}),
            a0=np.array(["x"]),
        ): "numeric array",
        _npz(
            tmp_path / "shape.npz",
            __matmech_strategy__=_desc({"type": "Identity", "n": 3}, shape=[4, 3]),
        ): "the file says",
    }
    np.save(tmp_path / "single.npy", np.eye(2))
    bad[tmp_path / "single.npy"] = "not a matmech strategy file"
    for path, text in bad.items():
        with pytest.raises(ValueError, match=text):
            load_strategy(path)
