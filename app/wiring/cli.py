"""Command line: `tidegauge` opens the dashboard, `tidegauge -p PROMPT` runs headless."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from app import __version__
from app.kernel.errors import ConfigError, SetupError  # two exception classes: cheap before the first frame
from app.system import startup

if TYPE_CHECKING:
    from app.wiring.config import Settings


class OneLineParser(argparse.ArgumentParser):
    """A mistake on the command line is one line and where to look, as git says it: the full
    usage (ten lines of flags) would bury the one word that was wrong."""

    def error(self, message: str) -> Any:  # NoReturn in argparse; Any keeps mypy and subclasses content
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    # The provider plug-ins' names and settings come from the plug-ins: the CLI knows none of them.
    from app.providers.factory import BUILTIN_PROVIDERS, PROVIDER_NAMES, keyless_plugin, plugin_options

    keyless = keyless_plugin()
    fallback = f"the {keyless} provider" if keyless else "nothing: an API key is needed"
    p = OneLineParser(
        prog="tidegauge",
        description="A coding agent that manages its context window and shows it live. "
                    f"With no -p it opens the dashboard (on {fallback} when no API key is set).",
        epilog="Every setting flag can also come from the environment (TIDEGAUGE_MAX_STEPS=20) or from "
               "the config file (tidegauge --config-path prints where it is); flags win over the "
               "environment, the environment over the file. `tidegauge sessions` (--all: every directory) "
               "lists the sessions --resume takes; `tidegauge inspect [SESSION]` shows a request one sent, "
               "part by part; `tidegauge whatif` replays one under other context settings; `tidegauge rewind` "
               "takes one back to before an earlier message (as Esc Esc in the dashboard).")
    p.add_argument("-p", "--prompt", metavar="PROMPT",
                   help="run one task headless, print the answer and exit (text piped in is appended "
                        "to PROMPT; -p - reads the whole prompt from standard input)")
    plugins = [name for name in PROVIDER_NAMES if name not in BUILTIN_PROVIDERS]
    names = ", ".join(name + (" (OpenAI Responses API)" if name == "responses" else "")
                      for name in [*BUILTIN_PROVIDERS, *plugins])
    p.add_argument("--provider", help=f"{names} (default: by API key, else {keyless or 'anthropic'})")
    p.add_argument("--model", help="model name sent to the provider (default: the provider's usual model)")
    p.add_argument("--base-url", metavar="URL",
                   help="API endpoint of the provider, e.g. a local OpenAI-compatible server")
    p.add_argument("--api-key-env", metavar="NAME", help="name of the environment variable holding the API key")
    p.add_argument("--max-output", type=int, metavar="CHARS",
                   help="tool output kept in the context, head and tail (default 40000; 0: no truncation)")
    p.add_argument("--max-steps", type=int, metavar="N", help="model calls per task before stopping (default 50)")
    p.add_argument("--budget", type=int, metavar="TOKENS",
                   help="auto-compact when the context reaches this (default 150000; 0: window only)")
    p.add_argument("--window", type=int, metavar="TOKENS", help="context window in tokens (default: per model)")
    p.add_argument("--yes", action="store_true", default=None, help="allow tools that change things without asking (deny rules still refuse)")
    p.add_argument("--allowed-tools", action="append", metavar="RULES",
                   help='allow these tool calls without asking, this run only, e.g. "run_bash(git status:*), '
                        'write_file(src/**)" (repeatable; see /permissions)')
    p.add_argument("--disallowed-tools", action="append", metavar="RULES",
                   help='refuse these tool calls, even with --yes, e.g. "run_bash(rm:*), git__push" (repeatable)')
    p.add_argument("--sandbox", choices=["auto", "on", "off"],
                   help="run commands in bubblewrap: auto (when it works here; default), on (refuse commands "
                        "without it), off")
    p.add_argument("--sandbox-network", action="store_true", default=None,
                   help="let sandboxed commands reach the network (off by default)")
    p.add_argument("--allow-outside", action="store_true", default=None, help="let file tools reach outside the working directory")
    p.add_argument("--output-format", choices=["text", "json", "stream-json"],
                   help="with -p: the answer as text (default), one JSON object at the end (json), "
                        "or one JSON event per line (stream-json)")
    for option in plugin_options():
        p.add_argument(option.flag, type=float, dest=option.name, metavar=option.metavar, help=option.help)
    # --web: the dashboard in a browser (app/surfaces/dashboard/web.py)
    p.add_argument("--web", action="store_true",
                   help="serve the dashboard to a browser on 127.0.0.1 instead of this terminal "
                        "(open the address it prints: it holds this run's token)")
    p.add_argument("--web-port", type=int, metavar="PORT",
                   help="with --web: the port to serve on (default 8765; 0: any free port)")
    p.add_argument("--web-host", metavar="ADDR",
                   help="with --web: the IP address to serve on (default 127.0.0.1); anyone who can reach "
                        "it and holds the printed token can run commands as you")
    p.add_argument("--config-path", action="store_true", help="print the config file's path and exit")
    p.add_argument("--thinking-budget", type=int, metavar="N",
                   help="Anthropic extended thinking: budget in tokens per request (0: off, else >= 1024)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--continue", dest="continue_latest", action="store_true",
                       help="resume the latest session of this directory")
    group.add_argument("--resume", metavar="ID", nargs="?", const="",
                       help="resume the session with this id (no id: pick one in the dashboard; "
                            "`tidegauge sessions` lists them)")
    p.add_argument("--fork-session", action="store_true",
                   help="with --continue/--resume: continue in a new session copied from that one")
    p.add_argument("--version", action="version", version=f"tidegauge {__version__}")
    return p


# CLI flag -> settings field (and each provider plug-in's own options, see flag_fields)
FLAG_FIELDS = ("provider", "model", "base_url", "api_key_env", "max_output", "max_steps", "budget",
               "window", "yes", "allow_outside", "sandbox", "sandbox_network", "thinking_budget",
               "web_port", "allowed_tools", "disallowed_tools")


def flag_fields() -> tuple[str, ...]:
    """The settings the command line may set: FLAG_FIELDS and the plug-ins' options."""
    # The plug-ins' settings are read when the flags are listed, not at import.
    from app.providers.factory import plugin_options

    return (*FLAG_FIELDS, *(option.name for option in plugin_options()))


def _fork(args: argparse.Namespace, settings: "Settings") -> str:
    """--fork-session: copy the session --continue/--resume would open; returns the copy's id."""
    # Only a fork needs the store.
    from app.session.store import SessionStore

    if not (args.resume or args.continue_latest):
        raise SetupError("--fork-session needs --continue or --resume ID")
    store = SessionStore(settings.data_dir_path)
    source = store.open(args.resume) if args.resume else store.latest_for(Path.cwd())
    if source is None:
        raise SetupError(f"--continue: no earlier session for {Path.cwd()}")
    return store.fork(source).id


def build_sessions_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="tidegauge sessions",
                                description="The sessions of this directory, newest first (those in which "
                                            "something was typed): pass an id to --resume.")
    p.add_argument("--all", action="store_true", help="the sessions of every directory")
    return p


def _sessions(argv: list[str]) -> int:
    """`tidegauge sessions [--all]`."""
    args = build_sessions_parser().parse_args(argv)
    # Loaded by the subcommand that needs it: the dashboard's first frame waits for none of it.
    from app.wiring.config import load_settings

    return _print_sessions(load_settings({}), every_directory=args.all, out=sys.stdout)


class _OneLineParser(argparse.ArgumentParser):
    """Bad arguments: one line naming what was wrong, exit 2 (not argparse's usage block)."""

    def error(self, message: str) -> Any:  # argparse's own signature returns NoReturn
        print(f"{self.prog}: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_inspect_parser() -> argparse.ArgumentParser:
    p = _OneLineParser(prog="tidegauge inspect",
                       description="A request a session sent, as sent (after redaction): each part with its "
                                   "tokens, its origin and whether the cache served it.")
    p.add_argument("session", nargs="?", help="a session id or its start (default: the latest of this directory)")
    p.add_argument("--request", type=int, metavar="N", help="which request, from 1 (default: the last)")
    p.add_argument("--diff", action="store_true", help="what changed against the request before it")
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def _inspect(argv: list[str]) -> int:
    """`tidegauge inspect [SESSION] [--request N] [--diff] [--json]`."""
    args = build_inspect_parser().parse_args(argv)
    # Loaded by the subcommand that needs it: the dashboard's first frame waits for none of it.
    from app.kernel.request_store import StoredRequests
    from app.kernel.sanitize import sanitize_for_display
    from app.session.store import SessionStore
    from app.surfaces.inspect_output import inspect_json, inspect_text
    from app.wiring.config import load_settings

    store = SessionStore(load_settings({}).data_dir_path)
    session = store.open(args.session) if args.session is not None else store.latest_for(Path.cwd())
    if session is None:
        raise SetupError(f"inspect: no session for {sanitize_for_display(str(Path.cwd()))} "
                         "(`tidegauge sessions --all` lists every directory's)")
    try:
        stored = StoredRequests.load(session.requests_dir)
    except OSError as err:
        raise SetupError(f"inspect: cannot read the requests of session {session.id}: {err}") from None
    if stored.count == 0:
        raise SetupError(f"inspect: session {session.id} kept no request")
    number = stored.count if args.request is None else args.request
    if not 1 <= number <= stored.count:
        raise SetupError(f"inspect: --request {args.request}: session {session.id} has requests 1 to {stored.count}")
    render = inspect_json if args.json else inspect_text
    try:
        print(render(session.id, stored, number, diff=args.diff))
    except BrokenPipeError:  # `| head`: the reader had enough
        sys.stderr.close()
    return 0


def _mcp(argv: list[str]) -> int:
    """`tidegauge mcp list [--json]`: the configured servers, each started once, and what they offer;
    `tidegauge mcp login NAME` / `tidegauge mcp logout NAME`: OAuth for a url server (app/mcp/oauth.py)."""
    parser = OneLineParser(prog="tidegauge mcp",
                           description="List the MCP servers of config.toml (each is started once to see "
                                       "what it offers, then stopped), log in to a remote one with OAuth "
                                       "(a browser opens; with no display the address to open is "
                                       "printed), or forget its tokens.")
    parser.add_argument("action", choices=["list", "login", "logout"])
    parser.add_argument("name", nargs="?", help="login/logout: the server's name, as in [mcp_servers.NAME]")
    parser.add_argument("--json", action="store_true", help="list: one JSON object on stdout")
    args = parser.parse_args(argv)
    # Loaded by the subcommand that needs it: the dashboard's first frame waits for none of it.
    import asyncio
    from app.kernel.sanitize import sanitize_for_display
    from app.mcp.oauth import LoginError, login, logout
    from app.wiring.config import load_settings

    settings = load_settings({})
    if args.action == "list":
        return _mcp_list(settings, as_json=args.json)
    if args.name is None:
        parser.error(f"mcp {args.action} needs the server's name")
    name = sanitize_for_display(args.name)
    config = settings.mcp_servers.get(args.name)
    if config is None:
        known = ", ".join(sorted(settings.mcp_servers)) or "none"
        raise SetupError(f"mcp {args.action}: no server {name!r} in [mcp_servers] of config.toml (configured: {known})")
    if args.action == "logout":
        forgot = logout(args.name, settings.data_dir_path)
        print(f"{name}: {'tokens forgotten' if forgot else 'no tokens were kept'}", file=sys.stderr)
        return 0
    try:
        tools = asyncio.run(login(args.name, config, settings.data_dir_path, Path.cwd()))
    except LoginError as err:
        print(f"tidegauge: mcp login {name}: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"tidegauge: mcp login {name}: interrupted", file=sys.stderr)
        return 130
    print(f"logged in to {name}: {tools} tools", file=sys.stderr)
    return 0


def _mcp_list(settings: "Settings", *, as_json: bool) -> int:
    # Loaded by the subcommand that needs it: the dashboard's first frame waits for none of it.
    import asyncio
    import json

    from app.context.thresholds import context_window_for
    from app.mcp.status import status_table, survey

    window = settings.window or context_window_for(settings.model or "")
    statuses = asyncio.run(survey(settings.mcp_servers, workspace=Path.cwd(), data_dir=settings.data_dir_path,
                                  window=window, defer_share=float(settings.tool_defer_share)))
    if as_json:
        print(json.dumps({"servers": [status.as_json() for status in statuses]}))
    else:
        print(status_table(statuses))
    return 1 if any(status.state == "failed" for status in statuses) else 0


def _print_sessions(settings: "Settings", *, every_directory: bool, out: Any) -> int:

    # Loaded by the subcommand that needs it: the dashboard's first frame waits for none of it.
    from app.session.store import session_rows

    cwd = Path.cwd()
    rows = session_rows(settings.data_dir_path, None if every_directory else cwd)
    if not rows:
        # Only a listing with rows needs it.
        from app.kernel.sanitize import sanitize_for_display

        where = "" if every_directory else f" for {sanitize_for_display(str(cwd))} (--all: every directory)"
        print(f"no sessions{where}", file=sys.stderr)
    for _session_id, line in rows:
        print(line, file=out)
    return 0


def _run_setup(step: "Callable[[], int]") -> int:
    """Run ``step``; a setup problem is one line on stderr and exit code 2."""

    try:
        return step()
    except (ConfigError, SetupError) as err:
        print(f"tidegauge: {err}", file=sys.stderr)
        return 2


def _idle_flag(args: argparse.Namespace) -> str | None:
    """What is wrong when a flag given does nothing in this mode (refused, not silently ignored)."""
    if args.prompt is not None:
        for flag, attr in (("--web-port", "web_port"), ("--web-host", "web_host")):
            if getattr(args, attr, None) is not None:
                return f"{flag} is for --web; it does nothing with -p"
    elif args.output_format is not None:
        return "--output-format is for -p (headless); the dashboard has no output format"
    return None


def _headless_prompt(prompt: str) -> str:
    """-p's prompt with what was piped in: appended (as Claude Code does), or all of it with -p -."""
    # Only a headless run reads a piped prompt.
    from app.surfaces.headless import piped_input

    if prompt == "-":
        prompt = piped_input(sys.stdin.buffer, required=True) or ""
    elif prompt.strip():
        piped = piped_input(sys.stdin.buffer, required=False)
        if piped and piped.strip():
            prompt = f"{prompt}\n\n{piped}"
    if not prompt.strip():
        raise SetupError("-p: the prompt is empty")
    return prompt


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _skip_pydantic_plugins()
    if argv[:1] == ["sessions"]:
        return _run_setup(lambda: _sessions(argv[1:]))
    if argv[:1] == ["mcp"]:
        return _run_setup(lambda: _mcp(argv[1:]))
    if argv[:1] == ["inspect"]:
        return _run_setup(lambda: _inspect(argv[1:]))
    if argv[:1] == ["rewind"]:  # a recorded session taken back to before a message (app/wiring/rewind_command.py)
        from app.wiring.rewind_command import run_rewind_command

        return _run_setup(lambda: run_rewind_command(argv[1:]))
    if argv[:1] == ["whatif"]:  # a recorded session replayed offline (app/wiring/whatif_command.py)
        from app.wiring.whatif_command import run_whatif_command

        return _run_setup(lambda: run_whatif_command(argv[1:]))
    parser = build_parser()
    args = parser.parse_args(argv)
    idle = _idle_flag(args)
    if idle is not None:
        print(f"tidegauge: {idle}", file=sys.stderr)
        return 2

    if args.config_path:
        # Loaded by the subcommand that needs it: the dashboard's first frame waits for none of it.
        from app.wiring.config import config_file_path

        print(config_file_path())
        return 0
    if args.web and args.prompt is not None:
        parser.error("--web serves the dashboard; it cannot run a headless -p task")
    if args.web_host is not None:
        if not args.web:
            parser.error("--web-host is for --web")
        # Only --web's address check needs it.
        import ipaddress

        try:
            ipaddress.ip_address(args.web_host)
        except ValueError:
            parser.error(f"--web-host: {args.web_host!r} is not an IP address (e.g. 127.0.0.1, 192.168.1.5)")

    overrides = {name: getattr(args, name) for name in flag_fields()}

    loaded: list["Settings"] = []

    def settings() -> "Settings":  # imported on use: the dashboard paints before pydantic is loaded
        # Read once: the config file and the environment, validated once per run (the session and
        # the demo's notice see the same settings).
        if not loaded:
            from app.wiring.config import load_settings  # pydantic: after the dashboard's first frame

            loaded.append(load_settings(overrides))
        return loaded[0]

    try:
        if args.fork_session:
            args.resume, args.continue_latest = _fork(args, settings()), False
        if args.prompt is not None:
            _end_everything_with_tidegauge()
            _skip_httpx_command_line()
            # Headless only: the dashboard never loads the printer.
            from app.surfaces.headless import run_headless

            prompt = _headless_prompt(args.prompt)
            if args.resume == "":  # --resume without an id: no picker here, so the list and how to pass one
                _print_sessions(settings(), every_directory=False, out=sys.stderr)
                raise SetupError("--resume needs a session id with -p (one of those above; "
                                 "`tidegauge sessions --all` lists every directory's)")
            # A headless run builds its session here; the dashboard's is built in the session process.
            from app.wiring.runtime import build_session

            # Built here, handed to the surface: a surface never builds a session (the layers).
            session = build_session(settings(), approvals=False, resume=args.resume,
                                    continue_latest=args.continue_latest)
            _say_if_scripted(settings())
            code = run_headless(session, prompt, args.output_format or "text")
            _end_headless(code)
            return code
        if args.web:
            if args.resume == "":
                raise SetupError("--resume needs a session id with --web (`tidegauge sessions` lists them)")
            return _serve_web(settings(), overrides, args)
        # Textual loads only when the dashboard opens.
        from app.surfaces.dashboard.launch import run_dashboard

        def sessions_here() -> list[tuple[str, str]]:  # /resume's and --resume's list

            # The store loads when /resume lists the sessions.
            from app.session.store import session_rows

            return session_rows(settings().data_dir_path, Path.cwd(), choice=True)

        return run_dashboard(overrides, sessions_here, resume=args.resume, continue_latest=args.continue_latest)
    except (ConfigError, SetupError) as err:
        print(f"tidegauge: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # a clear line instead of a traceback for setup failures
        from app.session.store import SessionNotFound

        if isinstance(err, (SessionNotFound, ValueError)):
            print(f"tidegauge: {err}", file=sys.stderr)
            return 2
        raise
    finally:
        # What run_bash started and left running (nohup, setsid) ends with tidegauge. Only
        # when a run_bash ran: the module is not imported (or needed) otherwise.
        proctree = sys.modules.get("app.system.proctree")
        if proctree is not None:
            proctree.kill_all_descendants()


def _say_if_scripted(settings: "Settings") -> None:
    """Headless on the keyless demo: one line on stderr, so a script's author learns that the
    answers are canned (stdout stays the answer alone)."""
    # Only when this note may be said: off the dashboard's first-frame path.
    from app.providers.factory import PROVIDER_KEY_ENV
    from app.wiring.config import AUTO_PROVIDER_ORDER, demo_chosen_for_want_of_a_key, needs_no_key, resolve_provider

    provider = resolve_provider(settings)
    if not needs_no_key(provider):
        return
    if demo_chosen_for_want_of_a_key(settings):
        keys = ", ".join(PROVIDER_KEY_ENV[name] for name in AUTO_PROVIDER_ORDER)
        print(f"tidegauge: no API key set ({keys}): the {provider} provider answers, "
              "a scripted model with canned replies", file=sys.stderr)
    else:
        print(f"tidegauge: the {provider} provider answers, a scripted model with canned replies", file=sys.stderr)


def _end_everything_with_tidegauge() -> None:
    """Headless: every process this run starts (tools, MCP servers, their children) ends with it,
    also on SIGTERM or SIGHUP (closing the terminal), and on a kill -9 (``app/system/watchdog.py``).
    Only in tidegauge's own process: a program that calls ``main`` keeps its own children and signals."""
    # Only tidegauge's own process installs these handlers and the watchdog.
    import signal

    from app.system.process_exit import end_everything_on, is_the_tidegauge_process

    if not is_the_tidegauge_process():
        return
    # Only tidegauge's own process starts the watchdog.
    from app.system import proctree
    from app.system.watchdog import start_watchdog

    proctree.claim_every_descendant()
    end_everything_on(signal.SIGTERM, signal.SIGHUP)
    start_watchdog()  # and on a kill -9, which leaves no time: the watchdog ends them


def _end_headless(code: int) -> None:
    """A headless run that is done ends without the interpreter's teardown (see
    ``process_exit.exit_skipping_teardown_if_nothing_waits``), having ended every process it
    started as ``main``'s ``finally`` would. Only in tidegauge's own process: a program that
    calls ``main`` gets its code back."""
    # Only tidegauge's own process ends here, and only after its run.
    from app.system.process_exit import exit_skipping_teardown_if_nothing_waits, is_the_tidegauge_process

    if not is_the_tidegauge_process():
        return
    proctree = sys.modules.get("app.system.proctree")
    if proctree is not None:
        proctree.kill_all_descendants()
    exit_skipping_teardown_if_nothing_waits(code)


def _skip_pydantic_plugins() -> None:
    """Only in tidegauge's own process: a program that calls ``main`` keeps its pydantic plug-ins."""
    from app.system.process_exit import is_the_tidegauge_process  # only when main runs, not on import

    if is_the_tidegauge_process():
        startup.skip_pydantic_plugins()
        startup.skip_price_updater()


def _skip_httpx_command_line() -> None:
    """Headless: httpx without its command-line client (``startup.skip_httpx_command_line``). Only
    in tidegauge's own process: a program that calls ``main`` keeps its httpx whole."""
    # Only tidegauge's own process needs it.
    from app.system.process_exit import is_the_tidegauge_process

    if is_the_tidegauge_process():
        startup.skip_httpx_command_line()


def _serve_web(settings: "Settings", overrides: dict[str, Any], args: argparse.Namespace) -> int:
    """--web: check here what every tab would need (one line now, not an error in each tab), then serve."""
    # aiohttp and textual-serve, and what the check needs: --web only.
    from app.session.store import SessionStore
    from app.surfaces.dashboard.web import WEB_HOST
    from app.surfaces.dashboard.web_server import serve_dashboard
    from app.wiring.config import missing_key_problem, resolve_provider

    if (problem := missing_key_problem(settings, resolve_provider(settings))) is not None:
        raise SetupError(problem)
    resume = None
    if args.resume or args.continue_latest:  # resolved once: every tab opens that same session
        store = SessionStore(settings.data_dir_path)
        session = store.open(args.resume) if args.resume else store.latest_for(Path.cwd())
        if session is None:
            raise SetupError(f"--continue: no earlier session for {Path.cwd()}")
        resume = session.id
    return serve_dashboard(settings.web_port, settings_environment(overrides), host=args.web_host or WEB_HOST,
                           max_tabs=settings.web_max_tabs, resume=resume)


def settings_environment(overrides: dict[str, Any]) -> dict[str, str]:
    """The CLI's setting flags as ``TIDEGAUGE_*`` variables, so every web tab's process gets them.

    The environment ranks just below the flags (above config.toml), so a tab sees
    the same settings the flags gave; they were already validated in this process.
    """
    # Only the settings handed to the session process need these.
    import json

    from app.wiring.config import ENV_PREFIX

    env: dict[str, str] = {}
    for name, value in overrides.items():
        if value is None:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (str, int, float, Path)):
            text = str(value)
        else:  # lists and tables: the settings read them from the environment as JSON (config.py)
            text = json.dumps(value)
        env[ENV_PREFIX + name.upper()] = text
    return env
