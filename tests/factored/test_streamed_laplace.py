"""The streamed residual release under pure ε (weighted marginal tables, exact discrete
Laplace, residuals combined batch by batch): the same answers and std as the in-memory
release_factored and as a dense GLS over the cells on the same noisy tables, in RAM or
spilled; the budget charged once (ε only) before any draw; every refusal before reading."""

import itertools
import json
import math

import numpy as np
import pytest

from matmech.privacy.events import ApproxDP

import matmech as mm
from matmech import workloads as Wl
from matmech.results import store
from matmech.measurements import table_batches
from matmech.measurements.residual import combine_tables
from matmech.release import release_factored
from matmech.release import release_marginals
from matmech.sources.tables import marginal_tables
from matmech.linalg.terms import marginal_workload
from matmech.linalg.residual import orthonormal_contrasts
from matmech.privacy import noise

from factored_data import codes as _codes
from factored_data import hist as _hist

DOMAIN = (3, 4, 1, 5, 2)
SUBSETS = [(0, 1), (1, 3, 4), (3,), (0, 2, 3), (), (0, 1)]
WEIGHTS = [1.0, 2.0, 1.0, 0.5, 1.0, 3.0]
RECORDS = 1237  # a count that no number of the plan shares (messages are checked for it)


def _workload():
    return marginal_workload(DOMAIN, SUBSETS, weights=WEIGHTS)


def _spy_noisy(monkeypatch):
    """{T: noisy table} as each batch draws it (the streamed release drops them)."""
    seen = {}
    real = table_batches.TableBatches.draw

    def draw(self, batch, tables, src):
        out = real(self, batch, tables, src)
        seen.update({t: v.copy() for t, v in out.items()})
        return out

    monkeypatch.setattr(table_batches.TableBatches, "draw", draw)
    return seen


def _laplace_variance(b):
    """Var of P[k] ∝ exp(-|k|/b) on the integers: 2p/(1-p)² with p = e^{-1/b}."""
    p = math.exp(-1.0 / b)
    return 2.0 * p / (1.0 - p) ** 2


def _marginal(domain, t):
    m = np.ones((1, 1))
    for i, n in enumerate(domain):
        m = np.kron(m, np.eye(n) if i in t else np.ones((1, n)))
    return m


def _dense_gls(domain, mplan, noisy):
    """x̂ and its covariance over the cells from the noisy tables, each cell weighted by the
    inverse of its exact discrete Laplace variance (the scale the plan drew with)."""
    rows, ys, ws = [], [], []
    for t, b in zip(mplan.plan.tables, np.asarray(mplan.scales).tolist()):
        M = _marginal(domain, t)
        rows.append(M)
        ys.append(np.ravel(noisy[t]).astype(float))
        ws.append(np.full(M.shape[0], 1.0 / _laplace_variance(b)))
    A, y, w = np.vstack(rows), np.concatenate(ys), np.concatenate(ws)
    cov = np.linalg.pinv(A.T @ (w[:, None] * A))
    return cov @ (A.T @ (w * y)), cov


def _assert_like_in_memory(got, ref):
    """The streamed release's answers and std equal the in-memory release's (the same draws
    and residual sums; the reconstructions are two codes, equal to rounding)."""
    np.testing.assert_allclose(got.answers, ref.answers, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(got.std, ref.std, rtol=1e-12)


def _assert_dense(got, W, xhat, cov):
    Wd = W.dense()
    np.testing.assert_allclose(got.answers, Wd @ xhat, rtol=1e-9, atol=1e-8)
    np.testing.assert_allclose(got.std**2, np.einsum("ij,jk,ik->i", Wd, cov, Wd), rtol=1e-9)


# -- (a)-(c): equal to the in-memory release and to dense GLS, in RAM and on disk ------------


@pytest.mark.parametrize("search", ["all", "lattice"])
def test_streamed_pure_equals_in_memory_and_dense_gls_in_ram_and_on_disk(
    tmp_path, monkeypatch, search
):
    codes, W = _codes(DOMAIN, RECORDS, seed=4), _workload()
    noisy = _spy_noisy(monkeypatch)
    ref = release_factored(codes, W, 1.0, 0.0, rng=np.random.default_rng(11), search=search)
    tables_ref = dict(noisy)
    noisy.clear()
    ram = release_marginals(codes, W, 1.0, 0.0, rng=np.random.default_rng(11), search=search)
    tables_ram = dict(noisy)
    noisy.clear()
    disk = release_marginals(
        codes, W, 1.0, 0.0, rng=np.random.default_rng(11), search=search, spill_dir=str(tmp_path)
    )
    assert ram.store.path is None and disk.store.path is not None
    assert ram.delta == 0.0 and ram.store.dtype == np.float64
    a, b = ram.to_release(), disk.to_release()
    # (c) spilled = in RAM, bit for bit; the same noisy tables were drawn
    np.testing.assert_array_equal(a.answers, b.answers)
    np.testing.assert_array_equal(a.std, b.std)
    assert tables_ram.keys() == noisy.keys() == tables_ref.keys()
    for t in noisy:
        np.testing.assert_array_equal(tables_ram[t], noisy[t])
        np.testing.assert_array_equal(tables_ref[t], noisy[t])
    # (a) the in-memory pure-ε release on the same rng: same batches, same draws, and the
    # same residual sums bit for bit (the in-memory combination of those tables)
    _assert_like_in_memory(a, ref)
    meas = combine_tables(ram.measurement_plan, tables_ref)
    for T in ram.measurement_plan.plan.lattice.residuals:
        for rel in (ram, disk):
            y, var = rel.residual(T)
            np.testing.assert_array_equal(y, meas.coords[T].reshape(-1))
            np.testing.assert_array_equal(var, meas.row_variances[T].reshape(-1))
    assert ram.expected_error == pytest.approx(ref.expected_error, rel=1e-12)
    assert a.expected_error == pytest.approx(ref.expected_error, rel=1e-12)
    # (a), (b) independent: dense GLS over the cells on those noisy tables
    mplan = ram.measurement_plan
    assert set(noisy) == set(mplan.plan.tables)
    xhat, cov = _dense_gls(DOMAIN, mplan, noisy)
    _assert_dense(a, W, xhat, cov)
    # the noisy tables are the true tables plus integer noise (not the tables themselves)
    x = _hist(codes, DOMAIN).reshape(DOMAIN)
    t = mplan.plan.tables[0]
    true = x.sum(axis=tuple(i for i in range(len(DOMAIN)) if i not in t))
    assert noisy[t].dtype == np.int64 and not np.array_equal(noisy[t], true)


def test_marginals_below_terms_and_stored_residuals_equal_dense_gls(monkeypatch):
    codes, W = _codes(DOMAIN, RECORDS, seed=5), _workload()
    noisy = _spy_noisy(monkeypatch)
    rel = release_marginals(codes, W, 0.8, 0.0, rng=np.random.default_rng(3))
    xhat, cov = _dense_gls(DOMAIN, rel.measurement_plan, noisy)
    # (b) any marginal below a term, unweighted: values and std of the dense formula
    M = Wl.marginals(DOMAIN, attrs=[(1, 4)]).dense()
    values, std = rel.marginal((4, 1))  # axes in the order asked: the (1, 4) layout transposed
    values, std = values.T, std.T
    np.testing.assert_allclose(values.reshape(-1), M @ xhat, rtol=1e-9, atol=1e-8)
    np.testing.assert_allclose(std.reshape(-1) ** 2, np.einsum("ij,jk,ik->i", M, cov, M), rtol=1e-9)
    with pytest.raises(ValueError, match=r"residual \(0, 4\) was not measured"):
        rel.marginal((0, 4))
    # the stored residual (1, 3): orthonormal coordinates R x̂ and their exact variances
    R = np.ones((1, 1))
    for i, n in enumerate(DOMAIN):
        R = np.kron(R, orthonormal_contrasts(n) if i in (1, 3) else np.ones((1, n)))
    y, var = rel.residual((1, 3))
    np.testing.assert_allclose(y, R @ xhat, rtol=1e-9, atol=1e-8)
    np.testing.assert_allclose(var, np.einsum("ij,jk,ik->i", R, cov, R), rtol=1e-9)
    # intervals are the Release's on the same rows (term 1 has weight 2)
    lo, hi = rel.interval((1, 3, 4), 0.9)
    full = rel.to_release()
    rlo, rhi = full.interval(0.9)
    rows = slice(int(rel.offsets[1]), int(rel.offsets[2]))
    np.testing.assert_allclose(lo.reshape(-1) * 2.0, rlo[rows], rtol=1e-12)
    np.testing.assert_allclose(hi.reshape(-1) * 2.0, rhi[rows], rtol=1e-12)


def test_many_batches_small_stacks_and_an_emptied_cache_change_nothing(tmp_path, monkeypatch):
    """Tables of one scale cut into batches of two (each one sampler call), reconstruction
    stacks of a few cells, the lift cache emptied at every lift: still the in-memory release
    (the same batches) and dense GLS."""
    monkeypatch.setattr(table_batches, "_CHUNK", 20)
    monkeypatch.setattr(store, "CHUNK", 7)
    monkeypatch.setattr(store, "CACHE_BYTES", 0)
    domain = (3, 3, 3, 3, 2)
    codes = _codes(domain, RECORDS, seed=6)
    W = marginal_workload(domain, [*itertools.combinations(range(4), 2), (1, 4), (0,)])
    ref = release_factored(codes, W, 1.0, 0.0, rng=np.random.default_rng(8), search="lattice")
    noisy = _spy_noisy(monkeypatch)
    rel = release_marginals(
        codes, W, 1.0, 0.0, rng=np.random.default_rng(8), search="lattice", spill_dir=str(tmp_path)
    )
    steps = table_batches.TableBatches(rel.measurement_plan)
    batches = list(steps.batches())
    sizes = [b.J.size for b in batches]
    assert len(batches) >= 4 and max(sizes) == 2  # several tables a call, cut at 20 cells
    assert all(steps.cells[b.J].sum() <= 20 for b in batches)
    got = rel.to_release()
    _assert_like_in_memory(got, ref)
    _assert_dense(got, W, *_dense_gls(domain, rel.measurement_plan, noisy))


@pytest.mark.parametrize("form", ["tables", "histogram"])
def test_given_tables_or_a_histogram_release_like_release_factored(form):
    codes = _codes(DOMAIN, 500, seed=3)
    W = Wl.marginals(DOMAIN, 2)
    if form == "tables":  # no full table given: both releases search the lattice only
        given = marginal_tables(codes, DOMAIN, list(itertools.combinations(range(5), 2)))
        ref = release_factored(given, W, 1.0, 0.0, rng=np.random.default_rng(2))
    else:  # the histogram holds every table: as the records
        given = _hist(codes, DOMAIN)
        ref = release_factored(codes, W, 1.0, 0.0, rng=np.random.default_rng(2))
    rel = release_marginals(given, W, 1.0, 0.0, rng=np.random.default_rng(2))
    got = rel.to_release()
    _assert_like_in_memory(got, ref)
    assert ("'lattice'" in rel.strategy_note) is (form == "tables")


def test_many_attributes_search_the_lattice_like_release_factored():
    domain = (3, 2, 4) * 4  # 12 attributes: "auto" searches the lattice
    codes = _codes(domain, 400, seed=9)
    W = marginal_workload(domain, [(0, 1), (2, 5, 7), (11,), (3, 4), ()])
    ref = release_factored(codes, W, 1.0, 0.0, rng=np.random.default_rng(6))
    rel = release_marginals(codes, W, 1.0, 0.0, rng=np.random.default_rng(6))
    got = rel.to_release()
    _assert_like_in_memory(got, ref)
    assert "'lattice'" in rel.strategy_note


@pytest.mark.parametrize("neighbors, bits", [("substitute", 9), ("add_remove", None)])
def test_neighbours_and_unrounded_scales_release_like_release_factored(neighbors, bits):
    codes, W = _codes(DOMAIN, 600, seed=12), _workload()
    kw = dict(neighbors=neighbors, scale_bits=bits, max_records=10_000)
    ref = release_factored(codes, W, 0.5, 0.0, rng=np.random.default_rng(4), **kw)
    rel = release_marginals(codes, W, 0.5, 0.0, rng=np.random.default_rng(4), **kw)
    got = rel.to_release()
    _assert_like_in_memory(got, ref)
    assert rel.neighbors == neighbors and rel.to_dict()["noise"]["sensitivity"] == pytest.approx(
        2.0 if neighbors == "substitute" else 1.0
    )


def test_save_iterate_and_summary():
    codes, W = _codes(DOMAIN, RECORDS, seed=4), _workload()
    rel = release_marginals(codes, W, 1.0, 0.0, rng=np.random.default_rng(1))
    full = rel.to_release()
    assert [S for S, _, _ in rel.iter_marginals()] == [tuple(s) for s in SUBSETS]
    d = json.loads(json.dumps(rel.to_dict()))
    assert d["delta"] == 0.0 and d["answered"] == W.shape[0]
    assert d["noise"]["distribution"] == "discrete_laplace"
    assert d["noise"]["scale"] == sorted(set(np.asarray(rel.measurement_plan.scales).tolist()))
    assert d["strategy"]["tables"] == len(rel.measurement_plan.plan.tables)
    assert d["rmse"] == pytest.approx(math.sqrt(full.expected_error / W.shape[0]))
    assert "Laplace" in rel.strategy_note and d["noise"]["secure_randomness"] is False


# -- (d): the budget, once, ε only, before any draw; refusals before any read ---------------


def test_budget_is_charged_once_with_eps_only_before_the_first_draw(monkeypatch):
    budget = mm.PrivacyBudget(2.0, 1e-5)
    seen = []
    real = noise.discrete_laplace

    def spy(*a, **k):
        seen.append(budget.spent)
        return real(*a, **k)

    monkeypatch.setattr(noise, "discrete_laplace", spy)
    spends = []
    real_spend = budget.spend_events  # every spend goes through it

    def spend(*a, **k):
        spends.append((seen[:], a))
        return real_spend(*a, **k)

    monkeypatch.setattr(budget, "spend_events", spend)
    codes = _codes(DOMAIN, 300)
    rel = release_marginals(
        codes, Wl.marginals(DOMAIN, 2), 1.0, 0.0, budget=budget, rng=np.random.default_rng(0)
    )
    assert len(spends) == 1 and spends[0][0] == [] and spends[0][1][0] == (ApproxDP(1.0, 0.0),)
    assert seen and all(s == pytest.approx((1.0, 0.0)) for s in seen)
    assert rel.budget_remaining == pytest.approx((1.0, 1e-5))


class _NoData:
    def marginal_counts(self, subsets):
        raise AssertionError("data read")


def test_refusals_come_before_reading_drawing_or_spending(monkeypatch, tmp_path):
    budget = mm.PrivacyBudget(1.0)
    rng = np.random.default_rng(1)
    state = rng.bit_generator.state
    big = marginal_workload((10,) * 30, list(itertools.combinations(range(30), 3)))
    with pytest.raises(ValueError, match=r"would hold about .* GiB \(> max_memory"):
        release_marginals(_NoData(), big, 1.0, 0.0, budget=budget, rng=rng, max_memory=1 << 20)

    from matmech import limits

    monkeypatch.setattr(limits, "disk_room", lambda path: limits.Room(1 << 20, "free (a test)"))
    with pytest.raises(ValueError, match="on disk"):
        release_marginals(_NoData(), big, 1.0, 0.0, budget=budget, spill_dir=str(tmp_path))
    monkeypatch.undo()
    W = Wl.marginals(DOMAIN, 2)
    with pytest.raises(ValueError, match="too small"):
        release_marginals(_NoData(), W, 1e-15, 0.0, budget=budget, rng=rng)
    with pytest.raises(ValueError, match="objective"):
        release_marginals(_NoData(), W, 1.0, 0.0, budget=budget, objective="max")
    for bad in (0, -3, 2.5, "many"):
        with pytest.raises((ValueError, TypeError), match="max_records"):
            release_marginals(_NoData(), W, 1.0, 0.0, budget=budget, rng=rng, max_records=bad)
    with pytest.raises(mm.BudgetExceededError):  # overspend: refused before the data is read
        release_marginals(_NoData(), W, 1.5, 0.0, budget=budget, rng=rng)
    with pytest.raises(TypeError, match="engine"):  # its tables could be checked only later
        release_marginals(_NoData(), W, 1.0, 0.0, budget=budget, rng=rng)
    assert rng.bit_generator.state == state and budget.remaining == (1.0, 0.0)


# -- (e): no message holds a data value -----------------------------------------------------


def test_data_refusals_and_summaries_hold_no_data_value(tmp_path):
    budget = mm.PrivacyBudget(1.0)
    rng = np.random.default_rng(1)
    state = rng.bit_generator.state
    codes = _codes(DOMAIN, RECORDS, seed=2)
    W = Wl.marginals(DOMAIN, 2)
    with pytest.raises(ValueError, match="max_records") as e:
        release_marginals(codes, W, 1.0, 0.0, budget=budget, rng=rng, max_records=1000)
    assert str(RECORDS) not in str(e.value)
    bad = codes.copy()
    bad[5, 3] = 97
    with pytest.raises(ValueError, match="attribute 3") as e:
        release_marginals(bad, W, 1.0, 0.0, budget=budget, rng=rng)
    assert "97" not in str(e.value) and str(RECORDS) not in str(e.value)
    tables = marginal_tables(codes, DOMAIN, [(0, 1)])
    with pytest.raises(ValueError, match=r"no table given for attributes \(0, 3\)") as e:
        release_marginals(tables, W, 1.0, 0.0, budget=budget, rng=rng)
    assert str(RECORDS) not in str(e.value)
    assert rng.bit_generator.state == state and budget.remaining == (1.0, 0.0)
    rel = release_marginals(codes, W, 1.0, 0.0, budget=budget, rng=rng)
    out = rel.save(tmp_path / "rel")
    for text in (
        repr(rel),
        rel.strategy_note,
        json.dumps(rel.to_dict()),
        (out / "index.json").read_text(),
    ):
        assert str(RECORDS) not in text
