"""A persistent privacy ledger: a :class:`~matmech.privacy.budget.PrivacyBudget` kept in SQLite.

A :class:`Ledger` is a file holding a total (ε, δ) and one row per spend. It is a
``PrivacyBudget`` (a subclass with the same interface), so ``release``, ``measure`` and
``select_rows`` accept it as ``budget=``; every spend is charged before any noise is drawn.

How a spend stays safe:

* Each :meth:`Ledger.spend` is one ``BEGIN IMMEDIATE`` transaction: it takes SQLite's write
  lock, sums every recorded row exactly (``Fraction``), refuses an overspend with
  :class:`~matmech.privacy.budget.BudgetExceededError` (rolling back: nothing is written) or
  inserts one row and commits. Only after the commit returns does the caller draw noise.
  Concurrent processes (and threads) serialise on the write lock, so together they cannot
  overspend.
* Amounts are stored as exact fractions in text, ``"p/q"``, with the budget's convention
  (a float means its shortest repr: 0.1 is ``"1/10"``), so 0.1 + 0.2 fits a 0.3 total.
* The file uses SQLite's rollback journal (``journal_mode=DELETE``, not WAL, so the ledger
  is the one file: copying it copies every committed spend) with ``synchronous=FULL``. A
  process killed at any point either committed its row (it is there after the kill) or did
  not (the next opener rolls the hot journal back); a spend is never lost once
  :meth:`~Ledger.spend` returned and never counted twice.

Integrity: every row carries an HMAC-SHA256 over the row (its id, text, amounts, time,
fingerprints) and the previous row's MAC, keyed by a key derived from the ledger's secret;
the first row chains from a MAC of the ledger's totals, and ``meta`` holds the MAC of the last
row (the head). Every read verifies the whole chain, so a changed amount (a flipped byte that
would refund budget), a removed, reordered or inserted row, a truncated tail or changed
totals are detected: reading refuses with :class:`LedgerIntegrityError` naming the first bad
row, and no spend is made from a broken chain. The key lives in the file, so the chain
detects corruption and edits made without matmech, not a forger who reads the key and
recomputes every MAC; keep the file where only the curator can write it. A ledger of the
first format (no chain) is upgraded on first open: its existing rows are chained as found.

Fingerprints: :meth:`Ledger.tag` sets ``spec`` / ``data`` strings stored with each later
spend, so the history shows which files each spend read. :meth:`Ledger.fingerprint` makes
them: an HMAC-SHA256 of the file's bytes keyed by a random secret created with the ledger
(``matmech release --ledger`` records one for the spec and one for the data file). A plain
digest of a data file would let anyone who sees the history test a guess of the whole
dataset; the keyed one can only be matched by someone holding the ledger file itself. Keep
the ledger with the data, not with the published answers.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import hashlib
import hmac
import json
import os
import secrets
import sqlite3
import threading
from fractions import Fraction
from pathlib import Path

from matmech.privacy.budget import LedgerEntry, PrivacyBudget
from matmech.privacy.params import check_delta, check_eps, exact

__all__ = ["Ledger", "LEDGER_FORMAT", "LedgerIntegrityError"]

#: The value of the ``format`` key in a ledger's ``meta`` table.
LEDGER_FORMAT = "matmech-privacy-ledger-2"
_FORMAT_1 = "matmech-privacy-ledger-1"  # no row chain: upgraded on open

_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE spends (id INTEGER PRIMARY KEY AUTOINCREMENT, what TEXT NOT NULL, "
    "eps TEXT NOT NULL, delta TEXT NOT NULL, time TEXT NOT NULL, spec TEXT, data TEXT, mac TEXT)",
)
_ROW_COLUMNS = "id, what, eps, delta, time, spec, data, mac"


class LedgerIntegrityError(ValueError):
    """The ledger's authenticated row chain does not verify: a row was changed, removed,
    inserted or reordered after it was written, or the file is corrupt. Nothing is spent."""


def _chain_key(secret_hex: str) -> bytes:
    """The row chain's key, derived from the ledger's secret (the fingerprints use the secret itself)."""
    return hmac.new(bytes.fromhex(secret_hex), b"matmech ledger row chain", hashlib.sha256).digest()


def _mac(key: bytes, prev: str, fields) -> str:
    msg = json.dumps(list(fields), ensure_ascii=False, separators=(",", ":"))
    return hmac.new(key, prev.encode() + b"\n" + msg.encode(), hashlib.sha256).hexdigest()


def _genesis(key: bytes, meta: dict) -> str:
    """The chain's start: a MAC of the ledger's totals and creation time."""
    return _mac(
        key,
        "",
        [LEDGER_FORMAT, meta.get("total_eps"), meta.get("total_delta"), meta.get("created")],
    )


_TIMEOUT = 60.0  # seconds to wait for another process's write lock


def _frac_text(f: Fraction) -> str:
    return f"{f.numerator}/{f.denominator}"


def _parse_frac(text, path, what) -> Fraction:
    try:
        f = Fraction(text)
    except (TypeError, ValueError, ZeroDivisionError):
        raise ValueError(
            f"{path}: corrupt ledger: {what} is {text!r}, not a fraction p/q"
        ) from None
    if f < 0:
        raise ValueError(f"{path}: corrupt ledger: {what} is negative ({text})")
    return f


def _utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")


class Ledger(PrivacyBudget):
    """A privacy budget stored in an SQLite file; create with :meth:`create`, reopen with
    :meth:`open`. Every method reads the file afresh, so several processes may share one
    ledger; :meth:`spend` is atomic across them.

    Parameters
    ----------
    path : str or os.PathLike
        The SQLite file (use :meth:`create` or :meth:`open` rather than the constructor).

    Returns
    -------
    Ledger
        A budget usable wherever a :class:`PrivacyBudget` is.

    Raises
    ------
    FileExistsError
        :meth:`create` on an existing file.
    FileNotFoundError
        :meth:`open` on a missing file.
    ValueError
        A file that is not a ledger, or a bad total.
    BudgetExceededError
        From :meth:`spend`, when a spend would exceed the total.

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "budget.db")
    >>> _ = Ledger.create(path, 1.0).spend(0.25)
    >>> Ledger.open(path).remaining
    (0.75, 0.0)
    """

    def __init__(self, path: str | os.PathLike) -> None:
        """Open an existing ledger (same as :meth:`open`)."""
        self._path = Path(os.fspath(path))
        self._lock = threading.Lock()  # guards the tags only; the file has its own lock
        self._tags: dict[str, str | None] = {"spec": None, "data": None}
        if not self._path.exists():
            raise FileNotFoundError(
                f"{self._path}: no such ledger file (create one with Ledger.create or 'matmech budget init')"
            )
        with self._connect() as con:
            meta = self._read_meta(con)
            if meta["format"] == _FORMAT_1:
                meta = self._upgrade(con)
            self._key = _chain_key(meta["fingerprint_key"])
            self._chain(con, meta)  # refuses a broken chain on open
        self._total = (
            _parse_frac(meta.get("total_eps"), self._path, "total eps"),
            _parse_frac(meta.get("total_delta"), self._path, "total delta"),
        )
        self._created = meta.get("created")

    # -- files -------------------------------------------------------------------------------

    @classmethod
    def create(cls, path, eps, delta=0.0) -> "Ledger":
        """A new ledger file at ``path`` with total (eps, delta); FileExistsError if the file
        exists (a ledger is never silently replaced)."""
        check_eps(eps)
        check_delta(delta)
        p = Path(os.fspath(path))
        try:
            fd = os.open(
                p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600
            )  # atomic: refuse an existing file
        except FileExistsError:
            raise FileExistsError(
                errno.EEXIST, "the file exists (a ledger is never replaced)", str(p)
            ) from None
        os.close(fd)
        try:
            con = sqlite3.connect(str(p), timeout=_TIMEOUT, isolation_level=None)
            try:
                con.execute("PRAGMA journal_mode=DELETE")
                con.execute("PRAGMA synchronous=FULL")
                con.execute("BEGIN IMMEDIATE")
                for stmt in _SCHEMA:
                    con.execute(stmt)
                meta = {
                    "format": LEDGER_FORMAT,
                    "total_eps": _frac_text(exact(eps)),
                    "total_delta": _frac_text(exact(delta)),
                    "created": _utc_now(),
                    "fingerprint_key": secrets.token_hex(32),
                }
                meta["chain_head"] = _genesis(_chain_key(meta["fingerprint_key"]), meta)
                con.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", list(meta.items()))
                con.execute("COMMIT")
            finally:
                con.close()
        except BaseException:
            with contextlib.suppress(OSError):
                p.unlink()
            raise
        return cls(p)

    @classmethod
    def open(cls, path) -> "Ledger":
        """The existing ledger at ``path`` (FileNotFoundError if none; ValueError if the file
        is not a matmech ledger)."""
        return cls(path)

    @property
    def path(self) -> Path:
        return self._path

    @property
    def created(self) -> str | None:
        """When the ledger was created (UTC, ISO 8601)."""
        return self._created

    @contextlib.contextmanager
    def _connect(self):
        # mode=rw: never create a file here (a missing ledger is an error, not an empty one)
        uri = self._path.resolve().as_uri() + "?mode=rw"
        try:
            con = sqlite3.connect(uri, uri=True, timeout=_TIMEOUT, isolation_level=None)
        except sqlite3.OperationalError as exc:
            raise OSError(f"{self._path}: cannot open the ledger ({exc})") from None
        try:
            con.execute("PRAGMA synchronous=FULL")
            yield con
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                raise OSError(
                    f"{self._path}: the ledger is locked by another process ({exc})"
                ) from None
            raise ValueError(f"{self._path}: not a usable matmech ledger ({exc})") from None
        finally:
            con.close()

    def _read_meta(self, con) -> dict:
        try:
            meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
            con.execute(
                "SELECT id, what, eps, delta, time, spec, data FROM spends LIMIT 0"
            ).fetchall()
        except sqlite3.DatabaseError:
            meta = {}
        if meta.get("format") not in (LEDGER_FORMAT, _FORMAT_1):
            raise ValueError(f"{self._path}: not a matmech privacy ledger")
        if meta["format"] == LEDGER_FORMAT and not {"fingerprint_key", "chain_head"} <= set(meta):
            raise LedgerIntegrityError(
                f"{self._path}: corrupt ledger: its row-chain key or head is missing"
            )
        return meta

    def _upgrade(self, con) -> dict:
        """A first-format ledger (no row chain) → the current one: its rows are chained as found."""
        con.execute("BEGIN IMMEDIATE")
        try:
            meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
            if meta.get("format") == _FORMAT_1:
                con.execute("ALTER TABLE spends ADD COLUMN mac TEXT")
                meta.setdefault("fingerprint_key", secrets.token_hex(32))
                meta["format"] = LEDGER_FORMAT
                key = _chain_key(meta["fingerprint_key"])
                head = _genesis(key, meta)
                for row in con.execute(
                    "SELECT id, what, eps, delta, time, spec, data FROM spends ORDER BY id"
                ).fetchall():
                    head = _mac(key, head, row)
                    con.execute("UPDATE spends SET mac = ? WHERE id = ?", (head, row[0]))
                meta["chain_head"] = head
                con.executemany(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                    [(k, meta[k]) for k in ("format", "fingerprint_key", "chain_head")],
                )
            con.execute("COMMIT")
        except BaseException:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise
        return meta

    def _chain(self, con, meta=None):
        """Every row (id, what, eps, delta, time, spec, data), the chain verified from the
        totals to the head, or :class:`LedgerIntegrityError` naming the first bad row.

        The head (in ``meta``) and the rows are read in one transaction: outside the caller's,
        a read transaction of its own, so a spend committed by another process between the two
        reads can never look like a removed row."""
        if con.in_transaction:
            return self._verified_rows(con, meta)
        con.execute("BEGIN")  # one consistent snapshot (meta read again inside it)
        try:
            return self._verified_rows(con, None)
        finally:
            con.execute("COMMIT")

    def _verified_rows(self, con, meta):
        meta = (
            meta
            if meta is not None
            else dict(con.execute("SELECT key, value FROM meta").fetchall())
        )
        if (
            meta.get("format") != LEDGER_FORMAT
            or "fingerprint_key" not in meta
            or _chain_key(meta["fingerprint_key"]) != self._key
        ):
            raise LedgerIntegrityError(
                f"{self._path}: the ledger's format or key changed after it was opened"
            )
        head = _genesis(self._key, meta)
        rows = []
        for i, (*fields, mac) in enumerate(
            con.execute(f"SELECT {_ROW_COLUMNS} FROM spends ORDER BY id"), start=1
        ):
            head = _mac(self._key, head, fields)
            if mac is None or not hmac.compare_digest(head, str(mac)):
                where = "the totals or " if i == 1 else ""
                raise LedgerIntegrityError(
                    f"{self._path}: the ledger's row chain is broken at spend {i} ({where}that row, or the order of "
                    "the rows, was changed after it was written, or the file is corrupt); refusing to read or spend "
                    f"from it (spends 1..{i - 1} verify)"
                )
            rows.append(tuple(fields))
        if not hmac.compare_digest(head, meta.get("chain_head", "")):
            raise LedgerIntegrityError(
                f"{self._path}: the ledger's row chain does not end at its recorded head (a spend was removed or "
                f"the totals changed after it was written, or the file is corrupt); refusing to read or spend from it"
            )
        return rows

    def _rows(self, con):
        return [r[1:] for r in self._chain(con)]

    def _sum(self, con) -> tuple[Fraction, Fraction]:
        e = d = Fraction(0)
        for i, (_, _, eps, delta, *_) in enumerate(self._chain(con), start=1):
            e += _parse_frac(eps, self._path, f"spend {i}'s eps")
            d += _parse_frac(delta, self._path, f"spend {i}'s delta")
        return e, d

    # -- the PrivacyBudget storage hooks -------------------------------------------------------

    def _spent_exact(self) -> tuple[Fraction, Fraction]:
        with self._connect() as con:
            con.execute("BEGIN")  # one consistent snapshot
            try:
                return self._sum(con)
            finally:
                con.execute("COMMIT")

    def _charge(self, e: Fraction, d: Fraction, entry: LedgerEntry) -> LedgerEntry:
        with self._lock:
            tags = dict(self._tags)
        row = LedgerEntry(
            entry.what, entry.eps, entry.delta, _utc_now(), tags["spec"], tags["data"]
        )
        with self._connect() as con:
            con.execute("BEGIN IMMEDIATE")  # the write lock: no other spend can interleave
            try:
                spent = self._sum(con)
                if not self._fits(spent, e, d):
                    raise self._refusal(e, d, entry.what, spent)
                head = con.execute("SELECT value FROM meta WHERE key = 'chain_head'").fetchone()[
                    0
                ]  # verified by _sum
                last = con.execute(
                    "SELECT seq FROM sqlite_sequence WHERE name = 'spends'"
                ).fetchone()
                fields = (
                    int(last[0]) + 1 if last else 1,
                    row.what,
                    _frac_text(e),
                    _frac_text(d),
                    row.time,
                    row.spec,
                    row.data,
                )
                mac = _mac(self._key, head, fields)
                con.execute(
                    f"INSERT INTO spends ({_ROW_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (*fields, mac),
                )
                con.execute("UPDATE meta SET value = ? WHERE key = 'chain_head'", (mac,))
                con.execute("COMMIT")  # durable (synchronous=FULL) before the caller draws noise
            except BaseException:
                if con.in_transaction:
                    con.execute("ROLLBACK")
                raise
        return row

    def _entries(self) -> tuple[LedgerEntry, ...]:
        with self._connect() as con:
            rows = self._rows(con)
        return tuple(
            LedgerEntry(
                what,
                float(_parse_frac(eps, self._path, "eps")),
                float(_parse_frac(delta, self._path, "delta")),
                time,
                spec,
                data,
            )
            for what, eps, delta, time, spec, data in rows
        )

    # -- extras ----------------------------------------------------------------------------------

    def history(self) -> list[dict]:
        """Every spend as a dict with the exact amounts as "p/q" text and as floats."""
        with self._connect() as con:
            rows = self._rows(con)
        out = []
        for what, eps, delta, time, spec, data in rows:
            e, d = _parse_frac(eps, self._path, "eps"), _parse_frac(delta, self._path, "delta")
            out.append(
                {
                    "what": what,
                    "eps": float(e),
                    "delta": float(d),
                    "eps_exact": _frac_text(e),
                    "delta_exact": _frac_text(d),
                    "time": time,
                    "spec": spec,
                    "data": data,
                }
            )
        return out

    def status(self) -> dict:
        """Total, spent and remaining (floats and exact "p/q" text) and the number of spends."""
        with self._connect() as con:
            con.execute("BEGIN")
            try:
                spent = self._sum(con)
                n = con.execute("SELECT COUNT(*) FROM spends").fetchone()[0]
            finally:
                con.execute("COMMIT")
        rem = (self._total[0] - spent[0], self._total[1] - spent[1])

        def pair(p):
            return {
                "eps": float(p[0]),
                "delta": float(p[1]),
                "eps_exact": _frac_text(p[0]),
                "delta_exact": _frac_text(p[1]),
            }

        return {
            "ledger": str(self._path),
            "created": self._created,
            "total": pair(self._total),
            "spent": pair(spent),
            "remaining": pair(rem),
            "spends": n,
        }

    def fingerprint(self, path) -> str:
        """``"hmac-sha256:<hex>"`` of the bytes of the file at ``path``, keyed by this ledger's
        secret (created with the ledger; added on first use to a ledger made without one)."""
        with self._connect() as con:
            con.execute("BEGIN IMMEDIATE")
            con.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('fingerprint_key', ?)",
                (secrets.token_hex(32),),
            )
            key = con.execute("SELECT value FROM meta WHERE key = 'fingerprint_key'").fetchone()[0]
            con.execute("COMMIT")
        mac = hmac.new(bytes.fromhex(key), digestmod=hashlib.sha256)
        with open(os.fspath(path), "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                mac.update(block)
        return "hmac-sha256:" + mac.hexdigest()

    def tag(self, *, spec: str | None = None, data: str | None = None) -> "Ledger":
        """Record these fingerprints with every later spend (None clears one). Returns self."""
        for name, v in (("spec", spec), ("data", data)):
            if v is not None and not isinstance(v, str):
                raise TypeError(f"{name} must be a str or None, got {type(v).__name__}")
        with self._lock:
            self._tags = {"spec": spec, "data": data}
        return self

    def __repr__(self) -> str:
        s, t = self.spent, self.total
        return (
            f"Ledger({str(self._path)!r}, spent=(eps={s[0]!r}, delta={s[1]!r}) of "
            f"total=(eps={t[0]!r}, delta={t[1]!r}), {len(self.ledger)} spends)"
        )
