"""Tests for matmech.privacy.ledger: a persistent, crash-safe, process-safe privacy budget."""

import os
import signal
import sqlite3
import threading
import time
from fractions import Fraction

import numpy as np
import pytest

import matmech
from matmech.privacy.budget import BudgetExceededError, LedgerEntry, PrivacyBudget
from matmech.privacy.ledger import LEDGER_FORMAT, Ledger

fork_only = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def raw_rows(path):
    """(what, eps, delta) text of every row, read with plain sqlite3 (not the code under test)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute("SELECT what, eps, delta FROM spends ORDER BY id").fetchall()
    finally:
        con.close()


def raw_sum(path):
    rows = raw_rows(path)
    return (
        sum((Fraction(e) for _, e, _ in rows), Fraction(0)),
        sum((Fraction(d) for _, _, d in rows), Fraction(0)),
        len(rows),
    )


# -- accounting ----------------------------------------------------------------------------------


def test_decimal_spends_fit_exactly_and_are_stored_as_fractions(tmp_path):
    path = tmp_path / "l.db"
    L = Ledger.create(path, 0.3, 1e-6)
    assert isinstance(L, PrivacyBudget) and matmech.Ledger is Ledger
    L.spend(0.1, what="a")
    L.spend(0.2, 1e-6, what="b")
    assert L.remaining == (0.0, 0.0) and L.spent == (0.3, 1e-6) and L.total == (0.3, 1e-6)
    assert not L.can_spend(1e-12)
    with pytest.raises(BudgetExceededError, match="only"):
        L.spend(1e-12, what="c")
    assert raw_rows(path) == [("a", "1/10", "0/1"), ("b", "1/5", "1/1000000")]
    con = sqlite3.connect(path)
    assert dict(con.execute("SELECT key, value FROM meta"))["format"] == LEDGER_FORMAT
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # one file: no WAL to lose
    con.close()


def test_refusal_leaves_the_file_unchanged(tmp_path):
    path = tmp_path / "l.db"
    L = Ledger.create(path, 1.0, 1e-5)
    L.spend(0.75, 1e-6, what="first")
    before = path.read_bytes(), L.ledger, L.spent
    for eps, delta in [(0.5, 0.0), (0.1, 1e-4), (0.25, 9.000001e-6)]:
        with pytest.raises(BudgetExceededError):
            L.spend(eps, delta, what="too much")
    with pytest.raises(ValueError):
        L.spend(-1.0)
    with pytest.raises(TypeError):
        L.spend(0.1, what=3)
    assert (path.read_bytes(), L.ledger, L.spent) == before
    assert not (tmp_path / "l.db-journal").exists() and not (tmp_path / "l.db-wal").exists()
    L.spend(0.25, 9e-6)  # exactly what is left
    assert L.remaining == (0.0, 0.0)


def test_reopening_shows_the_same_history(tmp_path):
    path = tmp_path / "l.db"
    L = Ledger.create(path, 2.0, 1e-6)
    L.tag(spec="sha256:aa", data="sha256:bb")
    L.spend(0.5, 1e-7, what="one")
    L.tag()
    L.spend(0.25, what="two")
    again = Ledger.open(str(path))
    assert again.ledger == L.ledger and again.total == (2.0, 1e-6) and again.spent == (0.75, 1e-7)
    first, second = again.ledger
    assert (first.what, first.eps, first.delta, first.spec, first.data) == (
        "one",
        0.5,
        1e-7,
        "sha256:aa",
        "sha256:bb",
    )
    assert second.spec is None and second.time.endswith("+00:00") and first.time <= second.time
    assert isinstance(first, LedgerEntry)
    hist = again.history()
    assert [h["eps_exact"] for h in hist] == ["1/2", "1/4"] and hist[0][
        "delta_exact"
    ] == "1/10000000"
    st = again.status()
    assert (
        st["spends"] == 2 and st["remaining"]["eps_exact"] == "5/4" and st["total"]["delta"] == 1e-6
    )
    assert "Ledger(" in repr(again) and "2 spends" in repr(again)


def test_create_and_open_errors(tmp_path):
    path = tmp_path / "l.db"
    with pytest.raises(ValueError):
        Ledger.create(path, 0.0)
    with pytest.raises(TypeError):
        Ledger.create(path, "1")
    with pytest.raises(ValueError):
        Ledger.create(path, 1.0, 1.0)
    assert not path.exists()
    Ledger.create(path, 1.0).spend(0.5)
    with pytest.raises(FileExistsError):
        Ledger.create(path, 5.0)  # never replaced
    assert Ledger.open(path).spent == (0.5, 0.0)
    with pytest.raises(FileNotFoundError):
        Ledger.open(tmp_path / "missing.db")
    assert not (tmp_path / "missing.db").exists()
    junk = tmp_path / "junk.db"
    junk.write_text("not a database")
    with pytest.raises(ValueError, match="ledger"):
        Ledger.open(junk)
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(ValueError, match="not a matmech privacy ledger"):
        Ledger.open(other)


def test_threads_share_one_ledger_exactly(tmp_path):
    L = Ledger.create(tmp_path / "l.db", 1.0)
    ok = []

    def worker():
        for _ in range(5):
            try:
                L.spend(0.05, what="t")
                ok.append(1)
            except BudgetExceededError:
                pass

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (
        len(ok) == 20
        and L.spent == (1.0, 0.0)
        and raw_sum(L.path)[:2] == (Fraction(1), Fraction(0))
    )


def test_release_and_measure_charge_a_ledger(tmp_path):
    L = Ledger.create(tmp_path / "l.db", 1.0, 1e-6)
    x = np.array([5.0, 3.0, 0.0, 9.0])
    rel = matmech.release(x, matmech.workloads.prefix(4), 0.5, budget=L)
    assert rel.budget_remaining == (0.5, 1e-6) and len(Ledger.open(L.path).ledger) == 1
    matmech.measure(x, matmech.strategies.identity(4), 0.25, 1e-6, budget=L)
    assert L.remaining == (0.25, 0.0)
    with pytest.raises(BudgetExceededError):
        matmech.release(x, matmech.workloads.prefix(4), 0.5, budget=L)
    assert len(L.ledger) == 2


# -- a process killed at any point ------------------------------------------------------------------


def _spend_until_killed(path, wfd, amount):
    """In a forked child: open the ledger and spend ``amount`` again and again, writing b"C"
    to the pipe after each commit (os.write: unbuffered) and b"X" once refused."""
    try:
        os.write(wfd, b"R")
        L = Ledger.open(path)
        while True:
            try:
                L.spend(amount, what="crash test")
            except BudgetExceededError:
                os.write(wfd, b"X")
                while True:
                    time.sleep(1)
            os.write(wfd, b"C")
    finally:
        os._exit(1)  # never return into pytest


@fork_only
def test_sigkill_at_random_points_never_loses_or_double_counts_a_spend(tmp_path):
    path = tmp_path / "crash.db"
    amount, runs = Fraction(1, 250), 100
    Ledger.create(path, 1.0)
    rng = np.random.default_rng(13)
    rows = 0
    exhausted = 0
    for run in range(runs):
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os.close(rfd)
            _spend_until_killed(path, wfd, amount)
        os.close(wfd)
        assert os.read(rfd, 1) == b"R"
        time.sleep(rng.uniform(0.0, 0.15))  # a spend is two fsynced writes: ledger, key record
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
            f"run {run}: the child failed"
        )
        reported = b""
        while chunk := os.read(rfd, 4096):
            reported += chunk
        os.close(rfd)
        committed = reported.count(b"C")
        exhausted += b"X" in reported
        # the next opener rolls back a hot journal; the file must then be consistent
        L = Ledger.open(path)
        hist = L.history()
        spent = (
            sum((Fraction(h["eps_exact"]) for h in hist), Fraction(0)),
            sum((Fraction(h["delta_exact"]) for h in hist), Fraction(0)),
        )
        e, d, n = raw_sum(path)
        assert (e, d) == spent and spent[0] == n * amount, (
            f"run {run}: total is not the sum of the rows"
        )
        assert rows + committed <= n <= rows + committed + 1, (
            f"run {run}: {committed} reported, {n - rows} rows"
        )
        assert spent[0] <= 1 and d == 0, f"run {run}: overspent"
        rows = n
    assert rows > 0
    if exhausted:
        assert rows == 250  # filled exactly, never past


# -- processes racing for one budget ----------------------------------------------------------------


@fork_only
def test_eight_processes_cannot_overspend(tmp_path):
    path = tmp_path / "race.db"
    Ledger.create(path, 1.0)
    go_r, go_w = os.pipe()
    pids = []
    for _ in range(8):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                os.close(go_w)
                L = Ledger.open(path)
                os.read(go_r, 1)  # all start together: EOF when the parent closes its end
                try:
                    L.spend(0.3, what="race")
                    code = 0
                except BudgetExceededError:
                    code = 3
            finally:
                os._exit(code)
        pids.append(pid)
    os.close(go_r)
    os.close(go_w)  # go
    codes = []
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        codes.append(os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1)
    assert sorted(codes) == [0, 0, 0, 3, 3, 3, 3, 3]
    e, d, n = raw_sum(path)
    assert n == 3 and e == Fraction(9, 10) <= 1 and Ledger.open(path).spent == (0.9, 0.0)


def test_fingerprints_are_keyed_per_ledger(tmp_path):
    import hashlib

    data = tmp_path / "people.csv"
    data.write_bytes(b"age\n31\n47\n")
    a = Ledger.create(tmp_path / "a.db", 1.0)
    b = Ledger.create(tmp_path / "b.db", 1.0)
    fa = a.fingerprint(data)
    assert fa.startswith("hmac-sha256:") and fa == Ledger.open(tmp_path / "a.db").fingerprint(data)
    assert fa != b.fingerprint(data)  # another ledger's key: not linkable across ledgers
    assert (
        hashlib.sha256(data.read_bytes()).hexdigest() not in fa
    )  # not the plain digest anyone can recompute
    data.write_bytes(b"age\n31\n48\n")
    assert a.fingerprint(data) != fa


# -- the authenticated row chain (issue 23) --------------------------------------------------------

from matmech.privacy.ledger import LedgerIntegrityError  # noqa: E402


def _edit(path, sql, *args):
    con = sqlite3.connect(path)
    con.execute(sql, args)
    con.commit()
    con.close()


def _three_spends(tmp_path):
    path = tmp_path / "l.db"
    L = Ledger.create(path, 1.0, 1e-6)
    for i, eps in enumerate((0.25, 0.125, 0.0625)):
        L.spend(eps, what=f"s{i}")
    return path


@pytest.mark.parametrize(
    "tamper, where",
    [
        (
            "UPDATE spends SET eps = '1/40' WHERE what = 's1'",
            "spend 2",
        ),  # a refund by editing an amount
        ("UPDATE spends SET what = 'other' WHERE what = 's0'", "spend 1"),
        ("DELETE FROM spends WHERE what = 's1'", "spend 2"),  # a row removed in the middle
        ("DELETE FROM spends WHERE what = 's2'", "truncated"),  # the tail truncated
        ("UPDATE meta SET value = '2/1' WHERE key = 'total_eps'", "spend 1"),  # a larger total
        ("UPDATE spends SET id = id + 10 WHERE what = 's0'", "spend"),  # reordered
    ],
)
def test_a_tampered_row_is_detected_and_nothing_is_spent_from_it(tmp_path, tamper, where):
    path = _three_spends(tmp_path)
    L = Ledger.open(path)
    _edit(path, tamper)
    before = raw_rows(path)
    for call in (
        lambda: L.spent,
        lambda: L.history(),
        lambda: L.status(),
        lambda: L.spend(0.01, what="x"),
        lambda: Ledger.open(path),
    ):
        with pytest.raises(LedgerIntegrityError, match=where):
            call()
    assert raw_rows(path) == before  # no spend was added to a broken chain


def test_every_flipped_byte_of_an_amount_is_detected_or_refused(tmp_path):
    """A flipped bit in any character of a stored amount never silently changes the sum."""
    path = _three_spends(tmp_path)
    text = raw_rows(path)[1][1]  # '1/8'
    for k in range(len(text)):
        for bit in range(7):
            flipped = text[:k] + chr(ord(text[k]) ^ (1 << bit)) + text[k + 1 :]
            _edit(path, "UPDATE spends SET eps = ? WHERE what = 's1'", flipped)
            with pytest.raises(ValueError):  # LedgerIntegrityError (or an unparseable amount)
                _ = Ledger.open(path).spent
    _edit(path, "UPDATE spends SET eps = ? WHERE what = 's1'", text)
    assert Ledger.open(path).spent == (0.4375, 0.0)  # restored: the chain verifies again


def test_a_first_format_ledger_is_chained_on_open(tmp_path):
    path = tmp_path / "old.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    con.execute(
        "CREATE TABLE spends (id INTEGER PRIMARY KEY AUTOINCREMENT, what TEXT NOT NULL, eps TEXT NOT NULL, "
        "delta TEXT NOT NULL, time TEXT NOT NULL, spec TEXT, data TEXT)"
    )
    con.executemany(
        "INSERT INTO meta VALUES (?, ?)",
        [
            ("format", "matmech-privacy-ledger-1"),
            ("total_eps", "1/1"),
            ("total_delta", "0/1"),
            ("created", "2026-01-01"),
        ],
    )
    con.execute("INSERT INTO spends (what, eps, delta, time) VALUES ('a', '1/4', '0/1', 't')")
    con.commit()
    con.close()
    L = Ledger.open(path)
    assert L.spent == (0.25, 0.0)
    L.spend(0.5, what="b")
    assert Ledger.open(path).spent == (0.75, 0.0)
    _edit(path, "UPDATE spends SET eps = '0/1' WHERE what = 'a'")
    with pytest.raises(LedgerIntegrityError, match="spend 1"):
        Ledger.open(path)


def _spend_many(path, n):
    ledger = Ledger.open(path)
    for _ in range(n):
        ledger.spend(0.001)


def _open_many(path, n, out):
    failures = 0
    for _ in range(n):
        try:
            _ = Ledger.open(path).spent
            _ = Ledger.open(path).history()
        except LedgerIntegrityError:
            failures += 1
    out.put(failures)


def test_reading_while_other_processes_spend_never_sees_a_broken_chain(tmp_path):
    # the head and the rows are read in one snapshot: a spend committed between two separate
    # reads used to look like a removed row (5-11 false LedgerIntegrityErrors in 10 runs)
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    failures = 0
    for trial in range(4):
        path = tmp_path / f"l{trial}.db"
        Ledger.create(path, 100.0)
        out = ctx.Queue()
        procs = [ctx.Process(target=_spend_many, args=(path, 30)) for _ in range(2)]
        procs.append(ctx.Process(target=_open_many, args=(path, 40, out)))
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        assert all(p.exitcode == 0 for p in procs)
        failures += out.get(timeout=10)
        assert Ledger.open(path).spent[0] == pytest.approx(0.06)
    assert failures == 0
