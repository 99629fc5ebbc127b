"""``matmech advise`` and ``matmech plot``: every plan a release can run ranked (the fixed
strategies, every optimiser family, the tables route's residual plan, split plans), the best
single strategy saved for ``release --strategy FILE.npz``, or drawn."""

from __future__ import annotations

import json
import math

from matmech.cli.common import (
    CONVENTIONS,
    check_writable,
    overwrite_arg,
    privacy_args,
)
from matmech.cli.progress import progress, progress_arg
from matmech.io.specs import load_spec
from matmech.privacy.params import check_privacy_params


def _cmd_plot(args):
    """The strategies of ``matmech advise`` (the optimiser included: the best bar is advise's
    choice) drawn to the exact file reported (``--out DIR`` → DIR/<spec>-error.png; a name
    without an image suffix gets .png); the path is checked before the ranking runs."""
    from pathlib import Path

    from matmech.advisor.advise import advise
    from matmech.plot import figure_path, plot_rows, require_matplotlib

    require_matplotlib()
    spec = load_spec(args.spec)
    eps, delta = check_privacy_params(args.eps, args.delta)
    path, fmt = figure_path(args.out, name=f"{Path(args.spec).stem}-error")
    check_writable(path, "--out", inputs={"spec": args.spec}, overwrite=args.overwrite)
    with progress(args) as bar:
        advice = advise(
            spec.workload,
            eps,
            delta,
            neighbors=args.neighbors,
            time_budget="default" if args.time_budget is None else args.time_budget,
            progress=bar,
        )
    fig = plot_rows(
        spec.workload,
        advice.rows,
        eps=eps,
        delta=delta,
        bound_rmse=advice.lower_bound_rmse,
        title=f"{spec.name}: eps = {eps:g}, delta = {delta:g}",
    )
    with open(
        path, "wb" if args.overwrite else "xb"
    ) as handle:  # exclusive: never replace a file unasked
        fig.savefig(handle, format=fmt, dpi=110)
    if args.json:
        print(
            json.dumps(
                {
                    "wrote": str(path),
                    "format": fmt,
                    "spec": spec.name,
                    "source": spec.source,
                    **advice.to_dict(),
                },
                indent=2,
            )
        )
    else:
        print(f"wrote {path} (best: {advice.rows[0].name}, as matmech advise ranks it)")
    return 0


def _cmd_advise(args):
    from matmech.advisor.advise import advise
    from matmech.io.store import save_strategy

    spec = load_spec(args.spec)
    eps, delta = check_privacy_params(args.eps, args.delta)
    if args.save_strategy:
        check_writable(args.save_strategy, "--save-strategy", overwrite=args.overwrite)
    if args.time_budget is not None and not (
        math.isfinite(args.time_budget) and args.time_budget > 0
    ):
        raise ValueError(
            f"--time-budget must be a positive number of seconds, got {args.time_budget!r}"
        )
    with progress(args) as bar:
        advice = advise(
            spec.workload,
            eps,
            delta,
            time_budget="default" if args.time_budget is None else args.time_budget,
            progress=bar,
            neighbors=args.neighbors,
        )
    saved = None
    if args.save_strategy:
        if advice.best is None:
            raise ValueError(
                "--save-strategy: no ranked row is a single strategy on the histogram (the plans "
                "above are measured from marginal tables or in parts); release with --strategy auto"
            )
        save_strategy(args.save_strategy, advice.best, overwrite=args.overwrite)
        saved = args.save_strategy
    auto = _auto_plan(advice)
    if args.json:
        out = {
            "spec": spec.name,
            "source": spec.source,
            **advice.to_dict(),
            "saved_strategy": saved,
            "auto_plan": auto,
        }
        print(json.dumps(out, indent=2))
        return 0
    print(f"{spec.name}: {advice.table()}")
    print(
        f"release --strategy auto (the default) runs row 1, {auto['name']}: {auto['reason']}; "
        f"--strategy optimize runs the best optimiser-family row"
        + (f" ({auto['optimize']})" if auto["optimize"] else "")
    )
    if saved:
        print(
            f"saved the best strategy ({next(r.name for r in advice.rows if r.kind == 'strategy')}) "
            f"to {saved}; use it with: matmech release {args.spec} --strategy {saved} ..."
        )
    print(CONVENTIONS)
    return 0


def _auto_plan(advice):
    """What ``release --strategy auto`` runs (the planner's best row) and what
    ``--strategy optimize`` runs (its best optimiser-family row); data-independent."""
    from matmech.advisor.choice import view

    best = advice.best_row
    opt = view(advice, "optimize")
    return {
        "name": best.name,
        "kind": best.kind,
        "reason": best.reason or "the lowest exact expected error of the rows above",
        "rmse": best.rmse,
        "optimize": opt[0].name if opt else None,
    }


def _ranking_args(p, cap, func, share=""):
    """The options that end the ``plot`` and ``advise`` parsers: ``--time-budget`` (its help
    from ``cap`` and ``share``), progress, overwrite; then the command ``func``."""
    p.add_argument(
        "--time-budget",
        type=float,
        metavar="SECONDS",
        help=f"{cap} in wall-clock seconds ({share}the result then depends on load). Default: no clock, deterministic",
    )
    progress_arg(p)
    overwrite_arg(p)
    p.set_defaults(func=func)


def add_parsers(sub):
    """The ``plot`` and ``advise`` subcommands."""
    p = sub.add_parser(
        "plot",
        help="plot per-query error of the advised strategies (optimiser included) for a workload spec (needs matplotlib)",
    )
    p.add_argument("spec", help="a workload spec file (TOML)")
    p.add_argument(
        "--out",
        required=True,
        help="the image to write: error.png (or .pdf, .svg), a directory (writes DIR/<spec>-error.png), "
        "or a name without suffix (.png is added); the exact path is printed",
    )
    privacy_args(p)
    _ranking_args(p, "cap the ranking", _cmd_plot)
    p = sub.add_parser(
        "advise",
        help="rank every plan a release can run for a workload spec (strategies, optimised "
        "ones, the tables route, split plans): row 1 is what --strategy auto runs",
    )
    p.add_argument("spec", help="a workload spec file (TOML)")
    privacy_args(p)
    p.add_argument(
        "--save-strategy",
        metavar="FILE.npz",
        help="save the best strategy for 'matmech release --strategy FILE.npz'",
    )
    _ranking_args(p, "cap the whole ranking", _cmd_advise, "the optimiser gets what is left; ")
