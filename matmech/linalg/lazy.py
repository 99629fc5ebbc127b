"""Heavy modules imported on first use, so that ``import matmech`` stays fast.

``scipy.linalg`` costs about 0.1 s to import and most sessions (a release from a saved
strategy, the CLI's budget commands) never call it. :data:`sla` is the module itself,
loaded by :class:`importlib.util.LazyLoader` the first time one of its attributes is read.
"""

from __future__ import annotations

import importlib.util
import sys


def lazy_module(name):
    """The module ``name``, executed on its first attribute access (PEP 562-style laziness
    through :class:`importlib.util.LazyLoader`); an already imported module is returned as is."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:  # pragma: no cover - scipy is a hard dependency
        raise ImportError(f"no module named {name!r}")
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    parent, _, child = name.rpartition(".")
    if parent:  # as ``import parent.child`` would: the parent package holds its submodule
        setattr(importlib.import_module(parent), child, module)
    return module


#: scipy.linalg, loaded on first use.
sla = lazy_module("scipy.linalg")
