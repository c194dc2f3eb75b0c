"""OAuth 2.1 for remote MCP servers, as the MCP authorization spec describes it.

The SDK's ``OAuthClientProvider`` (an httpx2 ``Auth``) does the protocol: protected-resource and
authorization-server metadata discovery, dynamic client registration, PKCE, the token exchange and
refresh. This module gives it what is tidegauge's:

- ``TokenFile``: its ``TokenStorage``, one file per server under ``<data_dir>/mcp-oauth/``, written
  through ``private_files`` (0600, no symlinks). The file names the server's URL: tokens are never
  sent to another URL given the same name. Tokens and client secrets are registered with
  ``redact`` as soon as they are read or received, so no log, event or page can show them.
- ``LoopbackReceiver``: the redirect target of a login, on 127.0.0.1 only, an ephemeral port,
  accepting exactly one callback carrying the flow's ``state``, then closed.
- ``session_auth``: what a session's connection uses. It sends and refreshes stored tokens, and
  never opens a browser: when consent is needed it stops with ``AuthorizationRequired``, whose
  words name the login command. ``login`` (``tidegauge mcp login NAME``) is the one place a
  browser opens (or, with no display, the address is printed).
- A server of the 2025-03-26 revision (no protected-resource metadata) has its authorization
  server at its origin: the metadata there may name an issuer on that origin (``/oauth``); one on
  another origin is refused, and servers of the current revision keep RFC 8414's exact issuer match.
- ``oauth_grant = "enterprise"`` (SEP-990): the user's ID token is exchanged at the enterprise
  identity provider for an ID-JAG, presented at the configured ``oauth_issuer``; no login.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, cast
from urllib.parse import parse_qs, parse_qsl, quote, urlencode, urlsplit, urlunsplit

from app import __version__
from app.kernel.private_files import read_private, remove_private, write_private_atomic
from app.kernel.redact import register_secret, redact
from app.mcp.client import McpConnection, McpServerError
from app.mcp.oauth_endpoints import AuthorizationRequired, KeptAuthorizationServer
from app.mcp.settings import shown_url

if TYPE_CHECKING:
    import httpx2
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthToken

    from app.mcp.settings import McpServerConfig

# The SDK logs a failed flow with its traceback (the token endpoint's answer in it): that is not
# for the user's terminal or the dashboard's screen. The failure itself comes back as one line.
logging.getLogger("mcp.client.auth").addHandler(logging.NullHandler())
logging.getLogger("mcp.client.auth").propagate = False

# A token file larger than this is not ours (a few KiB at most).
MAX_TOKEN_FILE_BYTES = 64 * 1024
# How long a login waits for the user's consent in the browser.
CONSENT_TIMEOUT = 300.0
# The longest request line the loopback receiver reads (a callback is a few hundred bytes).
MAX_CALLBACK_LINE = 8192
CALLBACK_PATH = "/callback"
# Where the session's tokens-only provider says it would redirect (it never does: no browser).
UNUSED_REDIRECT = "http://127.0.0.1/callback"

# (authorization URL) -> None: shows it to the user (a browser, a printed line) or, in the
# conformance benchmark, follows its redirect as the suite's own clients do.
OpenConsent = Callable[[str], Awaitable[None]]


class OAuthSetupError(ValueError):
    """An OAuth setting that cannot be used (a key file that is not a key); one line."""


class LoginError(Exception):
    """A login that could not finish; the message is one line saying why."""


def token_path(data_dir: Path, name: str) -> Path:
    return data_dir / "mcp-oauth" / f"{name}.json"


def _register_token_secrets(tokens: OAuthToken | None) -> None:
    if tokens is not None:
        register_secret(tokens.access_token)
        register_secret(tokens.refresh_token)


@dataclass
class TokenFile:
    """The SDK's ``TokenStorage`` on one 0600 file, bound to the server's URL.

    The token's lifetime is kept as an absolute time (``expires_at``): the SDK keeps only
    ``expires_in``, which means nothing once the process that received it is gone. So is the
    authorization server that issued the tokens (``authorization_server``: issuer and token
    endpoint), which a refresh in another process needs.
    """

    path: Path
    server_url: str

    def _read(self) -> dict[str, Any]:
        try:
            raw = read_private(self.path, MAX_TOKEN_FILE_BYTES + 1)
        except FileNotFoundError:
            return {}
        if len(raw) > MAX_TOKEN_FILE_BYTES:
            return {}
        try:
            stored = json.loads(raw)
        except ValueError:
            return {}  # a damaged file is as good as none: the next login writes it again
        if not isinstance(stored, dict) or stored.get("server_url") != self.server_url:
            return {}  # another server's tokens (the URL under this name changed): never sent here
        return stored

    def _write(self, **changes: Any) -> None:
        stored = self._read() | changes | {"server_url": self.server_url}
        write_private_atomic(self.path, json.dumps(stored, indent=1).encode())

    def exists(self) -> bool:
        return bool(self._read().get("tokens"))

    async def get_tokens(self) -> OAuthToken | None:
        # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
        from mcp.shared.auth import OAuthToken
        from pydantic import ValidationError

        stored = self._read()
        if not isinstance(stored.get("tokens"), dict):
            return None
        try:
            tokens = OAuthToken.model_validate(stored["tokens"])
        except ValidationError:
            return None
        _register_token_secrets(tokens)
        expires_at = stored.get("expires_at")
        if isinstance(expires_at, (int, float)):
            tokens.expires_in = max(0, int(expires_at - time.time()))
        return tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        _register_token_secrets(tokens)
        expires_at = time.time() + tokens.expires_in if tokens.expires_in is not None else None
        self._write(tokens=tokens.model_dump(mode="json", exclude_none=True), expires_at=expires_at)

    def get_authorization_server(self) -> KeptAuthorizationServer | None:
        """The kept authorization server of the stored tokens; None when none was kept (a file written
        before it was) or what is kept may not be used (``KeptAuthorizationServer.refusal``)."""
        kept = self._read().get("authorization_server")
        if not isinstance(kept, dict):
            return None
        issuer, endpoint = kept.get("issuer"), kept.get("token_endpoint")
        if not isinstance(issuer, str) or not isinstance(endpoint, str):
            return None
        server = KeptAuthorizationServer(issuer, endpoint)
        return server if server.refusal() is None else None

    def set_authorization_server(self, server: KeptAuthorizationServer) -> None:
        self._write(authorization_server={"issuer": server.issuer, "token_endpoint": server.token_endpoint})

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
        from mcp.shared.auth import OAuthClientInformationFull
        from pydantic import ValidationError

        stored = self._read().get("client_info")
        if not isinstance(stored, dict):
            return None
        try:
            info = OAuthClientInformationFull.model_validate(stored)
        except ValidationError:
            return None
        register_secret(info.client_secret)
        return info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        register_secret(client_info.client_secret)
        self._write(client_info=client_info.model_dump(mode="json", exclude_none=True))

    def granted_scope(self) -> str | None:
        """The scope the stored tokens were granted (None when none is said)."""
        tokens = self._read().get("tokens")
        scope = tokens.get("scope") if isinstance(tokens, dict) else None
        return scope if isinstance(scope, str) and scope.strip() else None

    def wanted_scope(self) -> str | None:
        """The scope servers asked for beyond the granted one (403 insufficient_scope), for the next login."""
        wanted = self._read().get("wanted_scope")
        return wanted if isinstance(wanted, str) and wanted.strip() else None

    def want_scope(self, scope: str) -> None:
        """A session met a 403 asking for ``scope``: the next login asks for it too (with what it has)."""
        # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
        from mcp.client.auth.utils import union_scopes

        if self.exists():
            self._write(wanted_scope=union_scopes(self.wanted_scope(), scope))

    def clear_wanted_scope(self) -> None:
        stored = self._read()
        if "wanted_scope" in stored:
            write_private_atomic(self.path, json.dumps(
                {k: v for k, v in stored.items() if k != "wanted_scope"}, indent=1).encode())

    def forget_tokens(self) -> None:
        """Drop the tokens (a login for more scope: still valid, they would keep the login from asking),
        keeping the client's registration and the authorization server."""
        stored = self._read()
        if stored:
            write_private_atomic(self.path, json.dumps(
                {k: v for k, v in stored.items() if k not in ("tokens", "expires_at")}, indent=1).encode())

    def forget(self) -> bool:
        """Remove the file (``tidegauge mcp logout``, the /mcp view's logout); whether there was one."""
        return remove_private(self.path)


@dataclass
class _LoginStorage:
    """A login's view of the token file: a registration made for another redirect address
    (an earlier login's port) is not offered, so the server is asked to register this one."""

    file: TokenFile
    redirect_uri: str

    async def get_tokens(self) -> OAuthToken | None:
        return await self.file.get_tokens()

    async def set_tokens(self, tokens: OAuthToken) -> None:
        await self.file.set_tokens(tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        info = await self.file.get_client_info()
        if info is None or self.redirect_uri not in [str(uri) for uri in info.redirect_uris or []]:
            return None
        return info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await self.file.set_client_info(client_info)


@dataclass
class _PreRegistered:
    """The storage of a client registered beforehand (``oauth_client_id``): its record is the
    config's, never the file's nor a dynamic registration's."""

    file: Any
    client_info: OAuthClientInformationFull

    async def get_tokens(self) -> OAuthToken | None:
        return cast("OAuthToken | None", await self.file.get_tokens())

    async def set_tokens(self, tokens: OAuthToken) -> None:
        await self.file.set_tokens(tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        return None


def client_secret(name: str, config: McpServerConfig) -> str | None:
    """The secret of a pre-registered client, from the environment (registered as a secret).
    Raises LoginError naming the variable when it is not set."""
    var = config.oauth_client_secret_env_var
    if var is None:
        return None
    value = os.environ.get(var, "")
    if not value:
        raise LoginError(f"oauth_client_secret_env_var of {name} needs the environment variable {var}, which is not set")
    register_secret(value)
    return value


def _provider(name: str, config: McpServerConfig, storage: Any, redirect_uri: str,
              redirect_handler: Callable[[str], Awaitable[None]],
              callback_handler: Callable[[], Awaitable[AuthorizationCodeResult]], *,
              file: TokenFile, consent: bool) -> OAuthClientProvider:
    """The SDK's provider as tidegauge runs it; ``file`` keeps the authorization server beside the
    tokens; ``consent`` says whether this flow may ask for it (a login) or not (a session)."""
    # The SDK's auth modules are loaded only when a url server's OAuth is set up: a session without one never pays for them.
    from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata
    from pydantic import AnyUrl

    from app.mcp.oauth_provider import StoredExpiryProvider

    assert config.url is not None
    metadata = OAuthClientMetadata(redirect_uris=[AnyUrl(redirect_uri)], client_name="tidegauge",
                                   software_id="tidegauge", software_version=__version__)
    if config.oauth_client_id is not None:
        secret = client_secret(name, config)
        storage = _PreRegistered(storage, OAuthClientInformationFull(
            client_id=config.oauth_client_id, client_secret=secret, redirect_uris=[AnyUrl(redirect_uri)],
            token_endpoint_auth_method="client_secret_basic" if secret else "none",
            issuer=config.oauth_issuer))  # SEP-2352: bound to it, never presented to another server
    return StoredExpiryProvider(config.url, metadata, storage, redirect_handler=redirect_handler,
                                callback_handler=callback_handler, client_metadata_url=config.oauth_client_metadata_url,
                                name=name, file=file, consent=consent)


def session_auth(name: str, config: McpServerConfig, data_dir: Path | None) -> httpx2.Auth | None:
    """The auth of a session's connection to url server ``name``: its stored tokens, refreshed
    when they expire; None when there are none (a 401 then names the login command).

    Never asks for consent: a session may run in a child process or headless, with nobody
    looking at a browser. A flow that needs consent stops with ``AuthorizationRequired``.
    """
    if data_dir is None or config.url is None or _has_own_authorization(config):
        return None
    file = TokenFile(token_path(data_dir, name), config.url)
    if config.oauth_grant == "client_credentials":
        return _client_credentials(name, config, file)
    if config.oauth_grant == "enterprise":
        return _enterprise(name, config, file)
    if not file.exists():
        return None

    async def no_browser(_url: str) -> None:
        raise AuthorizationRequired(name)

    async def no_callback() -> AuthorizationCodeResult:
        raise AuthorizationRequired(name)

    try:
        return _provider(name, config, file, UNUSED_REDIRECT, no_browser, no_callback, file=file, consent=False)
    except LoginError:
        return None  # the client's secret is not in the environment: the 401 says how to log in


def _client_credentials(name: str, config: McpServerConfig, file: TokenFile) -> OAuthClientProvider | None:
    """tidegauge as the OAuth client itself (``oauth_grant = "client_credentials"``): no user, no browser."""
    # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
    from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider

    assert config.url is not None and config.oauth_client_id is not None
    if config.oauth_private_key_file is not None:
        return _private_key_jwt(name, config, file)
    try:
        secret = client_secret(name, config)
    except LoginError:
        return None
    return ClientCredentialsOAuthProvider(config.url, file, config.oauth_client_id, secret or "",
                                          issuer=config.oauth_issuer)


# A private key file larger than this is not a PEM key (an RSA 4096 key is about 3 KiB).
MAX_KEY_FILE_BYTES = 64 * 1024


def _private_key_jwt(name: str, config: McpServerConfig, file: TokenFile) -> OAuthClientProvider:
    """client_credentials with a signed JWT (RFC 7523): the key stays here, only its signatures leave."""
    # cryptography and the SDK: loaded only for a server whose client signs its own JWT.
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.hazmat.primitives.serialization import load_pem_private_key
    from mcp.client.auth.extensions.client_credentials import PrivateKeyJWTOAuthProvider, SignedJWTParameters

    assert config.url is not None and config.oauth_client_id is not None and config.oauth_private_key_file is not None
    path = Path(os.path.expanduser(config.oauth_private_key_file))
    try:
        with open(path, "rb") as key_file:
            pem = key_file.read(MAX_KEY_FILE_BYTES + 1)
        key = load_pem_private_key(pem, password=None) if len(pem) <= MAX_KEY_FILE_BYTES else None
    except (OSError, ValueError, TypeError) as exc:
        raise OAuthSetupError(f"oauth_private_key_file of {name}: {path} is not a readable PEM private key "
                              f"without a password ({type(exc).__name__})") from None
    if isinstance(key, rsa.RSAPrivateKey):
        algorithm = "RS256"
    elif isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1":
        algorithm = "ES256"
    else:
        raise OAuthSetupError(f"oauth_private_key_file of {name}: {path} must be an RSA or EC P-256 private key")
    signer = SignedJWTParameters(issuer=config.oauth_client_id, subject=config.oauth_client_id,
                                 signing_key=pem.decode(), signing_algorithm=algorithm)
    return PrivateKeyJWTOAuthProvider(config.url, file, config.oauth_client_id, signer.create_assertion_provider(),
                                      issuer=config.oauth_issuer)


# RFC 8693 token exchange, as SEP-990 uses it: the user's ID token in, an ID-JAG out.
TOKEN_EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id_token"
ID_JAG_TYPE = "urn:ietf:params:oauth:token-type:id-jag"
# An identity provider's answer larger than this is not a token exchange response (a few KiB).
MAX_IDP_ANSWER_BYTES = 64 * 1024
# How long the identity provider may take to answer the exchange.
IDP_TIMEOUT = 30.0


def _environment_secret(name: str, setting: str, var: str) -> str:
    """The value of environment variable ``var`` named by ``setting``, registered as a secret;
    OAuthSetupError naming both when it is not set."""
    value = os.environ.get(var, "")
    if not value:
        raise OAuthSetupError(f"{setting} of {name} needs the environment variable {var}, which is not set")
    register_secret(value)
    return value


def _enterprise(name: str, config: McpServerConfig, file: TokenFile) -> httpx2.Auth:
    """SEP-990 (``oauth_grant = "enterprise"``): the user's ID token is exchanged at the enterprise
    identity provider for an ID-JAG, which the client presents at ``oauth_issuer`` (RFC 7523
    jwt-bearer, HTTP Basic). The SDK's provider does the second leg and only ever talks to the
    configured issuer's own metadata and token endpoint; the first leg is ``_id_jag_exchange``."""
    # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
    from mcp.client.auth.extensions.identity_assertion import IdentityAssertionOAuthProvider

    assert config.url is not None and config.oauth_client_id is not None and config.oauth_issuer is not None
    assert config.oauth_client_secret_env_var is not None and config.oauth_idp_id_token_env_var is not None
    secret = _environment_secret(name, "oauth_client_secret_env_var", config.oauth_client_secret_env_var)
    id_token = _environment_secret(name, "oauth_idp_id_token_env_var", config.oauth_idp_id_token_env_var)
    idp_secret = None
    if config.oauth_idp_client_secret_env_var is not None:
        idp_secret = _environment_secret(name, "oauth_idp_client_secret_env_var", config.oauth_idp_client_secret_env_var)
    return IdentityAssertionOAuthProvider(
        config.url, file, config.oauth_client_id, secret, config.oauth_issuer,
        _id_jag_exchange(config, id_token, idp_secret), token_endpoint_auth_method="client_secret_basic")


def _id_jag_exchange(config: McpServerConfig, id_token: str,
                     idp_secret: str | None) -> Callable[[str, str], Awaitable[str]]:
    """The first leg of SEP-990: (audience, resource) -> an ID-JAG from the identity provider.

    The ID token goes to ``oauth_idp_token_endpoint`` only: redirects are not followed (a 307
    would send the form on). What the provider answers is read up to a bound and never repeated
    whole: a failure is its HTTP status and its ``error`` code.
    """
    endpoint = config.oauth_idp_token_endpoint
    assert endpoint is not None

    async def exchange(audience: str, resource: str) -> str:
        # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
        import httpx2
        from mcp.client.auth import OAuthTokenError

        form = {"grant_type": TOKEN_EXCHANGE_GRANT, "subject_token": id_token, "subject_token_type": ID_TOKEN_TYPE,
                "requested_token_type": ID_JAG_TYPE, "audience": audience, "resource": resource}
        # Identity only, as the url servers' transport asks (mcp/http_bounds.py): httpx inflates a
        # chunk whole before the bound below could look, so a compressed answer is not read.
        headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
        if config.oauth_idp_client_id is not None and idp_secret is not None:
            pair = f"{quote(config.oauth_idp_client_id, safe='')}:{quote(idp_secret, safe='')}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        elif config.oauth_idp_client_id is not None:
            form["client_id"] = config.oauth_idp_client_id
        where = shown_url(endpoint)
        try:
            async with httpx2.AsyncClient(follow_redirects=False, timeout=IDP_TIMEOUT) as http:
                async with http.stream("POST", endpoint, data=form, headers=headers) as answer:
                    encoding = answer.headers.get("content-encoding", "identity").strip().lower()
                    if encoding not in ("", "identity"):
                        raise OAuthTokenError(f"the identity provider at {where} answered compressed "
                                              f"({redact(encoding)[:40]!r}), which tidegauge did not ask for; not read")
                    body = b""
                    async for chunk in answer.aiter_bytes():
                        body += chunk
                        if len(body) > MAX_IDP_ANSWER_BYTES:
                            raise OAuthTokenError(f"the identity provider at {where} answered more than "
                                                  f"{MAX_IDP_ANSWER_BYTES} bytes to the token exchange")
        except httpx2.HTTPError as exc:
            raise OAuthTokenError(f"the identity provider at {where} could not be reached ({type(exc).__name__})") from None
        try:
            answered = json.loads(body)
        except ValueError:
            answered = None
        if not isinstance(answered, dict):
            answered = {}
        if answer.status_code != 200:
            code = answered.get("error")
            why = f": {redact(code)[:80]}" if isinstance(code, str) and code.isprintable() else ""
            raise OAuthTokenError(f"the identity provider at {where} refused the token exchange "
                                  f"(HTTP {answer.status_code}{why})")
        id_jag = answered.get("access_token")
        if answered.get("issued_token_type") != ID_JAG_TYPE or not isinstance(id_jag, str) or not id_jag:
            raise OAuthTokenError(f"the identity provider at {where} did not answer with an ID-JAG "
                                  f"(issued_token_type {ID_JAG_TYPE})")
        register_secret(id_jag)
        return id_jag

    return exchange


def _has_own_authorization(config: McpServerConfig) -> bool:
    return config.bearer_token_env_var is not None or any(n.lower() == "authorization" for n in config.headers)


# ---------------------------------------------------------------- the redirect receiver

@dataclass
class LoopbackReceiver:
    """The one callback of a login, on 127.0.0.1 and a port the system picks.

    Any local process can reach it while a login waits. What it could do: deliver a code for the
    flow the user started (the token exchange needs this process's PKCE verifier, so a code it
    made up or stole elsewhere is worth nothing), or make the login fail. A request without the
    flow's ``state`` is answered 400 and changes nothing; the first one with it ends the wait and
    closes the port; a request line over ``MAX_CALLBACK_LINE`` is answered 414 and dropped.
    """

    expected_state: str | None = None
    refused: int = 0  # callbacks turned away (wrong state, wrong path, too long)
    _server: asyncio.AbstractServer | None = None
    _result: asyncio.Future[AuthorizationCodeResult] | None = None
    _port: int = 0
    _handlers: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> LoopbackReceiver:
        self._result = asyncio.get_running_loop().create_future()
        self._server = await asyncio.start_server(self._answer, "127.0.0.1", self._port, limit=MAX_CALLBACK_LINE)
        self._port = self._server.sockets[0].getsockname()[1]
        return self

    async def expect(self, state: str | None) -> None:
        """Wait for the callback of a flow whose authorization URL carries ``state``. A second flow on
        the same connection (a scope step-up) listens again, on the port its client registered."""
        if self._server is None:
            await self.start()
        elif self._result is not None and self._result.done():
            self._result = asyncio.get_running_loop().create_future()
        self.expected_state = state

    @property
    def redirect_uri(self) -> str:
        return f"http://127.0.0.1:{self._port}{CALLBACK_PATH}"

    async def result(self, within: float) -> AuthorizationCodeResult:
        """The callback's code, once it came; LoginError when none came ``within`` seconds."""
        assert self._result is not None
        try:
            return await asyncio.wait_for(asyncio.shield(self._result), within)
        except asyncio.TimeoutError:
            raise LoginError(f"no answer from the browser within {within:g} s (the login was not finished)") from None
        finally:
            await self.close()

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            status, page = await self._handle(reader)
            body = page.encode()
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                         f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            if task is not None:
                self._handlers.discard(task)

    async def _handle(self, reader: asyncio.StreamReader) -> tuple[str, str]:
        # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
        from mcp.shared.auth import AuthorizationCodeResult

        try:
            line = await asyncio.wait_for(reader.readline(), 10)
        except (ValueError, asyncio.LimitOverrunError):  # longer than the stream's limit
            self.refused += 1
            return "414 URI Too Long", "tidegauge: that address is too long for a login callback.\n"
        except asyncio.TimeoutError:
            self.refused += 1
            return "408 Request Timeout", "tidegauge: no request.\n"
        parts = line.decode("latin-1").split()
        if len(parts) != 3 or parts[0] != "GET":
            self.refused += 1
            return "405 Method Not Allowed", "tidegauge: only the login callback is answered here.\n"
        target = urlsplit(parts[1])
        query = {key: values[0] for key, values in parse_qs(target.query, keep_blank_values=True).items()}
        if target.path != CALLBACK_PATH or self.expected_state is None or query.get("state") != self.expected_state:
            self.refused += 1
            return "400 Bad Request", "tidegauge: this is not the callback of the login in progress.\n"
        assert self._result is not None
        if self._result.done():
            self.refused += 1
            return "409 Conflict", "tidegauge: the login already received its answer.\n"
        if "error" in query:
            why = query["error"][:80] + (f": {query['error_description'][:200]}" if query.get("error_description") else "")
            self._result.set_exception(LoginError(f"the authorization server refused: {why}"))
            return "200 OK", "tidegauge: the authorization was refused. You can close this tab.\n"
        self._result.set_result(AuthorizationCodeResult(code=query.get("code", ""), state=query["state"],
                                                        iss=query.get("iss")))
        return "200 OK", "tidegauge: authorized. You can close this tab and go back to the terminal.\n"


# ---------------------------------------------------------------- tidegauge mcp login NAME

def _state_of(url: str) -> str | None:
    values = parse_qs(urlsplit(url).query).get("state")
    return values[0] if values else None


async def show_in_browser(url: str) -> None:
    """Open ``url`` in a graphical browser when there is a display, or in the browser the user named
    in ``BROWSER``; the address is printed anyway.

    Without a display Python's ``webbrowser`` would start a text browser in this terminal, so it
    is not asked unless ``BROWSER`` names the one to use (a user's choice, as for every program
    that reads it): otherwise the user opens the printed address wherever a browser is.
    """
    print(f"Open this address in a browser to authorize tidegauge:\n  {url}", file=sys.stderr, flush=True)
    await open_in_browser(url)


async def open_in_browser(url: str) -> bool:
    """Open ``url`` in a graphical browser when there is a display, or in the one ``$BROWSER``
    names (the user's choice); whether one was asked. Otherwise nothing is started: a text
    browser would take the terminal."""
    if (sys.platform == "darwin" or os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
            or os.environ.get("BROWSER")):
        # Only a login opens a browser.
        import webbrowser

        return bool(await asyncio.to_thread(webbrowser.open, url))
    return False


def wanted_scopes(file: TokenFile) -> str | None:
    """What the next login asks for beside the server's own challenge: the scopes granted and those a
    403 named since (RFC 6750 §3.1), or None when no 403 asked for more."""
    wanted = file.wanted_scope()
    if not wanted:
        return None
    # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
    from mcp.client.auth.utils import union_scopes

    return union_scopes(file.granted_scope(), wanted)


def with_scope(url: str, extra: str | None) -> str:
    """The authorization URL asking for its own scope and ``extra`` too (RFC 6750 §3.1's step-up: the
    scopes granted and those a 403 named, so a login for more keeps what was had)."""
    if not extra:
        return url

    # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
    from mcp.client.auth.utils import union_scopes

    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    asked = next((value for key, value in query if key == "scope"), None)
    query = [(key, value) for key, value in query if key != "scope"] + [("scope", union_scopes(asked, extra) or "")]
    return urlunsplit(parts._replace(query=urlencode(query)))


def consent_auth(name: str, config: McpServerConfig, data_dir: Path, receiver: LoopbackReceiver,
                 open_consent: OpenConsent, consent_timeout: float = CONSENT_TIMEOUT,
                 extra_scope: str | None = None) -> OAuthClientProvider:
    """The auth of a login's connection: the whole flow, consent through ``open_consent`` and ``receiver``;
    ``extra_scope``: asked for beside what the server's challenge asks (a step-up)."""
    assert config.url is not None
    file = TokenFile(token_path(data_dir, name), config.url)

    async def redirect(url: str) -> None:
        await receiver.expect(_state_of(url))
        await open_consent(with_scope(url, extra_scope))

    async def callback() -> AuthorizationCodeResult:
        return await receiver.result(consent_timeout)

    return _provider(name, config, _LoginStorage(file, receiver.redirect_uri), receiver.redirect_uri, redirect, callback,
                     file=file, consent=True)


async def login(name: str, config: McpServerConfig, data_dir: Path, workspace: Path, *,
                open_consent: OpenConsent = show_in_browser, consent_timeout: float = CONSENT_TIMEOUT) -> int:
    """Authorize tidegauge at url server ``name`` (discovery, registration, PKCE consent, tokens
    stored 0600), then list its tools; returns how many. Raises LoginError with one line."""
    if config.url is None:
        raise LoginError(f"{name} is started as a command; OAuth is for url servers")
    if _has_own_authorization(config):
        raise LoginError(f"{name} is given its token by bearer_token_env_var or an Authorization header; "
                         "remove it to log in with OAuth")
    if config.oauth_grant in ("client_credentials", "enterprise"):
        raise LoginError(f"{name} uses oauth_grant = \"{config.oauth_grant}\": sessions get its tokens themselves, "
                         "no login needed")
    client_secret(name, config)  # a missing secret is named now, before a browser opens
    file = TokenFile(token_path(data_dir, name), config.url)
    wanted = file.wanted_scope()
    extra_scope = wanted_scopes(file)
    if extra_scope:  # a session met a 403 for more scope: ask for it and for what was granted, with consent
        file.forget_tokens()
    receiver = await LoopbackReceiver().start()
    auth = consent_auth(name, config, data_dir, receiver, open_consent, consent_timeout, extra_scope=extra_scope)
    # The handshake waits for the user's consent: it may take the consent's time as well as its own.
    patient = config.model_copy(update={"startup_timeout": config.startup_timeout + consent_timeout})
    connection = McpConnection(name, patient, workspace, authorization=auth)
    try:
        await connection.start()
    except McpServerError as exc:
        raise LoginError(str(exc)) from None
    finally:
        await receiver.close()
        await connection.aclose()
    if not file.exists():
        raise LoginError(f"{name} answered without asking for authorization: it needs no login")
    if wanted:
        file.clear_wanted_scope()
    return len(connection.tools)


def logout(name: str, data_dir: Path) -> bool:
    """Forget the tokens of ``name``; whether there were any."""
    return TokenFile(token_path(data_dir, name), "").forget()
