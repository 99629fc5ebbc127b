"""A stream's persistent state: one SQLite file, committed before anything is returned, and
a key file outside it that pins its history (``docs/guide/threat-model.md``).

Tables: ``meta`` (the spec as JSON, the plan's numbers, the measured C_g as bytes, a random
stream id, whether a budget pays for the stream, and once paid the charge's mark) and
``steps`` (t, z, x, y, r and their MACs): the noise z_t is inserted in its own transaction
*before* step t reads its counts, and x_t, y_t and the released r_t in a second one before
the release is returned. A process killed anywhere therefore finds on restart either no z_t
(nothing about step t was drawn or released) or the stored z_t, which is reused: a step's
noise is never drawn twice, and a released step is answered from the file, not recomputed.
SQLite's rollback journal with ``synchronous=FULL`` makes each commit atomic and durable (as
:class:`~matmech.privacy.ledger.Ledger`).

Integrity (:mod:`matmech.privacy.integrity`): the file is a chain of links — the creation
(every meta value), the charge's mark, then z_0, step 0, z_1, step 1, … — each with an
HMAC-SHA256 under the stream's key over the previous link's MAC and its own content. The key
and the last link's position and MAC live in the stream's key file (``<config dir>/streams/
<stream id>.key``, mode 0600, or a path the user declares), updated after each commit: a file
whose content was changed, whose rows were dropped, or which was replaced by an older copy is
refused on opening (:class:`~matmech.privacy.integrity.IntegrityError` naming the file). A
commit returns only after the key file covers it, so the one commit the key file may lag (a
crash between the two) never released anything.

A failed write (a full disk: an ``OSError`` saying what was and was not stored) leaves the
file at its last commit; the store then refuses further writes, and reopening resumes.

The file holds the counts and the noise: it is as private as the data (created 0600).
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import os
import sqlite3
from pathlib import Path

import numpy as np

from matmech.privacy.integrity import HeadRecord, IntegrityError, link_mac


#: The ``format`` value in a stream file's meta table.
STREAM_FORMAT = "matmech-stream-2"
_UNCHECKED_FORMATS = ("matmech-stream-1",)  # no MACs: refused

_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB NOT NULL)",
    "CREATE TABLE steps (t INTEGER PRIMARY KEY, z BLOB NOT NULL, zmac BLOB NOT NULL, "
    "x BLOB, y BLOB, r BLOB, smac BLOB)",
)
#: The meta values the creation link covers (fixed for the stream's life).
_FIXED = ("format", "stream_id", "budgeted", "spec", "plan", "C")


def _blob(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, dtype=np.float64).tobytes()


def _array(b: bytes, k: int) -> np.ndarray:
    return np.frombuffer(b, dtype=np.float64).reshape(k)


def _is_full(exc: BaseException) -> bool:
    return "full" in str(exc) or getattr(exc, "errno", None) == errno.ENOSPC


class StreamStore:
    """The SQLite file of one stream (see the module notes): :meth:`create` or :meth:`open`,
    then the verified state (:attr:`meta`, :attr:`charged`, :meth:`load`) and the commits
    (:meth:`mark_charged`, :meth:`put_noise`, :meth:`put_step`)."""

    def __init__(self, path, record: HeadRecord, meta: dict, macs: list, rows: list):
        self._path, self._record = Path(path), record
        self._meta, self._macs, self._rows = meta, macs, rows
        self._broken = False

    @property
    def path(self) -> Path:
        return self._path

    @property
    def key_file(self) -> Path:
        return self._record.path

    @property
    def meta(self) -> dict:
        """The verified meta values (a copy)."""
        return dict(self._meta)

    @property
    def charged(self) -> bool:
        """Whether the stream is paid for: no budget pays for it, or the charge is marked."""
        return self._meta["budgeted"] == "0" or "charged" in self._meta

    # -- SQLite ------------------------------------------------------------------------
    @contextlib.contextmanager
    def _connect(self):
        try:
            con = sqlite3.connect(
                self._path.resolve().as_uri() + "?mode=rw",
                uri=True,
                timeout=60.0,
                isolation_level=None,
            )
        except sqlite3.Error as exc:
            raise OSError(f"{self._path}: cannot open the stream file ({exc})") from None
        try:
            con.execute("PRAGMA journal_mode=DELETE")
            con.execute("PRAGMA synchronous=FULL")
            yield con
        finally:
            con.close()

    def _commit(self, what: str, lost: str, write) -> None:
        """Run ``write(con, position, prev)`` → new link MAC in one transaction; then the key
        file. ``what``/``lost`` say, on failure, what was being stored and what that means."""
        if self._broken:
            raise OSError(
                f"{self._path}: an earlier write to this stream failed; reopen it "
                "(StreamRelease.open or the next 'matmech stream' command resumes from the file)"
            )
        self._broken = True  # until this commit and its key file update both succeed
        try:
            if self._record.count < len(self._macs):  # a key file that lagged at opening
                self._record.advance(len(self._macs), self._macs[-1])
            with self._connect() as con:
                con.execute("BEGIN IMMEDIATE")
                try:
                    if self._tip(con) != self._macs[-1]:
                        raise IntegrityError(
                            f"{self._path}: the stream file changed since it was opened (another "
                            "process stepped it, or it was replaced); nothing was stored"
                        )
                    mac = write(con, len(self._macs) + 1, self._macs[-1])
                    con.execute("COMMIT")
                except BaseException:
                    if con.in_transaction:  # SQLite may have rolled back already (a full disk)
                        with contextlib.suppress(sqlite3.Error):  # never mask the first error
                            con.execute("ROLLBACK")
                    raise
        except sqlite3.Error as exc:
            cause = "the disk is full" if _is_full(exc) else f"SQLite: {exc}"
            raise OSError(
                errno.ENOSPC if _is_full(exc) else errno.EIO,
                f"cannot store {what} ({cause}); {lost}",
                str(self._path),
            ) from None
        self._macs.append(mac)
        try:
            self._record.advance(len(self._macs), mac)
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"{what} was stored in {self._path}, but its key file could not be updated "
                f"({os.strerror(exc.errno) if exc.errno else exc}); nothing was released: free "
                "space there and run the command again (it resumes from the file)",
                exc.filename,
            ) from None
        self._broken = False

    @staticmethod
    def _tip(con) -> bytes:
        """The MAC of the file's last link as stored (to refuse a concurrent writer)."""
        row = con.execute("SELECT zmac, smac FROM steps ORDER BY t DESC LIMIT 1").fetchone()
        if row is not None:
            return bytes(row[1] if row[1] is not None else row[0])
        meta: dict = dict(
            con.execute("SELECT key, value FROM meta WHERE key IN ('charged', 'genesis')")
        )
        return bytes(meta["charged"] if "charged" in meta else meta["genesis"])

    # -- files ---------------------------------------------------------------------------
    @staticmethod
    def _genesis(key: bytes, meta: dict) -> bytes:
        return link_mac(key, b"", 1, "creation", *(meta[k] for k in _FIXED))

    @classmethod
    def create(cls, path, meta: dict[str, bytes | str], *, key_file=None) -> StreamStore:
        """A new stream file (refused if ``path`` exists), mode 0600, holding ``meta``
        (which names ``stream_id`` and ``budgeted``), and its key file (``key_file``, or the
        default under the configuration directory; refused if it exists)."""
        p = Path(path)
        meta = {"format": STREAM_FORMAT, **meta}
        key = HeadRecord.new_key()
        genesis = cls._genesis(key, meta)
        rp = (
            Path(key_file)
            if key_file is not None
            else HeadRecord.default_path("stream", str(meta["stream_id"]), p)
        )
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # FileExistsError if present
        os.close(fd)
        record = None
        try:
            record = HeadRecord.create(rp, "stream", str(meta["stream_id"]), 1, genesis, key)
            with contextlib.closing(sqlite3.connect(p, timeout=60.0, isolation_level=None)) as con:
                con.execute("PRAGMA journal_mode=DELETE")
                con.execute("PRAGMA synchronous=FULL")
                con.execute("BEGIN IMMEDIATE")
                for stmt in _SCHEMA:
                    con.execute(stmt)
                con.executemany(
                    "INSERT INTO meta VALUES (?, ?)", [*meta.items(), ("genesis", genesis)]
                )
                con.execute("COMMIT")
        except BaseException as exc:
            p.unlink(missing_ok=True)
            if record is not None:
                record.path.unlink(missing_ok=True)
            if isinstance(exc, sqlite3.Error):
                cause = "the disk is full" if _is_full(exc) else f"SQLite: {exc}"
                raise OSError(
                    errno.ENOSPC if _is_full(exc) else errno.EIO,
                    f"cannot create the stream file ({cause}); nothing was written or charged",
                    str(p),
                ) from None
            raise
        return cls(p, record, {**meta, "genesis": genesis}, [genesis], [])

    @classmethod
    def open(cls, path, *, key_file=None) -> StreamStore:
        """The stream file at ``path``, verified against its key file (``key_file``, or the
        default named by the file's stream id): IntegrityError if anything in it was changed,
        removed or restored from an older copy."""
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(
                f"{p}: no such stream file (create it with 'matmech stream init')"
            )
        try:
            with contextlib.closing(
                sqlite3.connect(
                    p.resolve().as_uri() + "?mode=rw", uri=True, timeout=60.0, isolation_level=None
                )
            ) as con:
                con.execute("BEGIN")  # one snapshot of meta and steps
                meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
                fmt = meta.get("format")
                if fmt in _UNCHECKED_FORMATS:
                    raise IntegrityError(
                        f"{p}: a stream file of format {fmt!r} (written by a development "
                        "version, without integrity checks) cannot be verified, so it is not "
                        "read; start a new stream"
                    )
                if fmt != STREAM_FORMAT:
                    raise ValueError(
                        f"{p}: not a matmech stream file (format {fmt!r}, expected "
                        f"{STREAM_FORMAT!r})"
                    )
                rows = con.execute(
                    "SELECT t, z, zmac, x, y, r, smac FROM steps ORDER BY t"
                ).fetchall()
                con.execute("COMMIT")
        except sqlite3.Error as exc:
            raise ValueError(f"{p}: not a usable matmech stream file ({exc})") from None
        hint = (
            ""
            if key_file is not None
            else " (if the stream was created with a key file of your choosing, give it: "
            "key_file= or --key-file)"
        )
        rp = (
            Path(key_file)
            if key_file is not None
            else HeadRecord.default_path("stream", str(meta.get("stream_id")), p)
        )
        record = HeadRecord.load(rp, "stream", str(meta.get("stream_id")), subject=p, hint=hint)
        macs = cls._verify(p, record.key, meta, rows)
        if record.check(len(macs), macs, p):
            record.advance(len(macs), macs[-1])  # the key file lagged the last commit
        return cls(p, record, meta, macs, rows)

    @classmethod
    def _verify(cls, p: Path, key: bytes, meta: dict, rows: list) -> list:
        """The MAC of every link, recomputed and compared with the stored ones."""

        def bad(where):
            return IntegrityError(
                f"{p}: {where} does not verify: the stream file was altered or damaged after it "
                "was written, and is not read"
            )

        if (
            any(k not in meta for k in (*_FIXED, "genesis"))
            or set(meta) - {*_FIXED, "genesis", "charged"}
            or any(not isinstance(v, (str, bytes)) for v in meta.values())
        ):
            raise bad("its meta table")
        macs = [cls._genesis(key, meta)]
        if not hmac.compare_digest(macs[0], bytes(meta["genesis"])):
            raise bad("its creation record (spec, plan, factorization)")
        if "charged" in meta:
            macs.append(link_mac(key, macs[-1], 2, "charged"))
            if meta["budgeted"] != "1" or not hmac.compare_digest(macs[-1], bytes(meta["charged"])):
                raise bad("the mark of its charge")
        elif rows and meta["budgeted"] != "0":
            raise bad("its charge (steps without a charge)")
        for i, (t, z, zmac, x, y, r, smac) in enumerate(rows):
            last = i == len(rows) - 1
            if t != i or (y is None) != (smac is None) or (y is None and not last):
                raise bad(f"step {i}")
            for kind, fields, stored in (("z", (z,), zmac), ("step", (x, y, r), smac)):
                if stored is None:
                    continue
                if any(not isinstance(f, bytes) for f in (z, *fields)):
                    raise bad(f"step {i}")
                macs.append(link_mac(key, macs[-1], len(macs) + 1, kind, t, *fields))
                if not hmac.compare_digest(macs[-1], bytes(stored)):
                    raise bad(f"step {i}")
        return macs

    # -- state ---------------------------------------------------------------------------
    def load(self, k: int) -> tuple[int, dict[int, np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
        """(steps done, pending noise {t: z_t} of unreleased steps, x, y, r histories), from
        the verified rows."""
        done = [row for row in self._rows if row[4] is not None]
        try:
            pending = {t: _array(z, k) for t, z, _, _, y, _, _ in self._rows if y is None}
            x, y, r = (
                np.array([_array(row[c], k) for row in done]).reshape(len(done), k)
                for c in (3, 4, 5)
            )
        except ValueError:  # a blob of another length: the file holds another stream's shapes
            raise IntegrityError(
                f"{self._path}: a step's arrays do not fit the stream's categories"
            ) from None
        return len(done), pending, x, y, r

    def mark_charged(self) -> None:
        """Mark the stream as paid for (after the budget's charge committed)."""

        def write(con, position, prev):
            mac = link_mac(self._record.key, prev, position, "charged")
            con.execute("INSERT INTO meta VALUES ('charged', ?)", (mac,))
            return mac

        self._commit(
            "the mark of the stream's charge",
            "the charge itself is in the ledger: reopen the stream with the same ledger once "
            "there is room (the charge is found, not repeated)",
            write,
        )
        self._meta["charged"] = self._macs[-1]

    def put_noise(self, t: int, z: np.ndarray) -> None:
        """Store z_t (refused if step t already has noise: noise is never redrawn)."""
        zb = _blob(z)

        def write(con, position, prev):
            mac = link_mac(self._record.key, prev, position, "z", t, zb)
            con.execute("INSERT INTO steps (t, z, zmac) VALUES (?, ?, ?)", (t, zb, mac))
            return mac

        self._commit(
            f"step {t}'s noise",
            f"nothing about step {t} was released; run the step again once there is room",
            write,
        )
        self._rows.append((t, zb, self._macs[-1], None, None, None, None))

    def put_step(self, t: int, x: np.ndarray, y: np.ndarray, r: np.ndarray) -> None:
        """Store step t's counts, measurement and release (its noise is stored already)."""
        blobs = (_blob(x), _blob(y), _blob(r))

        def write(con, position, prev):
            mac = link_mac(self._record.key, prev, position, "step", t, *blobs)
            cur = con.execute(
                "UPDATE steps SET x = ?, y = ?, r = ?, smac = ? WHERE t = ? AND y IS NULL",
                (*blobs, mac, t),
            )
            if cur.rowcount != 1:
                raise ValueError(
                    f"{self._path}: step {t} has no stored noise or was already released"
                )
            return mac

        self._commit(
            f"step {t}'s release",
            f"step {t} was not released (its noise is kept); run the step again once there is room",
            write,
        )
        row = self._rows[-1]
        self._rows[-1] = (row[0], row[1], row[2], *blobs, self._macs[-1])
