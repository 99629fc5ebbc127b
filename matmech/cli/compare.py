"""``matmech compare``: the fixed strategies of a workload spec ranked analytically."""

from __future__ import annotations

import json

from matmech.advisor.compare import compare, format_table
from matmech.cli.common import CONVENTIONS, privacy_args
from matmech.error import lower_bound
from matmech.io.specs import load_spec
from matmech.privacy.params import check_privacy_params


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
    print(
        f"{spec.name}: {m:,} queries over {n:,} cells; eps = {eps:g}, delta = {delta:g}, {args.neighbors} neighbours"
    )
    print(format_table(rows, bound_rmse=bound, skipped=skipped))
    print(CONVENTIONS)
    return 0


def add_parsers(sub):
    """The ``compare`` subcommand."""
    p = sub.add_parser("compare", help="compare fixed strategies for a workload spec analytically")
    p.add_argument("spec", help="a workload spec file (TOML), e.g. workloads/all_range_1024.toml")
    privacy_args(p)
    p.set_defaults(func=_cmd_compare)
