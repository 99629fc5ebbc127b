"""A stream's persistent state: one SQLite file, committed before anything is returned.

Tables: ``meta`` (the spec as JSON, the plan's numbers, the measured C_g as bytes, a random
stream id, whether the budget was charged) and ``steps`` (t, z, x, y, r): the noise z_t is
inserted in its own transaction *before* step t reads its counts, and x_t, y_t and the
released r_t in a second one before the release is returned. A process killed anywhere
therefore finds on restart either no z_t (nothing about step t was drawn or released) or
the stored z_t, which is reused: a step's noise is never drawn twice, and a released step is
answered from the file, not recomputed. SQLite's rollback journal with ``synchronous=FULL``
makes each commit atomic and durable (as :class:`~matmech.privacy.ledger.Ledger`).

The file holds the counts and the noise: it is as private as the data (created 0600).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

import numpy as np

__all__ = ["STREAM_FORMAT", "StreamStore"]

#: The ``format`` value in a stream file's meta table.
STREAM_FORMAT = "matmech-stream-1"

_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB NOT NULL)",
    "CREATE TABLE steps (t INTEGER PRIMARY KEY, z BLOB NOT NULL, x BLOB, y BLOB, r BLOB)",
)


def _blob(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, dtype=np.float64).tobytes()


def _array(b: bytes, k: int) -> np.ndarray:
    return (
        np.frombuffer(b, dtype=np.float64).reshape(-1)
        if k < 0
        else np.frombuffer(b, dtype=np.float64).reshape(k)
    )


class StreamStore:
    """The SQLite file of one stream (see the module notes)."""

    def __init__(self, path):
        self._path = Path(path)

    @property
    def path(self) -> Path:
        return self._path

    @contextlib.contextmanager
    def _connect(self):
        con = sqlite3.connect(self._path, timeout=60.0, isolation_level=None)
        try:
            con.execute("PRAGMA journal_mode=DELETE")
            con.execute("PRAGMA synchronous=FULL")
            yield con
        finally:
            con.close()

    @contextlib.contextmanager
    def _write(self):
        with self._connect() as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    @classmethod
    def create(cls, path, meta: dict[str, bytes | str]) -> StreamStore:
        """A new stream file (refused if ``path`` exists), mode 0600, holding ``meta``."""
        p = Path(path)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # FileExistsError if present
        os.close(fd)
        store = cls(p)
        try:
            with store._write() as con:
                for stmt in _SCHEMA:
                    con.execute(stmt)
                con.execute("INSERT INTO meta VALUES ('format', ?)", (STREAM_FORMAT,))
                con.executemany("INSERT INTO meta VALUES (?, ?)", list(meta.items()))
        except BaseException:
            p.unlink(missing_ok=True)
            raise
        return store

    @classmethod
    def open(cls, path) -> StreamStore:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(
                f"{p}: no such stream file (create it with 'matmech stream init')"
            )
        store = cls(p)
        try:
            fmt = store.meta().get("format")
        except sqlite3.DatabaseError as exc:
            raise ValueError(f"{p}: not a matmech stream file ({exc})") from None
        if fmt != STREAM_FORMAT:
            raise ValueError(
                f"{p}: not a matmech stream file (format {fmt!r}, expected {STREAM_FORMAT!r})"
            )
        return store

    def meta(self) -> dict:
        with self._connect() as con:
            return dict(con.execute("SELECT key, value FROM meta").fetchall())

    def set_meta(self, key: str, value) -> None:
        with self._write() as con:
            con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def load(self, k: int) -> tuple[int, dict[int, np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
        """(steps done, pending noise {t: z_t} of unreleased steps, x, y, r histories)."""
        with self._connect() as con:
            rows = con.execute("SELECT t, z, x, y, r FROM steps ORDER BY t").fetchall()
        done = [row for row in rows if row[3] is not None]
        if [row[0] for row in done] != list(range(len(done))):
            raise ValueError(
                f"{self._path}: corrupt stream file: released steps are not 0..{len(done) - 1}"
            )
        pending = {t: _array(z, k) for t, z, x, y, r in rows if y is None}
        x = np.array([_array(row[2], k) for row in done]).reshape(len(done), k)
        y = np.array([_array(row[3], k) for row in done]).reshape(len(done), k)
        r = np.array([_array(row[4], k) for row in done]).reshape(len(done), k)
        return len(done), pending, x, y, r

    def put_noise(self, t: int, z: np.ndarray) -> None:
        """Store z_t (refused if step t already has noise: noise is never redrawn)."""
        with self._write() as con:
            con.execute("INSERT INTO steps (t, z) VALUES (?, ?)", (t, _blob(z)))

    def put_step(self, t: int, x: np.ndarray, y: np.ndarray, r: np.ndarray) -> None:
        with self._write() as con:
            cur = con.execute(
                "UPDATE steps SET x = ?, y = ?, r = ? WHERE t = ? AND y IS NULL",
                (_blob(x), _blob(y), _blob(r), t),
            )
            if cur.rowcount != 1:
                raise ValueError(
                    f"{self._path}: step {t} has no stored noise or was already released"
                )
