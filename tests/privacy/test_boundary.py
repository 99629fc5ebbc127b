"""The privacy boundary: nothing computed from x leaves except the noisy numbers.

Each test runs a public entry point on two neighbouring histograms (one record apart),
chosen next to an internal limit, with the same seeded randomness, and asserts that every
non-noisy output (strategy choice, notes, JSON keys, CLI text, exception type and message)
is identical. Regression tests for issue 10's findings 1-3 and 6.
"""

import json
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

import matmech as mm
from matmech import strategies as S
from matmech import workloads as Wk
from matmech.privacy.budget import BudgetExceededError, PrivacyBudget
from matmech.linalg.linop import Dense
from matmech.privacy.measure import MAX_RECORDS
from matmech.run.select import select_rows
from matmech.svt import exponential_top_c, sparse_vector


def _public(rel):
    """Everything in a Release that is not a noisy number."""
    d = rel.to_dict()
    d["queries"] = [
        {k: v for k, v in q.items() if k not in ("answer", "lower", "upper")} for q in d["queries"]
    ]
    d["noise"] = dict(d["noise"] or {})
    return d, rel.strategy_name, rel.strategy_note, repr(rel).split("rmse=")[0]


def _neighbours(n, total, cell=0):
    """(x, x') with Σx = total - 1 and x' = x plus one record in ``cell``."""
    x = np.zeros(n, dtype=np.int64)
    x[cell] = total - 1
    x2 = x.copy()
    x2[cell] += 1
    return x, x2


def _error(fn):
    with pytest.raises(Exception) as info:
        fn()
    return type(info.value), str(info.value)


# -- finding 1: no data-dependent choice after the selection's spend --------------------------


@pytest.mark.parametrize("max_records", [None, 2**26])
def test_auto_strategy_after_selection_is_the_same_at_the_old_record_limit(max_records):
    """Issue 10 finding 1: W = 2**26·prefix(16), EM selection, strategy='auto'. The old code
    switched to 'identity' with the exact count in the note at 67,108,864 records. Now the
    declared bound decides: the workload as its own strategy (Δ₁ = 2**26) is exact for up to
    2**26 records, so it is used when that is declared and never for the default 2**32."""
    W = (2**26) * Wk.prefix(16)
    x, x2 = _neighbours(16, 67_108_864)
    out = []
    for data in (x, x2):
        bound = {} if max_records is None else dict(max_records=max_records)
        rel = mm.release(
            data,
            W,
            1.0,
            strategy="auto",
            rng=np.random.default_rng(7),
            select=dict(method="em", c=1, eps=0.25),
            **bound,
        )
        out.append(_public(rel))
        assert "67,108,86" not in json.dumps(rel.to_dict()) and "6710886" not in rel.strategy_note
    assert out[0] == out[1]
    assert ("failed" in out[0][2]) == (max_records is None)


@pytest.mark.parametrize("max_records", [MAX_RECORDS, 1000])
@pytest.mark.parametrize("strategy", ["identity", "hierarchical", "optimize"])
def test_release_at_the_declared_bound_reveals_nothing_but_noise(strategy, max_records):
    W = Wk.all_range(32)
    x, x2 = _neighbours(32, max_records, cell=5)
    out = [
        _public(
            mm.release(
                d, W, 1.0, strategy=strategy, rng=np.random.default_rng(3), max_records=max_records
            )
        )
        for d in (x, x2)
    ]
    assert out[0] == out[1]


@pytest.mark.parametrize("method, extra", [("svt", dict(threshold=10.0)), ("em", {})])
def test_selected_release_at_the_declared_bound_reveals_nothing_but_noise(method, extra):
    W = Wk.prefix(16)
    x, x2 = _neighbours(16, 5000, cell=0)
    out = [
        _public(
            mm.release(
                d,
                W,
                2.0,
                strategy="auto",
                rng=np.random.default_rng(4),
                max_records=5000,
                select=dict(method=method, c=2, eps=0.5, **extra),
            )
        )
        for d in (x, x2)
    ]
    assert out[0] == out[1]


def test_selection_values_are_cast_by_the_declared_bound_not_by_the_data():
    """select_rows used to keep integer answers as int64 only when max|Wx| < 2**53 (a
    data-dependent change of calibration); now the declared bound decides."""
    W = (2.0**30) * Wk.identity(4)
    x, x2 = _neighbours(4, 2**23, cell=1)  # 2**30·2**23 = 2**53: the old branch point
    sels = [
        select_rows(
            W, d, c=1, eps=1.0, method="em", rng=np.random.default_rng(5), max_records=2**23
        )
        for d in (x, x2)
    ]
    assert sels[0] == sels[1]


def test_measure_at_the_declared_bound():
    A = S.hierarchical(64, 4)
    x, x2 = _neighbours(64, 2**20, cell=3)
    ms = [mm.measure(d, A, 0.5, rng=np.random.default_rng(1), max_records=2**20) for d in (x, x2)]
    keys = ("eps", "delta", "noise", "scale", "std", "grid", "sensitivity", "rounded", "note")
    assert [getattr(ms[0], k) for k in keys] == [getattr(ms[1], k) for k in keys]


# -- finding 2: exceptions carry no private value -----------------------------------------------


def test_over_the_bound_is_refused_before_any_spend_with_the_same_message():
    W = Wk.prefix(8)
    errors = []
    for total in (1001, 1002, 10**9):
        budget = PrivacyBudget(1.0)
        x = np.zeros(8, dtype=np.int64)
        x[2] = total
        errors.append(_error(lambda: mm.release(x, W, 0.5, budget=budget, max_records=1000)))
        assert budget.spent == (0.0, 0.0)
        assert str(total) not in errors[-1][1] and f"{total:,}" not in errors[-1][1]
    assert errors[0] == errors[1] == errors[2] and errors[0][0] is ValueError
    assert "max_records=1,000" in errors[0][1]


@pytest.mark.parametrize("select", [None, dict(method="svt", threshold=5.0, c=1, eps=0.2)])
def test_exhausted_budget_gives_the_same_error_whatever_x_is(select):
    """Issue 10 finding 2: after a spend, the next call raised a message with the count."""
    W = Wk.prefix(8)
    budget = PrivacyBudget(1.0)
    mm.release(
        np.ones(8, dtype=np.int64),
        W,
        1.0,
        strategy="identity",
        budget=budget,
        rng=np.random.default_rng(0),
    )
    xs = [np.ones(8, dtype=np.int64), np.full(8, 10**12, dtype=np.int64), np.r_[np.ones(7), -1]]
    errs = [
        _error(lambda x=x: mm.release(x, W, 0.5, strategy="identity", budget=budget, select=select))
        for x in xs
    ]
    assert all(e == errs[0] for e in errs) and errs[0][0] is BudgetExceededError


def test_bad_counts_name_the_defect_never_the_position_or_value():
    """The message of a malformed histogram names the defect and the expected form, and is
    the same wherever the bad cell sits (a position would tell which cell is malformed)."""
    for bad, defect in ((-7, "negative"), (0.5, "not an integer"), (np.nan, "not finite")):
        msgs = set()
        for pos in range(4):
            x = np.array([1.0, 2.0, 5.0, 3.0])
            x[pos] = bad
            typ, msg = _error(lambda: mm.measure(x, S.identity(4), 1.0))
            assert typ is ValueError and defect in msg and str(bad) not in msg
            assert "[" not in msg and "non-negative" in msg
            msgs.add(msg)
        assert len(msgs) == 1


# -- finding 3: the CLI prints no count ---------------------------------------------------------


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "matmech.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_cli_output_is_identical_on_neighbouring_files(tmp_path):
    spec = tmp_path / "bands.toml"
    spec.write_text(
        'name = "bands"\ndomain = [16]\nattributes = ["age"]\n[[queries]]\nkind = "ranges"\n'
        "intervals = [[0, 3], [4, 7], [8, 15]]\n",
        encoding="utf-8",
    )
    rows = "\n".join(str(i % 16) for i in range(300))
    texts, docs = [], []
    for k, extra in enumerate(("", "\n5")):
        data = tmp_path / f"d{k}.csv"
        data.write_text("age\n" + rows + extra + "\n", encoding="utf-8")
        out = tmp_path / f"out{k}.csv"
        res = _cli(
            "release",
            spec,
            "--data",
            data,
            "--column",
            "age",
            "--eps",
            "1",
            "--strategy",
            "identity",
            "--out",
            out,
        )
        assert res.returncode == 0, res.stderr
        texts.append(res.stdout.replace(str(data), "DATA").replace(str(out), "OUT"))
        res = _cli(
            "release",
            spec,
            "--data",
            data,
            "--column",
            "age",
            "--eps",
            "1",
            "--strategy",
            "identity",
            "--json",
        )
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        doc["data"] = "DATA"
        for q in doc["queries"]:
            q.pop("answer"), q.pop("lower"), q.pop("upper")
        docs.append(doc)
    assert texts[0] == texts[1]
    assert docs[0] == docs[1] and "records" not in docs[0]
    assert not re.search(r"\b30[01]\b", texts[0])


# -- finding 6: inputs that weakened the guarantee or spent for nothing -------------------------


def test_flags_must_be_real_booleans():
    with pytest.raises(TypeError, match="monotonic must be True or False"):
        sparse_vector([1, 2, 3], 1.0, c=1, eps=1.0, monotonic="False", rng=np.random.default_rng(0))
    with pytest.raises(TypeError, match="monotonic must be True or False"):
        exponential_top_c([1, 2, 3], 1, 1.0, monotonic="no", rng=np.random.default_rng(0))
    with pytest.raises(TypeError, match="monotonic must be"):
        select_rows(Wk.identity(3), [1, 2, 3], c=1, eps=1.0, threshold=1, monotonic="False")


def test_counts_whose_sum_overflows_are_refused_before_any_spend():
    x = np.full(2, 2**63 - 1, dtype=np.int64)
    for call in (
        lambda b: mm.release(x, Wk.identity(2), 1.0, budget=b, rng=np.random.default_rng(0)),
        lambda b: mm.measure(x, S.identity(2), 1.0, budget=b),
        lambda b: select_rows(Wk.identity(2), x, c=1, eps=1.0, method="em", budget=b),
    ):
        budget = PrivacyBudget(2.0)
        with pytest.raises(ValueError):
            call(budget)
        assert budget.spent == (0.0, 0.0)
    big = np.full(3, 2**40, dtype=np.uint64)
    budget = PrivacyBudget(2.0)
    with pytest.raises(ValueError, match="max_records"):
        mm.release(big, Wk.identity(3), 1.0, budget=budget)
    assert budget.spent == (0.0, 0.0)


def test_bad_selection_options_spend_nothing():
    budget = PrivacyBudget(1.0)
    x = np.arange(3, dtype=np.int64)
    with pytest.raises(ValueError, match="threshold must be finite"):
        mm.release(
            x, Wk.identity(3), 1.0, budget=budget, select=dict(threshold=float("nan"), c=1, eps=0.1)
        )
    with pytest.raises(ValueError, match="all zero"):
        select_rows(Dense(np.zeros((1, 3))), x, c=1, eps=0.5, method="em", budget=budget)
    assert budget.spent == (0.0, 0.0) and not budget.ledger


def test_concurrent_releases_never_leave_a_selection_paid_for_and_unmeasured():
    """Issue 10 finding 6: 8 threads, eps 0.3 each, one budget of 1.0."""
    budget = PrivacyBudget(1.0)
    W, x = Wk.prefix(32), np.arange(32, dtype=np.int64)
    results, errors = [], []
    barrier = threading.Barrier(8)

    def work(seed):
        barrier.wait()
        try:
            results.append(
                mm.release(
                    x,
                    W,
                    0.3,
                    strategy="identity",
                    budget=budget,
                    rng=np.random.default_rng(seed),
                    select=dict(method="em", c=2, eps=0.1),
                )
            )
        except BudgetExceededError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3 and len(errors) == 5
    assert len(budget.ledger) == 3 and all(e.eps == 0.3 for e in budget.ledger)
    assert all(r.measurement is not None for r in results)
