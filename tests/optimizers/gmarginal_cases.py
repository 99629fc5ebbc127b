"""Random unions of Kronecker products and generalised marginal strategies on tiny domains,
shared by the generalised-marginal tests (small enough for dense checks)."""

import itertools

import numpy as np

from matmech import workloads as wl
from matmech.linalg.linop import Dense, Kron, VStack
from matmech.optimizers import general_marginal_error
from matmech.optimizers.pidentity import PIdentity


def factor(kind, n, rng):
    if kind == "I":
        return wl.identity(n)
    if kind == "T":
        return wl.total(n)
    if kind == "P":
        return wl.prefix(n)
    if kind == "R":
        return wl.all_range(n)
    if kind == "IT":
        return VStack([wl.identity(n), wl.total(n)])
    return Dense(rng.standard_normal((2, n)))


def random_case(seed, zero_frac=0.0):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 4))
    dom = tuple(int(d) for d in rng.integers(1, 5, size=k))
    terms = []
    for _ in range(int(rng.integers(1, 4))):
        kinds = rng.choice(["I", "T", "P", "R", "IT", "D"], size=k)
        terms.append(Kron(*[factor(kd, d, rng) for kd, d in zip(kinds, dom)]))
    W = VStack(terms, weights=rng.uniform(0.5, 2.0, len(terms)))
    th = rng.uniform(0.1, 1.0, 1 << k)
    th[rng.uniform(size=th.size) < zero_frac] = 0.0
    th[-1] = max(th[-1], 0.1)  # the full subset: every query answerable
    factors = [
        PIdentity(rng.uniform(0, 1, (int(rng.integers(1, 3)), d))) if rng.uniform() < 0.6 else None
        for d in dom
    ]
    return W, general_marginal_error.GeneralMarginalStrategy(dom, th, factors)


def kron_union(domain, kinds, orders, *, fresh=True, weights=None):
    """Union over the attribute subsets of the given orders of Kron(kind on the subset, total
    elsewhere). ``fresh``: new factor objects in every term (as workload builders make them),
    else one object per attribute and kind shared by all terms; ``weights``: a callable of the
    number of blocks giving the union's block weights (None: unweighted)."""
    make = {"P": wl.prefix, "I": wl.identity, "R": wl.all_range}
    if not fresh:
        shared = {i: make[kinds[i]](n) for i, n in enumerate(domain)}
        totals = {i: wl.total(n) for i, n in enumerate(domain)}
    blocks = []
    for k in orders:
        for T in itertools.combinations(range(len(domain)), k):
            fs = []
            for i, n in enumerate(domain):
                if fresh:
                    fs.append(make[kinds[i]](n) if i in T else wl.total(n))
                else:
                    fs.append(shared[i] if i in T else totals[i])
            blocks.append(Kron(*fs))
    return VStack(blocks, weights=weights(len(blocks)) if weights else None)
