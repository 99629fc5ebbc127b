import numpy as np
import pytest

from matmech import workloads as W
from matmech.specs import SpecError, load_spec, parse_spec


def test_shipped_specs_load(spec_files):
    for path in spec_files:
        spec = load_spec(path)
        assert spec.workload.shape[1] == int(np.prod(spec.domain)), path


def test_parse_one_d_kinds_and_union():
    spec = parse_spec(
        {
            "domain": [6],
            "queries": [
                {"kind": "ranges", "intervals": [[0, 1], [2, 5]], "labels": ["young", "old"]},
                {"kind": "total", "weight": 2.0},
            ],
        },
        source="s.toml",
    )
    np.testing.assert_array_equal(spec.workload.dense(), [[1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 1, 1], [2] * 6])
    assert spec.labels == ("young", "old", "[0, 5]")


def test_parse_product_marginals_tree():
    spec = parse_spec({"domain": [3, 4], "queries": [{"kind": "product", "factors": ["prefix", {"kind": "identity"}]}]})
    np.testing.assert_array_equal(spec.workload.dense(), W.kron(W.prefix(3), W.identity(4)).dense())
    spec = parse_spec({"domain": [2, 3, 2], "queries": [{"kind": "marginals", "k": 2}]})
    np.testing.assert_array_equal(spec.workload.dense(), W.marginals((2, 3, 2), 2).dense())
    spec = parse_spec({"domain": [3], "queries": [{"kind": "tree", "edges": [["r", "a"], ["r", "b"], ["a", "x"], ["a", "y"]]}]})
    np.testing.assert_array_equal(spec.workload.dense(), [[1, 1, 1], [1, 1, 0], [0, 0, 1], [1, 0, 0], [0, 1, 0]])
    assert spec.labels == ("r", "a", "b", "x", "y")


@pytest.mark.parametrize(
    "data, text",
    [
        ({"queries": [{"kind": "prefix"}]}, r"s.toml: domain: expected a non-empty list of integers, got None"),
        ({"domain": [0], "queries": [{"kind": "prefix"}]}, r"domain: expected positive attribute sizes"),
        ({"domain": [4]}, r"queries: expected a non-empty array of tables"),
        ({"domain": [4], "queries": [{"kind": "cube"}]}, r"queries\[0\].kind: expected one of"),
        ({"domain": [4], "queries": [{"kind": "ranges", "intervals": [[0, 9]]}]}, r"queries\[0\].intervals: interval 0 = \(0, 9\)"),
        ({"domain": [4], "queries": [{"kind": "prefix", "weight": -1}]}, r"queries\[0\].weight: expected a positive number, got -1"),
        ({"domain": [4, 4], "queries": [{"kind": "prefix"}]}, r"'product' or 'marginals'"),
        ({"domain": [4, 4], "queries": [{"kind": "product", "factors": ["prefix"]}]}, r"factors: expected a list of 2"),
        ({"domain": [4], "queries": [{"kind": "tree", "edges": [["a", "b"], ["c", "b"]]}]}, r"edges: the graph is not an arborescence"),
        ({"domain": [3], "attributes": ["a", "b"], "queries": [{"kind": "prefix"}]}, r"attributes: expected a list of 1"),
    ],
)
def test_spec_errors_name_file_and_key(data, text):
    with pytest.raises(SpecError, match=text):
        parse_spec(data, source="s.toml")


def test_load_errors(tmp_path):
    with pytest.raises(SpecError, match="no such spec file"):
        load_spec(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("domain = [3\n")
    with pytest.raises(SpecError, match="bad.toml: not valid TOML"):
        load_spec(bad)
