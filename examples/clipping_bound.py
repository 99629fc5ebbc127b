"""A clipping bound by AboveThreshold, then a private mean
=======================================================

Choose a clipping bound with AboveThreshold, then release a private mean.

Follows the sparse vector chapter of *Programming Differential Privacy* ("Applying the
Sparse Vector Technique" and the ``auto_avg`` algorithm): the sensitivity of a sum is the
clipping bound b, so b must be chosen, and choosing it by looking at the data must itself
be private. The book's trick is a stream of 1-sensitive queries

    q(b) = sum(clip(v, 0, b)) - sum(clip(v, 0, b + 1)) = -#{v > b}   (integer data)

and AboveThreshold finds the first b on a grid where q(b) clears the threshold 0 (nobody,
up to noise, is above b). The price does not depend on how many candidate bounds are
tried. Then the clipped sum (sensitivity b) and the count (sensitivity 1) are released
with Laplace noise and divided. Three mechanisms, accounted by sequential composition in a
``matmech.PrivacyBudget`` that refuses any further spend.

Departures from the book: the candidate bounds are on a geometric grid (the book's
suggestion for wide-ranging data), and the budget is split 1/4 : 1/2 : 1/4 rather than in
thirds, because the noise of the sum dominates the error of the mean. Incomes are
recorded in thousands of dollars and top-coded at 4,095 (a public bound: cells 0..4095 of
a histogram), so every released sum and count is an exact integer measured with exact
discrete Laplace noise by ``matmech.measure``.

The seeded generator makes the output reproducible; a real release passes rng=None (the
default), which draws from the operating system's secure source.
Run: python examples/clipping_bound.py
"""

import math

import numpy as np

import matmech as mm
from matmech import svt
from matmech import workloads as W
from matmech.linalg.linop import Dense

SEED = 2024
N_CELLS = 4096  # incomes in $1,000, top-coded at 4,095 (public)
EPS = 1.0  # total budget
EPS_SVT, EPS_SUM, EPS_COUNT = 0.25, 0.5, 0.25  # binary fractions: they add up to EPS exactly
THRESHOLD = 0  # the book's: accept b once (noisily) nobody is above it
BETA = 0.05

rng = np.random.default_rng(SEED)  # reproducible demo only: NOT a secure source
n = 5_000
incomes = np.rint(rng.lognormal(mean=math.log(45), sigma=0.7, size=n))  # a long right tail
incomes = np.clip(incomes, 0, N_CELLS - 1).astype(np.int64)
x = mm.histogram(incomes, N_CELLS)  # x[j] = number of people earning j thousand dollars
print(
    f"{n:,} synthetic incomes ($1,000s): median {np.median(incomes):.0f}, max {incomes.max()}, "
    f"true mean {incomes.mean():.3f}"
)

budget = mm.PrivacyBudget(EPS)

# 1. AboveThreshold over a geometric grid of candidate bounds. The candidate queries are the
#    range counts #{v > b} = x[b+1] + ... + x[N-1], an interval workload over the histogram.
bounds = np.unique(np.rint(np.geomspace(1, N_CELLS - 2, 80)).astype(np.int64))
above_b = W.ranges(N_CELLS, [(b + 1, N_CELLS - 1) for b in bounds])
values = -(above_b @ x)  # q(b) = -#{v > b}: sensitivity 1, non-decreasing in b
budget.spend(EPS_SVT, what="AboveThreshold: choose the clipping bound")  # charge before any noise
res = svt.above_threshold(values, THRESHOLD, eps=EPS_SVT, rng=rng)
# If no candidate clears the threshold, fall back to the public top code (no clipping at all).
b = int(bounds[res.positions[0]]) if res.positions else N_CELLS - 1
alpha = svt.above_threshold_alpha(BETA, k=len(bounds), eps=EPS_SVT)
print(
    f"\n1. AboveThreshold over {len(bounds)} candidate bounds (1 .. {bounds[-1]}), eps = {EPS_SVT:g}:"
)
print(
    f"   chosen b = {b} (${b},000) after testing {res.n_processed} candidates; people above b: {int((incomes > b).sum())}"
)
print(
    f"   guarantee ({100 * (1 - BETA):.0f}%, Dwork-Roth Thm 3.24): at most alpha = {alpha:.0f} people above the chosen b, "
    f"growing only with log(#candidates)"
)

# 2. The clipped sum: the row [min(j, b) for each cell j] has L1 sensitivity b.
clip_row = Dense(np.minimum(np.arange(N_CELLS), b)[None, :])
m_sum = mm.measure(x, clip_row, EPS_SUM, budget=budget, rng=rng)
# 3. The count: the total of the histogram, sensitivity 1.
m_count = mm.measure(x, W.total(N_CELLS), EPS_COUNT, budget=budget, rng=rng)
noisy_sum, noisy_count = float(m_sum.y[0]), float(m_count.y[0])
private_mean = noisy_sum / noisy_count
print(
    f"\n2-3. Laplace: clipped sum with scale {m_sum.scale:.4g} (sensitivity {m_sum.sensitivity:g}), "
    f"count with scale {m_count.scale:.4g}"
)
print(
    f"   noisy sum {noisy_sum:,.0f} (true clipped {int(np.minimum(incomes, b).sum()):,}), noisy count {noisy_count:,.0f} (true {n:,})"
)

true_mean = incomes.mean()
clipped_mean = np.minimum(incomes, b).mean()
noise_sd = math.sqrt(2) * m_sum.scale / n  # the sum's noise dominates the mean's noise
naive_sd = math.sqrt(2) * (N_CELLS - 1) / EPS_SUM / n
print(
    f"\nprivate mean {private_mean:.3f} vs true mean {true_mean:.3f}: error {private_mean - true_mean:+.3f}"
)
print(
    f"   = clipping bias {clipped_mean - true_mean:+.3f} + noise {private_mean - clipped_mean:+.3f} "
    f"(noise sd about {noise_sd:.3f})"
)
print(
    f"   clipping at the public top code {N_CELLS - 1} instead: no bias, but noise sd about {naive_sd:.3f}"
)

print(f"\nbudget ledger ({budget}):")
for entry in budget.ledger:
    print(f"   eps {entry.eps:.4f}  {entry.what}")
try:
    mm.measure(x, W.total(N_CELLS), 0.01, budget=budget, rng=rng)
except mm.BudgetExceededError as exc:
    print(f"   a fourth query is refused before any noise is drawn: {exc}")
else:
    raise AssertionError("the budget should be exhausted")

spent = budget.spent[0]
assert spent == EPS
assert abs(private_mean - true_mean) < 0.05 * true_mean, "private mean should be within 5% here"
print(
    f"RESULT: clipping bound b = {b}, private mean {private_mean:.2f} (true {true_mean:.2f}), eps spent {spent:g} of {EPS:g}"
)
