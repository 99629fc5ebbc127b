"""The counting engines are registry entries (issue 22 item 2): marginal_counts dispatches
through ENGINE_REGISTRY, so a new engine is one entry, and every entry counts like numpy."""

import numpy as np
import pytest

from matmech.sources import engines
from matmech.io.domain import Domain, categories, integer_range
from matmech.sources.engine_numpy import NUMPY
from matmech.sources.grouping import Engine


def _domain():
    return Domain((integer_range("a", 0, 2), categories("b", ["x", "y"])))


def test_the_engine_names_are_the_registry():
    assert (
        engines.ENGINES
        == ("auto", "numpy", "duckdb", "spark")
        == ("auto", *engines.ENGINE_REGISTRY)
    )
    assert all(isinstance(e, Engine) and e.name == k for k, e in engines.ENGINE_REGISTRY.items())
    with pytest.raises(
        ValueError,
        match=r"engine must be one of \['auto', 'numpy', 'duckdb', 'spark'\], got 'polars'",
    ):
        engines.histogram({"a": [0], "b": ["x"]}, _domain(), engine="polars")


def test_a_new_engine_is_one_registry_entry(monkeypatch):
    calls = []

    def groups(source, kind, domain, sets, *, where, encoding, delimiter):
        calls.append((kind, tuple(sets)))
        return NUMPY.groups(
            source, kind, domain, sets, where=where, encoding=encoding, delimiter=delimiter
        )

    def check(kind):
        if kind != "columns":
            raise TypeError(f"the spy engine counts columns, not {kind}")

    spy = Engine("spy", groups, check)
    monkeypatch.setattr(engines, "ENGINE_REGISTRY", {**engines.ENGINE_REGISTRY, "spy": spy})
    data = {"a": [0, 1, 1, 2, 2, 2], "b": ["x", "y", "y", "x", "y", "y"]}
    x = engines.histogram(data, _domain(), engine="spy")
    np.testing.assert_array_equal(x, engines.histogram(data, _domain(), engine="numpy"))
    np.testing.assert_array_equal(x, [1, 0, 0, 2, 1, 2])
    assert calls == [("columns", ((0, 1),))]
    with pytest.raises(TypeError, match="the spy engine counts columns, not array"):
        engines.histogram(np.array([[0, 0]]), _domain(), engine="spy")


@pytest.mark.parametrize(
    "engine, kind_source, message",
    [
        ("numpy", "data.csv", "the numpy engine counts in-memory columns"),
        ("duckdb", np.zeros((1, 2)), "a 2-D numpy array is counted by the numpy engine"),
        (
            "spark",
            {"a": [0], "b": ["x"]},
            "the spark engine counts a Spark DataFrame; got a columns source",
        ),
    ],
)
def test_each_entry_refuses_the_sources_it_cannot_count(engine, kind_source, message, tmp_path):
    source = kind_source
    if isinstance(source, str):
        source = tmp_path / source
        source.write_text("a,b\n0,x\n")
    with pytest.raises(TypeError, match=message):
        engines.histogram(source, _domain(), engine=engine)
