"""What this process can still allocate and write: the memory and disk rooms every check uses.

A release refuses, before anything is read or spent, work whose estimated memory or output
does not fit (issue 31). "Fits" is judged against the limit the process really has, not the
machine's size:

* memory (:func:`memory_room`): the smallest of the address-space limit less the address
  space already mapped (``RLIMIT_AS`` − VmSize: what ``ulimit -v`` bounds), the data-segment
  limit less the data already mapped (``RLIMIT_DATA`` − VmData), the room left in every
  cgroup the process belongs to (v2 ``memory.max`` − ``memory.current``, v1
  ``memory.limit_in_bytes`` − ``memory.usage_in_bytes``, page cache the kernel can drop
  counted as free) and the RAM the kernel reports available (``MemAvailable``, Linux
  ``/proc/meminfo``); on a system without these, the physical memory;
* disk (:func:`disk_room`): the bytes an unprivileged user may still write on the file
  system of a path (``statvfs`` ``f_bavail``), and no more than the file-size limit
  (``RLIMIT_FSIZE``) in one file.

:func:`check_memory` and :func:`check_disk` raise :class:`SizeError` (a ``ValueError``)
naming the estimate, the room and the limit that bounds it. :func:`reserved` sets memory
aside for work the caller does after a call (e.g. the command line's output), so the
call's own check leaves room for it; :func:`preallocate` gives a file its blocks before a
spend, so writing it afterwards cannot meet a full disk.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import functools
import math
import os
from dataclasses import dataclass
from pathlib import Path


class SizeError(ValueError):
    """A request is too large for this machine; raised before anything is allocated."""


@dataclass(frozen=True)
class Room:
    """``bytes`` this process can still use and ``limit``, the words naming what bounds it
    (e.g. ``"address-space limit (ulimit -v) 6 GiB, 1.2 GiB mapped"``)."""

    bytes: int
    limit: str


def format_bytes(nbytes) -> str:
    """``nbytes`` in B / KiB / ... / EiB (and as a power of ten beyond)."""
    v = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if v < 1024 or unit == "EiB":
            return f"{v:.3g} {unit}" if v < 1e6 else f"{float(nbytes):.3g} B"
        v /= 1024
    return f"{float(nbytes):.3g} B"  # pragma: no cover


_RESERVED: contextvars.ContextVar[int] = contextvars.ContextVar("matmech_reserved", default=0)


@contextlib.contextmanager
def reserved(nbytes: int):
    """Within the block, :func:`memory_room` is ``nbytes`` smaller: memory the caller needs
    after the calls it makes there (nested reservations add up; per thread and task)."""
    token = _RESERVED.set(_RESERVED.get() + max(0, int(nbytes)))
    try:
        yield
    finally:
        _RESERVED.reset(token)


#: The system's room read once inside :func:`steady_room` (a one-item list, filled on first
#: use), or None outside it.
_STEADY: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "matmech_steady", default=None
)


@contextlib.contextmanager
def steady_room():
    """Within the block, :func:`memory_room` reads the limits and the RAM once (on first use)
    and reuses that figure, less :func:`reserved`: for computations that check many small
    allocations in a row and allocate little in between (planning: thousands of checks of a
    few KiB, each of which read ``/proc`` and the cgroup files, were a third of a product
    domain's advise). Nested blocks share the outer one's figure."""
    if _STEADY.get() is not None:
        yield
        return
    token = _STEADY.set([])
    try:
        yield
    finally:
        _STEADY.reset(token)


def steady(fn):
    """``fn`` run inside :func:`steady_room` (a decorator for planning entry points)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with steady_room():
            return fn(*args, **kwargs)

    return wrapper


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.isdigit() else None


def _status(root: Path) -> dict:
    """VmSize and VmData of this process in bytes (``/proc/self/status``)."""
    out = {}
    for line in (_read(root / "proc/self/status") or "").splitlines():
        key, _, value = line.partition(":")
        if key in ("VmSize", "VmData") and value.split() and value.split()[0].isdigit():
            out[key] = int(value.split()[0]) * 1024
    return out


def _rlimit_rooms(root: Path) -> list:
    try:
        import resource
    except ImportError:  # pragma: no cover - non-POSIX
        return []
    out, status = [], None
    for name, words, used_key in (
        ("RLIMIT_AS", "address-space limit (ulimit -v)", "VmSize"),
        ("RLIMIT_DATA", "data-segment limit (ulimit -d)", "VmData"),
    ):
        which = getattr(resource, name, None)
        if which is None:  # pragma: no cover - platform without it
            continue
        soft = resource.getrlimit(which)[0]
        if soft == resource.RLIM_INFINITY or soft < 0:
            continue
        status = _status(root) if status is None else status
        used = status.get(used_key, 0)
        out.append(
            Room(soft - used, f"{words} {format_bytes(soft)}, {format_bytes(used)} already mapped")
        )
    return out


def _mounts(root: Path) -> list:
    """(mount root, mount point, version, controllers) of the cgroup file systems
    (``/proc/self/mountinfo``)."""
    out: list[tuple[str, str, int, tuple[str, ...]]] = []
    for line in (_read(root / "proc/self/mountinfo") or "").splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        fstype = tail[0]
        if fstype == "cgroup2":
            out.append((fields[3], fields[4], 2, ()))
        elif fstype == "cgroup":
            out.append((fields[3], fields[4], 1, tuple(tail[2].split(","))))
    return out


def _stat_value(text: str | None, key: str) -> int:
    for line in (text or "").splitlines():
        k, _, v = line.partition(" ")
        if k == key and v.strip().isdigit():
            return int(v)
    return 0


@functools.lru_cache(maxsize=8)
def _cgroup_limits(root: Path) -> tuple:
    """(directory, version, limit) of every cgroup (and ancestor) this process belongs to
    whose memory is limited; found once per process (a limit set later is not seen)."""
    paths = {}
    for line in (_read(root / "proc/self/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            paths[2] = parts[2]
        elif "memory" in parts[1].split(","):
            paths[1] = parts[2]
    out = []
    for mroot, point, version, controllers in _mounts(root):
        if version not in paths or (version == 1 and "memory" not in controllers):
            continue
        rel = os.path.relpath(paths[version], mroot)
        if rel.startswith(".."):
            continue  # the process's cgroup is not under this mount
        base = root / point.lstrip("/")
        d = base if rel == "." else Path(os.path.normpath(base / rel))
        for _ in range(64):  # the cgroup and its ancestors up to the mount: each limit holds
            name = "memory.max" if version == 2 else "memory.limit_in_bytes"
            limit = _int(_read(d / name))  # v2 "max" and v1 2**63 - 4096: no limit
            if limit is not None and limit < (1 << 60):
                out.append((d, version, limit))
            if d == base:
                break
            d = d.parent
    return tuple(out)


def _cgroup_rooms(root: Path) -> list:
    """The room left in every limited cgroup of this process: the limit less the memory
    charged, page cache the kernel can reclaim (inactive file pages) counted as free."""
    out = []
    for d, version, limit in _cgroup_limits(root):
        used = _int(_read(d / ("memory.current" if version == 2 else "memory.usage_in_bytes")))
        if used is None:
            continue
        stat = _stat_value(
            _read(d / "memory.stat"), "inactive_file" if version == 2 else "total_inactive_file"
        )
        key = "memory.max" if version == 2 else "memory.limit_in_bytes"
        out.append(Room(limit - max(0, used - stat), f"cgroup {key} {format_bytes(limit)} of {d}"))
    return out


def _available(root: Path) -> Room | None:
    info = {}
    for line in (_read(root / "proc/meminfo") or "").splitlines():
        key, _, value = line.partition(":")
        if value.split() and value.split()[0].isdigit():
            info[key] = int(value.split()[0]) * 1024
        if key == "MemAvailable":
            break
    if "MemAvailable" in info:
        return Room(info["MemAvailable"], "available RAM (MemAvailable)")
    if "MemFree" in info:  # kernels before 3.14
        return Room(info["MemFree"] + info.get("Cached", 0), "free RAM (MemFree + Cached)")
    return None


def _physical() -> Room:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        total = 16 << 30
    return Room(int(total), "physical memory")


def memory_room(*, root: str | os.PathLike = "/") -> Room:
    """The memory this process can still allocate: the smallest room of its address-space
    and data limits, its cgroups and the available RAM (the module's docstring), less what
    :func:`reserved` set aside. ``root``: where ``/proc`` and ``/sys`` are read (tests)."""
    steady = _STEADY.get() if os.fspath(root) == "/" else None
    if steady:
        room = steady[0]
    else:
        base = Path(root)
        rooms = _rlimit_rooms(base) + _cgroup_rooms(base)
        avail = _available(base)
        rooms.append(avail if avail is not None else _physical())
        room = min(rooms, key=lambda r: r.bytes)
        if steady is not None:
            steady.append(room)
    held = _RESERVED.get()
    if held:
        room = Room(room.bytes - held, f"{room.limit}; {format_bytes(held)} set aside for later")
    return Room(max(0, room.bytes), room.limit)


def check_memory(
    nbytes, what: str, *, limit=None, limit_name: str = "max_memory", after: str = ""
) -> int:
    """Refuse (:class:`SizeError`) work ``what`` whose estimated memory ``nbytes`` exceeds
    the room: :func:`memory_room`, or ``limit`` bytes (an explicit cap, named
    ``limit_name`` in the message, e.g. a release's ``max_memory``) when that is smaller;
    ``after`` ends the message (e.g. "; nothing was spent"). Returns the estimate as an int."""
    need = int(nbytes) if not isinstance(nbytes, float) or math.isfinite(nbytes) else 2**1023
    if limit is not None and need > int(limit):
        named = f" ({limit_name})" if limit_name else ""
        raise SizeError(
            f"{what} needs about {format_bytes(need)} of memory, more than the "
            f"{format_bytes(int(limit))} allowed{named}{after}"
        )
    room = memory_room()
    if need > room.bytes:
        raise SizeError(
            f"{what} needs about {format_bytes(need)} of memory, more than the "
            f"{format_bytes(room.bytes)} this process can still allocate ({room.limit}){after}"
        )
    return need


def _existing(path) -> Path:
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p if p.is_dir() else p.parent


def disk_room(path) -> Room:
    """The bytes one file at ``path`` (or in the directory ``path``) may still take: the
    free blocks an unprivileged user may write on its file system (``statvfs``), and at
    most the file-size limit (``RLIMIT_FSIZE``, ``ulimit -f``)."""
    d = _existing(path)
    st = os.statvfs(d)
    room = Room(int(st.f_bavail) * int(st.f_frsize), f"free on the file system of {d}")
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if soft != resource.RLIM_INFINITY and 0 <= soft < room.bytes:
            room = Room(int(soft), "the file-size limit (ulimit -f)")
    except (ImportError, AttributeError, ValueError, OSError):  # pragma: no cover
        pass
    return room


def check_disk(nbytes, path, what: str, *, after: str = "") -> int:
    """Refuse (:class:`SizeError`) writing about ``nbytes`` at ``path`` when they do not fit
    (:func:`disk_room`); ``after`` ends the message. Returns the estimate."""
    need = int(nbytes)
    room = disk_room(path)
    if need > room.bytes:
        raise SizeError(
            f"{what} needs about {format_bytes(need)} on disk, more than the "
            f"{format_bytes(room.bytes)} {room.limit}{after}"
        )
    return need


def preallocate(fd: int, nbytes: int, what: str) -> bool:
    """Give the open file ``fd`` its first ``nbytes`` bytes on disk now
    (``posix_fallocate``), so writing them later cannot fail for lack of space; True when
    done, False where the file system or platform cannot (the caller's :func:`check_disk`
    is then the only guard). ENOSPC / EFBIG raise :class:`SizeError` naming ``what``."""
    if nbytes <= 0 or not hasattr(os, "posix_fallocate"):
        return False
    try:
        os.posix_fallocate(fd, 0, int(nbytes))
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            raise SizeError(
                f"{what} needs about {format_bytes(nbytes)} of disk and cannot reserve it "
                f"({os.strerror(exc.errno)})"
            ) from None
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENODEV, errno.ESPIPE):
            return False
        raise
    return True
