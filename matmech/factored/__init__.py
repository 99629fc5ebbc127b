"""Factored releases: marginal tables → measure → reconstruct → answers, never the full
histogram (issue 14; residual bases of Xiao et al., NeurIPS 2023).

Exported: :func:`~matmech.factored.streamed.release_marginals`, the residual release of a
union of marginals too large for memory (issue 24), and its result
:class:`~matmech.factored.store.MarginalRelease` (answers reconstructed marginal by marginal).
"""

from matmech.factored.store import MarginalRelease
from matmech.factored.streamed import release_marginals

__all__ = ["release_marginals", "MarginalRelease"]
