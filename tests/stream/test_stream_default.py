"""The default factorization (issue 32): every figure against a dense computation, the default
the argmin of the exact expected error, status in the units of the noise drawn, batch steps
equal to single steps, and stream files of the earlier format still open."""

import functools
import json
import math
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from matmech.privacy.budget import PrivacyBudget
from matmech.privacy.calibration import noise_for
from matmech.stream.advise import advise_stream
from matmech.stream.factorizations import (
    FACTORIZATIONS,
    build,
    hierarchical_block_lengths,
    hierarchical_errors,
)
from matmech.stream.plan import StreamSpec, auto_candidates, plan_stream
from matmech.stream.release import VARIANCE_UNITS, StreamRelease

DATA = Path(__file__).parent / "data"
OPTS = {"blt": {"max_buffers": 2}}
NORMED = ("banded", "hierarchical")  # the builders whose choice depends on the norm


@functools.cache
def _build(name, n, objective, norm):
    return build(
        name, n, objective=objective, norm=norm if name in NORMED else 2, **OPTS.get(name, {})
    )


def _dense_reference(C):
    """(Δ₁, Δ₂, ‖B_t‖² per step) from the dense C: B = prefix·C⁻¹ by a dense inverse."""
    n = C.shape[0]
    B = np.tril(np.ones((n, n))) @ np.linalg.inv(C)
    np.testing.assert_allclose(B @ C, np.tril(np.ones((n, n))), atol=1e-8)
    return np.abs(C).sum(axis=0).max(), np.sqrt((C**2).sum(axis=0).max()), (B**2).sum(axis=1)


@pytest.mark.parametrize("n", [1, 2, 7, 24, 37])
@pytest.mark.parametrize("name", sorted(FACTORIZATIONS))
def test_l1_and_l2_figures_of_every_factorization_match_a_dense_computation(name, n):
    for norm in (1, 2):
        f = build(name, n, norm=norm, **OPTS.get(name, {}))
        d1, d2, var = _dense_reference(f.dense())
        assert f.sensitivity(1) == pytest.approx(d1, rel=1e-12)
        assert f.sensitivity(2) == pytest.approx(d2, rel=1e-12)
        mean, mx = f.errors(norm)
        s2 = (d1 if norm == 1 else d2) ** 2
        assert mean == pytest.approx(s2 * var.mean(), rel=1e-9)
        assert mx == pytest.approx(s2 * var.max(), rel=1e-9)


@pytest.mark.parametrize("n", [1, 5, 16, 37, 100])
@pytest.mark.parametrize("m", [2, 3, 5, 10, 101])
def test_the_tree_closed_forms_match_its_dense_matrix(n, m):
    f = build("hierarchical", n, branching=m)
    C = f.dense()
    w = hierarchical_block_lengths(n, m)
    for t in range(n):  # row t is the block of length w ending at t
        assert C[t, : t + 1].tolist() == [0.0] * (t + 1 - w[t]) + [1.0] * w[t]
    d1, d2, var = _dense_reference(C)
    v, cover = hierarchical_errors(n, m)
    np.testing.assert_allclose(v, var, rtol=1e-9)
    assert cover == d1 and d2**2 == pytest.approx(cover, rel=1e-12)
    # the running total is the sum of the blocks of t's base-m digits: ‖B_t‖² = digit sum
    digits = [sum(int(c) for c in np.base_repr(t + 1, m)) if m <= 36 else None for t in range(n)]
    if m <= 36:
        assert v.tolist() == digits


@pytest.mark.parametrize("objective", ["mean", "max"])
@pytest.mark.parametrize(
    "priv", [dict(eps=1.0), dict(eps=0.3, delta=1e-6), dict(rho=0.1, delta=1e-7)]
)
@pytest.mark.parametrize("n", [1, 20, 64])
def test_the_default_is_the_argmin_of_the_exact_error(n, priv, objective):
    spec = StreamSpec(n, categories=2, objective=objective, **priv)
    which = ("mean", "max").index(objective)
    chosen = plan_stream(spec)
    assert chosen.factorization.name in auto_candidates(n, spec.charge[1])
    scores = {}
    for name in FACTORIZATIONS:  # every factorization, blt and dense included
        for norm in (1, 2):
            plan = plan_stream(spec, _build(name, n, objective, norm))
            # second method: std² · ‖B_g,t‖² with B_g from a dense inverse of the measured C_g
            _, _, var = _dense_reference(plan.factorization.dense())
            exact = plan.std**2 * np.array([var.mean(), var.max()])
            np.testing.assert_allclose(plan.errors(), exact, rtol=1e-9)
            scores[name, norm] = exact[which]
    best = min(scores.values())
    assert chosen.errors()[which] <= best * (1 + 1e-9), (chosen.factorization.name, scores)
    # advise_stream ranks the same figures: its best releasable row is the default (or ties)
    names = tuple(x for x in FACTORIZATIONS if x != "blt")  # blt's optimiser: seconds, scored above
    adv = advise_stream(n, objective=objective, dense=True, names=names, **_eps_delta(spec))
    top = (adv.best.mean, adv.best.max)[which]
    assert top == pytest.approx(chosen.errors()[which], rel=1e-12)
    mine = next(c for c in adv.choices if c.name == chosen.factorization.name)
    assert (mine.mean, mine.max)[which] == top


def _eps_delta(spec):
    eps, delta = spec.charge
    return dict(eps=eps, delta=delta)


def test_pure_eps_default_is_not_the_square_root():
    """The issue's case in small: under pure ε the square root's Δ₁ grows as √n."""
    spec = StreamSpec(365, categories=3, eps=1.0)
    plan = plan_stream(spec)
    assert plan.factorization.name == "hierarchical" and plan.noise == "discrete_laplace"
    sqrt = plan_stream(spec, build("sqrt", 365))
    ident = plan_stream(spec, build("identity", 365))
    assert plan.errors()[0] < ident.errors()[0] < sqrt.errors()[0]
    # identity: b = Δ₁/ε, the discrete Laplace variance 2q/(1 − q)², q = e^(−1/b), times t + 1
    kind, b = noise_for(1.0, 0.0, ident.sensitivity)
    q = math.exp(-1.0 / b)
    # (the sampler rounds b up to 32 bits: never less noise, ~1e-9 more)
    assert ident.errors()[0] == pytest.approx(2 * q / (1 - q) ** 2 * 366 / 2, rel=1e-8)


def test_advise_stream_units_and_ranking():
    lap = advise_stream(64, eps=1.0, names=("sqrt", "identity", "hierarchical"), dense=False)
    gau = advise_stream(64, eps=1.0, delta=1e-6, names=("sqrt", "identity"), dense=False)
    assert lap.noise == "discrete_laplace" and gau.noise == "discrete_gaussian"
    assert [c.name for c in lap.choices if c.releasable][0] == "hierarchical"
    assert gau.best.name == "sqrt"
    for adv in (lap, gau):
        means = [c.mean for c in adv.choices]
        assert means == sorted(means)
        for c in adv.choices:  # unit figures are bounded below by the SVD bound (Δ₁ ≥ Δ₂)
            assert c.mean_unit >= adv.mean_bound * (1 - 1e-9)
            assert c.rmse == pytest.approx(math.sqrt(c.mean))
    # pure ε: the square root's figure is its L1 one (Δ₁² ≫ Δ₂²)
    sq = next(c for c in lap.choices if c.name == "sqrt")
    f = build("sqrt", 64)
    assert sq.mean_unit == pytest.approx(f.errors(1)[0], rel=1e-6)
    with pytest.raises(ValueError, match="eps"):
        advise_stream(8, eps=-1.0)
    with pytest.raises(ValueError, match="norm"):
        build("sqrt", 8, norm=3)


def test_status_is_in_the_units_of_the_noise_drawn(tmp_path):
    for kw in (dict(eps=1.0), dict(eps=1.0, delta=1e-6)):
        s = StreamRelease.create(
            tmp_path / f"{len(kw)}.db",
            StreamSpec(30, **kw),
            rng=np.random.default_rng(0),
        )
        st = s.status()
        stds = np.array([s.plan.std * math.sqrt(v) for v in s.plan.factorization.step_variances()])
        assert st["mean_variance"] == pytest.approx((stds**2).mean(), rel=1e-12)
        assert st["max_variance"] == pytest.approx((stds**2).max(), rel=1e-12)
        assert st["variance_units"] == VARIANCE_UNITS
        assert "mean_variance_sigma2" not in st and "max_variance_sigma2" not in st
        assert st["final_step_std"] ** 2 <= st["max_variance"] * (1 + 1e-12)


def _rows(path):
    with sqlite3.connect(path) as con:
        return con.execute("SELECT t, z, x, y, r FROM steps ORDER BY t").fetchall()


@pytest.mark.parametrize("kw", [dict(eps=1.0), dict(eps=1.0, delta=1e-6)])
def test_batch_equals_single_steps(tmp_path, kw):
    n, k = 20, 3
    X = np.random.default_rng(4).integers(0, 40, size=(n, k))
    spec = StreamSpec(n, categories=k, **kw)
    b1, b2 = PrivacyBudget(2.0, 1e-5), PrivacyBudget(2.0, 1e-5)
    one = StreamRelease.create(tmp_path / "one.db", spec, budget=b1, rng=np.random.default_rng(9))
    single = [one.step(X[t]) for t in range(n)]
    many = StreamRelease.create(tmp_path / "many.db", spec, budget=b2, rng=np.random.default_rng(9))
    seen = []
    batch = many.step_many(X, on_step=seen.append)
    assert batch == single and seen == batch
    assert _rows(tmp_path / "one.db") == _rows(tmp_path / "many.db")
    assert [(e.eps, e.delta) for e in b1.ledger] == [(e.eps, e.delta) for e in b2.ledger]
    assert len(b1.ledger) == 1  # the stream is charged once, whatever the batching
    # running the batch again replays every step, reading nothing
    again = StreamRelease.open(tmp_path / "many.db", budget=b2).step_many([[-1] * k] * n)
    assert all(r.replayed for r in again) and [r.values for r in again] == [
        r.values for r in single
    ]


def test_a_malformed_row_refuses_the_batch_before_anything_is_drawn(tmp_path):
    s = StreamRelease.create(
        tmp_path / "s.db", StreamSpec(10, categories=2, eps=1.0), rng=np.random.default_rng(0)
    )
    s.step([1, 2])
    rows = [[1, 2], [3, 4], [5, 6], [7, 0.5], [1, 1]]
    with pytest.raises(ValueError, match=r"step 3 \(row 3\).*no step was taken") as exc:
        s.step_many(rows)
    assert "0.5" not in str(exc.value)
    assert s.steps_done == 1 and len(_rows(tmp_path / "s.db")) == 1  # no noise drawn
    with pytest.raises(ValueError, match="ahead of the stream"):
        s.step_many(rows, t=2)
    with pytest.raises(ValueError, match="horizon"):
        s.step_many([[0, 0]] * 11)


def test_a_failure_mid_batch_keeps_the_committed_steps_and_names_the_step(tmp_path, monkeypatch):
    path = tmp_path / "s.db"
    spec = StreamSpec(8, categories=2, eps=1.0, delta=1e-6)
    s = StreamRelease.create(path, spec, rng=np.random.default_rng(0))
    X = np.arange(16).reshape(8, 2)
    put = s._store.put_step

    def failing(t, *a):
        if t == 3:
            raise OSError(28, "the disk is full (test)")
        return put(t, *a)

    monkeypatch.setattr(s._store, "put_step", failing)
    with pytest.raises(OSError) as exc:
        s.step_many(X)
    assert "steps 0..2 are released and stored, step 3 failed" in " ".join(exc.value.__notes__)
    z3 = [z for t, z, *_ in _rows(path) if t == 3]
    assert len(_rows(path)) == 4 and _rows(path)[3][3] is None  # step 3: noise only
    monkeypatch.undo()
    # the same batch again: 0..2 replayed, step 3 takes its stored noise, the rest continue
    res = StreamRelease.open(path, rng=np.random.default_rng(1)).step_many(X)
    assert [r.replayed for r in res] == [True] * 3 + [False] * 5
    assert [z for t, z, *_ in _rows(path) if t == 3] == z3
    np.testing.assert_allclose(
        [r.values for r in res],
        np.cumsum(X, axis=0) + _noise_part(path, s.plan),
        rtol=1e-12,
    )


def _noise_part(path, plan):
    n = plan.spec.horizon
    Z = np.array([np.frombuffer(z) for _, z, *_ in _rows(path)])
    C = plan.factorization.dense()
    return (np.tril(np.ones((n, n))) @ np.linalg.inv(C)) @ Z


@pytest.mark.parametrize("name", ["old_laplace", "old_gauss"])
def test_stream_files_of_the_earlier_format_still_open(tmp_path, name):
    want = json.loads((DATA / "old_streams.json").read_text())[name]
    for ext in ("stream", "key"):
        shutil.copy(DATA / f"{name}.{ext}", tmp_path / f"{name}.{ext}")
    path, key = tmp_path / f"{name}.stream", tmp_path / f"{name}.key"
    s = StreamRelease.open(path, key_file=key, rng=np.random.default_rng(3))
    assert [list(r.values) for r in s.released()] == want["released"]
    assert [r.std for r in s.released()] == want["stds"]
    st, old = s.status(), want["status"]
    for field in ("factorization", "noise", "scale", "noise_std", "grid", "sensitivity"):
        assert st[field] == old[field]
    assert st["factorization"] == "sqrt"  # the file's factorization, not today's default
    assert st["mean_variance"] == pytest.approx(
        old["noise_std"] ** 2 * s.plan.factorization.step_variances().mean(), rel=1e-12
    )
    s.step([1, 1])  # and it continues
    assert StreamRelease.open(path, key_file=key).steps_done == 6


def _cli(*argv):
    from matmech.cli import main

    return main([str(a) for a in argv])


def _stored_counts(path, k):
    return np.array([np.frombuffer(x).reshape(k) for _, _, x, _, _ in _rows(path) if x])


def _init(tmp_path, horizon, cats, capsys, name="s"):
    spec = tmp_path / f"{name}.toml"
    spec.write_text(f"horizon = {horizon}\ncategories = {json.dumps(list(cats))}\neps = 1.0\n")
    assert _cli("stream", "init", spec, tmp_path / f"{name}.db") == 0
    capsys.readouterr()
    return tmp_path / f"{name}.db"


def test_cli_batch_from_csv_and_json_rows(tmp_path, capsys):
    X = np.random.default_rng(2).integers(0, 30, size=(12, 2))
    db = _init(tmp_path, 12, ["a", "b"], capsys)
    csv = tmp_path / "rows.csv"  # columns in another order than the stream's
    csv.write_text("b,a\n" + "".join(f"{r[1]},{r[0]}\n" for r in X[:5]))
    assert _cli("stream", "step", db, "--rows", csv, "--json") == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["t"] for x in lines] == list(range(5))
    js = tmp_path / "rows.json"  # steps 5..11 as objects and lists, from --t 5
    js.write_text(json.dumps([{"a": int(r[0]), "b": int(r[1])} for r in X[5:8]] + X[8:].tolist()))
    assert _cli("stream", "step", db, "--rows", js, "--t", 5) == 0
    np.testing.assert_array_equal(_stored_counts(db, 2), X)
    # the first file again replays steps 0..4 from the stream file
    capsys.readouterr()
    assert _cli("stream", "step", db, "--rows", csv, "--json") == 0
    assert all(json.loads(x)["replayed"] for x in capsys.readouterr().out.splitlines())
    # a bad entry names its row, not its text; nothing is drawn
    db2 = _init(tmp_path, 4, ["a", "b"], capsys, "s2")
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n3,secret7\n")
    assert _cli("stream", "step", db2, "--rows", bad) == 2
    err = capsys.readouterr().err
    assert "row 1" in err and "secret7" not in err and len(_rows(db2)) == 0
    bad.write_text("a,c\n1,2\n")
    assert _cli("stream", "step", db2, "--rows", bad) == 2
    assert "header" in capsys.readouterr().err


def test_cli_batch_from_a_table_of_records(tmp_path, capsys):
    rng = np.random.default_rng(8)
    days = rng.integers(0, 6, 300)
    cats = rng.choice(["EWR", "JFK", "LGA"], 300)
    stamps = [f"2013-01-0{d + 1}T{h:02d}:30:00" for d, h in zip(days, rng.integers(0, 24, 300))]
    table = tmp_path / "flights.csv"
    table.write_text("when,origin\n" + "".join(f"{s},{c}\n" for s, c in zip(stamps, cats)))
    db = _init(tmp_path, 6, ["EWR", "JFK", "LGA"], capsys)
    args = ["--time-column", "when", "--start", "2013-01-01", "--end", "2013-01-07"]
    assert _cli("stream", "step", db, "--records", table, *args, "--category-column", "origin") == 0
    want = np.array(
        [[np.sum((days == d) & (cats == c)) for c in ("EWR", "JFK", "LGA")] for d in range(6)]
    )
    np.testing.assert_array_equal(_stored_counts(db, 3), want)
    out = capsys.readouterr().out
    assert "step 5" in out
    # a record outside the steps is an error by default (nothing drawn), dropped on request
    db2 = _init(tmp_path, 5, ["EWR", "JFK", "LGA"], capsys, "s2")
    short = ["--time-column", "when", "--start", "2013-01-01", "--end", "2013-01-06"]
    cat = ["--category-column", "origin"]
    assert _cli("stream", "step", db2, "--records", table, *short, *cat) == 2
    assert len(_rows(db2)) == 0
    assert _cli("stream", "step", db2, "--records", table, *short, *cat, "--policy", "drop") == 0
    np.testing.assert_array_equal(_stored_counts(db2, 3), want[:5])
    assert _cli("stream", "step", db2, "--records", table, "--start", "2013-01-01") == 2
    assert "--time-column" in capsys.readouterr().err


@pytest.mark.parametrize("n", [1, 2, 3, 9, 26, 100, 365, 1000, 4097])
def test_the_tree_score_in_closed_form_counts_the_digits(n):
    from matmech.stream.factorizations import hierarchical_branchings, hierarchical_score

    for m in sorted({2, 3, 7, 10, 20, n, n + 1, n + 5} - {0, 1}):
        v, cover = hierarchical_errors(n, m)
        levels, mean, mx = hierarchical_score(n, m)
        assert levels == cover and mx == v.max()
        assert mean == pytest.approx(v.mean(), rel=1e-12)
    # the branchings searched above n = 1024 hold the best of every m <= n + 1
    if n > 1024:

        def score(m):
            d, mean, _ = hierarchical_score(n, m)
            return d * d * mean

        full = min(score(m) for m in range(2, n + 2))
        assert min(score(m) for m in hierarchical_branchings(n)) == full


@pytest.mark.parametrize("kw", [dict(eps=1.0), dict(eps=0.5, delta=1e-6)])
def test_a_window_factorization_releases_as_its_dense_oracle_and_reopens(tmp_path, kw):
    n, k = 23, 2
    spec = StreamSpec(n, categories=k, factorization="hierarchical", **kw)
    s = StreamRelease.create(tmp_path / "s.db", spec, rng=np.random.default_rng(5))
    f = s.plan.factorization
    assert f.form == "windows" and s.plan.grid == 1.0
    X = np.random.default_rng(6).integers(0, 30, size=(n, k))
    R = np.array([r.values for r in s.step_many(X[:10])])
    s = StreamRelease.open(tmp_path / "s.db")  # the windows come back from the file
    assert s.plan.factorization.form == "windows"
    np.testing.assert_array_equal(s.plan.factorization.windows, f.windows)
    R = np.vstack([R, [r.values for r in s.step_many(X, t=0)][10:]])
    C = f.dense()
    B = np.tril(np.ones((n, n))) @ np.linalg.inv(C)
    Z = np.array([np.frombuffer(z) for _, z, *_ in _rows(tmp_path / "s.db")])
    np.testing.assert_allclose(R, B @ (C @ X + Z), rtol=1e-12, atol=1e-9)
    for t in (0, 7, n - 1):  # the rows the release builds one by one
        np.testing.assert_array_equal(s.plan.k_row(t), C[t, : t + 1].astype(np.int64))
        np.testing.assert_allclose(f.b_row(t), B[t, : t + 1], atol=1e-12)
    assert s.status()["mean_variance"] == pytest.approx(
        s.plan.std**2 * (B**2).sum(1).mean(), rel=1e-12
    )


def test_the_pure_eps_default_is_the_tree_at_any_horizon():
    for n in (2000, 2**16):
        plan = plan_stream(StreamSpec(n, eps=1.0))
        assert plan.factorization.name == "hierarchical"
        ident = plan_stream(StreamSpec(n, eps=1.0, factorization="identity"))
        assert plan.errors()[0] < ident.errors()[0] / 4


def test_windows_are_checked():
    from matmech.stream.factorizations import StreamFactorization

    for w in ([1, 3, 1], [0, 1, 1], [1.0, 1.0, 1.0]):
        with pytest.raises(ValueError, match="windows"):
            StreamFactorization("x", 3, windows=np.array(w))
    with pytest.raises(ValueError, match="exactly one"):
        StreamFactorization("x", 3, c=np.ones(3), windows=np.ones(3, dtype=np.int64))
