"""The data and answer files of ``matmech release``: CSV columns read as integer codes, the
answer table's labels and post-processing, and the atomic CSV write of the answers."""

from __future__ import annotations

import csv

import numpy as np

__all__ = ["_codes", "_marginal_labels", "_postprocess", "_read_columns", "_write_answers"]


def _read_columns(path, columns, *, encoding="utf-8", delimiter=None):
    """The named CSV columns as float arrays; errors name the file and column, never a line
    (a record's position) or a value.

    A real CSV parser: a UTF-8 byte-order mark is skipped, ``encoding`` is honoured (a
    decoding error names the file and the encoding, never the bytes), and the delimiter
    is sniffed from the header line unless given.
    """
    from matmech.io.engines import csv_header, open_text
    from matmech.io.sources import _hidden_header

    header, delimiter = csv_header(path, encoding=encoding, delimiter=delimiter)
    enc = "utf-8-sig" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding
    try:
        with open_text(path, enc) as handle:
            handle.readline()  # the header, read above
            index = []
            for c in columns:
                if c not in header:
                    raise ValueError(
                        f"{path}: no column {c!r} in the header line ({_hidden_header(len(header))})"
                    )
                index.append(header.index(c))
            values = [[] for _ in columns]
            for row in csv.reader(handle, delimiter=delimiter):
                if not row:
                    continue
                for k, (c, i) in enumerate(zip(columns, index)):
                    cell = row[i].strip() if i < len(row) else ""
                    try:
                        v = float(cell)
                    except ValueError:
                        raise ValueError(
                            f"{path}: column {c!r}: an entry is not a number"
                        ) from None
                    values[k].append(v)
    except UnicodeDecodeError:
        raise ValueError(
            f"{path}: not valid {encoding} text; give the file's encoding with --encoding (e.g. latin-1)"
        ) from None
    # No refusal of an empty file: zero records and one record are neighbours (add/remove),
    # so releasing one and refusing the other would tell them apart.
    return [np.asarray(v) for v in values]


def _codes(path, columns, arrays, domain):
    """Integer cell codes per attribute, each checked against the spec's domain."""
    out = []
    for c, a, n in zip(columns, arrays, domain):
        if np.any(~np.isfinite(a) | (a != np.round(a)) | (a < 0) | (a >= n)):
            raise ValueError(
                f"{path}: column {c!r}: a value is outside the spec's domain "
                f"(expected an integer code 0..{n - 1})"
            )
        out.append(a.astype(np.int64))
    return out


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
