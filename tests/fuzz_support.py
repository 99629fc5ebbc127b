"""The machinery of the public fuzz (tests/test_public_fuzz.py): one entry point as an
:class:`Entry`, one call with a hostile argument (:func:`call`), what a clean refusal is
(:func:`named`, :func:`leaked`), and the deterministic sweep (:func:`sweep`) that tries every
value of :data:`POOL` on every argument of every entry and sorts each call into one of the
outcomes below (issue 31: "clean %, per category").

A call is **clean** when it returns a valid result (the entry's check passes) for a value
that may be valid, or refuses with ``ValueError`` / ``TypeError`` (``OSError`` naming the
path for an entry that reads a file) whose message names the argument or the value and shows
none of Python's or numpy's own phrases (:data:`INTERNAL`). Otherwise it is one of:

* ``wrong kind``: another exception (``AttributeError``, ``KeyError``, ``IndexError``,
  ``ZeroDivisionError``, ...), or ``ValueError`` for a value of the wrong kind given to a
  numeric, string or boolean parameter (a wrong kind is a ``TypeError``), or a hang;
* ``python text``: the refusal shows Python's own text (:data:`INTERNAL`) or names neither
  the argument nor the value;
* ``accepted``: a bad input accepted: a value of the wrong kind for the parameter (a string,
  None, a bool, a float for an integer, NaN ...) returned a result, or the result fails the
  entry's check (NaN, empty, degenerate).

Which values are of the wrong kind follows from the baseline value's type (:func:`must_refuse`):
an ``int`` parameter takes integers only (numpy integers too; no bool, no float such as 8.0:
matmech.validate's rule), a ``float`` parameter real numbers (no bool, no NaN), a ``str``
parameter strings, a ``bool`` parameter True/False; parameters whose baseline is None or an
object (a workload, a budget, a path) are judged by the result check alone. ``Entry.loose``
names the parameters that take more than their baseline's kind (documented alternatives).
"""

from __future__ import annotations

import math
import numbers
import os
import signal
import tempfile
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

NAN, INF = float("nan"), float("inf")
RAGGED = [[1.0, 2.0], [1.0]]
HUGE = 10**400  # an int no float can hold: float(HUGE) raises OverflowError

#: Values of a kind no numeric parameter takes.
WRONG_KINDS = [None, "no", b"1", object(), {}, complex(1, 1), "a\x00b", True]

#: The deterministic pool the sweep tries on every argument (wrong kinds, non-finite and
#: extreme numbers, numpy scalars, sizes at the int64 limits, empty, ragged and NaN arrays).
POOL = [
    *WRONG_KINDS,
    False,
    "1",
    [],
    np.bool_(True),
    RAGGED,
    np.array([NAN]),
    [1, "a"],
    [0.5],
    NAN,
    INF,
    -INF,
    0,
    0.0,
    -1,
    -1.0,
    1e300,
    1e-300,
    5e-324,
    HUGE,
    2**63,
    2**62,
    -(2**63),
    np.float32(NAN),
    np.int64(-3),
    np.int64(3),
    np.float64(8.0),
    1.5,
    0.5,
]


class Fresh:
    """A baseline argument made anew for every call (a budget that is spent, a new path)."""

    def __init__(self, make):
        self.make = make

    def __repr__(self):
        return f"Fresh({getattr(self.make, '__name__', 'make')})"


@dataclass(frozen=True)
class Entry:
    """One public entry point: a call ``fn(**args)`` with valid defaults, the names that
    may be perturbed (default: all), and a check of its result."""

    name: str
    fn: object
    args: dict
    check: object
    perturb: tuple = ()
    examples: int = 40
    files: bool = False  # takes a path: OSError naming the path is also a clear refusal
    #: parameters that take more than their baseline value's kind (documented alternatives)
    loose: tuple = ()
    #: parameters that also take None (a documented "not given")
    none_ok: tuple = ()
    #: first release of the entry point: "old" (swept before issue 31) or "new"
    group: str = "old"
    #: extra names a refusal may use for an argument
    aliases: dict = field(default_factory=dict)
    #: values of the right kind that must be refused (argument -> tuple), swept with POOL
    bad: dict = field(default_factory=dict)


#: Argument names as messages may phrase them.
ALIASES = {
    "W": ("workload", "W "),
    "A": ("strategy", "A "),
    "x": ("x", "counts"),
    "a": ("factor", "argument 0", "workload"),
    "b": ("factor", "argument 1", "workload"),
    "obj": ("matrix", "LinOp"),
    "matrix": ("matrix",),
    "data": ("values", "data", "column", "row", "value", "record", "code", "table", "histogram"),
    "bins": ("bins", "domain", "edges"),
    "candidates": ("candidate",),
    "p": ("p",),
    "rho": ("rho",),
    "value": ("value",),
    "values": ("value", "candidate"),
    "names": ("name", "factorization"),
    "labels": ("labels",),
    "level": ("level",),
    "top": ("top",),
    "rows": ("rows", "row"),
    "advice": ("advice",),
    "out": ("out",),
    "name": ("name",),
    "row_variance": ("row_variance",),
    "cov": ("cov",),
    "y": ("y",),
    "path": ("path", "file", "strategy", "spec", "directory"),
    "intervals": ("interval",),
    "domain": ("domain",),
    "threshold": ("threshold",),
    "source": ("source", "file", "path", "column"),
    "spec": ("spec",),
    "plan": ("plan",),
    "counts": ("counts",),
    "S": ("attribute", "marginal", "subset"),
    "T": ("attribute", "residual", "subset"),
    "subsets": ("subset",),
    "weights": ("weight",),
    "edges": ("edge",),
}


def named(message: str, arg: str, value, aliases=()) -> bool:
    """Whether ``message`` names the argument or the value it got."""
    msg = message.lower()
    words = [arg.lower(), *(a.lower() for a in ALIASES.get(arg, ())), *aliases]
    if any(w.lower() in msg for w in words):
        return True
    shown = [repr(value), str(value), type(value).__name__]
    return any(s and s[:12].lower() in msg for s in shown)


#: Python's and numpy's own messages: a refusal that shows one of these was not written for
#: the user (issue 23: "'int' object is not iterable", "embedded null byte"; issue 31:
#: "unsupported operand", "object of type", "'NoneType'", "list indices").
INTERNAL = (
    "object is not iterable",
    "embedded null byte",
    "unhashable type",
    "not subscriptable",
    "has no attribute",
    "cannot be interpreted as an integer",
    "unsupported operand",
    "could not convert",
    "invalid literal",
    "'nonetype' object",
    "not supported between",
    "positional argument",
    "setting an array element",
    "only length-1 arrays",
    "truth value of an array",
    "object of type",
    "must be real number, not",
    "float() argument",
    "int() argument",
    "can't multiply",
    "bad operand type",
    "object is not callable",
    "unexpected keyword argument",
    "list indices",
    "tuple indices",
    "index out of range",
    "division by zero",
    "too many values to unpack",
    "not enough values to unpack",
    "expected str, bytes or os.pathlike",
    "must be str, not",
    "can only concatenate",
    "could not be broadcast",
    "cannot cast",
    "ufunc",
    "object cannot be",
    "argument of type",
    "math domain error",
    "cannot convert float",
    "isoformat",
    "out of bounds for axis",
)


def leaked(message: str):
    """The internal phrase ``message`` shows, or None."""
    msg = message.lower()
    return next((p for p in INTERNAL if p in msg), None)


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang()


def resolve(args: dict) -> dict:
    return {k: (v.make() if isinstance(v, Fresh) else v) for k, v in args.items()}


def call(entry: Entry, arg: str, value, seconds=300):
    """("ok", result) | ("refused", exc) | ("other", exc) | ("hang", None)."""
    args = resolve(entry.args)
    args[arg] = value.make() if isinstance(value, Fresh) else value
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        return "ok", entry.fn(**args)
    except (ValueError, TypeError) as exc:
        return "refused", exc
    except OSError as exc:
        return ("refused" if entry.files else "other"), exc
    except _Hang:
        return "hang", None
    except Exception as exc:  # noqa: BLE001 - the property: nothing else escapes
        return "other", exc
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _is_int(v):
    return isinstance(v, (numbers.Integral, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_real(v):
    return isinstance(v, (numbers.Real, np.number)) and not isinstance(
        v, (bool, np.bool_, complex, np.complexfloating)
    )


def base_kind(base):
    """The kind a parameter takes, from its baseline value: "int", "float", "str", "bool"
    or None (judged by the result check alone)."""
    if isinstance(base, (bool, np.bool_)):
        return "bool"
    if _is_int(base):
        return "int"
    if _is_real(base):
        return "float"
    if isinstance(base, str):
        return "str"
    return None


def must_refuse(entry: Entry, arg: str, value) -> bool:
    """Whether ``value`` is of a kind parameter ``arg`` never takes (see the module notes), or
    one of the entry's known bad values for it."""
    if any(value is b for b in entry.bad.get(arg, ())):
        return True
    if arg in entry.loose or isinstance(entry.args[arg], Fresh):
        return False
    kind = base_kind(entry.args[arg])
    if value is None and arg in entry.none_ok:
        return False
    if kind == "bool":
        return not isinstance(value, (bool, np.bool_))
    if kind == "str":
        return not isinstance(value, str)
    if kind == "int":
        return not _is_int(value)
    if kind == "float":
        return not _is_real(value) or (isinstance(value, float) and math.isnan(value))
    return False


def wrong_type(entry: Entry, arg: str, value) -> bool:
    """A value whose refusal must be a TypeError: a non-number for a numeric parameter, a
    non-string for a string one, a non-bool for a flag (None excepted where it means "not
    given": a ValueError is right when None is allowed for some other setting)."""
    if arg in entry.loose or isinstance(entry.args[arg], Fresh) or value is None:
        return False
    kind = base_kind(entry.args[arg])
    if kind in ("int", "float"):
        return not _is_real(value)
    if kind == "str":
        return not isinstance(value, str)
    if kind == "bool":
        return not isinstance(value, (bool, np.bool_))
    return False


#: The outcomes of one call, in the order the report lists them.
OUTCOMES = ("clean", "wrong kind", "python text", "accepted")


def classify(entry: Entry, arg: str, value, seconds=60):
    """(outcome, detail) of ``entry`` called with ``arg=value``."""
    kind, out = call(entry, arg, value, seconds)
    if kind == "hang":
        return "wrong kind", f"ran longer than {seconds} s"
    if kind == "other":
        return "wrong kind", f"{type(out).__name__}: {out}"
    if kind == "refused":
        text = str(out)
        if leaked(text) or not named(text, arg, value, tuple(entry.aliases.get(arg, ()))):
            return "python text", f"{type(out).__name__}: {text}"
        if wrong_type(entry, arg, value) and not isinstance(out, TypeError):
            return "wrong kind", f"{type(out).__name__} (not TypeError): {text}"
        return "clean", ""
    if must_refuse(entry, arg, value):
        return "accepted", f"returned {type(out).__name__}"
    try:
        entry.check(out)
    except AssertionError as exc:
        return "accepted", f"degenerate result: {str(exc)[:120]}"
    except Exception as exc:  # noqa: BLE001 - a result that breaks its own check is not clean
        return "accepted", f"result check raised {type(exc).__name__}: {exc}"
    return "clean", ""


def cases(entries):
    """Every (entry, argument, value) of the sweep, in a fixed order."""
    for e in entries:
        for arg in e.perturb or e.args:
            for v in (*POOL, *e.bad.get(arg, ())):
                yield e, arg, v


def sweep(entries, *, seconds=60):
    """{group: Counter of outcomes}, and the list of (group, outcome, where, detail) that are
    not clean. Runs in a temporary working directory: a string such as "no" is a valid
    relative path, and an entry that writes files writes them there."""
    counts: dict = {}
    bad = []
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="matmech-sweep-") as tmp:
        os.chdir(tmp)  # contextlib.chdir needs Python 3.11
        try:
            for e, arg, v in cases(entries):
                outcome, detail = classify(e, arg, v, seconds)
                counts.setdefault(e.group, Counter())[outcome] += 1
                if outcome != "clean":
                    bad.append((e.group, outcome, f"{e.name}({arg}={_show(v)})", detail))
        finally:
            os.chdir(here)
    return counts, bad


def _show(v):
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def table(counts) -> str:
    """The report's table: calls, clean %, and each category, per group."""
    lines = [
        "| entry points | calls | clean % | wrong kind | python text | accepted |",
        "|---" * 6 + "|",
    ]
    for group in sorted(counts):
        c = counts[group]
        n = sum(c.values())
        lines.append(
            f"| {group} | {n} | {100 * c['clean'] / n:.1f} | {c['wrong kind']} | "
            f"{c['python text']} | {c['accepted']} |"
        )
    return "\n".join(lines)
