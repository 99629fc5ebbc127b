"""Labels survive every spec query kind (issue 31, item 5: one ``product`` part replaced
every label of the spec with ``q0 … q1505``). Each label is checked against the row it
names, read off the dense workload (a second method), and the lazy labels of a large spec
against the materialised ones."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from matmech.io.labels import IntervalLabels, Labels, ProductLabels, label_bytes
from matmech.io.specs import MAX_LABELS, load_spec, parse_spec

PARTS = {
    "identity": {"kind": "product", "factors": ["identity", "total"]},
    "total": {"kind": "product", "factors": ["total", "total"]},
    "prefix": {"kind": "product", "factors": ["prefix", "identity"]},
    "all_range": {"kind": "product", "factors": ["all_range", "prefix"]},
    "ranges": {
        "kind": "product",
        "factors": [{"kind": "ranges", "intervals": [[0, 1], [1, 3]]}, "identity"],
    },
    "marginals": {"kind": "marginals", "k": 1},
    "marginals2": {"kind": "marginals", "attrs": [[0, 1], []]},
}


def _cells_of(label, names, sizes):
    """The set of cells (x, y) a bare-domain label names: "x=2, y [0, 1]", "x all", "total"."""
    spans = {n: (0, s - 1) for n, s in zip(names, sizes)}
    if label != "total":
        word = r"(\w+)(?:=(\d+)| \[(\d+), (\d+)\]|( all))"
        assert re.fullmatch(f"{word}(, {word})*", label), f"unreadable label {label!r}"
        for m in re.finditer(word, label):
            name, one, lo, hi, whole = m.groups()
            i = names.index(name)
            spans[name] = (
                (int(one), int(one)) if one else (int(lo), int(hi)) if lo else (0, sizes[i] - 1)
            )
    ranges = [range(spans[n][0], spans[n][1] + 1) for n in names]
    return set(itertools.product(*ranges))


@pytest.mark.parametrize("kinds", [[k] for k in PARTS] + [list(PARTS)])
def test_every_label_names_the_cells_its_row_sums(kinds):
    """A bare domain (x: 4 values, y: 3): each row of the dense workload sums the cells its
    label names, for every kind alone and all of them in one spec."""
    names, sizes = ["x", "y"], [4, 3]
    spec = parse_spec(
        {"domain": sizes, "attributes": names, "queries": [PARTS[k] for k in kinds]},
        source="t.toml",
    )
    A = spec.workload.matrix() if hasattr(spec.workload, "matrix") else None
    A = np.asarray(spec.workload @ np.eye(12)) if A is None else np.asarray(A)
    assert len(spec.labels) == A.shape[0] and not any(re.fullmatch(r"q\d+", q) for q in spec.labels)
    for row, label in zip(A, spec.labels):
        got = {divmod(int(c), 3) for c in np.flatnonzero(row)}
        assert got == _cells_of(label, names, sizes), label
        assert np.all(row[row != 0] == 1.0)


def test_labels_of_declared_attributes_in_a_product_and_beside_it(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text(
        """
[[attributes]]
name = "age"
range = [0, 99]
width = 20
[[attributes]]
name = "sex"
categories = ["F", "M"]

[[queries]]
kind = "marginals"
attrs = [[1], []]
[[queries]]
kind = "product"
factors = ["prefix", "identity"]
[[queries]]
kind = "product"
factors = [{kind = "ranges", intervals = [[0, 1], [2, 4]], labels = ["young", "old"]}, "total"]
"""
    )
    spec = load_spec(p)
    assert spec.labels == (
        "sex=F",
        "sex=M",
        "total",
        *(f"age 0-{19 + 20 * k}, sex={s}" for k in range(4) for s in "FM"),
        "age all, sex=F",
        "age all, sex=M",
        "young",
        "old",
    )


def test_a_large_spec_has_lazy_labels_equal_to_the_materialised_ones():
    spec = parse_spec(
        {
            "domain": [10] * 7,
            "queries": [{"kind": "marginals", "k": 7}, {"kind": "marginals", "k": 1}],
        },
        source="big.toml",
    )
    m = spec.workload.shape[0]
    assert m > MAX_LABELS and isinstance(spec.labels, Labels) and len(spec.labels) == m
    cell = 1234567
    digits = [int(c) for c in f"{cell:07d}"]
    assert spec.labels[cell] == ", ".join(f"a{i}={v}" for i, v in enumerate(digits))
    assert spec.labels[-1] == "a6=9" and spec.labels[10**7] == "a0=0"
    assert spec.labels[10**7 - 2 : 10**7 + 1] == (
        "a0=9, a1=9, a2=9, a3=9, a4=9, a5=9, a6=8",
        "a0=9, a1=9, a2=9, a3=9, a4=9, a5=9, a6=9",
        "a0=0",
    )


def test_label_bytes_counts_what_the_labels_hold_without_building_them():
    blocks = [
        ProductLabels([["é=1", 'q"2'], ["a", "bb", "ccc"]]),
        ("total", "x"),
        IntervalLabels([0, 1], [2, 1], lambda lo, hi: [f"[{a}, {b}]" for a, b in zip(lo, hi)]),
        ProductLabels([]),
    ]
    lab = Labels(blocks)
    text = list(lab)
    assert text[:3] == ["é=1, a", "é=1, bb", "é=1, ccc"] and text[-1] == "total" and len(text) == 11
    assert label_bytes(lab) == (sum(len(t.encode()) for t in text), sum(t.count('"') for t in text))
    assert lab[2:9:3] == tuple(text[2:9:3]) and lab[-3] == text[-3]
    with pytest.raises(IndexError):
        lab[11]
