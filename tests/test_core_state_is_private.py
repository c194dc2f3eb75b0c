"""The context core's state changes only through the core's own methods: no module outside
app/context/core.py assigns a field of the core, whether through the engine
(``engine.tools = ...``) or the core itself (``engine.core.thresholds = ...``). The engine offers
methods (``use_tools``, ``load_history``, ``use_server_compaction``...) and read-only views."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from source_trees import ON_ONE_WORKER, python_files, tree

from app.context.core import ContextCore
from app.context.engine import ContextEngine, EngineConfig
from app.context.memory import MemoryBundle

ROOT = Path(__file__).resolve().parent.parent
pytestmark = ON_ONE_WORKER
CORE = ROOT / "app" / "context" / "core.py"
# Production code and the benchmarks; tests may tune an engine's config for a scenario.
SCANNED = [ROOT / "app", ROOT / "benchmarks"]


def _core_state() -> set[str]:
    """Every attribute ContextCore keeps: its fields and what its methods set on ``self``."""
    core = next(n for n in tree(CORE).body if isinstance(n, ast.ClassDef) and n.name == "ContextCore")
    names = {stmt.target.id for stmt in core.body
             if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)}
    for node in ast.walk(core):
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
        names |= {t.attr for t in targets if isinstance(t, ast.Attribute)
                  and isinstance(t.value, ast.Name) and t.value.id == "self"}
    return names


def _chain(node: ast.expr) -> list[str]:
    """``a.engine.core.tools`` -> ["a", "engine", "core", "tools"] (calls and subscripts end it)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return parts[::-1]


def _writes_core_state(target: ast.expr, state: set[str]) -> bool:
    chain = _chain(target)
    return any(owner in {"engine", "core"} and name in state for owner, name in zip(chain, chain[1:]))


def core_state_writes(source: str | ast.Module, state: set[str]) -> list[int]:
    """The lines of ``source`` (or of its tree) that assign a field of the core from outside it."""
    lines = []
    for node in ast.walk(ast.parse(source) if isinstance(source, str) else source):
        if not isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            for item in (target.elts if isinstance(target, ast.Tuple) else [target]):
                if _writes_core_state(item, state):
                    lines.append(node.lineno)
    return lines


def test_no_module_outside_the_core_assigns_its_state() -> None:
    state = _core_state()
    assert {"history", "tools", "thresholds", "accounting", "config", "memory_new_tokens"} <= state
    offenders = [f"{path.relative_to(ROOT)}:{line}"
                 for folder in SCANNED for path in python_files(folder, with_demo_project=True) if path != CORE
                 for line in core_state_writes(tree(path), state)]
    assert offenders == [], "the core's state assigned from outside it (use a method of the engine):\n" + \
        "\n".join(offenders)


def test_the_scanner_finds_each_shape_of_write() -> None:
    state = _core_state()
    for line in ("engine.tools = []", "agent.engine.history = h", "engine.core.thresholds = t",
                 "self.engine.config.server_compaction = True", "engine.core.memory_new_tokens += 1",
                 "engine.tool_owner, x = f, 1"):
        assert core_state_writes(line, state) == [1], line
    for line in ("engine.transcript = w", "tools = engine.tools", "self.tools = []", "engine.use_tools([])"):
        assert core_state_writes(line, state) == [], line


def test_the_engine_shows_the_core_state_read_only() -> None:
    engine = ContextEngine(system_prompt="", memory=MemoryBundle([]), tools=[], config=EngineConfig(window=1_000, budget=0))
    assert isinstance(engine.core, ContextCore) and engine.tools is engine.core.tools
    with pytest.raises(AttributeError):
        engine.tools = []  # type: ignore[misc]
    engine.use_tools([])
    assert engine.tools == []


def late_wiring(source: str | ast.Module) -> list[int]:
    """Lines assigning a part's ``emit`` or a provider's ``stream`` after it was built (in a source
    or its tree)."""
    lines = []
    for node in ast.walk(ast.parse(source) if isinstance(source, str) else source):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                chain = _chain(target)
                if len(chain) >= 2 and (chain[-1] == "emit" and chain[-2] != "self"
                                        or chain[-2:] == ["provider", "stream"]):
                    lines.append(node.lineno)
    return lines


def test_emit_and_the_model_stream_are_given_when_a_part_is_built() -> None:
    # The engine and the loop get one EventSink at construction, the session connects to it;
    # model calls are timed by Agent.model_stream, not by wrapping the provider's method.
    assert late_wiring("agent.emit = stream.emit\nsub.emit = f\nagent.provider.stream = t(x)") == [1, 2, 3]
    assert late_wiring("self.emit = emit\nevents.connect(stream.emit)") == []
    offenders = [f"{path.relative_to(ROOT)}:{line}" for path in python_files(ROOT / "app", with_demo_project=True)
                 for line in late_wiring(tree(path))]
    assert offenders == [], "wired after construction:\n" + "\n".join(offenders)
