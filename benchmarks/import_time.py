"""Start-up time: ``import matmech`` and ``matmech --version`` against the scientific stack.

Each command runs in a fresh interpreter (wall time of the whole process, start-up
included), ``--reps`` times, interleaved in a rotating order so that a change of load hits
every command alike; the table gives each command's median and its ratio to
``import numpy, scipy.sparse, scipy.linalg`` (the target of issue 32: at most 1.5×) and to
``import numpy``. ``python -X importtime -c "import matmech"`` adds the modules with the
largest cumulative import time, and the heavy modules the package import loaded (none is
expected: the solvers, graph and data-engine modules load on first use).

    python benchmarks/import_time.py [--reps 15]

Writes benchmarks/results/import_time.json and import_time.md (``--smoke``: two runs each,
in a temporary directory; for CI).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

#: The commands timed, by name; the first is the reference of the ratios.
COMMANDS = {
    "import numpy, scipy.sparse, scipy.linalg": ["-c", "import numpy, scipy.sparse, scipy.linalg"],
    "import numpy": ["-c", "import numpy"],
    "import matmech": ["-c", "import matmech"],
    # what the installed ``matmech`` console script runs
    "matmech --version": [
        "-c",
        "import sys; from matmech.cli import main; sys.exit(main(['--version']))",
    ],
    "python -m matmech --version": ["-m", "matmech", "--version"],
    # every subcommand's parser built (what any other command pays before its own work)
    "matmech --help": [
        "-c",
        "import sys; from matmech.cli import main; sys.exit(main(['--help']))",
    ],
}
REFERENCE = "import numpy, scipy.sparse, scipy.linalg"

#: Modules that ``import matmech`` should leave unloaded (reported, asserted in tests/).
HEAVY = ("cvxpy", "networkx", "scipy.optimize", "duckdb", "polars", "matplotlib", "pyarrow")


def _env():
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def _run(argv, env):
    """Wall seconds of one fresh process and its exit status."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, *argv], env=env, capture_output=True)
    return time.perf_counter() - t0, done.returncode


def time_commands(reps):
    """{name: [seconds, ...]} and {name: exit statuses seen}, the commands interleaved in a
    rotating order."""
    env = _env()
    names = list(COMMANDS)
    for name in names:  # warm the file cache once, untimed
        _run(COMMANDS[name], env)
    times: dict[str, list[float]] = {name: [] for name in names}
    status: dict[str, set] = {name: set() for name in names}
    for i in range(reps):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            seconds, rc = _run(COMMANDS[name], env)
            times[name].append(seconds)
            status[name].add(rc)
    return times, status


def import_profile(top=12):
    """The ``top`` modules by cumulative import time under ``import matmech`` (µs) and the
    heavy modules it loaded."""
    probe = (
        f"import sys, json, matmech; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", probe],
        env=_env(),
        check=True,
        capture_output=True,
        text=True,
    )
    rows = []
    for line in out.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, self_us, cum_us, name = (s.strip() for s in line.replace("import time:", "|").split("|"))
        rows.append({"module": name.strip(), "self_us": int(self_us), "cumulative_us": int(cum_us)})
    rows.sort(key=lambda r: -r["cumulative_us"])
    return rows[:top], json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15, help="runs of each command (median)")
    ap.add_argument("--tag", default="", help="suffix of the result files (e.g. _before)")
    ap.add_argument("--smoke", action="store_true", help="2 runs each; temporary directory")
    args = ap.parse_args()
    results = RESULTS
    if args.smoke:
        args.reps = 2
        results = Path(tempfile.mkdtemp(prefix="matmech-smoke-"))
    load_start = os.getloadavg()
    times, status = time_commands(args.reps)
    load_end = os.getloadavg()
    profile, heavy = import_profile()
    ref = statistics.median(times[REFERENCE])
    numpy_only = statistics.median(times["import numpy"])
    rows = []
    for name, ts in times.items():
        med = statistics.median(ts)
        rows.append(
            {
                "command": name,
                "median_s": med,
                "min_s": min(ts),
                "max_s": max(ts),
                "ratio_to_reference": med / ref,
                "ratio_to_numpy": med / numpy_only,
                "exit_status": sorted(status[name]),
            }
        )
    out = {
        "python": sys.version.split()[0],
        "reps": args.reps,
        "reference": REFERENCE,
        "load_avg_start": load_start,
        "load_avg_end": load_end,
        "rows": rows,
        "heavy_modules_loaded_by_import_matmech": heavy,
        "importtime_top": profile,
    }
    results.mkdir(exist_ok=True)
    (results / f"import_time{args.tag}.json").write_text(json.dumps(out, indent=1))
    lines = [
        f"| command (fresh process, {args.reps} runs) | median s | min s | max s | "
        f"× `{REFERENCE}` | × `import numpy` | exit status |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| `{r['command']}` | {r['median_s']:.3f} | {r['min_s']:.3f} | {r['max_s']:.3f} | "
            f"{r['ratio_to_reference']:.2f} | {r['ratio_to_numpy']:.2f} | "
            f"{', '.join(map(str, r['exit_status']))} |"
        )
    lines += [
        "",
        f"Heavy modules loaded by `import matmech`: {', '.join(heavy) or 'none'} "
        f"(of {', '.join(HEAVY)}).",
        "",
        "Largest cumulative import times under `import matmech` (`python -X importtime`, one run):",
        "",
        "| module | cumulative ms | self ms |",
        "|---|---|---|",
    ]
    lines += [
        f"| {r['module']} | {r['cumulative_us'] / 1e3:.1f} | {r['self_us'] / 1e3:.1f} |"
        for r in profile
    ]
    lines += [
        "",
        f"Python {out['python']}; load average at start/end: {load_start} / {load_end}",
    ]
    (results / f"import_time{args.tag}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
