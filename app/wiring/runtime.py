"""Wiring: settings in, a ready Agent out (shared by headless mode and the dashboard)."""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Sequence, TypeGuard

from app.agent.loop import Agent, AgentOptions, Approver, quiet_model_call
from app.agent.subagent import SubAgentLimits, register_task_tool
from app.agent.server_context import configure_server_context, switch_server_compaction
from app.session.agent_session import AgentSession, Closable, EventStream, transcript_recorder
from app.wiring.config import (
    Settings,
    api_key_for,
    exposed_keys_warning,
    looks_like_a_key,
    missing_key_problem,
    provider_key_env_names,
    resolve_provider,
)
from app.context.engine import ContextEngine, EngineConfig
from app.context.file_cache import FileReadCache
from app.context.memory import ImportApprovals, ImportPolicy, MemoryBundle, find_repo_root, load_memory
from app.context.prices import assumed_price_warning, price_for, remember_lookups_in
from app.context.kept_ranks import merge_over_kept_ranks
from app.context.token_pieces import remember_pieces_in
from app.context.thresholds import assumed_window_warning, context_window_for
from app.kernel.errors import ConfigError, SetupError
from app.system import startup
from app.tools.sandbox import policy_for, start_check
from app.agent.permissions import Permissions, RuleError, load_permissions
from app.kernel.event_sink import EventSink
from app.kernel.events import ChartPointEvent, Event, PromptCacheOffEvent, ServerCompactionEvent, SessionInfoEvent, UsageEvent
from app.kernel.protocol import Listener
from app.providers.factory import open_provider
from app.kernel.redact import register_secret
from app.kernel.usage import Usage
from app.kernel.request_store import RequestStore
from app.session.store import Session, SessionStore
from app.tools.file_history import FileHistory
from app.tools.base import SavedOutputBudget, ToolContext
from app.tools.registry import default_registry
from app.session.transcript import TranscriptWriter, restore

if TYPE_CHECKING:  # imported when a server is configured or a provider streams over HTTP, not with every session
    from app.mcp.client_features import ClientRequests
    from app.mcp.hub import McpHub
    from app.providers.http_base import SseHttpProvider

SYSTEM_PROMPT = """You are tidegauge, a coding agent working in the user's terminal.
Working directory: {cwd}
Platform: {platform}

Tools: read_file, list_files, run_bash, write_file, edit_file, and task (a sub-agent that investigates a side
question in a fresh context and reports back) when offered. Paths are relative to the working directory.
- Read files with read_file (with offset/limit for big ones), never with cat through run_bash.
- Tool output over the limit is cut head+tail with a notice: follow the notice (grep, head/tail,
  read_file with offset/limit on the saved file) instead of repeating the same command.
- edit_file needs a fresh read_file of the file first.
- Your context is managed: old tool results may be cleared and the conversation may be compacted
  into a summary. Re-read files when you need their exact content.
Be concise. When the task is done, say what you did and what you verified."""


@dataclass
class MemorySource:
    """Where the session's memory files come from, and the user's answers about imports
    outside the repository: loaded at start and again after an answer."""

    settings: Settings
    workspace: Path
    # Why the remembered answers were not read (a symlink planted at their file), one line.
    refused: str | None = None

    @property
    def project(self) -> Path:
        return find_repo_root(self.workspace) or self.workspace

    @property
    def approvals(self) -> ImportApprovals:
        return ImportApprovals(self.settings.data_dir_path, self.project)

    def allowed_by_config(self) -> list[Path]:
        """memory_allowed_imports: "~" expanded, relative entries from the repository's root."""
        return [self.project / Path(entry).expanduser() for entry in self.settings.memory_allowed_imports]

    def load(self) -> MemoryBundle:
        approvals = self.approvals
        approved, declined = approvals.decisions()
        self.refused = approvals.refused
        policy = ImportPolicy.for_workspace(self.workspace, self.settings.config_dir,
                                            data_dir=self.settings.data_dir_path,
                                            allowed=[*self.allowed_by_config(), *approved], declined=declined)
        return load_memory(self.workspace, self.settings.config_dir, policy=policy)

    def record(self, path: str, approve: bool) -> None:
        self.approvals.record(Path(path), approve)


def _permissions(settings: Settings, workspace: Path, project: Path) -> Permissions:
    """The rules in force: a bad one, wherever it is written, is one line at start."""
    try:
        return load_permissions(workspace=workspace, project=project,
                                config_rules=settings.permissions.model_dump(),
                                allowed_tools=settings.allowed_tools, disallowed_tools=settings.disallowed_tools,
                                data_dir=settings.data_dir_path)
    except RuleError as error:
        raise ConfigError(f"config: {error}") from None


def _register_mcp_secrets(settings: Settings) -> None:
    """A value handed to an MCP server that looks like a key is a secret from the start: the
    request scrub replaces it even before (or without) the server starting."""
    if not settings.mcp_servers:
        return
    from app.mcp.hub import _SECRET_NAME  # the hub's own rule, applied when a server starts

    for server in settings.mcp_servers.values():
        for name, value in server.env.items():
            if _SECRET_NAME.search(name) or looks_like_a_key(value):
                register_secret(value)


def _tool_env(settings: Settings) -> dict[str, str]:
    """The environment of run_bash: the user's, minus every provider key (also a custom --api-key-env)."""
    hidden = provider_key_env_names(settings)  # run_bash drops anything that looks like a key as well
    return {k: v for k, v in os.environ.items() if k not in hidden}


def build_agent(settings: Settings, *, emit: Listener | None = None, approver: Approver | None = None,
                resume: str | None = None, continue_latest: bool = False,
                cwd: Path | None = None) -> Agent:
    """A ready agent whose events are recorded in its transcript, then passed to ``emit``
    (tests drive the agent directly; surfaces go through ``build_session``)."""
    return _build(settings, emit=emit, approver=approver, resume=resume, continue_latest=continue_latest,
                  cwd=cwd).agent


def _streams_over_http(provider: object) -> TypeGuard[SseHttpProvider]:
    """Is ``provider`` an ``SseHttpProvider``? Asked without importing its module: a provider of
    that class exists only once the module is loaded, and a session whose provider does not
    stream over HTTP (the demo's) then never loads it, nor httpx with it (a tenth of its start)."""
    http_base = sys.modules.get("app.providers.http_base")
    return http_base is not None and isinstance(provider, http_base.SseHttpProvider)


def build_session(settings: Settings, *, approvals: bool, resume: str | None = None,
                  continue_latest: bool = False, cwd: Path | None = None) -> AgentSession:
    """The session a surface drives: ``approvals`` when the surface answers approval requests."""
    built = _build(settings, resume=resume, continue_latest=continue_latest, cwd=cwd)
    agent = built.agent

    async def start_services() -> Closable | None:
        if not settings.mcp_servers:
            return None
        # The MCP hub (and its client) loads only when servers are configured.
        from app.mcp.hub import tools_loaded_before

        return await start_session_mcp(agent, settings, requests=session.client_requests,
                                       loaded_before=tools_loaded_before(built.restored))

    session = AgentSession(agent, stream=built.stream, info=built.info, restored=built.restored,
                           approvals=approvals and not settings.yes, services=start_services,
                           memory_source=built.memory_source, asks_about_imports=approvals)
    session.config_warnings.extend(built.warnings)
    session.repairs = built.repairs
    startup.started()  # what start-up made lives as long as the session: never scanned again
    return session


@dataclass
class _Built:
    agent: Agent
    stream: EventStream
    info: SessionInfoEvent
    restored: list[Event]
    # (setting, words): settings that cannot work as set, said once when the session starts
    warnings: list[tuple[str, str]] = field(default_factory=list)
    # what restoring a damaged transcript repaired, one line each
    repairs: list[str] = field(default_factory=list)
    memory_source: MemorySource | None = None


def _build(settings: Settings, *, emit: Listener | None = None, approver: Approver | None = None,
           resume: str | None = None, continue_latest: bool = False, cwd: Path | None = None) -> _Built:
    cwd = (cwd or Path.cwd()).resolve()
    if settings.sandbox != "off":
        start_check()  # a bwrap run (10-35 ms), off the path to the first request
    provider_name = resolve_provider(settings)
    store = SessionStore(settings.data_dir_path)

    session: Session | None = None
    if resume:
        session = store.open(resume)
    elif continue_latest:
        session = store.latest_for(cwd)
        if session is None:
            raise SetupError(f"--continue: no earlier session for {cwd}")

    key = api_key_for(settings, provider_name)
    if (problem := missing_key_problem(settings, provider_name)) is not None:
        raise SetupError(problem)
    if key:
        register_secret(key)

    registry = default_registry(settings.max_output)
    if session is None:
        session = store.create(cwd, provider_name, settings.model or "")

    # The provider and what it brings: a plug-in may give a workspace, default limits and tools.
    setup = open_provider(provider_name, settings, key, session_dir=session.dir)
    provider = setup.provider
    if session.meta.model != provider.model and not (resume or continue_latest):
        store.record_model(session, provider.model)  # the model itself, not "" for the usual one
    workspace = setup.workspace or cwd
    for extra in setup.tools:
        registry.register(extra.tool, max_output=extra.max_output)
    remember_lookups_in(settings.data_dir_path / "catalogue-lookups.json")
    pieces_dropped = remember_pieces_in(settings.data_dir_path / "token-pieces.json")
    merge_over_kept_ranks()  # new pieces merged over the rank table sorted once, not a dict made per process
    window = settings.window
    if window is None:
        window = setup.default_window or context_window_for(provider.model)
    budget = settings.budget
    if setup.default_budget is not None and "budget" not in settings.model_fields_set:
        budget = setup.default_budget

    memory_source = MemorySource(settings, workspace)
    permissions = _permissions(settings, workspace, memory_source.project)
    memory = memory_source.load()
    _register_mcp_secrets(settings)
    system = SYSTEM_PROMPT.format(cwd=workspace, platform=platform.system())
    # a resumed session's outputs already saved count too; the engine's saved pastes count with them
    saved_output_budget = SavedOutputBudget.for_folder(session.tool_results_dir, settings.max_session_saved_output)
    events = EventSink()  # the engine's and the agent's, connected to the session's stream below
    engine = ContextEngine(
        system_prompt=system,
        emit=events,
        memory=memory,
        tools=registry.specs(),
        config=EngineConfig(window=window, budget=budget, compact_max_output=settings.compact_max_output,
                            memory_init_tokens=settings.memory_init_tokens,
                            memory_update_tokens=settings.memory_update_tokens,
                            memory_update_tool_calls=settings.memory_update_tool_calls,
                            memory_keep_tokens=settings.memory_keep_tokens),
        price=price_for(provider.model, settings.prices, provider_price=setup.price),
        compact_price=price_for(provider.model, settings.prices, provider_price=setup.price),
        tool_results_dir=session.tool_results_dir,
        saved_budget=saved_output_budget,
    )
    if _streams_over_http(provider):  # a server cannot make one call unbounded in memory or time
        # Only a provider over HTTP has limits to set: its module (and httpx) is loaded already.
        from app.providers.sse import StreamLimits

        provider.limits = StreamLimits.from_settings(settings)
    # Provider-side context management: thresholds from ours, unsupported options said once.
    warnings = [("server context", line) for line in configure_server_context(provider, engine, settings)]
    # Path-scoped rules: loaded only when a matching file is read or edited; unreadable ones said once.
    rules = memory.rules
    assert rules is not None  # load_memory read them with the memory files, under the same policy
    engine.use_rules(rules, workspace)
    warnings += [("rules", f"{problem}; that rule is not loaded") for problem in rules.problems]
    if pieces_dropped is not None:
        warnings.append(("token pieces", pieces_dropped))
    if memory_source.refused is not None:
        warnings.append(("memory imports", f"{memory_source.refused}; imports you answered about are asked again"))
    if (exposed := exposed_keys_warning(settings)) is not None:
        warnings.append(("api_keys", exposed))
    # A model the price catalogue does not know: what was assumed, once, with the setting that changes it.
    if settings.window is None and not setup.default_window and (assumed := assumed_window_warning(provider.model)):
        warnings.append(("window", assumed))
    if (unpriced := assumed_price_warning(provider.model, settings.prices,
                                              provider_price=setup.price)) is not None:
        warnings.append(("prices", unpriced))
    restored_events: list[Event] = []
    last_seq = 0  # of the restored events: this run numbers on after it
    measured: tuple[int, int] | None = None
    repairs: list[str] = []
    # The session's lock first (the writer holds it), then its history: read before the lock, the
    # history could miss a turn another process was writing, and this run's "resume" history line
    # would then drop that turn and leave its prompt beside this one (two tasks in one message).
    transcript = TranscriptWriter(session.transcript_path)
    try:
        if resume or continue_latest:
            state = restore(session)
            engine.load_history(state.history)
            restored_events = list(state.events)
            last_seq = state.last_seq
            measured = state.measured
            repairs = list(state.warnings)
            for event in restored_events:
                if isinstance(event, UsageEvent):
                    engine.ledger.add(event.agent, Usage(event.input_tokens, event.cache_read_tokens,
                                                         event.cache_write_tokens, event.output_tokens,
                                                         reasoning_tokens=event.reasoning_tokens),
                                      event.cost_usd)
    except BaseException:
        transcript.close()
        raise
    engine.transcript = transcript
    if resume or continue_latest:
        # The repaired live history becomes the starting point of this run.
        transcript.replace_history(engine.history, "resume")

    tool_context = ToolContext(
        workspace=workspace,
        tool_results_dir=session.tool_results_dir,
        allow_outside=settings.allow_outside,
        env=_tool_env(settings),
        file_cache=FileReadCache(),
        max_saved_output=settings.max_saved_output,
        read_max_bytes=settings.read_max_bytes,
        saved_output_budget=saved_output_budget,
        # tidegauge's own folders are hidden from commands with the user's key stores
        sandbox=policy_for(settings.sandbox, settings.sandbox_network,
                           (settings.data_dir_path, settings.config_dir)),
        # before-images of the files write_file/edit_file change, for a rewind (in the session folder)
        file_history=FileHistory(session.tool_results_dir.parent, workspace),
    )
    if (unsandboxed := tool_context.sandbox.start_warning()) is not None:
        warnings.append(("sandbox", unsandboxed))
    label = provider.label
    agent = Agent(
        provider=provider,
        registry=registry,
        engine=engine,
        tool_context=tool_context,
        options=AgentOptions(max_steps=settings.max_steps, max_tokens=settings.max_tokens,
                             max_tool_calls_per_turn=settings.max_tool_calls_per_turn,
                             auto_approve=settings.yes, max_retries=settings.max_retries),
        price=engine.price,
        session_id=session.id,
        provider_label=label,
        transcript=transcript,
        approver=approver,
        permissions=permissions,
        requests=RequestStore(session.requests_dir),
        emit=events,
    )
    # the session memory's background updates call the provider quietly (no state, no retries)
    engine.memory_summarize = quiet_model_call(agent.model_stream)
    warnings += [("permissions", warning) for warning in permissions.warnings]
    if settings.subagents:
        register_task_tool(agent, SubAgentLimits(max_steps=int(settings.subagent_max_steps),
                                                 report_tokens=int(settings.subagent_report_tokens)))
        engine.set_budget(engine.config.budget)  # the lines again, with the task tool in the fixed part
    if resume or continue_latest:
        # The last usage measured this history with these same tools: the gauge resumes on that
        # figure, not on an estimate. After the tools are registered: a change of the tool list
        # sets the measured figure aside, and the measured request had them all.
        exact, covered = measured or (None, 0)
        engine.accounting.restore(exact, covered, [(e.tokens, e.kind == "call") for e in restored_events
                                                   if isinstance(e, ChartPointEvent)])
    # Server-side compaction switched in the session (the palette) stays as it was left on resume.
    switched = [e for e in restored_events if isinstance(e, ServerCompactionEvent) and not e.reason]
    if switched and switched[-1].on != engine.config.server_compaction:
        _, problem = switch_server_compaction(provider, engine, switched[-1].on)
        if problem:
            warnings.append(("server context", f"this session had server-side compaction on, but {problem}"))
    # A server that rejected the prompt-cache breakpoints still does on resume: none are sent.
    if any(isinstance(e, PromptCacheOffEvent) for e in restored_events):
        provider.stop_prompt_caching()
    stream = EventStream()
    stream.continue_after(last_seq)
    stream.subscribe(transcript_recorder(transcript))  # first: persisted before any surface sees it
    if emit is not None:
        stream.subscribe(emit)
    events.connect(stream.emit)
    info = SessionInfoEvent(session_id=session.id, provider_label=label, model=provider.model, provider=provider_name,
                            workspace=str(workspace), transcript_path=str(session.transcript_path),
                            max_steps=settings.max_steps, banner=provider.banner,
                            resumed=bool(resume or continue_latest), started_in=str(cwd),
                            server_compaction=(engine.config.server_compaction
                                               if provider.server_context() is not None else None),
                            sandbox=tool_context.sandbox.state)
    return _Built(agent, stream, info, restored_events, warnings, repairs, memory_source)


# ---- MCP servers: started with the session, stopped with it (hub.aclose()) ----

async def start_session_mcp(agent: Agent, settings: Settings, *, requests: ClientRequests | None = None,
                            loaded_before: Sequence[str] = ()) -> McpHub:
    """Start the configured MCP servers for this agent's session; failures are events, never raised.
    ``requests``: the session's answers to what the servers ask (forms); ``loaded_before``: the tools
    a resumed session had loaded."""
    # The MCP hub (and its client) loads only when servers are configured.
    from app.mcp.hub import start_mcp

    return await start_mcp(settings, agent.registry, agent.engine, agent.engine.emit,
                           workspace=agent.workspace, log_dir=agent.tool_context.tool_results_dir.parent,
                           requests=requests, saved_output_budget=agent.tool_context.saved_output_budget,
                           loaded_before=loaded_before)
