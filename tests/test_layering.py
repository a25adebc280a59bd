"""Imports among the project's modules point one way: no import circles.

The graph is built from the source with `ast` (module-level and function-level imports
alike: a lazy import still ties two modules together); the test fails on any circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("yoloq", "work_pools", "blocks", "flows")

def project_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module an imported name lives in (`a.b.func` -> `a.b`)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imported_names(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    graph = {}
    for module, path in modules.items():
        targets = {_resolve(n, modules) for n in _imported_names(ast.parse(path.read_text()))}
        graph[module] = {t for t in targets if t and t != module}
    return graph


def circles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[frozenset[str]] = set()
    for root, targets in graph.items():
        if root in index:
            continue
        work = [(root, iter(sorted(targets)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.add(frozenset(component))
    return found


def test_circle_finder_sees_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == {frozenset({"a", "b", "c"})}


def test_no_import_circles():
    found = circles(import_graph(project_modules()))
    assert found == set(), "import circle(s); make the imports point one way"


def test_the_named_circles_are_broken():
    graph = import_graph(project_modules())
    for low, high in (("work_pools.usage_state", "work_pools.scheduling"),
                      ("yoloq.ops.stack", "yoloq.ops.deploy")):
        assert low not in graph[high] or high not in graph[low], (low, high)


# The user surface: the REST API (and web page) and the CLI both sit on the service layer
# (`yoloq.service`); neither imports the other, and the service layer imports neither.
SURFACE_RULES = (("yoloq.api", ("yoloq.commands", "yoloq.cli")),
                 ("yoloq.service", ("yoloq.commands", "yoloq.cli", "yoloq.api")))


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def forbidden_imports(graph: dict[str, set[str]]) -> list[str]:
    """`importer imports target` for every import that breaks a rule of SURFACE_RULES."""
    found = []
    for importer, targets in sorted(graph.items()):
        for package, banned in SURFACE_RULES:
            if not _within(importer, package):
                continue
            found += [f"{importer} imports {t}" for t in sorted(targets) if any(_within(t, b) for b in banned)]
    return found


def test_rule_finder_names_the_importing_module():
    graph = {"yoloq.api.jobs": {"yoloq.commands.submit", "yoloq.service.jobs"},
             "yoloq.service.jobs": {"yoloq.api.errors"}, "yoloq.commands.submit": {"yoloq.service.jobs"},
             "yoloq.apis": {"yoloq.commands.x"}}
    assert forbidden_imports(graph) == ["yoloq.api.jobs imports yoloq.commands.submit",
                                        "yoloq.service.jobs imports yoloq.api.errors"]


def test_api_and_service_import_no_cli_module():
    found = forbidden_imports(import_graph(project_modules()))
    assert found == [], "the API and the service layer must not import the CLI: " + "; ".join(found)


def test_the_service_layer_exists_and_the_cli_uses_it():
    graph = import_graph(project_modules())
    assert "yoloq.service.admission" in graph
    for command in ("analyse", "submit", "status", "history", "retier", "cancel", "team"):
        uses = graph[f"yoloq.commands.{command}"]
        assert any(_within(t, "yoloq.service") for t in uses), command


# The layers, lowest first: a module imports its own layer and those below, never one above.
# The longest matching package decides (`work_pools.policy` is ground, the rest of
# `work_pools` is the node layer; `yoloq` alone is the top: the CLI, REST API, views, ops).
LAYERS = (
    ("ground", ("yoloq.base", "yoloq.settings", "yoloq.domain", "yoloq.analysis", "yoloq.engine",
                "work_pools.policy")),
    ("stores", ("blocks", "yoloq.records", "yoloq.datasets")),
    ("nodes", ("work_pools",)),
    ("flows", ("flows",)),
    ("surface", ("yoloq",)),
)
# The pure policy decides from its inputs alone: it imports the domain's types and nothing else.
PURE_POLICY = ("work_pools.policy", ("yoloq.domain",))


def layer_of(module: str) -> int:
    matches = [(len(package), index) for index, (_, packages) in enumerate(LAYERS)
               for package in packages if _within(module, package)]
    assert matches, f"{module} is in no layer of LAYERS"
    return max(matches)[1]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """`importer (layer) imports target (layer)` for every import of a higher layer."""
    return [f"{importer} ({LAYERS[layer_of(importer)][0]}) imports {target} "
            f"({LAYERS[layer_of(target)][0]})"
            for importer, targets in sorted(graph.items()) for target in sorted(targets)
            if layer_of(target) > layer_of(importer)]


def test_layer_finder_names_an_upward_import():
    graph = {"yoloq.records.jobs": {"work_pools.segments", "yoloq.domain.contract"},
             "work_pools.policy.rules": {"yoloq.domain.tiers"}, "yoloq.cli": {"flows.job"},
             "work_pools.segments": {"work_pools.policy.model"}}
    assert upward_imports(graph) == ["yoloq.records.jobs (stores) imports work_pools.segments (nodes)"]


def test_every_import_points_down_the_layers():
    found = upward_imports(import_graph(project_modules()))
    assert found == [], "imports of a higher layer: " + "; ".join(found)


def test_the_pure_policy_imports_only_the_domain():
    package, allowed = PURE_POLICY
    graph = import_graph(project_modules())
    found = [f"{m} imports {t}" for m, targets in sorted(graph.items()) if _within(m, package)
             for t in sorted(targets)
             if not _within(t, package) and not any(_within(t, a) for a in allowed)]
    assert found == [], "; ".join(found)
