"""matmech.linalg.quadratic: every hook path of trace / diag / max of W M Wᵀ against dense algebra."""

import numpy as np
import pytest

from matmech import strategies as S
from matmech import workloads as W
from matmech.linalg.linop import Dense, Identity, Kron, Scaled, VStack
from matmech.linalg.marginal_spectrum import nuclear_norm
from matmech.linalg.quadratic import covariance, quadratic_diag, quadratic_max, quadratic_trace
from matmech.linalg.structured import pinv_gram

rng = np.random.default_rng(7)
PAIRS = {
    "prefix-identity": (W.prefix(16), S.identity(16)),  # Identity.covariance_* hooks
    "range-hier": (W.all_range(16), S.hierarchical(16)),  # block-spectral hook
    "range-hier3": (W.all_range(15), S.hierarchical(15, 3)),  # nested covariance hook
    "identity-haar12": (W.identity(12), S.haar(12)),  # nested covariance, W = I
    "prefix-dense": (W.prefix(8), Dense(rng.normal(size=(12, 8)))),  # prefix-covariance hook
    "kron-kron": (Kron(W.prefix(4), W.identity(3)), Kron(S.hierarchical(4), S.identity(3))),
    "kron-identity": (Kron(W.prefix(4), Dense(rng.normal(size=(2, 3)))), S.identity(12)),
    "stack-scaled": (
        VStack([W.prefix(8), W.identity(8)], weights=[1.0, 3.0]),
        Scaled(S.hierarchical(8), 0.5),
    ),
    "dense-dense": (Dense(rng.normal(size=(5, 6))), Dense(rng.normal(size=(9, 6)))),
}


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_forms_equal_the_dense_computation(name):
    Wk, A = PAIRS[name]
    Wd, Ad = Wk.dense(), A.dense()
    Md = np.linalg.pinv(Ad.T @ Ad)
    want = np.einsum("ij,jk,ik->i", Wd, Md, Wd)
    M = covariance(Wk, A)
    assert quadratic_trace(Wk, M) == pytest.approx(want.sum(), rel=1e-9)
    np.testing.assert_allclose(quadratic_diag(Wk, M), want, rtol=1e-9, atol=1e-12)
    assert quadratic_max(Wk, M) == pytest.approx(want.max(), rel=1e-9)


def test_covariance_refuses_rows_outside_the_row_space():
    A = Dense(np.eye(4)[:3])
    with pytest.raises(ValueError, match="not in the strategy's row space"):
        covariance(W.prefix(4), A)
    M, _ = pinv_gram(A)
    assert quadratic_trace(Dense(np.eye(4)[:2]), M) == pytest.approx(2.0)


@pytest.mark.parametrize(
    "Wk",
    [
        W.prefix(16),
        Kron(W.prefix(4), W.identity(3)),
        Scaled(W.all_range(8), 2.0),
        W.marginals((3, 4), 1),
    ],
)
def test_nuclear_norm_equals_the_singular_values(Wk):
    assert nuclear_norm(Wk) == pytest.approx(
        np.linalg.svd(Wk.dense(), compute_uv=False).sum(), rel=1e-9
    )


def test_identity_acts_as_a_kronecker_product_of_identities():
    Wk = Kron(W.prefix(3), W.all_range(4))
    I = Identity(12)
    assert [f.shape for f in I.split_like(Wk.kron_factors())] == [(3, 3), (4, 4)]
    np.testing.assert_allclose(quadratic_diag(Wk, I), (Wk.dense() ** 2).sum(1))
