"""The SDK's OAuth provider as tidegauge runs it (``StoredExpiryProvider``), with the checks of the
2025-03-26 revision's authorization server it needs.

Imported only when a url server's OAuth is set up (``app.mcp.oauth``): subclassing the SDK's
provider loads its auth modules, which a session without such a server never needs.
"""

from __future__ import annotations

from typing import Any, AsyncGenerator, Protocol

import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthFlowError
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    create_oauth_metadata_request,
    handle_auth_metadata_response,
    handle_protected_resource_response,
    issuers_match,
    validate_metadata_issuer,
)

from app.mcp.oauth_endpoints import AuthorizationRequired, KeptAuthorizationServer, endpoint_refusal, origin, origin_url


class AuthorizationServerFile(Protocol):
    """What the provider needs of the token file (``app.mcp.oauth.TokenFile``)."""

    def want_scope(self, scope: str) -> None: ...

    def get_authorization_server(self) -> KeptAuthorizationServer | None: ...

    def set_authorization_server(self, server: KeptAuthorizationServer) -> None: ...


def same_issuer(registered: str, issuer: str) -> bool:
    """Whether the issuer a client was registered at is ``issuer`` (RFC 8414 §3.3's simple comparison;
    a root issuer with and without its trailing slash is one)."""
    return issuers_match(registered, issuer)


def origin_metadata_url(server_url: str) -> str:
    """Where a 2025-03-26 server's authorization server metadata is: its origin's well-known address."""
    return f"{origin_url(server_url)}/.well-known/oauth-authorization-server"


async def last_resource_metadata_miss(sent: httpx2.Request, answer: httpx2.Response, server_url: str) -> bool:
    """Whether ``answer`` is the last protected-resource metadata address of ``server_url`` (its
    origin's) answering without any, so that the SDK takes the server for a 2025-03-26 one."""
    root = f"{origin_metadata_url(server_url).rsplit('/', 1)[0]}/oauth-protected-resource"
    if str(sent.url) != root or answer.status_code >= 500 or answer.status_code == 429:
        return False
    return await handle_protected_resource_response(answer) is None


async def _issuer_onorigin(answer: httpx2.Response, server_url: str) -> str | None:
    """The issuer the metadata at the MCP server's origin names, if that issuer is on the same origin.

    For the 2025-03-26 revision the authorization server is the MCP server's origin: no issuer is
    named beforehand, and the metadata served there is the origin's own word about itself, so an
    issuer with a path on that origin (``https://mcp.example.com/oauth``) is the origin's. An
    issuer on any other origin is not: the SDK's exact comparison with the origin refuses it, so a
    server can never claim another authorization server's identity (and its bound credentials).
    """
    _found, metadata = await handle_auth_metadata_response(answer)
    if metadata is None or origin(str(metadata.issuer)) != origin(server_url):
        return None
    return str(metadata.issuer)


class StoredExpiryProvider(OAuthClientProvider):
    """The SDK's provider, which also believes a stored token's expiry (it loads tokens without
    it, and would send an expired token, then ask for consent, rather than refresh it), takes a
    2025-03-26 server's authorization server metadata as that revision serves it, and refreshes
    only at the token endpoint of the authorization server that issued the tokens (kept in the
    file, or discovered again as login discovers it), never at the MCP server's origin."""

    # The issuer the metadata at the MCP server's origin names, when it is on that origin.
    origin_metadata_issuer: str | None = None
    # The authorization server of the stored tokens, as the token file keeps it.
    kept: KeptAuthorizationServer | None = None

    def __init__(self, *args: Any, name: str, file: AuthorizationServerFile, consent: bool, **kwargs: Any) -> None:
        """The SDK's arguments, and tidegauge's: the server's ``name`` (for the login command a
        refusal names), the token ``file`` that keeps the authorization server beside the tokens,
        and whether this flow may ask for ``consent`` (a login) or not (a session)."""
        super().__init__(*args, **kwargs)
        self.name = name
        self.file = file
        self.consent = consent

    def want_scope(self, scope: str) -> None:
        """A 403 insufficient_scope named ``scope``: kept for the next login (see ``ScopeKeeper``)."""
        self.file.want_scope(scope)

    async def _initialize(self) -> None:
        await super()._initialize()
        if self.context.current_tokens is not None:
            self.context.update_token_expiry(self.context.current_tokens)
        self.kept = self.file.get_authorization_server()
        client = self.context.client_info
        if self.kept is not None and client is not None and client.issuer is not None and not same_issuer(
                client.issuer, self.kept.issuer):
            self.kept = None  # not the server the client was registered at (SEP-2352): found again instead

    def _expected_issuer(self) -> str:
        # No protected-resource metadata: the 2025-03-26 revision, whose authorization server is
        # the MCP server's origin. A server found through protected-resource metadata keeps the
        # SDK's exact RFC 8414 §3.3 comparison with the issuer that metadata names.
        if self.context.auth_server_url is None and self.origin_metadata_issuer is not None:
            return self.origin_metadata_issuer
        return super()._expected_issuer()

    def _discovered(self) -> KeptAuthorizationServer | None:
        """What to keep of the authorization server this process discovered (None: nothing to keep)."""
        found = self.context.oauth_metadata
        if found is not None:
            return KeptAuthorizationServer(str(found.issuer), str(found.token_endpoint))
        if self.context.auth_server_url is None:
            # A 2025-03-26 server without metadata: its origin is the authorization server, and
            # the login exchanged its code at the origin's /token (the revision's default).
            return KeptAuthorizationServer(origin_url(self.context.server_url), self._get_token_endpoint())
        return None

    def _keep_authorization_server(self) -> None:
        server = self._discovered()
        if server is not None and server.refusal() is None and server != self.kept:
            self.file.set_authorization_server(server)
            self.kept = server

    async def _perform_authorization(self) -> httpx2.Request:
        # The consent's code, the PKCE verifier and then the tokens go to these endpoints: never
        # in clear text off loopback (the MCP authorization spec: every authorization server
        # endpoint over HTTPS), as a refresh never goes there either (``endpoint_refusal``).
        metadata = self.context.oauth_metadata
        endpoints = [("token endpoint", self._get_token_endpoint())]
        if metadata is not None and metadata.authorization_endpoint is not None:
            endpoints.insert(0, ("authorization endpoint", str(metadata.authorization_endpoint)))
        for what, url in endpoints:
            why = endpoint_refusal(url)
            if why is not None:
                raise OAuthFlowError(f"the authorization server's {what} {url} is {why}")
        return await super()._perform_authorization()

    async def _handle_token_response(self, response: httpx2.Response) -> None:
        await super()._handle_token_response(response)
        self._keep_authorization_server()

    async def _handle_refresh_response(self, response: httpx2.Response) -> bool:
        refreshed = await super()._handle_refresh_response(response)
        if refreshed and self.context.oauth_metadata is not None:
            self._keep_authorization_server()
        return refreshed

    async def _refresh_token(self) -> httpx2.Request:
        # The SDK's request, sent where the tokens came from: its own fallback is the MCP server's origin.
        request = await super()._refresh_token()
        if self.context.oauth_metadata is not None:
            return request
        if self.kept is None:  # _auth_flow finds the server first; never the MCP server's /token
            raise AuthorizationRequired(self.name, "the authorization server of its tokens is not known")
        headers = [(key, value) for key, value in request.headers.multi_items()
                   if key.lower() not in ("host", "content-length")]
        return httpx2.Request("POST", self.kept.token_endpoint, headers=headers, content=request.content)

    async def _refresh_needs_discovery(self) -> bool:
        async with self.context.lock:
            if not self._initialized:
                await self._initialize()
            return (not self.context.is_token_valid() and self.context.can_refresh_token()
                    and self.context.oauth_metadata is None and self.kept is None)

    async def _rediscover(self) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        """The authorization server of tokens stored without it (a file from before it was kept),
        found as login finds it, with login's checks: protected-resource metadata (or the
        2025-03-26 origin's), then authorization server metadata naming the expected issuer, which
        must also be the issuer the client was registered at. Raises ``AuthorizationRequired``
        saying why when it cannot be found."""
        def cannot(why: str) -> AuthorizationRequired:
            return AuthorizationRequired(self.name, f"the authorization server of its stored tokens cannot be "
                                               f"found again ({why}); log in again")

        client = self.context.client_info
        if client is None or client.issuer is None:
            # Nothing says which server issued the tokens: the one found now may be the MCP
            # server's own claim, and a refresh token is never sent on its word alone.
            raise cannot("the client's registration names no issuer")
        server_url = self.context.server_url
        for url in build_protected_resource_metadata_discovery_urls(None, server_url):
            answer = yield create_oauth_metadata_request(url)
            if answer.status_code >= 500 or answer.status_code == 429:
                raise cannot(f"its protected-resource metadata answered HTTP {answer.status_code}")
            resource = await handle_protected_resource_response(answer)
            if resource is not None:
                try:
                    await self._validate_resource_match(resource)
                except OAuthFlowError as exc:
                    raise cannot(str(exc)) from None
                self.context.protected_resource_metadata = resource
                self.context.auth_server_url = self._select_authorization_server(
                    [str(each) for each in resource.authorization_servers])
                break
        else:
            origin_metadata = yield create_oauth_metadata_request(origin_metadata_url(server_url))
            self.origin_metadata_issuer = await _issuer_onorigin(origin_metadata, server_url)
        expected = self._expected_issuer()
        for url in build_oauth_authorization_server_metadata_discovery_urls(self.context.auth_server_url,
                                                                            server_url):
            answer = yield create_oauth_metadata_request(url)
            ok, metadata = await handle_auth_metadata_response(answer)
            if not ok:
                break
            if metadata is not None:
                if self.context.auth_server_url is None and issuers_match(str(metadata.issuer), expected):
                    expected = str(metadata.issuer)
                try:
                    validate_metadata_issuer(metadata, expected)
                except OAuthFlowError as exc:
                    raise cannot(str(exc)) from None
                if not same_issuer(client.issuer, str(metadata.issuer)):
                    raise cannot(f"it is now {metadata.issuer}, the client was registered at {client.issuer}")
                self.context.oauth_metadata = metadata
                break
        if self.context.oauth_metadata is None:
            raise cannot("no authorization server metadata")
        # The issuer's own metadata, checked as login checks it, may put its token endpoint on
        # another origin (accounts.google.com's is oauth2.googleapis.com): used, though only an
        # endpoint on the issuer's origin is kept in the file. Never in clear text off loopback.
        why = endpoint_refusal(str(self.context.oauth_metadata.token_endpoint))
        if why is not None:
            self.context.oauth_metadata = None
            raise cannot(f"its token endpoint is {why}")

    async def _auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        if await self._refresh_needs_discovery():
            rediscovery = self._rediscover()
            try:
                outgoing = await rediscovery.__anext__()
                while True:
                    answer = yield outgoing
                    outgoing = await rediscovery.asend(answer)
            except StopAsyncIteration:
                pass
            except AuthorizationRequired:
                if not self.consent:
                    raise
                # A login asks for consent anyway: the stored tokens are dropped, not refreshed.
                self.context.clear_tokens()
            finally:
                await rediscovery.aclose()
        flow = super()._auth_flow(request)
        try:
            outgoing = await flow.__anext__()
            while True:
                response = yield outgoing
                if outgoing is not request and await last_resource_metadata_miss(outgoing, response,
                                                                                 self.context.server_url):
                    # The SDK goes the 2025-03-26 way next and compares the origin's metadata with
                    # an issuer it decides first: read that metadata before it decides.
                    origin_metadata = yield create_oauth_metadata_request(origin_metadata_url(self.context.server_url))
                    self.origin_metadata_issuer = await _issuer_onorigin(origin_metadata, self.context.server_url)
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()
