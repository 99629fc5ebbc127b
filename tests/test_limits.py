"""The memory and disk rooms every size check uses (matmech.limits, issue 31): the limit the
process really has (address-space and data limits, cgroups, available RAM; free disk and
the file-size limit), checked against a second method — what the kernel actually lets the
process allocate or write — in child processes with real limits."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from matmech import limits


def _fake_root(tmp_path, *, cgroup, mountinfo, files, meminfo="MemTotal: 100 kB\n"):
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text(cgroup)
    (tmp_path / "proc/self/mountinfo").write_text(mountinfo)
    (tmp_path / "proc/self/status").write_text("VmSize:\t 1000 kB\nVmData:\t 500 kB\n")
    (tmp_path / "proc/meminfo").write_text(meminfo)
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    limits._cgroup_limits.cache_clear()
    return tmp_path


V2 = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n"
V1 = (
    "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
    "36 31 0:33 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
)
GiB = 1 << 30


def test_cgroup_v2_room_is_the_tightest_limit_less_what_is_charged(tmp_path):
    root = _fake_root(
        tmp_path,
        cgroup="0::/jobs/one\n",
        mountinfo=V2,
        files={
            "sys/fs/cgroup/jobs/one/memory.max": "max\n",  # no limit of its own
            "sys/fs/cgroup/jobs/one/memory.current": "123\n",
            "sys/fs/cgroup/jobs/memory.max": f"{4 * GiB}\n",
            "sys/fs/cgroup/jobs/memory.current": f"{3 * GiB}\n",
            # reclaimable page cache counts as free
            "sys/fs/cgroup/jobs/memory.stat": f"anon 5\ninactive_file {GiB // 2}\n",
        },
        meminfo=f"MemTotal: 100 kB\nMemAvailable: {64 * GiB // 1024} kB\n",
    )
    room = limits.memory_room(root=root)
    assert room.bytes == 4 * GiB - (3 * GiB - GiB // 2)
    assert "cgroup memory.max 4 GiB" in room.limit and "jobs" in room.limit
    # the available RAM binds when it is smaller
    (root / "proc/meminfo").write_text("MemTotal: 100 kB\nMemAvailable: 1024 kB\n")
    assert limits.memory_room(root=root) == limits.Room(1 << 20, "available RAM (MemAvailable)")


def test_cgroup_v1_memory_controller_and_no_limit(tmp_path):
    root = _fake_root(
        tmp_path,
        cgroup="5:cpu:/x\n4:memory:/box/7\n0::/\n",
        mountinfo=V1,
        files={
            "sys/fs/cgroup/memory/box/7/memory.limit_in_bytes": f"{2 * GiB}\n",
            "sys/fs/cgroup/memory/box/7/memory.usage_in_bytes": f"{GiB}\n",
            "sys/fs/cgroup/memory/box/7/memory.stat": "total_inactive_file 4096\n",
            "sys/fs/cgroup/memory/box/memory.limit_in_bytes": "9223372036854771712\n",
            "sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
        },
        meminfo=f"MemAvailable: {64 * GiB // 1024} kB\n",
    )
    assert limits.memory_room(root=root).bytes == GiB + 4096
    # unlimited everywhere: the available RAM
    (root / "sys/fs/cgroup/memory/box/7/memory.limit_in_bytes").write_text("9223372036854771712\n")
    limits._cgroup_limits.cache_clear()
    assert limits.memory_room(root=root).limit == "available RAM (MemAvailable)"


def test_nothing_readable_falls_back_to_the_physical_memory(tmp_path):
    root = _fake_root(tmp_path, cgroup="", mountinfo="", files={}, meminfo="")
    assert limits.memory_room(root=root).limit == "physical memory"


def test_reserved_memory_is_taken_off_the_room_and_named(monkeypatch):
    monkeypatch.setattr(limits, "_available", lambda root: limits.Room(10 * GiB, "RAM"))
    monkeypatch.setattr(limits, "_rlimit_rooms", lambda root: [])
    monkeypatch.setattr(limits, "_cgroup_rooms", lambda root: [])
    with limits.reserved(3 * GiB):
        with limits.reserved(GiB):
            assert limits.memory_room().bytes == 6 * GiB
            with pytest.raises(
                limits.SizeError, match=r"\(RAM; 4 GiB set aside for later\); nothing$"
            ):
                limits.check_memory(7 * GiB, "a test", after="; nothing")
        assert limits.memory_room().bytes == 7 * GiB
    assert limits.memory_room().bytes == 10 * GiB
    with pytest.raises(
        limits.SizeError,
        match=r"a test needs about 2 GiB of memory, more than the 1 GiB allowed \(max_memory\)",
    ):
        limits.check_memory(2 * GiB, "a test", limit=GiB)
    assert limits.check_memory(GiB, "a test", limit=GiB) == GiB


def test_steady_room_reads_the_system_once_and_still_takes_reservations_off(monkeypatch):
    reads = []

    def available(root):
        reads.append(root)
        return limits.Room((10 - len(reads) + 1) * GiB, "RAM")  # 10 GiB, then 9, 8, ...

    monkeypatch.setattr(limits, "_available", available)
    monkeypatch.setattr(limits, "_rlimit_rooms", lambda root: [])
    monkeypatch.setattr(limits, "_cgroup_rooms", lambda root: [])
    with limits.steady_room():
        assert limits.memory_room().bytes == 10 * GiB
        with limits.steady_room():  # nested: the outer figure
            assert limits.memory_room().bytes == 10 * GiB
            with limits.reserved(GiB):
                assert limits.memory_room().bytes == 9 * GiB
                with pytest.raises(limits.SizeError, match="1 GiB set aside"):
                    limits.check_memory(9 * GiB + 1, "a test")
        assert limits.check_memory(10 * GiB, "a test") == 10 * GiB
    assert len(reads) == 1
    assert limits.memory_room().bytes == 9 * GiB and len(reads) == 2  # outside: read again
    calls = []
    wrapped = limits.steady(lambda: (limits.memory_room(), limits.memory_room(), calls.append(1)))
    first, second, _ = wrapped()
    assert first == second and len(reads) == 3 and calls == [1]


def _child(code: str, timeout=120) -> str:
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc: Linux")
def test_the_address_space_room_is_what_the_kernel_lets_the_process_allocate():
    """Under a real ``ulimit -v``: an allocation 64 MiB below the room succeeds, one 64 MiB
    above it fails (the room is the limit less the address space already mapped)."""
    out = _child(
        """
        import resource, numpy as np
        from matmech import limits
        import os
        base = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (base + (768 << 20), resource.RLIM_INFINITY))
        room = limits.memory_room()
        assert "address-space limit" in room.limit, room
        a = np.ones(room.bytes - (64 << 20), dtype=np.uint8); del a
        try:
            np.empty(room.bytes + (64 << 20), dtype=np.uint8)
            print("allocated beyond the room")
        except MemoryError:
            print("refused beyond the room")
        try:
            limits.check_memory(room.bytes + (64 << 20), "a test")
        except limits.SizeError as e:
            print(e)
        """
    )
    assert out.splitlines()[0] == "refused beyond the room"
    assert "more than the 768 MiB this process can still allocate (address-space limit" in out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_FSIZE: POSIX")
def test_the_disk_room_and_the_reservation_under_a_file_size_limit(tmp_path):
    out = _child(
        f"""
        import resource, os
        from matmech import limits
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY))
        room = limits.disk_room({str(tmp_path)!r})
        print(room.bytes, room.limit)
        fd = os.open({str(tmp_path / "f")!r}, os.O_CREAT | os.O_WRONLY)
        print(limits.preallocate(fd, 1 << 19, "half"))
        try:
            limits.preallocate(fd, 2 << 20, "twice")
        except limits.SizeError as e:
            print(e)
        try:
            limits.check_disk(2 << 20, {str(tmp_path)!r}, "twice")
        except limits.SizeError as e:
            print(e)
        """
    )
    lines = out.splitlines()
    assert lines[0] == f"{1 << 20} the file-size limit (ulimit -f)"
    assert lines[1] == "True" and os.path.getsize(tmp_path / "f") == 1 << 19
    assert lines[2].startswith(
        "twice needs about 2 MiB of disk and cannot reserve it (File too large)"
    )
    assert (
        lines[3]
        == "twice needs about 2 MiB on disk, more than the 1 MiB the file-size limit (ulimit -f)"
    )


def test_the_disk_room_is_statvfs_free_for_users(tmp_path):
    st = os.statvfs(tmp_path)
    room = limits.disk_room(tmp_path / "not" / "yet" / "made.csv")  # its nearest directory
    assert abs(room.bytes - st.f_bavail * st.f_frsize) < 64 << 20
