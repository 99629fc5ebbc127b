import numpy as np
import pytest

from matmech import workloads as W
from matmech.io.specs import SpecError, load_spec, parse_spec


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
    np.testing.assert_array_equal(
        spec.workload.dense(), [[1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 1, 1], [2] * 6]
    )
    assert spec.labels == ("young", "old", "[0, 5]")


def test_parse_product_marginals_tree():
    spec = parse_spec(
        {
            "domain": [3, 4],
            "queries": [{"kind": "product", "factors": ["prefix", {"kind": "identity"}]}],
        }
    )
    np.testing.assert_array_equal(spec.workload.dense(), W.kron(W.prefix(3), W.identity(4)).dense())
    spec = parse_spec({"domain": [2, 3, 2], "queries": [{"kind": "marginals", "k": 2}]})
    np.testing.assert_array_equal(spec.workload.dense(), W.marginals((2, 3, 2), 2).dense())
    spec = parse_spec(
        {
            "domain": [3],
            "queries": [
                {"kind": "tree", "edges": [["r", "a"], ["r", "b"], ["a", "x"], ["a", "y"]]}
            ],
        }
    )
    np.testing.assert_array_equal(
        spec.workload.dense(), [[1, 1, 1], [1, 1, 0], [0, 0, 1], [1, 0, 0], [0, 1, 0]]
    )
    assert spec.labels == ("r", "a", "b", "x", "y")


@pytest.mark.parametrize(
    "data, text",
    [
        (
            {"queries": [{"kind": "prefix"}]},
            r"s.toml: domain: expected a non-empty list of integers, but the key is missing",
        ),
        (
            {"domain": [0], "queries": [{"kind": "prefix"}]},
            r"domain: expected positive attribute sizes",
        ),
        ({"domain": [4]}, r"queries: expected a non-empty array of tables"),
        ({"domain": [4], "queries": [{"kind": "cube"}]}, r"queries\[0\].kind: expected one of"),
        (
            {"domain": [4], "queries": [{"kind": "ranges", "intervals": [[0, 9]]}]},
            r"queries\[0\].intervals: interval 0 = \(0, 9\)",
        ),
        (
            {"domain": [4], "queries": [{"kind": "prefix", "weight": -1}]},
            r"queries\[0\].weight: expected a positive number, got -1",
        ),
        ({"domain": [4, 4], "queries": [{"kind": "prefix"}]}, r"'product' or 'marginals'"),
        (
            {"domain": [4, 4], "queries": [{"kind": "product", "factors": ["prefix"]}]},
            r"factors: expected a list of 2",
        ),
        (
            {"domain": [4], "queries": [{"kind": "tree", "edges": [["a", "b"], ["c", "b"]]}]},
            r"edges: the graph is not an arborescence",
        ),
        (
            {"domain": [3], "attributes": ["a", "b"], "queries": [{"kind": "prefix"}]},
            r"attributes: expected a list of 1",
        ),
        # typos and missing keys name the key, the expected keys and the closest match
        (
            {"domian": [4], "queries": [{"kind": "prefix"}]},
            r"s.toml: domian: unknown key \(did you mean 'domain'\?\); expected one of",
        ),
        (
            {"domain": [4], "queries": [{"kind": "ranges", "intervls": [[0, 1]]}]},
            r"queries\[0\].intervls: unknown key \(did you mean 'intervals'\?\)",
        ),
        (
            {"domain": [4], "queries": [{"kind": "ranges"}]},
            r"queries\[0\].intervals: expected a non-empty list of \[lo, hi\] pairs .*but the key is missing",
        ),
        (
            {"domain": [4], "queries": [{"kind": "prefix", "k": 2}]},
            r"queries\[0\].k: unknown key; expected one of \['kind', 'weight'\]",
        ),
        (
            {
                "domain": [2, 2],
                "queries": [
                    {"kind": "product", "factors": [{"kind": "prefix", "weight": 2}, "identity"]}
                ],
            },
            r"queries\[0\].factors\[0\].weight: unknown key; expected one of \['kind'\]",
        ),
        (
            {"domain": [2, 2], "queries": [{"kind": "marginals"}]},
            r"queries\[0\]: expected exactly one of k .* or attrs .*, but the key is missing",
        ),
        (
            {"domain": [2, 2], "queries": [{"kind": "marginals", "k": 5}]},
            r"queries\[0\].k: k must be an integer in \[0, 2\]",
        ),
        (
            {"domain": [2, 2], "queries": [{"kind": "marginals", "attrs": [[0, 7]]}]},
            r"queries\[0\].attrs: attribute 7",
        ),
        (
            {"domain": [4], "queries": [{"kind": "product"}]},
            r"queries\[0\].factors: expected a list of 1 per-attribute workloads, but the key is missing",
        ),
        (
            {"domain": [4], "queries": [{}]},
            r"queries\[0\].kind: expected one of .*, but the key is missing",
        ),
        (
            {"domain": [4], "name": 3, "queries": [{"kind": "prefix"}]},
            r"s.toml: name: expected a string, got 3",
        ),
        (
            {"domain": [2], "attributes": [1], "queries": [{"kind": "prefix"}]},
            r"attributes: expected a list of 1 names \(strings\)",
        ),
        (
            {"domain": [2, 3], "queries": [{"kind": "product", "factors": ["prefix", "cube"]}]},
            r"queries\[0\].factors\[1\].kind: expected one of \['identity', 'total', 'prefix', 'all_range', 'ranges', 'tree'\] for one attribute, got 'cube'",
        ),
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
