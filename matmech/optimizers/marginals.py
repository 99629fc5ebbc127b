"""Strategies for multi-attribute workloads: marginal lattices and Kronecker products.

One import point for the marginal optimisers of McKenna et al., "Optimizing error of
high-dimensional statistical queries under differential privacy", PVLDB 2018, §6.3 (OPT_M)
and Xiao et al., NeurIPS 2023 (the residual basis), split by concept:

* :mod:`matmech.optimizers.marginal_workloads` — reading the structure of W (unions of
  marginals, of Kronecker products);
* :mod:`matmech.optimizers.marginal_lattice` — the weighted marginal lattice (pure ε) and
  the closed-form residual strategy ((ε, δ));
* :mod:`matmech.optimizers.general_marginal_error` — generalised marginal strategies and
  their exact factored error;
* :mod:`matmech.optimizers.general_marginals` — their optimisers.

``from matmech.optimizers.marginals import MarginalStrategy`` and the other names below keep
working.
"""

from matmech.optimizers.general_marginal_error import (
    MAX_FACTOR_N,
    MAX_GENERAL_ATTRIBUTES,
    GeneralMarginalStrategy,
    factor_col_norm2,
    general_marginal_error,
    general_marginal_sensitivity2,
)
from matmech.optimizers.general_marginals import (
    GeneralMarginalFit,
    general_marginal_l2_objective,
    optimize_general_marginals,
    reweight_general_marginals_l2,
)
from matmech.optimizers.marginal_lattice import (
    MAX_ATTRIBUTES,
    MarginalFit,
    MarginalStrategy,
    ResidualStrategy,
    marginal_objective,
    optimize_marginals_l2,
    optimize_marginals_pure,
)
from matmech.optimizers.marginal_workloads import (
    MAX_EXPANDED_TERMS,
    expand_marginals,
    kron_blocks,
    marginal_workload,
)

__all__ = [
    "MarginalStrategy",
    "ResidualStrategy",
    "MarginalFit",
    "marginal_workload",
    "expand_marginals",
    "optimize_marginals_pure",
    "optimize_marginals_l2",
    "marginal_objective",
    "kron_blocks",
    "GeneralMarginalStrategy",
    "GeneralMarginalFit",
    "general_marginal_error",
    "optimize_general_marginals",
    "factor_col_norm2",
    "general_marginal_sensitivity2",
    "general_marginal_l2_objective",
    "reweight_general_marginals_l2",
    "MAX_ATTRIBUTES",
    "MAX_EXPANDED_TERMS",
    "MAX_GENERAL_ATTRIBUTES",
    "MAX_FACTOR_N",
]
