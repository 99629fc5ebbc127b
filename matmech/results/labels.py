"""Row labels of a factored release (issue 14: ``release_table`` labels such as
``sex=F, age 18-24``), built from the workload's Kronecker terms, never from the domain.

Row order is that of :func:`matmech.release.release_factored`: term by term, and
within a term row-major over its non-total factors (last attribute fastest), as
``⊗ᵢ Aᵢ`` orders its rows. An identity factor on attribute i labels its row c with the
attribute's cell label (a :class:`matmech.io.domain.Domain` gives ``sex=F``, ``age 18-24``;
without one it is ``name=c``, names defaulting to ``a0``, ``a1``, …); any other non-total
factor (prefix, range, custom) labels its row r as ``name#r``; a term of totals only is
``total``. Data-independent.
"""

from __future__ import annotations

import itertools

from matmech.linalg.terms import as_terms
from matmech.io.domain import Domain
from matmech.validate import texts


#: Largest number of labels built at once (strings cost ~100 bytes each).
MAX_LABELS = 50_000_000


def _names(domain, names, d):
    if isinstance(domain, Domain):
        if len(domain) != d:
            raise ValueError(f"the Domain has {len(domain)} attributes but the workload has {d}")
        return list(domain.names)
    if names is None:
        return [f"a{i}" for i in range(d)]
    names = list(texts(names, "names"))
    if len(names) != d:
        raise ValueError(f"expected {d} attribute names, got {len(names)}")
    return names


def release_labels(W, domain=None, *, names=None):
    """One label per row of the workload W of a factored release (a Kron, a weighted stack of
    Krons, or a :class:`~matmech.linalg.terms.MarginalWorkload`), for
    ``release_table(rel, labels=release_labels(W, domain))``.

    ``domain``: a :class:`matmech.io.domain.Domain` whose attribute sizes match W's (its
    cell labels are used) or None (``names``, default ``a0``, ``a1``, …, with ``=code``).
    """
    t = as_terms(W, name="W")
    d = len(t.domain)
    if isinstance(domain, Domain) and domain.sizes != t.domain:
        raise ValueError(
            f"the Domain's attribute sizes {domain.sizes} differ from the workload's {t.domain}"
        )
    if domain is not None and not isinstance(domain, Domain):
        raise TypeError(
            f"domain must be a matmech.io.domain.Domain or None, got {type(domain).__name__}"
        )
    rows = t.rows
    if rows > MAX_LABELS:
        raise ValueError(
            f"the workload has {rows:,} rows; at most {MAX_LABELS:,} labels are built at once"
        )
    names = _names(domain, names, d)
    out = []
    for fs, ks in zip(t.factors, t.kinds):
        parts = []
        for i, k in enumerate(ks):
            if k == "T":
                continue
            m = t.domain[i] if fs is None or k == "I" else int(fs[i].shape[0])
            if k == "I":
                cell = (
                    domain.attributes[i].cell_label
                    if domain is not None
                    else (lambda c, n=names[i]: f"{n}={c}")
                )
                parts.append([cell(c) for c in range(m)])
            else:
                parts.append([f"{names[i]}#{r}" for r in range(m)])
        if not parts:
            out.append("total")
            continue
        out.extend(", ".join(p) for p in itertools.product(*parts))
    if len(out) != rows:  # a term's row count disagrees with its factors: never silently
        raise AssertionError(f"built {len(out)} labels for {rows} rows")
    return out
