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

The selection primitives (``sparse_vector``, ``SparseVector``, …) are in :mod:`matmech.svt`.

Note: the functions ``release``, ``optimize`` and ``advise`` are exported under the names
of their modules, so ``matmech.release`` is the function; import module-level names with
``from matmech.release import ...``.

``import matmech`` imports none of these: each name is imported from its module the first
time it is used (PEP 562), so the package import costs little more than Python itself and the
solvers, graph and data-engine modules load only when a function needs them
(``benchmarks/import_time.py``).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names below, for type checkers and readers; at run time: __getattr__
    from matmech import strategies, workloads
    from matmech.advisor.advise import Advice, advise
    from matmech.advisor.compare import compare
    from matmech.error import expected_error, lower_bound, per_query_variance, sensitivity
    from matmech.estimators.gls import least_squares
    from matmech.sources.histogram import histogram
    from matmech.io.domain import Domain
    from matmech.io.specs import Spec, SpecError, load_spec
    from matmech.io.store import load_strategy, save_strategy
    from matmech.linalg.linop import LinOp, as_linop
    from matmech.optimizers.dispatch import optimize
    from matmech.optimizers.result import OptimizeResult
    from matmech.privacy.budget import BudgetExceededError, PrivacyBudget
    from matmech.privacy.calibration import gaussian_sigma
    from matmech.privacy.ledger import Ledger
    from matmech.privacy.measure import Measurement
    from matmech.run.measure import measure
    from matmech.release import Release, release, release_marginals
    from matmech.results.release import release_table
    from matmech.results.store import MarginalRelease
    from matmech.run.select import select_rows
    from matmech.svt.select import Selection
    from matmech.synthesis import Synthetic, synthesize, synthesize_adaptive

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
    "release_marginals",
    "MarginalRelease",
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
    "synthesize",
    "synthesize_adaptive",
    "Synthetic",
]

#: Where each public name lives: ``import matmech`` loads none of them (issue 32: the package
#: import costs about what numpy does; solvers, graphs and data engines load on first use).
_LAZY = {
    "strategies": None,  # None: the name is a submodule
    "workloads": None,
    "Advice": "matmech.advisor.advise",
    "advise": "matmech.advisor.advise",
    "compare": "matmech.advisor.compare",
    "expected_error": "matmech.error",
    "lower_bound": "matmech.error",
    "per_query_variance": "matmech.error",
    "sensitivity": "matmech.error",
    "least_squares": "matmech.estimators.gls",
    "histogram": "matmech.sources.histogram",
    "Domain": "matmech.io.domain",
    "Spec": "matmech.io.specs",
    "SpecError": "matmech.io.specs",
    "load_spec": "matmech.io.specs",
    "load_strategy": "matmech.io.store",
    "save_strategy": "matmech.io.store",
    "LinOp": "matmech.linalg.linop",
    "as_linop": "matmech.linalg.linop",
    "OptimizeResult": "matmech.optimizers.result",
    "optimize": "matmech.optimizers.dispatch",
    "BudgetExceededError": "matmech.privacy.budget",
    "PrivacyBudget": "matmech.privacy.budget",
    "gaussian_sigma": "matmech.privacy.calibration",
    "Ledger": "matmech.privacy.ledger",
    "Measurement": "matmech.privacy.measure",
    "measure": "matmech.run.measure",
    "Release": "matmech.release",
    "release": "matmech.release",
    "release_table": "matmech.results.release",
    "release_marginals": "matmech.release",
    "MarginalRelease": "matmech.results.store",
    "Selection": "matmech.svt.select",
    "select_rows": "matmech.run.select",
    "Synthetic": "matmech.synthesis",
    "synthesize": "matmech.synthesis",
    "synthesize_adaptive": "matmech.synthesis",
}


def __getattr__(name):
    """A public name, imported from its module on first use (PEP 562) and kept; any other
    submodule (``matmech.svt``, ``matmech.io``, …) is imported on first use as well."""
    if name in _LAZY:
        where = _LAZY[name]
        if where is None:
            return importlib.import_module(f"matmech.{name}")
        value = getattr(importlib.import_module(where), name)
        globals()[name] = value
        return value
    if not name.startswith("__") and importlib.util.find_spec(f"matmech.{name}") is not None:
        return importlib.import_module(f"matmech.{name}")
    raise AttributeError(f"module 'matmech' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """The ``matmech`` module: ``matmech.release`` is the function even after the submodule
    ``matmech.release`` is imported (the import system binds a submodule on its parent; here
    that binding is dropped, and the module stays in ``sys.modules``)."""

    @property
    def release(self):
        from matmech.release import release

        return release

    @release.setter
    def release(self, value):
        pass


sys.modules[__name__].__class__ = _Package


#: The package version, the one place it is written (pyproject.toml reads it from here).
__version__ = "0.1.0"
