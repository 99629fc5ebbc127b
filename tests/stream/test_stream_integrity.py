"""Stream files that cannot be edited back (issue 31, item 4; docs/guide/threat-model.md).

Without the key: an edited release, noise, count, spec or charge mark, flipped bytes, a dropped
step, dropped columns, a downgrade to the unchecked format, an older copy of the file (which
would release a step again with fresh noise) and a copy stepped beside the original are all
refused on opening, with a message naming the file and no value of the data. A full disk
gives a one-line message, and never a charge without a stored stream or a release without a
stored step.
"""

import re
import shutil
import sqlite3
import subprocess
import types

import numpy as np
import pytest

from matmech.cli import main
from matmech.privacy.integrity import HeadRecord, IntegrityError
from matmech.privacy.ledger import Ledger
from matmech.stream import state
from matmech.stream.plan import StreamSpec
from matmech.stream.release import StreamRelease
from stream_files import key_file

COUNTS = [[7919, 104729], [7907, 104723], [7901, 104717]]  # distinctive: must never be quoted


def _stream(tmp_path, steps=2, **kw):
    path = tmp_path / "s.stream"
    s = StreamRelease.create(
        path,
        StreamSpec(6, categories=("a", "b"), eps=1.0, delta=1e-6),
        rng=np.random.default_rng(0),
        **kw,
    )
    for c in COUNTS[:steps]:
        s.step(c)
    return path, s


def _refused(path, match, *, exc=IntegrityError, **kw):
    """Opening is refused with ``exc``; the message names the file and quotes no data."""
    with pytest.raises(exc, match=match) as info:
        StreamRelease.open(path, **kw)
    msg = str(info.value)
    assert str(path) in msg
    rest = msg.replace(str(path), "")
    for p in (key_file(path), kw.get("key_file")):
        rest = rest.replace(str(p), "") if p else rest
    rest = re.sub(r"\b[0-9a-f]{16}\b", "", rest)  # stream ids: random, public
    assert not re.search(r"\d{3,}", rest), msg  # no count, total or noise value
    return msg


def _sql(path, *stmts):
    with sqlite3.connect(path) as con:
        for s in stmts:
            con.execute(*s) if isinstance(s, tuple) else con.execute(s)


def _flip(blob: bytes, at: int) -> bytes:
    b = bytearray(blob)
    b[at] ^= 0x01
    return bytes(b)


def test_an_untouched_stream_reopens_and_replays(tmp_path):
    path, s = _stream(tmp_path)
    again = StreamRelease.open(path)
    assert again.steps_done == 2
    assert [r.values for r in again.released()] == [r.values for r in s.released()]
    assert oct(key_file(path).stat().st_mode & 0o777) == "0o600"
    assert oct(key_file(path).parent.stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("column", ["r", "y", "x", "z"])
def test_an_edited_step_is_refused(tmp_path, column):
    """Before: editing a stored release changed the replayed totals silently."""
    path, _ = _stream(tmp_path)
    with sqlite3.connect(path) as con:
        blob = con.execute(f"SELECT {column} FROM steps WHERE t = 1").fetchone()[0]
        con.execute(f"UPDATE steps SET {column} = ? WHERE t = 1", (_flip(blob, 3),))
    _refused(path, "step 1 does not verify")


@pytest.mark.parametrize(
    "edit, where",
    [
        ("UPDATE meta SET value = '{\"horizon\": 7}' WHERE key = 'spec'", "creation record"),
        ("UPDATE meta SET value = zeroblob(length(value)) WHERE key = 'C'", "creation record"),
        ("UPDATE meta SET value = 'ffffffffffffffff' WHERE key = 'stream_id'", "no key file"),
        ("UPDATE meta SET value = '0' WHERE key = 'budgeted'", "creation record"),
        ("DELETE FROM meta WHERE key = 'charged'", "charge"),
        ("INSERT INTO meta VALUES ('note', 'x')", "meta table"),
    ],
)
def test_edited_meta_is_refused(tmp_path, edit, where):
    path = tmp_path / "s.stream"
    budget = Ledger.create(tmp_path / "l.db", 5.0, 1e-5)
    s = StreamRelease.create(path, StreamSpec(6, categories=2, eps=1.0, delta=1e-6), budget=budget)
    s.step([1, 2])
    _sql(path, edit)
    _refused(path, where)


def test_flipped_bytes_in_the_raw_file_are_refused(tmp_path):
    path, s = _stream(tmp_path)
    with sqlite3.connect(path) as con:
        r1 = con.execute("SELECT r FROM steps WHERE t = 1").fetchone()[0]
    raw = bytearray(path.read_bytes())
    at = raw.find(r1)
    assert at > 0
    raw[at + 6] ^= 0x40  # two flipped bytes in a released total: its exponent and mantissa
    raw[at + 2] ^= 0x01
    path.write_bytes(bytes(raw))
    _refused(path, "step 1 does not verify")


def test_a_dropped_step_and_a_dropped_pending_noise_are_refused(tmp_path):
    path, _ = _stream(tmp_path, steps=3)
    copy = tmp_path / "copy.stream"
    shutil.copy(path, copy)
    _sql(path, "DELETE FROM steps WHERE t = 2")
    _refused(path, r"older than its key file .* records \(5 of 7 commits\)")
    _sql(copy, "UPDATE steps SET x = NULL, y = NULL, r = NULL, smac = NULL WHERE t = 2")
    _refused(copy, r"older than its key file .* records \(6 of 7 commits\)")


def test_a_restored_older_copy_is_refused_and_cannot_release_a_step_again(tmp_path):
    """Before: restoring the file from before step 1 released step 1 again with fresh noise
    while the ledger showed one charge."""
    path = tmp_path / "s.stream"
    ledger = Ledger.create(tmp_path / "l.db", 5.0, 1e-5)
    s = StreamRelease.create(path, StreamSpec(6, categories=2, eps=1.0, delta=1e-6), budget=ledger)
    s.step([3, 4])
    older = tmp_path / "older.stream"
    shutil.copy(path, older)
    s.step([5, 6])
    shutil.copy(older, path)
    _refused(
        path, r"older than its key file .* records \(4 of 6 commits\): it was truncated or replaced"
    )
    assert ledger.status()["spends"] == 1


def test_a_copy_stepped_beside_the_original_is_refused(tmp_path):
    """Two copies share one key file: whichever falls behind is refused, so a step is never
    released twice from two files."""
    path, _ = _stream(tmp_path, steps=1)
    twin = tmp_path / "twin.stream"
    shutil.copy(path, twin)
    StreamRelease.open(twin).step([1, 1])
    _refused(path, "older than its key file")


def test_dropped_columns_and_a_downgrade_are_refused(tmp_path):
    path, _ = _stream(tmp_path)
    _sql(path, "ALTER TABLE steps DROP COLUMN smac")
    _refused(path, "not a usable matmech stream file", exc=ValueError)
    _sql(
        path,
        "ALTER TABLE steps DROP COLUMN zmac",
        "UPDATE meta SET value = 'matmech-stream-1' WHERE key = 'format'",
    )
    _refused(path, "format 'matmech-stream-1' .* cannot be verified")


def test_a_truncated_or_garbled_file_is_refused(tmp_path):
    path, _ = _stream(tmp_path)
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match="not a usable matmech stream file|does not verify"):
        StreamRelease.open(path)


def test_the_key_file_missing_altered_or_of_another_stream(tmp_path):
    path, _ = _stream(tmp_path)
    kf = key_file(path)
    text = kf.read_text()
    kf.unlink()
    _refused(path, "no key file for this stream")
    kf.write_text(text.replace('"count": 5', '"count": 4'))  # 1 + 2 links a step
    _refused(path, "its key file .* is damaged or altered")
    kf.write_text(text)
    assert StreamRelease.open(path).steps_done == 2
    (tmp_path / "o").mkdir()
    other, _ = _stream(tmp_path / "o")
    _refused(path, "belongs to another stream", key_file=key_file(other))


def test_an_older_key_file_is_refused(tmp_path):
    path, s = _stream(tmp_path, steps=1)
    old = key_file(path).read_text()
    s.step([1, 1])
    key_file(path).write_text(old)
    _refused(path, "commits ahead of its key file")


def test_a_declared_key_file(tmp_path):
    kf = tmp_path / "keys" / "mine.key"
    path, _ = _stream(tmp_path, key_file=kf)
    assert kf.is_file() and not key_file(path).exists()
    _refused(path, "give it", key_file=None)
    assert StreamRelease.open(path, key_file=kf).steps_done == 2
    (tmp_path / "x").mkdir()
    with pytest.raises(FileExistsError, match="key is never replaced"):
        _stream(tmp_path / "x", key_file=kf)
    assert not (tmp_path / "x" / "s.stream").exists()
    assert main(["stream", "status", str(path), "--key-file", str(kf), "--json"]) == 0


def test_a_stream_stepped_by_another_process_meanwhile(tmp_path):
    path, _ = _stream(tmp_path, steps=1)
    a, b = StreamRelease.open(path), StreamRelease.open(path)
    a.step([1, 1])
    with pytest.raises(IntegrityError, match="changed since it was opened"):
        b.step([2, 2])
    assert StreamRelease.open(path).steps_done == 2


def test_a_stream_cannot_be_copied_with_its_source(tmp_path):
    import copy

    _, s = _stream(tmp_path, steps=1)
    with pytest.raises(TypeError, match="RandomSource cannot be copied"):
        copy.deepcopy(s)


# -- a full disk -------------------------------------------------------------------------


class _FullDisk:
    """A connection whose COMMIT fails as SQLite's does on a full disk (SQLite has already
    rolled the transaction back: the ROLLBACK after it used to raise 'cannot rollback')."""

    def __init__(self, con):
        self._con = con

    def execute(self, sql, *a):
        if sql == "COMMIT":
            self._con.execute("ROLLBACK")
            raise sqlite3.OperationalError("database or disk is full")
        return self._con.execute(sql, *a)

    def __getattr__(self, name):
        return getattr(self._con, name)


def _fill_disk(monkeypatch, method):
    """StreamStore.<method> runs on a full disk."""
    real, connect = getattr(state.StreamStore, method), state.StreamStore._connect

    def full(self, *a):
        import contextlib

        @contextlib.contextmanager
        def conn():
            with connect(self) as con:
                yield _FullDisk(con)

        monkeypatch.setattr(self, "_connect", conn)
        try:
            return real(self, *a)
        finally:
            monkeypatch.delattr(self, "_connect")

    monkeypatch.setattr(state.StreamStore, method, full)


def _stored(path):
    with sqlite3.connect(path) as con:
        return con.execute("SELECT t, z, y IS NOT NULL FROM steps ORDER BY t").fetchall()


@pytest.mark.parametrize("method", ["put_noise", "put_step"])
def test_a_full_disk_mid_step_is_one_clear_error_and_resumes(tmp_path, monkeypatch, method):
    path, _ = _stream(tmp_path, steps=1)
    s = StreamRelease.open(path)
    before = _stored(path)
    _fill_disk(monkeypatch, method)
    with pytest.raises(
        OSError, match="disk is full.*(nothing about step 1|step 1 was not released)"
    ) as info:
        s.step([4, 4])
    assert str(path) in str(info.value)
    stored = _stored(path)
    assert stored[:1] == before and len(stored) == (1 if method == "put_noise" else 2)
    assert all(done for *_, done in stored[:1]) and not any(d for *_, d in stored[1:])
    with pytest.raises(OSError, match="an earlier write to this stream failed; reopen it"):
        s.step([4, 4])
    monkeypatch.undo()
    again = StreamRelease.open(path)
    assert again.steps_done == 1
    again.step([4, 4])
    after = _stored(path)
    if method == "put_step":
        assert after[1][1] == stored[1][1], "the stored noise was reused"
    assert [d for *_, d in after] == [1, 1]


def test_a_full_disk_at_the_charge_mark_never_charges_twice(tmp_path, monkeypatch):
    ledger = Ledger.create(tmp_path / "l.db", 5.0, 1e-5)
    path = tmp_path / "s.stream"
    _fill_disk(monkeypatch, "mark_charged")
    with pytest.raises(OSError, match="the charge itself is in the ledger"):
        StreamRelease.create(path, StreamSpec(6, categories=2, eps=1.0, delta=1e-6), budget=ledger)
    monkeypatch.undo()
    assert ledger.status()["spends"] == 1 and _stored(path) == []
    with pytest.raises(ValueError, match="charge to its budget was interrupted"):
        StreamRelease.open(path)
    s = StreamRelease.open(path, budget=ledger)
    s.step([1, 1])
    assert ledger.status()["spends"] == 1


def test_a_full_disk_at_creation_charges_nothing_and_leaves_nothing(tmp_path, monkeypatch):
    ledger = Ledger.create(tmp_path / "l.db", 5.0, 1e-5)
    path = tmp_path / "s.stream"
    full = types.SimpleNamespace(
        connect=lambda *a, **kw: _FullDisk(sqlite3.connect(*a, **kw)), Error=sqlite3.Error
    )
    monkeypatch.setattr(state, "sqlite3", full)  # the stream's connections only
    keys = set(HeadRecord.default_path("stream", "0" * 16).parent.glob("*.key"))
    with pytest.raises(OSError, match="disk is full.*nothing was written or charged"):
        StreamRelease.create(path, StreamSpec(6, categories=2, eps=1.0, delta=1e-6), budget=ledger)
    monkeypatch.undo()
    assert not path.exists() and ledger.status()["spends"] == 0
    assert set(HeadRecord.default_path("stream", "0" * 16).parent.glob("*.key")) == keys


# -- a real full disk (a small tmpfs; needs root) ----------------------------------------------


@pytest.fixture
def tiny_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    try:
        ok = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=192k", "tmpfs", str(disk)], capture_output=True
        )
    except OSError:
        ok = None
    if ok is None or ok.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def _fill(disk):
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    return filler


def test_on_a_real_full_disk(tmp_path, tiny_disk, monkeypatch, capsys):
    """init and step on a full tmpfs: exit status 2 and one line, no charge without a stored
    stream, no release without a stored step; then the same commands succeed with room."""
    ledger = tmp_path / "l.db"
    assert main(["budget", "init", str(ledger), "--eps", "5", "--delta", "1e-5"]) == 0
    big = tmp_path / "big.toml"
    big.write_text("horizon = 40000\ncategories = 2\neps = 1.0\ndelta = 1e-6\n")  # C: 320 kB
    small = tmp_path / "small.toml"
    small.write_text('horizon = 8\ncategories = ["a", "b"]\neps = 1.0\ndelta = 1e-6\n')
    db = tiny_disk / "s.stream"
    capsys.readouterr()
    assert main(["stream", "init", str(big), str(db), "--ledger", str(ledger)]) == 2
    err = capsys.readouterr().err
    assert (
        "disk is full" in err and "nothing was written or charged" in err and "Traceback" not in err
    )
    assert not db.exists() and Ledger.open(ledger).status()["spends"] == 0
    assert main(["stream", "init", str(small), str(db), "--ledger", str(ledger)]) == 0
    filler = _fill(tiny_disk)
    capsys.readouterr()
    assert main(["stream", "step", str(db), "--counts", "3,4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "disk is full" in err and "cannot rollback" not in err
    filler.unlink()
    assert main(["stream", "step", str(db), "--counts", "3,4", "--json"]) == 0
    assert StreamRelease.open(db).steps_done == 1 and Ledger.open(ledger).status()["spends"] == 1
    # the key file's disk full: the step is stored, not released; then resumed
    monkeypatch.setenv("MATMECH_CONFIG_DIR", str(tiny_disk / "config"))
    db2 = tmp_path / "s2.stream"
    assert main(["stream", "init", str(small), str(db2)]) == 0
    filler = _fill(tiny_disk)
    capsys.readouterr()
    assert main(["stream", "step", str(db2), "--counts", "1,2"]) == 2
    err = capsys.readouterr().err
    assert "step 0's noise was stored" in err and "nothing was released" in err
    z0 = _stored(db2)
    filler.unlink()
    assert main(["stream", "step", str(db2), "--counts", "1,2"]) == 0
    assert _stored(db2)[0][1] == z0[0][1] and StreamRelease.open(db2).steps_done == 1
