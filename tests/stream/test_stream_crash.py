"""Kill `matmech stream` processes mid-step and mid-init, resume, and show nothing redrawn or recharged."""

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np

from matmech.cli import main
from matmech.privacy.ledger import Ledger
from matmech.stream.release import StreamRelease

ROOT = Path(__file__).resolve().parents[2]

# Runs the real CLI in a child process that SIGKILLs itself at a chosen call: a StreamStore
# method (before it commits) or "advance@N", the N-th update of a key file (after the
# stream file's commit, before the key file is written).
_KILLER = """
import os, signal, sys
from matmech.privacy import integrity
from matmech.stream import state
from matmech.cli import main
target, _, nth = sys.argv[1].partition("@")
owner = integrity.HeadRecord if target == "advance" else state.StreamStore
real, calls = getattr(owner, target), []
def killer(self, *a, **kw):
    calls.append(1)
    if len(calls) == int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, *a, **kw)
setattr(owner, target, killer)
sys.exit(main(sys.argv[2:]))
"""


def _cli(*args, kill_at=None):
    cmd = (
        [sys.executable, "-c", _KILLER, kill_at]
        if kill_at
        else [sys.executable, "-m", "matmech.cli"]
    )
    return subprocess.run(
        cmd + [str(a) for a in args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _rows(path):
    with sqlite3.connect(path) as con:
        return con.execute("SELECT t, z, y IS NOT NULL FROM steps ORDER BY t").fetchall()


def _setup(tmp_path, horizon=10):
    spec = tmp_path / "s.toml"
    spec.write_text(f'horizon = {horizon}\ncategories = ["a", "b"]\neps = 1.0\ndelta = 1e-6\n')
    ledger = tmp_path / "l.db"
    assert main(["budget", "init", str(ledger), "--eps", "3", "--delta", "1e-5"]) == 0
    return spec, ledger, tmp_path / "stream.db"


def test_kill_mid_step_resume_reuses_noise_and_never_recharges(tmp_path):
    spec, ledger, db = _setup(tmp_path)
    assert _cli("stream", "init", spec, db, "--ledger", ledger).returncode == 0
    for c in ["3,4", "0,7"]:
        r = _cli("stream", "step", db, "--counts", c, "--json")
        assert r.returncode == 0, r.stderr
    # killed after step 2's noise is committed, before its release is: nothing printed
    r = _cli("stream", "step", db, "--counts", "5,1", kill_at="put_step")
    assert r.returncode == -signal.SIGKILL and r.stdout == ""
    rows = _rows(db)
    assert [(t, done) for t, _, done in rows] == [(0, 1), (1, 1), (2, 0)]
    z2 = rows[2][1]
    # killed between steps too: a finished step, then a kill before step 3 draws anything
    r = _cli("stream", "step", db, "--counts", "5,1", "--json")
    assert r.returncode == 0, r.stderr
    r = _cli("stream", "step", db, "--counts", "2,2", kill_at="put_noise")
    assert r.returncode == -signal.SIGKILL
    rows = _rows(db)
    assert rows[2][1] == z2 and rows[2][2] == 1, "step 2 used the noise stored before the kill"
    assert len(rows) == 3, "no noise for step 3 was stored"
    r = _cli("stream", "step", db, "--counts", "2,2", "--json")
    assert r.returncode == 0, r.stderr
    assert Ledger.open(ledger).status()["spends"] == 1
    # the releases are B·(C·x + z) with the stored z: the dense oracle
    s = StreamRelease.open(db)
    f, n = s.plan.factorization, s.horizon
    X = np.array([[3, 4], [0, 7], [5, 1], [2, 2]], dtype=float)
    Z = np.array([np.frombuffer(z, dtype=np.float64) for _, z, _ in _rows(db)])
    C = f.dense()[:4, :4]
    B = (np.tril(np.ones((n, n))) @ np.linalg.inv(f.dense()))[:4, :4]
    got = np.array([r.values for r in s.released()])
    np.testing.assert_allclose(got, B @ (C @ X + Z), rtol=1e-10, atol=1e-8)
    # a replay of step 2 prints the stored release and draws nothing
    rows_before = _rows(db)
    r = _cli("stream", "step", db, "--counts", "9,9", "--t", "2", "--json")
    assert r.returncode == 0 and '"replayed": true' in r.stdout
    assert _rows(db) == rows_before


def test_kill_between_charge_and_mark_is_not_charged_twice(tmp_path):
    spec, ledger, db = _setup(tmp_path)
    r = _cli("stream", "init", spec, db, "--ledger", ledger, kill_at="mark_charged")
    assert r.returncode == -signal.SIGKILL
    assert Ledger.open(ledger).status()["spends"] == 1  # the charge was committed
    r = _cli("stream", "step", db, "--counts", "1,1", "--ledger", ledger)
    assert r.returncode == 0, r.stderr
    assert Ledger.open(ledger).status()["spends"] == 1, "the ledger entry was found, not repeated"
    r = _cli("stream", "status", db, "--json")
    assert r.returncode == 0 and '"steps_done": 1' in r.stdout


def test_cli_errors_are_one_line(tmp_path):
    spec, ledger, db = _setup(tmp_path)
    spec.write_text("horizon = 10\neps = 1.0\nwindow = 3\n")
    assert main(["stream", "init", str(spec), str(db)]) == 2
    assert not db.exists()
    assert main(["stream", "status", str(tmp_path / "missing.db")]) == 2
    spec.write_text("horizon = 4\neps = 1.0\n")
    assert main(["stream", "init", str(spec), str(db)]) == 0
    assert main(["stream", "step", str(db), "--counts", "x"]) == 2
    assert oct(os.stat(db).st_mode & 0o777) == "0o600"


def test_interrupted_charge_needs_the_budget_to_resume(tmp_path):
    spec, ledger, db = _setup(tmp_path)
    r = _cli("stream", "init", spec, db, "--ledger", ledger, kill_at="mark_charged")
    assert r.returncode == -signal.SIGKILL
    assert (
        main(["stream", "step", str(db), "--counts", "1,1"]) == 2
    )  # no ledger: refused, nothing drawn
    assert _rows(db) == []


def _links(db):
    """(links in the stream file, links its key file records)."""
    from matmech.privacy.integrity import HeadRecord
    from stream_files import key_file, stream_id

    rec = HeadRecord.load(key_file(db), "stream", stream_id(db))
    with sqlite3.connect(db) as con:
        n = 1 + con.execute("SELECT COUNT(*) FROM meta WHERE key = 'charged'").fetchone()[0]
        n += con.execute("SELECT COUNT(z) + COUNT(y) FROM steps").fetchone()[0]
    return n, rec.count


def test_kill_between_a_commit_and_its_key_file_resumes_and_releases_nothing_twice(tmp_path):
    """The key file is written after the stream file's commit and may lag it by one: a kill
    there leaves the file one commit ahead, which is accepted and caught up; nothing was
    printed, and an older copy of the file is refused once the key file covers a release."""
    spec, ledger, db = _setup(tmp_path)
    assert _cli("stream", "init", spec, db, "--ledger", ledger).returncode == 0
    assert _cli("stream", "step", db, "--counts", "3,4").returncode == 0
    # killed after step 1's release is committed, before its key file update: not printed
    r = _cli("stream", "step", db, "--counts", "5,1", kill_at="advance@2")
    assert r.returncode == -signal.SIGKILL and r.stdout == ""
    assert _links(db) == (6, 5)
    r = _cli("stream", "step", db, "--counts", "9,9", "--t", "1", "--json")
    assert r.returncode == 0 and '"replayed": true' in r.stdout, r.stderr
    assert _links(db) == (6, 6), "the key file caught up"
    # killed after step 2's noise is committed, before its key file update
    before = tmp_path / "before.db"
    shutil.copy(db, before)
    r = _cli("stream", "step", db, "--counts", "2,2", kill_at="advance@1")
    assert r.returncode == -signal.SIGKILL and r.stdout == ""
    assert _links(db) == (7, 6)
    z2 = _rows(db)[2][1]
    r = _cli("stream", "step", db, "--counts", "2,2", "--json")
    assert r.returncode == 0, r.stderr
    assert _rows(db)[2][1] == z2, "the stored noise was reused"
    # the copy from before step 2 is now older than the key file: refused
    shutil.copy(before, db)
    r = _cli("stream", "step", db, "--counts", "2,2")
    assert r.returncode == 2 and "older than its key file" in r.stderr and r.stdout == ""
    assert Ledger.open(ledger).status()["spends"] == 1
