"""Cap the number of BLAS threads while matmech runs its small dense products.

Thread start-up costs more than it saves on the small GEMMs, Cholesky and eigen-solves the
optimisers, the advisor and a release run, badly so on a shared machine (issue 23: HDMM's
cps_W2, ``optimize`` 5.9-9.4 s with the default two OpenBLAS threads, 0.45 s with one). So
the public entry points (:func:`matmech.optimize`, :func:`matmech.advise`,
:func:`matmech.release`) run under :func:`blas_threads` (1 thread, or
``$MATMECH_BLAS_THREADS``) through :func:`capped`; the caller's setting is restored on exit.
Every BLAS threadpoolctl knows (OpenBLAS, MKL, BLIS) is limited; none is a no-op.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar


P = ParamSpec("P")
R = TypeVar("R")
#: (threadpoolctl controller, _blas_modules() when it was built, len(sys.modules) when checked)
_CONTROLLER: list = [None, -1, -1]
_LOCAL = threading.local()


def default_threads() -> int:
    """Threads the library lets BLAS use: ``$MATMECH_BLAS_THREADS`` (a positive integer) or 1."""
    raw = os.environ.get("MATMECH_BLAS_THREADS", "1")
    try:
        k = int(raw)
    except ValueError:
        raise ValueError(f"MATMECH_BLAS_THREADS must be a positive integer, got {raw!r}") from None
    if k < 1:
        raise ValueError(f"MATMECH_BLAS_THREADS must be a positive integer, got {raw!r}")
    return k


#: Packages whose BLAS libraries matmech computes with (scipy.linalg loads its own OpenBLAS on
#: first use): the controller is rebuilt when more of their modules are loaded.
BLAS_PACKAGES = ("numpy", "scipy")


def _blas_modules() -> int:
    return sum(1 for name in list(sys.modules) if name.startswith(BLAS_PACKAGES))


def _controller():
    """A threadpoolctl controller, rebuilt when modules of :data:`BLAS_PACKAGES` (and so maybe
    BLAS libraries) were loaded since (a rebuild scans every loaded library: ~6-13 ms, paid
    on every call after any other lazy import when keyed on all modules)."""
    if _CONTROLLER[2] != len(sys.modules):  # something was imported: count the BLAS packages'
        _CONTROLLER[2] = len(sys.modules)
        count = _blas_modules()
        if _CONTROLLER[1] != count:
            from threadpoolctl import ThreadpoolController

            _CONTROLLER[0], _CONTROLLER[1] = ThreadpoolController(), count
    return _CONTROLLER[0]


@contextlib.contextmanager
def blas_threads(k: int):
    """Run the block with at most ``k`` BLAS threads, restoring the previous counts."""
    with _controller().limit(limits=int(k), user_api="blas"):
        yield


def capped(fn: Callable[P, R]) -> Callable[P, R]:
    """Run ``fn`` under :func:`blas_threads` (:func:`default_threads`); nested calls cap once."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if getattr(_LOCAL, "inside", False):
            return fn(*args, **kwargs)
        _LOCAL.inside = True
        try:
            with blas_threads(default_threads()):
                return fn(*args, **kwargs)
        finally:
            _LOCAL.inside = False

    return wrapper
