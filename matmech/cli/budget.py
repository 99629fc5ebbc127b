"""``matmech budget init|status|history``: the persistent privacy ledger."""

from __future__ import annotations

import json

from matmech.privacy.params import check_privacy_params

__all__ = ["add_parsers"]


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


def add_parsers(sub):
    """The ``budget`` subcommand and its three subcommands."""
    p = sub.add_parser("budget", help="a persistent privacy ledger: init, status, history")
    bsub = p.add_subparsers(dest="budget_command", required=True)
    q = bsub.add_parser("init", help="create a ledger file with a total (eps, delta)")
    q.add_argument("file", help="the ledger file to create (refused if it exists)")
    q.add_argument("--eps", type=float, required=True, help="the total epsilon (> 0)")
    q.add_argument("--delta", type=float, default=0.0, help="the total delta in [0, 1) (default 0)")
    q.set_defaults(func=_cmd_budget_init)
    q = bsub.add_parser("status", help="total, spent and remaining (eps, delta)")
    q.add_argument("file", help="a ledger file")
    q.add_argument(
        "--json", action="store_true", help="print machine-readable JSON (with exact p/q amounts)"
    )
    q.set_defaults(func=_cmd_budget_status)
    q = bsub.add_parser(
        "history", help="every spend: time, eps, delta, what (and spec/data fingerprints in --json)"
    )
    q.add_argument("file", help="a ledger file")
    q.add_argument(
        "--json", action="store_true", help="print machine-readable JSON (with exact p/q amounts)"
    )
    q.set_defaults(func=_cmd_budget_history)
