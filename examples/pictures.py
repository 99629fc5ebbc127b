"""Pictures: the advisor's ranking and a release with its error bars
===================================================================

Two figures, drawn by matmech's own plotting helpers (``pip install "matmech-dp[plot]"``):

1. ``Advice.plot()``: every strategy ``matmech.advise`` ranks for all range queries over
   128 cells (the optimiser included), by exact RMSE per query, against the SVD lower
   bound; the right panel shows how each strategy's error spreads over the queries.
2. ``Release.plot()``: released answers with their 95% intervals, 40 of the 8,256
   ranges evenly spaced in workload order.

The advice touches no data. The release is seeded so that the picture is stable: a seeded
``rng`` is NOT secure; leave it out for a real release.
"""

import numpy as np

import matmech as mm
from matmech import workloads as W

w = W.all_range(128)
advice = mm.advise(w, eps=1.0)
ax = advice.plot()
print(advice.table())

# %%
# The release: 5,000 synthetic records, released under pure ε = 1 with the advised strategy.

rng = np.random.default_rng(0)  # reproducible picture only (NOT secure)
x = mm.histogram(rng.integers(0, 128, 5_000), 128)
r = mm.release(x, w, 1.0, strategy=advice.best, rng=rng)
ax = r.plot()
print(r)
print(
    f"RESULT: drew the ranking of {len(advice.rows)} strategies and {r.answers.size} released ranges"
)
