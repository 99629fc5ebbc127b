"""The marginal-pick plan: one exponential-mechanism pick of the marginal a model fits worst,
run by :func:`~matmech.run.runner.run_plan` (issue 34: one spend protocol; issue 35: the
selection step of AIM, McKenna, Mullins, Sheldon, Miklau, VLDB 2022, Alg. 1).

Built without data from the candidates (attribute subsets), the current model's tables on
them (a released figure: post-processing of earlier DP outputs) and each candidate's noise
penalty. The plan reads its own table, each candidate's true marginal from a mapping read
once by the caller before its first spend (:meth:`MarginalPickPlan.read`); its check turns
them into AIM's scores, ‖M_c x − M_c p̂‖₁ − penalty_c (sensitivity 1 under add/remove: one
record moves one cell of M_c x by one), clipped to the declared bound ``score_bound`` (no
data-dependent range check after the spend); after the one spend of an
:class:`~matmech.privacy.events.ExponentialMechanism` of ``eps`` it draws one permute-and-flip
pick (:func:`matmech.svt.topc.exponential_top_c`, exact on the grid of the bound) and returns
the picked candidate, nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from matmech.plans.plan import Draws
from matmech.privacy.events import ExponentialMechanism
from matmech.svt.topc import exponential_top_c


@dataclass(frozen=True, eq=False)
class MarginalPickPlan:
    """Pick one of ``candidates`` (attribute-index tuples) by the exponential mechanism of
    ε = ``eps`` (:class:`~matmech.plans.plan.Plan`, with its own ``read``): ``estimates``, the
    model's table on each candidate (public); ``penalties``, the noise each would get
    (public); ``score_bound``, the declared bound the scores are clipped to."""

    candidates: tuple
    estimates: Mapping = field(repr=False)
    penalties: tuple = field(repr=False)
    eps: float
    score_bound: float
    delta: float = field(default=0.0, init=False)
    neighbors: str = field(default="add_remove", init=False)
    workload: None = field(default=None, init=False)
    sizes: tuple = field(default=(), init=False)
    subsets: tuple = field(default=(), init=False)

    def __post_init__(self):
        if not self.candidates:
            raise ValueError("no candidate marginals to pick from")
        if not all(np.isfinite(self.estimates[c]).all() for c in self.candidates):
            raise ValueError("the model's tables are not all finite: nothing to score against")

    @property
    def what(self) -> str:
        return f"pick one of {len(self.candidates)} marginals (exponential mechanism)"

    @property
    def events(self) -> tuple:
        return (ExponentialMechanism(self.eps),)

    def read(self, truth: Mapping):
        """The candidates' true marginals (private; read before the spend)."""
        return [truth[c] for c in self.candidates]

    def check(self, tables) -> np.ndarray:
        """AIM's scores, clipped to the declared bound (nothing after the spend checks them)."""
        scores = np.array(
            [
                float(np.abs(np.asarray(t, dtype=float) - self.estimates[c]).sum()) - pen
                for c, t, pen in zip(self.candidates, tables, self.penalties)
            ]
        )
        return np.clip(scores, -self.score_bound, self.score_bound)

    def draw(self, scores, *, rng) -> Draws:
        drawn = exponential_top_c(scores, 1, self.eps, rng=rng, value_bound=self.score_bound)
        return Draws((), self.candidates[int(drawn.positions[0])])

    def estimate(self, draws: Draws) -> tuple:
        return draws.state

    def result(self, pick: tuple, *, budget_remaining) -> tuple:
        return pick
