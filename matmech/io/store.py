"""Save a strategy to a ``.npz`` file and load it back, so an optimisation is done once.

The file holds one JSON string, ``__matmech_strategy__``, describing the operator tree
(type names, sizes, scalar parameters) and plain numeric arrays named ``a0``, ``a1``, …
that the description refers to. Nothing is pickled: loading uses ``allow_pickle=False``
and rebuilds only the registered types (:data:`TYPES`, each class's own
``to_dict``/``from_dict``, :func:`matmech.linalg.linop.register`), so a file from elsewhere can at worst
fail to load with a ValueError, never run code.

Round trips are exact: arrays are stored bit for bit, and the operators rebuilt from their
parameters (Haar from n, marginal strategies from their weights) are deterministic, so the
loaded strategy has the same dense matrix and the same expected error.
"""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import scipy.sparse as sp

import matmech.linalg.intervals  # noqa: F401  (registers Intervals, AllRange, Prefix)
from matmech.linalg.linop import REGISTRY, LinOp
from matmech.linalg.storage import OperatorWalk
from matmech import validate
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # names used only in annotations
    import os


FORMAT = "matmech.strategy"
VERSION = 1
_KEY = "__matmech_strategy__"


def _registry():
    """Type name → class of every storable operator (:func:`matmech.linalg.linop.register`);
    the modules defining them are imported here, the optimisers being heavier."""
    import matmech.linalg.structured  # noqa: F401  (RoundedDense, RoundedSparse)
    import matmech.optimizers.l2  # noqa: F401  (L2Strategy)
    import matmech.optimizers.general_marginal_error  # noqa: F401  (GeneralMarginalStrategy)
    import matmech.optimizers.marginal_lattice  # noqa: F401  (MarginalStrategy, ResidualStrategy)
    import matmech.optimizers.pidentity  # noqa: F401  (PIdentity)
    import matmech.optimizers.unions  # noqa: F401  (ResidualProductStrategy)
    import matmech.strategies  # noqa: F401  (Tree, Haar)

    return REGISTRY


#: The operator types a strategy file may contain.
TYPES = (
    "Identity",
    "Ones",
    "Dense",
    "Sparse",
    "Scaled",
    "Kron",
    "VStack",
    "Sum",
    "RowSubset",
    "Intervals",
    "AllRange",
    "Prefix",
    "Tree",
    "Haar",
    "RoundedDense",
    "RoundedSparse",
    "L2Strategy",
    "PIdentity",
    "MarginalStrategy",
    "ResidualStrategy",
    "GeneralMarginalStrategy",
    "ResidualProductStrategy",
)


# -- saving ------------------------------------------------------------------------------------


class _Writer(OperatorWalk):
    """The walk that keeps the arrays, named ``a0``, ``a1``, … in the file."""

    def __init__(self):
        self.arrays = {}

    def array(self, a):
        key = f"a{len(self.arrays)}"
        a = np.asarray(a)
        if a.dtype == object:
            raise TypeError("cannot store an object array in a strategy file")
        self.arrays[key] = a
        return key

    def type_name(self, A):
        """Only the registered types (exact type match), their modules imported first."""
        _registry()
        try:
            return super().type_name(A)
        except TypeError:
            raise TypeError(
                f"cannot save a strategy of type {type(A).__name__}; storable types are {', '.join(TYPES)}"
            ) from None


def save_strategy(path: str | os.PathLike, A: LinOp, *, overwrite: bool = True) -> None:
    """Write strategy A to ``path`` (a ``.npz`` file, written exactly at that name).

    A may be any operator of :data:`TYPES`, nested (Kronecker products of optimised
    factors, stacks, scalings). Raises TypeError for anything else, before writing.
    ``overwrite=False``: FileExistsError if ``path`` exists (checked atomically at creation).

    Parameters
    ----------
    path : str or os.PathLike
        The ``.npz`` file to write.
    A : LinOp
        The strategy.
    overwrite : bool, default True
        False: refuse a ``path`` that exists (FileExistsError, checked atomically).

    Returns
    -------
    None

    Raises
    ------
    TypeError
        A is not a storable operator (nothing is written).
    FileExistsError
        ``path`` exists and ``overwrite`` is False.
    OSError
        The file cannot be written.

    Examples
    --------
    >>> import os, tempfile
    >>> from matmech import strategies as S
    >>> path = os.path.join(tempfile.mkdtemp(), "h.npz")
    >>> save_strategy(path, S.hierarchical(16, 4))
    >>> load_strategy(path).shape
    (21, 16)
    """
    path = validate.path(path)
    validate.flag(overwrite, "overwrite")
    if not isinstance(A, LinOp):
        raise TypeError(f"save_strategy needs a matmech strategy (a LinOp), got {type(A).__name__}")
    w = _Writer()
    root = w.node(A)
    meta = json.dumps(
        {"format": FORMAT, "version": VERSION, "shape": [int(s) for s in A.shape], "root": root}
    )
    buf = io.BytesIO()  # build fully in memory: a failure leaves no half-written file
    np.savez_compressed(buf, allow_pickle=False, **{_KEY: np.array(meta)}, **w.arrays)
    with open(path, "wb" if overwrite else "xb") as f:
        f.write(buf.getvalue())


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
        if kind == "float" and not (
            np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)
        ):
            self.fail(f"{node.get('type')}.{key} must be a numeric array, got dtype {a.dtype}")
        if ndim is not None and a.ndim != ndim:
            self.fail(
                f"{node.get('type')}.{key} must have {ndim} dimension(s), got shape {a.shape}"
            )
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
        parts = {
            k: self.array(m, k, "int" if k != "data" else "float", 1)
            for k in ("data", "indices", "indptr")
        }
        return sp.csr_matrix(
            (parts["data"], parts["indices"], parts["indptr"]), shape=tuple(self.ints(m, "shape"))
        )

    def node(self, node):
        if not isinstance(node, dict) or not isinstance(node.get("type"), str):
            self.fail("an entry is not a table with a 'type'")
        name = node["type"]
        registry = _registry()
        if name not in registry:
            self.fail(f"unknown operator type {name!r} (known: {', '.join(TYPES)})")
        return registry[name].from_dict(node, self)


def load_strategy(path: str | os.PathLike) -> LinOp:
    """Read a strategy written by :func:`save_strategy`.

    Raises FileNotFoundError for a missing file and ValueError (naming the file and what is
    wrong) for a file that is not a matmech strategy, is damaged, or describes an invalid one.

    Parameters
    ----------
    path : str or os.PathLike
        A file written by :func:`save_strategy`.

    Returns
    -------
    LinOp
        The same strategy, bit for bit.

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    ValueError
        The file is not a matmech strategy, is damaged, or describes an invalid one.

    Examples
    --------
    >>> import os, tempfile
    >>> from matmech import strategies as S
    >>> path = os.path.join(tempfile.mkdtemp(), "i.npz")
    >>> save_strategy(path, S.identity(5))
    >>> load_strategy(path).shape
    (5, 5)
    """
    file = validate.path(path)
    source = str(file)
    if not file.is_file():
        raise FileNotFoundError(f"{source}: no such strategy file")
    not_ours = f"{source}: not a matmech strategy file (an .npz written by save_strategy)"
    if not zipfile.is_zipfile(file):
        raise ValueError(f"{not_ours}: it is not an .npz (zip) archive")
    try:
        with np.load(file, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
        raise ValueError(
            f"{not_ours}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from None
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
        reader.fail(
            f"version {desc.get('version')!r} is not supported (this matmech reads version {VERSION})"
        )
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
