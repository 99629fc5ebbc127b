"""The kronstack family's lower bound (kronstack.value_lower_bound) and the skip it allows in
method="auto": the skipped family's own error is at least the bound, which is above the
winner's (issue 32: cheap bounds skip families that cannot win)."""

from __future__ import annotations

import itertools

import pytest

from matmech import optimize
from matmech import workloads as wl
from matmech.linalg.linop import Kron, VStack
from matmech.optimizers import families
from matmech.optimizers import kronstack as ks


def _union(domain, numeric, orders):
    """Kron(prefix on numeric, identity on the others of a subset, total elsewhere), every
    subset of the given orders (benchmarks/rpplus.py's rows, small)."""
    blocks = []
    for k in orders:
        for T in itertools.combinations(range(len(domain)), k):
            fs = [
                (wl.prefix(n) if i < numeric else wl.identity(n)) if i in T else wl.total(n)
                for i, n in enumerate(domain)
            ]
            blocks.append(Kron(*fs))
    return VStack(blocks)


BIG = [
    _union((16, 16, 4, 5), 2, (1,)),  # 5,120 cells > EXACT_N (and above the dense l2 family)
    _union((16, 16, 4, 5), 2, (0, 1, 2)),
    Kron(VStack([wl.prefix(20), wl.total(20)]), wl.all_range(12), wl.identity(10)),
]


@pytest.mark.parametrize("norm", [1, 2])
@pytest.mark.parametrize("W", BIG, ids=["1-way", "<=2-way", "one product"])
def test_the_bound_is_at_most_the_value_kronstack_reports(W, norm):
    assert W.shape[1] > ks.EXACT_N
    fit = ks.optimize_kron_stack(W, norm=norm)
    assert not fit.exact or fit.terms == 1
    bound = ks.value_lower_bound(W, norm=norm)
    assert 0 < bound <= fit.value * (1 + 1e-12)


def test_no_bound_where_kronstack_reports_the_exact_error():
    W = _union((6, 5, 3), 1, (1,))
    assert W.shape[1] <= ks.EXACT_N
    assert families.FAMILIES["kronstack"].lower_bound(W, 1.0, 1e-6) is None


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_auto_skips_kronstack_only_when_its_error_is_above_the_winner(delta):
    W = BIG[1]
    res = optimize(W, 1.0, delta, bound=False)
    failed = dict(res.params.get("failed", {}))
    tried = dict(res.params["tried"])
    bound = families.FAMILIES["kronstack"].lower_bound(W, 1.0, delta)
    own = optimize(W, 1.0, delta, method="kronstack", bound=False).error
    assert own >= bound * (1 - 1e-12)  # the family's own figure is at least its bound
    if "kronstack" in failed:
        assert failed["kronstack"].startswith("skipped: cannot win")
        best = min(v["error"] for v in tried.values())
        assert own > bound > best and res.error == pytest.approx(best, rel=1e-12)
    else:  # fitted: the bound did not decide, so it is at most the best before it
        before = [v["error"] for f, v in tried.items() if f != "kronstack"]
        assert bound <= min(before)
    if delta > 0:  # on this union the bound decides under (eps, delta)
        assert "kronstack" in failed
