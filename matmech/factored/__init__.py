"""Factored releases: marginal tables → measure → reconstruct → answers, never the full
histogram (issue 14; residual bases of Xiao et al., NeurIPS 2023).

Exported: :func:`~matmech.factored.streamed.release_marginals`, the residual release of a
union of marginals too large for memory (issue 24), and its result
:class:`~matmech.factored.store.MarginalRelease` (answers reconstructed marginal by marginal).
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matmech.factored.store import MarginalRelease
    from matmech.factored.streamed import release_marginals

__all__ = ["release_marginals", "MarginalRelease"]

#: Imported on first use (PEP 562), so that importing one module of this package (the
#: pipeline reads ``matmech.factored.tables``) does not import the streamed release, which
#: imports the pipeline back.
_LAZY = {
    "MarginalRelease": "matmech.factored.store",
    "release_marginals": "matmech.factored.streamed",
}


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'matmech.factored' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
