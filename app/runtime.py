"""Wiring: settings in, a ready Agent out (shared by headless mode and the dashboard)."""

from __future__ import annotations

import os
import platform
from pathlib import Path

from app.agent import Agent, AgentOptions, Approver
from app.config import Settings, api_key_for, provider_key_env_names, resolve_provider
from app.context.engine import ContextEngine, EngineConfig
from app.context.file_cache import FileReadCache
from app.context.memory import load_memory
from app.context.prices import price_for
from app.context.thresholds import context_window_for
from app.errors import SetupError
from app.events import Event
from app.providers.factory import create_provider
from app.redact import register_secret
from app.session import Session, SessionStore
from app.tools.base import ToolContext
from app.tools.registry import default_registry
from app.transcript import TranscriptWriter, restore

SYSTEM_PROMPT = """You are tidegauge, a coding agent working in the user's terminal.
Working directory: {cwd}
Platform: {platform}

Tools: read_file, list_files, run_bash, write_file, edit_file. Paths are relative to the working directory.
- Read files with read_file (with offset/limit for big ones), never with cat through run_bash.
- Tool output over the limit is cut head+tail with a notice: follow the notice (grep, head/tail,
  read_file with offset/limit on the saved file) instead of repeating the same command.
- edit_file needs a fresh read_file of the file first.
- Your context is managed: old tool results may be cleared and the conversation may be compacted
  into a summary. Re-read files when you need their exact content.
Be concise. When the task is done, say what you did and what you verified."""


def _tool_env(settings: Settings) -> dict[str, str]:
    """The environment of run_bash: the user's, minus every provider key (also a custom --api-key-env)."""
    hidden = provider_key_env_names(settings)
    return {k: v for k, v in os.environ.items() if k not in hidden and not k.endswith("_API_KEY")}


def build_agent(settings: Settings, *, emit=None, approver: Approver | None = None,
                resume: str | None = None, continue_latest: bool = False,
                cwd: Path | None = None) -> Agent:
    cwd = (cwd or Path.cwd()).resolve()
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
    if provider_name != "demo" and not key:
        raise SetupError(f"provider {provider_name}: no API key (set {settings.api_key_env or provider_name.upper() + '_API_KEY'})")
    if key:
        register_secret(key)

    registry = default_registry(settings.max_output)
    if session is None:
        session = store.create(cwd, provider_name, settings.model or "")
    workspace = cwd

    window = settings.window
    budget = settings.budget
    opts: dict = {}
    if provider_name == "demo":
        from app.demo_workspace import create_demo_workspace
        from app.providers.demo import DemoProvider

        workspace = create_demo_workspace(session.dir / "workspace", log_cache=settings.data_dir_path / "demo-cache")
        if window is None:
            window = DemoProvider.DEFAULT_WINDOW
        # The demo enforces the window it is told, like a server would.
        opts = {"speed": settings.demo_speed, "registry": registry, "window": window}
        if "budget" not in settings.model_fields_set:
            budget = DemoProvider.DEFAULT_BUDGET
    provider = create_provider(provider_name, settings.model, settings.base_url, key,
                               timeout_connect=settings.timeout_connect, timeout_read=settings.timeout_read,
                               **opts)
    if window is None:
        window = context_window_for(provider.model)

    memory = load_memory(workspace, settings.config_dir)
    system = SYSTEM_PROMPT.format(cwd=workspace, platform=platform.system())
    engine = ContextEngine(
        system_prompt=system,
        memory=memory,
        tools=registry.specs(),
        config=EngineConfig(window=window, budget=budget, compact_max_output=settings.compact_max_output),
        price=price_for(provider.model, settings.prices),
        compact_price=price_for(provider.model, settings.prices),
        tool_results_dir=session.tool_results_dir,
    )
    restored_events: list[Event] = []
    if resume or continue_latest:
        state = restore(session)
        engine.history = state.history
        restored_events = list(state.events)
        for event in restored_events:
            if event.type == "usage":
                from app.usage import Usage
                engine.ledger.add(event.agent, Usage(event.input_tokens, event.cache_read_tokens,
                                                     event.cache_write_tokens, event.output_tokens),
                                  event.cost_usd)
    transcript = TranscriptWriter(session.transcript_path)
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
    )
    label = getattr(provider, "label", None) or f"{provider.name} · {provider.model}"
    agent = Agent(
        provider=provider,
        registry=registry,
        engine=engine,
        tool_context=tool_context,
        options=AgentOptions(max_steps=settings.max_steps, max_tokens=settings.max_tokens,
                             auto_approve=settings.yes, max_retries=settings.max_retries),
        price=engine.price,
        session_id=session.id,
        provider_label=label,
        transcript=transcript,
        approver=approver,
        restored=restored_events,
    )
    if emit is not None:
        agent.emit = emit
    return agent


# ---- MCP servers (issue 16): started with the session, stopped with it (hub.aclose()) ----

async def start_session_mcp(agent: Agent, settings: Settings):  # -> app.mcp.hub.McpHub
    """Start the configured MCP servers for this agent's session; failures are events, never raised."""
    from app.mcp.hub import start_mcp

    return await start_mcp(settings, agent.registry, agent.engine, agent.engine.emit,
                           workspace=agent.workspace, log_dir=agent.tool_context.tool_results_dir.parent)
