"""Save a strategy to a ``.npz`` file and load it back, so an optimisation is done once.

The file holds one JSON string, ``__matmech_strategy__``, describing the operator tree
(type names, sizes, scalar parameters) and plain numeric arrays named ``a0``, ``a1``, …
that the description refers to. Nothing is pickled: loading uses ``allow_pickle=False``
and rebuilds only the types listed in :data:`TYPES`, so a file from elsewhere can at worst
fail to load with a ValueError, never run code.

Round trips are exact: arrays are stored bit for bit, and the operators rebuilt from their
parameters (Haar from n, marginal strategies from their weights) are deterministic, so the
loaded strategy has the same dense matrix and the same expected error.
"""

from __future__ import annotations

import io
import json
import numbers
import zipfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from matmech.linalg.intervals import AllRange, Intervals, Prefix
from matmech.linalg.linop import Dense, Identity, Kron, LinOp, Ones, RowSubset, Scaled, Sparse, Sum, VStack

__all__ = ["save_strategy", "load_strategy", "TYPES", "FORMAT", "VERSION"]

FORMAT = "matmech.strategy"
VERSION = 1
_KEY = "__matmech_strategy__"


def _classes():
    """Name → class of every storable operator (imported here: the optimisers are heavier)."""
    from matmech import strategies as S
    from matmech.linalg.structured import RoundedDense, RoundedSparse
    from matmech.optimizers.l2 import L2Strategy
    from matmech.optimizers.marginals import MarginalStrategy, ResidualStrategy
    from matmech.optimizers.pure import PIdentity

    return {
        c.__name__: c
        for c in (
            Identity, Ones, Dense, Sparse, Scaled, Kron, VStack, Sum, RowSubset,
            Intervals, AllRange, Prefix, S.Tree, S.Haar,
            RoundedDense, RoundedSparse, L2Strategy, PIdentity, MarginalStrategy, ResidualStrategy,
        )
    }


#: The operator types a strategy file may contain.
TYPES = (
    "Identity", "Ones", "Dense", "Sparse", "Scaled", "Kron", "VStack", "Sum", "RowSubset",
    "Intervals", "AllRange", "Prefix", "Tree", "Haar",
    "RoundedDense", "RoundedSparse", "L2Strategy", "PIdentity", "MarginalStrategy", "ResidualStrategy",
)


# -- saving ------------------------------------------------------------------------------------


class _Writer:
    def __init__(self):
        self.arrays = {}

    def array(self, a):
        key = f"a{len(self.arrays)}"
        a = np.asarray(a)
        if a.dtype == object:
            raise TypeError("cannot store an object array in a strategy file")
        self.arrays[key] = a
        return key

    def sparse(self, m):
        m = sp.csr_matrix(m)
        return {"data": self.array(m.data), "indices": self.array(m.indices), "indptr": self.array(m.indptr), "shape": list(m.shape)}

    def node(self, A):
        """The description of A (exact type match: a subclass may carry state we do not know)."""
        from matmech import strategies as S
        from matmech.linalg.structured import RoundedDense, RoundedSparse
        from matmech.optimizers.l2 import L2Strategy
        from matmech.optimizers.marginals import MarginalStrategy, ResidualStrategy
        from matmech.optimizers.pure import PIdentity

        t = type(A)
        name = t.__name__
        if t is Identity:
            return {"type": name, "n": int(A.shape[0])}
        if t is Ones:
            return {"type": name, "shape": [int(s) for s in A.shape]}
        if t in (Dense, RoundedDense):
            return {"type": name, "matrix": self.array(A.matrix)}
        if t is L2Strategy:
            pinv = getattr(A, "_pinv", None)
            return {"type": name, "matrix": self.array(A.matrix), "pinv": None if pinv is None else self.array(pinv)}
        if t in (Sparse, RoundedSparse, S.Haar):
            if t is S.Haar:
                return {"type": name, "n": int(A.n)}
            return {"type": name, "matrix": self.sparse(A.matrix)}
        if t is Scaled:
            return {"type": name, "c": float(A.c), "base": self.node(A.base)}
        if t is Kron:
            return {"type": name, "factors": [self.node(f) for f in A.factors]}
        if t is Sum:
            return {"type": name, "terms": [self.node(f) for f in A.terms]}
        if t is VStack:
            out = {"type": name, "weights": self.array(A.weights), "blocks": [self.node(b) for b in A.blocks]}
            # workloads.marginals tags its stack with the domain and subsets (used by the optimisers)
            if hasattr(A, "domain") and hasattr(A, "subsets"):
                out["domain"] = [int(d) for d in A.domain]
                out["subsets"] = [[int(i) for i in s] for s in A.subsets]
            return out
        if t is RowSubset:
            return {"type": name, "index": self.array(A.index), "base": self.node(A.base)}
        if t in (AllRange, Prefix):
            return {"type": name, "n": int(A.n)}
        if t is Intervals:
            lo, hi = A.bounds()
            return {"type": name, "n": int(A.n), "lo": self.array(lo), "hi": self.array(hi)}
        if t is S.Tree:
            lo, hi = A.bounds()
            out = {
                "type": name,
                "n": int(A.n),
                "lo": self.array(lo),
                "hi": self.array(hi),
                "parent": self.array(A.parent),
                "sizes": None if A.sizes is None else [int(s) for s in A.sizes],
                "labels": _labels(A.labels),
            }
            if hasattr(A, "branching"):
                out["branching"] = int(A.branching)
            return out
        if t is PIdentity:
            return {"type": name, "theta": self.array(A.theta)}
        if t is MarginalStrategy:
            return {"type": name, "domain": list(A.domain), "theta": self.array(A.theta)}
        if t is ResidualStrategy:
            return {"type": name, "domain": list(A.domain), "lam": self.array(A.lam)}
        raise TypeError(f"cannot save a strategy of type {name}; storable types are {', '.join(TYPES)}")


def _labels(labels):
    """Tree node labels as JSON (strings and numbers kept, anything else by its str)."""
    if labels is None:
        return None
    out = []
    for v in labels:
        if isinstance(v, (str, bool)) or v is None:
            out.append(v)
        elif isinstance(v, numbers.Integral):
            out.append(int(v))
        elif isinstance(v, numbers.Real):
            out.append(float(v))
        else:
            out.append(str(v))
    return out


def save_strategy(path, A):
    """Write strategy A to ``path`` (a ``.npz`` file, written exactly at that name).

    A may be any operator of :data:`TYPES`, nested (Kronecker products of optimised
    factors, stacks, scalings). Raises TypeError for anything else, before writing.
    """
    if not isinstance(A, LinOp):
        raise TypeError(f"save_strategy needs a matmech strategy (a LinOp), got {type(A).__name__}")
    w = _Writer()
    root = w.node(A)
    meta = json.dumps({"format": FORMAT, "version": VERSION, "shape": [int(s) for s in A.shape], "root": root})
    buf = io.BytesIO()  # build fully in memory: a failure leaves no half-written file
    np.savez_compressed(buf, **{_KEY: np.array(meta)}, **w.arrays)
    Path(path).write_bytes(buf.getvalue())


# -- loading -----------------------------------------------------------------------------------


class _Reader:
    def __init__(self, arrays, source):
        self.arrays, self.source = arrays, source

    def fail(self, what):
        raise ValueError(f"{self.source}: not a valid matmech strategy file: {what}")

    def field(self, node, key, kinds):
        if key not in node:
            self.fail(f"a {node.get('type')} entry has no {key!r}")
        v = node[key]
        if not isinstance(v, kinds) or isinstance(v, bool):
            self.fail(f"{node.get('type')}.{key} has the wrong type ({type(v).__name__})")
        return v

    def array(self, node, key, kind=None, ndim=None):
        ref = self.field(node, key, str)
        if ref not in self.arrays:
            self.fail(f"{node.get('type')}.{key} refers to a missing array {ref!r}")
        a = self.arrays[ref]
        if kind == "int" and not np.issubdtype(a.dtype, np.integer):
            self.fail(f"{node.get('type')}.{key} must be an integer array, got dtype {a.dtype}")
        if kind == "float" and not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
            self.fail(f"{node.get('type')}.{key} must be a numeric array, got dtype {a.dtype}")
        if ndim is not None and a.ndim != ndim:
            self.fail(f"{node.get('type')}.{key} must have {ndim} dimension(s), got shape {a.shape}")
        return a

    def ints(self, node, key):
        v = self.field(node, key, list)
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in v):
            self.fail(f"{node.get('type')}.{key} must be a list of integers")
        return v

    def children(self, node, key):
        v = self.field(node, key, list)
        if not v:
            self.fail(f"{node.get('type')}.{key} is empty")
        return [self.node(c) for c in v]

    def sparse(self, node):
        m = self.field(node, "matrix", dict)
        parts = {k: self.array(m, k, "int" if k != "data" else "float", 1) for k in ("data", "indices", "indptr")}
        return sp.csr_matrix((parts["data"], parts["indices"], parts["indptr"]), shape=tuple(self.ints(m, "shape")))

    def node(self, node):
        from matmech import strategies as S

        if not isinstance(node, dict) or not isinstance(node.get("type"), str):
            self.fail("an entry is not a table with a 'type'")
        name = node["type"]
        classes = _classes()
        if name not in classes:
            self.fail(f"unknown operator type {name!r} (known: {', '.join(TYPES)})")
        cls = classes[name]
        if name == "Identity":
            return Identity(self.field(node, "n", int))
        if name == "Ones":
            return Ones(*self.ints(node, "shape"))
        if name in ("Dense", "RoundedDense"):
            return cls(self.array(node, "matrix", "float", 2))
        if name == "L2Strategy":
            pinv = None if node.get("pinv") is None else self.array(node, "pinv", "float", 2)
            return cls(self.array(node, "matrix", "float", 2), pinv)
        if name in ("Sparse", "RoundedSparse"):
            return cls(self.sparse(node))
        if name == "Haar":
            return S.Haar(self.field(node, "n", int))
        if name == "Scaled":
            return Scaled(self.node(self.field(node, "base", dict)), self.field(node, "c", (int, float)))
        if name == "Kron":
            return Kron(*self.children(node, "factors"))
        if name == "Sum":
            return Sum(self.children(node, "terms"))
        if name == "VStack":
            out = VStack(self.children(node, "blocks"), weights=self.array(node, "weights", "float", 1))
            if "domain" in node:
                out.domain = tuple(self.ints(node, "domain"))
                out.subsets = tuple(tuple(s) for s in self.field(node, "subsets", list))
            return out
        if name == "RowSubset":
            return RowSubset(self.node(self.field(node, "base", dict)), self.array(node, "index", "int", 1))
        if name in ("AllRange", "Prefix"):
            return cls(self.field(node, "n", int))
        if name == "Intervals":
            return Intervals(self.field(node, "n", int), self.array(node, "lo", "int", 1), self.array(node, "hi", "int", 1))
        if name == "Tree":
            sizes = node.get("sizes")
            if sizes is not None:
                sizes = tuple(self.ints(node, "sizes"))
            labels = node.get("labels")
            if labels is not None and not isinstance(labels, list):
                self.fail("Tree.labels must be a list")
            out = S.Tree(
                self.field(node, "n", int),
                self.array(node, "lo", "int", 1),
                self.array(node, "hi", "int", 1),
                self.array(node, "parent", "int", 1),
                labels=labels,
                sizes=sizes,
            )
            if "branching" in node:
                out.branching = self.field(node, "branching", int)
            return out
        if name == "PIdentity":
            return cls(self.array(node, "theta", "float", 2))
        if name == "MarginalStrategy":
            return cls(tuple(self.ints(node, "domain")), self.array(node, "theta", "float", 1))
        return cls(tuple(self.ints(node, "domain")), self.array(node, "lam", "float", 1))  # ResidualStrategy


def load_strategy(path):
    """Read a strategy written by :func:`save_strategy`.

    Raises FileNotFoundError for a missing file and ValueError (naming the file and what is
    wrong) for a file that is not a matmech strategy, is damaged, or describes an invalid one.
    """
    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise FileNotFoundError(f"{source}: no such strategy file")
    not_ours = f"{source}: not a matmech strategy file (an .npz written by save_strategy)"
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{not_ours}: it is not an .npz (zip) archive")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
        raise ValueError(f"{not_ours}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    meta = arrays.pop(_KEY, None)
    if meta is None or meta.shape != () or meta.dtype.kind != "U":
        raise ValueError(f"{source}: not a matmech strategy file: no {_KEY!r} description inside")
    reader = _Reader(arrays, source)
    try:
        desc = json.loads(str(meta))
    except json.JSONDecodeError as exc:
        reader.fail(f"the description is not valid JSON ({exc})")
    if not isinstance(desc, dict) or desc.get("format") != FORMAT:
        reader.fail(f"the description does not declare format {FORMAT!r}")
    if desc.get("version") != VERSION:
        reader.fail(f"version {desc.get('version')!r} is not supported (this matmech reads version {VERSION})")
    try:
        A = reader.node(desc.get("root"))
    except RecursionError:
        reader.fail("the operator tree is nested too deeply")
    except (TypeError, ValueError) as exc:
        if str(exc).startswith(source):
            raise
        reader.fail(str(exc))
    shape = desc.get("shape")
    if shape is not None and list(A.shape) != shape:
        reader.fail(f"the strategy rebuilt has shape {A.shape}, the file says {tuple(shape)}")
    return A
