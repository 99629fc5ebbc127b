"""``matmech stream init|step|status``: a continual release from the command line.

``init SPEC.toml STREAM.db [--ledger L]`` plans the stream from a TOML spec (keys:
``horizon``, ``categories`` (a count or a list of labels), ``eps`` and ``delta`` or
``rho`` and ``delta``, ``factorization``, ``objective``, ``neighbors``, ``max_records``),
charges the ledger once and writes the stream file and its key file (``--key-file``, default
under the configuration directory: ``docs/guide/threat-model.md``). ``step STREAM.db --counts
A,B,… [--t T]`` feeds one step (one count per category) and prints the noisy running totals
and their std; the noise comes from the secure CTR_DRBG (no seed option). Asking for a step
already released prints the stored release. ``status`` prints the public facts. Every command
verifies the stream file against its key file first.
"""

from __future__ import annotations

import json
import math

from matmech import validate
from matmech.cli.progress import progress, progress_arg
from matmech.stream.plan import StreamSpec
from matmech.stream.release import StreamRelease

__all__ = ["SPEC_KEYS", "add_stream_parser", "load_stream_spec"]

#: Keys a stream spec may hold.
SPEC_KEYS = (
    "horizon",
    "categories",
    "eps",
    "delta",
    "rho",
    "factorization",
    "objective",
    "neighbors",
    "max_records",
)


def load_stream_spec(path) -> StreamSpec:
    """A :class:`StreamSpec` from a TOML file, naming any unknown key."""
    from matmech.io.specs import read_toml

    p = validate.path(path)
    data = read_toml(p, "stream spec")
    unknown = sorted(set(data) - set(SPEC_KEYS))
    if unknown:
        raise ValueError(f"{p}: unknown key(s) {unknown}; a stream spec takes {list(SPEC_KEYS)}")
    if "horizon" not in data:
        raise ValueError(f"{p}: a stream spec needs horizon = <number of steps>")
    if isinstance(data.get("categories"), list):
        data["categories"] = tuple(data["categories"])
    return StreamSpec(**data)


def _ledger(path):
    if path is None:
        return None
    from matmech.privacy.ledger import Ledger

    return Ledger.open(path)


def _cmd_init(args) -> int:
    spec = load_stream_spec(args.spec)
    with progress(args) as bar:  # a BLT factorization is optimised here (seconds)
        bar(0.0, "planning the stream and creating its file")
        s = StreamRelease.create(
            args.stream, spec, budget=_ledger(args.ledger), key_file=args.key_file
        )
    st = s.status()
    print(
        f"created stream {args.stream}: {st['horizon']} steps x {len(st['categories'])} categories, "
        f"{st['factorization']} ({st['noise']}, scale {st['scale']:.6g}); charged eps = {st['eps']:g}, "
        f"delta = {st['delta']:g}{'' if args.ledger else ' (no ledger given: nothing recorded)'}"
    )
    return 0


def _parse_counts(text: str) -> list[int]:
    """The step's counts; a bad entry is refused without naming its position or its text
    (the counts are private data)."""
    out = []
    for part in text.split(","):
        try:
            out.append(int(part.strip()))
        except ValueError:
            raise ValueError(
                "--counts: an entry is not an integer count (expected one whole number per "
                "category, comma-separated)"
            ) from None
    return out


def _cmd_step(args) -> int:
    s = StreamRelease.open(args.stream, budget=_ledger(args.ledger), key_file=args.key_file)
    res = s.step(_parse_counts(args.counts), t=args.t)
    if args.json:
        print(
            json.dumps(
                {
                    "t": res.t,
                    "totals": dict(zip(res.categories, res.values, strict=True)),
                    "std": res.std,
                    "replayed": res.replayed,
                }
            )
        )
        return 0
    note = " (already released: stored values)" if res.replayed else ""
    print(f"step {res.t}{note}: std {res.std:.6g}")
    for c, v in zip(res.categories, res.values, strict=True):
        print(f"  {c}: {v:.6g}")
    return 0


def _cmd_status(args) -> int:
    st = StreamRelease.open(args.stream, key_file=args.key_file).status()
    if args.json:
        print(
            json.dumps(
                {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in st.items()},
                indent=2,
            )
        )
        return 0
    for k, v in st.items():
        print(f"{k:22s} {v}")
    return 0


def _key_file_arg(p, *, creating=False):
    p.add_argument(
        "--key-file",
        metavar="FILE",
        help=(
            "where to keep the stream's key and head record (created; default: "
            "<config dir>/streams/<stream id>.key)"
            if creating
            else "the key file given at init (default: the one under the configuration directory)"
        ),
    )


def add_stream_parser(sub) -> None:
    """Register ``stream init|step|status`` on the main parser's subparsers."""
    p = sub.add_parser("stream", help="continual release of running totals: init, step, status")
    ssub = p.add_subparsers(dest="stream_command", required=True)
    q = ssub.add_parser(
        "init",
        help="plan a stream from a TOML spec, charge the ledger once, create the stream file",
    )
    q.add_argument(
        "spec",
        help="stream spec (TOML): horizon, categories, eps/delta or rho/delta, factorization",
    )
    q.add_argument(
        "stream", help="the stream file to create (refused if it exists; holds private data)"
    )
    q.add_argument(
        "--ledger", metavar="FILE", help="charge the whole stream to this privacy ledger, once"
    )
    _key_file_arg(q, creating=True)
    progress_arg(q)
    q.set_defaults(func=_cmd_init)
    q = ssub.add_parser(
        "step", help="feed one step's counts; print the noisy running totals and their std"
    )
    q.add_argument("stream", help="a stream file")
    q.add_argument(
        "--counts",
        required=True,
        metavar="A,B,...",
        help="this step's count per category, comma-separated",
    )
    q.add_argument(
        "--t",
        type=int,
        metavar="T",
        help="the step number (default: the next); a released step is replayed",
    )
    q.add_argument(
        "--ledger",
        metavar="FILE",
        help="the ledger given at init (only read to finish an interrupted charge)",
    )
    _key_file_arg(q)
    q.add_argument("--json", action="store_true", help="print JSON")
    q.set_defaults(func=_cmd_step)
    q = ssub.add_parser(
        "status", help="public facts: horizon, steps done, privacy, factorization, next std"
    )
    q.add_argument("stream", help="a stream file")
    _key_file_arg(q)
    q.add_argument("--json", action="store_true", help="print JSON")
    q.set_defaults(func=_cmd_status)
