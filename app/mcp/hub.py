"""All MCP servers of one session: started with it, their tools in the registry, stopped with it.

``start_mcp`` is the one entry point: it starts every enabled server at once
(a failure is an event and a warning line, never fatal), registers their
tools under prefixed names, decides whether their definitions are deferred,
and tells the engine which tools it sends, whose they are (the breakdown per
server) and what the deferral saves (the gauge).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Awaitable, Callable, Mapping, Protocol, Sequence

from app.kernel.events import (Event, McpAttachmentEvent, McpAuthEvent, McpPromptsEvent, McpServerEvent, ToolResultEvent,
                               ToolStartEvent)
from app.kernel.messages import TextBlock, ToolSpec
from app.mcp.client import McpConnection, McpServerError, RemotePrompt, ScopeKeeper
from app.mcp.prompts import (
    PromptCommandError,
    bounded,
    check_arguments,
    command_name,
    is_prompt_command,
    parse_prompt_command,
    prompt_blocks,
    prompt_info,
    prompt_text,
    with_call_id,
)
from app.mcp.resources import READ_RESOURCE, AttachmentError, ReadResourceTool, attachment_block, attachments
from app.tools.base import SavedOutputBudget, ToolContext
from app.mcp.client_features import ClientRequests
from app.mcp.oauth import (LoginError, OAuthSetupError, TokenFile, login, logout, open_in_browser, session_auth,
                           token_path, wanted_scopes)
from app.mcp.settings import McpServerConfig, header_secrets, hide_url_secrets, shown_url, url_secrets
from app.mcp.tools import McpTool, offered, prefixed_name
from app.kernel.redact import register_secret
from app.kernel.sanitize import sanitize_for_model
from app.tools.deferral import LOAD_TOOLS, LoadToolsTool, ToolDeferral
from app.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from app.context.engine import ContextEngine

_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|AUTH|CREDENTIAL", re.IGNORECASE)


@dataclass
class McpHub:
    emit: Callable[[Event], None] = lambda _e: None
    connections: dict[str, McpConnection] = field(default_factory=dict)
    tools: dict[str, McpTool] = field(default_factory=dict)  # prefixed name -> tool
    deferral: ToolDeferral | None = None
    # "/mcp__SERVER__PROMPT" -> (its server's connection, the prompt): the slash commands they make
    prompts: dict[str, tuple[McpConnection, RemotePrompt]] = field(default_factory=dict)
    # Every configured server (enabled or not) and how it stands: (state, why) for the /mcp view
    configs: dict[str, McpServerConfig] = field(default_factory=dict)
    states: dict[str, tuple[str, str]] = field(default_factory=dict)
    busy: dict[str, str] = field(default_factory=dict)  # server -> the view's action running on it
    _where: "_Where" = field(default_factory=lambda: _Where())
    # Called after a server's tools changed mid-session (a reconnect, a login): the engine's
    # definitions, deferral and instructions are worked out again (set by ``start_mcp``).
    on_tools_changed: Callable[[], None] = lambda: None
    # How a login in a running session shows the consent page (a browser when there is a display;
    # the address is said in an McpAuthEvent either way).
    open_consent: Callable[[str], Awaitable[object]] = open_in_browser

    def server_of(self, tool_name: str) -> str | None:
        """The server a tool comes from (None for the built-ins and load_tools)."""
        tool = self.tools.get(tool_name)
        return tool.server if tool is not None else None

    @property
    def data_dir(self) -> Path | None:
        """Where the session keeps its OAuth tokens (None: a session that keeps none)."""
        return self._where.data_dir

    @property
    def saved_tokens(self) -> int:
        return self.deferral.saved_tokens if self.deferral is not None else 0

    async def start(self, servers: dict[str, McpServerConfig], *, workspace: Path, log_dir: Path | None,
                    registry: ToolRegistry, requests: ClientRequests | None = None,
                    data_dir: Path | None = None, saved_output_budget: SavedOutputBudget | None = None) -> None:
        self.configs = dict(servers)
        self._where = _Where(workspace, log_dir, registry, requests, data_dir, saved_output_budget)
        for name, cfg in servers.items():
            self.states[name] = ("starting", "") if cfg.enabled else ("disabled", "")
        enabled = {name: cfg for name, cfg in servers.items() if cfg.enabled}
        for name, cfg in enabled.items():
            for var, value in cfg.env.items():
                if _SECRET_NAME.search(var):  # a token handed to a server never reaches the model or the disk
                    register_secret(value)
            if cfg.url:
                # A token in the URL (?token=, user:password@) is a secret like an API key: an error
                # message that repeats the URL is redacted too, wherever it goes.
                for value in url_secrets(cfg.url):
                    register_secret(value)
                # Header values read from the environment, and those written in config.toml under a
                # name like Authorization or X-Api-Key, never reach the model, a log or the screen.
                for value in header_secrets(cfg):
                    register_secret(value)
                for header, value in cfg.headers.items():
                    if _SECRET_NAME.search(header):
                        register_secret(value.split(None, 1)[-1] if value.lower().startswith("bearer ") else value)
            connection = self._connection(name, cfg)
            if connection is not None:
                self.connections[name] = connection
        outcomes = await asyncio.gather(*(c.start() for c in self.connections.values()), return_exceptions=True)
        for connection, outcome in zip(list(self.connections.values()), outcomes):
            if isinstance(outcome, BaseException):
                if isinstance(outcome, asyncio.CancelledError):
                    raise outcome
                self._failed(connection, outcome)
                continue
            self._offer(connection)
        self._offer_resources()

    def _connection(self, name: str, cfg: McpServerConfig) -> McpConnection | None:
        """A server's connection, not started yet (None, and said, when its OAuth settings cannot work)."""
        where = self._where
        self._say(McpServerEvent(name=name, status="starting", detail=shown_url(cfg.url) if cfg.url else cfg.command or ""))
        # A url server logged in to (`tidegauge mcp login NAME`) is sent its stored tokens.
        try:
            authorization = session_auth(name, cfg, where.data_dir)
        except OAuthSetupError as exc:
            self._say(McpServerEvent(name=name, status="failed", detail=str(exc)))
            return None
        connection = McpConnection(name, cfg, where.workspace, where.log_dir, requests=where.requests,
                                   authorization=authorization, saved_output_budget=where.saved_output_budget)
        connection.on_exit = self._exited
        connection.on_reconnect = self._reconnected
        connection.on_step_up = self._step_up
        return connection

    def _offer(self, connection: McpConnection) -> None:
        """A ready server's tools into the registry (those of an earlier connection of it replaced) and its prompts."""
        registry = self._where.registry
        for name in [name for name, tool in self.tools.items() if tool.server == connection.name]:
            del self.tools[name]
            registry.unregister(name)
        for command in [command for command, (owner, _) in self.prompts.items() if owner.name == connection.name]:
            del self.prompts[command]
        taken = {spec.name for spec in registry.specs()}
        for remote in filter(offered, connection.tools):
            tool = McpTool(connection, remote, prefixed_name(connection.name, remote.name, taken))
            taken.add(tool.spec.name)
            self.tools[tool.spec.name] = tool
            registry.register(tool)
        count = sum(map(offered, connection.tools))
        left_out = [remote.name for remote in connection.tools if not offered(remote)]
        roots = connection.roots
        self._say(McpServerEvent(name=connection.name, status="ready", tools=count, detail=f"{count} tools",
                                 not_offered=left_out, roots=[str(p) for p in roots] if roots is not None else []))
        self._add_prompts(connection)

    def _offer_resources(self) -> None:
        registry = self._where.registry
        if self.resource_servers() and registry.get(READ_RESOURCE) is None:
            registry.register(ReadResourceTool(self._resource_connection, self.resource_servers))

    def _say(self, event: McpServerEvent) -> None:
        """Emit a server's event, and keep its state for the /mcp view."""
        state = {"exited": "failed"}.get(event.status, event.status)
        self.states[event.name] = (state, event.detail if state in ("failed",) else "")
        self.emit(event)

    def _add_prompts(self, connection: McpConnection) -> None:
        """A server's prompts as slash commands (a name two prompts clean up to goes to the first)."""
        shown = []
        for prompt in connection.prompts:
            command = command_name(connection.name, prompt.name)
            if command not in self.prompts:
                self.prompts[command] = (connection, prompt)
                shown.append(prompt_info(connection.name, prompt))
        if shown:
            self.emit(McpPromptsEvent(server=connection.name, prompts=shown))

    def resource_servers(self) -> list[str]:
        return [name for name, connection in self.connections.items() if connection.serves_resources]

    def _resource_connection(self, server: str) -> McpConnection | None:
        connection = self.connections.get(server)
        return connection if connection is not None and connection.serves_resources else None

    async def prompt_turn(self, text: str, registry: ToolRegistry, ctx: ToolContext
                          ) -> tuple[list[TextBlock], list[Event]]:
        """What goes with the user's ``text`` (a prompt command, or a message with ``@SERVER:URI``
        attachments): the server's text as blocks of the turn and the events that show it.
        PromptCommandError, AttachmentError or McpServerError with one line when it cannot be done."""
        if is_prompt_command(text):
            return await self._run_prompt(text, registry, ctx)
        blocks: list[TextBlock] = []
        said: list[Event] = []
        for server, uri in attachments(text, set(self.resource_servers())):
            run = await registry.run(READ_RESOURCE, {"server": server, "uri": uri},
                                     with_call_id(ctx, f"resource-{uuid.uuid4().hex[:12]}"))
            if run.is_error:
                raise AttachmentError(f"@{server}:{uri} not attached: {' '.join(run.content.split())}")
            blocks.append(attachment_block(server, uri, run.content))
            said.append(McpAttachmentEvent(server=server, kind="resource", name=uri, chars=run.kept_chars,
                                           original_chars=run.original_chars, full_output_path=run.full_output_path))
        return blocks, said

    async def _run_prompt(self, text: str, registry: ToolRegistry, ctx: ToolContext
                          ) -> tuple[list[TextBlock], list[Event]]:
        call = parse_prompt_command(text)
        found = self.prompts.get(call.command)
        if found is None:
            known = ", ".join(sorted(self.prompts)[:10]) or "no server offers prompts"
            raise PromptCommandError(f"unknown MCP prompt {call.command} ({known})")
        connection, prompt = found
        check_arguments(call, prompt)
        result = await connection.get_prompt(prompt.name, call.arguments)
        body, messages = prompt_text(connection.name, prompt.name, result)
        kept = bounded(body, ctx, registry.max_output, f"prompt-{uuid.uuid4().hex[:12]}", result)
        said = McpAttachmentEvent(server=connection.name, kind="prompt", name=prompt.name, chars=len(kept.text),
                                  original_chars=kept.original_chars, full_output_path=kept.full_output_path,
                                  messages=messages)
        return prompt_blocks(connection.name, prompt.name, kept), [said]

    def _failed(self, connection: McpConnection, error: BaseException) -> None:
        reason = str(error) if isinstance(error, McpServerError) else f"{type(error).__name__}: {error}"
        reason = hide_url_secrets(reason)  # the SDK's errors repeat the URL, a token too short to register included
        log = f" (server log: {connection.log_path})" if connection.log_path and connection.config.command else ""
        self._say(McpServerEvent(name=connection.name, status="failed", detail=f"{reason}{log}"))
        self.connections.pop(connection.name, None)

    def _exited(self, connection: McpConnection, reason: str) -> None:
        """A server that stopped on its own mid-session: its tools answer with an error from now on."""
        self._say(McpServerEvent(name=connection.name, status="exited", detail=hide_url_secrets(reason)))

    def _reconnected(self, connection: McpConnection) -> None:
        """A url server that was lost answers again (it restarted): its tools work from now on."""
        self._say(McpServerEvent(name=connection.name, status="ready", tools=len(connection.tools),
                                 detail=f"reconnected, {len(connection.tools)} tools"))

    # ---- the /mcp view: reconnect, login, logout; the re-authorize offer

    async def reconnect(self, name: str) -> None:
        """Stop server ``name`` and start it again: its tools listed anew, the engine's definitions (and
        so the gauge) follow. A server that failed to start is started anew (its OAuth tokens read again).
        A failure is its ``failed`` event, never raised."""
        cfg = self.configs[name]
        connection = self.connections.get(name)
        if connection is None:
            connection = self._connection(name, cfg)
            if connection is None:
                return
            self.connections[name] = connection
            starting = connection.start()
        else:
            self._say(McpServerEvent(name=name, status="starting",
                                     detail=shown_url(cfg.url) if cfg.url else cfg.command or ""))
            try:  # tokens from a login since it started, or none after a logout
                connection.authorization = session_auth(name, cfg, self._where.data_dir)
            except OAuthSetupError as exc:
                await connection.aclose()
                self._failed(connection, McpServerError(str(exc)))
                self._forget_tools(name)
                return
            starting = connection.restart()
        try:
            await starting
        except (McpServerError, OSError) as error:
            self._failed(connection, error)
            self._forget_tools(name)
            return
        self._offer(connection)
        self._offer_resources()
        self.on_tools_changed()

    def _forget_tools(self, name: str) -> None:
        """A server that is down: its tools are no longer offered (the definitions shrink on the gauge)."""
        registry = self._where.registry
        gone = [tool_name for tool_name, tool in self.tools.items() if tool.server == name]
        for tool_name in gone:
            del self.tools[tool_name]
            registry.unregister(tool_name)
        if gone:
            self.on_tools_changed()

    async def login(self, name: str) -> bool:
        """``tidegauge mcp login NAME`` in the running session: the consent page shown (an McpAuthEvent
        with its address, a browser opened where there is one), the tokens stored, then the server
        reconnected with them. Whether it ended logged in; a failure is an McpAuthEvent, never raised."""
        cfg, data_dir = self.configs[name], self._where.data_dir
        if data_dir is None or cfg.url is None:
            self.emit(McpAuthEvent(server=name, status="failed", reason=f"{name} is started as a command; "
                                   "OAuth is for url servers" if cfg.url is None else "this session keeps no tokens"))
            return False
        scopes = wanted_scopes(TokenFile(token_path(data_dir, name), cfg.url)) or ""

        async def consent(url: str) -> None:
            self.emit(McpAuthEvent(server=name, status="consent", scopes=scopes, url=hide_url_secrets(url)))
            await self.open_consent(url)

        try:
            await login(name, cfg, data_dir, self._where.workspace, open_consent=consent)
        except (LoginError, OSError) as error:
            self.emit(McpAuthEvent(server=name, status="failed", reason=" ".join(str(error).split())[:300]))
            return False
        granted = TokenFile(token_path(data_dir, name), cfg.url).granted_scope() or ""
        self.emit(McpAuthEvent(server=name, status="logged_in", scopes=granted))
        await self.reconnect(name)
        return self.states.get(name, ("", ""))[0] == "ready"

    async def logout(self, name: str) -> None:
        """Delete server ``name``'s tokens (through private_files), then reconnect it without them: it
        says what it needs now (a login, or nothing)."""
        if self._where.data_dir is None:
            self.emit(McpAuthEvent(server=name, status="failed", reason="this session keeps no tokens"))
            return
        if not logout(name, self._where.data_dir):
            self.emit(McpAuthEvent(server=name, status="failed", reason=f"no stored tokens for {name}"))
            return
        self.emit(McpAuthEvent(server=name, status="logged_out"))
        await self.reconnect(name)

    async def _step_up(self, connection: McpConnection, scope: str) -> bool:
        """A tool call refused 403 insufficient_scope on OAuth tokens: where a surface shows questions,
        ask whether to log in again for the union of the scopes granted and asked (the consent
        follows); True once logged in and reconnected, and the call is sent again."""
        requests, data_dir = self._where.requests, self._where.data_dir
        cfg = connection.config
        if (requests is None or data_dir is None or cfg.url is None or not scope
                or not isinstance(connection.authorization, ScopeKeeper)):
            return False
        scopes = wanted_scopes(TokenFile(token_path(data_dir, connection.name), cfg.url)) or scope
        if not await requests.reauthorize(connection.name, scopes):
            return False
        return await self.login(connection.name)

    def defer(self, registry: ToolRegistry, window: int, share: float,
              on_change: Callable[[list[ToolSpec]], None]) -> ToolDeferral:
        """Decide what definitions the model sees; registers load_tools when they are deferred."""
        deferrable = [tool.spec for tool in self.tools.values()]

        def core() -> list[ToolSpec]:
            return [spec for spec in registry.specs() if spec.name not in self.tools and spec.name != LOAD_TOOLS]

        self.deferral = ToolDeferral(core=core(), deferrable=deferrable, window=window, share=share,
                                     on_change=on_change, group_of=self.server_of, core_source=core)
        if self.deferral.active:
            registry.register(LoadToolsTool(self.deferral))
        return self.deferral

    async def aclose(self) -> None:
        """Stop every server (each whole process tree) at once."""
        connections = list(self.connections.values())
        await asyncio.gather(*(c.aclose() for c in connections), return_exceptions=True)
        for connection in connections:
            if connection.stopped_cleanly:
                self._say(McpServerEvent(name=connection.name, status="stopped"))
        self.connections.clear()


@dataclass
class _Where:
    """What a server's connection is made with (kept from ``McpHub.start`` for reconnects)."""

    workspace: Path = field(default_factory=Path.cwd)
    log_dir: Path | None = None
    registry: ToolRegistry = field(default_factory=ToolRegistry)
    requests: ClientRequests | None = None
    data_dir: Path | None = None
    saved_output_budget: SavedOutputBudget | None = None


# A server's `instructions` go into every request's system prompt: bounded, as Claude Code bounds them,
# so a server cannot fill the window from there (a longer text keeps its head and says it was cut).
MAX_INSTRUCTIONS_BYTES = 2048


def bounded_instructions(server: str, text: str | None) -> str:
    """A server's instructions made fit for the system prompt: escape sequences and control
    characters made harmless, at most ``MAX_INSTRUCTIONS_BYTES`` of UTF-8, the rest cut with a notice."""
    if not text or not text.strip():
        return ""
    clean = sanitize_for_model(text).strip()
    data = clean.encode()
    if len(data) <= MAX_INSTRUCTIONS_BYTES:
        return clean
    kept = data[:MAX_INSTRUCTIONS_BYTES].decode(errors="ignore")
    return f"{kept}\n[the rest of {server}'s instructions was cut: {len(data) - len(kept.encode()):,} more bytes]"


class McpSettings(Protocol):
    """What the hub reads of the session's settings (app.wiring.config.Settings has both)."""

    @property
    def mcp_servers(self) -> Mapping[str, McpServerConfig]: ...

    @property
    def tool_defer_share(self) -> float: ...


def tools_loaded_before(events: Sequence[Event]) -> list[str]:
    """The tool names an earlier run of the session passed to ``load_tools`` in calls that ran (its
    transcript's tool_start and tool_result events; the history may have been compacted since)."""
    ran = {e.id for e in events if isinstance(e, ToolResultEvent) and e.name == LOAD_TOOLS and not e.refused}
    names: list[str] = []
    for event in events:
        if isinstance(event, ToolStartEvent) and event.name == LOAD_TOOLS and event.id in ran:
            asked = event.input.get("names")
            asked = [asked] if isinstance(asked, str) else asked
            if isinstance(asked, list):
                names.extend(str(name).strip() for name in asked)
    return list(dict.fromkeys(name for name in names if name))


async def start_mcp(settings: McpSettings, registry: ToolRegistry, engine: ContextEngine,
                    emit: Callable[[Event], None], *,
                    workspace: Path, log_dir: Path | None = None, requests: ClientRequests | None = None,
                    saved_output_budget: SavedOutputBudget | None = None,
                    loaded_before: Sequence[str] = ()) -> McpHub:
    """Start the session's MCP servers and hand their tools to the registry and the engine.

    ``settings`` needs ``mcp_servers`` and ``tool_defer_share``; ``engine`` is the
    session's ContextEngine (its ``tools`` become what the deferral lets through).
    Never raises for a server that fails: that is an event and a warning line. ``requests``:
    the session's answers to what servers ask (forms); without it, forms are not offered.
    ``saved_output_budget``: the session's cap on saved outputs (``ToolContext``'s), which answers
    the transports cut and save count toward; without it they count toward none. ``loaded_before``:
    the tools a resumed session had loaded (``tools_loaded_before``), declared again from the start.
    """
    hub = McpHub(emit=emit)
    servers: dict[str, McpServerConfig] = dict(settings.mcp_servers or {})
    if not servers:
        return hub
    # The data directory holds the tokens of `tidegauge mcp login` (a test's settings may have none).
    data_dir = getattr(settings, "data_dir", None)
    await hub.start(servers, workspace=workspace, log_dir=log_dir, registry=registry, requests=requests,
                    data_dir=Path(data_dir) if data_dir is not None else None,
                    saved_output_budget=saved_output_budget)

    def send(specs: list[ToolSpec]) -> None:
        engine.use_tools(specs)  # the whole request estimated until the next call's usage

    given: dict[str, str] = {}  # the instructions the engine has

    def use_instructions() -> None:
        instructions = {name: text for name, connection in hub.connections.items()
                        if connection.alive and (text := bounded_instructions(name, connection.instructions))}
        if instructions != given:
            engine.use_server_instructions(instructions)
            given.clear()
            given.update(instructions)

    use_instructions()
    deferral = hub.defer(registry, engine.config.window, float(settings.tool_defer_share), send)
    if loaded_before and deferral.active:
        deferral.restore_loaded(list(loaded_before))
    engine.use_tool_owners(hub.server_of, lambda: hub.saved_tokens)

    def tools_changed() -> None:
        """A server reconnected (or went down) mid-session: the definitions, what is deferred (the
        tools the model loaded stay loaded) and the instructions worked out again, the gauge redrawn."""
        loaded = list(hub.deferral.loaded) if hub.deferral is not None else []
        if registry.get(LOAD_TOOLS) is not None:
            registry.unregister(LOAD_TOOLS)
        use_instructions()
        again = hub.defer(registry, engine.config.window, float(settings.tool_defer_share), send)
        if loaded and again.active:
            again.restore_loaded(loaded)
        engine.emit_context()

    hub.on_tools_changed = tools_changed
    engine.emit_context()  # the gauge and the breakdown now include the servers' definitions
    return hub
