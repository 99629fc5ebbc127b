"""How many ``matmech`` modules one release walks through (issue 34: a plain histogram
release should enter few modules, not one per small helper file).

A ``sys.setprofile`` hook records the module of every Python function called during a
second, warm release (the first pays lazy imports and caches). The limits are the counts at
the last layout change: a release that starts walking through more modules fails here, and
a change that lowers a count lowers its limit. Issue 34's targets are 15 (histogram) and
18 (factored).
"""

import sys

import numpy as np

import matmech as mm
from matmech import workloads as wl
from matmech.release import release_factored

HISTOGRAM_LIMIT = 35
FACTORED_LIMIT = 42


def _modules_entered(call):
    call()
    seen = set()

    def hook(frame, event, arg):
        if event == "call":
            name = frame.f_globals.get("__name__", "")
            if name == "matmech" or name.startswith("matmech."):
                seen.add(name)

    previous = sys.getprofile()
    sys.setprofile(hook)
    try:
        call()
    finally:
        sys.setprofile(previous)
    return seen


def test_histogram_release_modules():
    x = np.arange(16, dtype=np.int64)
    W = wl.all_range(16)
    seen = _modules_entered(
        lambda: mm.release(x, W, eps=1.0, strategy="identity", rng=np.random.default_rng(0))
    )
    assert "matmech.run.runner" in seen  # the hook saw the release itself
    assert len(seen) <= HISTOGRAM_LIMIT, sorted(seen)


def test_factored_release_modules():
    codes = np.random.default_rng(1).integers(0, 4, size=(200, 3))
    W = wl.marginals((4, 4, 4), 2)
    seen = _modules_entered(
        lambda: release_factored(codes, W, 1.0, rng=np.random.default_rng(0), max_records=200)
    )
    assert "matmech.run.runner" in seen
    assert len(seen) <= FACTORED_LIMIT, sorted(seen)
