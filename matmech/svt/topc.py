"""Top-c selection by the exponential mechanism, c rounds without replacement.

[LSL17] (Lyu, Su, Li, VLDB 2017, Sec. 5 and Sec. 6) recommend this over any
SVT when all candidates are known in advance: each round spends eps/c and
picks i with probability proportional to exp(eps q_i / (2 c D)), or
exp(eps q_i / (c D)) for monotonic scores (their Sec. 2, "one-directional"
quality changes).  eps-DP by sequential composition.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from matmech.privacy import noise
from matmech.privacy.params import calibrated_eps
from matmech.svt.checks import check_c, check_eps, check_flag, check_sensitivity, check_values
from matmech.svt.grid import CHUNK_MAX, worker_sources
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # names used only in annotations
    from matmech.privacy.randomness import Rng
    import numpy.typing as npt

__all__ = ["TopCResult", "exponential_top_c"]


@dataclass(frozen=True)
class TopCResult:
    """Output of :func:`exponential_top_c`.

    ``positions`` are the selected indices in selection order (best first);
    ``score_scale`` is the factor multiplying each value inside ``exp(.)``.

    Parameters
    ----------
    positions : tuple of int
        The picks, best first.
    eps : float
        The total ε.
    c, n_candidates : int
        Picks and candidates.
    score_scale : float
        The factor on each value inside exp(.).

    Returns
    -------
    TopCResult
        A frozen record, made by :func:`exponential_top_c`.

    Raises
    ------
    dataclasses.FrozenInstanceError
        On any attempt to change a field.

    Examples
    --------
    >>> t = exponential_top_c([3, 500, 2, 700], 2, 1.0, rng=np.random.default_rng(0))
    >>> t.c, t.n_candidates, t.score_scale
    (2, 4, 0.25)
    """

    positions: tuple[int, ...]
    eps: float
    c: int
    n_candidates: int
    score_scale: float


def exponential_top_c(
    values: npt.ArrayLike,
    c: int,
    eps: float,
    *,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    rng: Rng = None,
) -> TopCResult:
    """Top-c by the exponential mechanism, c rounds without replacement ([LSL17] Sec. 5).

    Each round spends eps/c and picks i with probability proportional to
    exp(eps * q_i / (2 c D)) (exp(eps * q_i / (c D)) for monotonic scores)
    among the candidates not yet picked; eps-DP by sequential composition.
    Implemented in one pass with the Gumbel-max trick: the top c of
    q_i * scale + G_i, G_i = -log(-log U_i), U_i from ``noise.uniform``, is
    distributed exactly as c sequential EM draws without replacement.
    Requires c <= len(values).  ``rng=None`` (default) is the secure CTR_DRBG.
    From 2**22 candidates on, blocks are drawn by two threads from two
    independent sources (fresh CSPRNG sources, or ``Generator.spawn``
    children), as in the SVT scan.

    Caveat: unlike the SVT comparisons, the scores and the Gumbel transform are
    computed in floating point (53-bit uniforms), so the guarantee holds for
    the idealised real-number mechanism; a bit-exact EM would need a
    randomised-rounding or base-2 construction (Ilvento, CCS 2020).

    Parameters
    ----------
    values : array_like of float
        The scores.
    c : int
        How many to pick (c <= len(values)).
    eps : float
        The total ε.
    sensitivity : float, default 1.0
        Sensitivity of each score.
    monotonic : bool, default False
        Monotonic scores.
    rng : numpy.random.Generator, optional
        None (default) for the secure CTR_DRBG; a Generator is reproducible and NOT secure.

    Returns
    -------
    TopCResult
        The picks, best first.

    Raises
    ------
    ValueError
        c > len(values), bad ε or non-finite scores, before any randomness.
    TypeError
        Arguments of the wrong kind.

    Examples
    --------
    >>> t = exponential_top_c([3, 500, 2, 700], 2, 1.0, rng=np.random.default_rng(0))
    >>> sorted(t.positions)
    [1, 3]
    """
    arr = check_values(values)
    c = check_c(c)
    eps, _ = check_eps(eps)
    sensitivity = check_sensitivity(sensitivity)
    monotonic = check_flag("monotonic", monotonic)
    n = arr.shape[0]
    if n == 0:
        raise ValueError("values must hold at least one candidate, got an empty sequence")
    if c > n:
        raise ValueError(f"c must be at most the number of candidates ({n}), got c={c}")
    scale = calibrated_eps(eps) / (
        (1.0 if monotonic else 2.0) * c * sensitivity
    )  # the decimal eps charged
    src = noise.check_rng(rng)
    workers = worker_sources(rng, n)
    if workers is None:
        top, score = _block_top(arr, scale, c, src)
    else:
        top, score = _parallel_top(arr, scale, c, workers)
    top = top[np.argsort(-score, kind="stable")]
    return TopCResult(
        positions=tuple(int(i) for i in top), eps=eps, c=c, n_candidates=n, score_scale=scale
    )


def _block_top(values: np.ndarray, scale: float, c: int, src) -> tuple[np.ndarray, np.ndarray]:
    """Indices (into ``values``) and Gumbel-perturbed scores of the block's top min(c, len) entries."""
    n = values.shape[0]
    u = np.asarray(noise.uniform(n, rng=src), dtype=np.float64)
    score = values.astype(np.float64) * scale - np.log(-np.log(u))
    top = np.argpartition(-score, c - 1)[:c] if c < n else np.arange(n)
    return top, score[top]


def _parallel_top(arr: np.ndarray, scale: float, c: int, workers) -> tuple[np.ndarray, np.ndarray]:
    """The top c over blocks of CHUNK_MAX candidates, drawn by two threads.

    Block k's uniforms come from ``workers[k % 2]``, each worker taking its
    blocks in order, so seeded runs are reproducible.  The global top c lies
    within the union of the blocks' top c, so merging them is exact.
    """
    n = arr.shape[0]
    starts = list(range(0, n, CHUNK_MAX))

    def work(k0: int, src):
        out = []
        for start in starts[k0 :: len(workers)]:
            top, score = _block_top(arr[start : start + CHUNK_MAX], scale, c, src)
            out.append((top + start, score))
        return out

    with ThreadPoolExecutor(max_workers=len(workers), thread_name_prefix="matmech-em-noise") as ex:
        parts = [
            p
            for fut in [ex.submit(work, k, w) for k, w in enumerate(workers)]
            for p in fut.result()
        ]
    idx = np.concatenate([p[0] for p in parts])
    score = np.concatenate([p[1] for p in parts])
    best = np.argpartition(-score, c - 1)[:c] if c < score.size else np.arange(score.size)
    return idx[best], score[best]
