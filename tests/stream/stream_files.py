"""Test helpers for stream files: the key file of a stream, and a forger who holds the key
(re-MACs every link after an edit), for the checks that must hold even then."""

import sqlite3
from pathlib import Path

from matmech.privacy.integrity import HeadRecord, link_mac
from matmech.stream.state import StreamStore


def stream_id(path) -> str:
    with sqlite3.connect(path) as con:
        return con.execute("SELECT value FROM meta WHERE key = 'stream_id'").fetchone()[0]


def key_file(path) -> Path:
    return HeadRecord.default_path("stream", stream_id(path))


def forge(path, edit, *, record_path=None):
    """Apply ``edit(con)`` to the stream file, then recompute every MAC with the stream's key
    and rewrite the key file to match: what an attacker holding the key can do."""
    rp = Path(record_path) if record_path else key_file(path)
    rec = HeadRecord.load(rp, "stream", stream_id(path))
    with sqlite3.connect(path) as con:
        edit(con)
        meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        macs = [StreamStore._genesis(rec.key, meta)]
        con.execute("UPDATE meta SET value = ? WHERE key = 'genesis'", (macs[0],))
        if "charged" in meta:
            macs.append(link_mac(rec.key, macs[-1], 2, "charged"))
            con.execute("UPDATE meta SET value = ? WHERE key = 'charged'", (macs[-1],))
        for t, z, x, y, r in con.execute("SELECT t, z, x, y, r FROM steps ORDER BY t").fetchall():
            macs.append(link_mac(rec.key, macs[-1], len(macs) + 1, "z", t, z))
            con.execute("UPDATE steps SET zmac = ? WHERE t = ?", (macs[-1], t))
            if y is not None:
                macs.append(link_mac(rec.key, macs[-1], len(macs) + 1, "step", t, x, y, r))
                con.execute("UPDATE steps SET smac = ? WHERE t = ?", (macs[-1], t))
    rec.count, rec.head = len(macs), macs[-1]
    rp.write_text(rec._text())
