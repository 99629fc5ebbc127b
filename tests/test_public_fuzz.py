"""Property-based fuzzing of every public entry point (issue 15: "no cliffs").

For each name in ``matmech.__all__`` and in the public submodule namespaces
(``matmech.workloads``, ``matmech.strategies``, ``matmech.svt``, the calibration and budget
functions of ``matmech.privacy``), a valid baseline call is perturbed in one argument by a
value drawn from a pool of hostile inputs (wrong types, strings such as "no", booleans,
NaN / ±inf, zero / negative / huge sizes, 10**400, subnormal ε/δ, numpy scalar types,
ragged lists). The property, per call:

* it returns a result of the documented type whose numbers are finite and which is not
  degenerate (a non-empty ranking, a positive scale, ...), or
* it raises ``ValueError`` / ``TypeError`` whose message names the argument or the value
  (an entry that reads a file may also raise ``OSError`` naming the path);
* never another exception type, and it returns at all (a hard alarm at HARD_SECONDS catches a
  hang; it is a hang guard far above any call's time, not a speed assertion: timings live in
  benchmarks/).

Record types (``Release``, ``Advice``, ``Measurement``, ...) and exception classes are
covered through the functions that return or raise them (``RECORDS`` below); the test
``test_every_public_name_is_covered`` fails if a new public name is neither.
"""

from __future__ import annotations

import itertools
import math
import numbers
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import matmech as mm
import matmech.svt as svt
from matmech import strategies as S
from matmech import workloads as W
from matmech.io.domain import categories, integer_range
from matmech.privacy import budget as budget_mod
from matmech.privacy import calibration as cal

from fuzz_support import HUGE, RAGGED, WRONG_KINDS, Entry, Fresh, call as _call
from fuzz_support import leaked as _leaked, named as _named, sweep, table

import matplotlib  # noqa: E402 - a test dependency (pyproject [test])

matplotlib.use("Agg")
from matmech import plot as P  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _in_a_temporary_directory(tmp_path, monkeypatch):
    """A hostile string such as "no" is a valid relative path: entries that write a file
    (a stream, a saved release) write it here, not in the checkout."""
    monkeypatch.chdir(tmp_path)


TMP = Path(tempfile.mkdtemp(prefix="matmech-fuzz-"))
HARD_SECONDS = (
    300  # a call running longer than this is a hang, on any machine load (no speed assertion)
)

# ----------------------------------------------------------------------------- hostile values

NAN, INF = float("nan"), float("inf")
GENERIC = [
    None,
    "no",
    "False",
    "1",
    b"1",
    True,
    False,
    object(),
    [],
    {},
    complex(1, 1),
    [[1.0, 2.0], [1.0]],
    np.array([NAN]),
    np.bool_(True),
]
NUMBERS = [
    NAN,
    INF,
    -INF,
    0,
    0.0,
    -0.0,
    -1,
    -1.0,
    1e300,
    -1e300,
    1e-300,
    5e-324,
    10**400,
    2**63,
    2**62,
    np.float32(NAN),
    np.float32(0.5),
    np.float64(INF),
    np.int64(-3),
    np.int64(3),
    np.float16(2.0),
    1.5,
    0.5,
    1e6,
    1e-6,
    1.3e154,
]
SIZES = [
    0,
    -1,
    1,
    2,
    2**31,
    2**40,
    2**62,
    2**63,
    10**400,
    1.5,
    8.0,
    np.int64(8),
    np.int32(4),
    np.uint8(3),
    np.float64(8.0),
    -(2**63),
]
HOSTILE = st.one_of(
    st.sampled_from(GENERIC + NUMBERS + SIZES),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
)


# ----------------------------------------------------------------------------- entry points


def _x(n=8):
    return np.arange(n, dtype=np.int64) % 5 + 3


def _budget():
    return mm.PrivacyBudget(10.0, 0.5)


def _rng():
    return np.random.default_rng(0)


def _finite(v):
    a = np.asarray(v, dtype=np.float64)
    return a.size > 0 and bool(np.all(np.isfinite(a)))


def _expect(ok, r):
    assert ok, repr(r)[:200]


def _linop(r):
    assert isinstance(r, mm.LinOp), type(r)
    m, n = r.shape
    assert isinstance(m, int) and isinstance(n, int) and m > 0 and n > 0


def _positive(r):
    assert isinstance(r, float) and math.isfinite(r) and r > 0, r


def _nonneg(r):
    """A finite float >= 0 (0 is right for a zero sensitivity or rho), never -0.0."""
    assert isinstance(r, float) and math.isfinite(r) and r >= 0 and math.copysign(1.0, r) > 0, r


def _release(r):
    assert (
        isinstance(r, mm.Release) and _finite(r.answers) and _finite(r.std) and r.answers.size > 0
    )


def _measurement(r):
    assert isinstance(r, mm.Measurement) and _finite(r.y) and math.isfinite(r.std) and r.std > 0


def _compare(r):
    rows, skipped = r
    assert rows, f"an empty ranking (every candidate skipped: {skipped})"
    assert all(math.isfinite(row.rmse) and row.rmse > 0 for row in rows)


def _advice(r):
    assert isinstance(r, mm.Advice) and r.rows and all(math.isfinite(row.rmse) for row in r.rows)


def _optimized(r):
    assert isinstance(r, mm.OptimizeResult) and math.isfinite(r.error) and r.error > 0
    _linop(r.strategy)


def _svt_result(r):
    assert isinstance(r, svt.SVTResult) and all(isinstance(p, int) for p in r.positions)


def _topc(r):
    assert isinstance(r, svt.TopCResult) and len(r.positions) == r.c


def _gap(r):
    assert (
        isinstance(r, svt.GapResult)
        and len(r.positions) == len(r.gaps)
        and _finite(list(r.gaps) or [0.0])
    )


def _vector(r):
    assert isinstance(r, svt.VectorResult) and len(r.positions) == len(r.values) == len(r.gaps)
    assert _finite(list(r.values) or [0.0])


def _gap_result():
    return svt.sparse_vector_gap([1.0, 50.0, 3.0, 80.0], 10.0, c=2, eps=1.0, rng=_rng())


def _selection(r):
    assert isinstance(r, mm.Selection) and r.c >= 1


def _table(r):
    assert isinstance(r, list) and r and all(isinstance(row, dict) for row in r)


def _any_bool(r):
    assert isinstance(r, bool)


def _entry_budget(eps, delta=0.0):
    return mm.PrivacyBudget(eps, delta)


def _spend(eps, delta=0.0, what=""):
    return mm.PrivacyBudget(1.0, 1e-6).spend(eps, delta, what=what)


def _can_spend(eps, delta=0.0):
    return mm.PrivacyBudget(1.0, 1e-6).can_spend(eps, delta)


def _from_rho(rho, delta):
    return mm.PrivacyBudget.from_rho(rho, delta)


def _split(parts):
    return mm.PrivacyBudget(1.0, 1e-6).split(parts)


def _epsilon(delta):
    b = mm.PrivacyBudget(1.0, 1e-6)
    b.spend(0.25)
    return b.epsilon(delta)


def _ledger(eps, delta=0.0):
    path = Path(tempfile.mkdtemp(dir=TMP)) / "ledger.sqlite"
    return mm.Ledger.create(path, eps, delta)


def _interactive(threshold, c, eps, value):
    sv = svt.SparseVector(threshold, c=c, eps=eps, rng=_rng())
    return sv.test(value)


def _save_load(A):
    path = Path(tempfile.mkdtemp(dir=TMP)) / "a.npz"
    mm.save_strategy(path, A)
    return mm.load_strategy(path)


def _least_squares(x, eps):
    return mm.least_squares(mm.measure(x, S.identity(8), eps, rng=_rng()))


def _release_table(labels, level):
    r = mm.release(_x(), W.prefix(8), 1.0, strategy="identity", rng=_rng())
    return mm.release_table(r, labels, level=level)


def _small_release():
    return mm.release(
        _x(), W.ranges(8, [(0, 3), (4, 7), (0, 7)]), 1.0, strategy="identity", rng=_rng()
    )


def _plot(ax):
    import matplotlib.pyplot as plt

    plt.close("all")
    return ax


def _axes(r):
    assert type(r).__name__ == "Axes", type(r)


def _w():
    return W.prefix(8)


ENTRIES = [
    # workloads
    Entry("workloads.identity", W.identity, dict(n=8), _linop),
    Entry("workloads.total", W.total, dict(n=8), _linop),
    Entry("workloads.prefix", W.prefix, dict(n=8), _linop),
    Entry("workloads.all_range", W.all_range, dict(n=8), _linop),
    Entry("workloads.ranges", W.ranges, dict(n=8, intervals=[(0, 3), (2, 7)]), _linop),
    Entry("workloads.marginals", W.marginals, dict(domain=(3, 4), k=1), _linop),
    Entry("workloads.circular_ranges", W.circular_ranges, dict(n=6), _linop),
    Entry(
        "workloads.affine", lambda n1, n2, a: W.affine(n1, n2, a=a), dict(n1=3, n2=4, a=2.0), _linop
    ),
    Entry("workloads.abs_diff", W.abs_diff, dict(n1=3, n2=4), _linop),
    Entry(
        "workloads.kron", lambda a, b: W.kron(a, b), dict(a=W.prefix(3), b=W.identity(2)), _linop
    ),
    Entry(
        "workloads.stack",
        lambda a, b, weights: W.stack(a, b, weights=weights),
        dict(a=W.prefix(3), b=W.identity(3), weights=[1.0, 2.0]),
        _linop,
    ),
    Entry("workloads.from_matrix", W.from_matrix, dict(matrix=[[1.0, 2.0], [0.0, 1.0]]), _linop),
    Entry(
        "workloads.check_domain",
        W.check_domain,
        dict(domain=(3, 4)),
        lambda r: _expect(
            isinstance(r, tuple) and r and all(isinstance(k, int) and k > 0 for k in r), r
        ),
    ),
    # strategies
    Entry("strategies.identity", S.identity, dict(n=8), _linop),
    Entry("strategies.hierarchical", S.hierarchical, dict(n=8, branching=2, root=True), _linop),
    Entry("strategies.haar", S.haar, dict(n=8), _linop),
    Entry("strategies.kron", lambda a, b: S.kron(a, b), dict(a=S.identity(3), b=S.haar(4)), _linop),
    Entry("as_linop", mm.as_linop, dict(obj=np.eye(3)), _linop),
    # error figures
    Entry("sensitivity", mm.sensitivity, dict(A=S.haar(8), p=1, neighbors="add_remove"), _positive),
    Entry(
        "expected_error",
        mm.expected_error,
        dict(W=_w(), A=S.identity(8), eps=1.0, delta=0.0, measure="total", neighbors="add_remove"),
        _positive,
    ),
    Entry(
        "per_query_variance",
        mm.per_query_variance,
        dict(W=_w(), A=S.identity(8), eps=1.0, delta=0.0),
        lambda r: _expect((_finite(r) and np.all(r > 0)), r),
    ),
    Entry(
        "lower_bound",
        mm.lower_bound,
        dict(W=_w(), eps=1.0, delta=0.0, measure="total", neighbors="add_remove"),
        _positive,
    ),
    Entry(
        "compare",
        mm.compare,
        dict(W=_w(), eps=1.0, delta=0.0, candidates=None, neighbors="add_remove"),
        _compare,
    ),
    Entry(
        "histogram",
        mm.histogram,
        dict(data=[0, 1, 1, 7], bins=8),
        lambda r: _expect(
            isinstance(r, np.ndarray) and r.dtype == np.int64 and r.size > 0 and r.min() >= 0, r
        ),
        loose=("bins",),
    ),
    # mechanisms
    Entry(
        "measure",
        mm.measure,
        dict(
            x=_x(),
            A=S.identity(8),
            eps=1.0,
            delta=0.0,
            budget=None,
            rng=_rng(),
            neighbors="add_remove",
            max_records=None,
        ),
        _measurement,
        examples=20,
        none_ok=("delta",),  # None: not given (pure ε with eps; the share's law without)
    ),
    Entry(
        "least_squares",
        _least_squares,
        dict(x=_x(), eps=1.0),
        lambda r: None if _finite(r) else pytest.fail(str(r)),
        examples=15,
    ),
    Entry(
        "release",
        mm.release,
        dict(
            x=_x(),
            W=_w(),
            eps=1.0,
            delta=0.0,
            strategy="auto",
            budget=None,
            rng=_rng(),
            neighbors="add_remove",
            select=None,
            max_records=None,
        ),
        _release,
        examples=25,
        loose=("strategy",),
        none_ok=("delta",),  # None: not given (pure ε with eps; the share's law without)
    ),
    Entry("release_table", _release_table, dict(labels=None, level=0.95), _table, examples=15),
    Entry(
        "optimize",
        mm.optimize,
        dict(W=_w(), eps=1.0, delta=0.0, method="auto"),
        _optimized,
        examples=15,
    ),
    Entry(
        "advise",
        mm.advise,
        dict(W=_w(), eps=1.0, delta=0.0, candidates="all", neighbors="add_remove"),
        _advice,
        examples=15,
        loose=("candidates",),
    ),
    Entry(
        "select_rows",
        mm.select_rows,
        dict(W=_w(), x=_x(), c=2, eps=1.0, threshold=10.0, method="svt", rng=_rng()),
        _selection,
        examples=20,
        loose=("threshold",),
    ),
    Entry("save_strategy/load_strategy", _save_load, dict(A=S.haar(8)), _linop, examples=15),
    Entry(
        "load_strategy",
        mm.load_strategy,
        dict(path=str(TMP / "missing.npz")),
        _linop,
        examples=10,
        files=True,
    ),
    Entry(
        "load_spec",
        mm.load_spec,
        dict(path=str(ROOT / "workloads" / "age_bands.toml")),
        lambda r: None if isinstance(r, mm.Spec) else pytest.fail(str(r)),
        examples=10,
        files=True,
    ),
    Entry(
        "Domain",
        mm.Domain,
        dict(attributes=(integer_range("age", 0, 9), categories("sex", ["F", "M"]))),
        lambda r: _expect(isinstance(r, mm.Domain) and r.n == 20, r),
    ),
    # privacy accounting and calibration
    Entry(
        "PrivacyBudget",
        _entry_budget,
        dict(eps=1.0, delta=0.0),
        lambda r: _expect(isinstance(r, mm.PrivacyBudget), r),
    ),
    Entry(
        "PrivacyBudget.spend",
        _spend,
        dict(eps=0.5, delta=0.0, what=""),
        lambda r: _expect(isinstance(r, budget_mod.LedgerEntry), r),
    ),
    Entry("PrivacyBudget.can_spend", _can_spend, dict(eps=0.5, delta=0.0), _any_bool),
    Entry(
        "Ledger.create",
        _ledger,
        dict(eps=1.0, delta=0.0),
        lambda r: None if isinstance(r, mm.Ledger) else pytest.fail(str(r)),
        examples=10,
    ),
    Entry(
        "PrivacyBudget.from_rho",
        _from_rho,
        dict(rho=0.1, delta=1e-6),
        lambda r: _expect(isinstance(r, mm.PrivacyBudget) and r.accountant == "zcdp", r),
    ),
    Entry(
        "PrivacyBudget.split",
        _split,
        dict(parts=4),
        lambda r: _expect(
            isinstance(r, tuple) and all(isinstance(s, budget_mod.Share) for s in r), r
        ),
        loose=("parts",),  # a count or a sequence of weights
        aliases=dict(parts=("weight",)),
    ),
    Entry(
        "PrivacyBudget.epsilon",
        _epsilon,
        dict(delta=1e-6),
        _nonneg,
        none_ok=("delta",),  # None: the total's δ
    ),
    Entry("gaussian_sigma", mm.gaussian_sigma, dict(eps=1.0, delta=1e-6, sensitivity=1.0), _nonneg),
    Entry("calibration.laplace_scale", cal.laplace_scale, dict(eps=1.0, sensitivity=1.0), _nonneg),
    Entry(
        "calibration.analytic_gaussian_sigma",
        cal.analytic_gaussian_sigma,
        dict(eps=1.0, delta=1e-6, sensitivity=1.0),
        _nonneg,
    ),
    Entry(
        "calibration.noise_variance",
        cal.noise_variance,
        dict(eps=1.0, delta=0.0, sensitivity=1.0),
        _nonneg,
    ),
    Entry(
        "calibration.zcdp_to_approx_dp", cal.zcdp_to_approx_dp, dict(rho=0.1, delta=1e-6), _nonneg
    ),
    Entry(
        "calibration.approx_dp_delta",
        cal.approx_dp_delta,
        dict(rho=0.1, eps=1.0),
        lambda r: _expect((isinstance(r, float) and 0 <= r <= 1), r),
    ),
    # pictures (matmech.plot; Release.plot / Advice.plot call these)
    Entry(
        "plot.plot_release",
        lambda top, rows, labels, level: _plot(
            P.plot_release(_small_release(), top=top, rows=rows, labels=labels, level=level)
        ),
        dict(top=None, rows=None, labels=None, level=0.95),
        _axes,
        examples=20,
    ),
    Entry(
        "plot.plot_advice",
        lambda advice: _plot(P.plot_advice(advice)),
        dict(advice=mm.advise(W.prefix(8), 1.0, candidates="fixed")),
        _axes,
        examples=10,
    ),
    Entry(
        "plot.figure_path",
        P.figure_path,
        dict(out="fig.png", name="figure"),
        lambda r: _expect(isinstance(r, tuple) and r[1] in P.FORMATS, r),
        examples=15,
    ),
    # selection (matmech.svt)
    Entry(
        "sparse_vector",
        svt.sparse_vector,
        dict(
            values=[1.0, 50.0, 3.0, 80.0], threshold=10.0, c=1, eps=1.0, sensitivity=1.0, rng=_rng()
        ),
        _svt_result,
        loose=("threshold",),
    ),
    Entry(
        "SparseVector.test",
        _interactive,
        dict(threshold=10.0, c=1, eps=1.0, value=50.0),
        _any_bool,
        loose=("threshold",),
    ),
    Entry(
        "above_threshold",
        svt.above_threshold,
        dict(values=[1.0, 50.0, 3.0], threshold=10.0, eps=1.0, rng=_rng()),
        _svt_result,
        loose=("threshold",),
    ),
    Entry(
        "sparse_vector_dpbook",
        svt.sparse_vector_dpbook,
        dict(values=[1.0, 50.0], threshold=10.0, c=1, eps=1.0, rng=_rng()),
        _svt_result,
        loose=("threshold",),
    ),
    Entry(
        "sparse_vector_retraversal",
        svt.sparse_vector_retraversal,
        dict(values=[1.0, 50.0, 3.0], threshold=10.0, c=1, eps=1.0, boost=2.0, rng=_rng()),
        _svt_result,
        loose=("threshold",),
    ),
    Entry(
        "exponential_top_c",
        svt.exponential_top_c,
        dict(values=[1.0, 50.0, 3.0], c=2, eps=1.0, rng=_rng()),
        _topc,
    ),
    Entry(
        "svt.sparse_vector_gap",
        svt.sparse_vector_gap,
        dict(values=[1.0, 50.0, 3.0, 80.0], threshold=10.0, c=2, eps=1.0, rng=_rng()),
        _gap,
        loose=("threshold",),
    ),
    Entry(
        "svt.noisy_top_c_gap",
        svt.noisy_top_c_gap,
        dict(values=[1.0, 50.0, 3.0], c=2, eps=1.0, rng=_rng()),
        _gap,
    ),
    Entry(
        "svt.adaptive_sparse_vector",
        svt.adaptive_sparse_vector,
        dict(values=[1.0, 50.0, 3.0, 80.0], threshold=10.0, c=1, eps=1.0, rng=_rng()),
        _gap,
        loose=("threshold",),
    ),
    Entry(
        "svt.noisy_vector_top_c",
        svt.noisy_vector_top_c,
        dict(values=[1.0, 50.0, 3.0], c=2, eps=1.0, sensitivity=1.0, rng=_rng()),
        _vector,
    ),
    Entry(
        "svt.noisy_vector_threshold",
        svt.noisy_vector_threshold,
        dict(
            values=[1.0, 50.0, 3.0, 80.0], threshold=10.0, c=2, eps=1.0, sensitivity=1.0, rng=_rng()
        ),
        _vector,
        loose=("threshold",),
    ),
    Entry(
        "svt.joint_sensitivity",
        svt.joint_sensitivity,
        dict(W=np.eye(3), neighbors="add_remove"),
        lambda r: _expect(r == 1.0, r),
    ),
    Entry(
        "svt.gap_calibration",
        svt.gap_calibration,
        dict(method="svt-gap", c=2, eps=1.0),
        lambda r: _expect(isinstance(r, svt.GapCalibration), r),
    ),
    Entry(
        "svt.gap_measurement",
        lambda threshold: svt.gap_measurement(_gap_result(), threshold),
        dict(threshold=10.0),
        lambda r: _expect(isinstance(r, svt.GapMeasurement) and _finite(r.z) and _finite(r.var), r),
        loose=("threshold",),
    ),
    Entry(
        "svt.combine_gaps",
        lambda y, cov: svt.combine_gaps(y, cov, svt.gap_measurement(_gap_result(), 10.0)),
        dict(y=np.array([50.0, 80.0]), cov=np.eye(2)),
        lambda r: _expect(_finite(r[0]) and _finite(r[1]), r),
    ),
    Entry(
        "svt.advise_split",
        svt.advise_split,
        dict(row_variance=lambda e: 2.0 / e**2, method="svt-gap", eps=1.0, c=2),
        lambda r: _expect(isinstance(r, tuple) and isinstance(r[0], float) and 0 < r[0] < 1, r),
    ),
    Entry("svt.optimal_ratio", svt.optimal_ratio, dict(c=3, monotonic=False), _positive),
    Entry(
        "svt.svt_budget",
        svt.svt_budget,
        dict(c=3, eps=1.0, sensitivity=1.0),
        lambda r: _expect(isinstance(r, svt.SVTBudget), r),
    ),
    Entry(
        "svt.above_threshold_alpha",
        svt.above_threshold_alpha,
        dict(beta=0.05, k=10, eps=1.0),
        _positive,
    ),
    Entry("svt.sparse_alpha", svt.sparse_alpha, dict(beta=0.05, k=10, c=2, eps=1.0), _positive),
    Entry(
        "svt.exponential_alpha", svt.exponential_alpha, dict(beta=0.05, k=10, eps=1.0), _positive
    ),
]

# ----------------------------------------------------------------------------- entry points added since issue 24
# (issue 31: streams, the streamed marginal release, discovery, time bins, the pipeline, the
# unions planner, the attribute declarations and the factored helpers the guides call)

from matmech import MarginalRelease, release_marginals  # noqa: E402
from matmech.results.labels import release_labels  # noqa: E402
from matmech.release import release_factored  # noqa: E402
from matmech.plans.residual import residual_error  # noqa: E402
from matmech.sources.tables import marginal_tables  # noqa: E402
from matmech.sources import given_tables as G  # noqa: E402
from matmech.linalg.terms import marginal_workload  # noqa: E402
from matmech.io import declare as D  # noqa: E402
from matmech.run.discover import Discovery, discover_categories  # noqa: E402
from matmech.sources.engines import histogram as engine_histogram  # noqa: E402
from matmech.linalg.linop import Kron, VStack  # noqa: E402
from matmech.optimizers import unions as U  # noqa: E402
from matmech.optimizers.residual import plan_residuals  # noqa: E402
from matmech.sources.source import EngineSource, HistogramSource, TableSource  # noqa: E402
from matmech.run.runner import run_plan  # noqa: E402
from matmech.plans.strategy import strategy_plan  # noqa: E402
from matmech.sources.source import as_source  # noqa: E402
from matmech.stream.advise import StreamAdvice, advise_stream  # noqa: E402
from matmech.cli.stream import load_stream_spec  # noqa: E402
from matmech.sources.periods import period_counts  # noqa: E402
from matmech.stream.factorizations import StreamFactorization, build  # noqa: E402
from matmech.stream.plan import StreamPlan, StreamSpec, plan_stream  # noqa: E402
from matmech.stream.release import StreamRelease, StreamStep  # noqa: E402


def _fresh_path(name):
    def make():
        return Path(tempfile.mkdtemp(dir=TMP)) / name

    make.__name__ = f"fresh {name}"
    return Fresh(make)


def _spec(**kw):
    args = dict(horizon=8, eps=1.0, delta=1e-6, categories=("a", "b"), max_records=1000)
    return StreamSpec(**{**args, **kw})


def _stream_spec(r):
    _expect(isinstance(r, StreamSpec) and r.charge[0] > 0, r)


def _stream_plan(r):
    _expect(isinstance(r, StreamPlan) and math.isfinite(r.std) and r.std > 0, r)


def _stream(r):
    _expect(isinstance(r, StreamRelease) and r.horizon == 8, r)


def _step(r):
    _expect(isinstance(r, StreamStep) and _finite(r.values) and r.std > 0, r)


def _new_stream():
    return StreamRelease.create(
        Path(tempfile.mkdtemp(dir=TMP)) / "s.stream", _spec(), budget=None, rng=_rng()
    )


_STREAM_FILE = Path(tempfile.mkdtemp(dir=TMP)) / "open.stream"
# its key file beside it: made at import (collection), before conftest points the config
# directory at the session's temporary one, so the default key path would not be found
_STREAM_KEY = _STREAM_FILE.with_suffix(".key")
StreamRelease.create(_STREAM_FILE, _spec(), rng=_rng(), key_file=_STREAM_KEY)
_STREAM_TOML = TMP / "stream.toml"
_STREAM_TOML.write_text('horizon = 8\ncategories = ["a", "b"]\neps = 1.0\ndelta = 1e-6\n')


def _stream_step(counts, t):
    return _new_stream().step(counts, t=t)


def _marginals_w():
    return marginal_workload((3,) * 4, list(itertools.combinations(range(4), 2)))


_CODES = np.random.default_rng(0).integers(0, 3, size=(200, 4))
_MREL = release_marginals(_CODES, _marginals_w(), 1.0, 1e-6, rng=_rng())
_MREL_PURE = release_marginals(_CODES, _marginals_w(), 1.0, 0.0, rng=_rng())


def _marginal_release(r):
    _expect(isinstance(r, MarginalRelease) and r.rows == 54, r)
    values, std = r.marginal((0, 1))
    _expect(_finite(values) and _finite(std), r)


def _pair(r):
    _expect(isinstance(r, tuple) and len(r) == 2 and _finite(r[0]) and _finite(r[1]), r)


def _union_w():
    """age and income prefixes with a category: every 2-way product (planning-unions.md)."""
    domain, numeric = (6, 5, 3), 2
    return VStack(
        [
            Kron(
                *[
                    (W.prefix(n) if i < numeric else W.identity(n)) if i in T else W.total(n)
                    for i, n in enumerate(domain)
                ]
            )
            for T in itertools.combinations(range(3), 2)
        ]
    )


_UNION_W = _union_w()


def _union_fit(r):
    _expect(isinstance(r, U.UnionFit) and math.isfinite(r.value) and r.value > 0, r)


def _attribute(r):
    _expect(type(r).__name__ == "Attribute" and r.size >= 1, r)


def _counts_array(r):
    _expect(isinstance(r, np.ndarray) and r.dtype == np.int64 and r.size > 0 and r.min() >= 0, r)


_FLIGHTS = {
    "dest": ["BOS", "LAX", "BOS", " SFO", "LAX", "BOS"] * 20,
    "time": ["2013-01-01T05:00", "2013-01-02T07:30", "2013-01-03T23:59"] * 40,
    "delay": [1.5, 2.0, 30.0, 0.0, 12.0, 3.0] * 20,
}


def _discover(source, column, eps, delta, name, budget, rng, other):
    return discover_categories(
        source, column, eps, delta, name=name, budget=budget, rng=rng, other=other
    )


def _discovery(r):
    _expect(isinstance(r, Discovery) and r.threshold >= 2 and r.scale > 0, r)


def _plan():
    return strategy_plan(W.prefix(8), S.identity(8), 1.0)


def _release_or_result(r):
    _expect(isinstance(r, mm.Release) and _finite(r.answers) and _finite(r.std), r)


def _source(r):
    _expect(hasattr(r, "marginals") or hasattr(r, "marginal_counts"), r)


def _labels(r):
    _expect(isinstance(r, list) and r and all(isinstance(s, str) and s for s in r), r)


_NEW = dict(group="new")


def _given_domain():
    return mm.Domain(
        (integer_range("a", 0, 2), categories("b", ["x", "y"], other="?", policy="other"))
    )


def _given_result():
    """The result of tables_sql for the tables (0,) and (0, 1), run by DuckDB."""
    import duckdb
    import pandas as pd

    con = duckdb.connect()
    con.register("t", pd.DataFrame({"a": [0, 1, 2, 2, 1], "b": ["x", "y", "z", "x", "x"]}))
    try:
        return con.execute(G.tables_sql(_given_domain(), [(0,), (0, 1)], "t")).fetchdf()
    finally:
        con.close()


def _sql(r):
    return _expect(isinstance(r, str) and "GROUPING SETS" in r, r)


NEW_ENTRIES = [
    # streams (matmech.stream; docs/guide/streams.md)
    Entry(
        "stream.StreamSpec",
        StreamSpec,
        dict(
            horizon=8,
            eps=1.0,
            delta=1e-6,
            rho=None,
            categories=("a", "b"),
            factorization="sqrt",
            objective="mean",
            neighbors="add_remove",
            max_records=1000,
        ),
        _stream_spec,
        loose=("categories",),  # a count or a list of labels
        bad=dict(categories=(("a", "a"), ("",), 0, 2**17), horizon=(0, 2**30)),
        none_ok=("eps", "max_records"),  # eps None when rho is given; max_records: the default
        **_NEW,
    ),
    Entry(
        "stream.plan_stream",
        plan_stream,
        dict(spec=_spec(), factorization=None),
        _stream_plan,
        **_NEW,
    ),
    Entry(
        "stream.StreamRelease.create",
        StreamRelease.create,
        dict(
            path=_fresh_path("c.stream"),
            spec=_spec(),
            budget=Fresh(_budget),
            rng=_rng(),
            factorization=None,
            key_file=None,
        ),
        _stream,
        files=True,
        examples=20,
        **_NEW,
    ),
    Entry(
        "stream.StreamRelease.open",
        StreamRelease.open,
        dict(path=str(_STREAM_FILE), budget=None, rng=_rng(), key_file=str(_STREAM_KEY)),
        _stream,
        files=True,
        examples=20,
        **_NEW,
    ),
    Entry(
        "stream.StreamRelease.step",
        _stream_step,
        dict(counts=[3, 4], t=None),
        _step,
        bad=dict(
            counts=([0.5, 1], [-1, 2], [1], [1, 2, 3], [NAN, 1], [INF, 1], ["1", "2"]),
            t=(1, 8, -1),
        ),
        examples=20,
        **_NEW,
    ),
    Entry(
        "stream.advise_stream",
        advise_stream,
        dict(n=16, objective="mean", dense=None, names=("sqrt", "identity", "prefix")),
        lambda r: _expect(isinstance(r, StreamAdvice) and r.best.mean > 0, r),
        bad=dict(names=(["nope"], [""])),
        examples=20,
        **_NEW,
    ),
    Entry(
        "stream.build",
        build,
        dict(name="sqrt", n=16, objective="mean"),
        lambda r: _expect(isinstance(r, StreamFactorization) and r.n >= 1, r),
        **_NEW,
    ),
    Entry(
        "stream.load_stream_spec",
        load_stream_spec,
        dict(path=str(_STREAM_TOML)),
        _stream_spec,
        files=True,
        **_NEW,
    ),
    Entry(
        "stream.period_counts",
        lambda source, period, category, engine: period_counts(
            source, period=period, category=category, engine=engine
        ),
        dict(
            source=_FLIGHTS,
            period=D.time_bins("time", "2013-01-01", "2013-01-04", "day"),
            category=None,
            engine="numpy",
        ),
        _counts_array,
        **_NEW,
    ),
    # the streamed marginal release (matmech.release_marginals; docs/guide/many-attributes.md)
    Entry(
        "release_marginals",
        release_marginals,
        dict(
            data=_CODES,
            W=_marginals_w(),
            eps=1.0,
            delta=1e-6,
            budget=None,
            rng=_rng(),
            neighbors="add_remove",
            max_records=None,
            objective="sum",
            max_memory=2**30,
            scale_bits=9,
            spill_dir=None,
            search="auto",
        ),
        _marginal_release,
        none_ok=("max_records", "scale_bits"),
        bad=dict(
            data=(_CODES + 1, -_CODES, _CODES[:, :3], _CODES.astype(float) + 0.5),
            max_records=(10,),
            max_memory=(1000,),
        ),
        examples=25,
        **_NEW,
    ),
    Entry(
        "MarginalRelease.marginal",
        lambda S: _MREL.marginal(S),
        dict(S=(0, 1)),
        _pair,
        bad=dict(S=((0.5,), (0, 0), (4,), (-1,), (True,), ("0",))),
        **_NEW,
    ),
    Entry(
        "MarginalRelease.interval",
        lambda S, level: _MREL_PURE.interval(S, level),
        dict(S=(1, 2), level=0.95),
        _pair,
        bad=dict(level=(1.5, -0.5, 1, 0), S=((0.5, 1),)),
        **_NEW,
    ),
    Entry("MarginalRelease.residual", lambda T: _MREL.residual(T), dict(T=(0, 1)), _pair, **_NEW),
    Entry(
        "MarginalRelease.to_release",
        lambda max_memory: _MREL.to_release(max_memory=max_memory),
        dict(max_memory=2**30),
        _release_or_result,
        **_NEW,
    ),
    Entry(
        "MarginalRelease.save",
        lambda path: _MREL.save(path),
        dict(path=_fresh_path("saved")),
        lambda r: _expect(isinstance(r, Path) and (r / "answers.npy").exists(), r),
        files=True,
        **_NEW,
    ),
    Entry(
        "factored.marginal_workload",
        marginal_workload,
        dict(domain=(3, 4, 2), subsets=[(0, 1), (2,)], weights=None),
        _linop,
        bad=dict(subsets=([(0, 0)], [(5,)], [(0.5,)]), weights=([-1.0, 1.0], [1.0], [0.0, 1.0])),
        **_NEW,
    ),
    Entry(
        "factored.release_factored",
        release_factored,
        dict(
            data=_CODES,
            W=_marginals_w(),
            eps=1.0,
            delta=1e-6,
            strategy="auto",
            budget=None,
            rng=_rng(),
            neighbors="add_remove",
            max_records=None,
            objective="sum",
        ),
        _release_or_result,
        loose=("strategy",),
        none_ok=("max_records",),
        examples=25,
        **_NEW,
    ),
    Entry(
        "factored.residual_error",
        residual_error,
        dict(W=_marginals_w(), eps=1.0, delta=1e-6, neighbors="add_remove", objective="sum"),
        lambda r: _expect(_finite(np.asarray(r, dtype=float)) and np.all(np.asarray(r) > 0), r),
        **_NEW,
    ),
    Entry(
        "factored.release_labels",
        lambda W, domain, names: release_labels(W, domain, names=names),
        dict(W=_marginals_w(), domain=None, names=None),
        _labels,
        bad=dict(names=(["a"], [1, 2, 3, 4])),
        **_NEW,
    ),
    Entry(
        "factored.marginal_tables",
        marginal_tables,
        dict(data=_CODES, domain=(3, 3, 3, 3), subsets=[(0, 1), (2,)]),
        lambda r: _expect(isinstance(r, dict) and r and all(v.min() >= 0 for v in r.values()), r),
        **_NEW,
    ),
    # tables computed elsewhere (docs/guide/where-the-data-lives.md)
    Entry(
        "given_tables.tables_sql",
        G.tables_sql,
        dict(domain=_given_domain(), subsets=[(0,), (0, 1)], source_sql="t", dialect="duckdb"),
        _sql,
        **_NEW,
    ),
    Entry(
        "given_tables.read_tables",
        G.read_tables,
        dict(data=_given_result(), domain=_given_domain(), subsets=[(0, 1)]),
        lambda r: _expect(isinstance(r, dict) and int(r[(0, 1)].sum()) == 5, r),
        none_ok=("subsets",),
        files=True,
        **_NEW,
    ),
    Entry(
        "given_tables.workload_tables",
        G.workload_tables,
        dict(W=_marginals_w(), d=4),
        lambda r: _expect(r == list(itertools.combinations(range(4), 2)), r),
        **_NEW,
    ),
    Entry(
        "optimizers.plan_residuals",
        plan_residuals,
        dict(domain=(3, 4, 2), subsets=[(0, 1), (1, 2)], weights=None, objective="sum"),
        lambda r: _expect(_finite(r.variances) and np.all(r.variances > 0), r),
        bad=dict(weights=([0.0, 1.0], [1.0])),
        **_NEW,
    ),
    # categories, dates (matmech.io; docs/guide/dates-and-categories.md)
    Entry(
        "io.discover_categories",
        _discover,
        dict(
            source=_FLIGHTS,
            column="dest",
            eps=1.0,
            delta=1e-6,
            name=None,
            budget=Fresh(_budget),
            rng=_rng(),
            other="other",
        ),
        _discovery,
        none_ok=("other",),
        bad=dict(column=("nope", ""), delta=(0.0, 1.0), other=("",)),
        files=True,  # a source path that cannot be read: OSError naming it
        **_NEW,
    ),
    Entry(
        "io.time_bins",
        lambda name, start, end, unit, policy: D.time_bins(name, start, end, unit, policy=policy),
        dict(name="day", start="2013-01-01", end="2013-02-01", unit="day", policy="error"),
        _attribute,
        loose=("start", "end"),  # ISO strings, dates or datetimes
        bad=dict(start=("2014-01-01", "not a date", "2013-13-01"), end=("2012-01-01", "")),
        **_NEW,
    ),
    Entry(
        "io.categories",
        lambda name, values, policy, other: D.categories(name, values, policy=policy, other=other),
        dict(name="sex", values=["F", "M"], policy="error", other=None),
        _attribute,
        bad=dict(values=(["F", "F"], [" F"], [""], ["F", 1]), policy=("other",)),
        aliases=dict(values=("categories",)),
        **_NEW,
    ),
    Entry(
        "io.integer_range",
        lambda name, lo, hi, width: D.integer_range(name, lo, hi, width=width),
        dict(name="age", lo=0, hi=9, width=1),
        _attribute,
        bad=dict(hi=(-5,), width=(0, -2)),
        **_NEW,
    ),
    Entry(
        "io.numeric_bins",
        lambda name, lo, hi, width: D.numeric_bins(name, lo=lo, hi=hi, width=width),
        dict(name="carat", lo=0.0, hi=5.0, width=0.1),
        _attribute,
        none_ok=("lo", "hi", "width"),  # declared by edges or bins instead
        **_NEW,
    ),
    Entry(
        "io.numeric_bins(edges)",
        lambda edges: D.numeric_bins("delay", edges=edges),
        dict(edges=[0.0, 5.0, 15.0, 60.0]),
        _attribute,
        bad=dict(edges=([1.0, 0.5], [1.0], [0.0, NAN], [0.0, 1.0, 1.0])),
        **_NEW,
    ),
    Entry(
        "io.histogram",
        lambda source, domain, engine: engine_histogram(source, domain, engine=engine),
        dict(
            source=_FLIGHTS,
            domain=mm.Domain((D.categories("dest", ["BOS", "LAX", "SFO"]),)),
            engine="numpy",
        ),
        _counts_array,
        **_NEW,
    ),
    # the pipeline (matmech.plans, matmech.run; docs/guide/pipeline.md)
    Entry(
        "pipeline.run_plan",
        lambda plan, data, budget, rng: run_plan(plan, data, budget=budget, rng=rng),
        dict(plan=_plan(), data=HistogramSource(_x()), budget=Fresh(_budget), rng=_rng()),
        _release_or_result,
        bad=dict(data=(HistogramSource([1, 2]), HistogramSource([-1] * 8), _x())),
        aliases=dict(data=("x ",)),  # HistogramSource(x): its checks name x
        **_NEW,
    ),
    Entry(
        "pipeline.strategy_plan",
        strategy_plan,
        dict(
            W=W.prefix(8),
            A=S.identity(8),
            eps=1.0,
            delta=0.0,
            neighbors="add_remove",
            max_records=None,
        ),
        lambda r: _expect(math.isfinite(r.eps) and r.eps > 0, r),
        none_ok=("max_records",),
        **_NEW,
    ),
    Entry("pipeline.as_source", as_source, dict(x=_x(), domain=None), _source, **_NEW),
    Entry(
        "pipeline.HistogramSource",
        lambda x: run_plan(_plan(), HistogramSource(x), budget=None, rng=_rng()),
        dict(x=_x()),
        _release_or_result,
        **_NEW,
    ),
    Entry(
        "pipeline.TableSource",
        lambda data: run_plan(_plan(), TableSource(data), budget=None, rng=_rng()),
        dict(data=np.array([[0], [1], [1], [7], [3]])),
        _release_or_result,
        bad=dict(data=(np.array([[0], [8]]), np.array([[-1]]), np.array([[0.5]]))),
        **_NEW,
    ),
    Entry(
        "pipeline.EngineSource",
        lambda source, domain: run_plan(
            strategy_plan(W.prefix(3), S.identity(3), 1.0),
            EngineSource(source, domain),
            budget=None,
            rng=_rng(),
        ),
        dict(source=_FLIGHTS, domain=mm.Domain((D.categories("dest", ["BOS", "LAX", "SFO"]),))),
        _release_or_result,
        files=True,  # a source path that cannot be read
        **_NEW,
    ),
    # the unions planner (matmech.optimizers.unions; docs/guide/planning-unions.md)
    Entry(
        "optimizers.unions.optimize_unions",
        lambda W, maxiter: U.optimize_unions(W, maxiter=maxiter),
        dict(W=_UNION_W, maxiter=5),
        _union_fit,
        examples=15,
        **_NEW,
    ),
    Entry(
        "optimizers.unions.plan_residual_products",
        lambda W, objective: U.plan_residual_products(W, objective=objective),
        dict(W=_UNION_W, objective="total"),
        _union_fit,
        examples=15,
        **_NEW,
    ),
    Entry(
        "optimizers.unions.refine_general_l2",
        lambda W, maxiter, decide_at, ftol: U.refine_general_l2(
            W, maxiter=maxiter, decide_at=decide_at, ftol=ftol
        ),
        dict(W=_UNION_W, maxiter=5, decide_at=2, ftol=1e-4),
        _union_fit,
        none_ok=("decide_at",),
        examples=15,
        **_NEW,
    ),
    Entry(
        "optimize(unions)",
        lambda W, eps, delta: mm.optimize(W, eps, delta, method="unions"),
        dict(W=_UNION_W, eps=1.0, delta=1e-6),
        _optimized,
        examples=10,
        **_NEW,
    ),
]

# consistent tables and synthetic records (issue 35; docs/guide/synthetic-data.md): a tiny
# domain and few iterations, so a call that is accepted fits in a fraction of a second once
# mbi's step is compiled (equal measurements reuse it)
_SYN_CODES = np.random.default_rng(1).integers(0, 2, size=(200, 3))
_SYN_REL = mm.release(_SYN_CODES, W.marginals((2, 2, 2), 2), 1.0, 1e-6, rng=_rng())


def _synthetic(r):
    t = r.table((0, 1))
    _expect(isinstance(r, mm.Synthetic) and r.codes.shape[1:] == (3,), r)
    _expect(_finite(t) and t.min() >= 0, r)


SYNTH_ENTRIES = [
    Entry(
        "synthesize",
        mm.synthesize,
        dict(measured=_SYN_REL, domain=None, n=50, total=None, iters=5, rng=_rng()),
        _synthetic,
        loose=("domain", "measured"),
        none_ok=("domain", "n", "total"),
        bad=dict(
            measured=([], [_SYN_REL, 3]),
            domain=((2, 2), (2, 2, 3), {"a": 2}, (0, 2, 2)),
            n=(-1,),
            total=(0.0, -5.0, NAN, INF),
            iters=(0,),
        ),
        examples=15,
        **_NEW,
    ),
    Entry(
        "synthesize_adaptive",
        mm.synthesize_adaptive,
        dict(
            data=_SYN_CODES,
            domain=(2, 2, 2),
            eps=1.0,
            delta=1e-6,
            budget=None,
            workload=[(0, 1)],
            rounds=1,
            picks=1,
            init=0.1,
            select=0.1,
            max_model_cells=1 << 22,
            iters=5,
            n=50,
            rng=_rng(),
        ),
        _synthetic,
        loose=("domain", "data", "workload"),
        none_ok=("eps", "delta", "n", "picks"),
        bad=dict(
            data=(_SYN_CODES + 1, -_SYN_CODES, _SYN_CODES[:, :2]),
            domain=((2, 2), (0, 2, 2)),
            workload=([(0, 5)], [()], [], [(0, 0)]),
            eps=(0.0, -1.0),
            delta=(0.0,),
            init=(0.0, 1.0, 0.95),
            select=(0.0, 1.0),
            rounds=(0,),
            picks=(0,),
            max_model_cells=(0,),
            iters=(0,),
            n=(-1,),
        ),
        examples=10,
        **_NEW,
    ),
]

ENTRIES = ENTRIES + NEW_ENTRIES + SYNTH_ENTRIES


#: Public names that are records or exceptions, covered through the entries that return or
#: raise them (and the modules, covered function by function above).
RECORDS = {
    "workloads",
    "strategies",
    "LinOp",
    "Measurement",
    "Release",
    "MarginalRelease",
    "Synthetic",
    "OptimizeResult",
    "Advice",
    "Selection",
    "BudgetExceededError",
    "Spec",
    "SpecError",
    "SparseVectorExhausted",
    "SVTResult",
    "TopCResult",
    "SVTCalibration",
    "SVTBudget",
    "Ledger",
    "SparseVector",
    "PrivacyBudget",
    "GapCalibration",
    "GapResult",
    "GapMeasurement",
    "VectorResult",
}


def _run(entry: Entry, arg: str, value, seconds=HARD_SECONDS):
    kind, out = _call(entry, arg, value, seconds)
    where = f"{entry.name}({arg}={value!r})"
    assert kind != "hang", f"{where} ran longer than {seconds} s"
    assert kind != "other", f"{where} raised {type(out).__name__}: {out}"
    if kind == "refused":
        assert _named(str(out), arg, value, tuple(entry.aliases.get(arg, ()))), (
            f"{where} raised {type(out).__name__} not naming {arg!r} or the value: {out}"
        )
        assert not _leaked(str(out)), (
            f"{where} leaked an internal message: {type(out).__name__}: {out}"
        )
    else:
        try:
            entry.check(out)
        except AssertionError as exc:
            raise AssertionError(f"{where} returned a degenerate or wrong result: {exc}") from None


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
def test_baseline_call_is_valid(entry):
    """The unperturbed call succeeds: otherwise every refusal below would be vacuous."""
    kind, out = _call(entry, next(iter(entry.args)), entry.args[next(iter(entry.args))])
    if entry.name == "load_strategy":
        assert kind == "refused" and "missing.npz" in str(out)  # a missing file, named
        return
    assert kind == "ok", f"{entry.name}: {out!r}"
    entry.check(out)


def _kind(value):
    """The class of hostile value a known defect is about (None: not one of them)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**1024:
        return "huge"
    if isinstance(value, float) and 0 < abs(value) < 2.2250738585072014e-308:
        return "subnormal"
    if (
        isinstance(value, list)
        and value
        and all(isinstance(r, list) for r in value)
        and len({len(r) for r in value}) > 1
    ):
        return "ragged"
    if (isinstance(value, list) and not value) or (
        isinstance(value, np.ndarray) and value.ndim != 2
    ):
        return "not 2-D"
    if (
        isinstance(value, (int, np.integer))
        and not isinstance(value, bool)
        and 2**24 < value <= 2**1024
    ):
        return "big size"
    return None


#: Defects found by this module in code outside the validation layer's reach (modules owned
#: elsewhere), reported with the exact fix. Each is excluded from the hostile sweep and
#: reproduced below as a strict xfail: when it is fixed the xfail passes, the test fails,
#: and the line must be deleted here. (entry, argument): (a value that shows it, where, what)
KNOWN = {}
#: Whole functions without argument validation yet: every argument is excluded from the
#: sweep (an ANY in the examples); one example each is reproduced. None at present.
ANY = object()


#: The defects this table used to hold, fixed since (issue 15): each example must now be
#: refused naming the argument or the value (or give a documented, finite result). The
#: hostile sweep samples these values only sometimes; this list pins every one of them.
_SVT_RUNS = (
    "sparse_vector",
    "SparseVector.test",
    "above_threshold",
    "sparse_vector_dpbook",
    "sparse_vector_retraversal",
)
FIXED = [
    ("histogram", "bins", RAGGED),
    ("histogram", "bins", HUGE),
    ("histogram", "bins", 2**31),
    ("as_linop", "obj", RAGGED),
    ("optimize", "W", []),
    ("select_rows", "W", []),
    ("select_rows", "eps", HUGE),
    ("select_rows", "threshold", RAGGED),
    ("exponential_top_c", "values", []),
    ("exponential_top_c", "values", RAGGED),
    ("exponential_top_c", "eps", HUGE),
    ("svt.optimal_ratio", "c", HUGE),
    ("svt.svt_budget", "c", HUGE),
    ("svt.svt_budget", "eps", HUGE),
    ("svt.svt_budget", "sensitivity", HUGE),
    ("SparseVector.test", "value", HUGE),
    ("sparse_vector", "sensitivity", HUGE),
    ("sparse_vector_retraversal", "boost", HUGE),
    ("svt.sparse_alpha", "c", HUGE),
    ("svt.gap_calibration", "c", HUGE),
    ("svt.gap_calibration", "eps", HUGE),
    ("svt.noisy_top_c_gap", "values", []),
    ("svt.noisy_top_c_gap", "values", RAGGED),
    ("svt.noisy_top_c_gap", "eps", HUGE),
    ("svt.combine_gaps", "y", 1.0),
    ("svt.combine_gaps", "y", None),
    ("svt.combine_gaps", "y", RAGGED),
    ("svt.combine_gaps", "cov", RAGGED),
    ("svt.combine_gaps", "cov", [[1.0, 2.0], [2.0, 1.0]]),
    ("svt.advise_split", "eps", 0.0),
    ("svt.advise_split", "eps", True),
    ("svt.advise_split", "eps", "1"),
    ("svt.advise_split", "c", float("inf")),
    ("svt.advise_split", "c", 2.0),
    ("svt.advise_split", "row_variance", None),
    ("svt.advise_split", "row_variance", lambda e: 0.0),
    ("svt.gap_measurement", "threshold", float("nan")),
    ("svt.gap_measurement", "threshold", float("inf")),
    ("svt.gap_measurement", "threshold", []),
    ("svt.gap_measurement", "threshold", RAGGED),
    *[
        (f"svt.{f}", a, v)
        for f in ("above_threshold_alpha", "sparse_alpha", "exponential_alpha")
        for a in ("beta", "eps")
        for v in (5e-324, HUGE)
    ],
    *[(f, a, v) for f in _SVT_RUNS for a, v in (("threshold", RAGGED), ("eps", HUGE))],
    *[(f, "values", RAGGED) for f in _SVT_RUNS if f != "SparseVector.test"],
    *[(f, "c", HUGE) for f in _SVT_RUNS if f != "above_threshold"],
    *[
        (f"svt.{f}", a, v)
        for f in ("sparse_vector_gap", "adaptive_sparse_vector")
        for a, v in (("values", RAGGED), ("c", HUGE), ("eps", HUGE), ("threshold", RAGGED))
    ],
]


@pytest.mark.parametrize(
    "name, arg, value", FIXED, ids=[f"{n}-{a}-{_kind(v) or repr(v)[:12]}" for n, a, v in FIXED]
)
def test_fixed_defect_stays_fixed(name, arg, value):
    entry = next(e for e in ENTRIES if e.name == name)
    _run(entry, arg, value, seconds=10)


def _examples(key):
    v = KNOWN[key][0]
    return tuple(x for x in (v if isinstance(v, tuple) else (v,)) if x is not ANY)


KNOWN_CASES = [(key, v) for key in sorted(KNOWN) for v in _examples(key)]


def test_known_defects_are_still_present():
    """Each KNOWN entry still misbehaves (when one is fixed, delete its line). Empty today:
    every defect this module found has been fixed and is pinned in FIXED."""
    for key, value in KNOWN_CASES:
        entry = next(e for e in ENTRIES if e.name == key[0])
        with pytest.raises(BaseException):  # noqa: B017 - any misbehaviour counts
            _run(entry, key[1], value, seconds=3)
    assert all(key[0] in {e.name for e in ENTRIES} for key in KNOWN)


def _known(entry, arg, value):
    known = KNOWN.get((entry.name, arg))
    if known is None:
        return False
    if isinstance(known[0], tuple) and any(x is ANY for x in known[0]):
        return True
    return _kind(value) in {_kind(v) for v in _examples((entry.name, arg))}


def _unchecked(entry, arg):
    known = KNOWN.get((entry.name, arg))
    return known is not None and isinstance(known[0], tuple) and any(x is ANY for x in known[0])


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
def test_hostile_argument(entry):
    names = [a for a in (entry.perturb or entry.args) if not _unchecked(entry, a)]
    if (
        not names
    ):  # every argument unvalidated: the KNOWN reproductions (strict xfails) stand for it
        assert all((entry.name, a) in KNOWN for a in entry.args)
        return

    @settings(
        max_examples=entry.examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(arg=st.sampled_from(names), value=HOSTILE)
    def run(arg, value):
        assume(not _known(entry, arg, value))  # reproduced by test_known_defect_still_present
        _run(entry, arg, value)

    run()


def test_every_public_name_is_covered():
    covered = {e.name.split(".")[0].split("/")[0] for e in ENTRIES} | RECORDS
    missing = [n for n in mm.__all__ if n not in covered]
    missing += [
        f"svt.{n}"
        for n in svt.__all__
        if n not in covered and f"svt.{n}" not in {e.name for e in ENTRIES}
    ]
    missing += [
        f"workloads.{n}" for n in W.__all__ if f"workloads.{n}" not in {e.name for e in ENTRIES}
    ]
    missing += [
        f"plot.{n}"
        for n in ("plot_release", "plot_advice", "figure_path")
        if f"plot.{n}" not in {e.name for e in ENTRIES}
    ]
    missing += [
        f"strategies.{n}"
        for n in S.__all__
        if f"strategies.{n}" not in {e.name for e in ENTRIES} and n not in ("Tree", "Haar")
    ]
    assert not missing, f"public names with no fuzz entry: {missing}"


#: The public names of the modules users call beyond ``matmech.__all__`` (the guides' imports:
#: docs/guide/streams.md, many-attributes.md, dates-and-categories.md, pipeline.md,
#: planning-unions.md): every one needs a fuzz entry (a name in an entry's dotted name) or is
#: a record / protocol covered through the entries that return or take it.
PUBLIC_MODULES = {
    "matmech.plans.plan": ("Plan", "Draws", "Estimate"),
    "matmech.plans.strategy": ("StrategyPlan", "strategy_plan"),
    "matmech.run.runner": ("run_plan",),
    "matmech.sources.source": (
        "DataSource",
        "HistogramSource",
        "TableSource",
        "EngineSource",
        "as_source",
    ),
    "matmech.io.declare": ("categories", "integer_range", "numeric_bins", "time_bins"),
    "matmech.stream.plan": ("StreamSpec", "plan_stream"),
    "matmech.stream.release": ("StreamRelease",),
    "matmech.stream.advise": ("advise_stream",),
    "matmech.stream.factorizations": ("build",),
    "matmech.cli.stream": ("load_stream_spec",),
    "matmech.sources.periods": ("period_counts",),
    "matmech.run.discover": ("discover_categories",),
    "matmech.sources.engines": ("histogram",),
    "matmech.optimizers.unions": ("optimize_unions", "plan_residual_products", "refine_general_l2"),
    "matmech.optimizers.residual": ("plan_residuals",),
    "matmech.linalg.terms": ("marginal_workload",),
    "matmech.release": ("release_factored", "release_marginals"),
    "matmech.plans.residual": ("residual_error",),
    "matmech.sources.tables": ("marginal_tables",),
    "matmech.sources.given_tables": ("tables_sql", "read_tables", "workload_tables"),
    "matmech.results.labels": ("release_labels",),
}
#: Records and protocols of those modules (covered through the entries that use them).
PUBLIC_RECORDS = {"Plan", "Draws", "Estimate", "DataSource", "StrategyPlan"}


def test_every_public_name_of_the_guides_modules_is_covered():
    import importlib

    covered = {part for e in ENTRIES for part in e.name.split("(")[0].split(".")}
    missing = []
    for module, names in PUBLIC_MODULES.items():
        mod = importlib.import_module(module)
        for name in names:
            assert hasattr(mod, name), f"{module}.{name} is gone: update PUBLIC_MODULES"
            if name not in covered and name not in PUBLIC_RECORDS:
                missing.append(f"{module}.{name}")
    assert not missing, f"public names with no fuzz entry: {missing}"
    groups = {e.group for e in ENTRIES}
    assert groups == {"old", "new"}, groups


# ----------------------------------------------------------------------------- wrong kinds (issue 23)

#: (entry, argument) that take None (a documented default meaning "not given") or strings
#: ("auto"-style options): such a value is the right kind with a wrong value (ValueError).
NONE_OK = {
    ("workloads.marginals", "k"),
    ("select_rows", "threshold"),
    ("svt.gap_measurement", "threshold"),
}
STR_OK = {("select_rows", "threshold")}


def _numeric(v):
    return isinstance(v, (numbers.Real, np.number)) and not isinstance(v, (bool, np.bool_))


def _sweep_cases():
    for e in ENTRIES:
        for arg, base in e.args.items():
            for v in WRONG_KINDS:
                yield e, arg, base, v


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
def test_a_wrong_kind_is_a_type_error_naming_the_parameter(entry):
    """Every argument, every value in WRONG_KINDS: a numeric parameter given a non-number
    (None, a string, bytes, an object, a dict, a complex, True) raises TypeError naming it;
    no refusal of any argument shows an internal message (issue 23: about 40 calls raised
    ValueError for a wrong kind, 30 leaked "'int' object is not iterable", "embedded null byte")."""
    wrong = []
    for arg, base in entry.args.items():
        for v in WRONG_KINDS:
            kind, out = _call(entry, arg, v, seconds=20)
            where = f"{entry.name}({arg}={v!r})"
            assert kind not in ("other", "hang"), f"{where}: {kind} {type(out).__name__}: {out}"
            if kind != "refused":
                continue
            assert not _leaked(str(out)), (
                f"{where} leaked an internal message: {type(out).__name__}: {out}"
            )
            allowed = (v is None and ((entry.name, arg) in NONE_OK or arg in entry.none_ok)) or (
                isinstance(v, str) and (entry.name, arg) in STR_OK
            )
            if _numeric(base) and not allowed and not isinstance(out, TypeError):
                wrong.append(f"{where}: {type(out).__name__}: {out}")
            elif _numeric(base) and not allowed:
                assert _named(str(out), arg, v, tuple(entry.aliases.get(arg, ()))), (
                    f"{where}: TypeError not naming {arg!r}: {out}"
                )
    assert not wrong, "a wrong kind gave ValueError, not TypeError:\n" + "\n".join(wrong)


# ----------------------------------------------------------------------------- the issue's cases


ISSUE_CASES = [
    ("release eps=1e300", lambda: mm.release(_x(), _w(), 1e300, rng=_rng()), "1e+300"),
    ("release eps=1e-300", lambda: mm.release(_x(), _w(), 1e-300, rng=_rng()), "1e-300"),
    (
        "release delta=5e-324",
        lambda: mm.release(_x(), _w(), 1.0, delta=5e-324, rng=_rng()),
        "5e-324",
    ),
    ("PrivacyBudget(10**400)", lambda: mm.PrivacyBudget(10**400), "eps"),
    ("from_matrix ragged", lambda: W.from_matrix([[1.0, 2.0], [1.0]]), "row 1"),
    ("haar(2**62)", lambda: S.haar(2**62), "4611686018427387904"),
    ("compare candidates=5", lambda: mm.compare(_w(), 1.0, candidates=5), "candidates"),
    ("compare eps=-1", lambda: mm.compare(_w(), -1.0), "-1.0"),
    (
        "lower_bound all_range(2**63)",
        lambda: mm.lower_bound(W.all_range(2**63)),
        "9223372036854775808",
    ),
    ("identity(2**63)", lambda: W.identity(2**63), "9223372036854775808"),
    ("all_range(2**63)", lambda: W.all_range(2**63), "9223372036854775808"),
    ("laplace_scale tiny eps", lambda: cal.laplace_scale(1e-300, 1.0), "1e-300"),
    ("laplace_scale huge eps", lambda: cal.laplace_scale(1e300, 1.0), "1e+300"),
    ("laplace_scale overflow", lambda: cal.laplace_scale(1e-4, 1e300), "1e+300"),
    ("can_spend(0, 0)", lambda: mm.PrivacyBudget(1.0).can_spend(0, 0), "both 0"),
    ("gaussian_sigma eps=1.3e154", lambda: mm.gaussian_sigma(1.3e154, 1e-6, 1.0), "1.3e+154"),
    ("gaussian_sigma eps=1e7", lambda: mm.gaussian_sigma(1e7, 1e-6, 1.0), "10000000.0"),
]


@pytest.mark.parametrize("case, call, text", ISSUE_CASES, ids=[c[0] for c in ISSUE_CASES])
def test_issue_cases_are_refused_naming_the_value(case, call, text):
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    assert text in str(info.value), str(info.value)


def test_a_strategy_too_large_to_measure_is_refused_before_any_spend():
    """S.kron of three all_range(64) has 9.0e9 rows: refused up front, nothing charged."""
    budget = mm.PrivacyBudget(1.0)
    A = S.kron(W.all_range(64), W.all_range(64), W.all_range(64))
    assert A.shape[0] == 2080**3
    with pytest.raises(ValueError, match="8,998,912,000 rows") as info:
        mm.release(
            np.ones(64**3, dtype=np.int64),
            W.identity(64**3),
            1.0,
            strategy=A,
            budget=budget,
            rng=_rng(),
        )
    assert "GiB" in str(info.value) and budget.spent == (0.0, 0.0) and not budget.ledger


def test_the_documented_eps_range_is_accepted_at_both_ends():
    """ε = 1e-6 and 1e6 (pure and with δ = 1e-100): finite, positive scales that agree with
    the closed form Δ/ε (Laplace) and shrink with ε (Gaussian)."""
    from matmech.privacy.params import DELTA_MIN, EPS_MAX, EPS_MIN

    assert cal.laplace_scale(EPS_MIN, 2.0) == pytest.approx(2.0 / EPS_MIN, rel=1e-15)
    assert cal.laplace_scale(EPS_MAX, 2.0) == pytest.approx(2.0 / EPS_MAX, rel=1e-15)
    lo, hi = mm.gaussian_sigma(EPS_MIN, DELTA_MIN, 1.0), mm.gaussian_sigma(EPS_MAX, DELTA_MIN, 1.0)
    assert math.isfinite(lo) and math.isfinite(hi) and lo > 1e4 * hi > 0
    # σ(ε, δ) is the smallest σ whose zCDP conversion meets δ: a second method, the forward
    # conversion ρ = 1/(2σ²) → δ', must give δ' <= δ at both ends
    for eps, sigma in ((EPS_MIN, lo), (EPS_MAX, hi)):
        assert cal.approx_dp_delta(1 / (2 * sigma**2), eps) <= DELTA_MIN * (1 + 1e-9)
    # just outside the range: refused, naming the value
    for bad in (math.nextafter(EPS_MIN, 0), math.nextafter(EPS_MAX, math.inf)):
        with pytest.raises(ValueError, match="eps must be in"):
            mm.gaussian_sigma(bad, 1e-6, 1.0)
    with pytest.raises(ValueError, match="delta must be 0 or in"):
        cal.noise_variance(1.0, DELTA_MIN / 2, sensitivity=1.0)


def test_an_operator_built_below_the_builders_is_still_refused():
    """lower_bound on linalg's AllRange(2**63) (no builder in between) used to return 0.0;
    linalg's own size check (linop.check_size) now refuses the operator itself."""
    from matmech.linalg.intervals import AllRange

    with pytest.raises(ValueError, match="at most 2\\*\\*62 .*got 9223372036854775808"):
        AllRange(2**63)
    # a product domain below the builders: the exact size, not an int64 product that wraps around
    from matmech.linalg.linop import Identity, Kron

    with pytest.raises(
        ValueError, match="Kron rows must be at most 2\\*\\*62 .*got 9223372036854775808"
    ):
        Kron([Identity(2**31), Identity(2**32)])
    assert Kron([Identity(2**31), Identity(2**31)]).shape == (2**62, 2**62)


# ----------------------------------------------------------------------------- the layer itself


def test_validate_helpers_refuse_and_name_the_value():
    from matmech import validate as V
    from matmech.limits import format_bytes

    assert V.flag(np.bool_(False), "root") is False
    for bad in ("False", "no", 0, 1, None):
        with pytest.raises(
            TypeError, match=f"root must be True or False, got {type(bad).__name__}"
        ):
            V.flag(bad, "root")
    assert V.choice("svt", "method", ("svt", "em")) == "svt"
    with pytest.raises(ValueError, match=r"method must be one of \['svt', 'em'\], got 'top'"):
        V.choice("top", "method", ("svt", "em"))
    with pytest.raises(TypeError, match="method must be one of"):
        V.choice(1, "method", ("svt", "em"))
    assert V.integer(np.int64(5), "c", min=1) == 5
    with pytest.raises(TypeError, match="c must be an integer, got float: 5.0"):
        V.integer(5.0, "c")
    with pytest.raises(ValueError, match="c must be an integer >= 1 and <= 3, got 4"):
        V.integer(4, "c", min=1, max=3)
    with pytest.raises(ValueError, match="a float can hold"):
        V.real(10**400, "eps")
    assert V.real(np.float32(0.5), "eps") == 0.5 and type(V.real(np.float32(0.5), "eps")) is float
    with pytest.raises(ValueError, match=r"m is ragged: row 2 has 1 entries, row 0 has 2"):
        V.matrix([[1, 2], [3, 4], [5]], "m")
    with pytest.raises(ValueError, match=r"v must be finite; v\[1\] is nan"):
        V.vector([1.0, float("nan")], "v")
    # the memory estimate is in the message, against an explicit limit (machine-independent)
    with pytest.raises(
        V.SizeError, match=r"a test needs about 1 GiB of memory, more than the 512 MiB"
    ):
        V.memory(2**30, "a test", limit=2**29)
    assert V.memory(2**29, "a test", limit=2**29) == 2**29
    with pytest.raises(V.SizeError, match="MAX_CELLS"):
        V.size(V.MAX_CELLS + 1, "n")
    assert V.size(V.MAX_CELLS, "n", bytes_per=1) == V.MAX_CELLS
    assert format_bytes(1536) == "1.5 KiB" and format_bytes(3 * 2**40) == "3 TiB"


def test_time_bins_unit_of_a_wrong_kind_is_a_type_error_and_tiny_widths_name_the_bounds():
    """Found by the sweep after the local-time bins landed: a unit that is not a string
    raised ValueError ("unhashable type" for a list), and a width below the float resolution
    at huge bounds named neither bound."""
    from matmech.io.domain import numeric_bins, time_bins

    for bad in (b"day", 1, True, None, ["day"], {}):
        with pytest.raises(TypeError, match=r"attribute 'd': unit must be one of \[") as info:
            time_bins("d", "2013-01-01", "2013-02-01", bad)
        assert "unhashable" not in str(info.value)
    with pytest.raises(ValueError, match=r"unit must be one of .*got 'year'"):
        time_bins("d", "2013-01-01", "2013-02-01", "year")
    with pytest.raises(ValueError, match=r"lo = 0.0, hi = 9.22\d*e\+18 \(bins must be at least"):
        numeric_bins("carat", lo=0, hi=2**63, width=0.1)


def test_a_stream_key_file_of_the_wrong_kind_is_a_type_error_naming_it(tmp_path):
    """Found by the sweep once the open entry declared its key file: a number given as
    ``key_file`` showed Python's "expected str, bytes or os.PathLike object"."""
    for bad in (1.5, 3, b"k.key", object()):
        with pytest.raises(TypeError, match=r"key_file must be a file path \(str or os.PathLike\)"):
            StreamRelease.open(_STREAM_FILE, key_file=bad)
        with pytest.raises(TypeError, match=r"key_file must be a file path"):
            StreamRelease.create(tmp_path / "k.stream", _spec(), rng=_rng(), key_file=bad)
    assert not (tmp_path / "k.stream").exists()
    assert StreamRelease.open(_STREAM_FILE, key_file=_STREAM_KEY).horizon == 8


def test_a_ledger_key_directory_of_the_wrong_kind_is_a_type_error_naming_keys(tmp_path):
    """Ledger.create/open(keys=1.5) showed Python's "expected str, bytes or os.PathLike"."""
    from matmech.privacy.ledger import Ledger

    for bad in (1.5, 3, b"keys", object()):
        with pytest.raises(TypeError, match=r"keys must be a file path \(str or os.PathLike\)"):
            Ledger.create(tmp_path / "l.db", 1.0, keys=bad)
        assert not (tmp_path / "l.db").exists()
    Ledger.create(tmp_path / "l.db", 1.0, keys=tmp_path / "k").spend(0.25)
    with pytest.raises(TypeError, match=r"keys must be a file path"):
        Ledger.open(tmp_path / "l.db", keys=2.5)
    assert Ledger.open(tmp_path / "l.db", keys=str(tmp_path / "k")).spent == (0.25, 0.0)


# ----------------------------------------------------------------------------- the sweep (issue 31)

#: The share of clean calls the sweep requires of each group of entry points (issue 31).
CLEAN_TARGET = 0.99


def test_the_sweep_is_clean_on_old_and_new_entry_points():
    """Every value of fuzz_support.POOL on every argument of every entry (deterministic, no
    sampling): at least 99% of the calls of each group are clean (fuzz_support's outcomes)."""
    counts, bad = sweep(ENTRIES, seconds=20)
    report = table(counts) + "\n" + "\n".join(f"{g} {o}: {w}: {d}" for g, o, w, d in bad)
    for group, c in counts.items():
        assert c["clean"] >= CLEAN_TARGET * sum(c.values()), report


if __name__ == "__main__":  # python tests/test_public_fuzz.py: the sweep's table and findings
    import time

    t0 = time.perf_counter()
    counts, bad = sweep(ENTRIES, seconds=20)
    print(table(counts))
    print(f"({time.perf_counter() - t0:.1f} s)")
    for g, o, w, d in bad:
        print(f"{g:4} {o:12} {w}: {d[:160]}")
