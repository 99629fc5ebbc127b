"""matmech: the Matrix Mechanism for linear query workloads under differential privacy.

Workloads and strategies are implicit matrices (:mod:`matmech.workloads`,
:mod:`matmech.strategies`); everything in :mod:`matmech.error` and :mod:`matmech.compare`
is data-independent linear algebra. Conventions: add/remove neighbours by default;
delta = 0 is pure eps-DP (Laplace noise, L1 sensitivity); delta > 0 the Gaussian
mechanism (L2 sensitivity). Error figures are variances in squared counts, RMSE in counts.
"""

from . import strategies, workloads
from .budget import BudgetExceededError, PrivacyBudget, advanced_composition
from .calibration import gaussian_sigma
from .compare import compare
from .error import expected_error, lower_bound, per_query_variance, sensitivity
from .linop import LinOp, as_linop
from .specs import Spec, SpecError, load_spec
from .svt import (
    SparseVector,
    SparseVectorExhausted,
    SVTResult,
    TopCResult,
    above_threshold,
    exponential_top_c,
    sparse_vector,
    sparse_vector_dpbook,
    sparse_vector_retraversal,
)

__all__ = [
    "workloads",
    "strategies",
    "LinOp",
    "as_linop",
    "sensitivity",
    "expected_error",
    "per_query_variance",
    "lower_bound",
    "compare",
    "PrivacyBudget",
    "BudgetExceededError",
    "advanced_composition",
    "gaussian_sigma",
    "Spec",
    "SpecError",
    "load_spec",
    "sparse_vector",
    "SparseVector",
    "SparseVectorExhausted",
    "above_threshold",
    "sparse_vector_dpbook",
    "sparse_vector_retraversal",
    "exponential_top_c",
    "SVTResult",
    "TopCResult",
]

__version__ = "0.1.0"
