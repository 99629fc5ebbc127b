"""Keyed integrity of the state matmech keeps in files (``docs/guide/threat-model.md``).

A state file (a stream, :mod:`matmech.stream.state`) is a chain of *links*: each commit
appends one, whose MAC is HMAC-SHA256 under the file's key over the previous link's MAC, the
link's position and its content (:func:`link_mac`). Whoever lacks the key can neither change a
link nor add one without the chain failing to verify. A chain alone cannot tell an older copy
of the file from the current one, so a :class:`HeadRecord` kept *outside* the file holds the
key and the position and MAC of the last link: it lives in the user's configuration directory
(:func:`config_dir`, mode 0700, the record 0600) or at a path the user declares. It is written
after the file's commit, so it may lag the file by one link (a crash between the two); a file
behind its record (an older copy, a truncation) or more than one link ahead of it is refused
(:meth:`HeadRecord.check`). A state file never returns anything a link holds before its
record covers that link, so the one link a record may lag never left the process.

Not detected: whoever can read the record has the key and can forge any file; deleting the
file and its record together leaves nothing to compare (it cannot refund a charge: the
ledger keeps it).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import json
import os
import re
import secrets
from pathlib import Path


#: The ``format`` of a head record.
RECORD_FORMAT = "matmech-head-record-1"
_ID = re.compile(r"^[0-9a-f]{16,64}$")


class IntegrityError(ValueError):
    """A state file or its head record does not verify: it was changed, truncated, replaced
    by an older copy or damaged after matmech wrote it. Nothing is read from it."""


def config_dir() -> Path:
    """Where head records live: ``$MATMECH_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/matmech``,
    else ``%APPDATA%/matmech`` on Windows, else ``~/.config/matmech``."""
    if os.environ.get("MATMECH_CONFIG_DIR"):
        return Path(os.environ["MATMECH_CONFIG_DIR"])
    if os.environ.get("XDG_CONFIG_HOME"):
        return Path(os.environ["XDG_CONFIG_HOME"]) / "matmech"
    if os.name == "nt" and os.environ.get("APPDATA"):
        return Path(os.environ["APPDATA"]) / "matmech"
    return Path.home() / ".config" / "matmech"


def link_mac(key: bytes, prev: bytes, position: int, *fields) -> bytes:
    """HMAC-SHA256 under ``key`` of (prev, position, fields...), each length-prefixed
    (fields: bytes-like, str or int), so no two different inputs share an encoding."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for v in (prev, position, *fields):
        b = str(v).encode() if isinstance(v, int) else v.encode() if isinstance(v, str) else v
        mac.update(len(memoryview(b).cast("B")).to_bytes(8, "big"))
        mac.update(b)  # a large blob is hashed where it is, not copied
    return mac.digest()


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # not every file system lets a directory be fsynced
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class HeadRecord:
    """The key of one state file and the head of its chain (``count`` links, the last MAC
    ``head``), in a small JSON file outside the state file. Make one with :meth:`create`,
    read it with :meth:`load`."""

    def __init__(self, path: Path, kind: str, ident: str, key: bytes, count: int, head: bytes):
        self.path, self.kind, self.id = path, kind, ident
        self.key, self.count, self.head = key, count, head

    @staticmethod
    def default_path(kind: str, ident: str, subject="") -> Path:
        """``config_dir()/<kind>s/<id>.key``; ``ident`` must be hex (it comes from the state
        file ``subject``, which is not trusted before its record is found)."""
        if not _ID.match(str(ident)):
            raise IntegrityError(
                f"{subject}: the {kind} file's id is not one matmech writes: it was altered, "
                "and is not read"
            )
        return config_dir() / f"{kind}s" / f"{ident}.key"

    def _mac(self) -> str:
        return link_mac(
            self.key, b"", self.count, RECORD_FORMAT, self.kind, self.id, self.head
        ).hex()

    def _text(self) -> str:
        return json.dumps(
            {
                "format": RECORD_FORMAT,
                "kind": self.kind,
                "id": self.id,
                "key": self.key.hex(),
                "count": self.count,
                "head": self.head.hex(),
                "mac": self._mac(),
            }
        )

    @classmethod
    def create(cls, path, kind: str, ident: str, count: int, head: bytes, key: bytes) -> HeadRecord:
        """Write a new record at ``path`` (mode 0600; its directory made 0700); refused if
        the file exists (a record is never replaced by a new key)."""
        p = Path(path)
        rec = cls(p, kind, ident, bytes(key), int(count), bytes(head))
        try:
            if not p.parent.exists():
                p.parent.mkdir(mode=0o700, parents=True)
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise FileExistsError(
                errno.EEXIST, f"a key file exists there (a {kind}'s key is never replaced)", str(p)
            ) from None
        except OSError as exc:
            raise OSError(
                exc.errno, f"cannot create the {kind}'s key file ({exc.strerror})", str(p)
            ) from None
        try:
            with os.fdopen(fd, "w") as f:
                f.write(rec._text())
                f.flush()
                os.fsync(f.fileno())
            _fsync_dir(p.parent)
        except OSError as exc:
            p.unlink(missing_ok=True)
            raise OSError(
                exc.errno, f"cannot write the {kind}'s key file ({exc.strerror})", str(p)
            ) from None
        return rec

    @staticmethod
    def new_key() -> bytes:
        return secrets.token_bytes(32)

    @classmethod
    def load(cls, path, kind: str, ident: str, *, subject="", hint: str = "") -> HeadRecord:
        """The record at ``path`` for the state file ``ident`` (``subject``: its path, for
        messages); IntegrityError when it is missing, damaged or belongs to another file."""
        p = Path(path)
        subject = f"{subject}: " if subject else ""
        try:
            d = json.loads(p.read_text())
            rec = cls(
                p,
                d["kind"],
                d["id"],
                bytes.fromhex(d["key"]),
                int(d["count"]),
                bytes.fromhex(d["head"]),
            )
            ok = (
                d["format"] == RECORD_FORMAT
                and len(rec.key) == 32
                and hmac.compare_digest(rec._mac(), d["mac"])
            )
        except FileNotFoundError:
            raise IntegrityError(
                f"{subject}no key file for this {kind} at {p}: it cannot be verified, so it is "
                f"not read{hint}"
            ) from None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise IntegrityError(
                f"{subject}its key file {p} is not a usable matmech key file ({type(exc).__name__})"
            ) from None
        if not ok:
            raise IntegrityError(f"{subject}its key file {p} is damaged or altered")
        if (rec.kind, rec.id) != (kind, ident):
            raise IntegrityError(
                f"{subject}the key file {p} belongs to another {rec.kind} ({rec.id}), "
                f"not {kind} {ident}"
            )
        return rec

    def check(self, count: int, macs, subject) -> int:
        """How far the state file ``subject`` of ``count`` links (``macs[i]`` the MAC of link
        i + 1) is ahead of this record: 0 or 1 (the record lags its last commit);
        IntegrityError for anything else, said in words a user can act on."""
        where, key = f"{subject}: the {self.kind} file", f"its key file {self.path}"
        if count < self.count:
            raise IntegrityError(
                f"{where} is older than {key} records ({count} of {self.count} commits): it "
                "was truncated or replaced by an earlier copy, and is not read"
            )
        if count > self.count + 1:
            raise IntegrityError(
                f"{where} is {count - self.count} commits ahead of {key}: the key file was "
                "replaced by an earlier copy; the file is not read"
            )
        if self.count and not hmac.compare_digest(bytes(macs[self.count - 1]), self.head):
            raise IntegrityError(
                f"{where} has a history other than the one {key} records (a copy of another "
                "state of it); it is not read"
            )
        return count - self.count

    def advance(self, count: int, head: bytes) -> None:
        """Record ``count`` links ending at ``head``: written to a new file, fsynced and
        renamed over the record (atomic); never moved backwards, also when another process
        advanced it meanwhile (the re-read and the rename hold a lock on the directory)."""
        if count <= self.count:
            return
        try:
            with _dir_lock(self.path.parent):
                with contextlib.suppress(IntegrityError):  # unreadable: rewritten from ours
                    now = HeadRecord.load(self.path, self.kind, self.id)
                    if now.key == self.key and now.count >= count:
                        self.count, self.head = now.count, now.head
                        return
                text = HeadRecord(self.path, self.kind, self.id, self.key, count, head)._text()
                tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
                try:
                    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                    with os.fdopen(fd, "w") as f:
                        f.write(text)
                        f.flush()
                        os.fsync(f.fileno())
                    os.replace(tmp, self.path)
                finally:
                    tmp.unlink(missing_ok=True)
                _fsync_dir(self.path.parent)
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"cannot update the {self.kind}'s key file ({exc.strerror or exc})",
                str(self.path),
            ) from None
        self.count, self.head = int(count), bytes(head)


@contextlib.contextmanager
def _dir_lock(directory: Path):
    """An exclusive lock on ``directory/.lock`` (POSIX ``flock``; none where there is no fcntl)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
