"""Extension cost of a new optimiser family (issue 22 item 4): ONE test-local fit function and
one register_family call make ``optimize(W, method="toy")``, ``method="auto"`` and a release
with the optimised strategy work; the figures are checked against dense computations."""

import numpy as np
import pytest

import matmech as mm
from matmech import workloads as wl
from matmech.linalg.linop import Dense
from matmech.optimizers.families import FAMILIES, Family, FamilyFit, register_family


def fit_weighted_identity(W, eps, delta, *, report, **options):
    """The toy family: a diagonal strategy, cell i weighted by (WᵀW)ᵢᵢ^(1/4) (normalised to
    column norm at most 1); its error is left to the dispatcher (expected_error)."""
    report(0.0, "weighted identity")
    d = np.sqrt(np.sqrt(np.asarray(W.gram().dense()).diagonal()))
    return FamilyFit(Dense(np.diag(d / d.max())), params={"weights": "gram diagonal^(1/4)"})


@pytest.fixture
def toy():
    family = register_family(
        Family("toy", fit_weighted_identity, auto=lambda W, delta: W.shape[1] <= 64)
    )
    yield family
    FAMILIES.pop("toy")


def _dense_error(W, A, eps, delta):
    Wd, Ad = W.dense(), A.dense()
    G = np.linalg.pinv(Ad.T @ Ad)
    if delta == 0:
        unit = 2.0 * np.abs(Ad).sum(0).max() ** 2 / eps**2
    else:
        unit = mm.privacy.calibration.noise_variance(
            eps, delta, sensitivity=np.sqrt((Ad**2).sum(0).max())
        )
    return unit * np.trace(Wd @ G @ Wd.T)


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_the_toy_family_by_name(toy, delta):
    W = wl.stack(wl.prefix(16), wl.total(16), weights=[1.0, 4.0])
    res = mm.optimize(W, 1.0, delta, method="toy")
    assert res.method == "toy" and res.params["weights"] == "gram diagonal^(1/4)"
    assert res.error == pytest.approx(_dense_error(W, res.strategy, 1.0, delta), rel=1e-9)
    assert res.error >= res.lower_bound


def test_auto_tries_the_toy_family_and_a_release_measures_it(toy):
    W = wl.prefix(16)
    res = mm.optimize(W, 1.0)
    assert "toy" in res.params["tried"]  # tried after the built-in pidentity family
    x = np.arange(16, dtype=float)
    toy_strategy = mm.optimize(W, 1.0, method="toy").strategy
    rel = mm.release(x, W, 1.0, strategy=toy_strategy, rng=np.random.default_rng(0))
    np.testing.assert_allclose(rel.answers, W.dense() @ rel.estimate)
    Ad, Wd = rel.strategy.dense(), W.dense()  # the measured (grid-rounded) strategy
    dense_var = np.diag(Wd @ np.linalg.pinv(Ad.T @ Ad) @ Wd.T) * rel.measurement.std**2
    np.testing.assert_allclose(rel.std**2, dense_var, rtol=1e-9)


def test_a_family_record_is_checked():
    with pytest.raises(ValueError, match="other than 'auto'"):
        Family("auto", fit_weighted_identity)
    with pytest.raises(ValueError, match="models must be"):
        Family("x", fit_weighted_identity, models=("l1",))
    with pytest.raises(ValueError, match="registered already"):
        register_family(Family("kron", fit_weighted_identity))
    with pytest.raises(ValueError, match="method must be one of"):
        mm.optimize(wl.prefix(4), 1.0, method="toy")  # not registered here
