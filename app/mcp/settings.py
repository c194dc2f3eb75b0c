"""The ``[mcp_servers.NAME]`` tables of config.toml (pydantic only: no SDK import)."""

from __future__ import annotations

import os
import re
from typing import Literal
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

# The server name prefixes its tools' names, which both APIs limit to [A-Za-z0-9_-]{1,64}.
SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,24}$")


class McpServerConfig(BaseModel):
    """One MCP server: a command started over stdio, or a streamable-HTTP ``url``."""

    model_config = ConfigDict(extra="forbid", defer_build=True)  # built when a server is configured

    command: str | None = None
    # [] and not default_factory=list: pydantic copies it for each model, and the signature of the builtin
    # list (asked of a factory) costs tokenize's patterns in every run that reads settings.
    args: list[str] = []
    # Added to the server's environment (the SDK passes only HOME, PATH, SHELL, TERM, USER,
    # LOGNAME otherwise: provider API keys never reach a server unless named here).
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None  # relative to the working directory; default: the working directory
    url: str | None = None
    # HTTP headers sent to a url server. ``${NAME}`` is replaced by the environment variable NAME
    # when the server starts: tokens stay out of config.toml, and their values are secrets
    # (redacted wherever they could be printed or written).
    headers: dict[str, str] = Field(default_factory=dict)
    # The name of an environment variable holding a bearer token: ``Authorization: Bearer <value>``.
    bearer_token_env_var: str | None = None
    # OAuth (`tidegauge mcp login NAME`, app/mcp/oauth.py). A client registered with the server's
    # authorization server beforehand (no dynamic registration): its id, and the environment
    # variable holding its secret (sent with HTTP Basic at the token endpoint).
    oauth_client_id: str | None = None
    oauth_client_secret_env_var: str | None = None
    # The HTTPS address of a client ID metadata document describing tidegauge, when you host one:
    # used as the client id by authorization servers that support them, instead of registering.
    oauth_client_metadata_url: str | None = None
    # The issuer URL of the authorization server oauth_client_id belongs to: its secret is then only
    # ever sent there (without it, the MCP server's metadata decides where it goes).
    oauth_issuer: str | None = None
    # With oauth_grant = "client_credentials": a PEM private key (RSA or EC P-256) the client proves
    # itself with (a signed JWT, private_key_jwt) instead of a secret.
    oauth_private_key_file: str | None = None
    # "client_credentials": tidegauge is the client itself (no user, no browser): the session gets
    # its tokens with oauth_client_id and its secret. "enterprise" (SEP-990, enterprise-managed
    # authorization): the user's ID token from the enterprise identity provider is exchanged there
    # for an ID-JAG (RFC 8693), which oauth_client_id presents at oauth_issuer (RFC 7523 jwt-bearer).
    # Default: the user's consent, at login.
    oauth_grant: Literal["authorization_code", "client_credentials", "enterprise"] = "authorization_code"
    # With oauth_grant = "enterprise": the identity provider's token endpoint, the environment variable
    # holding the user's ID token (only ever sent there), and the client tidegauge is registered as at
    # the identity provider, if it asks for one (its secret, if any, in the environment too).
    oauth_idp_token_endpoint: str | None = None
    oauth_idp_id_token_env_var: str | None = None
    oauth_idp_client_id: str | None = None
    oauth_idp_client_secret_env_var: str | None = None
    # The folders the server is told it may work in (MCP roots): true, the workspace alone; false, no
    # roots at all (a server then keeps to the folders in its own args, as server-filesystem does);
    # or a list of folders (relative to the working directory, ~ expanded).
    roots: bool | list[str] = True
    enabled: bool = True
    startup_timeout: float = Field(30.0, gt=0)  # seconds to start and list the tools
    tool_timeout: float = Field(300.0, gt=0)  # seconds one tool call may take

    @model_validator(mode="after")
    def _command_or_url(self) -> "McpServerConfig":
        if (self.command is None) == (self.url is None):
            raise ValueError("set either command (a program started over stdio) or url (streamable HTTP), not both")
        if self.command is not None and not self.command.strip():
            raise ValueError("command is empty")
        if isinstance(self.roots, list) and not all(root.strip() for root in self.roots):
            raise ValueError("roots: an entry is empty (give folders, or roots = false for none)")
        if self.url is not None and not re.match(r"^https?://", self.url):
            raise ValueError(f"url must start with http:// or https:// (got {shown_url(self.url)!r})")
        if self.url is None and (self.headers or self.bearer_token_env_var):
            raise ValueError("headers and bearer_token_env_var apply only to a url server")
        for name, value in self.headers.items():
            if not HEADER_NAME.match(name):
                raise ValueError(f"headers: {name!r} is not a valid HTTP header name")
            if "\r" in value or "\n" in value:
                raise ValueError(f"headers: the value of {name} has a line break")
            for unclosed in re.findall(r"\$\{([^}]*)$", value):
                raise ValueError(f"headers: the value of {name} has an unclosed ${{{unclosed}")
            for var in ENV_REFERENCE.findall(value):
                if not ENV_NAME.match(var):
                    raise ValueError(f"headers: ${{{var}}} in {name} is not an environment variable name")
        if self.bearer_token_env_var is not None and not ENV_NAME.match(self.bearer_token_env_var):
            raise ValueError(f"bearer_token_env_var: {self.bearer_token_env_var!r} is not an environment variable name")
        if self.bearer_token_env_var is not None and any(n.lower() == "authorization" for n in self.headers):
            raise ValueError("set either bearer_token_env_var or an Authorization header, not both")
        self._check_oauth()
        return self

    def _check_oauth(self) -> None:
        chosen = [name for name in ("oauth_client_id", "oauth_client_secret_env_var", "oauth_client_metadata_url",
                                    "oauth_issuer", "oauth_private_key_file", *ENTERPRISE_SETTINGS)
                  if getattr(self, name) is not None] + (["oauth_grant"] if self.oauth_grant != "authorization_code" else [])
        if not chosen:
            return
        if self.url is None:
            raise ValueError(f"{chosen[0]} applies only to a url server")
        if self.bearer_token_env_var is not None or any(n.lower() == "authorization" for n in self.headers):
            raise ValueError(f"set either {chosen[0]} (OAuth) or a token (bearer_token_env_var, an Authorization "
                             "header), not both")
        for setting in ("oauth_client_secret_env_var", "oauth_idp_id_token_env_var", "oauth_idp_client_secret_env_var"):
            var = getattr(self, setting)
            if var is not None and not ENV_NAME.match(var):
                raise ValueError(f"{setting}: {var!r} is not an environment variable name")
        if self.oauth_issuer is not None and not re.match(r"^https?://", self.oauth_issuer):
            raise ValueError(f"oauth_issuer must start with https:// or http:// (got {shown_url(self.oauth_issuer)!r})")
        if self.oauth_issuer is not None and self.oauth_client_id is None:
            raise ValueError("oauth_issuer needs oauth_client_id (it names where that client is registered)")
        if self.oauth_client_secret_env_var is not None and self.oauth_client_id is None:
            raise ValueError("oauth_client_secret_env_var needs oauth_client_id")
        if self.oauth_grant == "client_credentials" and (self.oauth_client_id is None or (
                self.oauth_client_secret_env_var is None) == (self.oauth_private_key_file is None)):
            raise ValueError("oauth_grant = \"client_credentials\" needs oauth_client_id and either "
                             "oauth_client_secret_env_var or oauth_private_key_file")
        self._check_enterprise()
        if self.oauth_private_key_file is not None and self.oauth_grant != "client_credentials":
            raise ValueError("oauth_private_key_file applies only with oauth_grant = \"client_credentials\"")
        if self.oauth_client_metadata_url is not None:
            parts = urlsplit(self.oauth_client_metadata_url)
            if parts.scheme != "https" or parts.path in ("", "/"):
                raise ValueError("oauth_client_metadata_url must be an https:// address with a path (got "
                                 f"{shown_url(self.oauth_client_metadata_url)!r})")

    def _check_enterprise(self) -> None:
        given = [name for name in ENTERPRISE_SETTINGS if getattr(self, name) is not None]
        if self.oauth_grant != "enterprise":
            if given:
                raise ValueError(f"{given[0]} applies only with oauth_grant = \"enterprise\"")
            return
        # SEP-990: the authorization server is configuration, never the MCP server's choice, so the
        # client's secret and the ID-JAG go only to oauth_issuer.
        needed = [name for name in ("oauth_client_id", "oauth_client_secret_env_var", "oauth_issuer",
                                    "oauth_idp_token_endpoint", "oauth_idp_id_token_env_var")
                  if getattr(self, name) is None]
        if needed:
            raise ValueError(f"oauth_grant = \"enterprise\" needs {', '.join(needed)}")
        if not re.match(r"^https?://", self.oauth_idp_token_endpoint or ""):
            raise ValueError("oauth_idp_token_endpoint must start with https:// or http:// (got "
                             f"{shown_url(self.oauth_idp_token_endpoint or '')!r})")
        if self.oauth_idp_client_secret_env_var is not None and self.oauth_idp_client_id is None:
            raise ValueError("oauth_idp_client_secret_env_var needs oauth_idp_client_id")


# The settings of oauth_grant = "enterprise" alone.
ENTERPRISE_SETTINGS = ("oauth_idp_token_endpoint", "oauth_idp_id_token_env_var", "oauth_idp_client_id",
                       "oauth_idp_client_secret_env_var")

HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP token (RFC 9110)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ENV_REFERENCE = re.compile(r"\$\{([^}]*)\}")


class MissingEnvironment(ValueError):
    """A header names an environment variable that is not set (or is empty)."""


def resolved_headers(config: McpServerConfig, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The headers a url server is sent, ``${NAME}`` and ``bearer_token_env_var`` read from the environment.

    Raises MissingEnvironment naming the variable: an empty token would only earn a 401 later.
    """
    env = dict(os.environ) if environ is None else environ

    def value_of(var: str, where: str) -> str:
        value = env.get(var, "")
        if not value:
            raise MissingEnvironment(f"{where} needs the environment variable {var}, which is not set")
        return value

    headers: dict[str, str] = {}
    for name, value in config.headers.items():
        for var in ENV_REFERENCE.findall(value):
            value = value.replace("${" + var + "}", value_of(var, f"header {name}"))
        headers[name] = value
    if config.bearer_token_env_var is not None:
        headers["Authorization"] = "Bearer " + value_of(config.bearer_token_env_var, "bearer_token_env_var")
    return headers


def header_secrets(config: McpServerConfig, environ: dict[str, str] | None = None) -> list[str]:
    """The values from the environment that ``resolved_headers`` puts in headers (to register as secrets)."""
    env = dict(os.environ) if environ is None else environ
    names = [var for value in config.headers.values() for var in ENV_REFERENCE.findall(value)]
    if config.bearer_token_env_var is not None:
        names.append(config.bearer_token_env_var)
    return [env[var] for var in names if env.get(var)]


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
