"""An OAuth-protected streamable-HTTP MCP server with its own authorization server, on one port.

    python tests/mcp_servers/oauth_http.py --port PORT --record FILE [--access-expires-in S] [--client ID:SECRET]
                                           [--scoped-tool NAME:SCOPE]

As the MCP authorization spec has it: ``/mcp`` answers 401 with ``WWW-Authenticate: Bearer
resource_metadata=...`` without a valid access token; protected-resource metadata
(RFC 9728), authorization-server metadata (RFC 8414), dynamic client registration (RFC 7591),
an authorization endpoint that consents at once (the browser's part) and redirects to the
registered ``redirect_uri`` with the code and state, and a token endpoint that checks PKCE
(S256) and the redirect URI, and grants refresh tokens. ``POST /admin/revoke`` revokes every
token issued so far (a user revoking access at the server). Every request goes to FILE as a
JSON line: method, path, the JSON-RPC method or grant type, and the Authorization header.
``--client ID:SECRET`` is a client registered beforehand: it may use the authorization code
(any loopback redirect URI, RFC 8252) and the client_credentials grant, authenticated with HTTP
Basic at the token endpoint. ``--scoped-tool NAME:SCOPE`` adds the tool NAME, which needs SCOPE:
tokens then carry the scopes asked for at ``/authorize`` (the 401 asks for ``mcp:basic``), and a
call of NAME with a token without SCOPE is answered 403 ``insufficient_scope`` naming it (the
spec's scope step-up).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import secrets
from typing import Any
from urllib.parse import parse_qs, urlencode

import uvicorn
from mcp.server.mcpserver import MCPServer

from _asgi import read_request, replaying, reply


def build_app(port: int, record_path: str, *, access_expires_in: int = 3600, client: str = "",
              scoped_tool_and_scope: str = "") -> Any:
    """The server's ASGI app on ``port`` (run by ``main``, or in a test's thread: tests/asgi_in_thread.py)."""
    scoped_tool, _, needed_scope = scoped_tool_and_scope.partition(":")
    pre_id, _, pre_secret = client.partition(":")
    pre_basic = "Basic " + base64.b64encode(f"{pre_id}:{pre_secret}".encode()).decode() if pre_id else None
    base = f"http://127.0.0.1:{port}"
    prm_url = f"{base}/.well-known/oauth-protected-resource/mcp"

    server = MCPServer("oauth-http")

    @server.tool(description="Says back what it is given.")
    def echo(text: str) -> str:
        return f"echo: {text}"

    if scoped_tool:
        @server.tool(name=scoped_tool, description=f"Needs the scope {needed_scope}.")
        def scoped() -> str:
            return f"{scoped_tool} done"

    mcp_app = server.streamable_http_app()
    record = open(record_path, "a", encoding="utf-8")
    clients: dict[str, list[str]] = {}  # client_id -> redirect_uris
    codes: dict[str, dict[str, str]] = {}
    access_tokens: dict[str, set[str]] = {}  # token -> the scopes it carries
    refresh_tokens: set[str] = set()

    def grant(scopes: str = "") -> dict[str, Any]:
        access, refresh = "at-" + secrets.token_hex(16), "rt-" + secrets.token_hex(16)
        access_tokens[access] = set(scopes.split())
        refresh_tokens.add(refresh)
        return {"access_token": access, "token_type": "Bearer", "expires_in": access_expires_in,
                "refresh_token": refresh, **({"scope": scopes} if scoped_tool else {})}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await mcp_app(scope, receive, send)
        headers, body = await read_request(scope, receive)
        path, method = scope["path"], scope["method"]
        form = {k: v[0] for k, v in parse_qs(body.decode()).items()} if path == "/token" else {}
        rpc = None
        if path == "/mcp" and body:
            try:
                rpc = json.loads(body).get("method")
            except ValueError:
                pass
        record.write(json.dumps({"method": method, "path": path, "rpc": rpc, "grant_type": form.get("grant_type"),
                                 "authorization": headers.get("authorization")}) + "\n")
        record.flush()

        if path == "/.well-known/oauth-protected-resource/mcp":
            return await reply(send, 200, {"resource": f"{base}/mcp", "authorization_servers": [base]})
        if path == "/.well-known/oauth-authorization-server":
            return await reply(send, 200, {
                "issuer": base, "authorization_endpoint": f"{base}/authorize", "token_endpoint": f"{base}/token",
                "registration_endpoint": f"{base}/register", "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token"],
                "code_challenge_methods_supported": ["S256"], "token_endpoint_auth_methods_supported": ["none"]})
        if path == "/register" and method == "POST":
            request = json.loads(body)
            client_id = "client-" + secrets.token_hex(4)
            clients[client_id] = list(request.get("redirect_uris") or [])
            return await reply(send, 201, {**request, "client_id": client_id, "token_endpoint_auth_method": "none"})
        if path == "/authorize":
            query = {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}
            redirect_uri = query.get("redirect_uri", "")
            registered = clients.get(query.get("client_id", ""), [])
            if pre_id and query.get("client_id") == pre_id and redirect_uri.startswith("http://127.0.0.1:"):
                registered = [redirect_uri]
            if redirect_uri not in registered or query.get("code_challenge_method") != "S256":
                return await reply(send, 400, {"error": "invalid_request"})
            code = "code-" + secrets.token_hex(8)
            codes[code] = {"challenge": query["code_challenge"], "redirect_uri": redirect_uri,
                           "scope": query.get("scope", "")}
            location = f"{redirect_uri}?{urlencode({'code': code, 'state': query.get('state', '')})}"
            return await reply(send, 302, headers=[(b"location", location.encode())])
        if path == "/token" and method == "POST":
            if pre_basic and form.get("client_id") == pre_id and headers.get("authorization") != pre_basic:
                return await reply(send, 401, {"error": "invalid_client"})
            if form.get("grant_type") == "client_credentials":
                if not pre_basic or headers.get("authorization") != pre_basic:
                    return await reply(send, 401, {"error": "invalid_client"})
                return await reply(send, 200, grant())
            if form.get("grant_type") == "authorization_code":
                issued = codes.pop(form.get("code", ""), None)
                verifier = form.get("code_verifier", "")
                challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
                if issued is None or issued["challenge"] != challenge or issued["redirect_uri"] != form.get("redirect_uri"):
                    return await reply(send, 400, {"error": "invalid_grant"})
                return await reply(send, 200, grant(issued["scope"]))
            if form.get("grant_type") == "refresh_token":
                if form.get("refresh_token") not in refresh_tokens:
                    return await reply(send, 400, {"error": "invalid_grant"})
                refresh_tokens.discard(form["refresh_token"])
                return await reply(send, 200, grant())
            return await reply(send, 400, {"error": "unsupported_grant_type"})
        if path == "/admin/revoke":
            access_tokens.clear()
            refresh_tokens.clear()
            return await reply(send, 200, {})
        if path.startswith("/mcp"):
            token = headers.get("authorization", "").removeprefix("Bearer ")
            if token not in access_tokens:
                asked = ', scope="mcp:basic"' if scoped_tool else ""
                challenge = f'Bearer error="invalid_token", resource_metadata="{prm_url}"{asked}'.encode()
                return await reply(send, 401, {"error": "invalid_token"}, [(b"www-authenticate", challenge)])
            if scoped_tool and body and needed_scope not in access_tokens[token]:
                try:
                    call = json.loads(body)
                except ValueError:
                    call = {}
                if call.get("method") == "tools/call" and call.get("params", {}).get("name") == scoped_tool:
                    challenge = (f'Bearer error="insufficient_scope", scope="{needed_scope}", '
                                 f'resource_metadata="{prm_url}"').encode()
                    return await reply(send, 403, {"error": "insufficient_scope"}, [(b"www-authenticate", challenge)])
            return await mcp_app(scope, replaying(body, receive) if method == "POST" else receive, send)
        return await reply(send, 404, {"error": "not_found"})

    app.close_record = record.close  # type: ignore[attr-defined]
    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--access-expires-in", type=int, default=3600)
    parser.add_argument("--client", default="")
    parser.add_argument("--scoped-tool", default="")
    args = parser.parse_args()
    app = build_app(args.port, args.record, access_expires_in=args.access_expires_in, client=args.client,
                    scoped_tool_and_scope=args.scoped_tool)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", lifespan="on")


if __name__ == "__main__":
    main()
