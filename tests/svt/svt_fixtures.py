"""SVT variants from Lyu, Su, Li (VLDB 2017), Fig. 1-2, as TEST FIXTURES ONLY.

Alg. 3 (Roth's 2011 notes: releases the noisy answer q_i + nu_i of a positive)
and Alg. 5 (Stoddard et al. 2014: no query noise, no cutoff) are NOT
differentially private for any finite epsilon ([LSL17] Thm. 9.11, Thm. 3.5).
They live here so that the privacy auditor can be shown to catch them; they
must never be imported by library code.  A correct Alg. 1 batch version is
included as a fast reference mechanism for checking the auditor's power.

All functions are vectorised over trials and use numpy's (non-secure)
Generator.laplace: these are statistical fixtures, not mechanisms.

Batch output format: ``Batch.flags`` is an (n_trials, k) int8 array with
1 = "above" (top), 0 = "below" (bottom), -1 = not processed (the run had
aborted); ``Batch.answers`` holds released numbers (NaN elsewhere) for the
variants that release them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

ABOVE, BELOW, UNSEEN = 1, 0, -1


@dataclass(frozen=True)
class Batch:
    flags: np.ndarray
    answers: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return self.flags.shape[0]


def _cutoff(above: np.ndarray, c: Optional[int]) -> np.ndarray:
    """Flags with everything after the c-th positive of each row marked UNSEEN."""
    flags = above.astype(np.int8)
    if c is None:
        return flags
    # Number of positives strictly before each column.
    before = np.cumsum(above, axis=1) - above
    flags[before >= c] = UNSEEN
    return flags


def alg1_batch(
    values: Sequence[float],
    threshold: float,
    *,
    c: int,
    eps: float,
    n: int,
    rng: np.random.Generator,
    sensitivity: float = 1.0,
) -> Batch:
    """[LSL17] Alg. 1 (private, eps-DP): rho ~ Lap(D/eps1), nu ~ Lap(2cD/eps2), eps1 = eps2 = eps/2."""
    q = np.asarray(values, dtype=float)
    e1 = e2 = eps / 2
    rho = rng.laplace(0.0, sensitivity / e1, size=(n, 1))
    nu = rng.laplace(0.0, 2 * c * sensitivity / e2, size=(n, q.size))
    return Batch(_cutoff(q + nu >= threshold + rho, c))


def alg3_batch(
    values: Sequence[float],
    threshold: float,
    *,
    c: int,
    eps: float,
    n: int,
    rng: np.random.Generator,
    sensitivity: float = 1.0,
) -> Batch:
    """[LSL17] Alg. 3 (NOT private): nu ~ Lap(cD/eps2) and it outputs q_i + nu_i for positives.

    Releasing q_i + nu_i >= T + rho leaks an upper bound on the threshold
    noise, after which the negatives are no longer "free" (Thm. 9.11).
    """
    q = np.asarray(values, dtype=float)
    e1 = eps / 2
    e2 = eps - e1
    rho = rng.laplace(0.0, sensitivity / e1, size=(n, 1))
    noisy = q + rng.laplace(0.0, c * sensitivity / e2, size=(n, q.size))
    flags = _cutoff(noisy >= threshold + rho, c)
    answers = np.where(flags == ABOVE, noisy, np.nan)
    return Batch(flags, answers)


def alg5_batch(
    values: Sequence[float],
    threshold: float,
    *,
    eps: float,
    n: int,
    rng: np.random.Generator,
    sensitivity: float = 1.0,
) -> Batch:
    """[LSL17] Alg. 5 (NOT private): rho ~ Lap(D/eps1), nu_i = 0, no cutoff (Thm. 3.5)."""
    q = np.asarray(values, dtype=float)
    e1 = eps / 2
    rho = rng.laplace(0.0, sensitivity / e1, size=(n, 1))
    return Batch(_cutoff(q + 0.0 >= threshold + rho, None))


def alg3(values, threshold, *, c, eps, rng, sensitivity=1.0):
    """One run of Alg. 3 in the paper's output format: None (bottom) or the released number."""
    b = alg3_batch(values, threshold, c=c, eps=eps, n=1, rng=rng, sensitivity=sensitivity)
    return [
        None if f == BELOW else float(a) for f, a in zip(b.flags[0], b.answers[0]) if f != UNSEEN
    ]


def alg5(values, threshold, *, eps, rng, sensitivity=1.0):
    """One run of Alg. 5 in the paper's output format: True (top) / False (bottom) per query."""
    b = alg5_batch(values, threshold, eps=eps, n=1, rng=rng, sensitivity=sensitivity)
    return [bool(f == ABOVE) for f in b.flags[0]]


# --------------------------------------------------------------------------
# The columns of [LSL17]'s Fig. 2 table, for the exact audit (tests/privacy_exact.py)
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class Variant:
    """One SVT variant of [LSL17] Fig. 1-2: noise scales in units of D as functions of (eps, c).

    ``query_scale`` None means no query noise (Alg. 5); ``cutoff`` False means
    the run never stops (Alg. 5, 6); ``releases`` means a top outputs
    q_i + nu_i instead of "top" (Alg. 3).  ``private`` is the paper's verdict
    at the claimed eps (Fig. 2, "Privacy Property").
    """

    alg: int
    threshold_scale: Callable[[float, int], float]
    query_scale: Optional[Callable[[float, int], float]]
    cutoff: bool
    releases: bool
    private: bool


VARIANTS = {
    # Alg. 1: rho ~ Lap(D/eps1), nu ~ Lap(2cD/eps2), eps1 = eps2 = eps/2; eps-DP.
    1: Variant(1, lambda e, c: 1 / (e / 2), lambda e, c: 2 * c / (e / 2), True, False, True),
    # Alg. 3 (Roth 2011): nu ~ Lap(cD/eps2) and releases q_i + nu_i; infinity-DP (Thm. 9.11).
    3: Variant(3, lambda e, c: 1 / (e / 2), lambda e, c: c / (e / 2), True, True, False),
    # Alg. 4 (Lee-Clifton 2014): eps1 = eps/4, nu ~ Lap(D/eps2) not scaling with c; ((1+6c)/4)eps-DP.
    4: Variant(4, lambda e, c: 1 / (e / 4), lambda e, c: 1 / (e - e / 4), True, False, False),
    # Alg. 5 (Stoddard et al. 2014): no query noise, no cutoff; infinity-DP (Thm. 3.5).
    5: Variant(5, lambda e, c: 1 / (e / 2), None, False, False, False),
    # Alg. 6 (Chen et al. 2015): nu ~ Lap(D/eps2), no cutoff; infinity-DP (Thm. 9.13).
    6: Variant(6, lambda e, c: 1 / (e / 2), lambda e, c: 1 / (e / 2), False, False, False),
}


# --------------------------------------------------------------------------
# Events on batches
# --------------------------------------------------------------------------
def flags_equal(pattern: Sequence[int]):
    """Event: the run's flag vector equals ``pattern`` (use -1 for 'not processed')."""
    target = np.asarray(pattern, dtype=np.int8)

    def event(batch: Batch) -> np.ndarray:
        return np.all(batch.flags == target, axis=1)

    return event


def flags_equal_and_answer_at_most(pattern: Sequence[int], index: int, bound: float):
    """Event: flags equal ``pattern`` and the number released at ``index`` is <= bound."""
    same = flags_equal(pattern)

    def event(batch: Batch) -> np.ndarray:
        return same(batch) & (batch.answers[:, index] <= bound)

    return event
