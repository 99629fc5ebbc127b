"""The ``matmech`` command line.

Every failure the user can cause (missing file, bad spec, bad ε) ends with a one-line
message on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from .compare import compare, format_table
from .error import check_privacy_params, lower_bound
from .specs import load_spec

__all__ = ["main"]

CONVENTIONS = (
    "Conventions: add/remove neighbours; delta = 0 is pure eps-DP (Laplace noise, L1 sensitivity), "
    "delta > 0 the Gaussian mechanism (L2 sensitivity, zCDP-calibrated). Total error and max variance "
    "are variances in squared counts; RMSE/query is in counts."
)


def _privacy_args(p):
    p.add_argument("--eps", type=float, default=1.0, help="privacy parameter epsilon (> 0, default 1)")
    p.add_argument("--delta", type=float, default=0.0, help="delta in [0, 1); 0 means pure eps-DP (default)")
    p.add_argument("--neighbors", choices=["add_remove", "substitute"], default="add_remove")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")


def _cmd_compare(args):
    spec = load_spec(args.spec)
    eps, delta = check_privacy_params(args.eps, args.delta)
    rows, skipped = compare(spec.workload, eps, delta, neighbors=args.neighbors)
    try:
        bound = lower_bound(spec.workload, eps, delta, measure="rmse", neighbors=args.neighbors)
    except ValueError:
        bound = None
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
    print(format_table(rows, bound_rmse=bound))
    for name, why in skipped:
        print(f"skipped {name}: {why}")
    print(CONVENTIONS)
    return 0


def _cmd_plot(args):
    from .plot import plot_rows, require_matplotlib

    require_matplotlib()
    spec = load_spec(args.spec)
    eps, delta = check_privacy_params(args.eps, args.delta)
    rows, _ = compare(spec.workload, eps, delta, neighbors=args.neighbors)
    try:
        bound = lower_bound(spec.workload, eps, delta, measure="rmse", neighbors=args.neighbors)
    except ValueError:
        bound = None
    fig = plot_rows(spec.workload, rows, eps=eps, delta=delta, bound_rmse=bound, title=f"{spec.name}: eps = {eps:g}, delta = {delta:g}")
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")
    return 0


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
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, TypeError, OSError, ImportError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"matmech: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
