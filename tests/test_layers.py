"""The package's layers point one way, and no module imports itself round a circle.

Every import counts: at the top of a module, inside a function, and under
``TYPE_CHECKING`` (a type is a dependency too). The layers, lowest first:

    scenario < numerics < simulation < strategies < runs < tools < fred (the API facade)

A module may import its own layer and the layers below it. ``fred._version`` and
``fred._lazy`` (submodules on first use) are leaves any layer may name. The strategy registry finds the
``strategies`` package by name at its
first lookup (a plug-in discovery), not by an import, so the scenario layer stays lowest.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = (
    "fred._version",
    "fred._lazy",
    "fred.scenario",
    "fred.numerics",
    "fred.models",
    "fred.simulation",
    "strategies",
    "fred.runs",
    "fred.tools",
    "fred",
)


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted([*ROOT.glob("fred/**/*.py"), *ROOT.glob("strategies/**/*.py")]):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of fred and strategies that ``name`` imports, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            submodules = {f"{base}.{alias.name}" for alias in node.names} & modules.keys()
            targets.update(submodules or {base})
    return {t for t in targets if t in modules and t != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _layer(module: str) -> int:
    matches = [
        (len(prefix), rank)
        for rank, prefix in enumerate(LAYERS)
        if module == prefix or module.startswith(prefix + ".")
    ]
    assert matches, f"{module} is in no layer; add its package to LAYERS in {__file__}"
    return max(matches)[1]  # the most specific: fred.tools.cli is in fred.tools, not in fred


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` as a list of modules, first repeated last; None if none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_the_graph_is_read():
    graph = _graph()
    assert "fred.simulation.engine" in graph["fred.runs.build"]  # the reader sees ordinary imports
    assert "fred.scenario.registry" in graph["fred.scenario.schema.strategy"]
    assert len(graph) > 50


def test_no_import_circle():
    circle = _circle(_graph())
    assert circle is None, "import circle: " + " -> ".join(circle or [])


def test_layers_point_down():
    upward = [
        f"{m} ({LAYERS[_layer(m)]}) imports {d} ({LAYERS[_layer(d)]})"
        for m, deps in sorted(_graph().items())
        for d in sorted(deps)
        if _layer(d) > _layer(m)
    ]
    assert not upward, "imports that point up a layer:\n" + "\n".join(upward)


@pytest.mark.parametrize(
    "graph, expected",
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
        ({"a": {"b"}, "b": set(), "c": {"b"}}, None),
        ({"a": {"a"}}, ["a", "a"]),
    ],
)
def test_circle_finder(graph, expected):
    assert _circle(graph) == expected
