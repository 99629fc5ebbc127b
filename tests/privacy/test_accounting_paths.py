"""Every release path charges its privacy events and takes a share (issue 33): the residual
marginals, a stream, partition selection; the release records its events; a
property test over sequences of real releases; processes racing and killed on a zCDP ledger."""

import itertools
import math
import os
import signal
import time
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import matmech as mm
from matmech import workloads as W
from matmech import release_marginals
from matmech.run.discover import discover_categories
from matmech.linalg.terms import marginal_workload
from matmech.privacy.accountant import accountant_for, zcdp_capacity
from matmech.privacy.budget import BudgetExceededError, PrivacyBudget
from matmech.privacy.calibration import approx_dp_delta
from matmech.privacy.events import DiscreteGaussian, Stream, Threshold, event_from_dict
from matmech.privacy.ledger import Ledger
from matmech.stream.plan import StreamSpec
from matmech.stream.release import StreamRelease

fork_only = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
X = mm.histogram(np.random.default_rng(0).integers(0, 16, 500), 16)
CODES = np.random.default_rng(0).integers(0, 3, size=(400, 4))
MW = marginal_workload((3,) * 4, list(itertools.combinations(range(4), 2)))


def _rho(events):
    return sum((e.zcdp() for e in events), Fraction(0))


# -- the residual marginals -------------------------------------------------------------------------


def test_the_residual_release_charges_its_discrete_gaussian_and_its_rho_gives_the_declared_pair():
    b = PrivacyBudget(5.0, 1e-5)
    rel = release_marginals(CODES, MW, 1.0, 1e-6, budget=b, rng=np.random.default_rng(1))
    (ev,) = b.events
    assert isinstance(ev, DiscreteGaussian) and ev.grid is None and ev.unit_shifts is None
    plan = rel.measurement_plan
    assert (ev.sigma, ev.sensitivity) == (plan.sigma, plan.sensitivity)
    rho = float(ev.zcdp())
    assert rho == pytest.approx(plan.sensitivity**2 / (2 * plan.sigma**2), rel=1e-15)
    assert approx_dp_delta(rho, 1.0) <= 1e-6 * (1 + 1e-9)  # the (1, 1e-6) it declares holds
    # basic charges the declared pair, zcdp the rho (less at the budget's delta)
    assert b.spent_under("basic") == (1.0, 1e-6) and b.spent[0] < 1.0


def test_the_generalised_marginal_release_charges_its_discrete_gaussian():
    """σ₁ per unit θ and Δ₂ of the gmarginal plan (every block's σ is rounded up from
    σ₁/θ_S): the Gaussian calibration of (1, 1e-6) at Δ₂, whose ρ gives the declared pair."""
    from matmech.release import release_factored
    from matmech.privacy.calibration import gaussian_sigma

    b = PrivacyBudget(5.0, 1e-5)
    W2 = W.marginals((3,) * 4, 2)
    release_factored(
        CODES, W2, 1.0, 1e-6, strategy="gmarginals", budget=b, rng=np.random.default_rng(1)
    )
    (ev,) = b.events
    assert isinstance(ev, DiscreteGaussian) and ev.grid is None
    assert ev.sigma == gaussian_sigma(1.0, 1e-6, ev.sensitivity)
    assert approx_dp_delta(float(ev.zcdp()), 1.0) <= 1e-6 * (1 + 1e-9)
    assert b.spent_under("basic") == (1.0, 1e-6) and b.spent[0] < 1.0
    pure = PrivacyBudget(5.0)
    release_factored(
        CODES, W2, 1.0, strategy="gmarginals", budget=pure, rng=np.random.default_rng(1)
    )
    assert pure.spent == (1.0, 0.0)


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_the_factored_selected_release_charges_its_selection_and_measurement(delta):
    """The selection's pure ε and the measurement's calibration (ρ of a Gaussian at (ε_m, δ),
    or ε_m): together the declared (ε, δ) under basic, less under zcdp when δ > 0."""
    from matmech.release import release_factored
    from matmech.privacy.calibration import gaussian_rho

    b = PrivacyBudget(5.0, 1e-5)
    select = dict(method="em", c=3, eps=0.3)
    release_factored(CODES, MW, 1.0, delta, select=select, budget=b, rng=np.random.default_rng(1))
    sel, meas = b.events
    assert sel.kind == "exponential_mechanism" and sel.approx_dp() == (Fraction(3, 10), 0)
    if delta:
        assert meas.kind == "concentrated" and float(meas.zcdp()) == gaussian_rho(0.7, delta)
    assert b.spent_under("basic") == pytest.approx((1.0, delta))


def test_release_marginals_takes_a_share_and_draws_what_eps_would_draw():
    b = PrivacyBudget(1.0, 1e-6)
    shares = b.split(3)
    rel = release_marginals(CODES, MW, budget=shares[0], rng=np.random.default_rng(2))
    t = (rel.eps, rel.delta)
    same = release_marginals(CODES, MW, *t, rng=np.random.default_rng(2))
    a = np.concatenate([m for _, m, _ in rel.iter_marginals()])
    c = np.concatenate([m for _, m, _ in same.iter_marginals()])
    assert np.array_equal(a, c) and rel.expected_error == same.expected_error
    assert _rho(b.events) <= Fraction(shares[0].total_rho)  # within the share
    assert shares[0].remaining_rho < 1e-9 * shares[0].total_rho  # and all of it
    # the same share through mm.release on the records (the factored route)
    r = mm.release(CODES, MW, budget=shares[1], rng=np.random.default_rng(3))
    assert r.strategy_name == "residual" and r.events and r.events[0].zcdp() is not None
    with pytest.raises(TypeError, match="share"):
        release_marginals(CODES, MW, budget=b)  # eps left out needs a share


def test_a_release_records_the_events_it_charged():
    b = PrivacyBudget(3.0, 1e-5)
    r = mm.release(X, W.prefix(16), 1.0, 1e-6, budget=b, strategy="identity")
    assert r.events == b.events and len(r.events) == 1
    d = r.to_dict()["events"]
    assert [event_from_dict(e) for e in d] == list(r.events)
    sel = mm.release(
        X, W.identity(16), 1.0, 1e-6, budget=b, select={"eps": 0.2, "c": 3, "method": "em"}
    )
    # the strategy follows the selection: its measurement is charged the rho it is calibrated to
    assert [e.kind for e in sel.events] == ["exponential_mechanism", "concentrated"]
    assert sel.events == b.events[1:]


# -- a stream ---------------------------------------------------------------------------------------


def test_a_stream_charges_its_factorization_and_per_step_noise(tmp_path):
    b = PrivacyBudget(5.0, 1e-5)
    s = StreamRelease.create(
        tmp_path / "a.stream", StreamSpec(30, categories=2, eps=1.0, delta=1e-6), budget=b
    )
    (ev,) = b.events
    # the factorization the stream runs (the default chooses one: "auto" is never charged)
    assert isinstance(ev, Stream) and (ev.factorization, ev.steps) == (
        s.plan.factorization.name,
        30,
    )
    assert ev.factorization != "auto"
    noise = ev.noise
    assert isinstance(noise, DiscreteGaussian) and noise.grid == s.plan.grid
    assert (noise.sigma, noise.sensitivity) == (s.plan.scale, s.plan.sensitivity)
    pure = PrivacyBudget(5.0)
    StreamRelease.create(tmp_path / "b.stream", StreamSpec(30, eps=1.0), budget=pure)
    assert pure.events[0].noise.kind == "discrete_laplace" and pure.spent == (1.0, 0.0)


def test_two_streams_on_two_shares_meet_the_total_exactly(tmp_path):
    b = PrivacyBudget(1.0, 1e-6)
    one, two = b.split(2)
    runs = []
    for i, share in enumerate((one, two)):
        spec = StreamSpec(365, categories=("a", "b", "c"), max_records=10**6)
        runs.append(StreamRelease.create(tmp_path / f"{i}.stream", spec, budget=share))
    assert b.epsilon() <= 1.0 and b.remaining_rho < 1e-9
    # the basic split gives each (0.5, 5e-7): sigma about 1.4x larger
    basic = PrivacyBudget(1.0, 1e-6, accountant="basic").split(2)[0]
    sb = StreamRelease.create(
        tmp_path / "basic.stream",
        StreamSpec(365, categories=("a", "b", "c"), max_records=10**6),
        budget=basic,
    )
    assert (sb.plan.spec.eps, sb.plan.spec.delta) == (0.5, 5e-07)
    assert 1.3 < sb.plan.scale / runs[0].plan.scale < 1.5


def test_a_stream_on_a_share_is_charged_once_after_a_crash_before_its_mark(tmp_path, monkeypatch):
    from matmech.stream import state

    ledger = Ledger.create(tmp_path / "l.db", 1.0, 1e-6)
    share = ledger.split(2)[0]

    def crash(self):
        raise KeyboardInterrupt("killed between the charge and its mark")

    monkeypatch.setattr(state.StreamStore, "mark_charged", crash)
    with pytest.raises(KeyboardInterrupt):
        StreamRelease.create(tmp_path / "s.stream", StreamSpec(10), budget=share)
    monkeypatch.undo()
    assert len(ledger.ledger) == 1
    s = StreamRelease.open(tmp_path / "s.stream", budget=ledger)  # the parent, after a restart
    assert len(Ledger.open(tmp_path / "l.db").ledger) == 1  # found, not charged again
    s.step([3])


# -- partition selection -----------------------------------------------------------------------


def test_discover_categories_charges_a_threshold_event_and_takes_a_basic_share():
    cols = {"c": ["a"] * 60 + ["b"] * 45 + ["z"]}
    b = PrivacyBudget(2.0, 1e-6, accountant="basic")
    d = discover_categories(cols, "c", budget=b.split(2)[0], rng=np.random.default_rng(0))
    assert b.events == (Threshold(1.0, 5e-07),) and (d.eps, d.delta) == (1.0, 5e-07)
    with pytest.raises(ValueError, match="no zCDP rho"):
        discover_categories(cols, "c", budget=PrivacyBudget(2.0, 1e-6).split(2)[0])


# -- the property: no sequence of real releases exceeds the total -----------------------------------

_RELEASES = st.one_of(
    st.tuples(st.just("gauss"), st.floats(0.1, 1.5), st.sampled_from([1e-7, 1e-6])),
    st.tuples(st.just("pure"), st.floats(0.1, 1.5)),
    st.tuples(st.just("share"), st.integers(1, 4)),
    st.tuples(st.just("select"), st.floats(0.1, 0.5)),
    st.tuples(st.just("marginals"), st.floats(0.3, 1.5)),
)


def _release(b, op, delta):
    rng = np.random.default_rng(0)
    if op[0] == "gauss":
        mm.release(X, W.prefix(16), op[1], op[2], budget=b, strategy="identity", rng=rng)
    elif op[0] == "pure":
        mm.release(X, W.prefix(16), op[1], budget=b, strategy="identity", rng=rng)
    elif op[0] == "select":
        mm.select_rows(W.identity(16), X, eps=op[1], c=2, method="em", budget=b, rng=rng)
    elif op[0] == "marginals":
        release_marginals(CODES, MW, op[1], delta or 1e-6, budget=b, rng=rng)
    else:
        for share in b.split(op[1]):
            mm.release(X, W.identity(16), budget=share, strategy="identity", rng=rng)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    accountant=st.sampled_from(["basic", "zcdp"]),
    eps=st.floats(1.0, 5.0),
    delta=st.sampled_from([1e-6, 1e-5]),
    ops=st.lists(_RELEASES, min_size=1, max_size=6),
)
def test_no_sequence_of_releases_exceeds_the_total(accountant, eps, delta, ops):
    b = PrivacyBudget(eps, delta, accountant=accountant)
    for op in ops:
        before = b.ledger
        try:
            _release(b, op, delta)
        except BudgetExceededError:
            assert b.ledger[: len(before)] == before
        except ValueError as exc:  # a share or an eps too small for the samplers
            assert "eps" in str(exc) or "share" in str(exc) or "sigma" in str(exc), exc
        assert b.epsilon() <= eps and b.spent[0] <= eps and b.spent[1] <= delta
        # a second reading of the events: the exact sums, or the rho within the capacity
        evs = [leaf for e in b.events for leaf in e.leaves()]
        rhos = [e.zcdp() for e in evs]
        sums = accountant_for("basic").parts(evs).basic
        e, d = Fraction(repr(eps)), Fraction(repr(delta))  # the decimals declared
        within_sums = sums is not None and sums[0] <= e and sums[1] <= d
        if accountant == "basic" or None in rhos:
            assert within_sums
        else:
            cap = zcdp_capacity(e, d)[0]
            assert within_sums or _rho(evs) <= cap


# -- processes racing for and killed on a zCDP ledger -----------------------------------------------


def _event(ledger, part):
    """A discrete Gaussian at sensitivity 1 whose rho is just under ``part`` of the ledger's."""
    rho = ledger.total_rho * part
    return DiscreteGaussian(1 / math.sqrt(2 * rho) * (1 + 1e-12), 1.0)


@fork_only
def test_eight_processes_racing_with_gaussian_events_on_a_zcdp_ledger(tmp_path):
    path = tmp_path / "race.db"
    ev = _event(Ledger.create(path, 1.0, 1e-6), 1 / 3)
    go_r, go_w = os.pipe()
    pids = []
    for _ in range(8):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                os.close(go_w)
                L = Ledger.open(path)
                os.read(go_r, 1)
                try:
                    L.spend_events(ev, what="race")
                    code = 0
                except BudgetExceededError:
                    code = 3
            finally:
                os._exit(code)
        pids.append(pid)
    os.close(go_r)
    os.close(go_w)
    codes = sorted(os.WEXITSTATUS(os.waitpid(p, 0)[1]) for p in pids)
    assert codes == [0, 0, 0, 3, 3, 3, 3, 3]
    L = Ledger.open(path)
    assert L.accountant == "zcdp" and L.events == (ev,) * 3 and L.epsilon() <= 1.0
    assert L.epsilon(1e-6) < L.spent_under("basic")[0] or L.spent_under("basic")[0] == math.inf


@fork_only
def test_killed_while_spending_events_never_loses_or_double_counts_one(tmp_path):
    path = tmp_path / "crash.db"
    ev = _event(Ledger.create(path, 1.0, 1e-6), 1 / 40)
    rng = np.random.default_rng(7)
    rows = 0
    for run in range(25):
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                os.close(rfd)
                os.write(wfd, b"R")
                L = Ledger.open(path)
                while True:
                    try:
                        L.spend_events(ev, what="crash")
                    except BudgetExceededError:
                        os.write(wfd, b"X")
                        while True:
                            time.sleep(1)
                    os.write(wfd, b"C")
            finally:
                os._exit(1)
        os.close(wfd)
        assert os.read(rfd, 1) == b"R"
        time.sleep(rng.uniform(0.0, 0.1))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        reported = b""
        while chunk := os.read(rfd, 4096):
            reported += chunk
        os.close(rfd)
        L = Ledger.open(path)
        n = len(L.ledger)
        committed = reported.count(b"C")
        assert rows + committed <= n <= rows + committed + 1, f"run {run}"
        assert L.events == (ev,) * n and n <= 40 and L.epsilon() <= 1.0
        rows = n
    assert rows > 0


def test_a_delta_filled_exactly_by_the_sums_reports_the_sums():
    # the sums' delta 1e-5 equals the total's: its float lies above the decimal, which once
    # made "zcdp" report its own (larger) conversion, 4.89, as spent
    b = PrivacyBudget(2.0, 1e-5)
    b.spend_events(DiscreteGaussian(4.045130362341619, 1.0, eps=1.0, delta=1e-5))
    b.spend(1.0)
    assert b.spent == (2.0, 1e-05) and b.epsilon() == 2.0
