"""Cap the number of OpenBLAS threads for a block of small matrix products.

Thread start-up costs more than it saves on the small GEMMs of the optimisers, badly so on
a shared machine (measured: one p-Identity objective 12 ms on one thread, 246 ms on two
under load). A no-op where the BLAS is not an OpenBLAS loaded in this process.
"""

from __future__ import annotations

import contextlib
import ctypes

__all__ = ["blas_threads"]

_BLAS_HANDLES = None


def _blas_handles():
    """(get, set) pairs for every OpenBLAS loaded in this process (Linux; empty elsewhere)."""
    global _BLAS_HANDLES
    if _BLAS_HANDLES is not None:
        return _BLAS_HANDLES
    handles, paths = [], set()
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                path = line.split()[-1]
                if "openblas" in path.lower() and (path.endswith(".so") or ".so." in path):
                    paths.add(path)
    except OSError:
        paths = set()
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for suffix in ("", "64_"):
            for prefix in ("scipy_openblas", "openblas"):
                get = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                put = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
                if get is not None and put is not None:
                    handles.append((get, put))
                    break
            else:
                continue
            break
    _BLAS_HANDLES = handles
    return handles


@contextlib.contextmanager
def blas_threads(k):
    """Run the block with at most ``k`` OpenBLAS threads, restoring the previous counts.

    The p-Identity iteration is a sequence of small GEMMs (p×p by p×n) for which thread
    start-up costs more than it saves, badly so on a shared machine. A no-op where the
    BLAS is not an OpenBLAS found in this process.
    """
    saved = []
    for get, put in _blas_handles():
        try:
            old = int(get())
            put(int(k))
            saved.append((put, old))
        except (OSError, ValueError):  # pragma: no cover - a foreign BLAS build
            continue
    try:
        yield
    finally:
        for put, old in saved:
            put(old)
