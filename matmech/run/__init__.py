"""Running plans on data: :func:`~matmech.run.runner.run_plan` (afford → read → check → spend →
draw → estimate), the public :func:`measure` and the discovery of categories."""
