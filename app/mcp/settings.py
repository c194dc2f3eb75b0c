"""The ``[mcp_servers.NAME]`` tables of config.toml (pydantic only: no SDK import)."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit, urlunsplit

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
            raise ValueError(f"url must start with http:// or https:// (got {shown_url(self.url)!r})")
        return self


def check_server_names(servers: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
    for name in servers:
        if not SERVER_NAME.match(name):
            raise ValueError(f"server name {name!r}: use 1-24 letters, digits, _ or - (it prefixes the tool names)")
    return servers


HIDDEN = "***"


def shown_url(url: str) -> str:
    """``url`` as it may be printed or recorded: no user:password (dropped), every query value ``***``.

    Remote MCP servers are often given their token in the URL (``?token=``, ``?api_key=``,
    ``https://user:token@host``); the path and the query's names stay, to tell servers apart.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:  # not a URL we can take apart: show its scheme and host-ish part only
        return re.sub(r"[?#].*", "?" + HIDDEN, re.sub(r"//[^/@]*@", "//", url), flags=re.S)
    netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port is not None else "")
    query = "&".join(f"{name}={HIDDEN}" for name, _value in parse_qsl(parts.query, keep_blank_values=True))
    fragment = HIDDEN if parts.fragment else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def url_secrets(url: str) -> list[str]:
    """What ``shown_url`` hides: the password, the user name and every query value (to register as secrets)."""
    try:
        parts = urlsplit(url)
        found = [parts.password or "", parts.username or "", parts.fragment]
    except ValueError:
        return []
    found += [value for _name, value in parse_qsl(parts.query, keep_blank_values=True)]
    found += [pair.partition("=")[2] for pair in re.split(r"[&;]", parts.query)]  # as written, still %-quoted
    return [value for value in found if value]


_URL_IN_TEXT = re.compile(r"""https?://[^\s'"<>`]+""")


def hide_url_secrets(text: str) -> str:
    """Every http(s) URL in ``text`` (an error message that repeats the server's URL) as ``shown_url``."""
    return _URL_IN_TEXT.sub(lambda found: shown_url(found.group()), text)
