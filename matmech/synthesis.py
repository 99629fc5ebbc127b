"""Consistent tables and synthetic records (issue 35): from a release, or by an adaptive
select-measure-fit mechanism under one budget.

:func:`synthesize` is post-processing: it hands a release's measurement records to a
graphical model (:mod:`matmech.estimators.graphical`, private-pgm's ``mbi``) and samples
records from it. No data is read and nothing is spent.

:func:`synthesize_adaptive` reads the data. Under one zCDP budget ρ it runs AIM's loop
(McKenna, Mullins, Sheldon, Miklau, "AIM: an adaptive and iterative mechanism for
differentially private synthetic data", VLDB 2022, Alg. 1) with matmech's parts:

1. measure every 1-way marginal (``init`` share of ρ) with :func:`matmech.release` (the
   residual plan, exact discrete Gaussian noise);
2. each round, pick marginals one at a time by permute-and-flip (the exact exponential
   mechanism of :func:`matmech.svt.topc.exponential_top_c`; score sensitivity 1) among the
   candidates (every workload marginal and its subsets that keep the model's junction tree
   under ``max_model_cells``), each pick's ε charged to the budget first; a candidate's score
   is AIM's: ‖M_c x − M_c p̂‖₁ − √(2/π)·σ·|c| (the current model p̂'s error minus the noise
   the measurement would add), σ the std a cell of it would get in this round;
3. measure the round's picks together with :func:`matmech.release` (the residual planner's
   optimum for their union, Xiao et al. 2023) and refit the model on every record so far.

The number of picks is cut when the budget is small: at most the K whose measurement noise
on the smallest candidate (expected L1 √(2/π)·σ_K·|c|, σ_K = √(K/2ρ_measure)) stays under a
quarter of the fitted total N̂ (a released figure). Shares a short loop leaves are measured
again on what was picked, so the budget is spent as declared.

Privacy: each pick is an :class:`~matmech.privacy.events.ExponentialMechanism` event of
ε = √(2ρ_pick) (ρ = ε²/2: charged as pure ε, never the tighter bounded-range ε²/8), each
measurement the release's discrete Gaussian event; everything is charged to ``budget``
(default ``PrivacyBudget(eps, delta)``, accountant ``"zcdp"``) before its noise, and the
shares add up to what the budget had left. The scores' true marginals are read once, before
the first spend; no branch depends on them except through the picks (DP outputs).

No error bars: the model's tables are biased estimates without a known law; neither result
carries an interval (docs/guide/synthetic-data.md).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from matmech import validate
from matmech.estimators.graphical import GraphicalModel, fit_model, load_mbi
from matmech.measurements.record import MeasurementRecord
from matmech.privacy import noise
from matmech.privacy.budget import PrivacyBudget, check_budget
from matmech.plans.marginal_pick import MarginalPickPlan
from matmech.run.runner import run_plan

__all__ = ["Synthetic", "synthesize", "synthesize_adaptive", "SCORE_BOUND"]

#: The declared bound on a pick's score (an L1 distance of counts is at most 2·N, and N at
#: most matmech's default declared record bound 2**32; the noise penalty is subtracted): scores
#: are clipped to it, so nothing after the pick's spend checks a data-dependent magnitude.
SCORE_BOUND = 2.0**34

#: The most mirror-descent iterations of one fit (mbi), and the most rounds (or picks a
#: round) of the adaptive loop: beyond them a call would run for hours.
MAX_ITERS = 10**6
MAX_ROUNDS = 1000


@dataclass(frozen=True, eq=False)
class Synthetic:
    """Consistent tables and synthetic records.

    A frozen record, made by :func:`synthesize` or :func:`synthesize_adaptive`.

    ``model``: the fitted :class:`~matmech.estimators.graphical.GraphicalModel`
    (``table(attributes)``: its marginal in counts, non-negative, consistent, summing to
    ``model.total``); ``codes``: the synthetic records (records × attributes int64 codes, the
    domain's order); ``records``: the same as a pandas DataFrame with the declared domain's
    labels (codes when the domain has none); ``measurements``: the records fitted;
    ``events``: the privacy events charged to make them (empty for :func:`synthesize`).
    No intervals: none is given for a consistent table's cells.

    Parameters
    ----------
    model : GraphicalModel
        The fitted model.
    codes : numpy.ndarray
        The synthetic records as codes.
    domain : Domain or None
        The declared domain (labels), if one was given.
    measurements, events, picks : tuple
        The records fitted, the privacy events charged, the marginals picked.

    Examples
    --------
    >>> from matmech import workloads as W
    >>> x = np.random.default_rng(0).integers(0, 2, (200, 3))
    >>> rel = release(x, W.marginals((2, 2, 2), 2), 1.0, 1e-6, rng=np.random.default_rng(0))
    >>> s = synthesize(rel, n=50, iters=20, rng=np.random.default_rng(1))
    >>> s.codes.shape, bool(s.table((0, 1)).min() >= 0)
    ((50, 3), True)
    """

    model: GraphicalModel
    codes: np.ndarray = field(repr=False)
    domain: Any = field(repr=False)
    measurements: tuple = field(default=(), repr=False)
    events: tuple = field(default=(), repr=False)
    picks: tuple = ()

    def table(self, attributes) -> np.ndarray:
        """The model's marginal on ``attributes`` (names or indices, axes in that order)."""
        return self.model.table(attributes)

    @property
    def records(self):
        """The synthetic records as a pandas DataFrame, labelled by the declared domain."""
        import pandas as pd

        attrs = getattr(self.domain, "attributes", None)
        cols = {}
        for j, name in enumerate(self.model.names):
            c = self.codes[:, j]
            if attrs is None:
                cols[name] = c
            else:
                labels = np.array([attrs[j].value_label(k) for k in range(attrs[j].size)])
                cols[name] = labels[c]
        return pd.DataFrame(cols)


def _names_sizes(domain, records) -> tuple[tuple, tuple, Any]:
    """(names, sizes, the domain kept for labels) from a Domain, a {name: size} mapping,
    a sequence of sizes, or (None) the records' own domain."""
    if domain is None:
        doms = {r.domain for r in records if r.domain is not None}
        if len(doms) != 1:
            raise ValueError(
                "the records do not name one product domain; pass domain= (a matmech Domain, "
                "a {name: size} mapping or the attribute sizes)"
            )
        domain = doms.pop()
    if hasattr(domain, "names") and hasattr(domain, "sizes"):
        return tuple(domain.names), tuple(int(s) for s in domain.sizes), domain
    if isinstance(domain, Mapping):
        names = tuple(validate.text(k, "domain's attribute name") for k in domain)
        values = tuple(domain.values())
    elif isinstance(domain, (str, bytes)) or not hasattr(domain, "__iter__"):
        raise TypeError(
            "domain must be a matmech Domain, a {name: size} mapping or a sequence of sizes, "
            f"got {type(domain).__name__}"
        )
    else:
        values = validate.sequence(domain, "domain")
        names = tuple(f"a{i}" for i in range(len(values)))
    sizes = tuple(validate.integer(v, "domain's attribute size", min=1) for v in values)
    if not sizes:
        raise ValueError("domain must name at least one attribute, got none")
    return names, sizes, None


def _records_of(measured) -> tuple:
    if hasattr(measured, "measurements"):
        return tuple(measured.measurements)
    out: list = []
    for m in validate.sequence(measured, "measured"):
        if hasattr(m, "measurements"):
            out.extend(m.measurements)
        elif isinstance(m, MeasurementRecord):
            out.append(m)
        else:
            raise TypeError(
                "measured must be a Release, several, or their MeasurementRecords; got an item "
                f"of type {type(m).__name__}"
            )
    return tuple(out)


def _n_records(n, model) -> int:
    if n is None:
        return max(0, int(round(model.total)))
    return int(n)


def synthesize(
    measured,
    *,
    domain=None,
    n: int | None = None,
    total: float | None = None,
    iters: int = 1000,
    rng=None,
) -> Synthetic:
    """Consistent tables and ``n`` synthetic records from released measurements → :class:`Synthetic`.

    ``measured``: a :class:`~matmech.results.release.Release` (or several, or their
    :class:`~matmech.measurements.record.MeasurementRecord` s) whose records act on marginals: the
    factored releases (residual, marginal tables, Kronecker) and histogram releases over a
    product ``domain``. ``domain``: a :class:`~matmech.io.domain.Domain` (its labels go into
    ``records``), a {name: size} mapping or the sizes; None takes the records' own sizes.
    ``n``: records to draw (default: the model's total, rounded). ``total``: a known record
    count the tables sum to (default: estimated from the records). ``iters``: mbi's
    mirror-descent iterations. ``rng``: None (secure source) or a numpy Generator for the
    records' randomness (reproducible).

    Post-processing only: nothing is read or spent. No error bars are given for the tables
    or the records. Needs the ``synth`` extra (``pip install 'matmech-dp[synth]'``).

    Parameters
    ----------
    measured : Release, sequence of Release or of MeasurementRecord
        What was released.
    domain : Domain, mapping or sequence of int, optional
        The declared domain (names, sizes, labels).
    n : int, optional
        Records to draw.
    total : float, optional
        A known record count.
    iters : int, default 1000
        mbi's mirror-descent iterations.
    rng : numpy.random.Generator, optional
        None (default) for the secure source; a Generator is reproducible.

    Returns
    -------
    Synthetic
        The fitted model, its tables and the synthetic records.

    Raises
    ------
    ValueError
        No records, records that do not act on marginals, a model too large, bad ``n``.
    TypeError
        A bad ``domain`` or ``rng``.
    ImportError
        mbi is not installed.

    Examples
    --------
    >>> from matmech import workloads as W
    >>> x = np.random.default_rng(0).integers(0, 3, (300, 3))
    >>> rel = release(x, W.marginals((3, 3, 3), 2), 1.0, 1e-6, rng=np.random.default_rng(0))
    >>> s = synthesize(rel, domain={"a": 3, "b": 3, "c": 3}, iters=20, rng=np.random.default_rng(1))
    >>> list(s.records.columns)
    ['a', 'b', 'c']
    """
    records = _records_of(measured)
    if not records:
        raise ValueError("nothing was measured: no records to fit a model to")
    noise.check_rng(rng)
    n = None if n is None else validate.integer(n, "n", min=0)
    total = None if total is None else validate.positive_real(total, "total")
    if total is not None and total < 1:
        raise ValueError(f"total must be a number of records of at least 1, got {total!r}")
    iters = validate.integer(iters, "iters", min=1, max=MAX_ITERS)
    names, sizes, dom = _names_sizes(domain, records)
    for r in records:
        if r.domain is not None and tuple(int(k) for k in r.domain) != sizes:
            raise ValueError(
                f"domain has attribute sizes {sizes}, but the records were measured over "
                f"{tuple(r.domain)}"
            )
    model = fit_model(records, names=names, sizes=sizes, total=total, iters=iters)
    codes = model.sample(_n_records(n, model), rng=rng)
    return Synthetic(model, codes, dom, records)


# ------------------------------------------------------------------ the adaptive mechanism


def _subsets_of(cliques):
    out: set[tuple[int, ...]] = set()
    for c in cliques:
        for k in range(1, len(c) + 1):
            out.update(itertools.combinations(c, k))
    return sorted(out, key=lambda c: (len(c), c))


def _tree(names, sizes, cliques) -> tuple[int, list]:
    """(cells, nodes as index sets) of the junction tree of ``cliques`` (by index)."""
    mbi, _ = load_mbi()
    dom = mbi.Domain(names, sizes)
    jtree, _ = mbi.junction_tree.make_junction_tree(
        dom, [tuple(names[i] for i in c) for c in cliques]
    )
    nodes = [{names.index(a) for a in node} for node in jtree.nodes]
    return sum(math.prod(sizes[i] for i in node) for node in nodes), nodes


def _check_workload(workload, d) -> list[tuple[int, ...]]:
    out = []
    for c in validate.sequence(workload, "workload"):
        t = tuple(sorted(validate.subset(c, "a workload marginal", d)))
        if not t:
            raise ValueError("a workload marginal is a non-empty set of attribute indices, got ()")
        out.append(t)
    if not out:
        raise ValueError("the workload has no marginals")
    return sorted(set(out))


def synthesize_adaptive(
    data,
    domain,
    *,
    eps: float | None = None,
    delta: float | None = None,
    budget: PrivacyBudget | None = None,
    workload: Sequence[Sequence[int]] | None = None,
    rounds: int = 2,
    picks: int | None = None,
    init: float = 0.1,
    select: float = 0.1,
    max_model_cells: int = 1 << 22,
    iters: int = 300,
    n: int | None = None,
    rng=None,
) -> Synthetic:
    """AIM's adaptive select-measure-fit loop on matmech's plans (module docstring) → :class:`Synthetic`.

    ``data``: records (a records × attributes code array), marginal tables, or a table/file
    read with ``domain`` (a :class:`~matmech.io.domain.Domain`); ``domain`` may also be a
    {name: size} mapping or the sizes for a code array. ``eps``, ``delta`` (> 0): the total,
    charged to a new ``PrivacyBudget(eps, delta)`` (zCDP accountant); or ``budget``: a zCDP
    budget (or share) whose remaining ρ is all spent. ``workload``: the marginals the records
    should answer (attribute-index tuples; default every 3-way marginal of at most 10,000
    cells, or every 2-way one with fewer than 3 attributes). ``rounds``: select-measure-fit
    rounds after the 1-way measurement; ``picks``: marginals picked per round (default: the
    number of attributes); ``init`` / ``select``: the shares of ρ for the 1-way marginals and
    for all the picks (the rest measures the picks, split evenly over the rounds).
    ``max_model_cells``: the largest junction tree (cells) a pick may make. ``iters``: mbi's
    iterations per fit (the last fit: 3×). ``n``: records to draw (default the model's total).
    ``rng``: None (secure) or a numpy Generator (reproducible, NOT secure).

    Parameters
    ----------
    data : array_like, mapping or data source
        The records (or their marginal tables, or a table/file with a Domain).
    domain : Domain, mapping or sequence of int
        The declared domain.
    eps, delta : float, optional
        The total (δ > 0), or leave out and give ``budget``.
    budget : PrivacyBudget, optional
        A zCDP budget whose remaining ρ is spent.
    workload : sequence of tuple of int, optional
        The marginals the records should answer.
    rounds, picks : int
        Rounds after the 1-way measurement; picks per round.
    init, select : float
        Shares of ρ for the 1-way marginals and for the picks.
    max_model_cells, iters, n : int
        Model size cap, mbi iterations, records to draw.
    rng : numpy.random.Generator, optional
        None (default) for secure randomness; a Generator is reproducible, NOT secure.

    Returns
    -------
    Synthetic
        The model, the records, every record measured, the events charged and the picks.

    Raises
    ------
    ValueError
        Bad input, or a budget too small to measure with, before anything is spent.
    TypeError
        A bad ``rng``, ``budget`` or ``domain``.
    BudgetExceededError
        The budget cannot pay.

    Examples
    --------
    >>> x = np.random.default_rng(0).integers(0, 3, (300, 3))
    >>> b = PrivacyBudget(1.0, 1e-6)
    >>> s = synthesize_adaptive(x, (3, 3, 3), budget=b, rounds=1, picks=1, iters=20,
    ...                         rng=np.random.default_rng(0))
    >>> len(s.picks), b.remaining_rho < 1e-9
    (1, True)
    """
    from matmech import workloads as W
    from matmech.sources.source import as_source
    from matmech.release import release
    from matmech.privacy.params import check_privacy_params
    from matmech.svt.topc import em_calibration

    load_mbi()  # the extra is there before anything is spent
    check_budget(budget)
    noise.check_rng(rng)
    eps = None if eps is None else validate.positive_real(eps, "eps")
    delta = None if delta is None else validate.nonnegative_real(delta, "delta")
    if budget is None:
        if eps is None or delta is None or not delta > 0:
            raise ValueError(
                f"give eps and delta > 0 (Gaussian noise under zCDP), or a zCDP budget= to "
                f"spend; got eps={eps!r}, delta={delta!r}"
            )
        check_privacy_params(eps, delta)  # the documented range, naming the value
        budget = PrivacyBudget(eps, delta, accountant="zcdp")
    elif eps is not None or delta is not None:
        raise ValueError("give either eps and delta or budget=, not both")
    rho = budget.remaining_rho
    if rho is None or not rho > 0:
        raise ValueError(
            "the budget has no zCDP capacity left (use a budget with delta > 0 and the 'zcdp' "
            "accountant)"
        )
    names, sizes, dom = _names_sizes(domain, ())
    d = len(sizes)
    init, select = (validate.real(v, what) for v, what in ((init, "init"), (select, "select")))
    for what, v in (("init", init), ("select", select)):
        if not 0 < v < 1:
            raise ValueError(f"{what} must be a share of the budget in (0, 1), got {v!r}")
    if not init + select < 1:
        raise ValueError(f"init + select must leave a share to measure, got {init} + {select}")
    rounds = validate.integer(rounds, "rounds", min=1, max=MAX_ROUNDS)
    iters = validate.integer(iters, "iters", min=1, max=MAX_ITERS)
    max_model_cells = validate.integer(max_model_cells, "max_model_cells", min=1)
    picks = d if picks is None else validate.integer(picks, "picks", min=1, max=MAX_ROUNDS)
    n = None if n is None else validate.integer(n, "n", min=0)
    if workload is None:
        k = 3 if d >= 3 else min(2, d)
        workload = [
            c
            for c in itertools.combinations(range(d), k)
            if math.prod(sizes[i] for i in c) <= 10_000
        ] or [tuple(range(d))[:k]]
    cliques = _check_workload(workload, d)
    candidates = [c for c in _subsets_of(cliques) if len(c) >= 2]

    try:
        shares = budget.split([init, select] + [(1 - init - select) / rounds] * rounds)
    except ValueError as e:
        raise ValueError(
            f"init={init!r}, select={select!r} and rounds={rounds} do not split the budget into "
            f"usable shares: {e}"
        ) from None
    records: list = []
    events: list = []

    def measure(subsets, share):
        rel = release(
            data,
            W.marginals(sizes, attrs=list(subsets)),
            budget=share,
            strategy="residual",
            rng=rng,
            domain=dom,
        )
        records.extend(rel.measurements)
        events.extend(rel.events)

    n_picks = rounds * picks
    rho_pick = (shares[1].remaining_rho or 0.0) / n_picks
    eps_pick = math.sqrt(2 * rho_pick) * (1 - 1e-9)  # ρ = ε²/2 rounded up must fit
    # every share must make a valid mechanism: refused here, before the data is read
    try:
        em_calibration(c=1, eps=eps_pick, value_bound=SCORE_BOUND)
        for share in shares[:1] + shares[2:]:
            target = share.target()
            check_privacy_params(target.eps, target.delta)
    except ValueError as e:
        raise ValueError(
            f"the budget split over init={init!r}, select={select!r}, rounds={rounds} and "
            f"picks={picks} leaves a share too small to measure or pick with: {e}"
        ) from None
    # the true marginals of every candidate: read once, before any spend
    source = as_source(data, dom, name="data")
    truth = {c: np.asarray(t, dtype=float) for c, t in source.marginals(sizes, candidates).items()}

    measure([(i,) for i in range(d)], shares[0])
    model = fit_model(records, names=names, sizes=sizes, iters=iters)
    measured: list[tuple[int, ...]] = [(i,) for i in range(d)]
    chosen: list[tuple[int, ...]] = []
    too_big: set = set()
    # how many picks the budget can measure usefully: the most K whose noise on the smallest
    # candidate (expected L1, σ_K = √(K/2ρ_measure) a cell) stays under a quarter of the
    # model's total N̂ (a released figure); never more than rounds × picks
    rho_measure = sum(sh.remaining_rho or 0.0 for sh in shares[2:])
    c_min = min(truth[c].size for c in candidates)
    n_hat = float(model.total)
    useful = max(
        [
            k
            for k in range(1, n_picks + 1)
            if math.sqrt(2 / math.pi) * math.sqrt(k / (2 * rho_measure)) * c_min <= n_hat / 4
        ],
        default=1,
    )
    picks = min(picks, -(-useful // rounds))
    for r in range(rounds):
        share = shares[2 + r]
        round_picks: list[tuple[int, ...]] = []
        tables: dict = {}  # the model's marginals (fixed within a round)
        sigma = math.sqrt(picks / (2 * (share.remaining_rho or 0.0)))  # a cell's std, roughly
        for _ in range(min(picks, useful - len(chosen))):
            _, nodes = _tree(names, sizes, measured + round_picks)
            ok = []
            for c in candidates:
                if c in too_big or c in chosen or c in round_picks:
                    continue
                inside = any(set(c) <= node for node in nodes)  # the tree does not grow
                if (
                    not inside
                    and _tree(names, sizes, measured + round_picks + [c])[0] > max_model_cells
                ):
                    too_big.add(c)  # trees only grow: never again
                    continue
                ok.append(c)
            if not ok:
                break
            plan = MarginalPickPlan(
                tuple(ok),
                {c: tables[c] if c in tables else tables.setdefault(c, model.table(c)) for c in ok},
                tuple(math.sqrt(2 / math.pi) * sigma * truth[c].size for c in ok),
                eps_pick,
                SCORE_BOUND,
            )
            pick = run_plan(plan, truth, budget=shares[1], rng=rng)  # charged, then drawn
            events.extend(plan.events)
            round_picks.append(pick)
        if not round_picks:  # every candidate is measured or too large: no more rounds
            break
        measure(round_picks, share)
        chosen.extend(round_picks)
        measured.extend(round_picks)
        last = r == rounds - 1
        model = fit_model(
            records, names=names, sizes=sizes, iters=3 * iters if last else iters, warm_start=model
        )
    # shares left by a loop that ran out of candidates (a decision on the picks, DP outputs):
    # measure what was chosen (or the 1-way marginals) again, so the budget is spent as declared
    left = [sh for sh in shares[1:] if (sh.remaining_rho or 0.0) >= rho_pick]
    if left:
        for sh in left:
            target = sh.target()
            try:
                check_privacy_params(target.eps, target.delta)
            except ValueError:  # too little to measure with: left unspent, never overspent
                continue
            measure(chosen or [(i,) for i in range(d)], sh)
        model = fit_model(records, names=names, sizes=sizes, iters=3 * iters, warm_start=model)
    codes = model.sample(_n_records(n, model), rng=rng)
    return Synthetic(model, codes, dom, tuple(records), tuple(events), tuple(chosen))
