"""Plans, built without data (one module and one class per kind): the
:class:`~matmech.plans.plan.Plan` protocol, the strategy, residual, generalised-marginal,
selected, split and streamed plans, and the planner's choice among them."""
