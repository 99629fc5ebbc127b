"""After the stream's one charge nothing branches on the counts: exact steps for any counts.

* Neighbouring streams at every limit (the declared ``max_records`` as a total and as a cell,
  the limb width, 2^52/2^53 in float, check_counts' 2^62, int64 → uint64 → Python int
  dtypes) give the same spend, draws, store writes, std and status, and no exception on
  either side.
* A spy over budget, samplers and store: the same call sequence for every valid stream.
* The stored measurement equals y_t = g·(K_t·min(x, cap) + m_t) computed in fractions.
"""

import sqlite3
from fractions import Fraction

import numpy as np
import pytest

from matmech.privacy import noise
from matmech.privacy.budget import PrivacyBudget
from matmech.stream import state
from matmech.stream.exact import clamp_counts, limb_layout
from matmech.stream.plan import StreamSpec, plan_stream
from matmech.stream.release import StreamRelease

N, K, T0, C0 = 6, 2, 3, 1


def _spy(monkeypatch, events):
    for name in ("gaussian", "laplace", "discrete_gaussian", "discrete_laplace"):
        real = getattr(noise, name)
        monkeypatch.setattr(
            noise,
            name,
            lambda *a, _r=real, _n=name, **kw: (events.append(("draw", _n)), _r(*a, **kw))[1],
        )
    for name in ("put_noise", "put_step", "mark_charged"):
        real = getattr(state.StreamStore, name)
        monkeypatch.setattr(
            state.StreamStore,
            name,
            lambda self, *a, _r=real, _n=name: (
                events.append(("store", _n, a[0] if a else None)),
                _r(self, *a),
            )[1],
        )

    class SpyBudget(PrivacyBudget):
        def spend_events(self, evs, *, what=""):
            entry = super().spend_events(evs, what=what)
            events.append(("spend", entry.eps, entry.delta))
            return entry

    return SpyBudget(5.0, 1e-5)


def _run(path, spec, rows, monkeypatch):
    """Run a whole stream under the spy: (events, public outputs, stored rows)."""
    events: list = []
    budget = _spy(monkeypatch, events)
    s = StreamRelease.create(path, spec, budget=budget, rng=np.random.default_rng(5))
    public = []
    for t, row in enumerate(rows):
        try:
            res = s.step(row)
        except Exception as exc:  # recorded: one side raising would fail the comparison
            events.append(("raise", type(exc).__name__))
            continue
        public.append((res.t, res.std, res.categories, res.secure, res.replayed))
        events.append(("released", t))
    status = s.status()
    status.pop("stream_id")  # random per stream
    monkeypatch.undo()
    with sqlite3.connect(path) as con:
        stored = con.execute("SELECT t, z, x, y FROM steps ORDER BY t").fetchall()
    return events, public, status, budget.spent_under("basic"), stored  # the sums charged


SPECS = {
    "gauss": dict(eps=1.0, delta=1e-6, max_records=100),
    "laplace-2^50": dict(eps=1.0, max_records=2**50),  # four limbs of 16 bits
    "dense-2^40": dict(eps=1.0, delta=1e-6, factorization="dense", max_records=2**40),
}


def _limits(spec):
    """(a, rows-builder) pairs: the cell (T0, C0) holds a on one side and a + 1 on the other."""
    m, plan = spec.max_records, plan_stream(spec)
    w = limb_layout(plan.factorization, plan.grid, m).width
    cases = {
        "total at max_records": m - 3 * N * K + 3,  # the rest holds 3·(N·K − 1) records
        "cell at max_records": m,
        "limb width": 2**w - 1,
        "2^53 in float64": 2**53 - 1,
        "2^62 (check_counts' limit)": 2**62 - 1,
        "int64 -> uint64": 2**63 - 1,
        "uint64 -> Python int": 2**64 - 1,
    }
    return {k: a for k, a in cases.items() if a > 0}


def _rows(a, as_float=False):
    rows = [[3] * K for _ in range(N)]
    rows[T0][C0] = a
    if as_float:
        return [np.asarray(r, dtype=np.float64) for r in rows]
    return rows


@pytest.mark.parametrize("name", sorted(SPECS))
def test_neighbours_at_every_limit_behave_alike(tmp_path, monkeypatch, name):
    spec = StreamSpec(N, categories=K, **SPECS[name])
    cap = spec.max_records
    for label, a in _limits(spec).items():
        for as_float in (False, True):
            sides = [
                _run(
                    tmp_path / f"{label}-{as_float}-{d}.db",
                    spec,
                    _rows(a + d, as_float),
                    monkeypatch,
                )
                for d in (0, 1)
            ]
            (ev0, pub0, st0, sp0, rows0), (ev1, pub1, st1, sp1, rows1) = sides
            assert ev0 == ev1, (name, label, as_float)
            assert not any(e[0] == "raise" for e in ev0), (name, label, as_float, ev0)
            assert pub0 == pub1 and st0 == st1 and sp0 == sp1 == spec.charge
            assert [r[1] for r in rows0] == [r[1] for r in rows1], "the same noise"
            x0 = np.array([np.frombuffer(r[2], dtype=np.float64) for r in rows0])
            x1 = np.array([np.frombuffer(r[2], dtype=np.float64) for r in rows1])
            diff = x1 - x0
            want = np.zeros((N, K))
            want[T0, C0] = min(a + 1, cap) - min(a, cap)  # cap ≤ 2^50: floats are exact below
            np.testing.assert_array_equal(diff, want)
            assert x1.max() <= cap


def test_the_same_calls_for_every_valid_stream(tmp_path, monkeypatch):
    spec = StreamSpec(N, categories=K, eps=1.0, delta=1e-6, max_records=1000)
    rng = np.random.default_rng(3)
    streams = {
        "zeros": [[0, 0]] * N,
        "small": rng.integers(0, 9, size=(N, K)).tolist(),
        "past the total": [[400, 300]] * N,
        "at and past the cell cap": [[1000, 1001]] * N,
        "huge Python ints": [[2**100, 7], [0, 2**70]] * (N // 2),
        "uint64": [np.array([2**64 - 1, 1], dtype=np.uint64)] * N,
        "float": [np.array([1e300, 4.0])] * N,
        "bool": [np.array([True, False])] * N,
    }
    runs = {k: _run(tmp_path / f"{k}.db", spec, v, monkeypatch) for k, v in streams.items()}
    ref = runs["zeros"]
    for k, (events, public, status, spent, _) in runs.items():
        assert events == ref[0], k
        assert public == ref[1] and status == ref[2] and spent == ref[3] == (1.0, 1e-6), k
    assert [e[0] for e in ref[0]].count("spend") == 1
    assert ref[0][0][0] == "spend" and ("raise",) not in {e[:1] for e in ref[0]}


@pytest.mark.parametrize(
    "kw",
    [
        dict(eps=1.0, delta=1e-6, max_records=2**50),
        dict(eps=3.0, max_records=2**50),  # Laplace: several limbs
        dict(eps=1.0, delta=1e-6, factorization="dense", max_records=2**45),
        dict(eps=1.0, delta=1e-6, factorization="prefix", max_records=2**50),
    ],
)
def test_the_measurement_is_exact_for_any_counts(tmp_path, kw):
    n, k = 9, 3
    spec = StreamSpec(n, categories=k, **kw)
    cap = spec.max_records
    rng = np.random.default_rng(8)
    rows = [[int(v) for v in rng.integers(0, 2**62, size=k)] for _ in range(n)]
    rows[2][0], rows[4][1], rows[5][2] = 2**90, cap, cap - 1
    s = StreamRelease.create(tmp_path / "e.db", spec, rng=np.random.default_rng(1))
    out = [s.step(r) for r in rows]
    with sqlite3.connect(tmp_path / "e.db") as con:
        stored = con.execute("SELECT z, x, y FROM steps ORDER BY t").fetchall()
    Z, X, Y = (np.array([np.frombuffer(r[i], dtype=np.float64) for r in stored]) for i in range(3))
    xs = [[min(v, cap) for v in r] for r in rows]
    np.testing.assert_array_equal(X, np.array(xs, dtype=np.float64))
    C = s.plan.factorization.dense()
    g = Fraction(s.plan.grid)
    for t in range(n):
        for c in range(k):
            exact = sum(Fraction(C[t, j]) * xs[j][c] for j in range(t + 1)) + Fraction(Z[t, c])
            assert (exact / g).denominator == 1  # on the lattice
            assert Y[t, c] == float(exact), (t, c)  # one correct rounding, bit for bit
    B = np.tril(np.ones((n, n))) @ np.linalg.inv(C)
    np.testing.assert_allclose([o.values for o in out], B @ Y, rtol=1e-9)
    totals = np.cumsum(np.array(xs, dtype=np.float64), axis=0)
    np.testing.assert_allclose([o.values for o in out], totals, rtol=1e-6)


def test_not_counts_are_refused_before_anything_is_drawn(tmp_path):
    s = StreamRelease.create(
        tmp_path / "f.db",
        StreamSpec(4, eps=1.0, categories=2, max_records=10),
        rng=np.random.default_rng(0),
    )
    bad = [[1, -1], [1.5, 2], [np.nan, 1], [np.inf, 1], [-(2**80), 1], ["a", 1], [1, 2, 3]]
    for row in bad:
        with pytest.raises((ValueError, TypeError)) as info:
            s.step(row)
        assert "80" not in str(info.value) and "1.5" not in str(info.value)
    with sqlite3.connect(tmp_path / "f.db") as con:
        assert con.execute("SELECT COUNT(*) FROM steps").fetchone() == (0,)


def test_clamp_counts_is_one_lipschitz_per_cell():
    cap = 50
    for a in [0, 1, 49, 50, 51, 2**53, 2**62, 2**63 - 1, 2**63, 2**64, 2**200]:
        lo = clamp_counts([a, 3], 2, cap)
        hi = clamp_counts([a + 1, 3], 2, cap)
        assert lo.dtype == np.int64 and list(hi - lo) in ([0, 0], [1, 0])
        assert lo[0] == min(a, cap) and hi[0] == min(a + 1, cap)
