"""The ledger's integrity outside the file (issue 31, item 4): truncation, downgrade and
rollback are refused; the key record may lag a commit by one row, never two."""

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from matmech.privacy.budget import BudgetExceededError
from matmech.privacy.keystore import KEYS_ENV, KeyStore, default_key_dir
from matmech.privacy.ledger import LEDGER_FORMAT, Ledger, LedgerIntegrityError

DATA = Path(__file__).parent / "data"


def _sql(path, *stmts):
    con = sqlite3.connect(path)
    for s in stmts:
        con.execute(s)
    con.commit()
    con.close()


def _rows(path):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute("SELECT what, eps, delta FROM spends ORDER BY id").fetchall()
    finally:
        con.close()


def _meta(path):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return dict(con.execute("SELECT key, value FROM meta"))
    finally:
        con.close()


def _record_file(path):
    return KeyStore().dir / f"{_meta(path)['ledger_id']}.json"


def _ledger(tmp_path, n=3):
    path = tmp_path / "l.db"
    L = Ledger.create(path, 1.0)
    for i in range(n):
        L.spend(0.125, what=f"s{i}")
    return path


def _refused_everywhere(path, match):
    before = _rows(path)
    for call in (
        lambda: Ledger.open(path),
        lambda: Ledger.open(path).spend(0.01, what="after tampering"),
    ):
        with pytest.raises(LedgerIntegrityError, match=match):
            call()
    assert _rows(path) == before  # nothing was spent from it


def test_the_key_and_head_live_outside_the_file_with_private_modes(tmp_path):
    path = _ledger(tmp_path)
    meta = _meta(path)
    assert meta["format"] == LEDGER_FORMAT and "chain_head" not in meta
    rec = json.loads(_record_file(path).read_text())
    assert (
        rec["key"] not in path.read_bytes().hex() and rec["key"].encode() not in path.read_bytes()
    )
    assert rec["rows"] == 3 and rec["path"] == str(path.resolve())
    assert stat.S_IMODE(_record_file(path).stat().st_mode) == 0o600
    assert stat.S_IMODE(KeyStore().dir.stat().st_mode) == 0o700


def test_the_key_directory_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv(KEYS_ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert default_key_dir() == tmp_path / "cfg" / "matmech" / "ledgers"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_key_dir() == tmp_path / "home" / ".config" / "matmech" / "ledgers"
    monkeypatch.setenv(KEYS_ENV, str(tmp_path / "k"))
    assert default_key_dir() == tmp_path / "k"


def test_a_declared_key_directory_and_a_missing_record(tmp_path):
    keys = tmp_path / "my-keys"
    path = tmp_path / "l.db"
    Ledger.create(path, 1.0, keys=keys).spend(0.5)
    assert Ledger.open(path, keys=keys).spent == (0.5, 0.0)
    with pytest.raises(LedgerIntegrityError, match="no key record .* MATMECH_LEDGER_KEYS"):
        Ledger.open(path)  # the default directory has no record of it


def test_truncating_the_tail_is_refused(tmp_path):
    # the attack on format 2: delete the last rows and point the head at the last MAC
    path = _ledger(tmp_path)
    _sql(path, "DELETE FROM spends WHERE what IN ('s1', 's2')")
    _refused_everywhere(path, "truncated or an older copy restored")


def test_restoring_an_older_copy_is_refused(tmp_path):
    path = _ledger(tmp_path, n=1)
    shutil.copy(path, tmp_path / "backup.db")
    L = Ledger.open(path)
    L.spend(0.25, what="later")
    L.spend(0.25, what="later still")
    shutil.copy(tmp_path / "backup.db", path)  # refunds 0.5 if accepted
    _refused_everywhere(path, "rollback")


def test_turning_the_format_back_is_refused(tmp_path):
    # the attack: drop the mac column, set the old format, let matmech re-chain
    path = _ledger(tmp_path)
    _sql(
        path,
        "UPDATE spends SET eps = '0/1' WHERE what = 's0'",
        "ALTER TABLE spends DROP COLUMN mac",
        "ALTER TABLE spends DROP COLUMN events",
        "UPDATE meta SET value = 'matmech-privacy-ledger-1' WHERE key = 'format'",
    )
    _refused_everywhere(path, "downgrade")


def test_a_format_turned_back_without_any_change_is_harmless_and_reopens(tmp_path):
    # the same rows as recorded (an upgrade interrupted before its commit looks like this)
    path = tmp_path / "old.db"
    _format_1(path)
    assert Ledger.open(path).spent == (0.25, 0.0)
    _sql(
        path,
        "ALTER TABLE spends DROP COLUMN mac",
        "ALTER TABLE spends DROP COLUMN events",
        "UPDATE meta SET value = 'matmech-privacy-ledger-1' WHERE key = 'format'",
    )
    assert Ledger.open(path).spent == (0.25, 0.0)


def test_replacing_the_file_with_another_ledger_is_refused(tmp_path):
    path = _ledger(tmp_path)
    other = tmp_path / "other.db"
    Ledger.create(other, 1.0)
    shutil.copy(other, path)
    with pytest.raises(LedgerIntegrityError, match="the file was replaced"):
        Ledger.open(path)


def test_a_moved_ledger_opens_and_its_record_follows(tmp_path):
    path = _ledger(tmp_path)
    moved = tmp_path / "sub"
    moved.mkdir()
    shutil.move(path, moved / "l.db")
    assert Ledger.open(moved / "l.db").spent == (0.375, 0.0)
    assert json.loads(_record_file(moved / "l.db").read_text())["path"] == str(
        (moved / "l.db").resolve()
    )


def test_the_record_may_lag_one_commit_and_is_caught_up(tmp_path, monkeypatch):
    """A writer killed between its commit and its record write: accepted, then repaired."""
    path = _ledger(tmp_path, n=1)
    real = KeyStore.advance
    monkeypatch.setattr(KeyStore, "advance", lambda *a, **k: None)  # the write never happens
    Ledger.open(path).spend(0.25, what="committed, unrecorded")
    monkeypatch.setattr(KeyStore, "advance", real)
    rec = json.loads(_record_file(path).read_text())
    assert rec["rows"] == 1 and len(_rows(path)) == 2  # a lag of one row
    L = Ledger.open(path)
    assert L.spent == (0.375, 0.0) and [e.what for e in L.ledger][-1] == "committed, unrecorded"
    L.spend(0.125, what="next")  # catches the record up before its own row
    assert json.loads(_record_file(path).read_text())["rows"] == 3


def test_a_record_two_rows_behind_is_refused(tmp_path):
    path = _ledger(tmp_path, n=1)
    saved = _record_file(path).read_text()
    Ledger.open(path).spend(0.25)
    Ledger.open(path).spend(0.25)
    _record_file(path).write_text(saved)  # rows 2 and 3 unrecorded: not a crash
    _refused_everywhere(path, "more than the one spend a crash can leave")


def test_a_record_one_row_behind_with_another_head_is_refused(tmp_path):
    # the lag is allowed only for the row right after the recorded head
    path = _ledger(tmp_path, n=2)
    rec = json.loads(_record_file(path).read_text())
    rec["rows"], rec["head"] = 2, "0" * 64
    _record_file(path).write_text(json.dumps({**rec}))
    _refused_everywhere(path, "rollback|key record says")


# -- older formats open unchanged -----------------------------------------------------------------


def _format_1(path):
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


def test_a_format_2_ledger_written_by_the_previous_release_opens_unchanged(tmp_path):
    """tests/privacy/data/ledger-format-2.db was written by matmech before this change
    (format 2: the key in the file): total (2, 1e-6), spends 0.1, (0.25, 1e-7) and a
    release at (0.5, 1e-7)."""
    path = tmp_path / "old.db"
    shutil.copy(DATA / "ledger-format-2.db", path)
    before = _rows(path)
    L = Ledger.open(path)
    assert L.accountant == "basic"  # kept: migrated only when asked
    assert L.total == (2.0, 1e-6) and L.spent == (0.85, 2e-7) and L.remaining == (1.15, 8e-7)
    assert _rows(path) == before  # the same rows and exact amounts
    hist = L.history()
    assert [h["eps_exact"] for h in hist] == ["1/10", "1/4", "1/2"]
    assert [h["delta_exact"] for h in hist] == ["0/1", "1/10000000", "1/10000000"]
    assert hist[0]["spec"] == "hmac-sha256:aa" and hist[2]["spec"] is None
    assert _meta(path)["format"] == LEDGER_FORMAT  # re-keyed outside the file
    old_key = _meta(path)["fingerprint_key"]
    assert json.loads(_record_file(path).read_text())["key"] != old_key
    # the in-file key of format 2 no longer forges anything: an edited amount is refused
    _sql(path, "UPDATE spends SET eps = '1/100' WHERE what = 'one'")
    with pytest.raises(LedgerIntegrityError, match="spend 1"):
        Ledger.open(path)


def test_a_tampered_format_2_ledger_is_refused_before_it_is_rekeyed(tmp_path):
    path = tmp_path / "old.db"
    shutil.copy(DATA / "ledger-format-2.db", path)
    _sql(path, "UPDATE spends SET eps = '1/100' WHERE what = 'one'")
    with pytest.raises(LedgerIntegrityError, match="spend 1"):
        Ledger.open(path)
    assert _meta(path)["format"] == "matmech-privacy-ledger-2"  # left as it was


def test_a_format_1_ledger_opens_unchanged_and_is_chained(tmp_path):
    path = tmp_path / "old.db"
    _format_1(path)
    L = Ledger.open(path)
    assert (L.spent, L.accountant) == ((0.25, 0.0), "basic")
    L.spend(0.5, what="b")
    assert Ledger.open(path).spent == (0.75, 0.0)


# -- the accountant: kept, migrated when asked -----------------------------------------------------


def test_migration_is_a_row_of_the_chain_and_refused_when_the_history_does_not_fit(tmp_path):
    from matmech.privacy.calibration import gaussian_sigma
    from matmech.privacy.events import DiscreteGaussian

    path = tmp_path / "l.db"
    L = Ledger.create(path, 4.0, 1e-5)
    assert L.accountant == "zcdp"
    s = gaussian_sigma(1.0, 1e-6, 1.0)
    for _ in range(5):
        L.spend_events(DiscreteGaussian(s, 1.0, eps=1.0, delta=1e-6), what="release")
    with pytest.raises(BudgetExceededError, match="cannot migrate to the 'basic'"):
        L.migrate("basic")  # five (1, 1e-6) releases sum to eps 5 > 4
    assert Ledger.open(path).accountant == "zcdp"
    old = tmp_path / "old.db"
    shutil.copy(DATA / "ledger-format-2.db", old)
    M = Ledger.open(old)
    assert M.accountant == "basic"
    M.migrate("zcdp")
    again = Ledger.open(old)
    assert again.accountant == "zcdp" and again.spent == (0.85, 2e-7)
    assert again.ledger[-1].what == "migrate to the 'zcdp' accountant"
    assert again.status()["spends"] == 3
    _sql(old, "DELETE FROM spends WHERE what LIKE 'migrate%'")  # dropping the migration row
    with pytest.raises(LedgerIntegrityError):
        Ledger.open(old)


# -- a full disk --------------------------------------------------------------------------------

_FULL = r"""
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
from matmech.cli import main
sys.exit(main(["budget", "init", sys.argv[2], "--eps", "1", "--delta", "1e-6"]))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE")
@pytest.mark.parametrize("limit", [0, 3000])
def test_budget_init_on_a_full_disk_says_so_and_leaves_nothing(tmp_path, limit):
    path = tmp_path / "l.db"
    keys = tmp_path / "keys"
    env = {**os.environ, KEYS_ENV: str(keys)}
    r = subprocess.run(
        [sys.executable, "-c", _FULL, str(limit), str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.startswith("matmech: error:")
    assert "is the disk full" in r.stderr or "key record" in r.stderr
    assert not path.exists() and not list(keys.glob("*.json"))


def test_exact_amounts_of_a_fraction_spend_are_kept(tmp_path):
    path = tmp_path / "l.db"
    L = Ledger.create(path, 1.0)
    L.spend(Fraction(1, 3), what="a third")
    assert _rows(path) == [("a third", "1/3", "0/1")]
    assert Ledger.open(path).history()[0]["eps_exact"] == "1/3"
