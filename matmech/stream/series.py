"""Lower-triangular Toeplitz matrices as power series: products, inverses, prefix sums.

A lower-triangular Toeplitz n×n matrix T with first column t is the power series
t(x) = Σ t_k x^k truncated at degree n: products of such matrices are products of series
and the inverse is the series 1/t(x) (Denisov et al., NeurIPS 2022, §3). The inverse is
computed by Newton's iteration g ← g·(2 − t·g), doubling the number of correct
coefficients per step with FFT products: O(n log n) (Brent & Kung, J. ACM 1978).
"""

from __future__ import annotations

import numpy as np


def _product(a: np.ndarray, b: np.ndarray, m: int) -> np.ndarray:
    """The first m coefficients of a(x)·b(x)."""
    if min(a.size, b.size) <= 64:
        return np.convolve(a, b)[:m]
    size = 1 << (a.size + b.size - 2).bit_length()
    return np.fft.irfft(np.fft.rfft(a, size) * np.fft.rfft(b, size), size)[:m]


def series_inverse(t: np.ndarray, n: int | None = None) -> np.ndarray:
    """The first n coefficients of 1/t(x) (t_0 ≠ 0), by Newton's iteration."""
    t = np.asarray(t, dtype=np.float64)
    n = t.size if n is None else int(n)
    if t.size == 0 or t[0] == 0.0:
        raise ValueError("a Toeplitz factor needs a non-zero diagonal t[0] to be invertible")
    g = np.array([1.0 / t[0]])
    while g.size < n:
        m = min(2 * g.size, n)
        e = _product(t[:m], g, m)  # t·g = 1 + O(x^len(g))
        e[0] -= 2.0
        g = -_product(g, e, m)  # g·(2 − t·g)
    return g[:n]


def prefix_coefs(c: np.ndarray) -> np.ndarray:
    """First column of B = prefix·C⁻¹ for Toeplitz C with first column c: the partial sums of
    1/c(x), since prefix is the series 1/(1 − x)."""
    return np.cumsum(series_inverse(c))


def toeplitz_dense(t: np.ndarray) -> np.ndarray:
    """The dense lower-triangular Toeplitz matrix with first column t (tests, small n)."""
    n = t.size
    i, j = np.indices((n, n))
    return np.where(i >= j, t[np.clip(i - j, 0, n - 1)], 0.0)
