"""Extension cost of a new counting engine (issue 22 item 4): ONE test-local groups function
and one register_engine call make ``histogram(..., engine="toy")`` and ``marginal_counts``
count with it, and a release reads its histogram; counts checked against the numpy engine."""

from collections import Counter

import numpy as np
import pytest

import matmech as mm
from matmech import workloads as wl
from matmech.sources import engines
from matmech.io.domain import Domain, integer_range
from matmech.sources.grouping import DROP, OOD, Engine


def toy_groups(source, kind, domain, sets, *, where, encoding, delimiter):
    """Count a {column: values} mapping record by record with a Counter (integer ranges
    only; out of range → the OOD sentinel, which the shared plan refuses or drops)."""
    codes = []
    for a in domain.attributes:
        col = []
        for v in source[a.column]:
            c = (int(v) - a.lo) // a.width
            col.append(c if 0 <= c < a.size else (DROP if a.policy == "drop" else OOD))
        codes.append(col)
    out = {}
    for s in sets:
        counts = Counter(tuple(codes[j][r] for j in s) for r in range(len(codes[0])))
        keys = sorted(counts)
        out[s] = (
            np.array(keys, dtype=np.int64).reshape(len(keys), len(s)),
            np.zeros(len(keys), dtype=bool),
            np.array([counts[k] for k in keys], dtype=np.int64),
        )
    return out


def toy_check(kind):
    if kind != "columns":
        raise TypeError(f"the toy engine counts a mapping of columns, not {kind}")


@pytest.fixture
def toy():
    engine = engines.register_engine(Engine("toy", toy_groups, toy_check))
    yield engine
    engines._ENGINES.pop("toy")


DOMAIN = Domain((integer_range("age", 0, 9), integer_range("hours", 0, 59, width=10)))


def _data(k=500, seed=4):
    rng = np.random.default_rng(seed)
    return {"age": rng.integers(0, 10, k), "hours": rng.integers(0, 60, k)}


def test_the_toy_engine_counts_like_numpy(toy):
    data = _data()
    x = engines.histogram(data, DOMAIN, engine="toy")
    np.testing.assert_array_equal(x, engines.histogram(data, DOMAIN, engine="numpy"))
    tables = engines.marginal_counts(data, DOMAIN, [(0,), (1,), ()], engine="toy")
    ref = engines.marginal_counts(data, DOMAIN, [(0,), (1,), ()], engine="numpy")
    for s in ref:
        np.testing.assert_array_equal(tables[s], ref[s])
    with pytest.raises(TypeError, match="not array"):
        engines.histogram(np.zeros((2, 2)), DOMAIN, engine="toy")


def test_the_shared_plan_applies_the_error_policy_to_the_toy_counts(toy):
    data = _data()
    data["age"][3] = 42
    with pytest.raises(ValueError, match="outside its declared domain"):
        engines.histogram(data, DOMAIN, engine="toy")


def test_a_release_reads_the_toy_histogram(toy):
    x = engines.histogram(_data(), DOMAIN, engine="toy")
    W = wl.marginals(DOMAIN.sizes, 1)
    rel = mm.release(x, W, 1.0, strategy="identity", rng=np.random.default_rng(0))
    assert rel.answers.shape == (W.shape[0],)
    np.testing.assert_allclose(rel.answers, W.dense() @ rel.estimate)
    with pytest.raises(ValueError, match="registered already"):
        engines.register_engine(Engine("toy", toy_groups, toy_check))
