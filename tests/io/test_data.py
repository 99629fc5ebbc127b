"""Tests for matmech.sources.histogram.histogram: 1-D and multi-dimensional counts, clear errors."""

import numpy as np
import pandas as pd
import pytest

from matmech import workloads as Wk
from matmech.sources.histogram import cell_index, histogram
from matmech.linalg.linop import Kron


def test_codes_1d_numpy_list_series():
    v = np.array([0, 2, 2, 4, 0, 0])
    expected = [3, 0, 2, 0, 1]
    assert histogram(v, 5).tolist() == expected
    assert histogram(v.tolist(), 5).tolist() == expected
    assert histogram(pd.Series(v), 5).tolist() == expected
    assert histogram(v.astype(float), 5).tolist() == expected
    assert histogram(v, (5,)).tolist() == expected
    assert histogram(v, 5).dtype == np.int64


def test_edges_match_numpy_histogram():
    rng = np.random.default_rng(0)
    v = rng.uniform(0, 10, 1000)
    edges = np.array([0, 1, 2.5, 5, 7, 10.0])
    v[0] = 10.0  # the last bin is closed
    v[1] = 0.0
    assert histogram(v, edges).tolist() == np.histogram(v, edges)[0].tolist()
    assert histogram(v, list(edges)).tolist() == np.histogram(v, edges)[0].tolist()


def test_multidimensional_is_row_major_like_kron():
    rng = np.random.default_rng(1)
    a, b, c = rng.integers(0, 3, 500), rng.integers(0, 4, 500), rng.integers(0, 2, 500)
    x = histogram(np.column_stack([a, b, c]), (3, 4, 2))
    assert x.shape == (24,) and x.sum() == 500
    # cell (i, j, k) is i*8 + j*2 + k
    assert x[1 * 8 + 2 * 2 + 1] == np.sum((a == 1) & (b == 2) & (c == 1))
    # the (a, b) marginal through Kron(I, I, total) equals the direct 2-D count
    W = Kron(Wk.identity(3), Wk.identity(4), Wk.total(2))
    assert np.array_equal(W @ x, histogram(np.column_stack([a, b]), (3, 4)))
    # same from a list of columns and from a DataFrame
    assert np.array_equal(histogram([a, b, c], (3, 4, 2)), x)
    df = pd.DataFrame({"a": a, "b": b, "c": c})
    assert np.array_equal(histogram(df, (3, 4, 2)), x)
    assert np.array_equal(histogram(df, {"a": 3, "b": 4, "c": 2}), x)
    # a mapping selects and orders columns
    assert np.array_equal(
        histogram(df, {"c": 2, "a": 3}), histogram(np.column_stack([c, a]), (2, 3))
    )


def test_mixed_codes_and_edges():
    df = pd.DataFrame({"age": [3.5, 70.0, 18.0, 44.2], "sex": [0, 1, 1, 0]})
    x = histogram(df, {"age": [0, 18, 65, 120], "sex": 2})
    assert x.tolist() == [1, 0, 1, 1, 0, 1]


def test_categorical_series_uses_codes():
    s = pd.Series(pd.Categorical(["b", "a", "b", "c"], categories=["a", "b", "c"]))
    assert histogram(s, 3).tolist() == [1, 2, 1]
    with pytest.raises(ValueError, match="outside the domain"):
        histogram(s, 2)


@pytest.mark.parametrize(
    "values, bins, exc, pattern",
    [
        (
            np.array([0, 1, 5]),
            5,
            ValueError,
            r"^a value in the values is outside the domain 0\.\.4$",
        ),
        (np.array([0, -1]), 5, ValueError, r"^a value in the values is outside"),
        (np.array([0.0, np.nan]), 5, ValueError, r"^missing value \(NaN\) in the values$"),
        (np.array([0.0, np.inf]), 5, ValueError, r"^infinite value in the values$"),
        (
            np.array([0.0, 1.5]),
            5,
            ValueError,
            r"^non-integer value in the values: with 5 categories",
        ),
        (
            np.array(["0", "x"], dtype=object),
            5,
            TypeError,
            r"^non-numeric value in the values; encode",
        ),
        ([0, None], 5, ValueError, r"^missing value \(None\) in the values;"),
        (
            np.array([1.0, 11.0]),
            [0, 5, 10],
            ValueError,
            r"^a value in the values is outside the bin edges \[0, 10\]$",
        ),
        (np.array([1, 2]), 0, ValueError, "positive"),
        (np.array([1, 2]), [3, 1], ValueError, "strictly increasing"),
        (np.array([1, 2]), "abc", TypeError, "categories"),
    ],
)
def test_bad_values_name_the_kind_of_defect_never_the_row_or_value(values, bins, exc, pattern):
    with pytest.raises(exc, match=pattern) as info:
        histogram(values, bins)
    assert "row" not in str(info.value)


def test_errors_name_the_column_never_a_pandas_label_row_or_value():
    # issue 21: the index labels and values are private; a message names the column and the defect
    df = pd.DataFrame({"age": [1, 2, 99], "zip": ["a", "secret", "c"]}, index=["p", "alice", "r"])
    for frame, bins, exc, pattern in [
        (df[["age"]], (10,), ValueError, r"^a value in column 'age' is outside the domain 0\.\.9$"),
        (df, {"age": 100, "zip": 10}, TypeError, r"^non-numeric value in column 'zip'; "),
    ]:
        with pytest.raises(exc, match=pattern) as info:
            histogram(frame, bins)
        text = str(info.value)
        for private in ("alice", "secret", "'r'", "99", "row", "index"):
            assert private not in text
    cat = pd.DataFrame({"c": pd.Categorical(["x", "y", None])}, index=["p", "alice", "bob"])
    with pytest.raises(ValueError, match=r"^missing value \(NaN\) in column 'c'$"):
        histogram(cat, {"c": 2})
    with pytest.raises(ValueError, match=r"column\(s\) \['nope'\]"):
        histogram(df, {"nope": 3})
    with pytest.raises(ValueError, match="3 attributes but the data frame has 2 columns"):
        histogram(df, (100, 10, 3))
    s = pd.Series([1.0, np.nan], name="income")
    with pytest.raises(ValueError, match=r"^missing value \(NaN\) in column 'income'$"):
        histogram(s, 5)


def test_shape_errors():
    with pytest.raises(ValueError, match="2 attributes but the data has 3 columns"):
        histogram(np.zeros((4, 3)), (2, 2))
    with pytest.raises(ValueError, match="different lengths"):
        histogram([np.zeros(3), np.zeros(4)], (2, 2))
    with pytest.raises(TypeError, match="needs a domain"):
        histogram(np.zeros((4, 2)), None)


def test_cell_index_returns_domain():
    idx, dom = cell_index(np.array([[1, 0], [2, 3]]), (3, 4))
    assert idx.tolist() == [4, 11] and dom == (3, 4)
