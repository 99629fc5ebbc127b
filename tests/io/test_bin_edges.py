"""Bins decided against the edges their labels show, alike on every engine (issue 31).

floor((v - lo) / width) in floating point put 0.30 into [0.2, 0.3) (0.3 / 0.1 =
2.9999999999999996). Here a value is put on every edge, on the float just below it and on the
one just above, and every engine's bin must be the one exact arithmetic on the floats gives
(fractions.Fraction) against the edges the labels show; those edges must be the declared
lo + i·width rounded once to a float."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from edge_values import (
    ENGINE_SOURCES,
    around,
    engine_codes,
    exact_codes,
    label_bins,
    make_source,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from matmech.io.attribute import RegularBins, declared_fraction
from matmech.io.domain import Domain, numeric_bins
from matmech.sources.engines import histogram

#: Widths as a user means them: typed decimals and computed fractions.
WIDTHS = [Fraction(1, 10), Fraction(1, 100), Fraction(1, 3), Fraction(5, 2), Fraction(1, 1000)]
WIDTHS += [Fraction(7, 3), Fraction(1, 7), Fraction(3, 10), Fraction(1, 10**5), Fraction(3, 4)]


def expected_bins(lo: Fraction, hi: float, w: Fraction) -> list:
    """[e_i, e_{i+1}) with e_i = lo + i·w rounded once, for every e_i below hi; the last ends at hi."""
    starts = []
    while float(lo + len(starts) * w) < hi:
        starts.append(float(lo + len(starts) * w))
    return list(zip(starts, [*starts[1:], hi]))


def regular(name, lo, hi, w):
    return numeric_bins(
        name, lo=float(lo), hi=float(hi), width=float(w), policy="other", other="out"
    )


def edges_of(bins):
    return sorted({e for b in bins for e in b})


def check_engines(attributes, bins, tmp_path, engines=ENGINE_SOURCES):
    """Values around every edge of every attribute, padded with NaN to one length; every
    engine and source must give exact_codes for each."""
    vals = [around(edges_of(b)) + [b[0][0] - 1.0, b[-1][1] + 1.0] for b in bins]
    n = max(len(v) for v in vals)
    cols = {"id": np.arange(n)}
    want = []
    for a, b, v in zip(attributes, bins, vals):
        v = v + [math.nan] * (n - len(v))
        cols[a.column] = np.array(v)
        want.append(exact_codes(v, b, a.other_code))
    for engine, kind in engines:
        got = engine_codes(engine, kind, make_source(kind, cols, tmp_path), attributes, n)
        for a, g, w in zip(attributes, got, want):
            bad = np.flatnonzero(g != w)
            assert not bad.size, (
                engine,
                kind,
                a.name,
                [(cols[a.column][i], g[i], w[i]) for i in bad[:5]],
            )


@st.composite
def grids(draw):
    w = draw(
        st.sampled_from(WIDTHS)
        | st.builds(lambda d, s: Fraction(d, 10**s), st.integers(1, 999), st.integers(0, 6))
    )
    lo = Fraction(draw(st.integers(-(10**6), 10**6)), 10 ** draw(st.integers(0, 3)))
    k = draw(st.integers(1, 25))
    cut = draw(st.sampled_from([Fraction(0), Fraction(1, 2), Fraction(1, 7)]))  # a short last bin
    return lo, float(lo + (k - cut) * w), w


decimal_floats = st.builds(
    lambda d, s: float(Fraction(d, 10**s)), st.integers(-(10**7), 10**7), st.integers(0, 5)
)
any_floats = st.floats(-1e7, 1e7, allow_nan=False, allow_infinity=False, allow_subnormal=False)


NUMPY_SOURCES = [(e, k) for e, k in ENGINE_SOURCES if e == "numpy"]
DUCKDB_SOURCES = [(e, k) for e, k in ENGINE_SOURCES if e == "duckdb"]


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    gs=st.lists(grids(), min_size=3, max_size=3),
    edges=st.lists(decimal_floats | any_floats, min_size=2, max_size=8, unique=True),
    gapped=st.lists(decimal_floats | any_floats, min_size=4, max_size=8, unique=True),
    duck=st.sampled_from(DUCKDB_SOURCES),
)
def test_every_engine_bins_values_on_and_around_every_edge_exactly(
    gs, edges, gapped, duck, tmp_path
):
    """Each example: every numpy source and one DuckDB source (a DuckDB call costs a
    connection; the fixed cases below run every source)."""
    attrs, bins = [], []
    for j, (lo, hi, w) in enumerate(gs):
        a = regular(f"g{j}", lo, hi, w)
        want = expected_bins(lo, hi, w)
        # the labels show the edges lo + i·width rounded once, and read back as the edges used
        assert label_bins(a) == want == list(a.bins), (lo, hi, w)
        attrs.append(a)
        bins.append(want)
    e = sorted(edges)
    attrs.append(numeric_bins("edges", edges=e, policy="other", other="out"))
    bins.append(list(zip(e, e[1:])))
    g = sorted(gapped)
    g = g[: len(g) // 2 * 2]
    pairs = list(zip(g[::2], g[1::2]))
    attrs.append(numeric_bins("gaps", bins=pairs, policy="other", other="out"))
    bins.append(pairs)
    for a, b in zip(attrs[3:], bins[3:]):
        assert label_bins(a) == b
    check_engines(attrs, bins, tmp_path, [*NUMPY_SOURCES, duck])


def test_the_widths_of_the_issue_on_every_edge_of_many_bins(tmp_path):
    """0.1, 0.01, 1/3, 2.5 and 1e-3 over hundreds to thousands of bins, every edge ± one ulp."""
    cases = [
        (Fraction(0), 5.0, Fraction(1, 10)),
        (Fraction(0), 5.0, Fraction(1, 100)),
        (Fraction(0), 100.0, Fraction(1, 3)),
        (Fraction(-1000), 1000.0, Fraction(5, 2)),
        (Fraction(0), 2.0, Fraction(1, 1000)),
    ]
    attrs = [regular(f"w{j}", *c) for j, c in enumerate(cases)]
    bins = [expected_bins(*c) for c in cases]
    for a, b in zip(attrs, bins):
        assert label_bins(a) == b
    check_engines(attrs, bins, tmp_path)


def test_a_value_written_on_an_edge_is_in_the_bin_that_starts_there():
    """The issue's reproducer: 0.30 in [0.3, 0.4), not [0.2, 0.3), on every engine."""
    import pandas as pd

    dom = Domain((numeric_bins("carat", lo=0, hi=5, width=0.1),))
    text = ["0.30", "0.29", "0.3", "0.60", "0.70", "1.10", "4.90"]
    want = np.zeros(50, dtype=np.int64)
    for t in text:
        want[math.floor(Fraction(t) * 10)] += 1
    for engine in ("numpy", "duckdb"):
        for src in (
            pd.DataFrame({"carat": [float(t) for t in text]}),
            pd.DataFrame({"carat": text}),
        ):
            np.testing.assert_array_equal(histogram(src, dom, engine=engine), want)


@pytest.mark.parametrize("lo, hi, w", [(0, 2e8, 0.1), (0, 7e8, 1 / 3), (-1e6, 1e6, 1e-3)])
def test_edges_of_grids_of_billions_of_bins(lo, hi, w, tmp_path):
    """The first guess is within one bin of the answer even 2·10⁹ bins away from lo."""
    a = regular("big", lo, hi, w)
    assert 10**9 < a.declared_size <= 2**31
    lo_r, w_r = declared_fraction(lo), declared_fraction(w)
    rng = np.random.default_rng(0)
    picks = sorted(
        {
            0,
            1,
            2,
            a.declared_size - 2,
            a.declared_size - 1,
            *rng.integers(0, a.declared_size, 60).tolist(),
        }
    )
    for i in picks:  # edge i is lo + i·w rounded once
        assert a.bins.edge(i) == float(lo_r + i * w_r)
    bins = [(a.bins.edge(i), a.bins.edge(i + 1)) for i in picks]
    vals = around(edges_of(bins))
    want_within = exact_codes(vals, bins, -1)
    want = np.array([picks[c] if c >= 0 else -1 for c in want_within])
    keep = want >= 0  # values around the picked edges that fall in a picked bin
    vals = [v for v, k in zip(vals, keep) if k]
    cols = {"id": np.arange(len(vals)), "big": np.array(vals)}
    for engine, kind in ENGINE_SOURCES:
        (got,) = engine_codes(engine, kind, make_source(kind, cols, tmp_path), [a], len(vals))
        np.testing.assert_array_equal(got, want[keep], err_msg=f"{engine} {kind}")


def test_declared_fractions_are_what_was_typed_or_the_simplest_fraction():
    assert declared_fraction(0.1) == Fraction(1, 10) and declared_fraction(2.5) == Fraction(5, 2)
    assert declared_fraction(1e-3) == Fraction(1, 1000) and declared_fraction(-0.25) == Fraction(
        -1, 4
    )
    assert declared_fraction(1 / 3) == Fraction(1, 3) and declared_fraction(-7 / 3) == Fraction(
        -7, 3
    )
    assert declared_fraction(1e-30) == Fraction(1, 10**30)
    for x in (0.1 + 0.2, math.pi, 1 / 7, 2**-40, 123456.78901234567):
        f = declared_fraction(x)
        assert float(f) == x
        # no fraction with a smaller denominator rounds to x (checked by enumeration for small ones)
        if f.denominator < 10**4:
            assert all(float(Fraction(round(x * q), q)) != x for q in range(1, f.denominator))


def test_regular_bins_refuse_what_floats_cannot_hold():
    with pytest.raises(ValueError, match="below the float resolution"):
        numeric_bins("x", lo=1e17, hi=1e17 + 1000, width=1)
    with pytest.raises(ValueError, match="too finely"):
        numeric_bins("x", lo=0, hi=1e8, width=0.1 + 0.2)  # a computed width over 3·10⁸ bins
    with pytest.raises(ValueError, match="at most"):
        numeric_bins("x", lo=0, hi=1e10, width=1)
    big = numeric_bins("x", lo=-1e19, hi=1e20, width=1e18)  # 110 bins far beyond 2**63
    assert big.size == 110 and all(
        big.bins.edge(i) == float(-(10**19) + i * 10**18) for i in range(111)
    )
    a = numeric_bins("x", lo=0, hi=1, width=1 / 3)
    assert a.size == 3 and a.bins[2] == (2 / 3, 1.0)  # 3·(1/3) is the edge 1, not a 4th bin
    assert (
        RegularBins(0, 0.3, 0.1) == a.bins.__class__(0.0, 0.3, 0.1)
        and len(RegularBins(0, 0.3, 0.1)) == 3
    )


def test_labels_read_back_as_the_edges_used():
    for a in (
        numeric_bins("x", lo=0, hi=5, width=0.1),
        numeric_bins("x", lo=-2, hi=2, width=1 / 3),
        numeric_bins("x", lo=1000, hi=3.5e6, width=2.5e5),
        numeric_bins("x", edges=[0, 1500, 2.5e6, 2999999.5, 0.1 + 0.2 + 3e6]),
        numeric_bins("x", lo=1e-9, hi=1e-8, width=1e-9),
    ):
        shown = label_bins(a)
        assert shown == [a.bins[i] for i in range(a.declared_size)]
        first, last = np.array([0, 1]), np.array([a.declared_size - 2, a.declared_size - 1])
        for text, f, la in zip(a.span_labels(first, last), first, last):
            assert text == a.span_label(int(f), int(la))
    assert numeric_bins("x", lo=0, hi=5, width=0.1).cell_label(3) == "x [0.3, 0.4)"
    assert (
        numeric_bins("w", edges=[0, 1500, 2500000, 123456700000]).value_label(2)
        == "[2.5M, 123456.7M)"
    )
