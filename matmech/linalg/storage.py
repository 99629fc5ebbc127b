"""How an operator is described: the registry of storable operator types and the walk of an
operator tree to its description.

Every storable class registers under a type name (:func:`register`) and describes itself with
``to_dict(out)``: scalars inline, arrays through ``out.array(a)``, sparse matrices through
``out.sparse(m)``, children through ``out.node(B)``. :class:`OperatorWalk` is that ``out``; what
becomes of an array is its subclass's choice: a strategy file stores it
(:mod:`matmech.io.store`), the advisor's cache digests it (:mod:`matmech.advisor.cache`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import scipy.sparse as sp


#: Type name → operator class, for every class a strategy file may hold (:mod:`matmech.io.store`).
REGISTRY: dict[str, type] = {}


def register(name):
    """Class decorator: store and load the class under the type ``name`` (its own
    ``to_dict``/``from_dict``). Only that exact class is storable; a subclass may carry
    state the hooks do not know and must register itself."""

    def deco(cls):
        if name in REGISTRY and REGISTRY[name] is not cls:
            raise ValueError(
                f"operator type name {name!r} is already registered for {REGISTRY[name].__name__}"
            )
        cls.store_name = name
        REGISTRY[name] = cls
        return cls

    return deco


class OperatorWalk:
    """The ``out`` of ``LinOp.to_dict``: walks an operator tree to its JSON description.

    Subclasses implement :meth:`array` (what becomes of an array; returns the reference
    written into the description) and may refine :meth:`type_name` (which types are
    described)."""

    def array(self, a: Any) -> str:
        raise NotImplementedError

    def sparse(self, m: Any) -> dict:
        """A sparse matrix as its CSR arrays and shape."""
        m = sp.csr_matrix(m)
        return {
            "data": self.array(m.data),
            "indices": self.array(m.indices),
            "indptr": self.array(m.indptr),
            "shape": list(m.shape),
        }

    def type_name(self, A: Any) -> str:
        """A's registered type name; TypeError unless A's exact class is registered (a
        subclass may carry state its parent's hook does not know)."""
        name = getattr(type(A), "store_name", None)
        if name is None or REGISTRY.get(name) is not type(A):
            raise TypeError(f"no stored form for {type(A).__name__}")
        return name

    def node(self, A: Any) -> dict:
        """The description of A: its type name and ``A.to_dict(self)``."""
        return {"type": self.type_name(A), **A.to_dict(self)}


class _Hasher(OperatorWalk):
    """The walk that digests arrays instead of storing them."""

    def __init__(self):
        self.h = hashlib.sha256()

    def array(self, a):
        a = np.ascontiguousarray(a)
        if a.dtype == object:
            raise TypeError("object array")
        self.h.update(f"{a.dtype.str}{a.shape}".encode())
        self.h.update(a.tobytes())
        return "#"


def fingerprint(A: Any) -> str | None:
    """SHA-256 of operator A's registered description and arrays (the form a strategy file
    stores), or None when A has none: a key for caches of data-independent results
    (:mod:`matmech.advisor.cache`, :func:`matmech.privacy.confidence.cached_law`)."""
    h = _Hasher()
    try:
        desc = h.node(A)
    except (TypeError, ValueError):
        return None
    h.h.update(json.dumps(desc, sort_keys=True, default=str).encode())
    return h.h.hexdigest()
