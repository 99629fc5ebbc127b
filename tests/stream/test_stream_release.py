"""The streaming release: a dense oracle, Monte Carlo variances, the charge-before-draw protocol."""

import sqlite3

import numpy as np
import pytest

from matmech.privacy import noise
from matmech.privacy.budget import BudgetExceededError, PrivacyBudget
from matmech.stream.plan import StreamSpec, plan_stream
from matmech.stream.release import StreamRelease


def _stored_noise(path, k):
    with sqlite3.connect(path) as con:
        rows = con.execute("SELECT t, z FROM steps ORDER BY t").fetchall()
    return {t: np.frombuffer(z, dtype=np.float64).reshape(k) for t, z in rows}


@pytest.mark.parametrize(
    "spec_kw",
    [
        dict(eps=1.0, delta=1e-6, factorization="sqrt"),
        dict(eps=2.0, factorization="sqrt"),  # pure ε: discrete Laplace, L1 sensitivity
        dict(rho=0.3, delta=1e-7, factorization="banded"),
        dict(eps=1.0, delta=1e-6, factorization="dense"),
        dict(eps=1.0, delta=1e-6, factorization="identity"),  # integer C: grid 1
        dict(eps=0.5, delta=1e-6, factorization="sqrt", neighbors="substitute"),
    ],
)
def test_release_equals_dense_oracle(tmp_path, spec_kw):
    n, k = 12, 3
    spec = StreamSpec(n, categories=k, **spec_kw)
    s = StreamRelease.create(tmp_path / "s.db", spec, rng=np.random.default_rng(7))
    rng = np.random.default_rng(1)
    X = rng.integers(0, 50, size=(n, k))
    out = [s.step(X[t]) for t in range(n)]
    p = s.plan
    C = p.factorization.dense()
    B = np.tril(np.ones((n, n))) @ np.linalg.inv(C)
    Z = np.array([z for _, z in sorted(_stored_noise(tmp_path / "s.db", k).items())])
    assert np.all(np.abs(Z / p.grid - np.rint(Z / p.grid)) == 0), "noise lies on the grid"
    assert np.all(np.abs(C / p.grid - np.rint(C / p.grid)) == 0), "the measured C is on the grid"
    R = np.array([o.values for o in out])
    np.testing.assert_allclose(R, B @ (C @ X + Z), rtol=1e-10, atol=1e-8)
    np.testing.assert_allclose(R, np.cumsum(X, axis=0) + B @ Z, rtol=1e-10, atol=1e-8)
    np.testing.assert_allclose([o.std for o in out], p.std * np.sqrt((B**2).sum(1)), rtol=1e-10)
    # the calibration: sensitivity of the rounded C under the spec's neighbours and norm
    factor = 2.0 if spec.neighbors == "substitute" else 1.0
    norm = 1 if spec.charge[1] == 0 else 2
    assert p.sensitivity == pytest.approx(
        factor * np.linalg.norm(C, ord=norm, axis=0).max(), rel=2e-9
    )
    assert p.noise == ("discrete_laplace" if norm == 1 else "discrete_gaussian")
    assert not out[0].secure


@pytest.mark.parametrize("delta", [1e-6, 0.0])
def test_monte_carlo_step_variance_within_4_se(tmp_path, delta):
    """k categories are k independent replicates of the same stream."""
    n, k = 6, 6000
    spec = StreamSpec(n, categories=k, eps=1.0, delta=delta, factorization="sqrt")
    s = StreamRelease.create(tmp_path / "mc.db", spec, rng=np.random.default_rng(11))
    X = np.random.default_rng(2).integers(0, 5, size=(n, k))
    S = np.cumsum(X, axis=0)
    for t in range(n):
        res = s.step(X[t])
        err = np.asarray(res.values) - S[t]
        m4 = np.mean((err - err.mean()) ** 4)
        var = err.var(ddof=1)
        se = np.sqrt((m4 - var**2) / k)
        assert abs(var - res.std**2) <= 4 * se, (t, var, res.std**2, se)
        assert abs(err.mean()) <= 4 * res.std / np.sqrt(k)


def test_budget_charged_once_before_the_first_draw(tmp_path, monkeypatch):
    events = []

    class SpyBudget(PrivacyBudget):
        def spend_events(self, evs, *, what=""):
            entry = super().spend_events(evs, what=what)
            events.append(("spend", entry.eps, entry.delta))
            return entry

    for name in ("gaussian", "laplace"):  # the grid samplers (they call the discrete ones)
        real = getattr(noise, name)
        monkeypatch.setattr(
            noise,
            name,
            lambda *a, _real=real, _n=name, **kw: (events.append(("draw", _n)), _real(*a, **kw))[1],
        )
    budget = SpyBudget(3.0, 1e-5)
    spec = StreamSpec(5, eps=1.0, delta=1e-6)
    s = StreamRelease.create(tmp_path / "a.db", spec, budget=budget, rng=np.random.default_rng(0))
    assert events == [("spend", 1.0, 1e-6)] and s.plan.grid != 1.0
    for t in range(3):
        s.step([t])
    s2 = StreamRelease.open(tmp_path / "a.db", budget=budget, rng=np.random.default_rng(0))
    s2.step([1])
    assert events[0][0] == "spend" and [e[0] for e in events].count("spend") == 1
    assert [e[0] for e in events[1:]] == ["draw"] * 4  # one draw per step, none on reopening
    assert budget.spent_under("basic") == (1.0, 1e-6)  # the sums charged (zcdp reports less)


def test_unaffordable_stream_is_refused_before_anything(tmp_path):
    budget = PrivacyBudget(0.5, 1e-5)
    with pytest.raises(BudgetExceededError):
        StreamRelease.create(tmp_path / "b.db", StreamSpec(8, eps=1.0, delta=1e-6), budget=budget)
    assert not (tmp_path / "b.db").exists() and budget.spent == (0.0, 0.0)


def test_replay_ahead_and_past_max_records(tmp_path):
    spec = StreamSpec(6, eps=1.0, delta=1e-6, max_records=100)
    s = StreamRelease.create(tmp_path / "c.db", spec, rng=np.random.default_rng(0))
    first = s.step([10])
    again = s.step("not even counts", t=0)  # a released step is answered from the file
    assert again.values == first.values and again.replayed
    with pytest.raises(ValueError, match="ahead of the stream"):
        s.step([1], t=3)
    # past the declared total: released (exact arithmetic needs no bound); a cell above the
    # bound is clamped to it — nothing after the charge is refused for its values
    second = s.step([95])
    third = s.step([10**6])
    assert (second.t, third.t) == (1, 2) and not second.replayed
    x = [np.frombuffer(r[0], dtype=np.float64)[0] for r in _rows_x(tmp_path / "c.db")]
    assert x == [10.0, 95.0, 100.0]


def _rows_x(path):
    with sqlite3.connect(path) as con:
        return con.execute("SELECT x FROM steps ORDER BY t").fetchall()


@pytest.mark.parametrize(
    "kw,err,match",
    [
        (dict(horizon=0, eps=1.0), ValueError, "horizon"),
        (dict(horizon=8, eps=1.0, rho=0.1, delta=1e-6), ValueError, "not both"),
        (dict(horizon=8, rho=0.1), ValueError, "delta"),
        (dict(horizon=8, eps=-1.0), ValueError, "eps"),
        (dict(horizon=8, eps=1.0, categories=0), ValueError, "categories"),
        (dict(horizon=8, eps=1.0, categories=("a", "a")), ValueError, "distinct"),
        (dict(horizon=8, eps=1.0, categories="abc"), TypeError, "categories"),
        (dict(horizon=8, eps=1.0, neighbors="swap"), ValueError, "neighbors"),
        (dict(horizon=8, eps=1.0, max_records=0), ValueError, "max_records"),
        (dict(horizon=2**24, eps=1.0, categories=2**10), ValueError, "GiB of history"),
    ],
)
def test_bad_spec_is_named(kw, err, match):
    with pytest.raises(err, match=match):
        StreamSpec(**kw)


def test_a_spec_without_eps_needs_a_share(tmp_path):
    spec = StreamSpec(8)  # neither eps nor rho: all of a share given at creation
    with pytest.raises(ValueError, match="declare the stream's privacy"):
        plan_stream(spec)
    with pytest.raises(TypeError, match="share"):
        StreamRelease.create(tmp_path / "s.db", spec, budget=PrivacyBudget(1.0, 1e-6))
    assert not (tmp_path / "s.db").exists()


def test_bad_counts_are_named_without_values(tmp_path):
    s = StreamRelease.create(
        tmp_path / "d.db", StreamSpec(4, eps=1.0, categories=2), rng=np.random.default_rng(0)
    )
    with pytest.raises(ValueError, match="2 columns"):
        s.step([1, 2, 3])
    with pytest.raises(ValueError, match=r"counts holds an entry that is negative"):
        s.step([1, -4])
    with pytest.raises(ValueError, match="t must be a step"):
        s.step([1, 1], t=9)
    for _ in range(4):
        s.step([0, 0])
    with pytest.raises(ValueError, match="stream is complete"):
        s.step([0, 0])
    assert s.step([0, 0], t=3).replayed
    with pytest.raises(FileExistsError):
        StreamRelease.create(tmp_path / "d.db", StreamSpec(4, eps=1.0))


def test_plan_grid_does_not_depend_on_max_records():
    """The grid follows the noise scale only; the exact step arithmetic needs no data bound."""
    plans = [
        plan_stream(StreamSpec(2**12, eps=1.0, delta=1e-6, max_records=m))
        for m in (1, 2**32, 2**50)
    ]
    assert len({p.grid for p in plans}) == 1
    p = plans[0]
    assert 2**21 < p.scale / p.grid <= 2**22


@pytest.mark.parametrize(
    "spec_kw",
    [
        dict(eps=1.0, delta=1e-6, factorization="sqrt"),
        dict(eps=2.0, factorization="sqrt"),
        dict(rho=0.3, delta=1e-7, factorization="banded"),
        dict(eps=1.0, delta=1e-6, factorization="dense"),
        dict(eps=1.0, factorization="identity"),
        dict(eps=0.5, delta=1e-6, factorization="sqrt", neighbors="substitute"),
    ],
)
def test_reopening_recomputes_the_calibration_and_refuses_an_altered_file(tmp_path, spec_kw):
    """A reopened stream draws with the noise its spec and stored C imply, not with whatever
    scale the file says: a changed scale, std, sensitivity or grid fails the file's MACs, and
    even a forger who holds the key (re-MACs the file) is refused by the recomputed calibration."""
    import json

    from matmech.privacy.integrity import IntegrityError
    from stream_files import forge

    path = tmp_path / "s.db"
    s = StreamRelease.create(
        path, StreamSpec(6, categories=2, **spec_kw), rng=np.random.default_rng(0)
    )
    s.step([1, 2])
    again = StreamRelease.open(path, rng=np.random.default_rng(1))
    assert (again.plan.scale, again.plan.std, again.plan.grid) == (
        s.plan.scale,
        s.plan.std,
        s.plan.grid,
    )
    with sqlite3.connect(path) as con:
        plan = json.loads(con.execute("SELECT value FROM meta WHERE key = 'plan'").fetchone()[0])

    def set_plan(p):
        return lambda con: con.execute(
            "UPDATE meta SET value = ? WHERE key = 'plan'", (json.dumps(p),)
        )

    for key, factor in (("scale", 0.5), ("std", 0.5), ("sensitivity", 0.5), ("grid", 2.0)):
        altered = {**plan, key: plan[key] * factor}
        with sqlite3.connect(path) as con:
            set_plan(altered)(con)
        with pytest.raises(IntegrityError, match="creation record .* does not verify"):
            StreamRelease.open(path, rng=np.random.default_rng(1))
        forge(path, set_plan(altered))
        with pytest.raises(ValueError, match="does not follow from its spec|not on its grid"):
            StreamRelease.open(path, rng=np.random.default_rng(1))
    forge(path, set_plan(plan))
    assert StreamRelease.open(path, rng=np.random.default_rng(1)).steps_done == 1
