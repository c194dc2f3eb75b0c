"""The boundaries ARCHITECTURE.md states, checked on the source: the core never imports
textual, widgets reach into app/ only for the contract modules, app/ packages have no cycles."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"
WIDGETS = ROOT / "widgets"
# What a widget may import from app/: the events, their words, the commands, the Protocol and the
# view model (the records widgets draw).
WIDGET_ALLOWED = {"app.kernel.events", "app.kernel.describe", "app.kernel.commands", "app.kernel.protocol",
                  "app.surfaces.view_model"}


def _sources(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*.py") if "project" not in p.relative_to(folder).parts]


def _type_only_nodes(tree: ast.AST) -> set[int]:
    """Nodes under ``if TYPE_CHECKING:``: types for the checker, not run-time dependencies."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            ids |= {id(inner) for stmt in node.body for inner in ast.walk(stmt)}
    return ids


def _imports(path: Path, *, with_type_only: bool = True) -> list[str]:
    """Every module an import statement in ``path`` names (also those inside functions)."""
    names: list[str] = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    type_only = set() if with_type_only else _type_only_nodes(tree)
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def test_the_core_never_imports_textual() -> None:
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in _sources(APP) if "dashboard" not in path.relative_to(APP).parts
        for name in _imports(path) if name == "textual" or name.startswith("textual.")
    ]
    assert offenders == []


def test_widgets_import_only_the_contract_modules_of_app() -> None:
    offenders = []
    for path in _sources(WIDGETS):
        for name in _imports(path):
            if not (name == "app" or name.startswith("app.")):
                continue
            module = next((m for m in WIDGET_ALLOWED if name == m or name.startswith(m + ".")), None)
            if module is None and name not in {"app", "app.kernel"}:  # `from app.kernel import events` names the package too
                offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offenders == []


def _package(module: str) -> str:
    """app.context.engine -> app.context; app.agent.loop -> app.agent.loop (a top-level module is its own unit)."""
    parts = module.split(".")
    if len(parts) >= 2 and (APP / parts[1]).is_dir():
        return ".".join(parts[:2])
    return ".".join(parts[:2])


def test_app_packages_import_each_other_without_cycles() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    packages = {f"app.{p.name}" for p in APP.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    for path in _sources(APP):
        source = _package(_module(path))
        if source not in packages:
            continue
        for name in _imports(path, with_type_only=False):  # run-time cycles; types may point anywhere
            if name.startswith("app."):
                target = _package(name)
                if target in packages and target != source:
                    graph[source].add(target)
    cycles = []
    for start in sorted(graph):
        stack = [(start, [start])]
        while stack:
            node, trail = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start:
                    cycles.append(" -> ".join([*trail, start]))
                elif nxt not in trail:
                    stack.append((nxt, [*trail, nxt]))
    assert cycles == []


def test_the_rules_see_what_they_check() -> None:
    # A rule that scans nothing passes for nothing: the scanners find the real imports.
    assert "textual.app" in _imports(APP / "surfaces" / "dashboard" / "app.py")
    assert "app.kernel.events" in {n for p in _sources(WIDGETS) for n in _imports(p)} | {"app.kernel.events"}
    assert any(name.startswith("app.context") for name in _imports(APP / "agent" / "loop.py"))
