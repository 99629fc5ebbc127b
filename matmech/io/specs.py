"""Workload spec files (TOML): a declarative description of a domain and its queries.

A spec names the domain (attribute sizes, cells row-major) and lists query parts; the
workload is the weighted union of the parts. The domain is either bare sizes (``domain =
[100]``, the data then holds integer codes) or declared per attribute in ``[[attributes]]``
tables (integer ranges, numeric bins, categories, and what becomes of missing and
out-of-domain values: :mod:`matmech.io.domain`), from which the labels come. See
``workloads/README.md`` for the format. Every error names the file, the key and what was
expected.
"""

from __future__ import annotations

import difflib
import numbers
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from matmech import workloads as wl
from matmech.io.domain import Domain, categories, integer_range, numeric_bins, time_bins
from matmech.io.labels import IntervalLabels, Labels, ProductLabels
from matmech.linalg.intervals import Intervals
from matmech.linalg.linop import LinOp
from matmech.strategies import hierarchical
from matmech import validate
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # names used only in annotations
    import os
    from collections.abc import Sequence

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class SpecError(ValueError):
    """A workload spec that cannot be read; the message names the file and the key.

    Parameters
    ----------
    message : str
        Names the file, the key and what was expected.

    Returns
    -------
    SpecError
        A ``ValueError`` subclass.

    Raises
    ------
    SpecError
        Raised by :func:`load_spec` for a spec that cannot be read.

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "bad.toml")
    >>> _ = open(path, "w").write("name = 3\\n")
    >>> try:
    ...     load_spec(path)
    ... except SpecError:
    ...     print("refused")
    refused
    """


@dataclass(frozen=True)
class Spec:
    """A parsed workload spec.

    A frozen record; :func:`load_spec` makes it.

    Parameters
    ----------
    name, description : str
        From the spec file.
    domain : tuple of int
        Attribute sizes.
    attributes : tuple
        Attribute names.
    workload : LinOp
        The queries.
    labels : tuple or Labels
        One label per query, from every part of the spec (:mod:`matmech.io.labels`): a
        tuple up to :data:`MAX_LABELS` of them, else a :class:`~matmech.io.labels.Labels`
        computing them on demand.
    source : str
        The file read.
    schema : Domain or None
        The declared attributes (``[[attributes]]``), when the spec has them.

    Examples
    --------
    >>> spec = load_spec("workloads/age_bands.toml")     # doctest: +SKIP
    >>> spec.workload.shape                               # doctest: +SKIP
    (9, 100)
    >>> Spec.__dataclass_params__.frozen
    True
    """

    name: str
    description: str
    domain: tuple
    attributes: tuple
    workload: LinOp
    labels: Sequence[str]
    source: str
    #: The declared :class:`~matmech.io.domain.Domain` (``[[attributes]]`` tables), or None
    #: for a spec with bare sizes (its data are integer codes).
    schema: Domain | None = None


ONE_D = {"identity": wl.identity, "total": wl.total, "prefix": wl.prefix, "all_range": wl.all_range}
#: Specs with at most this many rows get their labels as a tuple (more: computed on demand).
MAX_LABELS = 1_000_000
KINDS = (*ONE_D, "ranges", "product", "marginals", "tree")


#: Stands for a key that is absent from the table (TOML has no null).
MISSING = object()
TOP_KEYS = ("name", "description", "domain", "attributes", "queries")
#: Keys a query part (or a product factor, without ``weight``) may have, by kind.
KIND_KEYS = {
    "ranges": ("intervals", "labels"),
    "tree": ("edges",),
    "product": ("factors",),
    "marginals": ("k", "attrs"),
}


def _fail(source, key, expected, got):
    if got is MISSING:
        raise SpecError(f"{source}: {key}: expected {expected}, but the key is missing")
    raise SpecError(f"{source}: {key}: expected {expected}, got {got!r}")


def _check_keys(source, where, table, allowed):
    """Reject keys the format does not have (usually typos), naming the closest allowed one."""
    for k in table:
        if k not in allowed:
            close = difflib.get_close_matches(str(k), allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            key = f"{where}.{k}" if where else str(k)
            raise SpecError(f"{source}: {key}: unknown key{hint}; expected one of {list(allowed)}")


def _int_list(source, key, value):
    if (
        value is MISSING
        or not isinstance(value, list)
        or not value
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        _fail(source, key, "a non-empty list of integers", value)
    return value


#: Keys of an ``[[attributes]]`` table.
ATTRIBUTE_KEYS = (
    "name",
    "column",
    "range",
    "width",
    "lo",
    "hi",
    "edges",
    "bins",
    "categories",
    "other",
    "policy",
    "missing",
    "labels",
    "time",
    "start",
    "end",
    "time_zone",
)


def _attribute(source, key, table):
    """One ``[[attributes]]`` table → :class:`~matmech.io.domain.Attribute`."""
    if not isinstance(table, dict):
        _fail(
            source,
            key,
            "a table with name and one of range, edges, lo/hi/width, bins or categories",
            table,
        )
    _check_keys(source, key, table, ATTRIBUTE_KEYS)
    name = table.get("name", MISSING)
    if not isinstance(name, str) or not name:
        _fail(source, f"{key}.name", "a non-empty string", name)
    common = {k: table[k] for k in ("column", "policy", "missing", "other", "labels") if k in table}
    if "time" in table:
        extra = [
            k
            for k in ("range", "categories", "edges", "bins", "width", "lo", "hi", "labels")
            if k in table
        ]
        if extra or "start" not in table or "end" not in table:
            _fail(
                source,
                key,
                'time = "day" (or hour, week, month) with start and end (and time_zone) only',
                {k: table[k] for k in (*extra, "start", "end") if k in table} or MISSING,
            )
        try:
            return time_bins(
                name,
                table["start"],
                table["end"],
                table["time"],
                time_zone=table.get("time_zone"),
                **{k: v for k, v in common.items() if k != "labels"},
            )
        except (TypeError, ValueError) as exc:
            raise SpecError(f"{source}: {key}: {exc}") from None
    if "time_zone" in table:
        _fail(
            source, f"{key}.time_zone", 'time bins (time = "day", start, end)', table["time_zone"]
        )
    kinds = [k for k in ("range", "categories", "edges", "bins") if k in table]
    if not kinds and "width" in table:
        kinds = ["width"]
    if len(kinds) != 1:
        _fail(
            source,
            key,
            "exactly one of range = [lo, hi] (integers, optional width), edges, lo/hi/width, bins or "
            "categories",
            {k: table[k] for k in kinds} or MISSING,
        )
    kind = kinds[0]
    try:
        if kind == "range":
            r = table["range"]
            if not isinstance(r, list) or len(r) != 2:
                _fail(source, f"{key}.range", "[lo, hi], two integers (inclusive)", r)
            if "lo" in table or "hi" in table:
                _fail(
                    source,
                    key,
                    "range = [lo, hi] without lo/hi keys",
                    {k: table[k] for k in ("lo", "hi") if k in table},
                )
            return integer_range(name, r[0], r[1], width=table.get("width", 1), **common)
        if kind == "categories":
            extra = [k for k in ("width", "lo", "hi") if k in table]
            if extra:
                _fail(
                    source,
                    f"{key}.{extra[0]}",
                    "no numeric bounds with categories",
                    table[extra[0]],
                )
            return categories(name, table["categories"], **common)
        return numeric_bins(
            name,
            edges=table.get("edges"),
            lo=table.get("lo"),
            hi=table.get("hi"),
            width=table.get("width"),
            bins=table.get("bins"),
            **common,
        )
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{source}: {key}: {exc}") from None


def _schema(source, items):
    if not isinstance(items, list) or not items or not all(isinstance(t, dict) for t in items):
        _fail(
            source,
            "attributes",
            "a non-empty array of [[attributes]] tables or a list of names",
            items,
        )
    attrs = [_attribute(source, f"attributes[{i}]", t) for i, t in enumerate(items)]
    try:
        return Domain(tuple(attrs))
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{source}: attributes: {exc}") from None


def _interval_labeller(schema):
    """labels(lo, hi) of inclusive cell intervals (integer arrays): from a declared
    one-attribute domain, else "[lo, hi]"; vectorised (2·10⁶ labels in about a second)."""
    if schema is not None and len(schema) == 1:
        return schema.interval_labels
    return lambda lo, hi: [
        f"[{a}, {b}]" for a, b in zip(np.asarray(lo).tolist(), np.asarray(hi).tolist())
    ]


def _kind_of(part):
    return part if isinstance(part, str) else part.get("kind") if isinstance(part, dict) else None


def _pair_list(source, key, part, name, what):
    """``part[name]``, checked to be a non-empty list of two-element lists (``what``)."""
    pairs = part.get(name, MISSING)
    if not (
        isinstance(pairs, list)
        and pairs
        and all(isinstance(p, list) and len(p) == 2 for p in pairs)
    ):
        _fail(source, f"{key}.{name}", f"a non-empty list of {what}", pairs)
    return pairs


def _one_d(source, key, part, n, *, factor=False, label=None):
    """A 1-D workload over n cells from a kind name or a table (``factor``: inside a product,
    where a part has no weight of its own)."""
    if isinstance(part, str):
        part = {"kind": part}
    if not isinstance(part, dict):
        _fail(source, key, "a kind name or a table", part)
    kind = part.get("kind", MISSING)
    if kind in ONE_D or kind in ("ranges", "tree"):
        _check_keys(
            source, key, part, ("kind", *(() if factor else ("weight",)), *KIND_KEYS.get(kind, ()))
        )
    if kind in ONE_D:
        return ONE_D[kind](n), None
    if kind == "ranges":
        pairs = _pair_list(source, key, part, "intervals", "[lo, hi] pairs (inclusive, 0-based)")
        try:
            w = wl.ranges(n, pairs)
        except (TypeError, ValueError) as exc:
            raise SpecError(f"{source}: {key}.intervals: {exc}") from None
        labels = part.get("labels")
        if labels is not None and (not isinstance(labels, list) or len(labels) != len(pairs)):
            _fail(
                source, f"{key}.labels", f"a list of {len(pairs)} names, one per interval", labels
            )
        label = label or _interval_labeller(None)
        return w, tuple(labels) if labels else tuple(label(*w.bounds()))
    if kind == "tree":
        edges = _pair_list(source, key, part, "edges", "[parent, child] pairs")
        try:
            import networkx as nx

            tree = hierarchical(nx.DiGraph([tuple(e) for e in edges]))
        except (TypeError, ValueError) as exc:
            raise SpecError(f"{source}: {key}.edges: {exc}") from None
        if tree.n != n:
            _fail(
                source,
                f"{key}.edges",
                f"a tree with {n} leaves (the domain size)",
                f"a tree with {tree.n} leaves",
            )
        if tree.labels is None:  # a tree built from a graph labels its nodes
            raise AssertionError(f"{key}: the tree's node labels were not built")
        return tree, tuple(str(v) for v in tree.labels)
    allowed = [k for k in KINDS if k not in ("product", "marginals")]
    _fail(source, f"{key}.kind", f"one of {allowed} for one attribute", kind)


def parse_spec(data, *, source="<spec>"):
    """Build a :class:`Spec` from a parsed TOML mapping."""
    if not isinstance(data, dict):
        _fail(source, "(top level)", "a table", data)
    _check_keys(source, "", data, TOP_KEYS)
    name = data.get("name", Path(source).stem)
    description = data.get("description", "")
    for key, value in (("name", name), ("description", description)):
        if not isinstance(value, str):
            _fail(source, key, "a string", value)
    domain = data.get("domain", MISSING)
    schema = None
    if isinstance(data.get("attributes"), list) and any(
        isinstance(t, dict) for t in data["attributes"]
    ):
        schema = _schema(source, data["attributes"])  # declared domains: the sizes follow from them
        if domain is MISSING:
            domain = list(schema.sizes)
    if isinstance(domain, int) and not isinstance(domain, bool):
        domain = [domain]
    domain = _int_list(source, "domain", domain)
    if any(d <= 0 for d in domain):
        _fail(source, "domain", "positive attribute sizes", domain)
    if schema is not None:
        if tuple(domain) != schema.sizes:
            _fail(
                source,
                "domain",
                f"the sizes {list(schema.sizes)} of the declared [[attributes]] (or no domain key)",
                domain,
            )
        attributes = list(schema.names)
    else:
        attributes = data.get("attributes", [f"a{i}" for i in range(len(domain))])
    if (
        not isinstance(attributes, list)
        or len(attributes) != len(domain)
        or not all(isinstance(a, str) for a in attributes)
    ):
        _fail(
            source,
            "attributes",
            f"a list of {len(domain)} names (strings), one per domain attribute",
            attributes,
        )
    label = _interval_labeller(schema)

    def cells(i):  # the cells of attribute i: "sex=F", "age 18-24"; "a1=3" undeclared
        if schema is not None:
            return [schema.attributes[i].cell_label(c) for c in range(domain[i])]
        return [f"{attributes[i]}={c}" for c in range(domain[i])]

    def spans(i):  # labels(lo, hi) of attribute i's intervals inside a product
        name, n = attributes[i], domain[i]

        def labels(lo, hi):
            lo, hi = np.asarray(lo).tolist(), np.asarray(hi).tolist()
            own = schema.attributes[i].span_labels(lo, hi) if schema is not None else None
            return [
                f"{name} all"  # the whole attribute ("total" alone would name the product)
                if (a, b) == (0, n - 1) and n > 1
                else own[k]
                if own is not None
                else f"{name}={a}"
                if a == b
                else f"{name} [{a}, {b}]"
                for k, (a, b) in enumerate(zip(lo, hi))
            ]

        return labels

    parts = data.get("queries", MISSING)
    if not isinstance(parts, list) or not parts or not all(isinstance(p, dict) for p in parts):
        _fail(source, "queries", "a non-empty array of tables ([[queries]])", parts)
    blocks, weights, labels = [], [], []
    for i, part in enumerate(parts):
        key = f"queries[{i}]"
        kind = part.get("kind", MISSING)
        w: LinOp
        lab: Sequence[str] | None
        if kind in ("product", "marginals"):
            _check_keys(source, key, part, ("kind", "weight", *KIND_KEYS[kind]))
        weight = part.get("weight", 1.0)
        if (
            not isinstance(weight, numbers.Real)
            or isinstance(weight, bool)
            or not float(weight) > 0
        ):
            _fail(source, f"{key}.weight", "a positive number", weight)
        if kind == "marginals":
            if ("k" in part) == ("attrs" in part):
                _fail(
                    source,
                    key,
                    "exactly one of k (all k-way marginals) or attrs (a list of attribute subsets)",
                    {k: part[k] for k in ("k", "attrs") if k in part} or MISSING,
                )
            which = "k" if "k" in part else "attrs"
            try:
                w = wl.marginals(tuple(domain), part.get("k"), attrs=part.get("attrs"))
            except (TypeError, ValueError) as exc:
                raise SpecError(f"{source}: {key}.{which}: {exc}") from None
            lab = Labels([ProductLabels([cells(i) for i in s]) for s in w.subsets])
        elif kind == "product":
            factors = part.get("factors", MISSING)
            if not isinstance(factors, list) or len(factors) != len(domain):
                _fail(
                    source,
                    f"{key}.factors",
                    f"a list of {len(domain)} per-attribute workloads",
                    factors,
                )
            built = [
                _one_d(source, f"{key}.factors[{j}]", f, d, factor=True, label=spans(j))
                for j, (f, d) in enumerate(zip(factors, domain))
            ]
            w = wl.kron(*[b for b, _ in built])
            lab = ProductLabels(
                [
                    flab if flab is not None else spans(j)(*b.bounds())
                    for j, ((b, flab), f) in enumerate(zip(built, factors))
                    if _kind_of(f) != "total"  # a total factor adds no word to the label
                ]
            )
        elif kind in KINDS:
            if len(domain) != 1:
                _fail(
                    source,
                    f"{key}.kind",
                    f"'product' or 'marginals' for a {len(domain)}-attribute domain",
                    kind,
                )
            w, lab = _one_d(source, key, part, domain[0], label=label)
        else:
            _fail(source, f"{key}.kind", f"one of {list(KINDS)}", kind)
        if lab is None and isinstance(w, Intervals):
            lo, hi = w.bounds()
            lab = IntervalLabels(lo, hi, label)
        if lab is None or len(lab) != w.shape[0]:  # every kind above labels its rows
            raise AssertionError(f"{key}: labels for {w.shape[0]} rows were not built")
        blocks.append(w)
        weights.append(float(weight))
        labels.append(lab)
    workload = (
        blocks[0] if len(blocks) == 1 and weights[0] == 1.0 else wl.stack(*blocks, weights=weights)
    )
    all_labels: Sequence[str] = Labels(labels)  # computed on demand; a tuple when there are few
    if len(all_labels) <= MAX_LABELS:
        all_labels = tuple(all_labels)
    return Spec(
        str(name),
        str(description),
        tuple(domain),
        tuple(attributes),
        workload,
        all_labels,
        source,
        schema,
    )


def load_spec(path: str | os.PathLike) -> Spec:
    """Read a workload spec file (TOML).

    Parameters
    ----------
    path : str or os.PathLike
        A TOML workload spec (format: ``workloads/README.md``).

    Returns
    -------
    Spec
        The parsed spec.

    Raises
    ------
    SpecError
        A spec that cannot be read (naming the file, the key and what was expected).
    OSError
        The file cannot be opened.

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "p.toml")
    >>> _ = open(path, "w").write('name = "p"\\ndomain = [8]\\n[[queries]]\\nkind = "prefix"\\n')
    >>> load_spec(path).workload.shape
    (8, 8)
    """
    path = validate.path(path)
    return parse_spec(read_toml(path, "spec"), source=str(path))


def read_toml(path: str | os.PathLike, what: str = "spec") -> dict:
    """The parsed TOML file at ``path``; :class:`SpecError` naming the file and the
    problem (missing, a directory, unreadable, not UTF-8 text, not TOML), never Python's
    own text. ``what`` names the file's role (``"spec"``, ``"stream spec"``)."""
    file = validate.path(path)  # its own name: ``path`` keeps its declared type (mypy)
    if file.is_dir():
        raise SpecError(f"{file}: is a directory, not a {what} file")
    if not file.exists():
        raise SpecError(f"{file}: no such {what} file")
    try:
        text = file.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{file}: not a {what} file (not UTF-8 text; a {what} is TOML)") from None
    except OSError as exc:
        raise SpecError(f"{file}: cannot read the {what} file ({exc.strerror})") from None
    try:
        return tomllib.loads(text.removeprefix("\ufeff"))
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{file}: not valid TOML: {exc}") from None
