"""Continual release of running totals: one step's counts in, the noisy running total out.

:meth:`StreamRelease.create` plans the stream from its spec (no data), checks that the
budget can pay for the whole stream, writes the stream file and charges the budget ONCE,
before any noise exists. :meth:`StreamRelease.step` then, for step t:

1. checks that the counts are counts (k finite non-negative integers; never their values
   in a message) and clamps each cell to the declared ``max_records``
   (:func:`~matmech.stream.exact.clamp_counts`: stability-preserving, nothing refused);
2. takes z_t from the file, or draws it (exact discrete Gaussian / Laplace on the plan's
   grid, ``rng``: None = the secure CTR_DRBG) and commits it before reading the counts;
3. y_t = C_g[t]·x + z_t in exact integers whatever the counts
   (:func:`~matmech.stream.exact.exact_measurement`), r_t = B_g[t]·y (post-processing),
   std_t = std·‖B_g[t]‖, commits x_t, y_t, r_t, and only then returns r_t.

After the charge nothing branches on the counts' values: a step either fails on the
input's shape or type (public: no valid count vector fails) or is released.

Asking again for a released step returns the stored release without reading anything.
Reopening the file after a crash resumes: a charged stream is never charged again (if a
crash fell between the charge and its mark, the ledger's entry, named by the stream's random
id, is found and not repeated) and stored noise is reused. Reopening verifies the file against
its key file (:mod:`matmech.stream.state`): an edited release, a dropped step or an older copy
of the file (which would release a step again with fresh noise) is refused.
"""

from __future__ import annotations

import json
import math
import secrets
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from matmech import validate
from matmech.privacy import noise
from matmech.plans.plan import Draws
from matmech.privacy.budget import check_budget, check_events_affordable, privacy_target
from matmech.privacy.events import DiscreteGaussian, DiscreteLaplace, Event, Stream
from matmech.privacy.measure import lattice_noise
from matmech.stream.exact import clamp_counts, exact_measurement, limbs_of
from matmech.stream.factorizations import StreamFactorization
from matmech.privacy.calibration import lattice_std
from matmech.stream.plan import MAX_STATE_BYTES, StreamPlan, StreamSpec, stream_noise, plan_stream
from matmech.run.runner import run_plan
from matmech.stream.state import StreamStore


#: The units of a stream's ``mean_variance`` / ``max_variance`` (status, advice).
VARIANCE_UNITS = "counts^2 (variance of one released running total, noise as drawn)"


@dataclass(frozen=True)
class StreamStep:
    """The release of step ``t``: the noisy running totals per category and their exact std."""

    t: int
    values: tuple[float, ...]
    std: float
    categories: tuple[str, ...]
    secure: bool = True
    replayed: bool = False


def _plan_meta(plan: StreamPlan, stream_id: str, budgeted: bool) -> dict:
    f = plan.factorization
    return {
        "spec": json.dumps(asdict(plan.spec), sort_keys=True),
        "plan": json.dumps(
            {
                "grid": plan.grid,
                "noise": plan.noise,
                "scale": plan.scale,
                "std": plan.std,
                "sensitivity": plan.sensitivity,
                "name": f.name,
                "objective": f.objective,
                "toeplitz": f.toeplitz,
                "form": f.form,
                "params": [list(p) for p in f.params],
            }
        ),
        "C": np.ascontiguousarray(
            {"toeplitz": f.c, "dense": f.matrix, "windows": f.windows}[f.form], dtype=np.float64
        ).tobytes(),
        "stream_id": stream_id,
        "budgeted": "1" if budgeted else "0",  # without a budget there is nothing to charge
    }


def _plan_from_meta(meta: dict) -> StreamPlan:
    spec_d = json.loads(meta["spec"])
    spec_d["categories"] = tuple(spec_d["categories"])
    spec = StreamSpec(**spec_d)
    p = json.loads(meta["plan"])
    arr = np.frombuffer(meta["C"], dtype=np.float64)
    n = spec.horizon
    params = tuple(tuple(v) if isinstance(v, list) else v for v in (tuple(q) for q in p["params"]))
    form = p.get("form", "toeplitz" if p["toeplitz"] else "dense")  # files before "form"
    if form not in ("toeplitz", "dense", "windows") or arr.size != (
        n * n if form == "dense" else n
    ):
        raise ValueError(
            "the stream file's factorization does not fit its spec (an altered file or one "
            "written by another version): nothing is drawn from it"
        )
    if form == "windows" and not np.all(np.rint(arr) == arr):
        raise ValueError("the stream file's windows are not integers: nothing is drawn from it")
    data = {
        "toeplitz": {"c": arr.copy()},
        "dense": {"matrix": arr.reshape(n, n).copy() if form == "dense" else None},
        "windows": {"windows": arr.astype(np.int64)},
    }[form]
    f = StreamFactorization(p["name"], n, params=params, objective=p["objective"], **data)
    stored = (p["noise"], p["scale"], p["sensitivity"], p["std"])
    kind, scale, sens = stream_noise(spec, f)  # the calibration of the C_g the file measures
    if stored != (kind, scale, sens, lattice_std(kind, scale, p["grid"], remedy="raise eps")):
        raise ValueError(
            "the stream file's noise calibration does not follow from its spec and factorization "
            "(an altered file or one written by another version): nothing is drawn from it"
        )
    return StreamPlan(spec, f, p["grid"], p["noise"], p["scale"], p["std"], p["sensitivity"])


def _add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)`` (Python 3.11+), or the same ``__notes__`` list on 3.10."""
    notes = getattr(exc, "__notes__", None)
    vars(exc)["__notes__"] = [*(notes or []), note]  # an attribute 3.10's stubs do not declare


def stream_events(plan: StreamPlan) -> tuple:
    """The privacy event of a stream (:mod:`matmech.privacy.events`): its factorization, its
    steps and the noise every step draws on the grid (sensitivity: C_g's largest column norm,
    the charge's (ε, δ) declared), charged once for the whole stream."""
    eps, delta = plan.spec.charge
    ev: Event
    if plan.noise == "discrete_laplace":
        ev = DiscreteLaplace(plan.scale, plan.sensitivity, eps=eps, grid=plan.grid)
    else:
        ev = DiscreteGaussian(plan.scale, plan.sensitivity, eps=eps, delta=delta, grid=plan.grid)
    return (Stream(plan.factorization.name, plan.spec.horizon, ev),)


class _StreamCharged:
    """What the stream's two plans share: the charge of the stream plan :meth:`charged` (its
    privacy events, :func:`stream_events`), and no estimate (the draws are the result)."""

    def charged(self) -> StreamPlan:
        raise NotImplementedError

    @property
    def eps(self) -> float:
        return self.charged().spec.charge[0]

    @property
    def delta(self) -> float:
        return self.charged().spec.charge[1]

    @property
    def neighbors(self) -> str:
        return "add_remove"

    @property
    def events(self) -> tuple:
        return stream_events(self.charged())

    def estimate(self, draws: Draws) -> None:
        return None


@dataclass(frozen=True, eq=False)
class StreamChargePlan(_StreamCharged):
    """The stream's one charge as a plan (:class:`~matmech.plans.plan.Plan`, run by
    :func:`~matmech.run.runner.run_plan`, issue 34): it reads nothing and draws nothing; its
    events (:func:`stream_events`) pay for every step of the stream, before the first draw."""

    stream: StreamPlan
    what: str
    workload: None = None
    sizes: tuple = ()
    subsets: tuple = ()

    def charged(self) -> StreamPlan:
        return self.stream

    def read(self, data) -> None:
        return None

    def check(self, tables) -> None:
        return None

    def draw(self, data, *, rng) -> Draws:
        return Draws()

    def result(self, est, *, budget_remaining) -> None:
        return None


@dataclass(frozen=True, eq=False)
class StreamStepPlan(_StreamCharged):
    """Step ``t`` of an open ``release`` as a plan (:class:`~matmech.plans.plan.Plan`, run by
    :func:`~matmech.run.runner.run_plan` without a budget: the stream paid for every step
    when it was charged, :class:`StreamChargePlan`). It reads the step's counts (checked and
    clamped, :func:`~matmech.stream.exact.clamp_counts`); its draw takes z_t from the file or
    draws and commits it, then commits x_t, y_t and r_t; its result is the
    :class:`StreamStep`, returned only after those commits (module notes)."""

    release: StreamRelease
    t: int
    workload: None = None
    sizes: tuple = ()
    subsets: tuple = ()

    @property
    def what(self) -> str:
        return f"stream {self.release.stream_id}: step {self.t}"

    def charged(self) -> StreamPlan:
        return self.release.plan

    def read(self, counts) -> np.ndarray:
        spec = self.release.plan.spec
        return clamp_counts(counts, len(spec.categories), spec.max_records)

    def check(self, tables: Any) -> np.ndarray:
        return (
            tables  # the counts, clamped on reading: every count vector is released (module notes)
        )

    def draw(self, x: np.ndarray, *, rng) -> Draws:
        self.release._take(self.t, x, noise.check_rng(rng))
        return Draws()

    def result(self, est, *, budget_remaining) -> StreamStep:
        return self.release._result(self.t, False)


class StreamRelease:
    """An open stream (see the module notes). Make one with :meth:`create` or :meth:`open`."""

    def __init__(self, store: StreamStore, plan: StreamPlan, *, budget=None, rng=None):
        self._store, self.plan = store, plan
        self._src = noise.check_rng(rng)
        self.stream_id = store.meta["stream_id"]
        k, n = len(plan.spec.categories), plan.spec.horizon
        self._layout = plan.layout  # built with K = C_g/g, once per plan
        self._ensure_charged(budget)
        done, self._pending, x, y, r = store.load(k)
        # the counts' limbs (x ≤ cap ≤ 2^50 is exact in the file's float64), y and r
        self._limbs = np.zeros((self._layout.limbs, n, k), dtype=np.int64)
        self._limbs[:, :done] = limbs_of(x.astype(np.int64), self._layout)
        self._y, self._r = np.zeros((n, k)), np.zeros((n, k))
        self._y[:done], self._r[:done] = y, r
        self._done = done
        self._stds = plan.step_stds()

    # -- construction --------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        path,
        spec: StreamSpec,
        *,
        budget=None,
        rng=None,
        factorization: StreamFactorization | None = None,
        key_file=None,
    ) -> StreamRelease:
        """Plan the stream, check the budget, write the stream file and its key file
        (``key_file``: a path of your choosing; default ``<config dir>/streams/<id>.key``,
        :func:`matmech.privacy.integrity.config_dir`) and charge the budget once."""
        noise.check_rng(rng)  # first, as every entry point that spends
        path = validate.path(path)
        key_file = None if key_file is None else validate.path(key_file, "key_file")
        if not isinstance(spec, StreamSpec):
            raise TypeError(f"spec must be a StreamSpec, got {type(spec).__name__}")
        check_budget(budget)
        if spec.eps is None and spec.rho is None:  # all of the share given as budget=
            t = privacy_target(None, None, budget)
            spec = replace(spec, eps=t.eps, delta=t.delta)
        plan = plan_stream(spec, factorization)
        layout = plan.layout
        need = (layout.limbs + 2) * 8 * spec.horizon * len(spec.categories)
        if need > MAX_STATE_BYTES:
            raise ValueError(
                f"this stream keeps {need / 2**30:.1f} GiB of history ({layout.limbs} int64 limbs of "
                f"the counts, y and r per cell); at most {MAX_STATE_BYTES / 2**30:.0f} GiB is allowed: "
                "lower max_records, the horizon or the categories"
            )
        check_events_affordable(budget, stream_events(plan), what=cls._what_for(plan, "?"))
        meta = _plan_meta(plan, secrets.token_hex(8), budget is not None)
        store = StreamStore.create(path, meta, key_file=key_file)
        return cls(store, plan, budget=budget, rng=rng)

    @classmethod
    def open(cls, path, *, budget=None, rng=None, key_file=None) -> StreamRelease:
        """Reopen a stream file (after a crash or in a later process), verified against its
        key file (``key_file`` if it was declared at creation): an altered file, or one
        restored from an older copy, raises :class:`~matmech.privacy.integrity.IntegrityError`."""
        noise.check_rng(rng)  # before the file (private counts) is read
        key_file = None if key_file is None else validate.path(key_file, "key_file")
        store = StreamStore.open(validate.path(path), key_file=key_file)
        return cls(store, _plan_from_meta(store.meta), budget=budget, rng=rng)

    @staticmethod
    def _what_for(plan: StreamPlan, stream_id: str) -> str:
        spec, name = plan.spec, plan.factorization.name
        # a named factorization keeps the wording of earlier versions (an interrupted charge
        # of an older file is found by it); "auto" names what it chose
        how = f"auto: {name}" if spec.factorization == "auto" else spec.factorization
        return (
            f"stream {stream_id}: running totals, {spec.horizon} steps x {len(spec.categories)} categories, "
            f"{how}"
        )

    def _ensure_charged(self, budget) -> None:
        if self._store.charged:
            return
        if budget is None:
            raise ValueError(
                "this stream's charge to its budget was interrupted; reopen it with the budget/ledger "
                "given at creation (the charge is then completed or found, never repeated)"
            )
        what = self._what_for(self.plan, self.stream_id)
        # the PrivacyBudget interface (a Ledger's entries are its verified rows; a share's
        # spends reach its parent as "share i/k: <what>")
        if not any(
            e.what == what or e.what.endswith(": " + what) for e in check_budget(budget).ledger
        ):
            run_plan(StreamChargePlan(self.plan, what), None, budget=budget, rng=self._src)
        self._store.mark_charged()  # committed after the charge, before any step draws

    # -- the stream ----------------------------------------------------------------------

    @property
    def steps_done(self) -> int:
        return self._done

    @property
    def horizon(self) -> int:
        return self.plan.spec.horizon

    def _result(self, t: int, replayed: bool) -> StreamStep:
        return StreamStep(
            t,
            tuple(map(float, self._r[t])),
            float(self._stds[t]),
            self.plan.spec.categories,
            bool(self._src.secure),
            replayed,
        )

    def step(self, counts, *, t: int | None = None) -> StreamStep:
        """Feed step t's counts (one per category; t defaults to the next step) and return
        the noisy running totals with their exact std. A step already released is returned
        as stored (``replayed``) without reading ``counts``."""
        n = self.horizon
        if t is None:
            if self._done == n:
                raise ValueError(
                    f"the stream is complete: all {n} steps were released (replay one with t=)"
                )
            t = self._done
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 0 <= int(t) < n:
            raise ValueError(f"t must be a step in [0, {n}), got {t!r}")
        t = int(t)
        if t < self._done:
            return self._result(t, True)
        if t > self._done:
            raise ValueError(f"step {t} is ahead of the stream: the next step is {self._done}")
        return run_plan(StreamStepPlan(self, t), counts, budget=None, rng=self._src)

    def _take(self, t: int, x: np.ndarray, rng) -> None:
        """Step t on its checked counts x: z_t from the file or drawn and committed, y_t and
        r_t computed exactly, then x_t, y_t, r_t committed (:class:`StreamStepPlan`'s draw)."""
        g = self.plan.grid
        z = self._pending.get(t)
        if z is None:
            z = self._draw(rng)
            self._store.put_noise(t, z)
            self._pending[t] = z
        self._limbs[:, t] = limbs_of(x, self._layout)
        f = self.plan.factorization
        y = exact_measurement(self.plan.k_row(t), self._limbs[:, : t + 1], z, g, self._layout)
        self._y[t] = y
        r = f.b_row(t) @ self._y[: t + 1]
        self._store.put_step(t, x.astype(np.float64), y, r)
        self._r[t] = r
        self._done = t + 1
        del self._pending[t]

    def step_many(self, rows, *, t: int = 0, on_step=None) -> list[StreamStep]:
        """Feed consecutive steps: ``rows[i]`` (one count per category) is step ``t + i``
        (t = 0 by default: a batch is the stream from its start, so running the same batch
        again after a failure resumes it). Each step is taken exactly as :meth:`step` takes
        it (its noise committed before its counts are read, its release committed before the
        next step starts); steps already released are replayed from the file, their rows not
        read. Every row to be fed is checked to be a count vector before the first step, so a
        malformed row refuses the batch, naming its step, before anything is drawn. A failure
        during the batch (a full disk) leaves the steps before it released and stored; the
        exception's note names the step that failed. ``on_step(StreamStep)`` is called after
        each step (the command line prints it)."""
        if hasattr(rows, "to_numpy") and not isinstance(rows, np.ndarray):
            rows = rows.to_numpy()
        if isinstance(rows, (str, bytes)) or not hasattr(rows, "__len__"):
            raise TypeError(
                f"rows must be a sequence of count rows (one per step), got {type(rows).__name__}"
            )
        if on_step is not None and not callable(on_step):
            raise TypeError(f"on_step must be callable or None, got {type(on_step).__name__}")
        n, spec = self.horizon, self.plan.spec
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 0 <= int(t) < n:
            raise ValueError(f"t must be a step in [0, {n}), got {t!r}")
        t = int(t)
        if t > self._done:
            raise ValueError(f"step {t} is ahead of the stream: the next step is {self._done}")
        m = len(rows)
        if m == 0:
            raise ValueError("rows is empty: give one row of counts per step")
        if t + m > n:
            raise ValueError(
                f"{m} rows from step {t} run past the stream's horizon of {n} steps "
                f"(at most {n - t} rows from step {t})"
            )
        checked = {}
        for i in range(max(0, self._done - t), m):  # the rows to be fed, before any draw
            try:
                checked[t + i] = clamp_counts(rows[i], len(spec.categories), spec.max_records)
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"step {t + i} (row {i}): {exc}; no step was taken") from None
        out = []
        for i in range(m):
            try:
                res = self.step(checked.get(t + i), t=t + i)
            except Exception as exc:
                _add_note(
                    exc,
                    f"batch from step {t}: steps {t}..{t + i - 1} are released and stored, "
                    f"step {t + i} failed; run the batch again to resume (released steps are "
                    "replayed)"
                    if i
                    else f"batch from step {t}: step {t} failed, no step of the batch was released",
                )
                raise
            out.append(res)
            if on_step is not None:
                on_step(res)
        return out

    def _draw(self, rng) -> np.ndarray:
        p, k = self.plan, len(self.plan.spec.categories)
        return lattice_noise(p.noise, p.scale, p.grid, k, rng=rng)

    def released(self) -> list[StreamStep]:
        """Every released step so far."""
        return [self._result(t, True) for t in range(self._done)]

    def status(self) -> dict:
        """Public facts about the stream (no count, no noise). ``mean_variance`` /
        ``max_variance``: the exact variance of a released running total (one category),
        mean and max over the steps, in counts² under the noise this stream draws
        (:data:`VARIANCE_UNITS`; :meth:`~matmech.stream.plan.StreamPlan.errors`)."""
        p, spec = self.plan, self.plan.spec
        eps, delta = spec.charge
        nxt = float(self._stds[self._done]) if self._done < self.horizon else math.nan
        mean_var, max_var = p.errors()
        return {
            "stream_id": self.stream_id,
            "horizon": spec.horizon,
            "steps_done": self._done,
            "categories": list(spec.categories),
            "factorization": p.factorization.name,
            "objective": p.factorization.objective,
            "eps": eps,
            "delta": delta,
            "rho": spec.rho,
            "noise": p.noise,
            "scale": p.scale,
            "noise_std": p.std,
            "grid": p.grid,
            "sensitivity": p.sensitivity,
            "next_step_std": nxt,
            "final_step_std": float(self._stds[-1]),
            "mean_variance": mean_var,
            "max_variance": max_var,
            "variance_units": VARIANCE_UNITS,
        }
