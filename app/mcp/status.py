"""`tidegauge mcp list`: every configured MCP server started once, as a session would start it, and
what a user needs to know of each: its state (a failure with its reason), transport, what it offers,
what its definitions cost on every request and whether they would be deferred, and its auth.

The servers are started with the session's own code (``McpHub.start``) and stopped before the answer
is printed, so what the list says is what a session would meet; nothing is sent to a model.
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from app.context.tokens import count_tokens, estimate_tools
from app.kernel.describe import MCP_VIEW_HEADER, mcp_server_cells
from app.kernel.events import Event, McpServerEvent
from app.mcp.hub import McpHub, bounded_instructions
from app.mcp.oauth import TokenFile, token_path
from app.mcp.settings import McpServerConfig, shown_url
from app.tools.registry import default_registry


@dataclass
class ServerStatus:
    name: str
    state: str  # "ready", "failed", "disabled" ("starting", "stopped" in a running session)
    transport: str  # "stdio" or "http"
    target: str  # the command, or the URL without its secrets
    reason: str = ""  # why it failed
    tools: int = 0
    prompts: int = 0
    resources: bool = False
    schema_tokens: int = 0  # its tool definitions, as every request would carry them in full
    instructions_tokens: int = 0
    deferred: bool = False  # its definitions would be sent as names behind load_tools
    # "oauth (logged in)", "oauth (needs login)", "oauth (needs login for more scope)",
    # "none (oauth login available)", "bearer token", "headers", "none"
    auth: str = "none"
    not_offered: list[str] = field(default_factory=list)
    scopes: str = ""  # what its OAuth tokens were granted, when the authorization server said

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _auth(name: str, config: McpServerConfig, data_dir: Path | None, failure: str = "") -> tuple[str, str]:
    """(its auth, the scopes its tokens were granted): "needs login" when its tokens are missing or
    refused, or a 403 asked for more scope since the login."""
    if config.url is None:
        return "none", ""
    if config.bearer_token_env_var:
        return "bearer token", ""
    if config.headers:
        return "headers", ""
    refused = failure.startswith("authorization required")
    path = token_path(data_dir, name) if data_dir is not None else None
    if path is None or not path.is_file():
        return ("oauth (needs login)" if refused else "none (oauth login available)"), ""
    file = TokenFile(path, config.url)
    scopes = file.granted_scope() or ""
    if file.wanted_scope():
        return "oauth (needs login for more scope)", scopes
    return ("oauth (needs login)" if refused else "oauth (logged in)"), scopes


def _status(name: str, config: McpServerConfig, data_dir: Path | None) -> ServerStatus:
    transport = "http" if config.url else "stdio"
    target = shown_url(config.url) if config.url else " ".join([config.command or "", *config.args]).strip()
    auth, scopes = _auth(name, config, data_dir)
    return ServerStatus(name=name, state="disabled" if not config.enabled else "starting", transport=transport,
                        target=target, auth=auth, scopes=scopes)


def _offers(status: ServerStatus, hub: McpHub, deferred: set[str]) -> None:
    """A ready server's figures: what it offers, what its definitions and instructions cost."""
    connection = hub.connections.get(status.name)
    if connection is None:
        return
    specs = [tool.spec for tool in hub.tools.values() if tool.server == status.name]
    status.tools = len(specs)
    status.prompts = len(connection.prompts)
    status.resources = connection.serves_resources
    status.schema_tokens = estimate_tools(specs) if specs else 0
    status.deferred = bool(specs) and all(spec.name in deferred for spec in specs)
    text = bounded_instructions(status.name, connection.instructions)
    status.instructions_tokens = count_tokens(text) if text else 0


async def survey(servers: Mapping[str, McpServerConfig], *, workspace: Path, data_dir: Path, window: int,
                 defer_share: float) -> list[ServerStatus]:
    """Start every enabled server, read what it offers, stop them all; one status per configured server."""
    events: list[Event] = []
    hub = McpHub(emit=events.append)
    registry = default_registry(40_000)
    statuses = {name: _status(name, config, data_dir) for name, config in servers.items()}
    with tempfile.TemporaryDirectory(prefix="tidegauge-mcp-list-") as logs:
        try:
            await hub.start(dict(servers), workspace=workspace, log_dir=Path(logs), registry=registry,
                            data_dir=data_dir)
            deferral = hub.defer(registry, window, defer_share, lambda _specs: None)
            deferred = {spec.name for spec in deferral.deferred}
            for event in events:
                if isinstance(event, McpServerEvent) and event.name in statuses:
                    status = statuses[event.name]
                    if event.status == "failed":
                        status.state, status.reason = "failed", event.detail
                        status.auth, status.scopes = _auth(event.name, servers[event.name], data_dir, event.detail)
                    elif event.status == "ready":
                        status.state, status.not_offered = "ready", list(event.not_offered)
            for name in hub.connections:
                if statuses[name].state == "ready":
                    _offers(statuses[name], hub, deferred)
        finally:
            await hub.aclose()
    return list(statuses.values())


def live_statuses(hub: McpHub) -> list[ServerStatus]:
    """A running session's servers as they stand now (the /mcp view): the same rows as ``survey``'s,
    from the session's own hub, nothing started or stopped."""
    data_dir = hub.data_dir
    deferred = set(hub.deferral.deferred_names) if hub.deferral is not None and hub.deferral.active else set()
    statuses: list[ServerStatus] = []
    for name, config in hub.configs.items():
        status = _status(name, config, data_dir)
        state, reason = hub.states.get(name, (status.state, ""))
        status.state, status.reason = state, reason
        if reason:
            status.auth, status.scopes = _auth(name, config, data_dir, reason)
        if state == "ready":
            connection = hub.connections.get(name)
            if connection is not None:
                status.not_offered = [remote.name for remote in connection.tools if remote.task_required]
            _offers(status, hub, deferred)
        statuses.append(status)
    return statuses


def status_table(statuses: list[ServerStatus]) -> str:
    """The list for people: one row a server, a failure's reason on the line under it (the /mcp
    view's words, ``describe.mcp_server_cells``)."""
    if not statuses:
        return "no MCP servers in [mcp_servers] of config.toml"
    rows = [MCP_VIEW_HEADER, *(mcp_server_cells(s) for s in statuses)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(MCP_VIEW_HEADER))]

    def line(row: tuple[str, ...]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()

    lines = [line(MCP_VIEW_HEADER)]
    for row, status in zip(rows[1:], statuses):
        lines.append(line(row))
        if status.reason:
            lines.append(f"    {status.reason}")
    return "\n".join(lines)
