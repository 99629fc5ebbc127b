"""The privacy layer: calibration, exact secure noise, the budget and the measurement.

:mod:`~matmech.privacy.measure` is, with :mod:`matmech.svt`, the only code that reads the
private histogram x. The rule it keeps: only noisy outputs leave; every check on x runs
before any spend and reveals only the kind of defect; the budget is charged once, before
the first noise draw; nothing after a spend branches on x.
"""
