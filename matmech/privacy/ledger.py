"""A persistent privacy ledger: a :class:`~matmech.privacy.budget.PrivacyBudget` kept in SQLite.

A :class:`Ledger` is a file holding a total (ε, δ) (or ρ), its accountant, and one row per
spend with the privacy events it charged (:mod:`matmech.privacy.events`). It is a
``PrivacyBudget`` (a subclass with the same interface), so ``release``, ``measure`` and
``select_rows`` accept it as ``budget=``; every spend is charged before any noise is drawn.

How a spend stays safe:

* Each spend is one ``BEGIN IMMEDIATE`` transaction: it takes SQLite's write lock, reads and
  verifies every row, refuses an overspend under the ledger's accountant with
  :class:`~matmech.privacy.budget.BudgetExceededError` (rolling back: nothing is written) or
  inserts one row and commits. Only after the commit returns does the caller draw noise.
  Concurrent processes (and threads) serialise on the write lock, so together they cannot
  overspend.
* Amounts are stored as exact fractions in text, ``"p/q"``, with the budget's convention
  (a float means its shortest repr: 0.1 is ``"1/10"``), so 0.1 + 0.2 fits a 0.3 total; the
  events as JSON whose floats round-trip exactly.
* The file uses SQLite's rollback journal (``journal_mode=DELETE``, not WAL, so the ledger is
  the one file) with ``synchronous=FULL``. A process killed at any point either committed its
  row or did not (the next opener rolls the hot journal back); a spend is never lost once
  :meth:`~Ledger.spend` returned and never counted twice.

Integrity (``matmech-privacy-ledger-3``; the threat model is in docs/guide/budgets.md):

* every row carries an HMAC-SHA256 over its fields (its id, text, amounts, time,
  fingerprints, events) and the previous row's MAC; the first chains from a MAC of the
  ledger's id, totals, accountant and creation time;
* the key and a record of the head (the number of rows and the last row's MAC) are kept
  outside the file (:mod:`matmech.privacy.keystore`: the user's config directory, mode 0600,
  or ``$MATMECH_LEDGER_KEYS``, or ``keys=``), written after each commit and allowed to lag it
  by one row (a writer killed between its commit and its record; the next writer brings the
  record up to date before its own row);
* every read verifies the whole chain and compares it with the record, so an edited amount,
  a removed, reordered or inserted row, changed totals or accountant, a truncated tail (even
  with the in-file head moved back), a restored older copy of the file (a rollback: fewer rows
  than recorded) and a file turned back into an older format at a recorded ledger's path (a
  downgrade) are refused with :class:`LedgerIntegrityError`, and nothing is spent from them.
  What it cannot see: someone who can also write the key directory.

A ledger of an older format (1: no chain; 2: the key inside the file) found where no record
claims its path opens unchanged (same rows, totals, history, accountant ``"basic"``): it is
re-keyed into the current format on first open (format 2's in-file chain is verified first).
:meth:`Ledger.migrate` switches the accountant, as a row of the chain, when asked and only if
the history fits under the new one.

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

from matmech.privacy.accountant import ACCOUNTANTS, Total, accountant_for
from matmech.privacy.budget import (
    BudgetExceededError,
    LedgerEntry,
    PrivacyBudget,
    default_accountant,
    entry_amounts,
)
from matmech.privacy.events import ApproxDP, Event, event_from_dict, events_to_json
from matmech.privacy.keystore import KeyRecord, KeyStore
from matmech.privacy.params import check_delta, check_eps, exact, real


#: The value of the ``format`` key in a ledger's ``meta`` table.
LEDGER_FORMAT = "matmech-privacy-ledger-3"
_FORMAT_1 = "matmech-privacy-ledger-1"  # no row chain
_FORMAT_2 = "matmech-privacy-ledger-2"  # chained, the key inside the file
_OLD_FORMATS = (_FORMAT_1, _FORMAT_2)

_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE spends (id INTEGER PRIMARY KEY AUTOINCREMENT, what TEXT NOT NULL, "
    "eps TEXT NOT NULL, delta TEXT NOT NULL, time TEXT NOT NULL, spec TEXT, data TEXT, "
    "events TEXT, mac TEXT)",
)
_ROW_COLUMNS = "id, what, eps, delta, time, spec, data, events, mac"
_V2_COLUMNS = "id, what, eps, delta, time, spec, data"


class LedgerIntegrityError(ValueError):
    """The ledger does not verify against its chain and its key record: a row was changed,
    removed, inserted or reordered, the tail truncated, an older copy restored or the format
    turned back, or the file is corrupt. Nothing is spent."""


def _chain_key(secret_hex: str) -> bytes:
    """The row chain's key, derived from a secret (the key record's, or format 2's in-file one)."""
    return hmac.new(bytes.fromhex(secret_hex), b"matmech ledger row chain", hashlib.sha256).digest()


def _mac(key: bytes, prev: str, fields) -> str:
    msg = json.dumps(list(fields), ensure_ascii=False, separators=(",", ":"))
    return hmac.new(key, prev.encode() + b"\n" + msg.encode(), hashlib.sha256).hexdigest()


def _genesis(key: bytes, meta: dict) -> str:
    """The chain's start: a MAC of the ledger's id, totals, accountant and creation time."""
    return _mac(
        key,
        "",
        [
            LEDGER_FORMAT,
            meta.get("ledger_id"),
            meta.get("total_eps"),
            meta.get("total_delta"),
            meta.get("total_rho"),
            meta.get("accountant"),
            meta.get("created"),
        ],
    )


def _genesis_v2(key: bytes, meta: dict) -> str:
    return _mac(
        key, "", [_FORMAT_2, meta.get("total_eps"), meta.get("total_delta"), meta.get("created")]
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


def _disk_error(path, exc) -> OSError:
    return OSError(
        errno.ENOSPC if "full" in str(exc) else errno.EIO,
        f"cannot write the ledger ({exc}): is the disk full or the directory read-only? "
        "Nothing was created",
        str(path),
    )


class Ledger(PrivacyBudget):
    """A privacy budget stored in an SQLite file; create with :meth:`create`, reopen with
    :meth:`open`. Every method reads the file afresh, so several processes may share one
    ledger; :meth:`spend` is atomic across them.

    Parameters
    ----------
    path : str or os.PathLike
        The SQLite file (use :meth:`create` or :meth:`open` rather than the constructor).
    keys : str or os.PathLike, optional
        The key directory (default ``$MATMECH_LEDGER_KEYS``, else the user's config
        directory: :mod:`matmech.privacy.keystore`).

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
    LedgerIntegrityError
        A ledger that does not verify against its chain and key record.
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

    def __init__(self, path: str | os.PathLike, *, keys=None) -> None:
        """Open an existing ledger (same as :meth:`open`)."""
        self._path = Path(os.fspath(path))
        self._store = KeyStore(keys)
        self._lock = (
            threading.Lock()
        )  # guards the tags and the accountant; the file has its own lock
        self._tags: dict[str, str | None] = {"spec": None, "data": None}
        if not self._path.exists():
            raise FileNotFoundError(
                f"{self._path}: no such ledger file (create one with Ledger.create or 'matmech budget init')"
            )
        self._where = str(self._path.resolve())
        with self._connect() as con:
            meta = self._read_meta(con)
            if meta["format"] in _OLD_FORMATS:
                meta = self._upgrade(con, meta)
            self._id = meta["ledger_id"]
            rec = self._store.read(self._id)
            if rec is None:
                raise LedgerIntegrityError(
                    f"{self._path}: no key record for this ledger (id {self._id}) in {self._store.dir}: it "
                    f"was created under another key directory (set MATMECH_LEDGER_KEYS or pass keys=) or its "
                    "record was removed; refusing to read or spend from it"
                )
            self._key = _chain_key(rec.key)
            others = [
                r.ledger_id for r in self._store.claiming(self._where) if r.ledger_id != self._id
            ]
            if others:
                raise LedgerIntegrityError(
                    f"{self._path}: the ledger recorded at this path is {others[0]}, but the file is ledger "
                    f"{self._id} (the file was replaced); if that ledger was retired, remove its key record "
                    f"{self._store.dir / (others[0] + '.json')}"
                )
            self._total = Total(
                _parse_frac(meta["total_eps"], self._path, "total eps")
                if meta.get("total_eps")
                else None,
                _parse_frac(meta.get("total_delta"), self._path, "total delta"),
                _parse_frac(meta["total_rho"], self._path, "total rho")
                if meta.get("total_rho")
                else None,
            )
            self._created = meta.get("created")
            self._acct = accountant_for(meta.get("accountant", "basic"))
            self._load(con)  # refuses a broken chain on open
        if rec.path != self._where:  # a moved ledger: its record follows it
            with contextlib.suppress(OSError):
                self._store.advance(self._id, rec.rows, rec.head, path=self._where)

    # -- files -------------------------------------------------------------------------------

    @classmethod
    def create(cls, path, eps, delta=0.0, *, accountant: str | None = None, keys=None) -> Ledger:
        """A new ledger file at ``path`` with total (eps, delta) and ``accountant`` (default
        ``"zcdp"`` when δ > 0, ``"basic"`` when δ = 0); FileExistsError if the file exists
        (a ledger is never silently replaced). Its key record is written to the key
        directory (``keys``) first; a full disk is an OSError saying so, and leaves nothing."""
        check_eps(eps)
        check_delta(delta)
        name = default_accountant(delta) if accountant is None else accountant
        total = Total(exact(eps), exact(delta))
        accountant_for(name).check_total(total)
        return cls._create(path, total, name, keys)

    @classmethod
    def create_from_rho(cls, path, rho, delta, *, keys=None) -> Ledger:
        """A new ledger declared in zCDP (total ``rho``, reported at ``delta``; accountant
        ``"zcdp"``), as :meth:`PrivacyBudget.from_rho` in memory."""
        r = real(rho, "rho")
        if not (r > 0 and r < float("inf")):
            raise ValueError(f"rho must be a positive finite number, got {rho!r}")
        d = check_delta(delta, positive=True)
        return cls._create(path, Total(None, exact(d), exact(r)), "zcdp", keys)

    @classmethod
    def _create(cls, path, total: Total, accountant: str, keys) -> Ledger:
        p = Path(os.fspath(path))
        store = KeyStore(keys)
        try:
            fd = os.open(
                p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600
            )  # atomic: refuse an existing file
        except FileExistsError:
            raise FileExistsError(
                errno.EEXIST, "the file exists (a ledger is never replaced)", str(p)
            ) from None
        os.close(fd)
        where = str(p.resolve())
        meta = {
            "format": LEDGER_FORMAT,
            "ledger_id": KeyStore.new_id(),
            "total_eps": "" if total.eps is None else _frac_text(total.eps),
            "total_delta": _frac_text(total.delta),
            "total_rho": "" if total.rho is None else _frac_text(total.rho),
            "accountant": accountant,
            "created": _utc_now(),
            "fingerprint_key": secrets.token_hex(32),
        }
        secret = KeyStore.new_key()
        made_record = False
        try:
            store.create(
                KeyRecord(meta["ledger_id"], secret, 0, _genesis(_chain_key(secret), meta), where)
            )
            made_record = True
            store.detach(where, keep=meta["ledger_id"])  # a ledger deleted here before is retired
            con = sqlite3.connect(str(p), timeout=_TIMEOUT, isolation_level=None)
            try:
                con.execute("PRAGMA journal_mode=DELETE")
                con.execute("PRAGMA synchronous=FULL")
                con.execute("BEGIN IMMEDIATE")
                for stmt in _SCHEMA:
                    con.execute(stmt)
                con.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", list(meta.items()))
                con.execute("COMMIT")
            finally:
                con.close()
        except sqlite3.Error as exc:
            cls._undo_create(p, store, meta["ledger_id"] if made_record else None)
            raise _disk_error(p, exc) from None
        except BaseException:
            cls._undo_create(p, store, meta["ledger_id"] if made_record else None)
            raise
        return cls(p, keys=keys)

    @staticmethod
    def _undo_create(p: Path, store: KeyStore, ledger_id: str | None) -> None:
        with contextlib.suppress(OSError):
            p.unlink()
        with contextlib.suppress(OSError):
            Path(str(p) + "-journal").unlink()
        if ledger_id is not None:
            with contextlib.suppress(OSError):
                store.remove(ledger_id)

    @classmethod
    def open(cls, path, *, keys=None) -> Ledger:
        """The existing ledger at ``path`` (FileNotFoundError if none; ValueError if the file
        is not a matmech ledger; LedgerIntegrityError if it does not verify)."""
        return cls(path, keys=keys)

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
            if isinstance(exc, sqlite3.OperationalError) and (
                "full" in str(exc) or "I/O" in str(exc) or "readonly" in str(exc)
            ):
                raise OSError(
                    f"{self._path}: cannot write the ledger ({exc}); nothing was spent"
                ) from None
            raise ValueError(f"{self._path}: not a usable matmech ledger ({exc})") from None
        finally:
            con.close()

    def _read_meta(self, con) -> dict:
        try:
            meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
            con.execute(f"SELECT {_V2_COLUMNS} FROM spends LIMIT 0").fetchall()
        except sqlite3.DatabaseError:
            meta = {}
        fmt = meta.get("format")
        if fmt not in (LEDGER_FORMAT, *_OLD_FORMATS):
            raise ValueError(f"{self._path}: not a matmech privacy ledger")
        need = {"ledger_id", "accountant", "total_delta"} if fmt == LEDGER_FORMAT else set()
        if fmt == _FORMAT_2:
            need = {"fingerprint_key", "chain_head"}
        if not need <= set(meta):
            raise LedgerIntegrityError(
                f"{self._path}: corrupt ledger: its {', '.join(sorted(need - set(meta)))} missing"
            )
        return meta

    # -- older formats -----------------------------------------------------------------------

    def _old_rows(self, con, meta) -> list:
        """An older ledger's rows (id, what, eps, delta, time, spec, data); format 2's chain
        verified with its in-file key first."""
        rows = [tuple(r) for r in con.execute(f"SELECT {_V2_COLUMNS} FROM spends ORDER BY id")]
        if meta["format"] == _FORMAT_2:
            key = _chain_key(meta["fingerprint_key"])
            head = _genesis_v2(key, meta)
            macs = [r[0] for r in con.execute("SELECT mac FROM spends ORDER BY id")]
            for i, (row, mac) in enumerate(zip(rows, macs), start=1):
                head = _mac(key, head, row)
                if mac is None or not hmac.compare_digest(head, str(mac)):
                    raise self._broken(i)
            if not hmac.compare_digest(head, meta.get("chain_head", "")):
                raise self._broken(None)
        return rows

    def _upgrade(self, con, meta) -> dict:
        """An older ledger → the current format: new id and key (or those of a record whose
        upgrade of this very file was interrupted), the rows chained as found, accountant
        ``"basic"``. An older-format file at a path a record claims is refused unless it is
        exactly that interrupted upgrade (a downgrade otherwise)."""
        con.execute("BEGIN IMMEDIATE")
        try:
            meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
            if meta.get("format") == LEDGER_FORMAT:  # another process upgraded it meanwhile
                con.execute("COMMIT")
                return meta
            rows = self._old_rows(con, meta)
            new = {k: meta[k] for k in ("total_eps", "total_delta", "created") if k in meta}
            new.update(format=LEDGER_FORMAT, total_rho="", accountant="basic")
            new["fingerprint_key"] = meta.get("fingerprint_key") or secrets.token_hex(32)
            claims = self._store.claiming(self._where)
            rec = claims[0] if len(claims) == 1 else None
            if claims:
                new["ledger_id"] = claims[0].ledger_id
                key = _chain_key(claims[0].key)
                macs = self._chain_macs(key, new, [(*r, None, None) for r in rows])
                if rec is None or rec.rows != len(rows) or rec.head != macs[-1]:
                    raise LedgerIntegrityError(
                        f"{self._path}: this path holds ledger {claims[0].ledger_id} (format 3, "
                        f"{claims[0].rows} spends recorded), but the file now claims the older format "
                        f"{meta.get('format')!r} and its rows do not match the record: a ledger turned "
                        "back to an older format (a downgrade) is refused"
                    )
            else:
                new["ledger_id"] = KeyStore.new_id()
                secret = KeyStore.new_key()
                key = _chain_key(secret)
                macs = self._chain_macs(key, new, [(*r, None, None) for r in rows])
                rec = KeyRecord(new["ledger_id"], secret, len(rows), macs[-1], self._where)
                self._store.create(rec)  # before the commit: a crash leaves an upgrade to redo
            cols = {r[1] for r in con.execute("PRAGMA table_info(spends)")}
            for col in ("events", "mac"):
                if col not in cols:
                    con.execute(f"ALTER TABLE spends ADD COLUMN {col} TEXT")
            for row, mac in zip(rows, macs[1:]):
                con.execute("UPDATE spends SET mac = ?, events = NULL WHERE id = ?", (mac, row[0]))
            con.execute("DELETE FROM meta WHERE key = 'chain_head'")
            con.executemany(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", list(new.items())
            )
            con.execute("COMMIT")
        except BaseException:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise
        return new

    @staticmethod
    def _chain_macs(key: bytes, meta: dict, rows) -> list[str]:
        """[genesis, mac of row 1, …] for rows (id, …, events, mac) of the current format."""
        macs = [_genesis(key, meta)]
        for row in rows:
            macs.append(_mac(key, macs[-1], row[:-1]))
        return macs

    # -- reading and verifying -----------------------------------------------------------------

    def _broken(self, i: int | None) -> LedgerIntegrityError:
        if i is None:
            return LedgerIntegrityError(
                f"{self._path}: the ledger's row chain does not end at its recorded head (a spend was "
                "removed or the totals changed after it was written, or the file is corrupt); refusing "
                "to read or spend from it"
            )
        where = "the totals or " if i == 1 else ""
        return LedgerIntegrityError(
            f"{self._path}: the ledger's row chain is broken at spend {i} ({where}that row, or the order of "
            "the rows, was changed after it was written, or the file is corrupt); refusing to read or spend "
            f"from it (spends 1..{i - 1} verify)"
        )

    def _load(self, con, *, catch_up: bool = False) -> tuple[list[LedgerEntry], str]:
        """Every row as a :class:`LedgerEntry`, the chain verified from the ledger's start to
        its last row and compared with the key record (a lag of one row allowed; with
        ``catch_up`` a lagging record is brought up to date), and the last row's MAC. Sets
        the accountant in force.

        The rows and the record are read in one transaction: outside the caller's, a read
        transaction of its own, holding SQLite's shared lock from the first read, so no spend
        can commit between reading the rows and reading the record."""
        if not con.in_transaction:
            con.execute("BEGIN")
            try:
                return self._load(con, catch_up=catch_up)
            finally:
                con.execute("COMMIT")
        meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        if meta.get("format") != LEDGER_FORMAT or meta.get("ledger_id") != self._id:
            raise LedgerIntegrityError(
                f"{self._path}: the ledger's format or id changed after it was opened"
            )
        head = _genesis(self._key, meta)
        macs = [head]
        entries = []
        accountant = meta.get("accountant")
        for i, (*fields, mac) in enumerate(
            con.execute(f"SELECT {_ROW_COLUMNS} FROM spends ORDER BY id"), start=1
        ):
            head = _mac(self._key, head, fields)
            if mac is None or not hmac.compare_digest(head, str(mac)):
                raise self._broken(i)
            macs.append(head)
            entry, switch = self._entry_of(i, fields)
            accountant = switch or accountant
            entries.append(entry)
        rec = self._store.read(self._id)
        if rec is None:
            raise LedgerIntegrityError(
                f"{self._path}: the key record of ledger {self._id} vanished from {self._store.dir}"
            )
        n = len(entries)
        if rec.rows > n or (rec.rows == n and not hmac.compare_digest(rec.head, head)):
            raise LedgerIntegrityError(
                f"{self._path}: the ledger holds {n} spend(s) but its key record says {rec.rows} were "
                "made: the file was truncated or an older copy restored (a rollback); refusing to read or "
                "spend from it"
            )
        if rec.rows < n - 1 or (
            rec.rows == n - 1 and not hmac.compare_digest(rec.head, macs[n - 1])
        ):
            raise LedgerIntegrityError(
                f"{self._path}: the ledger holds {n} spend(s) but its key record says {rec.rows}: more than "
                "the one spend a crash can leave unrecorded; refusing to read or spend from it"
            )
        if catch_up and rec.rows == n - 1:
            self._store.advance(self._id, n, head)
        self._acct = accountant_for(accountant)
        return entries, head

    def _entry_of(self, i: int, fields) -> tuple[LedgerEntry, str | None]:
        _, what, eps, delta, time, spec, data, events = fields
        e = _parse_frac(eps, self._path, f"spend {i}'s eps")
        d = _parse_frac(delta, self._path, f"spend {i}'s delta")
        switch = None
        evs: tuple[Event, ...]
        try:
            parsed = None if events is None else json.loads(events)
            if parsed is None:
                evs = (ApproxDP(e, d),)  # a row of an older format: its exact amounts
            elif isinstance(parsed, dict):  # a migration: no privacy cost
                switch = accountant_for(parsed.get("migrate")).name
                evs = ()
            else:
                evs = tuple(event_from_dict(x) for x in parsed)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{self._path}: corrupt ledger: spend {i}'s events: {exc}") from None
        return LedgerEntry(what, float(e), float(d), time, spec, data, evs), switch

    # -- the PrivacyBudget storage hooks -------------------------------------------------------

    def _entries(self) -> tuple[LedgerEntry, ...]:
        with self._connect() as con:
            return tuple(self._load(con)[0])

    def _charge(self, entry: LedgerEntry) -> LedgerEntry:
        with self._lock:
            tags = dict(self._tags)
        row = LedgerEntry(
            entry.what, entry.eps, entry.delta, _utc_now(), tags["spec"], tags["data"], entry.events
        )
        amounts = entry_amounts(entry.events, self._total.delta)
        return self._append(
            row,
            amounts,
            events_to_json(entry.events),
            lambda entries: self._check_fits(entries, row),
        )

    def _append(self, row: LedgerEntry, amounts, events: str, check) -> LedgerEntry:
        """One verified, checked, chained row in a write transaction, then the key record."""
        with self._connect() as con:
            con.execute("BEGIN IMMEDIATE")  # the write lock: no other spend can interleave
            try:
                entries, head = self._load(con, catch_up=True)
                check(entries)
                last = con.execute(
                    "SELECT seq FROM sqlite_sequence WHERE name = 'spends'"
                ).fetchone()
                fields = (
                    int(last[0]) + 1 if last else 1,
                    row.what,
                    _frac_text(amounts[0]),
                    _frac_text(amounts[1]),
                    row.time,
                    row.spec,
                    row.data,
                    events,
                )
                mac = _mac(self._key, head, fields)
                con.execute(
                    f"INSERT INTO spends ({_ROW_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (*fields, mac),
                )
                con.execute("COMMIT")  # durable (synchronous=FULL) before the caller draws noise
            except BaseException:
                if con.in_transaction:
                    con.execute("ROLLBACK")
                raise
        with contextlib.suppress(OSError):  # may lag one row; the next writer catches it up
            self._store.advance(self._id, len(entries) + 1, mac)
        return row

    # -- extras ----------------------------------------------------------------------------------

    def migrate(self, accountant: str) -> Ledger:
        """Switch the ledger to ``accountant`` (recorded as a row of the chain, no privacy
        cost); refused with BudgetExceededError if what was spent does not fit the total
        under it (e.g. ``"zcdp"`` → ``"basic"`` after many Gaussian releases). Returns self."""
        acct = accountant_for(accountant)
        acct.check_total(self._total)

        def check(entries):
            p = acct.parts([leaf for e in entries for ev in e.events for leaf in ev.leaves()])
            if not acct.fits(self._total, p):
                raise BudgetExceededError(
                    f"cannot migrate to the {acct.name!r} accountant: what was spent does not fit the "
                    f"total under it (spent {acct.spent(self._total, p)})"
                )

        row = LedgerEntry(f"migrate to the {acct.name!r} accountant", 0.0, 0.0, _utc_now())
        self._append(row, (Fraction(0), Fraction(0)), json.dumps({"migrate": acct.name}), check)
        return self

    def history(self) -> list[dict]:
        """Every spend as a dict with the exact amounts as "p/q" text and as floats, and its
        events."""
        out = []
        for e in self._entries():
            exact_e, exact_d = (
                entry_amounts(e.events, self._total.delta)
                if e.events
                else (Fraction(0), Fraction(0))
            )
            out.append(
                {
                    "what": e.what,
                    "eps": e.eps,
                    "delta": e.delta,
                    "eps_exact": _frac_text(exact_e),
                    "delta_exact": _frac_text(exact_d),
                    "time": e.time,
                    "spec": e.spec,
                    "data": e.data,
                    "events": [ev.to_dict() for ev in e.events],
                }
            )
        return out

    def status(self) -> dict:
        """Total, spent and remaining under the ledger's accountant (floats and "p/q" text),
        the spent (ε, δ) under every accountant, the remaining ρ and the number of spends."""
        entries = self._entries()
        p = self._parts(entries)

        def pair(v):
            return {
                "eps": float(v[0]),
                "delta": float(v[1]),
                "eps_exact": _frac_text(exact(v[0])),
                "delta_exact": _frac_text(exact(v[1])),
            }

        under = {}
        for name, acct in ACCOUNTANTS.items():
            try:
                if self._total.eps is None and name != "zcdp":
                    continue
                under[name] = pair(acct.spent(self._total, acct.parts(p.leaves)))
            except ImportError as exc:
                under[name] = {"unavailable": str(exc)}
        return {
            "ledger": str(self._path),
            "created": self._created,
            "accountant": self._acct.name,
            "total": pair(self.total),
            "total_rho": self.total_rho,
            "spent": pair(self._acct.spent(self._total, p)),
            "remaining": pair(self._acct.remaining(self._total, p)),
            "remaining_rho": self._acct.remaining_rho(self._total, p),
            "spent_under": under,
            "spends": sum(1 for e in entries if e.events),
        }

    def fingerprint(self, path) -> str:
        """``"hmac-sha256:<hex>"`` of the bytes of the file at ``path``, keyed by this ledger's
        fingerprint secret (created with the ledger)."""
        with self._connect() as con:
            key = con.execute("SELECT value FROM meta WHERE key = 'fingerprint_key'").fetchone()
        if key is None:
            raise LedgerIntegrityError(
                f"{self._path}: corrupt ledger: its fingerprint key is missing"
            )
        mac = hmac.new(bytes.fromhex(key[0]), digestmod=hashlib.sha256)
        with open(os.fspath(path), "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                mac.update(block)
        return "hmac-sha256:" + mac.hexdigest()

    def tag(self, *, spec: str | None = None, data: str | None = None) -> Ledger:
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
            f"total=(eps={t[0]!r}, delta={t[1]!r}), {self._acct.name}, {len(self.ledger)} spends)"
        )
