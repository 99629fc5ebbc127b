"""Generate the small synthetic people table ``people.csv`` shipped with the examples.

2,000 made-up records as a curator receives them: raw integer ages (a few missing, negative
or implausible), 'F'/'M' strings (a few blank or 'U'), float incomes (a few missing or
negative) and two-letter state codes (a few outside the declared list). Nothing is
downloaded; the numbers come from an explicit, seeded numpy Generator so the file is
reproducible: ``python examples/data/make_people.py`` rewrites it byte for byte.
"""

import csv
from pathlib import Path

import numpy as np

ROWS = 2000
STATES = ["CA", "TX", "FL", "NY", "PA", "IL", "OH", "GA", "NC", "MI"]


def make_people(rng, rows=ROWS):
    """One dict per record (the raw table, defects included)."""
    age = np.clip(np.round(rng.gamma(4.0, 10.0, rows)), 0, 104).astype(int)
    sex = rng.choice(["F", "M"], rows)
    income = np.round(rng.lognormal(10.4, 0.8, rows), 2)
    state = rng.choice(
        STATES, rows, p=np.linspace(2, 1, len(STATES)) / np.linspace(2, 1, len(STATES)).sum()
    )
    out = []
    for i in range(rows):
        r = {
            "id": i + 1,
            "age": str(age[i]),
            "sex": str(sex[i]),
            "income": f"{income[i]:.2f}",
            "state": str(state[i]),
        }
        out.append(r)
    # defects a real table has: missing and out-of-domain values (about 1% each kind)
    for i in rng.choice(rows, 20, replace=False):
        out[i]["age"] = ""
    for i in rng.choice(rows, 6, replace=False):
        out[i]["age"] = str(int(rng.choice([-1, 130, 999])))
    for i in rng.choice(rows, 15, replace=False):
        out[i]["sex"] = str(rng.choice(["", "U"]))
    for i in rng.choice(rows, 15, replace=False):
        out[i]["income"] = str(rng.choice(["", "-250.00"]))
    for i in rng.choice(rows, 12, replace=False):
        out[i]["state"] = str(rng.choice(["ZZ", "", "WA"]))
    return out


def main():
    rng = np.random.default_rng(20261123)  # the script's seed, for a reproducible shipped file
    rows = make_people(rng)
    path = Path(__file__).with_name("people.csv")
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=["id", "age", "sex", "income", "state"])
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {len(rows)} records to {path}")


if __name__ == "__main__":
    main()
