"""The streamed residual release (issue 24): the same answers and exact std as the in-memory
release and as a dense GLS on the released integers, in RAM or spilled to disk; every
refusal before the spend."""

import itertools
import json

import numpy as np
import pytest

import matmech as mm
from matmech import workloads as Wl
from matmech.measurements import residual as measure
from matmech.results import store
from matmech.plans import streamed
from matmech.measurements.residual import residual_batches, row_noise
from matmech.release import release_factored
from matmech.release import release_marginals
from matmech.sources.tables import marginal_tables
from matmech.linalg.terms import marginal_workload
from matmech.linalg.residual import haar_contrasts

from factored_data import codes as _codes
from factored_data import spy_gaussian_draws

DOMAIN = (3, 4, 1, 5, 2)
SUBSETS = [(0, 1), (1, 3, 4), (3,), (0, 2, 3), (), (0, 1)]


def _release(spill, **kw):
    codes = _codes(DOMAIN, 2000, seed=4)
    W = marginal_workload(DOMAIN, SUBSETS, weights=[1.0, 2.0, 1.0, 0.5, 1.0, 3.0])
    rel = release_marginals(
        codes, W, 1.0, 1e-6, rng=np.random.default_rng(11), spill_dir=spill, **kw
    )
    return codes, W, rel


def _assert_like_in_memory(got, ref):
    """The streamed release's answers and std equal the in-memory release's."""
    np.testing.assert_allclose(got.answers, ref.answers, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(got.std, ref.std, rtol=1e-12)


@pytest.mark.parametrize("on_disk", [False, True])
def test_streamed_equals_the_in_memory_release_with_the_same_rng(tmp_path, on_disk):
    codes, W, rel = _release(str(tmp_path) if on_disk else None)
    assert (rel.store.path is not None) == on_disk
    ref = release_factored(codes, W, 1.0, 1e-6, rng=np.random.default_rng(11))
    got = rel.to_release()
    _assert_like_in_memory(got, ref)
    assert rel.expected_error == pytest.approx(ref.expected_error, rel=1e-12)
    assert rel.rows == W.shape[0] == got.answers.size


def _dense_gls(rel):
    """x̂ and its covariance from the released integers of every residual, by dense GLS."""
    mplan = rel.measurement_plan
    lat = mplan.plan.lattice
    rows, ys, var = [], [], []
    for batch in residual_batches(mplan):
        y = rel.store.read(batch.J, batch.cls.size)
        for k, j in enumerate(batch.J.tolist()):
            T = lat.residuals[j]
            H = np.ones((1, 1))
            for i, n in enumerate(DOMAIN):
                H = np.kron(H, haar_contrasts(n)[0] if i in T else np.ones((1, n)))
            rows.append(H)
            ys.append(y[k])
            _, index, rowvar = row_noise(mplan, batch.tau[k : k + 1])  # σ of each row class
            var.append(rowvar[index[0]][batch.cls])
    A, y, v = np.vstack(rows), np.concatenate(ys).astype(float), np.concatenate(var)
    Ai = A / np.sqrt(v)[:, None]
    cov = np.linalg.pinv(Ai.T @ Ai)
    return cov @ Ai.T @ (y / np.sqrt(v)), cov


def _assert_dense_gls(rel, got, W):
    """The released answers and std equal W x̂ and diag(W cov Wᵀ) of dense GLS on the released
    integers; returns (x̂, cov)."""
    xhat, cov = _dense_gls(rel)
    Wd = W.dense()
    np.testing.assert_allclose(got.answers, Wd @ xhat, rtol=1e-8, atol=1e-7)
    np.testing.assert_allclose(got.std**2, np.einsum("ij,jk,ik->i", Wd, cov, Wd), rtol=1e-8)
    return xhat, cov


@pytest.mark.parametrize("on_disk", [False, True])
@pytest.mark.parametrize("shared", [True, False])
def test_streamed_answers_and_std_equal_dense_gls_on_the_released_integers(
    tmp_path, monkeypatch, on_disk, shared
):
    # both σ grids: shared sampler tables (few draws per σ) and σ with tables of their own
    monkeypatch.setattr(measure, "_OWN_TABLES_DRAWS", 1 << 40 if shared else 1)
    _, W, rel = _release(str(tmp_path) if on_disk else None)
    assert rel.measurement_plan.shared_tables is shared
    got = rel.to_release()
    xhat, cov = _assert_dense_gls(rel, got, W)
    # any marginal below a term (here (1, 4) inside (1, 3, 4)), unweighted, one at a time
    M = Wl.marginals(DOMAIN, attrs=[(1, 4)]).dense()
    values, std = rel.marginal((4, 1))  # axes in the order asked: the (1, 4) layout transposed
    values, std = values.T, std.T
    np.testing.assert_allclose(values.reshape(-1), M @ xhat, rtol=1e-8, atol=1e-7)
    np.testing.assert_allclose(std.reshape(-1) ** 2, np.einsum("ij,jk,ik->i", M, cov, M), rtol=1e-8)
    with pytest.raises(ValueError, match=r"residual \(0, 4\) was not measured"):
        rel.marginal((0, 4))
    # intervals: the Release's (normal quantile) on the same rows
    lo, hi = rel.interval((1, 3, 4), 0.9)
    rlo, rhi = got.interval(0.9)
    rows = slice(*_term_rows(rel, 1))
    np.testing.assert_allclose(lo.reshape(-1) * 2.0, rlo[rows], rtol=1e-12)  # term weight 2
    np.testing.assert_allclose(hi.reshape(-1) * 2.0, rhi[rows], rtol=1e-12)


def _term_rows(rel, k):
    """(first, end) rows of term k of W."""
    return int(rel.offsets[k]), int(rel.offsets[k + 1])


def test_many_batches_small_stacks_and_an_emptied_cache_change_nothing(tmp_path, monkeypatch):
    """Batches of a few residuals (the draw order is the batches'), reconstruction stacks of
    a few cells and a cache emptied at every lift: still equal to the in-memory release
    (same batches) and to dense GLS."""
    monkeypatch.setattr(measure, "_CHUNK", 20)
    monkeypatch.setattr(store, "CHUNK", 7)
    monkeypatch.setattr(store, "CACHE_BYTES", 0)
    codes, W, rel = _release(str(tmp_path))
    assert sum(1 for _ in residual_batches(rel.measurement_plan)) > 5
    ref = release_factored(codes, W, 1.0, 1e-6, rng=np.random.default_rng(11))
    got = rel.to_release()
    _assert_like_in_memory(got, ref)
    _assert_dense_gls(rel, got, W)


def test_residual_and_summary_read_the_measurement(tmp_path):
    _, W, rel = _release(str(tmp_path))
    batch = next(b for b in residual_batches(rel.measurement_plan) if len(b.shape) == 3)
    T = rel.measurement_plan.plan.lattice.residuals[int(batch.J[0])]
    y, var = rel.residual(T)
    np.testing.assert_array_equal(y, rel.store.read(batch.J[:1], batch.cls.size)[0])
    _, index, rowvar = row_noise(rel.measurement_plan, batch.tau[:1])
    np.testing.assert_allclose(var, rowvar[index[0]][batch.cls], rtol=1e-12)
    assert np.all(var >= batch.tau[0][batch.cls] ** 2 * (1 - 1e-9))  # σ >= τ
    d = rel.to_dict()
    assert json.loads(json.dumps(d))["answered"] == W.shape[0]
    assert d["rmse"] == pytest.approx((rel.expected_error / W.shape[0]) ** 0.5)
    assert d["residuals_on_disk"] and d["noise"]["secure_randomness"] is False


def test_max_variance_plan_streams_like_the_in_memory_release(monkeypatch):
    """σ differ from residual to residual: one std pattern per signature, the pattern cache
    emptied past its bound, the same answers and std."""
    monkeypatch.setattr(store, "CACHE_BYTES", 64)
    codes = _codes(DOMAIN, 800, seed=6)
    W = marginal_workload(DOMAIN, SUBSETS)
    ref = release_factored(codes, W, 1.0, 1e-6, objective="max", rng=np.random.default_rng(4))
    rel = release_marginals(codes, W, 1.0, 1e-6, objective="max", rng=np.random.default_rng(4))
    got = rel.to_release()
    assert len(set(np.asarray(rel.measurement_plan.plan.variances).tolist())) > 4
    _assert_like_in_memory(got, ref)


def test_iter_marginals_and_save_follow_the_rows_of_w(tmp_path):
    _, W, rel = _release(None)
    full = rel.to_release()
    seen = [S for S, _, _ in rel.iter_marginals()]
    assert seen == [tuple(s) for s in SUBSETS]
    out = rel.save(tmp_path / "rel")
    np.testing.assert_array_equal(np.load(out / "answers.npy", mmap_mode="r"), full.answers)
    np.testing.assert_array_equal(np.load(out / "std.npy"), full.std)
    index = json.loads((out / "index.json").read_text())
    assert index["offsets"][-1] == W.shape[0] and index["subsets"][1] == [1, 3, 4]
    with pytest.raises(ValueError, match="use marginal\\(\\), iter_marginals\\(\\) or save"):
        rel.to_release(max_memory=16 * W.shape[0] - 1)


def test_the_spill_file_is_removed_with_the_release(tmp_path):
    _, _, rel = _release(str(tmp_path))
    path = rel.store.path
    assert list(tmp_path.iterdir())
    del rel
    import gc

    gc.collect()
    assert not list(tmp_path.iterdir()) and path is not None


class _NoData:
    def marginal_counts(self, subsets):
        raise AssertionError("data read")


def test_refusals_come_before_reading_or_spending(monkeypatch, tmp_path):
    W = marginal_workload((10,) * 30, list(itertools.combinations(range(30), 3)))
    budget = mm.PrivacyBudget(1.0, 1e-6)
    with pytest.raises(ValueError, match=r"would hold about .* GiB \(> max_memory"):
        release_marginals(_NoData(), W, 1.0, 1e-6, budget=budget, max_memory=1 << 20)

    from matmech import limits

    monkeypatch.setattr(limits, "disk_room", lambda path: limits.Room(1 << 20, "free (a test)"))
    with pytest.raises(ValueError, match="on disk"):
        release_marginals(_NoData(), W, 1.0, 1e-6, budget=budget, spill_dir=str(tmp_path))
    monkeypatch.undo()
    with pytest.raises(
        TypeError, match="engine"
    ):  # its tables could be checked only after the spend
        release_marginals(_NoData(), W, 1.0, 1e-6, budget=budget)
    codes = _codes(DOMAIN, 300)
    with pytest.raises(ValueError, match="max_records") as e:
        release_marginals(codes, Wl.marginals(DOMAIN, 2), 1.0, 1e-6, budget=budget, max_records=100)
    assert "300" not in str(e.value)
    bad = codes.copy()
    bad[0, 3] = 7
    with pytest.raises(ValueError, match="attribute 3"):
        release_marginals(bad, Wl.marginals(DOMAIN, 2), 1.0, 1e-6, budget=budget)
    tables = marginal_tables(codes, DOMAIN, [(0, 1)])
    with pytest.raises(ValueError, match=r"no table given for attributes \(0, 3\)"):
        release_marginals(tables, Wl.marginals(DOMAIN, 2), 1.0, 1e-6, budget=budget)
    assert budget.remaining == (1.0, 1e-6)


def test_budget_is_charged_once_before_the_first_draw(monkeypatch):
    budget = mm.PrivacyBudget(2.0, 1e-5)
    seen = spy_gaussian_draws(monkeypatch, budget)  # budget.spent at every Gaussian draw
    codes = _codes(DOMAIN, 300)
    rel = release_marginals(
        codes, Wl.marginals(DOMAIN, 2), 1.0, 1e-6, budget=budget, rng=np.random.default_rng(0)
    )
    assert seen and all(s == pytest.approx((1.0, 1e-6)) for s in seen)
    # the residuals' discrete Gaussian is charged its rho: zcdp leaves more than the sums
    assert rel.budget_remaining[0] >= 1.0 and budget.spent_under("basic") == (1.0, 1e-6)


def _as_tables(codes):
    return marginal_tables(codes, DOMAIN, list(itertools.combinations(range(5), 2)))


def _as_histogram(codes):
    return np.bincount(np.ravel_multi_index(codes.T, DOMAIN), minlength=int(np.prod(DOMAIN)))


@pytest.mark.parametrize(
    "records, seed, workload, form, draws",
    [
        pytest.param(500, 3, lambda: Wl.marginals(DOMAIN, 2), _as_tables, 2, id="tables"),
        pytest.param(
            400, 5, lambda: marginal_workload(DOMAIN, SUBSETS), _as_histogram, 3, id="histogram"
        ),
    ],
)
def test_given_tables_or_a_histogram_release_like_the_records(records, seed, workload, form, draws):
    codes = _codes(DOMAIN, records, seed=seed)
    W = workload()
    given = form(codes)
    a = release_marginals(codes, W, 1.0, 1e-6, rng=np.random.default_rng(draws)).to_release()
    b = release_marginals(given, W, 1.0, 1e-6, rng=np.random.default_rng(draws)).to_release()
    np.testing.assert_array_equal(a.answers, b.answers)
    np.testing.assert_array_equal(a.std, b.std)


def test_release_refuses_a_union_too_large_and_says_how_to_stream_it(monkeypatch):
    """mm.release returns a Release or refuses: above max_memory it names the exact call of
    the streamed release, nothing read or spent; that call then releases the union."""
    from matmech import MarginalRelease
    from matmech.release import release_factored

    codes = _codes(DOMAIN, 300, seed=7)
    W = marginal_workload(DOMAIN, SUBSETS)
    monkeypatch.setitem(release_factored.__kwdefaults__, "max_memory", 16 * W.shape[0] - 1)
    budget = mm.PrivacyBudget(2.0, 1e-5)
    with pytest.raises(ValueError) as e:
        mm.release(codes, W, 1.0, 1e-6, budget=budget, rng=np.random.default_rng(0))
    msg = str(e.value)
    assert "nothing was spent" in msg and "(pure eps or delta > 0)" in msg
    assert (
        "from matmech import release_marginals; rel = release_marginals(data, W, eps, "
        "delta, budget=budget, rng=rng)" in msg
    )
    assert "MarginalRelease" in msg and "300" not in msg
    assert budget.remaining == (2.0, 1e-5)
    rel = release_marginals(codes, W, 1.0, 1e-6, budget=budget, rng=np.random.default_rng(0))
    assert isinstance(rel, MarginalRelease) and rel.rows == W.shape[0]
    assert budget.spent_under("basic") == pytest.approx((1.0, 1e-6))  # one charge


def test_the_sigma_grid_follows_the_draws_per_sigma():
    # adult-like sizes: few draws per distinct σ, shared tables; 40 attributes of 10 values:
    # ~10**6 draws per σ, tables of their own (noise.gaussian_grid's two roundings)
    for dom, shared in [((85, 9, 100, 16, 7, 15, 2), True), ((10,) * 40, False)]:
        subsets = [s for k in range(4) for s in itertools.combinations(range(len(dom)), k)]
        m = streamed.streamed_plan(marginal_workload(dom, subsets), 1.0, 1e-6).measurement
        assert m.shared_tables is shared, dom
        batch = next(residual_batches(m))
        params, index, var = row_noise(m, batch.tau)
        sig2 = np.array([p.a / p.b for p in params])[index]
        assert np.all(sig2 >= batch.tau**2)  # never less noise than the plan needs
        assert np.all(sig2 <= batch.tau**2 * (1 + 2.0 ** (2 - 9)))
        if shared:  # acceptance exponents over powers of two: one table per octave
            assert all(p.S & (p.S - 1) == 0 for p in params)
