"""``matmech release``: noisy answers to a workload spec from a CSV or Parquet data file.

The only command that reads data; every output path and the ledger are checked before the
data is read, and nothing is spent before the checks of the public inputs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from matmech.cli.common import check_readable, check_writable, overwrite_arg, privacy_args
from matmech.cli.progress import progress, progress_arg
from matmech.cli.files import (
    cell_codes,
    postprocess,
    print_json,
    read_columns,
    write_answers,
    answers_bytes,
)
from matmech.io.specs import load_spec
from matmech.privacy.params import check_privacy_params


#: The stages of ``matmech release`` its progress bar names (fixed names: never a value of
#: the data); the bar's fraction is the share of stages begun.
STAGES = (
    "checking the inputs",
    "reading the data",
    "planning and measuring",
    "writing the answers",
)


def _strategy_arg(value):
    from matmech.advisor.choice import STRATEGY_NAMES
    from matmech.plans.factored import FACTORED_STRATEGY_NAMES
    from matmech.io.store import load_strategy

    names = STRATEGY_NAMES + FACTORED_STRATEGY_NAMES
    if value in names:
        return value
    from pathlib import Path

    if Path(value).is_dir():
        raise ValueError(f"--strategy {value}: is a directory, not a strategy file")
    try:
        return load_strategy(value)
    except FileNotFoundError:
        raise ValueError(
            f"--strategy must be one of {', '.join(names)} or a strategy file; {value!r} is neither"
        ) from None


def _select_arg(args):
    from matmech.svt.methods import SELECTION_METHODS

    given = [
        f"--{k.replace('_', '-')}"
        for k in ("threshold", "c", "select_eps", "target_rel_error", "select_sigma")
        if getattr(args, k, None) is not None
    ]
    if args.select is None:
        if given:
            raise ValueError(
                f"{', '.join(given)}: only used with --select {'|'.join(SELECTION_METHODS)}"
            )
        return None
    select = {"method": args.select}
    gap = SELECTION_METHODS[args.select].gap  # free-gap methods: the split can be advised
    if (args.select_eps is None and not gap) or args.c is None:
        raise ValueError(
            "--select needs --select-eps (its share of --eps) and --c (the most rows to answer)"
            + (
                ""
                if not gap
                else "; with a gap method --select-eps may be left out (advised split)"
            )
        )
    select["c"] = args.c
    if args.select_eps is not None:
        select["eps"] = args.select_eps
    if args.threshold is not None:
        if args.threshold == "auto":
            select["threshold"] = "auto"
        else:
            try:
                select["threshold"] = float(args.threshold)
            except ValueError:
                raise ValueError(
                    f"--threshold must be a number or 'auto', got {args.threshold!r}"
                ) from None
    if args.target_rel_error is not None:
        select["target_rel_error"] = args.target_rel_error
    if getattr(args, "select_sigma", None) is not None:
        if "sigma" not in SELECTION_METHODS[args.select].own_options:
            owners = [n for n, m in SELECTION_METHODS.items() if "sigma" in m.own_options]
            raise ValueError(
                f"--select-sigma is the top-branch margin of --select {'/'.join(owners)}, not of --select {args.select}"
            )
        select["sigma"] = args.select_sigma
    return select


#: Above this many cells a spec with declared attributes is read as marginal tables of W's
#: support, never as the full histogram (the form of the data only: the route itself follows
#: from W and the strategy, :func:`matmech.plans.route.release_route`).
FACTORED_CELLS = 2**22


class _TablesFromFile:
    """The data file as a source of marginal tables, counted by the engine with the spec's
    declared domain (matmech.release takes the factored path for it)."""

    def __init__(self, path, schema, encoding, delimiter):
        self.path, self.schema, self.encoding, self.delimiter = path, schema, encoding, delimiter

    def marginal_counts(self, subsets):
        from matmech.sources.engines import marginal_counts

        return marginal_counts(
            self.path, self.schema, subsets, encoding=self.encoding, delimiter=self.delimiter
        )


def _cmd_release(args):
    from matmech.plans.route import release_route
    from matmech.sources.histogram import histogram
    from matmech.limits import check_memory, reserved
    from matmech.results.release import iter_release_table
    from matmech.release import release

    if args.out is None and not args.json and args.synthetic is None:
        raise ValueError(
            "give --out FILE.csv for the answers (and/or --json to print them, --synthetic "
            "FILE.csv for synthetic records)"
        )
    bar = progress(args)
    bar.stage(STAGES, 0)
    spec = load_spec(args.spec)
    eps, delta = check_privacy_params(args.eps, args.delta)
    schema = spec.schema
    if schema is not None and args.column:
        raise ValueError(
            f"the spec declares its attributes and their columns {list(schema.columns)}; drop --column "
            '(or set column = "..." in the spec\'s [[attributes]])'
        )
    if schema is None and len(args.column or ()) != len(spec.domain):
        raise ValueError(
            f"the spec has {len(spec.domain)} attribute(s) {list(spec.attributes)} with domain {list(spec.domain)} and "
            f"declares no values ([[attributes]]); give one --column per attribute holding integer codes, in that order "
            f"(got {len(args.column or ())})"
        )
    if args.round is not None and not (0 <= args.round <= 15):
        raise ValueError(f"--round takes a number of decimals in 0..15, got {args.round}")
    from matmech.sources.engines import source_kind

    try:
        kind = source_kind(args.data)  # a .csv/.tsv/.txt or .parquet path, before anything else
    except ValueError:
        if schema is not None:
            raise
        kind = "csv"  # integer codes: any file name is read as CSV, as before
    check_readable(args.data, "--data", "data file")
    strategy = _strategy_arg(args.strategy)
    select = _select_arg(args)
    labels, m = spec.labels, spec.workload.shape[0]
    pending = None
    if args.synthetic is not None:  # checked, and mbi loaded, before anything is spent
        from matmech.estimators.graphical import load_mbi

        check_writable(
            args.synthetic,
            "--synthetic",
            inputs={"--data": args.data, "--ledger": args.ledger, "--out": args.out},
            overwrite=args.overwrite,
        )
        load_mbi()
    if args.out is not None:  # never draw noise for answers that cannot be saved
        inputs = {"--data": args.data, "--ledger": args.ledger, "spec": args.spec}
        if not isinstance(strategy, str):
            inputs["--strategy"] = args.strategy
        pending = check_writable(
            args.out, "--out", inputs=inputs, open_it=True, overwrite=args.overwrite
        )
    try:
        output = check_memory(  # what writing the answers holds besides the release
            OUTPUT_BYTES + OUTPUT_BYTES_PER_ROW * m,
            f"writing the {m:,} answers",
            after="; nothing was spent",
        )
        file_bytes = (
            None if pending is None else answers_bytes(labels, selection=select is not None)
        )
        if pending is not None:  # the room the answers need, from the public labels
            _check_room(pending, file_bytes)
        ledger = _open_ledger(args, eps, delta)
        route = release_route(spec.workload, strategy, delta=delta)
        bar.stage(STAGES, 1)
        x: Any  # what the plan reads: marginal tables from the file, the records or x
        if schema is not None and (route.name == "tables" or schema.n > FACTORED_CELLS):
            x = _TablesFromFile(
                args.data, schema, args.encoding, args.delimiter
            )  # marginal tables, never x
        elif schema is None and kind == "csv":
            arrays = read_columns(
                args.data, args.column, encoding=args.encoding, delimiter=args.delimiter
            )
            codes = cell_codes(args.data, args.column, arrays, spec.domain)
            if route.name == "tables":  # the records: their marginal tables, never x
                x = np.column_stack(codes)
            else:
                x = histogram(
                    codes[0] if len(codes) == 1 else np.column_stack(codes), tuple(spec.domain)
                )
        else:
            from matmech.io.domain import Domain, integer_range
            from matmech.sources.engines import histogram as engine_histogram

            if schema is None:  # bare sizes: the columns hold integer codes 0..n-1
                schema = Domain(
                    tuple(integer_range(c, 0, n - 1) for c, n in zip(args.column, spec.domain))
                )
            x = engine_histogram(
                args.data, schema, encoding=args.encoding, delimiter=args.delimiter
            )
        if ledger is not None:
            ledger.tag(spec=ledger.fingerprint(args.spec), data=ledger.fingerprint(args.data))
        if pending is not None:  # reserved on disk before the spend: writing cannot fail for room
            _reserve_disk(pending, file_bytes)
        bar.stage(STAGES, 2)
        with reserved(output):  # the release's own memory checks leave room for the output
            rel = release(
                x,
                spec.workload,
                eps,
                delta,
                strategy=strategy,
                neighbors=args.neighbors,
                select=select,
                max_records=args.max_records,
                budget=ledger,
            )

        def table():  # the rows one at a time: a table of any size, never all in memory
            rows = iter_release_table(rel, labels)
            return postprocess(rows, decimals=args.round, nonnegative=args.nonnegative)

        bar.stage(STAGES, 3)
        if pending is not None:
            try:
                write_answers(
                    pending, table(), selection=select is not None, overwrite=args.overwrite
                )
            except OSError as exc:
                raise _unsaved(exc, args, rel) from None
            pending = None
    finally:
        if pending is not None:  # nothing was written: remove the temporary file
            import contextlib
            import os

            pending[0].close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(pending[0].name)
    bar.close()
    if args.synthetic is not None:
        _write_synthetic(args, rel, spec)
    if args.json:
        out = {"spec": spec.name, "source": spec.source, "data": args.data, "out": args.out}
        out["strategy_file"] = None if isinstance(strategy, str) else args.strategy
        out["ledger"] = args.ledger
        out["route"] = route.name
        out.update(rel.to_dict(labels=labels, queries=False))
        out["queries"] = None  # written row by row by print_json
        out["postprocessing"] = {"round": args.round, "nonnegative": args.nonnegative}
        print_json(out, table())
        return 0
    m = spec.workload.shape[0]
    answered = (
        f"{rel.answers.size} of {m:,} queries answered"
        if rel.selected is not None
        else f"{m:,} queries answered"
    )
    rmse = (
        f", RMSE/query {math.sqrt(rel.expected_error / rel.answers.size):.4g}"
        if rel.answers.size
        else ""
    )
    print(
        f"{spec.name}: {answered} from {args.data} (the record count is private and not shown); "
        f"eps = {rel.eps:g}, delta = {rel.delta:g}"
    )
    if rel.measurement is not None:
        how = (
            f"from {args.strategy}, {type(strategy).__name__}"
            if not isinstance(strategy, str)
            else f"{rel.strategy_name}: {rel.strategy_note}"
        )
        print(
            f"strategy: {how}; noise: {rel.measurement.noise} (secure randomness), std {rel.measurement.std:.4g}{rmse}"
        )
    elif rel.answers.size:
        print(f"strategy: {rel.strategy_name}: {rel.strategy_note} (secure randomness){rmse}")
    print(f"route: {route.name} ({route.reason})")
    if select is not None and rel.selection is not None and rel.selected is not None:
        print(
            f"selection: {rel.selection.method}, eps {rel.eps_select:g}, {rel.selected.size} row(s) selected (at most {rel.selection.c})"
        )
    if ledger is not None and rel.budget_remaining is not None:
        rem = rel.budget_remaining
        print(
            f"ledger {args.ledger}: charged eps = {rel.eps:g}, delta = {rel.delta:g}; remaining eps = {rem[0]:g}, delta = {rem[1]:g}"
        )
    if args.out is not None:
        print(f"wrote {m:,} rows to {args.out}")
    return 0


def _write_synthetic(args, rel, spec):
    """Synthetic records from the release's measurements (post-processing: no data, no
    spend) to ``--synthetic``, labelled by the spec's declared domain."""
    from matmech.synthesis import synthesize

    domain = spec.schema if spec.schema is not None else dict(zip(spec.attributes, spec.domain))
    synth = synthesize(rel, domain=domain, n=args.synthetic_rows)
    tmp = f"{args.synthetic}.tmp"
    synth.records.to_csv(tmp, index=False)
    import os

    os.replace(tmp, args.synthetic)
    print(
        f"wrote synthetic records to {args.synthetic} (sampled from a graphical model fitted "
        "to the release's measurements: post-processing, no further privacy cost, no error bars)"
    )


#: Memory that writing the answers holds besides the release: one chunk of 65,536 row dicts
#: (``OUTPUT_BYTES``) and, per workload row, the interval law (half-widths, coverages,
#: methods and, for the residual path, the law's own arrays) and a selection's row index.
#: Measured peaks, rounded up: 40 MiB + 87 bytes a row under (eps, delta), 11 under pure
#: eps (benchmarks/release_memory.py, "output" rows).
OUTPUT_BYTES, OUTPUT_BYTES_PER_ROW = 64 << 20, 96


def _check_room(pending, nbytes):
    """The answers file's size (``nbytes``, an upper bound from the public labels) against
    the room on its disk (:func:`matmech.limits.check_disk`), before the data is read."""
    from pathlib import Path

    from matmech.limits import check_disk

    handle, path = pending
    check_disk(
        nbytes,
        Path(handle.name).parent,
        f"--out {path}: the answers file",
        after="; nothing was spent",
    )


def _reserve_disk(pending, nbytes):
    """The answers file's space reserved on disk just before the spend
    (:func:`matmech.limits.preallocate`): writing it after the noise is drawn cannot run out
    of room (where the file system cannot reserve, :func:`_check_room` was the guard)."""
    from matmech.limits import preallocate

    handle, path = pending
    what = f"--out {path}: the answers file"
    try:
        preallocate(handle.fileno(), nbytes, what)
    except ValueError as exc:
        raise type(exc)(f"{exc}; nothing was spent") from None


def _unsaved(exc, args, rel):
    """The error for answers drawn (and charged) but not written: it says the budget is spent
    and where it went, so the curator never releases again believing nothing happened."""
    why = exc.strerror or str(exc) or type(exc).__name__
    where = (
        f"charged to ledger {args.ledger} (its last spend: eps = {rel.eps:g}, delta = {rel.delta:g}; see "
        f"'matmech budget history {args.ledger}')"
        if args.ledger is not None
        else "not recorded in any ledger, but spent all the same"
    )
    return OSError(
        f"--out {args.out}: the answers could not be written ({why}) AFTER the noise was drawn: the privacy "
        f"budget of this release is spent (eps = {rel.eps:g}, delta = {rel.delta:g}), {where}; the answers "
        "are lost and a new release costs budget again"
    )


def _open_ledger(args, eps, delta):
    """The --ledger, opened and checked before the data is read (a refused spend reads nothing)."""
    if args.ledger is None:
        return None
    from matmech.privacy.events import ApproxDP
    from matmech.privacy.ledger import Ledger
    from matmech.run.runner import afford

    ledger = Ledger.open(args.ledger)
    # the runner's afford check (BudgetExceededError, saying what is left); the release's
    # run_plan checks again and spends, atomically
    afford(ledger, (ApproxDP(eps, delta),), what=f"release of {args.spec}")
    return ledger


def add_parsers(sub):
    """The ``release`` subcommand."""
    from matmech.svt.methods import SELECTION_METHODS

    p = sub.add_parser(
        "release", help="release noisy answers to a workload spec from a CSV or Parquet data file"
    )
    p.add_argument(
        "spec",
        help="a workload spec file (TOML); its [[attributes]] declare the raw columns' domains",
    )
    privacy_args(p, eps_required=True)
    p.add_argument(
        "--data",
        required=True,
        metavar="FILE.csv|FILE.parquet",
        help="records, one per row (CSV with a header, or Parquet)",
    )
    p.add_argument(
        "--column",
        action="append",
        metavar="COL",
        help="only for a spec without [[attributes]]: the column holding each record's code 0..n-1 for a spec "
        "attribute; repeat once per attribute, in order",
    )
    p.add_argument(
        "--encoding",
        default="utf-8",
        help="the CSV file's text encoding (default utf-8; a BOM is skipped; e.g. latin-1)",
    )
    p.add_argument("--delimiter", metavar="CHAR", help="the CSV delimiter (default: detected)")
    p.add_argument(
        "--out",
        metavar="OUT.csv",
        help="write one row per query: query, answer, std, lower, upper (the 95%% interval), interval "
        "(its method), coverage",
    )
    p.add_argument(
        "--round",
        type=int,
        metavar="DECIMALS",
        help="post-processing: round answers and intervals to DECIMALS (0 for whole counts); no privacy cost",
    )
    p.add_argument(
        "--nonnegative",
        action="store_true",
        help="post-processing: clip answers and intervals at 0 (counts cannot be negative); no privacy cost",
    )
    p.add_argument(
        "--strategy",
        default="auto",
        metavar="NAME|FILE.npz",
        help="auto (default), identity, hierarchical, haar, optimize, residual (a union of marginals), "
        "gmarginals (a union of products), or a strategy file from 'matmech advise --save-strategy'",
    )
    p.add_argument(
        "--select",
        choices=list(SELECTION_METHODS),
        help="answer only rows chosen privately first (sparse vector / exponential mechanism / free-gap: "
        "topc-gap, svt-gap, adaptive-svt)",
    )
    p.add_argument(
        "--threshold",
        metavar="T|auto",
        help="svt: answer rows whose count clears T; 'auto' from --target-rel-error",
    )
    p.add_argument("--c", type=int, metavar="C", help="the most rows to select")
    p.add_argument(
        "--select-eps",
        type=float,
        metavar="E",
        help="the part of --eps spent on selection (the rest measures)",
    )
    p.add_argument(
        "--target-rel-error",
        type=float,
        metavar="R",
        help="with --threshold auto: answer a row if std <= R x count (default 0.1)",
    )
    p.add_argument(
        "--select-sigma",
        type=float,
        metavar="S",
        help="adaptive-svt: the margin above the threshold (in counts) for the cheap top branch (default: auto)",
    )
    p.add_argument(
        "--max-records",
        type=int,
        metavar="N",
        help="declared bound on the number of records (default 2**32); more is refused before anything is spent",
    )
    p.add_argument(
        "--ledger",
        metavar="FILE",
        help="charge (eps, delta) to this privacy ledger ('matmech budget init') before any noise",
    )
    p.add_argument(
        "--synthetic",
        metavar="OUT.csv",
        help="also write synthetic records sampled from a graphical model fitted to the release's "
        "measurements (a marginal workload; needs the synth extra: pip install 'matmech-dp[synth]'); "
        "post-processing, no further privacy cost",
    )
    p.add_argument(
        "--synthetic-rows",
        type=int,
        metavar="N",
        help="how many synthetic records (default: the model's noisy record count)",
    )
    overwrite_arg(p)
    progress_arg(p)
    p.set_defaults(func=_cmd_release)
