"""The ``matmech`` command line: ``compare``, ``plot``, ``advise``, ``release``, ``budget`` and ``stream``
(:mod:`matmech.stream.cli`).

Every failure the user can cause (missing file, bad spec, bad ε, a bad data file) ends with
a one-line message on stderr and exit status 2, never a traceback.

``release`` is the only command that reads data. Its noise always comes from the operating
system's CSPRNG (there is deliberately no seed option). Its data file is a CSV (read with a
real parser: a UTF-8 BOM, ``--encoding``, ``--delimiter``) or a Parquet file. A spec that
declares its domain (``[[attributes]]``: ranges, bins, categories and their policies) is
applied to the raw columns inside an engine (DuckDB); a spec with bare sizes reads one
``--column`` per attribute holding integer codes 0 … n−1. Every output path is checked and
opened before anything is spent. ``release --ledger FILE`` charges a persistent privacy
ledger (``matmech budget init FILE --eps E``) before any noise. ``--round`` and
``--nonnegative`` are post-processing of the published answers (no privacy cost).
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
        p.add_argument(
            "--eps",
            type=float,
            required=True,
            help="privacy parameter epsilon (> 0) this release spends",
        )
    else:
        p.add_argument(
            "--eps", type=float, default=1.0, help="privacy parameter epsilon (> 0, default 1)"
        )
    p.add_argument(
        "--delta", type=float, default=0.0, help="delta in [0, 1); 0 means pure eps-DP (default)"
    )
    p.add_argument("--neighbors", choices=["add_remove", "substitute"], default="add_remove")
    p.add_argument(
        "--json", action="store_true", help="print machine-readable JSON instead of a table"
    )


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
    _check_writable(path, "--out", inputs={"spec": args.spec}, overwrite=args.overwrite)
    progress = _progress(args)
    advice = advise(
        spec.workload,
        eps,
        delta,
        neighbors=args.neighbors,
        time_budget="default" if args.time_budget is None else args.time_budget,
        progress=progress,
    )
    progress.close()
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


_ACTIVE: list = []  # progress bars to close before an error message


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
        _check_writable(args.save_strategy, "--save-strategy", overwrite=args.overwrite)
    if args.time_budget is not None and not (
        math.isfinite(args.time_budget) and args.time_budget > 0
    ):
        raise ValueError(
            f"--time-budget must be a positive number of seconds, got {args.time_budget!r}"
        )
    bar = _progress(args)
    advice = advise(
        spec.workload,
        eps,
        delta,
        time_budget="default" if args.time_budget is None else args.time_budget,
        progress=bar,
        neighbors=args.neighbors,
    )
    bar.close()
    saved = None
    if args.save_strategy:
        save_strategy(args.save_strategy, advice.best, overwrite=args.overwrite)
        saved = args.save_strategy
    route = _auto_route(spec.workload, eps, delta, args.neighbors)
    if args.json:
        out = {
            "spec": spec.name,
            "source": spec.source,
            **advice.to_dict(),
            "saved_strategy": saved,
            "auto_route": route,
        }
        print(json.dumps(out, indent=2))
        return 0
    print(f"{spec.name}: {advice.table()}")
    if route["route"] == "tables":
        print(
            f"release --strategy auto (the default) takes the tables route: {route['reason']}; RMSE/query "
            f"about {route['rmse']:.4g} (the rows above are strategies for the histogram route)"
        )
    if saved:
        print(
            f"saved the best strategy ({advice.best_row.name}) to {saved}; use it with: matmech release {args.spec} --strategy {saved} ..."
        )
    print(CONVENTIONS)
    return 0


def _auto_route(W, eps, delta, neighbors):
    """What ``release --strategy auto`` does with W: its route and, for the tables route, the
    residual plan's analytic error (data-independent)."""
    from matmech.factored.release import residual_error
    from matmech.factored.route import release_route

    route = release_route(W, "auto")
    out = {"route": route.name, "reason": route.reason}
    if route.name == "tables":
        total = residual_error(W, eps, delta, neighbors=neighbors)
        out.update(total_error=total, rmse=math.sqrt(total / W.shape[0]))
    return out


# -- release -----------------------------------------------------------------------------------


def _read_columns(path, columns, *, encoding="utf-8", delimiter=None):
    """The named CSV columns as float arrays; errors name the file, line and column.

    A real CSV parser: a UTF-8 byte-order mark is skipped, ``encoding`` is honoured (a
    decoding error names the file and the encoding, never the bytes), and the delimiter
    is sniffed from the header line unless given.
    """
    from matmech.io.engines import csv_header, open_text

    header, delimiter = csv_header(path, encoding=encoding, delimiter=delimiter)
    enc = "utf-8-sig" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding
    try:
        with open_text(path, enc) as handle:
            handle.readline()  # the header, read above
            index = []
            for c in columns:
                if c not in header:
                    raise ValueError(f"{path}: no column {c!r}; the header has {header}")
                index.append(header.index(c))
            values = [[] for _ in columns]
            for line, row in enumerate(csv.reader(handle, delimiter=delimiter), start=2):
                if not row:
                    continue
                for k, (c, i) in enumerate(zip(columns, index)):
                    cell = row[i].strip() if i < len(row) else ""
                    try:
                        v = float(cell)
                    except ValueError:
                        raise ValueError(
                            f"{path}: line {line}, column {c!r}: the entry is not a number"
                        ) from None
                    values[k].append(v)
    except UnicodeDecodeError:
        raise ValueError(
            f"{path}: not valid {encoding} text; give the file's encoding with --encoding (e.g. latin-1)"
        ) from None
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


def _check_writable(path, flag, *, inputs=(), open_it=False, overwrite=False):
    """Fail before any work (and before a release spends privacy) if ``path`` cannot be written.

    Refused: an existing file unless ``overwrite`` (the user's ``--overwrite``: no command
    replaces a file it did not create unasked), a missing parent directory, a directory, an
    unwritable file or directory, and a path that is one of the ``inputs`` ({flag: path} of files the command reads: overwriting
    the data or the ledger would destroy it). ``open_it``: also create the temporary file the
    output is written to (renamed onto ``path`` by :func:`_write_answers`), so a release never
    spends for answers it cannot save; returns ``(handle, path)``.
    """
    import os
    import tempfile
    from pathlib import Path

    target = Path(path)
    parent = target.resolve().parent
    if not parent.is_dir():
        raise ValueError(f"{flag} {path}: the directory {parent} does not exist")
    if target.is_dir():
        raise ValueError(f"{flag} {path}: is a directory; give a file name")
    for other_flag, other in dict(inputs).items():
        if (
            other is not None
            and Path(other).exists()
            and target.exists()
            and os.path.samefile(other, target)
        ):
            raise ValueError(
                f"{flag} {path}: is the same file as {other_flag} {other}; refusing to overwrite it"
            )
        if other is not None and target.resolve() == Path(other).resolve():
            raise ValueError(
                f"{flag} {path}: is the same file as {other_flag} {other}; refusing to overwrite it"
            )
    if not os.access(parent, os.W_OK) or (target.exists() and not os.access(path, os.W_OK)):
        raise ValueError(f"{flag} {path}: not writable")
    if target.exists() and not overwrite:
        raise ValueError(f"{flag} {path}: the file exists; pass --overwrite to replace it")
    if not open_it:
        return None
    try:
        handle = tempfile.NamedTemporaryFile(
            "w",
            newline="",
            encoding="utf-8",
            dir=parent,
            prefix=f".{target.name}.",
            suffix=".tmp",
            delete=False,
        )
    except OSError as exc:
        raise ValueError(f"{flag} {path}: cannot be written ({exc.strerror})") from None
    return handle, str(path)


def _strategy_arg(value):
    from matmech.advisor.choice import STRATEGY_NAMES
    from matmech.io.store import load_strategy

    if value in STRATEGY_NAMES:
        return value
    try:
        return load_strategy(value)
    except FileNotFoundError:
        raise ValueError(
            f"--strategy must be one of {', '.join(STRATEGY_NAMES)} or a strategy file; {value!r} is neither"
        ) from None


def _select_arg(args):
    from matmech.svt.select import SELECTION_METHODS

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
#: from W and the strategy, :func:`matmech.factored.route.release_route`).
FACTORED_CELLS = 2**22


class _TablesFromFile:
    """The data file as a source of marginal tables, counted by the engine with the spec's
    declared domain (matmech.release takes the factored path for it)."""

    def __init__(self, path, schema, encoding, delimiter):
        self.path, self.schema, self.encoding, self.delimiter = path, schema, encoding, delimiter

    def marginal_counts(self, subsets):
        from matmech.io.engines import marginal_counts

        return marginal_counts(
            self.path, self.schema, subsets, encoding=self.encoding, delimiter=self.delimiter
        )


def _cmd_release(args):
    from matmech.factored.route import release_route
    from matmech.io.data import histogram
    from matmech.release import release, release_table

    if args.out is None and not args.json:
        raise ValueError("give --out FILE.csv for the answers (and/or --json to print them)")
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
    from matmech.io.engines import source_kind

    try:
        kind = source_kind(args.data)  # a .csv/.tsv/.txt or .parquet path, before anything else
    except ValueError:
        if schema is not None:
            raise
        kind = "csv"  # integer codes: any file name is read as CSV, as before
    strategy = _strategy_arg(args.strategy)
    select = _select_arg(args)
    pending = None
    if args.out is not None:  # never draw noise for answers that cannot be saved
        inputs = {"--data": args.data, "--ledger": args.ledger, "spec": args.spec}
        if not isinstance(strategy, str):
            inputs["--strategy"] = args.strategy
        pending = _check_writable(
            args.out, "--out", inputs=inputs, open_it=True, overwrite=args.overwrite
        )
    try:
        ledger = _open_ledger(args, eps, delta)
        route = release_route(spec.workload, strategy)
        if schema is not None and (route.name == "tables" or schema.n > FACTORED_CELLS):
            x = _TablesFromFile(
                args.data, schema, args.encoding, args.delimiter
            )  # marginal tables, never x
        elif schema is None and kind == "csv":
            arrays = _read_columns(
                args.data, args.column, encoding=args.encoding, delimiter=args.delimiter
            )
            codes = _codes(args.data, args.column, arrays, spec.domain)
            x = histogram(
                codes[0] if len(codes) == 1 else np.column_stack(codes), tuple(spec.domain)
            )
        else:
            from matmech.io.domain import Domain, integer_range
            from matmech.io.engines import histogram as engine_histogram

            if schema is None:  # bare sizes: the columns hold integer codes 0..n-1
                schema = Domain(
                    tuple(integer_range(c, 0, n - 1) for c, n in zip(args.column, spec.domain))
                )
            x = engine_histogram(
                args.data, schema, encoding=args.encoding, delimiter=args.delimiter
            )
        if ledger is not None:
            ledger.tag(spec=ledger.fingerprint(args.spec), data=ledger.fingerprint(args.data))
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
        labels = list(spec.labels) if spec.labels is not None else _marginal_labels(spec)
        rows = _postprocess(
            release_table(rel, labels), decimals=args.round, nonnegative=args.nonnegative
        )
        if pending is not None:
            try:
                _write_answers(
                    pending, rows, selection=select is not None, overwrite=args.overwrite
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
    if args.json:
        out = {"spec": spec.name, "source": spec.source, "data": args.data, "out": args.out}
        out["strategy_file"] = None if isinstance(strategy, str) else args.strategy
        out["ledger"] = args.ledger
        out["route"] = route.name
        out.update(rel.to_dict(labels=labels))
        out["queries"] = rows
        out["postprocessing"] = {"round": args.round, "nonnegative": args.nonnegative}
        print(json.dumps(out, indent=2))
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
            f"strategy: {how}; noise: {rel.measurement.noise} (OS randomness), std {rel.measurement.std:.4g}{rmse}"
        )
    elif rel.answers.size:
        print(f"strategy: {rel.strategy_name}: {rel.strategy_note} (OS randomness){rmse}")
    print(f"route: {route.name} ({route.reason})")
    if select is not None:
        print(
            f"selection: {rel.selection.method}, eps {rel.eps_select:g}, {rel.selected.size} row(s) selected (at most {rel.selection.c})"
        )
    if ledger is not None:
        rem = rel.budget_remaining
        print(
            f"ledger {args.ledger}: charged eps = {rel.eps:g}, delta = {rel.delta:g}; remaining eps = {rem[0]:g}, delta = {rem[1]:g}"
        )
    if args.out is not None:
        print(f"wrote {len(rows):,} rows to {args.out}")
    return 0


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


def _postprocess(rows, *, decimals, nonnegative):
    """Documented post-processing of published answers (free under DP, but biased): clip the
    answer and its interval at 0 (``nonnegative``), then round them to ``decimals``. The
    std column stays that of the unprocessed estimate."""
    if decimals is None and not nonnegative:
        return rows
    out = []
    for r in rows:
        r = dict(r)
        for k in ("answer", "lower", "upper"):
            v = r.get(k)
            if v is None:
                continue
            if nonnegative:
                v = max(v, 0.0)
            if decimals is not None:
                v = round(v, decimals)
            r[k] = v
        out.append(r)
    return out


def _open_ledger(args, eps, delta):
    """The --ledger, opened and checked before the data is read (a refused spend reads nothing)."""
    if args.ledger is None:
        return None
    from matmech.privacy.ledger import Ledger

    ledger = Ledger.open(args.ledger)
    if not ledger.can_spend(eps, delta):  # release checks again, atomically, when it spends
        ledger.spend(
            eps, delta, what=f"release of {args.spec}"
        )  # raises BudgetExceededError, saying what is left
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
    """Labels for a spec that is exactly a union of marginals, else None: from the declared
    domain (``sex=F, state=CA``) when the spec has one, else ``age=3, city=1`` codes."""
    import itertools

    W = spec.workload
    subsets = getattr(W, "subsets", None)
    if subsets is None or tuple(getattr(W, "domain", ())) != tuple(spec.domain):
        return None
    if spec.schema is not None:
        out = [label for s in subsets for label in spec.schema.marginal_labels(s)]
        return out if len(out) == W.shape[0] else None
    out = []
    for subset in subsets:
        if not subset:
            out.append("total")
            continue
        for cell in itertools.product(*[range(spec.domain[a]) for a in subset]):
            out.append(", ".join(f"{spec.attributes[a]}={v}" for a, v in zip(subset, cell)))
    return out if len(out) == W.shape[0] else None


def _write_answers(path, rows, *, selection, overwrite=True):
    """One CSV row per query: query, answer, std, the 95% interval (and selected/status).

    ``path``: a file name, or the ``(handle, path)`` pair from ``_check_writable(...,
    open_it=True)``: the rows go to that temporary file, which is then renamed onto path
    (without ``overwrite``, linked: a file created there meanwhile is never replaced).
    """
    import os

    fields = ["query", "answer", "std", "lower", "upper", "interval", "coverage"] + (
        ["selected", "status"] if selection else []
    )
    handle, final = (
        (open(path, "w", newline="", encoding="utf-8"), None)
        if isinstance(path, (str, os.PathLike))
        else path
    )
    with handle as f:
        w = csv.writer(f)
        w.writerow(fields)
        for r in rows:
            nums = [r["answer"], r["std"], r["lower"], r["upper"]]
            line = [
                r["query"],
                *("" if v is None else repr(float(v)) for v in nums),
                r.get("interval") or "",
                "" if r.get("coverage") is None else repr(float(r["coverage"])),
            ]
            if selection:
                line += ["true" if r["selected"] else "false", r["status"]]
            w.writerow(line)
    if final is not None:  # the temporary file was created 0600: give it the usual permissions
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(handle.name, 0o666 & ~mask)
        if overwrite:
            os.replace(handle.name, final)
        else:
            os.link(handle.name, final)  # FileExistsError if a file appeared at final
            os.unlink(handle.name)


def build_parser():
    from matmech.svt.select import SELECTION_METHODS

    parser = argparse.ArgumentParser(
        prog="matmech",
        description="The Matrix Mechanism for linear queries under differential privacy.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("compare", help="compare fixed strategies for a workload spec analytically")
    p.add_argument("spec", help="a workload spec file (TOML), e.g. workloads/all_range_1024.toml")
    _privacy_args(p)
    p.set_defaults(func=_cmd_compare)
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
    _privacy_args(p)
    p.add_argument(
        "--time-budget",
        type=float,
        metavar="SECONDS",
        help="cap the ranking in wall-clock seconds (the result then depends on load). Default: no clock, deterministic",
    )
    _progress_arg(p)
    _overwrite_arg(p)
    p.set_defaults(func=_cmd_plot)
    p = sub.add_parser(
        "advise", help="rank strategies, optimised ones included, for a workload spec"
    )
    p.add_argument("spec", help="a workload spec file (TOML)")
    _privacy_args(p)
    p.add_argument(
        "--save-strategy",
        metavar="FILE.npz",
        help="save the best strategy for 'matmech release --strategy FILE.npz'",
    )
    p.add_argument(
        "--time-budget",
        type=float,
        metavar="SECONDS",
        help="cap the whole ranking in wall-clock seconds (the optimiser gets what is left; the result then depends on load). Default: no clock, deterministic",
    )
    _progress_arg(p)
    _overwrite_arg(p)
    p.set_defaults(func=_cmd_advise)
    p = sub.add_parser(
        "release", help="release noisy answers to a workload spec from a CSV or Parquet data file"
    )
    p.add_argument(
        "spec",
        help="a workload spec file (TOML); its [[attributes]] declare the raw columns' domains",
    )
    _privacy_args(p, eps_required=True)
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
        help="auto (default), identity, hierarchical, haar, optimize, or a strategy file from 'matmech advise --save-strategy'",
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
    _overwrite_arg(p)
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
    from matmech.stream.cli import add_stream_parser

    add_stream_parser(sub)
    return parser


def _overwrite_arg(p):
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing output file (without it, an existing file is never overwritten)",
    )


def _progress_arg(p):
    p.add_argument(
        "--progress",
        choices=["auto", "always", "never"],
        default="auto",
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
