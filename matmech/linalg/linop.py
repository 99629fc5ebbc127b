"""Implicit matrices: the operator contract and its structure-aware combinators.

One import point for every operator class (McKenna et al., "Optimizing error of
high-dimensional statistical queries under differential privacy", PVLDB 2018, §3): the
contract :class:`LinOp`, its algebra and explicit matrices live in
:mod:`matmech.linalg.operator`, identities, ones, Kronecker products, weighted stacks and sums
in :mod:`matmech.linalg.combinators`. ``from matmech.linalg.linop import Kron`` and the other
names below keep working.
"""

from matmech.linalg.combinators import Identity, Kron, Ones, Sum, VStack, check_size, kron_terms
from matmech.linalg.operator import (
    DEFAULT_MAX_ENTRIES,
    FACTORED_SENSITIVITY_N,
    MAX_DENSE_ROUNDING,
    Dense,
    LinOp,
    RowSubset,
    Scaled,
    Sparse,
    as_linop,
    register,
)
from matmech.linalg.storage import REGISTRY

__all__ = [
    "LinOp",
    "Dense",
    "Sparse",
    "Identity",
    "Ones",
    "Kron",
    "VStack",
    "RowSubset",
    "Scaled",
    "Sum",
    "as_linop",
    "check_size",
    "register",
    "REGISTRY",
    "DEFAULT_MAX_ENTRIES",
    "MAX_DENSE_ROUNDING",
    "FACTORED_SENSITIVITY_N",
    "kron_terms",
]
