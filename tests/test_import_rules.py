"""The boundaries ARCHITECTURE.md states, checked on the source: the core never imports
textual, widgets reach into app/ only for the contract modules, app/'s packages form
layers, and no two modules of app/ import each other (not even from inside a function).

The layers, bottom to top (a package may import the ones below it, never one above):

  kernel, system                  import nothing from app/ (system: OS process helpers)
  context, providers, tools, mcp  kernel, system, and each other without a cycle between packages
  agent                           the above
  session                         agent and below
  demo                            a provider plug-in: anything below surfaces; nothing imports it
  surfaces                        kernel, system, and the parts of session behind the Protocol
  wiring                          everything (app/__init__ and app/__main__ count as wiring); it
                                  builds the sessions (also the session process's) and hands
                                  them to the surfaces

Imports under ``if TYPE_CHECKING:`` count for the layers (a type from above is knowledge
from above) and for the cycles: they never run, but each module still needs the other to be
understood or changed.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

from source_trees import ON_ONE_WORKER, python_files, tree

ROOT = Path(__file__).resolve().parent.parent
pytestmark = ON_ONE_WORKER
APP = ROOT / "app"
WIDGETS = ROOT / "widgets"
# What a widget may import from app/: the events, their words, the commands, the Protocol and the
# view model (the records widgets draw).
# session_states, tool_calls and conversation_view are parts of events and the view model kept free of pydantic
# (the first frame's).
WIDGET_ALLOWED = {"app.kernel.events", "app.kernel.describe", "app.kernel.commands", "app.kernel.protocol",
                  "app.surfaces.view_model", "app.kernel.session_states", "app.surfaces.tool_calls",
                  "app.surfaces.conversation_view"}

LAYER_OF = {
    "app.kernel": 0, "app.system": 0,
    "app.context": 1, "app.providers": 1, "app.tools": 1, "app.mcp": 1,
    "app.agent": 2,
    "app.session": 3,
    "app.demo": 4,
    "app.surfaces": 5,
    "app.wiring": 6,
}
# The packages of one layer that may import each other (without a cycle between them).
SIBLING_LAYERS = {1}
# The bottom packages: neither imports the other (nor anything else of app/).
BOTTOM = {"app.kernel", "app.system"}
# What a surface may take from the session layer: the process behind the Protocol (the
# dashboard starts its session there). Everything else it gets through events, or from the CLI
# (headless mode's session, the list of sessions on disk for --resume's picker).
SURFACE_MAY_IMPORT_FROM_SESSION = {"app.session.process"}

# Imports that break the layers today, each with the reason it could not be fixed yet. The test
# fails on any other, and on an entry here that no longer happens (so this list only shrinks).
KNOWN_LAYER_BREAKS: set[tuple[str, str]] = set()


def _sources(folder: Path) -> list[Path]:
    return python_files(folder)


def _type_only_nodes(tree: ast.AST) -> set[int]:
    """Nodes under ``if TYPE_CHECKING:``: types for the checker, not run-time dependencies."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            ids |= {id(inner) for stmt in node.body for inner in ast.walk(stmt)}
    return ids


def _imports(path: Path, *, with_type_only: bool = True) -> list[str]:
    """Every module an import statement in ``path`` names (also those inside functions)."""
    return list(_imports_of(path, with_type_only))


@lru_cache(maxsize=None)  # each rule walks every module: one walk per module and kind, not one per rule
def _imports_of(path: Path, with_type_only: bool) -> tuple[str, ...]:
    names: list[str] = []
    module = tree(path)
    type_only = set() if with_type_only else _type_only_nodes(module)
    for node in ast.walk(module):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return tuple(names)


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _app_modules() -> dict[str, Path]:
    return {_module(path): path for path in _sources(APP)}


def _imported_modules(path: Path, modules: dict[str, Path], *, with_type_only: bool) -> set[str]:
    """The modules of app/ that ``path`` imports: ``from app.system import proctree`` is
    app.system.proctree, ``from app.tools.base import Tool`` is app.tools.base."""
    found = set()
    for name in _imports(path, with_type_only=with_type_only):
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name.startswith("app."):
            found.add(name)
    return found


def _package(module: str) -> str:
    """app.context.engine -> app.context; app.__main__ and app itself -> app.wiring (entry points)."""
    parts = module.split(".")
    if len(parts) >= 2 and (APP / parts[1]).is_dir():
        return ".".join(parts[:2])
    return "app.wiring"


def _layer_break(source: str, target: str) -> str | None:
    """Why ``source`` may not import ``target`` (None: it may)."""
    here, there = _package(source), _package(target)
    if here == there:
        return None
    if there == "app.demo":
        return "nothing imports the demo plug-in (factory.py names it by a string)"
    if here == "app.surfaces":
        if there in BOTTOM or target in SURFACE_MAY_IMPORT_FROM_SESSION:
            return None
        return (f"a surface imports only kernel, system and {', '.join(sorted(SURFACE_MAY_IMPORT_FROM_SESSION))}"
                " (everything else reaches it as events)")
    if LAYER_OF[there] < LAYER_OF[here] or (LAYER_OF[there] == LAYER_OF[here] and LAYER_OF[here] in SIBLING_LAYERS):
        return None
    if here in BOTTOM:
        return f"{here.removeprefix('app.')} imports nothing from app/"
    return f"{here} (layer {LAYER_OF[here]}) may not import {there} (layer {LAYER_OF[there]}): it is above"


def _layer_breaks() -> dict[tuple[str, str], str]:
    modules = _app_modules()
    breaks = {}
    for source, path in modules.items():
        for target in _imported_modules(path, modules, with_type_only=True):
            if (why := _layer_break(source, target)) is not None:
                breaks[(source, target)] = why
    return breaks


def _cycles(graph: dict[str, set[str]]) -> list[str]:
    """Each cycle of ``graph`` once, as "a -> b -> a" (from its smallest node)."""
    cycles = []
    for start in sorted(graph):
        stack = [(start, [start])]
        while stack:
            node, trail = stack.pop()
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    cycles.append(" -> ".join([*trail, start]))
                elif nxt not in trail and nxt > start:
                    stack.append((nxt, [*trail, nxt]))
    return cycles


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


def test_app_packages_import_only_the_layers_below_them() -> None:
    breaks = _layer_breaks()
    new = sorted(f"{modules[0]} imports {modules[1]}: {why}" for modules, why in breaks.items()
                 if modules not in KNOWN_LAYER_BREAKS)
    assert new == [], "imports across the layers (see this file's docstring):\n" + "\n".join(new)
    gone = sorted(f"{a} -> {b}" for a, b in KNOWN_LAYER_BREAKS - breaks.keys())
    assert gone == [], "fixed, remove from KNOWN_LAYER_BREAKS:\n" + "\n".join(gone)


def test_the_packages_of_one_layer_import_each_other_without_cycles() -> None:
    modules = _app_modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for source, path in modules.items():
        for target in _imported_modules(path, modules, with_type_only=True):
            here, there = _package(source), _package(target)
            if here != there and LAYER_OF[here] == LAYER_OF[there]:
                graph[here].add(there)
    cycles = _cycles(graph)
    assert cycles == [], "packages of one layer in a cycle:\n" + "\n".join(cycles)


def test_the_context_engine_knows_no_provider() -> None:
    # Wire formats stay in providers: the engine builds a ``ModelRequest`` (app.kernel) and
    # switches server-side management through ``Provider.server_context()``, which the agent
    # layer calls; a type from a provider, even under TYPE_CHECKING, would be wire knowledge.
    modules = _app_modules()
    offenders = sorted(f"{source} imports {target}" for source, path in modules.items()
                       if _package(source) == "app.context"
                       for target in _imported_modules(path, modules, with_type_only=True)
                       if _package(target) == "app.providers")
    assert offenders == [], "app/context imports a provider:\n" + "\n".join(offenders)


def test_no_two_modules_of_app_import_each_other() -> None:
    # Imports inside functions and under TYPE_CHECKING count: a lazy or type-only import hides a
    # cycle from the interpreter, not from the reader (each module needs the other to be
    # understood or changed).
    modules = _app_modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for source, path in modules.items():
        for target in _imported_modules(path, modules, with_type_only=True):
            # A package's __init__ is not a dependency: importing app.x.y runs it anyway.
            if target != source and target not in {_package(source), "app"}:
                graph[source].add(target)
    cycles = _cycles(graph)
    assert cycles == [], "modules in a cycle (imports inside functions count):\n" + "\n".join(cycles)


def test_the_rules_see_what_they_check() -> None:
    # A rule that scans nothing passes for nothing: each scanner finds a real import of each kind.
    assert "textual.app" in _imports(APP / "surfaces" / "dashboard" / "app.py")
    assert "app.kernel.events" in {n for p in _sources(WIDGETS) for n in _imports(p)}
    modules = _app_modules()
    loop = _imported_modules(APP / "agent" / "loop.py", modules, with_type_only=False)
    assert "app.context.engine" in loop
    # A lazy import inside a function is seen (registry.py imports the tools it registers there).
    assert "app.tools.files" in _imported_modules(APP / "tools" / "registry.py", modules, with_type_only=False)
    # `from package import module` is the module, and an import under TYPE_CHECKING is only a type.
    assert "app.system.proctree" in _imported_modules(APP / "wiring" / "cli.py", modules, with_type_only=False)
    headless = APP / "surfaces" / "headless.py"
    assert "app.kernel.protocol" not in _imported_modules(headless, modules, with_type_only=False)
    assert "app.kernel.protocol" in _imported_modules(headless, modules, with_type_only=True)


def test_the_rules_name_what_breaks_them() -> None:
    # Each judge says no to what it is there to refuse, naming it.
    assert _layer_break("app.kernel.describe", "app.agent.permissions") == "kernel imports nothing from app/"
    assert _layer_break("app.system.proctree", "app.kernel.events") == "system imports nothing from app/"
    assert _layer_break("app.surfaces.headless", "app.system.process_exit") is None
    assert "events" in (_layer_break("app.surfaces.headless", "app.wiring.runtime") or "")
    assert _layer_break("app.mcp.client", "app.system.watchdog") is None
    assert "events" in (_layer_break("app.surfaces.dashboard.launch", "app.session.store") or "")
    assert "above" in (_layer_break("app.providers.plugin", "app.wiring.config") or "")
    assert "events" in (_layer_break("app.surfaces.headless", "app.agent.loop") or "")
    assert "demo" in (_layer_break("app.wiring.config", "app.demo.plugin") or "")
    assert _layer_break("app.wiring.runtime", "app.agent.loop") is None
    assert _layer_break("app.tools.registry", "app.context.truncation") is None
    assert _cycles({"a": {"b"}, "b": {"a", "c"}, "c": set()}) == ["a -> b -> a"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def _modules_named_in_strings(path: Path) -> list[str]:
    """The modules ``path`` names in a string rather than an import: looked up in ``sys.modules``
    (``sys.modules.get("app.system.proctree")``: used only if something else loaded it), run with
    ``-m`` (a ``*_MODULE`` constant or the item after ``"-m"`` in a command line)."""
    names: list[object] = []
    for node in ast.walk(tree(path)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "modules"
                and node.args and isinstance(node.args[0], ast.Constant)):
            names.append(node.args[0].value)
        elif (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
              and any(isinstance(t, ast.Name) and t.id.endswith("_MODULE") for t in node.targets)):
            names.append(node.value.value)
        elif isinstance(node, ast.List):
            items = node.elts
            names += [after.value for before, after in zip(items, items[1:])
                      if isinstance(before, ast.Constant) and before.value == "-m" and isinstance(after, ast.Constant)]
    return [name for name in names if isinstance(name, str) and name.startswith("app.")]


def test_every_module_app_names_in_a_string_exists() -> None:
    # A moved module leaves no import error behind where it is named in a string: the exit
    # paths' sys.modules lookups would find nothing and end no process, the session process
    # would not start (issue 25 moved proctree to app.system and the child main to app.wiring).
    modules = _app_modules()
    named = {(str(path.relative_to(ROOT)), name) for path in _sources(APP) for name in _modules_named_in_strings(path)}
    assert ("app/session/process.py", "app.wiring.session_child") in named, "the scanner missed the -m module"
    assert ("app/system/process_exit.py", "app.system.proctree") in named, "the scanner missed a sys.modules lookup"
    missing = sorted(f"{where} names {name}" for where, name in named if name not in modules)
    assert missing == [], "modules named in strings that do not exist:\n" + "\n".join(missing)
