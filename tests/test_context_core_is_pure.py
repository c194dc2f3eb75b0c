"""The engine split (issue 25): a pure core that decides, a service that runs what it decides.

Two kinds of checks. The source of the core (and of the modules it makes its values with)
is read with ``ast``: no I/O, no clock, no event loop, no provider, no session, no saved
files; and the service imports none of the decision-making modules, so a decision cannot
quietly move back into it. Then the core is driven alone, in plain synchronous tests
without an event loop, and its plans are run by the service with a summarizer that is a
plain async function: what the user confirmed (the plan's forecast) is what the
``compaction`` event reports.
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from typing import Any, Sequence

import pytest
from source_trees import ON_ONE_WORKER, tree
from test_ctx_support import filler, history_of, tool_round

from app.context.core import Appended, ContextCore, EngineConfig, Replaced, RestoreError
from app.context.engine import ContextEngine
from app.context.memory import MemoryBundle
from app.kernel.events import ChartPointEvent, CompactionEvent, ContextEvent, Event, MicroCompactionEvent
from app.kernel.messages import Message, ToolResultBlock
from app.kernel.usage import Usage

ROOT = Path(__file__).resolve().parents[1]
# The core and the modules whose values it hands out (plans and their forecasts).
PURE_MODULES = ["app/context/core.py", "app/context/plans.py", "app/context/forecast.py", "app/context/pins.py",
                "app/context/rewind.py"]

FORBIDDEN_IMPORTS = ("asyncio", "time", "os", "pathlib", "shutil", "subprocess", "socket", "threading",
                     "httpx", "tempfile", "io", "app.providers", "app.kernel.private_files", "app.session",
                     "app.agent", "app.wiring", "app.surfaces", "app.tools", "app.mcp")
# open(), and every method that reads or writes a file (SessionMemory.save/load included).
FORBIDDEN_CALLS = {"open", "print", "input", "save", "load", "read_text", "read_bytes", "write_text",
                   "write_bytes", "mkdir", "unlink", "resolve", "exists", "stat", "iterdir", "glob",
                   "open_private", "read_private", "write_private_atomic", "sleep", "create_task",
                   "get_running_loop", "get_event_loop", "run", "monotonic", "perf_counter"}
FORBIDDEN_CALL_ROOTS = {"time", "asyncio", "os", "datetime", "random", "subprocess"}

# What only the core may decide with: the service importing one of these is a decision moving back.
DECISION_MODULES = ("app.context.pruning", "app.context.audit", "app.context.summarizer", "app.context.overflow",
                    "app.context.thresholds", "app.context.forecast", "app.context.user_words")
DECISION_NAMES = {"compute_thresholds", "prune_by_time", "prune_by_size", "safe_cut", "audit_summary",
                  "build_summary_history", "forecast", "level", "summary_problem", "new_plan_id", "drop_oldest_rounds"}


def io_problems(source: str, name: str) -> list[str]:
    """Each way ``source`` could do I/O, read a clock or wait, named with its line."""
    problems: list[str] = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
        else:
            modules = []
        for module in modules:
            if any(module == bad or module.startswith(bad + ".") for bad in FORBIDDEN_IMPORTS):
                problems.append(f"{name}:{getattr(node, 'lineno', '?')}: imports {module}")
        if isinstance(node, (ast.AsyncFunctionDef, ast.Await, ast.AsyncFor, ast.AsyncWith)):
            problems.append(f"{name}:{node.lineno}: async code ({type(node).__name__})")
        if isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if called in FORBIDDEN_CALLS:
                problems.append(f"{name}:{node.lineno}: calls {called}()")
            root = func
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in FORBIDDEN_CALL_ROOTS and root is not func:
                problems.append(f"{name}:{node.lineno}: calls {ast.unparse(func)}()")
    return problems


def test_the_check_sees_io_clocks_and_waiting() -> None:
    # the checker itself: each of these is named (else the test below could pass on anything)
    source = ("import asyncio\nimport time\nfrom app.providers.base import Provider\n"
              "from app.kernel.private_files import open_private\nfrom pathlib import Path\n"
              "def f(memory, p):\n    open(p)\n    memory.save('', None)\n    time.time()\n"
              "    return asyncio.get_running_loop()\n"
              "async def g(x):\n    await x\n")
    found = "\n".join(io_problems(source, "x.py"))
    for expected in ("imports asyncio", "imports time", "imports app.providers.base",
                     "imports app.kernel.private_files", "imports pathlib", "calls open()", "calls save()",
                     "calls time.time()", "calls get_running_loop()", "async code"):
        assert expected in found, f"{expected!r} not reported in:\n{found}"


@pytest.mark.parametrize("path", PURE_MODULES)
def test_the_core_does_no_io_reads_no_clock_and_never_waits(path: str) -> None:
    problems = io_problems((ROOT / path).read_text(encoding="utf-8"), path)
    assert not problems, "the pure core grew I/O:\n" + "\n".join(problems)


@ON_ONE_WORKER
def test_the_service_makes_no_decision_of_its_own() -> None:
    service = tree(ROOT / "app/context/engine.py")
    found = []
    for node in ast.walk(service):
        if isinstance(node, ast.ImportFrom) and node.module:
            # their types (Forecast, PruneResult, Thresholds) are what the service is handed; their functions decide
            found += [f"line {node.lineno}: imports {a.name} from {node.module}" for a in node.names
                      if a.name in DECISION_NAMES or (node.module in DECISION_MODULES and not a.name[0].isupper())]
    # nor does it compare the projection with a line: whether to clear, compact or fall back is the core's
    found += [f"line {node.lineno}: reads {node.attr}" for node in ast.walk(service)
              if isinstance(node, ast.Attribute) and node.attr.endswith("_line")]
    assert not found, "decisions belong to app/context/core.py:\n" + "\n".join(found)


# ---- the core alone: no event loop, no files, the clock an argument ----

def core_of(history: Sequence[Message] = (), **config: Any) -> ContextCore:
    core = ContextCore(system_prompt="You are a coding agent.", memory=MemoryBundle([]), tools=[],
                       config=EngineConfig(window=config.pop("window", 100_000), budget=0, **config))
    for message in history:
        core.append(message, now=0.0)
    return core


def test_the_core_decides_an_idle_clearing_from_the_time_it_is_given() -> None:
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()  # this test runs without an event loop: the core needs none
    history = history_of(8, result_words=200)
    core = core_of(history, micro_idle_minutes=60.0, micro_keep_latest=2)
    core.last_assistant_at = 1_000.0
    assert core.prune_by_time(now=1_000.0 + 59 * 60) is None, "cleared before the idle pause was over"
    decided = core.prune_by_time(now=1_000.0 + 61 * 60)
    assert decided is not None and decided.results_cleared == 6
    assert core.history == history, "deciding changed the history"

    effects = core.clear_results(decided, "time", saved={})
    # persisted first, then what the user sees, in order: the clearing, its chart point, the gauge
    assert [type(e) for e in effects] == [Replaced, MicroCompactionEvent, ChartPointEvent, ContextEvent]
    replaced, cleared, point, gauge = effects
    assert isinstance(replaced, Replaced) and replaced.reason == "micro_compaction"
    assert replaced.history is core.history and len(core.history) == len(history)
    assert isinstance(cleared, MicroCompactionEvent) and cleared.results_cleared == 6
    assert isinstance(point, ChartPointEvent) and point.kind == "prune"
    assert isinstance(gauge, ContextEvent) and gauge.projected_tokens == point.tokens == core.projected()
    assert cleared.tokens_freed > 0 and gauge.projected_tokens < core.estimate_request(history)


def test_the_core_says_when_a_result_cannot_be_restored_in_one_line() -> None:
    core = core_of(history_of(2))
    with pytest.raises(RestoreError) as err:
        core.cleared_result("call_nope")
    # the user picked a line of the tool list: the words name no internal id, and say why
    assert str(err.value) == ("the result of that call is no longer in the live context "
                              "(it may have been compacted into a summary)")


def test_appending_returns_what_to_persist_and_a_server_compaction_replaces_the_history() -> None:
    core = core_of()
    typed = Message.typed_by_user("fix the test")
    assert core.append(typed, now=5.0) == [Appended(typed)]
    assert core.last_assistant_at is None
    reply = Message.assistant_text("on it")
    assert core.append(reply, now=7.5) == [Appended(reply)] and core.last_assistant_at == 7.5
    effects = core.append_user_text("and keep the API", (), now=8.0)
    assert len(effects) == 1 and isinstance(effects[0], Appended) and core.history[-1].role == "user"


# ---- what the core plans is what the service runs ----

class Log:
    """One ordered log of what was persisted and what was emitted."""

    def __init__(self) -> None:
        self.entries: list[Any] = []

    def append_message(self, message: Message) -> None:
        self.entries.append(("append", message))

    def replace_history(self, messages: Sequence[Message], reason: str) -> None:
        self.entries.append(("replace", reason))

    def emit(self, event: Event) -> None:
        self.entries.append(event)

    def events(self, kind: type) -> list[Any]:
        return [e for e in self.entries if isinstance(e, kind)]


def engine_with(history: Sequence[Message], log: Log, **config: Any) -> ContextEngine:
    engine = ContextEngine(system_prompt="You are a coding agent.", memory=MemoryBundle([]), tools=[],
                           config=EngineConfig(window=100_000, budget=0, **config), transcript=log, emit=log.emit)
    for message in history:
        engine.append(message)
    log.entries.clear()
    return engine


def test_the_summary_the_core_planned_is_what_runs_and_its_forecast_is_the_events() -> None:
    log = Log()
    engine = engine_with(history_of(10, result_words=400), log)
    core = engine.core
    plan = core.remember(core.plan_compaction(None, use_memory=True))  # what the confirmation shows
    assert plan.action == "compact" and plan.model_call and plan.messages_before == 21
    assert log.entries == [], "planning persisted or emitted something"
    requests: list[Any] = []

    async def summarize(request: Any) -> tuple[Message, Usage]:  # the injected model caller
        requests.append(request)
        return Message.assistant_text("SUMMARY: fixing tests/test_api.py; " + filler(60)), Usage(
            input_tokens=9_000, output_tokens=90)

    done = asyncio.run(engine.compact(summarize, "manual", plan=engine.take_plan(plan.id)))
    assert len(requests) == 1, "the planned summary did not call the model once"
    assert done.ok and not done.replanned and done.trigger == "manual"
    assert log.events(CompactionEvent) == [done]
    assert done.messages_before == plan.messages_before
    assert done.tokens_before == plan.forecast.tokens_before
    assert done.forecast_tokens_freed == plan.forecast.tokens_freed
    assert done.cache_tokens_invalidated == plan.forecast.cache_tokens_invalidated
    assert done.compaction_call_cost_usd == plan.forecast.operation_cost_usd
    assert "SUMMARY: fixing tests/test_api.py" in engine.history[0].text
    # persisted before anyone is told
    assert log.entries.index(("replace", "compaction")) < log.entries.index(done)


def test_a_memory_plan_from_the_core_runs_without_a_model_call() -> None:
    log = Log()
    history = history_of(12, result_words=400)
    engine = engine_with(history, log, memory_update_tokens=1_000, memory_keep_tokens=500)
    core = engine.core
    # the memory as a background update leaves it (text and coverage; its file is the service's)
    core.session_memory.text = "MEMORY: the task is tests/test_api.py; rounds 1-10 read the sources."
    core.session_memory.covered = core.history[-5]
    plan = core.remember(core.plan_compaction(None, use_memory=True))
    assert plan.action == "memory_compact" and not plan.model_call and plan.memory is not None

    async def summarize(request: Any) -> tuple[Message, Usage]:
        raise AssertionError("a compaction from the session memory called the model")

    done = asyncio.run(engine.compact(summarize, "manual", plan=engine.take_plan(plan.id)))
    assert done.ok and done.trigger == "memory" and not done.replanned
    assert done.messages_after == plan.messages_after == len(engine.history)
    assert done.forecast_tokens_freed == plan.forecast.tokens_freed
    assert done.tokens_before - done.tokens_after == plan.forecast.tokens_freed
    assert engine.history[1:] == plan.memory.history[1:] and "MEMORY: the task" in engine.history[0].text


def test_a_plan_made_before_the_history_moved_is_made_again_and_says_so() -> None:
    log = Log()
    engine = engine_with(history_of(6, result_words=300), log)
    plan = engine.core.remember(engine.core.plan_compaction(None, use_memory=True))
    for message in tool_round(1, 300):
        engine.append(message)
    taken = engine.take_plan(plan.id)
    assert taken.id != plan.id and taken.replanned and taken.messages_before == plan.messages_before + 2


def test_a_cut_tool_result_is_saved_by_the_service_where_the_core_said(tmp_path: Path) -> None:
    log = Log()
    engine = ContextEngine(system_prompt="s", memory=MemoryBundle([]), tools=[],
                           config=EngineConfig(window=20_000, budget=0), transcript=log, emit=log.emit,
                           tool_results_dir=tmp_path / "tool-results")
    (tmp_path / "tool-results").mkdir()
    for message in history_of(1):
        engine.append(message)
    big = ToolResultBlock(tool_use_id="call_big", content=filler(40_000, "BIG"))
    room = engine.core.room_for_result(big, [])
    assert room is not None and room < len(big.content)
    fitted = engine.fit_tool_result(big, "run_bash", [])
    saved = tmp_path / "tool-results" / "call_big.txt"
    assert fitted.full_output_path == str(saved) and saved.read_text(encoding="utf-8") == big.content
    assert len(fitted.content) <= room + 400  # the cut note's own words


# ---- not just file by file: what the pure modules import, all the way down ----

# Files a module reads or writes on disk (the data directory's, the session's): what the service
# does. Reading the encoder's bundled rank table (package data, like an import) is not among them.
FILE_IO_IMPORTS = ("app.kernel.private_files", "shutil", "tempfile", "io")
FILE_IO_CALLS = {"open", "write_text", "write_bytes", "save", "load", "mkdir", "unlink", "open_private",
                 "open_private_read", "write_private_atomic", "read_kept_json", "write_kept_json", "atexit"}
# What the core still imports that touches files: prices (the catalogue's lookups file),
# session_memory (SessionMemory.save/load), rules (rule files). Each holds a pure part the core
# uses (Price and cost_usd, the memory's text, a rule's paths) beside its I/O. This list only shrinks.
CORE_IMPORTS_WITH_IO = {"app.context.prices", "app.context.session_memory", "app.context.rules"}


def _module_path(module: str) -> Path | None:
    path = ROOT / (module.replace(".", "/") + ".py")
    return path if path.exists() else None


def _app_imports(path: Path) -> set[str]:
    """The app modules ``path`` imports, at module level or inside a function (TYPE_CHECKING
    imports are types, never run)."""
    module = tree(path)
    type_only = {id(n) for node in ast.walk(module) if isinstance(node, ast.If)
                 and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
                 for stmt in node.body for n in ast.walk(stmt)}
    found: set[str] = set()
    for node in ast.walk(module):
        if id(node) in type_only:
            continue
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                 if isinstance(node, ast.ImportFrom) and node.module else [])
        found |= {name for name in names if name.startswith("app.") and _module_path(name) is not None}
    return found


def import_closure(module: str, stop_at: set[str] = frozenset()) -> set[str]:  # type: ignore[assignment]
    """Every app module ``module`` imports, directly or not (not followed past ``stop_at``)."""
    seen, todo = set(), [module]
    while todo:
        current = todo.pop()
        if current in seen or (path := _module_path(current)) is None:
            continue
        seen.add(current)
        if current not in stop_at:
            todo += sorted(_app_imports(path) - seen)
    return seen - {module}


def file_io(module: str) -> list[str]:
    path = _module_path(module)
    assert path is not None
    found = []
    for node in ast.walk(tree(path)):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        found += [f"{module}:{node.lineno} imports {n}" for n in names  # type: ignore[attr-defined]
                  if any(n == bad or n.startswith(bad + ".") for bad in FILE_IO_IMPORTS)]
        if isinstance(node, ast.Call):
            called = node.func.id if isinstance(node.func, ast.Name) else (
                node.func.attr if isinstance(node.func, ast.Attribute) else "")
            if called in FILE_IO_CALLS:
                found.append(f"{module}:{node.lineno} calls {called}()")
    return found


@ON_ONE_WORKER
@pytest.mark.parametrize("module", ["app.context.accounting", "app.context.pruning", "app.context.core"])
def test_the_pure_modules_import_nothing_that_touches_files(module: str) -> None:
    allowed = CORE_IMPORTS_WITH_IO if module == "app.context.core" else set()
    closure = import_closure(module, allowed)
    assert "app.context.tokens" in closure  # the scan follows imports (every one of these counts tokens)
    problems = [p for m in sorted(closure - allowed) for p in file_io(m)]
    assert problems == [], f"{module} imports, directly or not, a module that touches files:\n" + "\n".join(problems)
    gone = sorted(allowed - closure) if allowed else []
    assert gone == [], "no longer imported by the core, remove from CORE_IMPORTS_WITH_IO: " + ", ".join(gone)


@ON_ONE_WORKER
def test_the_closure_scan_names_a_module_that_writes_files() -> None:
    assert any("write_kept_json" in p for p in file_io("app.context.token_pieces"))
    assert "app.kernel.private_files" in import_closure("app.context.token_pieces")


def test_a_forecast_leaves_the_accounting_as_the_last_request_left_it() -> None:
    core = core_of(history_of(6, result_words=300))
    core.projection()  # the estimate of the request just sent, which its usage is checked against
    before = (core.accounting._request_estimate, core.accounting._request_growth, core.accounting._sums.total,
              core.accounting._sums.length, core.accounting._sums.source)
    core.append(Message.user("one more thing"), now=0.0)
    core.forecast_compaction(None)
    core.forecast_reset()
    after = (core.accounting._request_estimate, core.accounting._request_growth, core.accounting._sums.total,
             core.accounting._sums.length, core.accounting._sums.source)
    assert after == before
