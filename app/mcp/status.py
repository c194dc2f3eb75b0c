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
from app.kernel.events import Event, McpServerEvent
from app.mcp.hub import McpHub, bounded_instructions
from app.mcp.oauth import token_path
from app.mcp.settings import McpServerConfig, shown_url
from app.tools.registry import default_registry


@dataclass
class ServerStatus:
    name: str
    state: str  # "ready", "failed", "disabled"
    transport: str  # "stdio" or "http"
    target: str  # the command, or the URL without its secrets
    reason: str = ""  # why it failed
    tools: int = 0
    prompts: int = 0
    resources: bool = False
    schema_tokens: int = 0  # its tool definitions, as every request would carry them in full
    instructions_tokens: int = 0
    deferred: bool = False  # its definitions would be sent as names behind load_tools
    auth: str = "none"  # "oauth (logged in)", "oauth (not logged in)", "bearer token", "headers", "none"
    not_offered: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _auth(name: str, config: McpServerConfig, data_dir: Path) -> str:
    if config.url is None:
        return "none"
    if config.bearer_token_env_var:
        return "bearer token"
    if config.headers:
        return "headers"
    return "oauth (logged in)" if token_path(data_dir, name).is_file() else "none (oauth login available)"


async def survey(servers: Mapping[str, McpServerConfig], *, workspace: Path, data_dir: Path, window: int,
                 defer_share: float) -> list[ServerStatus]:
    """Start every enabled server, read what it offers, stop them all; one status per configured server."""
    events: list[Event] = []
    hub = McpHub(emit=events.append)
    registry = default_registry(40_000)
    statuses: dict[str, ServerStatus] = {}
    for name, config in servers.items():
        transport = "http" if config.url else "stdio"
        target = shown_url(config.url) if config.url else " ".join([config.command or "", *config.args]).strip()
        statuses[name] = ServerStatus(name=name, state="disabled" if not config.enabled else "starting",
                                      transport=transport, target=target, auth=_auth(name, config, data_dir))
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
                    elif event.status == "ready":
                        status.state, status.not_offered = "ready", list(event.not_offered)
            for name, connection in hub.connections.items():
                status = statuses[name]
                if status.state != "ready":
                    continue
                specs = [tool.spec for tool in hub.tools.values() if tool.server == name]
                status.tools = len(specs)
                status.prompts = len(connection.prompts)
                status.resources = connection.serves_resources
                status.schema_tokens = estimate_tools(specs) if specs else 0
                status.deferred = bool(specs) and all(spec.name in deferred for spec in specs)
                text = bounded_instructions(name, connection.instructions)
                status.instructions_tokens = count_tokens(text) if text else 0
        finally:
            await hub.aclose()
    return list(statuses.values())


def status_table(statuses: list[ServerStatus]) -> str:
    """The list for people: one row a server, a failure's reason on the line under it."""
    if not statuses:
        return "no MCP servers in [mcp_servers] of config.toml"
    header = ("server", "state", "transport", "tools", "prompts", "resources", "schema tokens", "deferred", "auth")
    rows = [header]
    for s in statuses:
        rows.append((s.name, s.state, s.transport, str(s.tools), str(s.prompts), "yes" if s.resources else "no",
                     f"{s.schema_tokens:,}" + (f" (+{s.instructions_tokens:,} instructions)"
                                               if s.instructions_tokens else ""),
                     "yes" if s.deferred else "no", s.auth))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    def line(row: tuple[str, ...]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()

    lines = [line(header)]
    for row, status in zip(rows[1:], statuses):
        lines.append(line(row))
        if status.reason:
            lines.append(f"    {status.reason}")
    return "\n".join(lines)
