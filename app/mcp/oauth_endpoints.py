"""What tidegauge checks of an OAuth authorization server before a token or a code goes there.

Kept apart from ``app.mcp.oauth_provider`` (which subclasses the SDK's provider and so loads its
auth modules): the token file and the checks of what it keeps need none of the SDK.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from app.mcp.client import login_command


class AuthorizationRequired(Exception):
    """The server wants the user's consent, which only ``tidegauge mcp login NAME`` asks for."""

    def __init__(self, name: str, why: str = "") -> None:
        self.name = name
        super().__init__(f"authorization required{f' ({why})' if why else ''}: run `{login_command(name)}`")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def endpoint_refusal(url: str) -> str | None:
    """Why ``url`` may not receive a refresh token (None when it may): https, or http on loopback only,
    and nothing in it but scheme, host, port and path."""
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None or parts.fragment or not parts.hostname:
        return "not a plain address"
    if parts.scheme == "https" or (parts.scheme == "http" and is_loopback(parts.hostname)):
        return None
    return "neither https nor http on loopback"


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of ``url``, the port a scheme's default when it is left out."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1  # not a port: never the same origin as a real one
    return parts.scheme.lower(), (parts.hostname or "").lower(), port or {"https": 443, "http": 80}.get(parts.scheme)


def origin_url(server_url: str) -> str:
    parts = urlsplit(server_url)
    return f"{parts.scheme}://{parts.netloc}"


@dataclass(frozen=True)
class KeptAuthorizationServer:
    """The authorization server that issued a server's stored tokens, kept beside them.

    A new process (every session) holds no authorization server metadata, and the SDK then sends a
    refresh to ``<MCP server origin>/token``: a refresh token given to a party that did not issue it
    when the authorization server is elsewhere. What the refresh needs is kept instead, as discovered
    at login (and at each refresh that discovered it again).
    """

    issuer: str
    token_endpoint: str

    def refusal(self) -> str | None:
        """Why this may not be used (None when it may): both https (or http on loopback), the token
        endpoint on the issuer's origin, as discovered at login. Read from a file that someone else
        may have edited, so it is checked before a refresh token goes there."""
        for what, url in (("issuer", self.issuer), ("token endpoint", self.token_endpoint)):
            why = endpoint_refusal(url)
            if why is not None:
                return f"its {what} is {why}"
        if origin(self.token_endpoint) != origin(self.issuer):
            return "its token endpoint is not on its issuer's origin"
        return None
