"""``matmech stream init|step|status``: a continual release from the command line.

``init SPEC.toml STREAM.db [--ledger L]`` plans the stream from a TOML spec (keys:
``horizon``, ``categories`` (a count or a list of labels), ``eps`` and ``delta`` or
``rho`` and ``delta``, ``factorization`` (default ``auto``: the best for the privacy
parameters and the objective), ``objective``, ``neighbors``, ``max_records``),
charges the ledger once and writes the stream file and its key file (``--key-file``, default
under the configuration directory: ``docs/guide/threat-model.md``). ``step STREAM.db --counts
A,B,… [--t T]`` feeds one step (one count per category) and prints the noisy running totals
and their std; the noise comes from the secure CTR_DRBG (no seed option). Asking for a step
already released prints the stored release. ``step STREAM.db --rows FILE`` feeds many steps
in one process (a CSV whose header names the categories, or a JSON list of rows), and
``step STREAM.db --records FILE --time-column C --start S --end E [--category-column C]``
bins a table of records into steps (:func:`matmech.sources.periods.period_counts`); both
start at ``--t`` (default 0, so running the same command again resumes) and take each step
as a single ``step`` would (:meth:`~matmech.stream.release.StreamRelease.step_many`).
``status`` prints the public facts. Every command verifies the stream file against its key
file first.
"""

from __future__ import annotations

import json
import math
import sys

from matmech import validate
from matmech.cli.progress import progress, progress_arg
from matmech.stream.plan import StreamSpec
from matmech.stream.release import StreamRelease


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


def _print_step(res, as_json: bool) -> None:
    if as_json:
        print(
            json.dumps(
                {
                    "t": res.t,
                    "totals": dict(zip(res.categories, res.values, strict=True)),
                    "std": res.std,
                    "replayed": res.replayed,
                }
            ),
            flush=True,
        )
        return
    note = " (already released: stored values)" if res.replayed else ""
    print(f"step {res.t}{note}: std {res.std:.6g}")
    for c, v in zip(res.categories, res.values, strict=True):
        print(f"  {c}: {v:.6g}")


def _row_counts(cells, where: str) -> list[int]:
    out = []
    for v in cells:
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            raise ValueError(f"{where}: an entry is not an integer count")
        try:
            out.append(int(v.strip()) if isinstance(v, str) else v)
        except ValueError:
            raise ValueError(f"{where}: an entry is not an integer count") from None
    return out


def load_step_rows(path, categories: tuple[str, ...]) -> list[list[int]]:
    """One row of counts per step from a CSV file (a header naming every category, in any
    order, and nothing else) or a JSON file (``.json``: a list of rows, each a list of one
    count per category or an object {category: count}). A bad entry is refused naming its
    row, never its text (the counts are private data)."""
    import csv

    p = validate.path(path)
    cats = list(categories)
    if p.suffix.lower() == ".json":
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{p}: not valid JSON (line {exc.lineno})") from None
        if not isinstance(data, list):
            raise ValueError(f"{p}: expected a JSON list of rows (one per step)")
        rows = []
        for i, row in enumerate(data):
            where = f"{p}: row {i}"
            if isinstance(row, dict):
                if set(row) != set(cats):
                    raise ValueError(f"{where}: an object row must have exactly the keys {cats}")
                row = [row[c] for c in cats]
            if not isinstance(row, list):
                raise ValueError(f"{where}: a row is a list of counts or an object by category")
            rows.append(_row_counts(row, where))
        return rows
    with p.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader, [])]
        if sorted(header) != sorted(cats):
            raise ValueError(
                f"{p}: the header must name the stream's categories {cats} (any order) and "
                f"nothing else; it names {header}"
            )
        order = [header.index(c) for c in cats]
        rows = []
        for i, line in enumerate(reader):
            if not line:
                continue
            where = f"{p}: row {i}"
            if len(line) != len(header):
                raise ValueError(f"{where}: {len(line)} fields, expected {len(header)}")
            rows.append(_row_counts([line[j] for j in order], where))
    return rows


def _record_rows(args, categories: tuple[str, ...]):
    """Counts per step from a table of records: one GROUP BY (time bin, category)."""
    from matmech.io.declare import categories as category_attr
    from matmech.io.declare import time_bins
    from matmech.sources.periods import period_counts

    if args.start is None or args.end is None or args.time_column is None:
        raise ValueError("--records needs --time-column, --start and --end")
    period = time_bins(
        "step",
        args.start,
        args.end,
        args.unit,
        time_zone=args.time_zone,
        column=args.time_column,
        policy=args.policy,
    )
    if args.category_column is None:
        if len(categories) != 1:
            raise ValueError(
                f"the stream has {len(categories)} categories: give --category-column, the "
                "column whose values are its labels"
            )
        return period_counts(args.records, period=period)
    cat = category_attr("category", categories, column=args.category_column, policy=args.policy)
    return period_counts(args.records, period=period, category=cat)


def _cmd_step(args) -> int:
    s = StreamRelease.open(args.stream, budget=_ledger(args.ledger), key_file=args.key_file)
    if args.counts is not None:
        _print_step(s.step(_parse_counts(args.counts), t=args.t), args.json)
        return 0
    cats = s.plan.spec.categories
    rows = load_step_rows(args.rows, cats) if args.rows else _record_rows(args, cats)
    t0 = 0 if args.t is None else args.t
    done = []

    def show(res):
        done.append(res.t)
        _print_step(res, args.json)

    try:
        s.step_many(rows, t=t0, on_step=show)
    except Exception:
        nxt = done[-1] + 1 if done else t0
        print(
            f"matmech: the batch stopped at step {nxt}: "
            + (f"steps {t0}..{nxt - 1} are released and stored; " if done else "")
            + "run the same command again to resume (released steps are replayed)",
            file=sys.stderr,
        )
        raise
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
        "step",
        help="feed one step's counts (or many steps from a file or a table of records); "
        "print the noisy running totals and their std",
    )
    q.add_argument("stream", help="a stream file")
    src = q.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--counts",
        metavar="A,B,...",
        help="this step's count per category, comma-separated",
    )
    src.add_argument(
        "--rows",
        metavar="FILE",
        help="many steps, one row each: a CSV whose header names the categories, or a .json "
        "list of rows (lists of counts or objects by category)",
    )
    src.add_argument(
        "--records",
        metavar="FILE",
        help="a table of records (CSV, Parquet, ...) binned into steps by --time-column",
    )
    q.add_argument(
        "--t",
        type=int,
        metavar="T",
        help="the step number (default: the next; with --rows/--records the first row's "
        "step, default 0); a released step is replayed",
    )
    q.add_argument("--time-column", metavar="COL", help="--records: the timestamp column")
    q.add_argument("--start", metavar="TIME", help="--records: the first step's start (ISO)")
    q.add_argument("--end", metavar="TIME", help="--records: the end of the last step (exclusive)")
    q.add_argument(
        "--unit",
        default="day",
        choices=("hour", "day", "week", "month"),
        help="--records: the length of a step (default: day)",
    )
    q.add_argument(
        "--time-zone", metavar="ZONE", help="--records: the wall clock of the steps (IANA name)"
    )
    q.add_argument(
        "--category-column",
        metavar="COL",
        help="--records: the column whose values are the stream's category labels",
    )
    q.add_argument(
        "--policy",
        default="error",
        choices=("error", "drop"),
        help="--records: a record outside the steps or the categories is an error (default) "
        "or dropped",
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
