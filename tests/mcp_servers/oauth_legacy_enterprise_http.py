"""An OAuth-protected streamable-HTTP MCP server, its authorization server laid out as one of the
conformance suite's scenarios has it, and (``enterprise``) an enterprise identity provider; one port.

    python tests/mcp_servers/oauth_legacy_enterprise_http.py --port PORT --record FILE --mode MODE
        [--id-token TOKEN]

``/mcp`` answers 401 (``WWW-Authenticate: Bearer``) without an access token this server issued.
MODE is where the authorization server is and what its metadata says:

- ``legacy``: a 2025-03-26 server (``auth/2025-03-26-oauth-metadata-backcompat``): no
  protected-resource metadata; authorization-server metadata at the origin's well-known address,
  naming the issuer ``BASE/oauth`` and its endpoints under ``/oauth``.
- ``fallback``: a 2025-03-26 server without any metadata (``auth/2025-03-26-oauth-endpoint-fallback``):
  ``/authorize``, ``/token``, ``/register`` at the origin.
- ``foreign-issuer``: ``legacy``, but the origin's metadata names an issuer on another origin (an
  attacker claiming another authorization server's identity).
- ``current-mismatch``: a current-revision server whose protected-resource metadata names the
  authorization server ``BASE``, whose metadata names the issuer ``BASE/oauth`` (RFC 8414 §3.3:
  must be refused).
- ``cleartext-endpoints``: ``legacy``, but its metadata puts the authorization and token endpoints
  in plain http on another machine (``http://192.0.2.10``): a login must refuse them.
- ``enterprise``: SEP-990 (``auth/cross-app-access-complete-flow``): the identity provider's token
  endpoint ``/idp/token`` exchanges the ID token ``--id-token`` (RFC 8693) for an ID-JAG; the
  authorization server ``BASE`` takes it with the jwt-bearer grant (RFC 7523) from the client
  ``xaa-client`` (HTTP Basic, secret ``xaa-client-secret-1234``). Its protected-resource metadata
  names another authorization server, ``BASE/evil``, which a client configured with its issuer
  never asks. A refused exchange repeats the ID token it was sent in its ``error_description``.

The authorization endpoint consents at once and redirects with the code and state; the token
endpoint checks PKCE (S256). Every request goes to FILE as a JSON line: method, path, JSON-RPC
method, the form, the Authorization header.
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

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"
XAA_CLIENT, XAA_SECRET = "xaa-client", "xaa-client-secret-1234"


MODES = ["legacy", "fallback", "foreign-issuer", "current-mismatch", "enterprise", "cleartext-endpoints"]


def build_app(port: int, record_path: str, mode: str, id_token: str = "") -> Any:
    """The server's ASGI app on ``port`` (run by ``main``, or in a test's thread: tests/asgi_in_thread.py)."""
    base = f"http://127.0.0.1:{port}"
    # Where the authorization server's endpoints are, and the issuer its metadata names.
    prefix = "" if mode in ("fallback", "enterprise") else "/oauth"
    issuer = {"legacy": f"{base}/oauth", "current-mismatch": f"{base}/oauth", "enterprise": base,
              "foreign-issuer": "https://login.acme.example", "cleartext-endpoints": f"{base}/oauth"}.get(mode)
    # cleartext-endpoints: the authorization and token endpoints in plain http on another machine
    # (192.0.2.10, TEST-NET-1: nothing answers there).
    endpoints = "http://192.0.2.10" if mode == "cleartext-endpoints" else base
    xaa_basic = "Basic " + base64.b64encode(f"{XAA_CLIENT}:{XAA_SECRET}".encode()).decode()

    server = MCPServer("oauth-legacy-enterprise")

    @server.tool(description="Says back what it is given.")
    def echo(text: str) -> str:
        return f"echo: {text}"

    mcp_app = server.streamable_http_app()
    record = open(record_path, "a", encoding="utf-8")
    clients: dict[str, list[str]] = {}
    codes: dict[str, dict[str, str]] = {}
    id_jags: set[str] = set()
    access_tokens: set[str] = set()

    def grant() -> dict[str, Any]:
        access = "at-" + secrets.token_hex(16)
        access_tokens.add(access)
        return {"access_token": access, "token_type": "Bearer", "expires_in": 3600}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await mcp_app(scope, receive, send)
        headers, body = await read_request(scope, receive)
        path, method = scope["path"], scope["method"]
        form = {k: v[0] for k, v in parse_qs(body.decode()).items()} if path.endswith("/token") else {}
        rpc = None
        if path == "/mcp" and body:
            try:
                rpc = json.loads(body).get("method")
            except ValueError:
                pass
        record.write(json.dumps({"method": method, "path": path, "rpc": rpc, "form": form,
                                 "authorization": headers.get("authorization")}) + "\n")
        record.flush()

        if path == "/.well-known/oauth-protected-resource/mcp" and mode == "current-mismatch":
            return await reply(send, 200, {"resource": f"{base}/mcp", "authorization_servers": [base]})
        if path == "/.well-known/oauth-protected-resource/mcp" and mode == "enterprise":
            return await reply(send, 200, {"resource": f"{base}/mcp", "authorization_servers": [f"{base}/evil"]})
        if path == "/.well-known/oauth-authorization-server" and issuer is not None:
            return await reply(send, 200, {
                "issuer": issuer, "authorization_endpoint": f"{endpoints}{prefix}/authorize",
                "token_endpoint": f"{endpoints}{prefix}/token", "registration_endpoint": f"{base}{prefix}/register",
                "response_types_supported": ["code"], "code_challenge_methods_supported": ["S256"],
                "grant_types_supported": [JWT_BEARER] if mode == "enterprise" else ["authorization_code"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic" if mode == "enterprise" else "none"]})
        if path == f"{prefix}/register" and method == "POST" and mode != "enterprise":
            request = json.loads(body)
            client_id = "client-" + secrets.token_hex(4)
            clients[client_id] = list(request.get("redirect_uris") or [])
            return await reply(send, 201, {**request, "client_id": client_id, "token_endpoint_auth_method": "none"})
        if path == f"{prefix}/authorize" and mode != "enterprise":
            query = {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}
            redirect_uri = query.get("redirect_uri", "")
            if redirect_uri not in clients.get(query.get("client_id", ""), []) or query.get("code_challenge_method") != "S256":
                return await reply(send, 400, {"error": "invalid_request"})
            code = "code-" + secrets.token_hex(8)
            codes[code] = {"challenge": query["code_challenge"], "redirect_uri": redirect_uri}
            location = f"{redirect_uri}?{urlencode({'code': code, 'state': query.get('state', '')})}"
            return await reply(send, 302, headers=[(b"location", location.encode())])
        if path == f"{prefix}/token" and method == "POST" and mode != "enterprise":
            issued = codes.pop(form.get("code", ""), None)
            verifier = form.get("code_verifier", "")
            challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
            if form.get("grant_type") != "authorization_code" or issued is None or issued["challenge"] != challenge:
                return await reply(send, 400, {"error": "invalid_grant"})
            return await reply(send, 200, grant())
        if path == "/idp/token" and method == "POST" and mode == "enterprise":
            if (form.get("grant_type") != TOKEN_EXCHANGE or form.get("subject_token") != id_token
                    or form.get("requested_token_type") != ID_JAG or form.get("audience") != base
                    or form.get("resource") != f"{base}/mcp"):
                return await reply(send, 400, {"error": "invalid_grant",
                                               "error_description": f"not a valid ID token: {form.get('subject_token')}"})
            id_jag = "idjag-" + secrets.token_hex(16)
            id_jags.add(id_jag)
            return await reply(send, 200, {"access_token": id_jag, "issued_token_type": ID_JAG, "token_type": "N_A"})
        if path == "/token" and method == "POST" and mode == "enterprise":
            if headers.get("authorization") != xaa_basic:
                return await reply(send, 401, {"error": "invalid_client"})
            if form.get("grant_type") != JWT_BEARER or form.get("assertion") not in id_jags:
                return await reply(send, 400, {"error": "invalid_grant"})
            id_jags.discard(form["assertion"])
            return await reply(send, 200, grant())
        if path.startswith("/mcp"):
            token = headers.get("authorization", "").removeprefix("Bearer ")
            if token not in access_tokens:
                return await reply(send, 401, {"error": "invalid_token"}, [(b"www-authenticate", b"Bearer")])
            return await mcp_app(scope, replaying(body, receive) if method == "POST" else receive, send)
        return await reply(send, 404, {"error": "not_found"})

    app.close_record = record.close  # type: ignore[attr-defined]
    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--mode", required=True, choices=MODES)
    parser.add_argument("--id-token", default="")
    args = parser.parse_args()
    app = build_app(args.port, args.record, args.mode, args.id_token)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", lifespan="on")


if __name__ == "__main__":
    main()
