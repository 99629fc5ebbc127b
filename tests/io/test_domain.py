"""Declared domains: construction checks, sizes, cell order, labels and the spec tables."""

import itertools

import numpy as np
import pytest

from matmech.io.domain import Attribute, Domain, categories, integer_range, numeric_bins
from matmech.io.specs import SpecError, parse_spec


def people():
    return Domain(
        (
            integer_range("age", 0, 99, width=10, policy="clip", missing="drop"),
            categories("sex", ["F", "M"], other="other", policy="other"),
            numeric_bins("income", edges=[0, 20000, 30000, 1e6], policy="clip", missing="drop"),
            categories("state", ["CA", "NY", "TX"], policy="drop"),
        )
    )


def test_sizes_and_row_major_cells_match_numpy():
    d = people()
    assert d.sizes == (10, 3, 3, 3) and d.n == 270 and d.names == ("age", "sex", "income", "state")
    for cell in (0, 1, 37, 269):
        assert d.unravel(cell) == tuple(int(c) for c in np.unravel_index(cell, d.sizes))
    assert d.unravel(5, (1, 3)) == tuple(int(c) for c in np.unravel_index(5, (3, 3)))
    with pytest.raises(IndexError, match="outside 0..269"):
        d.unravel(270)


def test_range_and_bins_sizes():
    assert integer_range("a", 0, 99).size == 100
    assert integer_range("a", 0, 99, width=7).size == 15  # the last cell holds 98-99
    assert integer_range("a", 18, 24, other="?", policy="other").size == 8
    b = numeric_bins("x", lo=0, hi=1, width=0.3)
    assert b.size == 4 and b.bins[-1] == (pytest.approx(0.9), 1.0)
    assert numeric_bins("x", bins=[(0, 1), (2, 3)]).size == 2


def test_labels():
    d = people()
    age, sex, income, state = d.attributes
    assert (
        age.cell_label(1) == "age 10-19" and integer_range("age", 0, 99).cell_label(18) == "age=18"
    )
    assert integer_range("age", 0, 99).span_label(18, 24) == "age 18-24"
    assert age.span_label(1, 2) == "age 10-29"
    assert (
        income.cell_label(1) == "income [20k, 30k)" and income.span_label(0, 1) == "income [0, 30k)"
    )
    assert income.cell_label(2) == "income [30k, 1M)"
    assert sex.cell_label(0) == "sex=F" and sex.cell_label(2) == "sex=other"
    assert state.span_label(0, 1) == "state in {CA, NY}"
    assert numeric_bins("x", edges=[0, 0.5, 1.25]).cell_label(1) == "x [0.5, 1.25)"
    assert numeric_bins("w", edges=[0, 1500, 2500000]).cell_label(1) == "w [1.5k, 2.5M)"
    assert (
        integer_range("age", 0, 3, labels=["baby", "one", "two", "three"]).cell_label(2)
        == "age=two"
    )
    # every marginal cell label, against an independent enumeration (itertools.product is row-major)
    labels = d.marginal_labels((1, 3))
    expected = [
        f"sex={s}, state={t}" for s, t in itertools.product(["F", "M", "other"], ["CA", "NY", "TX"])
    ]
    assert labels == expected and "sex=F, state=CA" in labels
    assert d.marginal_labels(()) == ["total"]
    assert d.cell_label(0) == "age 0-9, sex=F, income [0, 20k), state=CA"
    one = Domain((integer_range("age", 0, 99),))
    assert one.interval_label(18, 24) == "age 18-24" and one.interval_label(0, 99) == "total"
    with pytest.raises(ValueError, match="one-attribute domain"):
        d.interval_label(0, 1)


@pytest.mark.parametrize(
    "make, exc, text",
    [
        (lambda: integer_range("a", 5, 1), ValueError, "need lo <= hi"),
        (lambda: integer_range("a", 0, 9, width=0), ValueError, "width must be a positive integer"),
        (lambda: integer_range("a", 0.5, 9), TypeError, "lo must be an integer"),
        (lambda: integer_range("a", 0, 9, policy="clamp"), ValueError, "policy must be one of"),
        (lambda: integer_range("a", 0, 9, missing="clip"), ValueError, "missing must be one of"),
        (lambda: integer_range("a", 0, 9, policy="other"), ValueError, "needs an other cell"),
        (lambda: categories("s", ["F", "F"]), ValueError, "distinct"),
        (lambda: categories("s", "FM"), TypeError, "list of strings"),
        (lambda: categories("s", ["F"], policy="clip"), ValueError, "no ends to clip"),
        (lambda: numeric_bins("x", edges=[0, 0]), ValueError, "strictly increasing"),
        (lambda: numeric_bins("x", edges=[0, 1], width=1), ValueError, "exactly one of"),
        (lambda: numeric_bins("x", width=1), ValueError, "width needs lo and hi"),
        (lambda: numeric_bins("x", bins=[(0, 2), (1, 3)]), ValueError, "non-overlapping"),
        (lambda: numeric_bins("x", bins=[(0, 1), (2, 3)], policy="clip"), ValueError, "contiguous"),
        (lambda: numeric_bins("x", edges=[0, float("inf")]), TypeError, "finite"),
        (lambda: integer_range("a", 0, 2, labels=["x"]), ValueError, "3 strings"),
        (
            lambda: Domain((integer_range("a", 0, 1), integer_range("a", 0, 1))),
            ValueError,
            "distinct",
        ),
        (lambda: Domain(()), TypeError, "non-empty"),
        (lambda: integer_range("a", 0, 2**40), ValueError, "at most"),
    ],
)
def test_bad_declarations_are_refused(make, exc, text):
    with pytest.raises(exc, match=text.replace("(", r"\(")):
        make()


def test_a_range_attribute_without_its_bounds_is_refused_by_name():
    # Attribute read lo/hi/width with int() and failed with "int() argument must be ... not
    # 'NoneType'" when built directly without them
    with pytest.raises(ValueError, match="attribute 'age': a range needs lo, hi and width"):
        Attribute(name="age", kind="range", column="age", policy="error", missing="error", lo=0)
    a = Attribute(
        name="age", kind="range", column="age", policy="error", missing="error", lo=0, hi=9, width=5
    )
    assert a.size == 2 and a.value_label(1) == "5-9" and a.to_dict()["width"] == 5


def test_spec_attribute_tables_round_trip_and_label_queries():
    d = people()
    spec = parse_spec(
        {"attributes": d.to_dicts(), "queries": [{"kind": "marginals", "attrs": [[1, 3], []]}]},
        source="p.toml",
    )
    assert spec.schema == d and spec.domain == d.sizes and spec.attributes == d.names
    assert spec.labels == (*d.marginal_labels((1, 3)), "total")
    spec = parse_spec(
        {
            "attributes": [{"name": "age", "range": [0, 99], "policy": "clip", "missing": "drop"}],
            "queries": [{"kind": "ranges", "intervals": [[18, 24], [25, 99]]}, {"kind": "total"}],
        }
    )
    assert spec.labels == ("age 18-24", "age 25-99", "total") and spec.domain == (100,)
    spec = parse_spec(
        {
            "attributes": [
                {"name": "inc", "lo": 0, "hi": 100000, "width": 10000, "column": "income"}
            ],
            "queries": [{"kind": "identity"}],
        }
    )
    assert spec.schema.attributes[0].column == "income" and spec.labels[2] == "inc [20k, 30k)"
    # a spec with bare sizes is unchanged
    old = parse_spec(
        {
            "domain": [4],
            "attributes": ["age"],
            "queries": [{"kind": "ranges", "intervals": [[0, 1]]}],
        }
    )
    assert old.schema is None and old.labels == ("[0, 1]",)


@pytest.mark.parametrize(
    "attrs, text",
    [
        (
            [{"name": "a", "range": [0, 9], "edges": [1, 2]}],
            "attributes[0]: expected exactly one of",
        ),
        (
            [{"name": "a", "range": [0, 9], "polcy": "clip"}],
            "attributes[0].polcy: unknown key (did you mean 'policy'?)",
        ),
        (
            [{"name": "a", "categories": ["x"], "policy": "clip"}],
            "attributes[0]: attribute 'a': categories have no ends",
        ),
        ([{"range": [0, 9]}], "attributes[0].name: expected a non-empty string"),
        ([{"name": "a", "range": [0]}], "attributes[0].range: expected [lo, hi]"),
        (
            [{"name": "a", "range": [0, 9]}, {"name": "a", "range": [0, 9]}],
            "attributes: attribute names must be distinct",
        ),
    ],
)
def test_spec_attribute_errors_name_the_key(attrs, text):
    with pytest.raises(SpecError) as info:
        parse_spec({"attributes": attrs, "queries": [{"kind": "total"}]}, source="s.toml")
    assert str(info.value).startswith("s.toml: ") and text in str(info.value)


def test_spec_domain_must_match_the_declaration():
    with pytest.raises(SpecError, match=r"domain: expected the sizes \[10\]"):
        parse_spec(
            {
                "domain": [5],
                "attributes": [{"name": "a", "range": [0, 9]}],
                "queries": [{"kind": "total"}],
            }
        )
    spec = parse_spec(
        {
            "domain": [10],
            "attributes": [{"name": "a", "range": [0, 9]}],
            "queries": [{"kind": "total"}],
        }
    )
    assert spec.domain == (10,)


def test_regular_bins_are_lazy_and_equal_the_materialised_ones():
    """issue 23: numeric_bins(lo, hi, width) built one tuple per bin (> 60 s at 3·10⁷, MemoryError at 10⁹)."""
    import sys

    from matmech.io.domain import numeric_bins
    from matmech.io.attribute import RegularBins

    a = numeric_bins("x", lo=-1.5, hi=10.0, width=0.75)
    want = [(-1.5 + i * 0.75, min(-1.5 + (i + 1) * 0.75, 10.0)) for i in range(16)]
    assert isinstance(a.bins, RegularBins) and len(a.bins) == 16 and list(a.bins) == want
    assert a.bins[-1] == (9.75, 10.0) and a.bins[-16] == want[0]
    with pytest.raises(IndexError):
        a.bins[16]
    with pytest.raises(TypeError, match="one at a time"):
        a.bins[1:]
    assert a == numeric_bins("x", lo=-1.5, hi=10.0, width=0.75) and hash(a) == hash(
        numeric_bins("x", lo=-1.5, hi=10.0, width=0.75)
    )
    assert a != numeric_bins("x", lo=-1.5, hi=10.0, width=0.5)
    huge = numeric_bins(
        "t", lo=0, hi=1e9, width=1, policy="clip"
    )  # 10⁹ bins: declared in O(1) memory
    assert huge.size == 10**9 and sys.getsizeof(huge.bins) < 200
    assert huge.bins[123_456_789] == (123456789.0, 123456790.0)
    assert huge.span_label(0, 9) == "t [0, 10)" and huge.to_dict()["width"] == 1.0
    with pytest.raises(ValueError, match=r"would need 16\.0 GiB\); at most"):
        numeric_bins("t", lo=0, hi=2**31 + 1, width=1)


def test_span_labels_equal_span_label_for_every_kind():
    """The vectorised labels (issue 23: 2·10⁶ labelled intervals) are the scalar ones, string for string."""
    import numpy as np

    from matmech.io.domain import categories, integer_range, numeric_bins

    attrs = [
        integer_range("dep_delay", -60, 40),
        integer_range("dep_delay", -60, 40, width=7),
        integer_range("age", 0, 99, width=5, other="older", policy="other"),
        numeric_bins("income", edges=[0, 10_000, 20_000, 50_000, 1e6]),
        numeric_bins("t", lo=-2.5, hi=10.0, width=0.5),
        categories("sex", ["F", "M", "X"]),
        integer_range("a", 1, 4, labels=["one", "two", "three", "four"]),
        integer_range("one", 3, 3),
    ]
    rng = np.random.default_rng(1)
    for a in attrs:
        f = rng.integers(0, a.size, 300)
        l = np.minimum(f + rng.integers(0, 4, 300), a.size - 1)
        f = np.concatenate([f, [0, 0, a.size - 1]])
        l = np.concatenate([l, [a.size - 1, 0, a.size - 1]])
        assert a.span_labels(f, l) == [a.span_label(int(x), int(y)) for x, y in zip(f, l)], a.name
    with pytest.raises(IndexError):
        attrs[0].span_labels(np.array([3]), np.array([2]))
    with pytest.raises(TypeError):
        attrs[0].span_labels(np.array([0.5]), np.array([2.0]))


def test_negative_ranges_have_readable_labels():
    from matmech.io.domain import Domain, integer_range

    a = integer_range("dep_delay", -60, 40, width=2)
    assert a.cell_label(0) == "dep_delay -60 to -59"  # was "dep_delay -60--59"
    assert a.cell_label(31) == "dep_delay 2-3" and a.cell_label(29) == "dep_delay -2 to -1"
    assert a.span_label(0, 1) == "dep_delay -60 to -57"
    b = integer_range("x", -3, 3)
    assert b.cell_label(0) == "x=-3" and b.span_label(1, 5) == "x -2 to 2"
    assert Domain((a,)).interval_labels([0, 30], [1, 30]) == [
        "dep_delay -60 to -57",
        "dep_delay 0-1",
    ]
