"""Faster (ε, δ) planning of unions of Kronecker products: the shared factor grams equal the
operators' own dense grams, the joint L2 descent's evaluation and L-BFGS equal the reference
(the code before the speed-ups; bitwise before the second round, to rounding since), the zeta transforms
bitwise their index-array definition, and the ``kron`` family's error of a union (read off its
block coordinate descent) equals the dense computation."""

import math

import numpy as np
import pytest

from matmech import workloads as wl
from matmech.error import expected_error
from matmech.linalg.intervals import Intervals
from matmech.linalg.linop import Dense, Scaled
from matmech.linalg.structured import subset_inplace, superset_inplace
from matmech.optimizers import general_marginal_error as gm, gram as G
from matmech.optimizers.dispatch import optimize
from matmech.optimizers.lbfgs import armijo_lbfgs
from matmech.optimizers.pidentity import spd_inverse
from matmech.privacy.calibration import noise_variance

from gmarginal_cases import kron_union


# -- shared factor grams ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: wl.prefix(7),
        lambda: wl.all_range(6),
        lambda: wl.identity(5),
        lambda: wl.total(4),
        lambda: Scaled(wl.prefix(5), 3.0),
        lambda: Intervals(6, np.array([0, 2, 1]), np.array([3, 5, 1])),
    ],
)
def test_factor_gram_is_the_dense_gram_shared_by_equal_structures(make):
    a, b = make(), make()
    assert a is not b and G.structure_key(a) == G.structure_key(b) is not None
    ga = G.factor_gram(a, 10**6)
    assert G.factor_gram(b, 10**6) is ga  # computed once
    np.testing.assert_array_equal(ga, a.gram().dense())
    assert not ga.flags.writeable  # shared: nobody may write into it


def test_structure_keys_separate_different_factors_and_skip_unknown_ones():
    keys = [
        G.structure_key(f)
        for f in (
            wl.prefix(5),
            wl.prefix(6),
            wl.all_range(5),
            Scaled(wl.prefix(5), 2.0),
            Scaled(Scaled(wl.prefix(5), 2.0), 3.0),
            Scaled(wl.prefix(5), 6.0),
            wl.identity(5),
            wl.total(5),
            Intervals(5, np.array([0]), np.array([3])),
            Intervals(5, np.array([1]), np.array([3])),
        )
    ]
    assert len(set(keys)) == len(keys)
    d = Dense(np.arange(6.0).reshape(2, 3))
    assert G.structure_key(d) is None
    g1, g2 = G.factor_gram(d, 100), G.factor_gram(d, 100)
    assert g1 is not g2  # not cached, still the gram
    np.testing.assert_array_equal(g1, d.matrix.T @ d.matrix)


def test_factor_gram_respects_the_entry_limit():
    with pytest.raises(ValueError):
        G.factor_gram(wl.prefix(40), 100)


def test_factor_gram_cache_stays_within_its_byte_limit(monkeypatch):
    monkeypatch.setattr(G, "FACTOR_GRAM_CACHE_BYTES", 3 * 8 * 30 * 30)
    monkeypatch.setattr(G, "_FACTOR_GRAMS", G._GramCache())
    for n in range(20, 31):
        G.factor_gram(wl.prefix(n), 10**6)
    held = sum(a.nbytes for a in G._FACTOR_GRAMS.values())
    assert held == G._FACTOR_GRAMS.nbytes <= G.FACTOR_GRAM_CACHE_BYTES  # the running total
    assert G.structure_key(wl.prefix(30)) in G._FACTOR_GRAMS  # the newest is kept


@pytest.mark.parametrize("method", ["kron", "kronstack", "gmarginals", "unions"])
def test_families_give_the_same_plan_for_fresh_and_shared_factor_objects(method):
    domain, kinds, orders = (6, 4, 3), "PIR", (0, 1, 2)
    a = optimize(kron_union(domain, kinds, orders), eps=1.0, delta=1e-6, method=method, bound=False)
    b = optimize(
        kron_union(domain, kinds, orders, fresh=False),
        eps=1.0,
        delta=1e-6,
        method=method,
        bound=False,
    )
    assert a.error == b.error


# -- the kron family's error of a union ------------------------------------------------------------


@pytest.mark.parametrize(
    "domain,kinds,orders", [((5, 3, 4), "PIR", (1,)), ((4, 6, 2), "PPI", (0, 1, 2))]
)
def test_kron_union_error_from_its_descent_equals_the_dense_error(domain, kinds, orders):
    W = kron_union(domain, kinds, orders)
    res = optimize(W, eps=1.0, delta=1e-6, method="kron", bound=False)
    dense = expected_error(W, res.strategy, 1.0, 1e-6, noise="continuous")
    assert res.error == pytest.approx(dense, rel=1e-9)
    a, w = res.strategy.dense(), W.dense()
    sens2 = float((a * a).sum(0).max())
    direct = sens2 * float(np.trace(w @ np.linalg.pinv(a.T @ a) @ w.T))
    assert res.error == pytest.approx(noise_variance(1.0, 1e-6, sensitivity=1.0) * direct, rel=1e-8)


# -- the joint L2 descent, bitwise --------------------------------------------------------------------


def _reference_entries(prob, a_out, a_in):
    t = prob.term_idx
    return np.where(prob.bits, a_in[t], a_out[t]).prod(1)


def _reference_full(self, theta, minvs):
    """_GeneralProblem.full before the speed-up (outer products, explicit symmetrisation)."""
    k, K = self.k, self.v2.size
    g, a_out, a_in, ys = self.numbers(minvs)
    E = _reference_entries(self, a_out, a_in)
    eta = np.bincount(self.masks, weights=self.v2[self.term_idx] * E, minlength=1 << k)
    outg = gm._outer_products(g)
    th = np.asarray(theta, dtype=np.float64)
    lam = _index_superset(th * th * outg, k)
    need = eta > 0
    R = np.zeros_like(lam)
    R[need] = 1.0 / lam[need]
    s = float(th.sum())
    err = float((eta * R).sum())
    F = s * s * err
    sub = _index_subset(eta * R * R, k)
    dth = 2.0 * s * err - s * s * 2.0 * th * outg * sub
    grads = {}
    ER = E * R[self.masks]
    all_sums = np.bincount(self.term_idx, weights=ER, minlength=K)
    dA = {}
    for i in self.free:
        in_sums = np.bincount(self.term_idx, weights=ER * self.bits[:, i], minlength=K)
        ai, ao = a_in[:, i], a_out[:, i]
        d_in = np.divide(in_sums, ai, out=np.zeros(K), where=ai > 0)
        d_out = np.divide(all_sums - in_sums, ao, out=np.zeros(K), where=ao > 0)
        dA[i] = (s * s) * self.v2[:, None] * np.stack([d_out, d_in], axis=1)
    base = th * th * outg * sub
    masks = np.arange(1 << k)
    for i in self.free:
        dg = -s * s * float(base[(masks >> i) & 1 == 0].sum()) / g[i]
        y = ys[i]
        lst, idx = self.uniq[i]
        beta = np.bincount(idx, weights=dA[i][:, 1], minlength=len(lst))
        cvec = np.bincount(idx, weights=dA[i][:, 0] - dA[i][:, 1], minlength=len(lst))
        n = self.domain[i]
        Cb, Cc = np.zeros((n, n)), np.zeros((n, n))
        for j, c in enumerate(lst):
            if beta[j] != 0.0:
                Cb += beta[j] * c
            if cvec[j] != 0.0:
                Cc += cvec[j] * c
        cy = Cc @ y
        one = np.ones(n)
        gam = (
            Cb
            + (np.outer(cy, one) + np.outer(one, cy)) / g[i]
            + (dg - float(y @ cy) / g[i] ** 2) * np.ones((n, n))
        )
        grads[i] = 0.5 * (gam + gam.T)
    return F, dth, grads


def _index_superset(c, k):
    lam, idx = c.copy(), np.arange(c.size)
    for i in range(k):
        lo = idx[(idx & (1 << i)) == 0]
        lam[lo] += lam[lo | (1 << i)]
    return lam


def _index_subset(c, k):
    out, idx = c.copy(), np.arange(c.size)
    for i in range(k):
        hi = idx[(idx & (1 << i)) != 0]
        out[hi] += out[hi ^ (1 << i)]
    return out


def _random_minvs(rng, domain):
    out = []
    for d in domain:
        a = rng.standard_normal((d, d))
        out.append(np.linalg.inv(a.T @ a + d * np.eye(d)))
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("asymmetric", [False, True])
def test_descent_evaluation_equals_the_reference(seed, asymmetric):
    rng = np.random.default_rng(seed)
    domain, kinds = (5, 3, 4, 2), "PIRP"
    W = kron_union(domain, kinds, (0, 1, 2))
    prob, _, _ = gm.general_marginal_problem(W, free=(0, 1, 2, 3))
    if asymmetric:  # a gram one ulp away from symmetric: the explicit symmetrisation runs
        lst, idx = prob.uniq[0]
        bent = [c.copy() for c in lst]
        bent[-1][0, 1] = np.nextafter(bent[-1][0, 1], np.inf)
        prob.uniq[0] = (bent, idx)
        assert not prob._symmetric(0)
    theta = rng.random(1 << len(domain)) * (rng.random(1 << len(domain)) < 0.8)
    theta[-1] = 1.0
    minvs = _random_minvs(rng, domain)
    value, dth, grads = prob.full(theta, minvs)
    ref_f, rdth, rgrads = _reference_full(prob, theta, minvs)
    assert value == ref_f
    np.testing.assert_array_equal(dth, rdth)
    assert grads.keys() == rgrads.keys()
    for i in grads:  # all free attributes' per-term sums at once: the same sums, rounded apart
        scale = float(np.abs(rgrads[i]).max())
        np.testing.assert_allclose(grads[i], rgrads[i], rtol=1e-12, atol=1e-13 * scale)
        assert not np.array_equal(grads[i], np.zeros_like(grads[i]))
    g, a_out, a_in, _ = prob.numbers(minvs)
    np.testing.assert_array_equal(prob.entries(a_out, a_in), _reference_entries(prob, a_out, a_in))


@pytest.mark.parametrize("k", [0, 1, 2, 3, 5, 9, 14])
def test_zeta_transforms_are_bitwise_their_index_definition(k):
    c = np.random.default_rng(k).standard_normal(1 << k)
    np.testing.assert_array_equal(superset_inplace(c.copy(), k), _index_superset(c, k))
    np.testing.assert_array_equal(subset_inplace(c.copy(), k), _index_subset(c, k))


def _reference_lbfgs(fun, x0, *, maxiter, memory=10, ftol=1e-11):
    """The joint descent's L-BFGS before the speed-up (y·s recomputed, fresh products)."""
    x = np.array(x0, dtype=np.float64)
    f, g = fun(x)
    ss, ys, hist = [], [], [f]
    for _ in range(maxiter):
        q = g.copy()
        alphas = []
        for s, y in zip(reversed(ss), reversed(ys)):
            a = float(s @ q) / float(y @ s)
            alphas.append(a)
            q -= a * y
        if ss:
            q *= float(ss[-1] @ ys[-1]) / float(ys[-1] @ ys[-1])
        for (s, y), a in zip(zip(ss, ys), reversed(alphas)):
            q += (a - float(y @ q) / float(y @ s)) * s
        d = -q
        slope = float(g @ d)
        if slope >= 0:
            d, slope = -g, -float(g @ g)
            ss, ys = [], []
        t, accepted = 1.0, False
        for _ in range(40):
            xn = x + t * d
            fn, gn = fun(xn)
            if math.isfinite(fn) and fn <= f + 1e-4 * t * slope:
                accepted = True
                break
            t *= 0.5
        if not accepted:
            break
        s, y = xn - x, gn - g
        if float(s @ y) > 1e-300:
            ss.append(s)
            ys.append(y)
            if len(ss) > memory:
                ss.pop(0)
                ys.pop(0)
        x, f, g = xn, fn, gn
        hist.append(f)
        if len(hist) > 10 and hist[-11] - f <= ftol * abs(f):
            break
    return x, f


def test_joint_descent_lbfgs_equals_the_reference():
    rng = np.random.default_rng(7)
    n = 60
    a = rng.standard_normal((n, n)) / math.sqrt(n)
    b = rng.standard_normal(n)

    def fun(x):  # smooth, non-quadratic, +inf far out (the descent's case)
        r = a @ x - b
        if float(np.abs(x).max()) > 50:
            return math.inf, None
        e = np.exp(0.1 * x)
        return float(r @ r + e.sum()), 2.0 * a.T @ r + 0.1 * e

    x, f = armijo_lbfgs(fun, np.zeros(n), maxiter=300, ftol=1e-12)
    rx, rf = _reference_lbfgs(fun, np.zeros(n), maxiter=300, ftol=1e-12)
    # the two-loop's updates are BLAS daxpy now (one pass, fused): the same iterates to
    # rounding (the first ten closely), the same minimum (x to √ftol)
    assert f == pytest.approx(rf, rel=1e-12)
    np.testing.assert_allclose(x, rx, rtol=1e-4, atol=1e-5)
    x10, f10 = armijo_lbfgs(fun, np.zeros(n), maxiter=10, ftol=0.0)
    rx10, rf10 = _reference_lbfgs(fun, np.zeros(n), maxiter=10, ftol=0.0)
    assert f10 == pytest.approx(rf10, rel=1e-13)
    np.testing.assert_allclose(x10, rx10, rtol=1e-11, atol=1e-12)
    assert f < f10 < fun(np.zeros(n))[0]


def test_spd_inverse_mirrors_the_triangle_and_refuses_indefinite_matrices():
    rng = np.random.default_rng(2)
    for n in (1, 2, 7, 30):
        t = rng.standard_normal((n, 2 * n))
        b = t @ t.T + np.eye(n)
        inv = spd_inverse(b, lower=0)
        np.testing.assert_array_equal(inv, inv.T)
        np.testing.assert_allclose(inv @ b, np.eye(n), atol=1e-9)
    with pytest.raises(np.linalg.LinAlgError):
        spd_inverse(np.array([[1.0, 2.0], [2.0, 1.0]]), lower=0)


def test_equal_attributes_share_one_pidentity_fit_equal_to_their_own():
    # two prefix(6) attributes queried alike: one fit serves both (the memo of
    # optimize_general_marginals), equal to the attribute's own fit
    from matmech.optimizers import general_marginals as GM
    from matmech.optimizers.marginal_workloads import total_like

    W = kron_union((6, 6, 3), "PPI", (1, 2))
    prob, _, blocks = gm.general_marginal_problem(W)
    supports = [frozenset(i for i, f in enumerate(fs) if not total_like(f)) for _, fs in blocks]
    memo: dict = {}
    first = GM._fit_factor(prob, 0, supports, memo=memo)
    shared = GM._fit_factor(prob, 1, supports, memo=memo)
    assert len(memo) == 1 and shared is not first
    np.testing.assert_allclose(shared, GM._fit_factor(prob, 1, supports), rtol=1e-8, atol=1e-12)
    other = GM._fit_factor(prob, 2, supports, memo=memo)  # identity(3) is not prefix(6)
    assert len(memo) == 2 and other.shape[1] == 3
