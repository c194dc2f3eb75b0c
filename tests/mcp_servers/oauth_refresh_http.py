"""An OAuth-protected streamable-HTTP MCP server and its authorization server, laid out for refresh.

    python tests/mcp_servers/oauth_refresh_http.py --layout LAYOUT --port PORT [--as-port PORT2]
        [--token-port PORT3] --record FILE

LAYOUT is where the authorization server is:

- ``split``: as real deployments have it, on ANOTHER origin. The MCP server (``PORT``) serves
  ``/mcp`` and its protected-resource metadata naming the authorization server
  ``http://127.0.0.1:PORT2``, which serves its metadata, ``/register``, ``/authorize`` and
  ``/token`` (PORT2). The MCP server answers anything else 404: a refresh sent to its
  ``/token`` is recorded, never honoured. With ``--token-port``, the authorization server's metadata
  puts its token endpoint on a third origin (``http://127.0.0.1:PORT3/token``), as some providers
  do (accounts.google.com's is on oauth2.googleapis.com).
- ``legacy``: a 2025-03-26 server, one origin: no protected-resource metadata; the origin's
  authorization-server metadata names the issuer ``BASE/oauth`` and its endpoints under ``/oauth``.

Access tokens live 3600 s; refresh tokens are granted and rotated. ``POST /admin/hide-metadata``
(on the authorization server's port) makes its metadata answer 404 from then on: the authorization
server can no longer be discovered. Every request goes to FILE as a JSON line: which listener
(``mcp``, ``as`` or ``token``), method, path, every header and the whole body, so a test can tell exactly
what each party was sent.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import secrets
from typing import Any
from urllib.parse import parse_qs, urlencode

import uvicorn
from mcp.server.mcpserver import MCPServer

from _asgi import read_request, replaying, reply


def build_apps(layout: str, port: int, as_port: int, token_port: int, record_path: str) -> tuple[dict[str, Any], Any]:
    """The ASGI app of each listener ("mcp"; "as" in ``split``; "token" with a ``token_port``), and
    what closes the record (run by ``main``, or on a test's threads: tests/asgi_in_thread.py)."""
    mcp_base = f"http://127.0.0.1:{port}"
    if layout == "split":
        as_base, issuer, prefix = f"http://127.0.0.1:{as_port}", f"http://127.0.0.1:{as_port}", ""
    else:
        as_base, issuer, prefix = mcp_base, f"{mcp_base}/oauth", "/oauth"
    token_endpoint = f"http://127.0.0.1:{token_port}/token" if token_port else f"{as_base}{prefix}/token"
    prm_url = f"{mcp_base}/.well-known/oauth-protected-resource/mcp"

    server = MCPServer("oauth-refresh-http")

    @server.tool(description="Says back what it is given.")
    def echo(text: str) -> str:
        return f"echo: {text}"

    mcp_app = server.streamable_http_app()
    record = open(record_path, "a", encoding="utf-8")
    clients: dict[str, list[str]] = {}
    codes: dict[str, dict[str, str]] = {}
    access_tokens: set[str] = set()
    refresh_tokens: set[str] = set()
    metadata_hidden = False

    def grant() -> dict[str, Any]:
        access, refresh = "at-" + secrets.token_hex(16), "rt-" + secrets.token_hex(16)
        access_tokens.add(access)
        refresh_tokens.add(refresh)
        return {"access_token": access, "token_type": "Bearer", "expires_in": 3600, "refresh_token": refresh}

    async def authorization_server(scope: dict[str, Any], send: Any, method: str, path: str,
                                   body: bytes) -> bool:
        """Answers a request meant for the authorization server; False when it is not one."""
        nonlocal metadata_hidden
        form = {k: v[0] for k, v in parse_qs(body.decode(errors="replace")).items()}
        if path == "/admin/hide-metadata":
            metadata_hidden = True
            await reply(send, 200, {})
        elif path.startswith("/.well-known/oauth-authorization-server") and not metadata_hidden:
            await reply(send, 200, {
                "issuer": issuer, "authorization_endpoint": f"{as_base}{prefix}/authorize",
                "token_endpoint": token_endpoint, "registration_endpoint": f"{as_base}{prefix}/register",
                "response_types_supported": ["code"], "grant_types_supported": ["authorization_code", "refresh_token"],
                "code_challenge_methods_supported": ["S256"], "token_endpoint_auth_methods_supported": ["none"]})
        elif path == f"{prefix}/register" and method == "POST":
            request = json.loads(body)
            client_id = "client-" + secrets.token_hex(4)
            clients[client_id] = list(request.get("redirect_uris") or [])
            await reply(send, 201, {**request, "client_id": client_id, "token_endpoint_auth_method": "none"})
        elif path == f"{prefix}/authorize":
            query = {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}
            redirect_uri = query.get("redirect_uri", "")
            if redirect_uri not in clients.get(query.get("client_id", ""), []) or query.get("code_challenge_method") != "S256":
                await reply(send, 400, {"error": "invalid_request"})
                return True
            code = "code-" + secrets.token_hex(8)
            codes[code] = {"challenge": query["code_challenge"], "redirect_uri": redirect_uri}
            location = f"{redirect_uri}?{urlencode({'code': code, 'state': query.get('state', '')})}"
            await reply(send, 302, headers=[(b"location", location.encode())])
        elif path == f"{prefix}/token" and method == "POST":
            if form.get("grant_type") == "authorization_code":
                issued = codes.pop(form.get("code", ""), None)
                verifier = form.get("code_verifier", "")
                challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
                if issued is None or issued["challenge"] != challenge or issued["redirect_uri"] != form.get("redirect_uri"):
                    await reply(send, 400, {"error": "invalid_grant"})
                else:
                    await reply(send, 200, grant())
            elif form.get("grant_type") == "refresh_token" and form.get("refresh_token") in refresh_tokens:
                refresh_tokens.discard(form["refresh_token"])
                await reply(send, 200, grant())
            else:
                await reply(send, 400, {"error": "invalid_grant"})
        else:
            return False
        return True

    def app_for(listener: str) -> Any:
        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                return await mcp_app(scope, receive, send)
            headers, body = await read_request(scope, receive)
            path, method = scope["path"], scope["method"]
            record.write(json.dumps({"listener": listener, "method": method, "path": path,
                                     "query": scope["query_string"].decode("latin-1"), "headers": headers,
                                     "body": body.decode("utf-8", errors="replace")}) + "\n")
            record.flush()

            if listener != "mcp" or layout == "legacy":
                if await authorization_server(scope, send, method, path, body):
                    return None
            if listener != "mcp":
                return await reply(send, 404, {"error": "not_found"})
            if path == "/.well-known/oauth-protected-resource/mcp" and layout == "split":
                return await reply(send, 200, {"resource": f"{mcp_base}/mcp", "authorization_servers": [as_base]})
            if path.startswith("/mcp"):
                token = headers.get("authorization", "").removeprefix("Bearer ")
                if token not in access_tokens:
                    challenge = (f'Bearer error="invalid_token", resource_metadata="{prm_url}"'
                                 if layout == "split" else "Bearer").encode()
                    return await reply(send, 401, {"error": "invalid_token"}, [(b"www-authenticate", challenge)])
                return await mcp_app(scope, replaying(body, receive) if method == "POST" else receive, send)
            return await reply(send, 404, {"error": "not_found"})

        return app

    apps = {"mcp": app_for("mcp")}
    if layout == "split":
        apps["as"] = app_for("as")
    if token_port:
        apps["token"] = app_for("token")
    return apps, record.close


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layout", choices=["split", "legacy"], required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--as-port", type=int, default=0)
    parser.add_argument("--token-port", type=int, default=0)
    parser.add_argument("--record", required=True)
    args = parser.parse_args()
    apps, _close = build_apps(args.layout, args.port, args.as_port, args.token_port, args.record)
    ports = {"mcp": args.port, "as": args.as_port, "token": args.token_port}

    async def serve() -> None:
        # Only the MCP server's app has a lifespan (the SDK's session manager).
        servers = [uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=ports[listener], log_level="warning",
                                                 lifespan="on" if listener == "mcp" else "off"))
                   for listener, app in apps.items()]
        await asyncio.gather(*(each.serve() for each in servers))

    asyncio.run(serve())


if __name__ == "__main__":
    main()
