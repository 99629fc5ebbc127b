"""Shared test data for the factored-release tests: a small domain and correlated records."""

import math

import numpy as np

DOM = (3, 4, 2, 5)


def codes(domain, n, seed=0):
    """``n`` records over ``domain`` with correlated attributes (so marginals are not flat)."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 7, size=n)
    return np.column_stack([(base + rng.integers(0, 2, size=n)) % d for d in domain])


def hist(codes, domain):
    """The histogram of ``codes`` over ``domain`` (row-major cells)."""
    return np.bincount(np.ravel_multi_index(codes.T, domain), minlength=math.prod(domain))


def spy_gaussian_draws(monkeypatch, budget):
    """Record ``budget.spent`` at every discrete Gaussian draw (single-σ and mixed calls):
    the returned list, filled as the release draws."""
    from matmech.privacy import noise

    seen = []

    def spying(real):
        def spy(*args, **kw):
            seen.append(budget.spent_under("basic"))  # the sums charged (zcdp composes in rho)
            return real(*args, **kw)

        return spy

    for name in ("discrete_gaussian", "discrete_gaussian_mixed"):
        monkeypatch.setattr(noise, name, spying(getattr(noise, name)))
    return seen
