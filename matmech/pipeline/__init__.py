"""One release pipeline (issue 22): plans built without data, one runner, one data protocol.

:mod:`~matmech.pipeline.plan` (the protocol), :mod:`~matmech.pipeline.run` (:func:`run_plan`),
:mod:`~matmech.pipeline.source` (histogram, records, tables, engines as one
:class:`DataSource`), :mod:`~matmech.pipeline.strategy` (the Matrix Mechanism plan).
"""

from matmech.pipeline.plan import Draws, Estimate, Plan
from matmech.pipeline.run import run_plan
from matmech.pipeline.source import (
    DataSource,
    EngineSource,
    HistogramSource,
    TableSource,
    as_source,
)
from matmech.pipeline.strategy import StrategyPlan, strategy_plan

__all__ = [
    "Plan",
    "Draws",
    "Estimate",
    "run_plan",
    "DataSource",
    "HistogramSource",
    "TableSource",
    "EngineSource",
    "as_source",
    "StrategyPlan",
    "strategy_plan",
]
