"""The ledger's key and head record, kept outside the ledger file.

A ledger's rows are chained by HMAC-SHA256 (:mod:`matmech.privacy.ledger`). If the key lived
in the file, anyone who can write the file could re-chain edited rows; if the head lived only
in the file, deleting the last rows and pointing the head at the last kept row, or restoring
an older copy of the whole file, would refund every spend since. So both live here, in one
small record per ledger in a directory the ledger file's editors are assumed not to control:

* ``$MATMECH_LEDGER_KEYS`` if set, else ``$XDG_CONFIG_HOME/matmech/ledgers``, else
  ``~/.config/matmech/ledgers`` (or a directory the caller declares, ``keys=``);
* one JSON file per ledger, ``<ledger id>.json`` (mode 0600 in a 0700 directory), holding the
  chain key, the number of rows and the MAC of the last row (the head), and the ledger's
  path (so that an old-format file found where a recorded ledger lives is refused);
* written after the ledger's SQLite commit, atomically (a new file renamed over the old one,
  both fsynced), only ever forward (a slower writer never moves it back; an exclusive
  ``flock`` orders writers), so it lags the file by at most the one row whose writer died
  between its commit and its record. Every writer first brings a lagging record up to date.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
from dataclasses import dataclass, replace
from pathlib import Path

from matmech import validate


#: The environment variable naming the key directory.
KEYS_ENV = "MATMECH_LEDGER_KEYS"
_FORMAT = "matmech-ledger-key-1"


def default_key_dir() -> Path:
    """``$MATMECH_LEDGER_KEYS``, else ``$XDG_CONFIG_HOME/matmech/ledgers``, else
    ``~/.config/matmech/ledgers``."""
    env = os.environ.get(KEYS_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "matmech" / "ledgers"


@dataclass(frozen=True)
class KeyRecord:
    """One ledger's record: ``ledger_id``, the chain ``key`` (hex), ``rows`` and ``head``
    (the MAC of row ``rows``, or of the chain's start when 0) and the ledger's ``path``."""

    ledger_id: str
    key: str
    rows: int
    head: str
    path: str | None

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": _FORMAT,
                "ledger_id": self.ledger_id,
                "key": self.key,
                "rows": self.rows,
                "head": self.head,
                "path": self.path,
            },
            indent=1,
        )


class KeyStore:
    """The key directory (module docstring)."""

    def __init__(self, directory=None) -> None:
        # a declared directory is checked where it is given (Ledger's keys=): a number or bytes
        # is a TypeError naming keys, not Python's "expected str, bytes or os.PathLike"
        self.dir = default_key_dir() if directory is None else validate.path(directory, "keys")

    def _file(self, ledger_id: str) -> Path:
        if not (len(ledger_id) == 32 and all(c in "0123456789abcdef" for c in ledger_id)):
            raise ValueError(f"not a ledger id: {ledger_id!r}")
        return self.dir / f"{ledger_id}.json"

    def _ensure_dir(self) -> None:
        try:
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise OSError(
                exc.errno, f"cannot create the ledger key directory ({exc.strerror})", str(self.dir)
            ) from None

    @staticmethod
    def new_id() -> str:
        return secrets.token_hex(16)

    @staticmethod
    def new_key() -> str:
        return secrets.token_hex(32)

    def read(self, ledger_id: str) -> KeyRecord | None:
        """The record of ``ledger_id``, or None when there is none."""
        try:
            text = self._file(ledger_id).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"cannot read the ledger's key record ({exc.strerror})",
                str(self._file(ledger_id)),
            ) from None
        return self._parse(text, self._file(ledger_id))

    @staticmethod
    def _parse(text: str, where) -> KeyRecord:
        try:
            d = json.loads(text)
            if d.get("format") != _FORMAT:
                raise ValueError
            rec = KeyRecord(
                str(d["ledger_id"]), str(d["key"]), int(d["rows"]), str(d["head"]), d.get("path")
            )
            bytes.fromhex(rec.key)
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ValueError(f"{where}: not a matmech ledger key record") from None
        return rec

    def claiming(self, path: str) -> list[KeyRecord]:
        """Every record whose ledger lives at ``path`` (a resolved path)."""
        out: list[KeyRecord] = []
        try:
            names = sorted(os.listdir(self.dir))
        except FileNotFoundError:
            return out
        for name in names:
            if not name.endswith(".json"):
                continue
            try:
                rec = self._parse((self.dir / name).read_text(encoding="utf-8"), self.dir / name)
            except (OSError, ValueError):
                continue
            if rec.path == path:
                out.append(rec)
        return out

    def create(self, rec: KeyRecord) -> None:
        """Write a new record (refused if one exists for that id)."""
        self._ensure_dir()
        with self._locked(rec.ledger_id):
            if self._file(rec.ledger_id).exists():
                raise FileExistsError(
                    errno.EEXIST, "a key record exists", str(self._file(rec.ledger_id))
                )
            self._write(rec)

    def remove(self, ledger_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._file(ledger_id).unlink()

    def advance(self, ledger_id: str, rows: int, head: str, path: str | None = None) -> None:
        """Move the record forward to (``rows``, ``head``), and to ``path`` when given; a
        record already past ``rows`` is left as it is (a slower writer never moves it back)."""
        with self._locked(ledger_id):
            cur = self.read(ledger_id)
            if cur is None:
                raise FileNotFoundError(
                    errno.ENOENT, "the ledger's key record vanished", str(self._file(ledger_id))
                )
            new = cur
            if rows > cur.rows:
                new = replace(new, rows=rows, head=head)
            if path is not None and rows >= cur.rows:
                new = replace(new, path=path)
            if new != cur:
                self._write(new)

    def rewrite(self, rec: KeyRecord) -> None:
        """Replace a record (a re-keyed or migrated ledger, under its writer's lock)."""
        with self._locked(rec.ledger_id):
            self._write(rec)

    def detach(self, path: str, keep: str | None = None) -> None:
        """Clear the path of every record claiming ``path`` except ``keep`` (a new ledger
        was created where an old one was deleted)."""
        for rec in self.claiming(path):
            if rec.ledger_id != keep:
                with self._locked(rec.ledger_id):
                    self._write(replace(rec, path=None))

    @contextlib.contextmanager
    def _locked(self, ledger_id: str):
        import fcntl

        self._ensure_dir()
        lock = self.dir / f"{ledger_id}.lock"
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _write(self, rec: KeyRecord) -> None:
        final = self._file(rec.ledger_id)
        tmp = final.with_name(f".{final.name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                data = rec.to_json().encode()
                while data:
                    data = data[os.write(fd, data) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, final)
            dfd = os.open(self.dir, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise OSError(
                exc.errno, f"cannot write the ledger's key record ({exc.strerror})", str(final)
            ) from None
