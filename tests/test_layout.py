"""The package layout: layers import downwards only, and the privacy boundary is an import rule.

Read from the source with ``ast`` (imports inside functions count too), so a lazy import
cannot hide an upward edge or a cycle.
"""

import ast
from pathlib import Path

import networkx as nx
import pytest

PKG = Path(__file__).resolve().parents[1] / "matmech"

#: Layers, bottom first (docs/contributing.md, issue 34): one stage folder per layer, the data
#: flowing one way. A module may import modules of lower layers and of its own layer (without
#: cycles), never of a higher one. ``measurements`` (the calibrated measurements of marginal
#: tables, their exact draws and the measurement record) sits below ``estimators``: the
#: estimators and the spill store read its calibrations, and every plan's draw calls it.
LAYERS = [
    ["limits", "linalg", "validate"],
    ["workloads", "strategies", "privacy"],
    ["error"],
    ["optimizers"],
    ["plot"],
    ["advisor"],
    ["io"],
    ["sources"],
    ["svt"],
    ["measurements"],
    ["estimators"],
    ["results"],
    ["plans"],
    ["run"],
    ["release"],
    ["synthesis"],  # composes release + the graphical estimator (issue 35)
    ["stream"],
    ["cli", "__main__"],
]

#: Code that reads private data (x, records, query answers): only these may, and nothing on
#: the data-independent side (everything before measurement in the flow) imports them.
READS_DATA = [
    "privacy.measure",
    "sources",
    "svt",
    "measurements",
    "results",
    "plans",
    "run",
    "release",
    "synthesis",
    "cli",
    "stream.exact",
    "stream.state",
    "stream.release",
]
DATA_INDEPENDENT = [
    "linalg",
    "validate",
    "workloads",
    "strategies",
    "privacy.params",
    "privacy.calibration",
    "privacy.confidence",
    "privacy.events",
    "privacy.accountant",
    "error",
    "optimizers",
    "advisor",
    "plot",
    "io",
    "limits",
    "stream.series",
    "stream.blt",
    "stream.bounds",
    "stream.factorizations",
    "stream.advise",
]


def _modules():
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = path.relative_to(PKG).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _imports(path):
    """Every matmech module imported by ``path`` (relative names: '' is the package)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            pytest.fail(
                f"{path.relative_to(PKG)}:{node.lineno}: relative import; use matmech.<layer>.<module>"
            )
        names = []
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.split(".")[0] == "matmech"
        ):
            base = node.module[len("matmech.") :] if node.module != "matmech" else ""
            names = [f"{base}.{a.name}".strip(".") for a in node.names]
            names = [n if n in MODULES else base for n in names]
        elif isinstance(node, ast.Import):
            names = [a.name[len("matmech.") :] for a in node.names if a.name.startswith("matmech.")]
        found.update(n for n in names if n in MODULES)
    return found


GRAPH = nx.DiGraph()
for _name, _path in MODULES.items():
    GRAPH.add_node(_name)
    for _dep in _imports(_path):
        if _dep != _name and not (_name == "" or _name.startswith(_dep + ".") and not _dep):
            GRAPH.add_edge(_name, _dep)


def _group(name, groups):
    hits = [g for g in groups if name == g or name.startswith(g + ".")]
    return max(hits, key=len) if hits else None


def _layer(name):
    for i, layer in enumerate(LAYERS):
        if _group(name, layer):
            return i
    return None


def test_every_module_is_placed_in_a_layer():
    unplaced = [m for m in MODULES if m and _layer(m) is None and m not in ("privacy",)]
    assert not unplaced, f"modules in no layer of tests/test_layout.py: {unplaced}"


def test_no_import_cycles():
    package_inits = {m for m in MODULES if MODULES[m].name == "__init__.py"}
    sub = GRAPH.subgraph([m for m in MODULES if m not in package_inits or m == "svt"])
    cycles = list(nx.simple_cycles(sub))
    assert not cycles, f"import cycles: {cycles[:5]}"


def _folder(name):
    """The stage a module belongs to: its folder, or the top-level module itself."""
    return name.split(".")[0]


def test_the_folder_import_graph_has_no_cycle():
    """Folders (and top-level modules) import one another one way: no cycle between two
    stages, imports inside functions included (issue 34: pipeline/ and factored/ imported
    each other 15 + 4 times, hidden by one merged layer)."""
    folders = nx.DiGraph()
    for a, b in GRAPH.edges:
        if a and b and _folder(a) != _folder(b):
            folders.add_edge(_folder(a), _folder(b))
    cycles = list(nx.simple_cycles(folders))
    assert not cycles, f"folder import cycles: {cycles[:5]}"


def test_each_layer_is_one_stage():
    """No two stage folders share a layer: each folder is placed on its own (the bottom
    layers group a few top-level modules with the folder they serve)."""
    folders = {_folder(m) for m in MODULES if m and MODULES[m].name == "__init__.py"}
    for layer in LAYERS:
        assert len(folders & set(layer)) <= 1, f"stage folders merged into one layer: {layer}"
    placed = [g for layer in LAYERS for g in layer]
    assert len(placed) == len(set(placed))
    assert not {"factored", "pipeline"} & {_folder(m) for m in MODULES}


def test_imports_point_down_the_layers():
    upward = []
    for a, b in GRAPH.edges:
        la, lb = _layer(a), _layer(b)
        if a and la is not None and lb is not None and lb > la:
            upward.append(f"{a} (layer {la}) imports {b} (layer {lb})")
    assert not upward, "\n".join(upward)


def test_data_independent_code_never_imports_code_that_reads_data():
    bad = []
    for a, b in GRAPH.edges:
        if _group(a, DATA_INDEPENDENT) and _group(b, READS_DATA):
            bad.append(f"{a} imports {b}")
    assert not bad, "\n".join(bad)


def test_the_boundary_rule_would_catch_a_violation():
    """The rule is not vacuous: the data-independent side is large and an edge into the
    data side would be reported."""
    independent = [m for m in MODULES if _group(m, DATA_INDEPENDENT)]
    assert len(independent) >= 15 and "privacy.measure" in MODULES and "svt.select" in MODULES
    assert _group("sources.engines", READS_DATA) and _group("io.domain", DATA_INDEPENDENT)
    assert _group("optimizers.pure", DATA_INDEPENDENT) and _group("svt.core", READS_DATA)
    assert (
        _layer("linalg.linop") < _layer("error") < _layer("optimizers.dispatch") < _layer("release")
    )
    assert (
        _layer("sources.source")
        < _layer("estimators.gls")
        < _layer("results.release")
        < _layer("plans.plan")
        < _layer("run.runner")
        < _layer("release")
    )


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_has_a_docstring(name):
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    assert ast.get_docstring(tree), f"{name or 'matmech'} has no module docstring"
