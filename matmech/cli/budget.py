"""``matmech budget init|status|history|migrate``: the persistent privacy ledger."""

from __future__ import annotations

import json

from matmech.privacy.accountant import ACCOUNTANTS
from matmech.privacy.params import check_privacy_params


def _open(args):
    from matmech.privacy.ledger import Ledger

    return Ledger.open(args.file, keys=args.keys)


def _cmd_budget_init(args):
    from matmech.privacy.ledger import Ledger

    if args.rho is not None:
        if args.eps is not None:
            raise ValueError("give --eps or --rho, not both")
        ledger = Ledger.create_from_rho(args.file, args.rho, args.delta, keys=args.keys)
        t = ledger.total
        print(
            f"created ledger {args.file}: total rho = {args.rho:g} (eps = {t[0]:.6g} at delta = "
            f"{t[1]:g}), accountant zcdp"
        )
        return 0
    if args.eps is None:
        raise ValueError("budget init needs --eps (or --rho with --delta)")
    eps, delta = check_privacy_params(args.eps, args.delta)
    ledger = Ledger.create(args.file, eps, delta, accountant=args.accountant, keys=args.keys)
    t = ledger.total
    print(
        f"created ledger {args.file}: total eps = {t[0]:g}, delta = {t[1]:g}, "
        f"accountant {ledger.accountant}"
    )
    return 0


def _cmd_budget_status(args):
    st = _open(args).status()
    if args.json:
        print(json.dumps(st, indent=2))
        return 0
    t, s, r = st["total"], st["spent"], st["remaining"]
    print(
        f"ledger {args.file} (created {st['created']}): {st['spends']} spend(s), "
        f"accountant {st['accountant']}"
    )
    print(f"  total      eps = {t['eps']:<12g} delta = {t['delta']:g}")
    print(f"  spent      eps = {s['eps']:<12g} delta = {s['delta']:g}")
    print(f"  remaining  eps = {r['eps']:<12g} delta = {r['delta']:g}")
    if st["remaining_rho"] is not None:
        print(f"  remaining  rho = {st['remaining_rho']:g} (zCDP, of {st['total_rho']:g})")
    print("  spent under each accountant:")
    for name, v in st["spent_under"].items():
        if "unavailable" in v:
            print(f"    {name:<6} unavailable ({v['unavailable']})")
        else:
            print(f"    {name:<6} eps = {v['eps']:<12g} delta = {v['delta']:g}")
    return 0


def _cmd_budget_history(args):
    rows = _open(args).history()
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


def _cmd_budget_migrate(args):
    ledger = _open(args).migrate(args.accountant)
    print(f"ledger {args.file}: accountant {ledger.accountant} from now on")
    return 0


def _ledger_args(q):
    q.add_argument("file", help="a ledger file")
    q.add_argument(
        "--keys",
        default=None,
        help="the directory of the ledger's key record (default $MATMECH_LEDGER_KEYS, else "
        "$XDG_CONFIG_HOME/matmech/ledgers or ~/.config/matmech/ledgers)",
    )


def add_parsers(sub):
    """The ``budget`` subcommand and its subcommands."""
    p = sub.add_parser("budget", help="a persistent privacy ledger: init, status, history, migrate")
    bsub = p.add_subparsers(dest="budget_command", required=True)
    q = bsub.add_parser("init", help="create a ledger file with a total (eps, delta) or rho")
    _ledger_args(q)
    q.set_defaults(func=_cmd_budget_init)
    q.add_argument("--eps", type=float, default=None, help="the total epsilon (> 0)")
    q.add_argument("--delta", type=float, default=0.0, help="the total delta in [0, 1) (default 0)")
    q.add_argument(
        "--rho",
        type=float,
        default=None,
        help="a total in zCDP rho instead of --eps (needs --delta)",
    )
    q.add_argument(
        "--accountant",
        choices=sorted(ACCOUNTANTS),
        default=None,
        help="how spends compose: zcdp (default when delta > 0), basic (default when delta = 0: "
        "sums of eps and delta) or pld (privacy loss distributions; pip install 'matmech-dp[pld]')",
    )
    q = bsub.add_parser("status", help="total, spent and remaining, under each accountant")
    _ledger_args(q)
    q.add_argument(
        "--json", action="store_true", help="print machine-readable JSON (with exact p/q amounts)"
    )
    q.set_defaults(func=_cmd_budget_status)
    q = bsub.add_parser(
        "history",
        help="every spend: time, eps, delta, what (and fingerprints, events in --json)",
    )
    _ledger_args(q)
    q.add_argument(
        "--json", action="store_true", help="print machine-readable JSON (with exact p/q amounts)"
    )
    q.set_defaults(func=_cmd_budget_history)
    q = bsub.add_parser(
        "migrate", help="switch the ledger's accountant (refused if the history does not fit)"
    )
    _ledger_args(q)
    q.add_argument("--accountant", choices=sorted(ACCOUNTANTS), required=True)
    q.set_defaults(func=_cmd_budget_migrate)
