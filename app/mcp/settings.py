"""The ``[mcp_servers.NAME]`` tables of config.toml (pydantic only: no SDK import)."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, model_validator

# The server name prefixes its tools' names, which both APIs limit to [A-Za-z0-9_-]{1,64}.
SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,24}$")


class McpServerConfig(BaseModel):
    """One MCP server: a command started over stdio, or a streamable-HTTP ``url``."""

    model_config = ConfigDict(extra="forbid")

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    # Added to the server's environment (the SDK passes only HOME, PATH, SHELL, TERM, USER,
    # LOGNAME otherwise: provider API keys never reach a server unless named here).
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None  # relative to the working directory; default: the working directory
    url: str | None = None
    enabled: bool = True
    startup_timeout: float = Field(30.0, gt=0)  # seconds to start and list the tools
    tool_timeout: float = Field(300.0, gt=0)  # seconds one tool call may take

    @model_validator(mode="after")
    def _command_or_url(self) -> "McpServerConfig":
        if (self.command is None) == (self.url is None):
            raise ValueError("set either command (a program started over stdio) or url (streamable HTTP), not both")
        if self.command is not None and not self.command.strip():
            raise ValueError("command is empty")
        if self.url is not None and not re.match(r"^https?://", self.url):
            raise ValueError(f"url must start with http:// or https:// (got {self.url!r})")
        return self


def check_server_names(servers: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
    for name in servers:
        if not SERVER_NAME.match(name):
            raise ValueError(f"server name {name!r}: use 1-24 letters, digits, _ or - (it prefixes the tool names)")
    return servers
