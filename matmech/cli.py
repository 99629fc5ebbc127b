"""The ``matmech`` command line: ``compare``, ``plot``, ``advise``, ``release`` and ``budget``.

Every failure the user can cause (missing file, bad spec, bad ε, a bad data file) ends with
a one-line message on stderr and exit status 2, never a traceback.

``release`` is the only command that reads data. Its noise always comes from the operating
system's CSPRNG (there is deliberately no seed option), and its data file is a CSV with a
header whose ``--column`` columns hold, per record, the integer code 0 … n−1 of each spec
attribute (one ``--column`` per attribute, in the spec's order). ``release --ledger FILE``
charges a persistent privacy ledger (``matmech budget init FILE --eps E``) before any noise.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time

import numpy as np

from matmech.advisor.compare import compare, format_table
from matmech.error import lower_bound
from matmech.privacy.params import check_privacy_params
from matmech.io.specs import load_spec

__all__ = ["main"]

CONVENTIONS = (
    "Conventions: add/remove neighbours; delta = 0 is pure eps-DP (Laplace noise, L1 sensitivity), "
    "delta > 0 the Gaussian mechanism (L2 sensitivity, zCDP-calibrated). Total error and max variance "
    "are variances in squared counts; RMSE/query is in counts."
)


def _privacy_args(p, *, eps_required=False):
    if eps_required:  # a release spends privacy: never on a silent default
        p.add_argument("--eps", type=float, required=True, help="privacy parameter epsilon (> 0) this release spends")
    else:
        p.add_argument("--eps", type=float, default=1.0, help="privacy parameter epsilon (> 0, default 1)")
    p.add_argument("--delta", type=float, default=0.0, help="delta in [0, 1); 0 means pure eps-DP (default)")
    p.add_argument("--neighbors", choices=["add_remove", "substitute"], default="add_remove")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")


def _scored(args):
    """(spec, eps, delta, rows, skipped, bound): the spec's fixed candidates and SVD bound."""
    spec = load_spec(args.spec)
    eps, delta = check_privacy_params(args.eps, args.delta)
    rows, skipped = compare(spec.workload, eps, delta, neighbors=args.neighbors)
    try:
        bound = lower_bound(spec.workload, eps, delta, measure="rmse", neighbors=args.neighbors)
    except ValueError:
        bound = None
    return spec, eps, delta, rows, skipped, bound


def _cmd_compare(args):
    spec, eps, delta, rows, skipped, bound = _scored(args)
    if args.json:
        out = {
            "spec": spec.name,
            "source": spec.source,
            "eps": eps,
            "delta": delta,
            "neighbors": args.neighbors,
            "queries": spec.workload.shape[0],
            "cells": spec.workload.shape[1],
            "lower_bound_rmse": bound,
            "rows": [r.as_dict() for r in rows],
            "skipped": [{"name": n, "reason": why} for n, why in skipped],
        }
        print(json.dumps(out, indent=2))
        return 0
    m, n = spec.workload.shape
    print(f"{spec.name}: {m:,} queries over {n:,} cells; eps = {eps:g}, delta = {delta:g}, {args.neighbors} neighbours")
    print(format_table(rows, bound_rmse=bound, skipped=skipped))
    print(CONVENTIONS)
    return 0


def _cmd_plot(args):
    from matmech.plot import plot_rows, require_matplotlib

    require_matplotlib()
    spec, eps, delta, rows, _, bound = _scored(args)
    fig = plot_rows(spec.workload, rows, eps=eps, delta=delta, bound_rmse=bound, title=f"{spec.name}: eps = {eps:g}, delta = {delta:g}")
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")
    return 0


# -- progress --------------------------------------------------------------------------------


class _Progress:
    """A one-line progress bar on stderr, for callables(fraction, message).

    Drawn only when ``enabled`` and only once the work has run for ``delay`` seconds, so
    quick runs print nothing; :meth:`close` ends the line (also before an error message).
    """

    def __init__(self, enabled, delay=0.5, stream=None):
        self.enabled, self.delay = enabled, delay
        self.stream = sys.stderr if stream is None else stream
        self.start = time.perf_counter()
        self.drawn = False

    def __call__(self, fraction, message):
        if not self.enabled or time.perf_counter() - self.start < self.delay:
            return
        width = 30
        done = int(round(width * min(max(fraction, 0.0), 1.0)))
        line = f"\r[{'#' * done}{'.' * (width - done)}] {fraction:4.0%} {str(message)[:60]:<60}"
        self.stream.write(line)
        self.stream.flush()
        self.drawn = True

    def close(self):
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False


_ACTIVE = []  # progress bars to close before an error message


def _progress(args):
    enabled = args.progress == "always" or (args.progress == "auto" and sys.stderr.isatty())
    bar = _Progress(enabled)
    _ACTIVE.append(bar)
    return bar


# -- advise ------------------------------------------------------------------------------------


def _cmd_advise(args):
    from matmech.advisor.advise import advise
    from matmech.io.store import save_strategy

    spec = load_spec(args.spec)
    eps, delta = check_privacy_params(args.eps, args.delta)
    if args.save_strategy:
        _check_writable(args.save_strategy, "--save-strategy")
    if args.time_budget is not None and not (math.isfinite(args.time_budget) and args.time_budget > 0):
        raise ValueError(f"--time-budget must be a positive number of seconds, got {args.time_budget!r}")
    bar = _progress(args)
    advice = advise(spec.workload, eps, delta, time_budget=args.time_budget, progress=bar, neighbors=args.neighbors)
    bar.close()
    saved = None
    if args.save_strategy:
        save_strategy(args.save_strategy, advice.best)
        saved = args.save_strategy
    if args.json:
        out = {"spec": spec.name, "source": spec.source, **advice.to_dict(), "saved_strategy": saved}
        print(json.dumps(out, indent=2))
        return 0
    print(f"{spec.name}: {advice.table()}")
    if saved:
        print(f"saved the best strategy ({advice.best_row.name}) to {saved}; use it with: matmech release {args.spec} --strategy {saved} ...")
    print(CONVENTIONS)
    return 0


# -- release -----------------------------------------------------------------------------------


def _read_columns(path, columns):
    """The named CSV columns as float arrays; errors name the file, line and column."""
    try:
        handle = open(path, newline="", encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such data file") from None
    with handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if not header:
            raise ValueError(f"{path}: the data file is empty (expected a header line naming the columns)")
        header = [h.strip() for h in header]
        index = []
        for c in columns:
            if c not in header:
                raise ValueError(f"{path}: no column {c!r}; the header has {header}")
            index.append(header.index(c))
        values = [[] for _ in columns]
        for line, row in enumerate(reader, start=2):
            if not row:
                continue
            for k, (c, i) in enumerate(zip(columns, index)):
                cell = row[i].strip() if i < len(row) else ""
                try:
                    v = float(cell)
                except ValueError:
                    raise ValueError(f"{path}: line {line}, column {c!r}: the entry is not a number") from None
                values[k].append(v)
    if not values[0]:
        raise ValueError(f"{path}: no data rows after the header")
    return [np.asarray(v) for v in values]


def _codes(path, columns, arrays, domain):
    """Integer cell codes per attribute, each checked against the spec's domain."""
    out = []
    for c, a, n in zip(columns, arrays, domain):
        bad = np.flatnonzero(~np.isfinite(a) | (a != np.round(a)) | (a < 0) | (a >= n))
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"{path}: line {i + 2}, column {c!r}: the value is outside the spec's domain "
                f"(expected an integer code 0..{n - 1})"
            )
        out.append(a.astype(np.int64))
    return out


def _check_writable(path, flag):
    """Fail before any work (and before a release spends privacy) if ``path`` cannot be written."""
    import os
    from pathlib import Path

    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise ValueError(f"{flag} {path}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (Path(path).exists() and not os.access(path, os.W_OK)):
        raise ValueError(f"{flag} {path}: not writable")


def _strategy_arg(value):
    from matmech.advisor.choice import STRATEGY_NAMES
    from matmech.io.store import load_strategy

    if value in STRATEGY_NAMES:
        return value
    try:
        return load_strategy(value)
    except FileNotFoundError:
        raise ValueError(f"--strategy must be one of {', '.join(STRATEGY_NAMES)} or a strategy file; {value!r} is neither") from None


def _select_arg(args):
    given = [f"--{k.replace('_', '-')}" for k in ("threshold", "c", "select_eps", "target_rel_error") if getattr(args, k) is not None]
    if args.select is None:
        if given:
            raise ValueError(f"{', '.join(given)}: only used with --select svt|em")
        return None
    select = {"method": args.select}
    if args.select_eps is None or args.c is None:
        raise ValueError("--select needs --select-eps (its share of --eps) and --c (the most rows to answer)")
    select["eps"], select["c"] = args.select_eps, args.c
    if args.threshold is not None:
        if args.threshold == "auto":
            select["threshold"] = "auto"
        else:
            try:
                select["threshold"] = float(args.threshold)
            except ValueError:
                raise ValueError(f"--threshold must be a number or 'auto', got {args.threshold!r}") from None
    if args.target_rel_error is not None:
        select["target_rel_error"] = args.target_rel_error
    return select


def _cmd_release(args):
    from matmech.io.data import histogram
    from matmech.release import release, release_table

    if args.out is None and not args.json:
        raise ValueError("give --out FILE.csv for the answers (and/or --json to print them)")
    spec = load_spec(args.spec)
    eps, delta = check_privacy_params(args.eps, args.delta)
    if len(args.column) != len(spec.domain):
        raise ValueError(
            f"the spec has {len(spec.domain)} attribute(s) {list(spec.attributes)} with domain {list(spec.domain)}; "
            f"give one --column per attribute, in that order (got {len(args.column)})"
        )
    strategy = _strategy_arg(args.strategy)
    select = _select_arg(args)
    if args.out is not None:
        _check_writable(args.out, "--out")  # never draw noise for answers that cannot be saved
    ledger = _open_ledger(args, eps, delta)
    arrays = _read_columns(args.data, args.column)
    codes = _codes(args.data, args.column, arrays, spec.domain)
    x = histogram(codes[0] if len(codes) == 1 else np.column_stack(codes), tuple(spec.domain))
    if ledger is not None:
        ledger.tag(spec=ledger.fingerprint(args.spec), data=ledger.fingerprint(args.data))
    rel = release(x, spec.workload, eps, delta, strategy=strategy, neighbors=args.neighbors, select=select,
                  max_records=args.max_records, budget=ledger)
    labels = list(spec.labels) if spec.labels is not None else _marginal_labels(spec)
    rows = release_table(rel, labels)
    if args.out is not None:
        _write_answers(args.out, rows, selection=select is not None)
    if args.json:
        out = {"spec": spec.name, "source": spec.source, "data": args.data, "out": args.out}
        out["strategy_file"] = None if isinstance(strategy, str) else args.strategy
        out["ledger"] = args.ledger
        out.update(rel.to_dict(labels=labels))
        print(json.dumps(out, indent=2))
        return 0
    m = spec.workload.shape[0]
    answered = f"{rel.answers.size} of {m:,} queries answered" if rel.selected is not None else f"{m:,} queries answered"
    rmse = f", RMSE/query {math.sqrt(rel.expected_error / rel.answers.size):.4g}" if rel.answers.size else ""
    print(f"{spec.name}: {answered} from {args.data} (the record count is private and not shown); "
          f"eps = {rel.eps:g}, delta = {rel.delta:g}")
    if rel.measurement is not None:
        how = f"from {args.strategy}, {type(strategy).__name__}" if not isinstance(strategy, str) else f"{rel.strategy_name}: {rel.strategy_note}"
        print(f"strategy: {how}; noise: {rel.measurement.noise} (OS randomness), std {rel.measurement.std:.4g}{rmse}")
    if select is not None:
        print(f"selection: {rel.selection.method}, eps {rel.eps_select:g}, {rel.selected.size} row(s) selected (at most {rel.selection.c})")
    if ledger is not None:
        rem = rel.budget_remaining
        print(f"ledger {args.ledger}: charged eps = {rel.eps:g}, delta = {rel.delta:g}; remaining eps = {rem[0]:g}, delta = {rem[1]:g}")
    if args.out is not None:
        print(f"wrote {len(rows):,} rows to {args.out}")
    return 0


def _open_ledger(args, eps, delta):
    """The --ledger, opened and checked before the data is read (a refused spend reads nothing)."""
    if args.ledger is None:
        return None
    from matmech.privacy.ledger import Ledger

    ledger = Ledger.open(args.ledger)
    if not ledger.can_spend(eps, delta):  # release checks again, atomically, when it spends
        ledger.spend(eps, delta, what=f"release of {args.spec}")  # raises BudgetExceededError, saying what is left
    return ledger


# -- budget ------------------------------------------------------------------------------------


def _cmd_budget_init(args):
    from matmech.privacy.ledger import Ledger

    eps, delta = check_privacy_params(args.eps, args.delta)
    ledger = Ledger.create(args.file, eps, delta)
    t = ledger.total
    print(f"created ledger {args.file}: total eps = {t[0]:g}, delta = {t[1]:g}")
    return 0


def _cmd_budget_status(args):
    from matmech.privacy.ledger import Ledger

    st = Ledger.open(args.file).status()
    if args.json:
        print(json.dumps(st, indent=2))
        return 0
    t, s, r = st["total"], st["spent"], st["remaining"]
    print(f"ledger {args.file} (created {st['created']}): {st['spends']} spend(s)")
    print(f"  total      eps = {t['eps']:<12g} delta = {t['delta']:g}")
    print(f"  spent      eps = {s['eps']:<12g} delta = {s['delta']:g}")
    print(f"  remaining  eps = {r['eps']:<12g} delta = {r['delta']:g}")
    return 0


def _cmd_budget_history(args):
    from matmech.privacy.ledger import Ledger

    ledger = Ledger.open(args.file)
    rows = ledger.history()
    if args.json:
        print(json.dumps({"ledger": args.file, "spends": rows}, indent=2))
        return 0
    if not rows:
        print(f"ledger {args.file}: no spends yet")
        return 0
    print(f"{'#':>4}  {'time (UTC)':<32} {'eps':>10} {'delta':>10}  what")
    for i, r in enumerate(rows, start=1):
        print(f"{i:>4}  {r['time']:<32} {r['eps']:>10g} {r['delta']:>10g}  {r['what']}")
    return 0


def _marginal_labels(spec):
    """"age=3, city=1"-style labels for a spec that is exactly a union of marginals, else None."""
    import itertools

    W = spec.workload
    subsets = getattr(W, "subsets", None)
    if subsets is None or tuple(getattr(W, "domain", ())) != tuple(spec.domain):
        return None
    out = []
    for subset in subsets:
        if not subset:
            out.append("total")
            continue
        for cell in itertools.product(*[range(spec.domain[a]) for a in subset]):
            out.append(", ".join(f"{spec.attributes[a]}={v}" for a, v in zip(subset, cell)))
    return out if len(out) == W.shape[0] else None


def _write_answers(path, rows, *, selection):
    """One CSV row per query: query, answer, std, the 95% interval (and selected/status)."""
    fields = ["query", "answer", "std", "lower95", "upper95"] + (["selected", "status"] if selection else [])
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(fields)
        for r in rows:
            nums = [r["answer"], r["std"], r["lower"], r["upper"]]
            line = [r["query"], *("" if v is None else repr(float(v)) for v in nums)]
            if selection:
                line += ["true" if r["selected"] else "false", r["status"]]
            w.writerow(line)


def build_parser():
    parser = argparse.ArgumentParser(prog="matmech", description="The Matrix Mechanism for linear queries under differential privacy.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("compare", help="compare fixed strategies for a workload spec analytically")
    p.add_argument("spec", help="a workload spec file (TOML), e.g. workloads/all_range_1024.toml")
    _privacy_args(p)
    p.set_defaults(func=_cmd_compare)
    p = sub.add_parser("plot", help="plot per-query error of the strategies for a workload spec (needs matplotlib)")
    p.add_argument("spec", help="a workload spec file (TOML)")
    p.add_argument("--out", required=True, help="the image file to write, e.g. error.png")
    _privacy_args(p)
    p.set_defaults(func=_cmd_plot)
    p = sub.add_parser("advise", help="rank strategies, optimised ones included, for a workload spec")
    p.add_argument("spec", help="a workload spec file (TOML)")
    _privacy_args(p)
    p.add_argument("--save-strategy", metavar="FILE.npz", help="save the best strategy for 'matmech release --strategy FILE.npz'")
    p.add_argument("--time-budget", type=float, metavar="SECONDS", help="cap the whole ranking (the optimiser gets what is left)")
    _progress_arg(p)
    p.set_defaults(func=_cmd_advise)
    p = sub.add_parser("release", help="release noisy answers to a workload spec from a CSV data file")
    p.add_argument("spec", help="a workload spec file (TOML)")
    _privacy_args(p, eps_required=True)
    p.add_argument("--data", required=True, metavar="FILE.csv", help="records, one per line, with a header")
    p.add_argument(
        "--column", required=True, action="append", metavar="COL",
        help="the column holding each record's code 0..n-1 for a spec attribute; repeat once per attribute, in order",
    )
    p.add_argument("--out", metavar="OUT.csv", help="write one row per query: query, answer, std, lower95, upper95")
    p.add_argument(
        "--strategy", default="auto", metavar="NAME|FILE.npz",
        help="auto (default), identity, hierarchical, haar, optimize, or a strategy file from 'matmech advise --save-strategy'",
    )
    p.add_argument("--select", choices=["svt", "em"], help="answer only rows chosen privately first (sparse vector / exponential mechanism)")
    p.add_argument("--threshold", metavar="T|auto", help="svt: answer rows whose count clears T; 'auto' from --target-rel-error")
    p.add_argument("--c", type=int, metavar="C", help="the most rows to select")
    p.add_argument("--select-eps", type=float, metavar="E", help="the part of --eps spent on selection (the rest measures)")
    p.add_argument("--target-rel-error", type=float, metavar="R", help="with --threshold auto: answer a row if std <= R x count (default 0.1)")
    p.add_argument("--max-records", type=int, metavar="N",
                   help="declared bound on the number of records (default 2**32); more is refused before anything is spent")
    p.add_argument("--ledger", metavar="FILE", help="charge (eps, delta) to this privacy ledger ('matmech budget init') before any noise")
    p.set_defaults(func=_cmd_release)
    p = sub.add_parser("budget", help="a persistent privacy ledger: init, status, history")
    bsub = p.add_subparsers(dest="budget_command", required=True)
    q = bsub.add_parser("init", help="create a ledger file with a total (eps, delta)")
    q.add_argument("file", help="the ledger file to create (refused if it exists)")
    q.add_argument("--eps", type=float, required=True, help="the total epsilon (> 0)")
    q.add_argument("--delta", type=float, default=0.0, help="the total delta in [0, 1) (default 0)")
    q.set_defaults(func=_cmd_budget_init)
    q = bsub.add_parser("status", help="total, spent and remaining (eps, delta)")
    q.add_argument("file", help="a ledger file")
    q.add_argument("--json", action="store_true", help="print machine-readable JSON (with exact p/q amounts)")
    q.set_defaults(func=_cmd_budget_status)
    q = bsub.add_parser("history", help="every spend: time, eps, delta, what (and spec/data fingerprints in --json)")
    q.add_argument("file", help="a ledger file")
    q.add_argument("--json", action="store_true", help="print machine-readable JSON (with exact p/q amounts)")
    q.set_defaults(func=_cmd_budget_history)
    return parser


def _progress_arg(p):
    p.add_argument(
        "--progress", choices=["auto", "always", "never"], default="auto",
        help="progress bar on stderr for long work: auto = only on a terminal (default)",
    )


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # e.g. `matmech release ... --json | head`: stop quietly
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (ValueError, TypeError, OSError, ImportError, csv.Error, MemoryError) as exc:
        for bar in _ACTIVE:
            bar.close()
        msg = _one_line(exc)
        print(f"matmech: error: {msg}", file=sys.stderr)
        return 2
    finally:
        _ACTIVE.clear()


def _one_line(exc):
    text = str(exc).splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        text = f"{exc.filename}: {exc.strerror}"  # e.g. an output directory that does not exist
    return text or type(exc).__name__


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
