"""matmech: the Matrix Mechanism for linear query workloads under differential privacy.

Workloads and strategies are implicit matrices (:mod:`matmech.workloads`,
:mod:`matmech.strategies`); everything in :mod:`matmech.error` and :mod:`matmech.compare`
is data-independent linear algebra. Conventions: add/remove neighbours by default;
delta = 0 is pure eps-DP (Laplace noise, L1 sensitivity); delta > 0 the Gaussian
mechanism (L2 sensitivity). Error figures are variances in squared counts, RMSE in counts.

The data flow at a glance: :func:`histogram` (records → counts x), :func:`advise` /
:func:`optimize` (choose a strategy from the workload alone), :func:`select_rows` (which
rows are worth answering, by the sparse vector technique), :func:`measure` and
:func:`least_squares` (noisy measurement, reconstruction), and :func:`release`, which
runs the whole flow and returns answers with error bars. :func:`save_strategy` /
:func:`load_strategy` keep an optimised strategy for reuse.

Note: the functions ``release``, ``optimize`` and ``advise`` are exported under the names
of their modules, so ``matmech.release`` is the function; import module-level names with
``from matmech.release import ...``.
"""

from . import strategies, workloads
from .advise import Advice, advise
from .budget import BudgetExceededError, PrivacyBudget, advanced_composition
from .calibration import gaussian_sigma
from .compare import compare
from .data import histogram
from .error import expected_error, lower_bound, per_query_variance, sensitivity
from .inference import least_squares
from .linop import LinOp, as_linop
from .mechanisms import Measurement, measure
from .optimize import OptimizeResult, optimize
from .release import Release, release, release_table
from .selection import Selection, select_rows
from .specs import Spec, SpecError, load_spec
from .store import load_strategy, save_strategy
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
    "histogram",
    "measure",
    "Measurement",
    "least_squares",
    "release",
    "Release",
    "release_table",
    "optimize",
    "OptimizeResult",
    "advise",
    "Advice",
    "select_rows",
    "Selection",
    "save_strategy",
    "load_strategy",
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
