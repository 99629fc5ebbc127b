"""The wavelet and matrix-mechanism slides in code
===============================================

Walk through the wavelet / matrix-mechanism slides with matmech.

Builds H₄ (binary hierarchy), Y₄ (Haar) and I₄, prints their sensitivities (1, 3, 3),
the pseudo-inverse H₄⁺ = (1/21)·[[3, 5, −2, 13, −8, −1, −1], …] and Y₄⁻¹, and checks the
error of the two extreme strategies: A = I gives (2/ε²)·trace(WᵀW), A = W gives
(2/ε²)·Δ_W²·n. Then the same comparison at scale: all ranges over 256 cells.
Run: python examples/slides_walkthrough.py
"""

import numpy as np

import matmech as mm
from matmech import strategies as S
from matmech import workloads as W

np.set_printoptions(precision=3, suppress=True, linewidth=120)

i4, h4, y4 = S.identity(4), S.hierarchical(4, branching=2), S.haar(4)
print("H4 =\n", h4.dense())
print("Y4 =\n", y4.dense())
print("sensitivities I4, H4, Y4:", [mm.sensitivity(a) for a in (i4, h4, y4)])
print("21 * pinv(H4) =\n", 21 * np.linalg.pinv(h4.dense()))
print("inv(Y4) =\n", np.linalg.inv(y4.dense()))

eps = 1.0
w = W.all_range(4)
wd = w.dense()
print(f"\nall 10 ranges over 4 cells, eps = {eps}:")
print(
    "  A = I  :",
    mm.expected_error(w, i4, eps),
    "= (2/eps^2) trace(W'W) =",
    2 / eps**2 * np.trace(wd.T @ wd),
)
print("  A = H4 :", mm.expected_error(w, h4, eps))
print("  A = Y4 :", mm.expected_error(w, y4, eps))
p = W.prefix(4)
delta_w = np.abs(p.dense()).sum(0).max()
print(
    "  prefix, A = W:",
    mm.expected_error(p, p, eps),
    "= (2/eps^2) * Delta_W^2 * n =",
    2 / eps**2 * delta_w**2 * 4,
)

print("\nall ranges over 256 cells, per-query RMSE at eps = 1 (counts):")
big = W.all_range(256)
for name, a in [
    ("identity", S.identity(256)),
    ("haar", S.haar(256)),
    ("hierarchical b=16, no root", S.hierarchical(256, 16, root=False)),
]:
    print(f"  {name:28s} {mm.expected_error(big, a, measure='rmse'):.2f}")
print(f"  {'SVD lower bound':28s} {mm.lower_bound(big, measure='rmse'):.2f}")
