"""Census age bands with error bars
================================

Release census age-band counts from a (synthetic) people table, with error bars.

The whole matmech flow on the workload of ``workloads/age_bands.toml`` (0-17, 18-24, ...,
75+ and everyone): records -> histogram x over single years of age -> ``matmech.release``,
which picks a strategy from the workload alone (Matrix Mechanism, Li et al. PODS 2010, as
in the wavelet / matrix-mechanism slides), measures it with exact discrete Laplace noise,
reconstructs by least squares and reports every answer with its exact standard deviation
and a 95% normal-approximation interval. Because every answer comes from one least-squares
estimate, the bands add up to the released total.

Then a second, sparse-vector release (SVT lecture notes; Lyu, Su, Li VLDB 2017, Alg. 7):
single-year-of-age counts, but only for the ages that (privately) have at least
SVT_THRESHOLD people, with ``release(..., select=...)``: the selection spends its own eps
out of the release's total and the selected ages are measured with the rest. Everything is
charged to one ``matmech.PrivacyBudget``.

pandas is optional: with it the table is a DataFrame and ``matmech.histogram`` reads the
column; without it a numpy array gives the same counts. The seeded generator makes the
output reproducible; a real release passes rng=None (the default), which draws from the
operating system's secure source.
Run: python examples/age_ranges_release.py
"""

from pathlib import Path

import numpy as np

import matmech as mm
from matmech import workloads as W

_HERE = (
    Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
)  # the docs gallery runs this file from examples/ without __file__
SPEC = _HERE.parent / "workloads" / "age_bands.toml"
SEED = 1790
N_PEOPLE = 50_000
EPS_TOTAL = 1.0
EPS_BANDS = 0.5  # the age-band release
EPS_SELECT = 0.2  # SVT: which single years of age have >= SVT_THRESHOLD people
EPS_SELECTED = 0.3  # the selected single-year counts
SVT_THRESHOLD = 850
SVT_MAX = 10  # c: at most this many ages are selected

rng = np.random.default_rng(SEED)  # reproducible demo only: NOT a secure source

# -- a synthetic people table: a population with a baby boom (now about 60) and its echo ----
a = np.arange(100)
weights = (
    np.interp(a, [0, 20, 40, 60, 80, 99], [1.0, 1.0, 0.95, 0.8, 0.35, 0.02])
    + 0.9 * np.exp(-0.5 * ((a - 60) / 3.5) ** 2)
    + 0.5 * np.exp(-0.5 * ((a - 31) / 3) ** 2)
)
ages = rng.choice(100, size=N_PEOPLE, p=weights / weights.sum())
income = rng.lognormal(10.5, 0.6, size=N_PEOPLE).round()
try:
    import pandas as pd
except ImportError:
    people, age_column = None, ages
else:
    people = pd.DataFrame({"age": ages, "income": income})
    age_column = people["age"]
x = mm.histogram(age_column, 100)  # x[a] = number of people aged a (0..99)
print(
    f"{N_PEOPLE:,} synthetic people ({'pandas DataFrame' if people is not None else 'numpy array'}), "
    f"ages 0-99 -> histogram of {x.size} cells"
)

# -- the workload: census age bands, from the shipped spec -------------------------------------
spec = mm.load_spec(SPEC)
bands = [(0, 17), (18, 24), (25, 34), (35, 44), (45, 54), (55, 64), (65, 74), (75, 99), (0, 99)]
same = W.ranges(100, bands)  # the same workload built in code
assert np.array_equal(spec.workload.dense(), same.dense())
print(
    f"workload {spec.name!r} from {SPEC.name}: {spec.workload.shape[0]} queries ({', '.join(spec.labels)})"
)

# Choose the strategy from the workload alone (no data), then release with it.
advice = mm.advise(spec.workload, EPS_BANDS, rng=rng)
print(
    f"\nadvice for eps = {EPS_BANDS:g}: best {advice.best_row.name!r}, RMSE/query {advice.best_row.rmse:.2f} "
    f"(identity: {next(c.rmse for c in advice.rows if c.name == 'identity'):.2f}, "
    f"SVD lower bound {np.sqrt(advice.lower_bound / advice.queries):.2f})"
)
budget = mm.PrivacyBudget(EPS_TOTAL)
r = mm.release(x, spec.workload, EPS_BANDS, strategy=advice.best, budget=budget, rng=rng)
print(f"{r!r}; noise {r.measurement.noise} with scale {r.measurement.scale:g}")

rows = mm.release_table(r, spec.labels)
truth = spec.workload @ x  # shown only because the data are synthetic
print(
    f"\n  {'age band':10s} {'released':>9s} {'std':>6s}   {'95% interval':>19s}   {'true':>6s}  inside"
)
for row, t in zip(rows, truth):
    inside = row["lower"] <= t <= row["upper"]
    print(
        f"  {row['query']:10s} {row['answer']:9.1f} {row['std']:6.2f}   [{row['lower']:8.1f}, {row['upper']:8.1f}]   "
        f"{t:6.0f}  {'yes' if inside else 'NO'}"
    )
lower, upper = r.interval(0.95)
covered = int(((lower <= truth) & (truth <= upper)).sum())
z = np.abs(r.answers - truth) / r.std
print(
    f"  the eight bands add up to {r.answers[:8].sum():.1f}, the released total {r.answers[8]:.1f} (consistent by construction)"
)
print(
    f"  {covered} of {len(rows)} true counts inside their 95% intervals; largest |error| / std = {z.max():.2f}"
)
assert np.isclose(r.answers[:8].sum(), r.answers[8])
assert z.max() < 5, "an error beyond 5 standard deviations: the error bars would be wrong"

# -- an SVT-selected release: single years of age with at least SVT_THRESHOLD people -----------
# release(..., select=...) spends EPS_SELECT on the selection (Alg. 7; monotonic noise, valid
# for counts under add/remove neighbours), then measures only the selected rows with the
# rest; the other ages get no answer at all, only a status.
single = W.identity(100)
sel = mm.release(
    x,
    single,
    EPS_SELECT + EPS_SELECTED,
    strategy="identity",
    budget=budget,
    rng=rng,
    select=dict(method="svt", threshold=SVT_THRESHOLD, c=SVT_MAX, eps=EPS_SELECT),
)
table = mm.release_table(sel, [f"age {a}" for a in range(100)])
print(
    f"\nSVT: the single years of age with at least {SVT_THRESHOLD} people (eps {sel.eps_select:g} to select, "
    f"{sel.eps - sel.eps_select:g} to count, at most {SVT_MAX} ages):"
)
print(
    "  "
    + ", ".join(
        f"{row['query']}: {row['answer']:.0f} ± {row['upper'] - row['answer']:.0f}"
        for row in table
        if row["selected"]
    )
)
statuses = {}
for row in table:
    statuses[row["status"]] = statuses.get(row["status"], 0) + 1
print("  rows by status: " + ", ".join(f"{k} {v}" for k, v in statuses.items()))
above = set(np.flatnonzero(x >= SVT_THRESHOLD).tolist())
chosen = set(np.asarray(sel.selected).tolist())
print(
    f"  truly >= {SVT_THRESHOLD}: ages {sorted(above)}; selected {sorted(chosen)} "
    f"(missed {len(above - chosen)}, selected below the threshold {len(chosen - above)})"
)
print(f"\nbudget: spent eps {budget.spent[0]:g} of {budget.total[0]:g}")
for entry in budget.ledger:
    print(f"  eps {entry.eps:<5g} {entry.what}")
assert budget.spent[0] == EPS_TOTAL
print(
    f"RESULT: {len(rows)} age bands released at eps {EPS_BANDS:g} (RMSE {np.sqrt(r.expected_error / r.answers.size):.2f}); "
    f"{len(chosen)} single ages selected by SVT and released; total eps {budget.spent[0]:g}"
)
