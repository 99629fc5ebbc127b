"""The data and answer files of ``matmech release``: CSV columns read as integer codes, the
answer table's labels and post-processing, and the atomic CSV write of the answers."""

from __future__ import annotations

import csv

import numpy as np


def read_columns(path, columns, *, encoding="utf-8", delimiter=None):
    """The named CSV columns as float arrays; errors name the file and column, never a line
    (a record's position) or a value.

    A real CSV parser: a UTF-8 byte-order mark is skipped, ``encoding`` is honoured (a
    decoding error names the file and the encoding, never the bytes), and the delimiter
    is sniffed from the header line unless given.
    """
    from matmech.sources.files import csv_header, open_text
    from matmech.sources.files import hidden_header

    header, delimiter = csv_header(path, encoding=encoding, delimiter=delimiter)
    enc = "utf-8-sig" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding
    try:
        with open_text(path, enc) as handle:
            handle.readline()  # the header, read above
            index = []
            for c in columns:
                if c not in header:
                    raise ValueError(
                        f"{path}: no column {c!r} in the header line ({hidden_header(len(header))})"
                    )
                index.append(header.index(c))
            values: list[list[float]] = [[] for _ in columns]
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


def cell_codes(path, columns, arrays, domain):
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


def postprocess(rows, *, decimals, nonnegative):
    """Documented post-processing of published answers (free under DP, but biased): clip the
    answer and its interval at 0 (``nonnegative``), then round them to ``decimals``, row by
    row (``rows``: any iterable of dicts; a generator). The std column stays that of the
    unprocessed estimate."""
    if decimals is None and not nonnegative:
        yield from rows
        return
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
        yield r


#: The CSV columns of the answers, and with a selection.
FIELDS = ("query", "answer", "std", "lower", "upper", "interval", "coverage")
SELECTION_FIELDS = ("selected", "status")
#: Bytes a row of the answers file takes at most besides its label: five numbers as
#: ``repr(float)`` (at most 24 characters, e.g. ``-1.2345678901234567e-308``), the interval
#: method (at most 32), separators and the line end; with a selection, ``false`` and the
#: status (at most 64).
ROW_BYTES, SELECTION_BYTES = 5 * 24 + 32 + 8 + 2, 5 + 64 + 2


def answers_bytes(labels, *, selection) -> int:
    """An upper bound on the answers file's size, from the public labels alone (before
    any spend): every label quoted, every number at its longest."""
    from matmech.io.labels import label_bytes

    text, quotes = label_bytes(labels)
    m = len(labels)
    per = ROW_BYTES + (SELECTION_BYTES if selection else 0)
    header = len(",".join(FIELDS + (SELECTION_FIELDS if selection else ()))) + 2
    return header + text + quotes + m * (2 + per)


def write_answers(path, rows, *, selection, overwrite=True):
    """One CSV row per query: query, answer, std, the 95% interval (and selected/status);
    ``rows`` any iterable of row dicts, written as they come.

    ``path``: a file name, or the ``(handle, path)`` pair from ``_check_writable(...,
    open_it=True)``: the rows go to that temporary file (whose space may have been reserved:
    it is cut to what was written), which is then renamed onto path (without
    ``overwrite``, linked: a file created there meanwhile is never replaced).
    """
    import os

    fields = list(FIELDS) + (list(SELECTION_FIELDS) if selection else [])
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
        f.truncate()  # the space reserved beyond the rows (flushes first)
    if final is not None:  # the temporary file was created 0600: give it the usual permissions
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(handle.name, 0o666 & ~mask)
        if overwrite:
            os.replace(handle.name, final)
        else:
            os.link(handle.name, final)  # FileExistsError if a file appeared at final
            os.unlink(handle.name)


def print_json(out: dict, rows, *, key: str = "queries", write=None) -> None:
    """Print ``out`` as ``json.dumps(out, indent=2)`` would, with ``out[key]`` (a
    placeholder) replaced by the list of ``rows``, written one row at a time."""
    import json
    import sys

    write = sys.stdout.write if write is None else write
    mark = "\x00rows\x00"
    head, tail = json.dumps({**out, key: mark}, indent=2).split(json.dumps(mark), 1)
    write(head)
    first = True
    for r in rows:
        item = "\n".join("    " + line for line in json.dumps(r, indent=2).splitlines())
        write(("[\n" if first else ",\n") + item)
        first = False
    write("[]" if first else "\n  ]")
    write(tail + "\n")
