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

The selection primitives (``sparse_vector``, ``SparseVector``, …) are in :mod:`matmech.svt`;
their old top-level names still work, with a DeprecationWarning.

Note: the functions ``release``, ``optimize`` and ``advise`` are exported under the names
of their modules, so ``matmech.release`` is the function; import module-level names with
``from matmech.release import ...``.
"""

from matmech import strategies
from matmech import workloads
from matmech.advisor.advise import Advice, advise
from matmech.privacy.budget import BudgetExceededError, PrivacyBudget
from matmech.privacy.calibration import gaussian_sigma
from matmech.privacy.ledger import Ledger
from matmech.advisor.compare import compare
from matmech.io.data import histogram
from matmech.error import expected_error, lower_bound, per_query_variance, sensitivity
from matmech.inference import least_squares
from matmech.linalg.linop import LinOp, as_linop
from matmech.privacy.measure import Measurement, measure
from matmech.optimizers.dispatch import OptimizeResult, optimize
from matmech.release import Release, release, release_table
from matmech.svt.select import Selection, select_rows
from matmech.io.specs import Spec, SpecError, load_spec
from matmech.io.store import load_strategy, save_strategy
from matmech.io.domain import Domain

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
    "Ledger",
    "BudgetExceededError",
    "gaussian_sigma",
    "Spec",
    "SpecError",
    "load_spec",
    "Domain",
]

#: The selection primitives live in :mod:`matmech.svt` (issue 22: ``matmech`` exports the data
#: flow); ``matmech.<name>`` still works for these, with a DeprecationWarning.
_MOVED_TO_SVT = (
    "sparse_vector",
    "SparseVector",
    "SparseVectorExhausted",
    "above_threshold",
    "sparse_vector_dpbook",
    "sparse_vector_retraversal",
    "exponential_top_c",
    "SVTResult",
    "TopCResult",
)


def __getattr__(name):
    if name in _MOVED_TO_SVT:
        import warnings

        from matmech import svt

        warnings.warn(
            f"matmech.{name} is deprecated; use matmech.svt.{name}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(svt, name)
    raise AttributeError(f"module 'matmech' has no attribute {name!r}")


#: The package version, the one place it is written (pyproject.toml reads it from here).
__version__ = "0.1.0"
