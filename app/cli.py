"""Command line: `tidegauge` opens the dashboard, `tidegauge -p PROMPT` runs headless."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from app import __version__

if TYPE_CHECKING:
    from app.config import Settings


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tidegauge",
        description="A coding agent that manages its context window and shows it live. "
                    "With no -p it opens the dashboard (on the offline demo model when no API key is set).",
        epilog="Every setting flag can also come from the environment (TIDEGAUGE_MAX_STEPS=20) or from "
               "the config file (tidegauge --config-path prints where it is); flags win over the "
               "environment, the environment over the file.")
    p.add_argument("-p", "--prompt", metavar="PROMPT", help="run one task headless, print the answer and exit")
    p.add_argument("--provider", help="openai, deepseek, anthropic, responses (OpenAI Responses API) or demo (default: by API key, else demo)")
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
    p.add_argument("--yes", action="store_true", default=None, help="allow tools that change things without asking")
    p.add_argument("--allow-outside", action="store_true", default=None, help="let file tools reach outside the working directory")
    p.add_argument("--output-format", choices=["text", "stream-json"], default="text",
                   help="with -p: the answer as text (default), or one JSON event per line")
    p.add_argument("--demo-speed", type=float, metavar="TOKENS_PER_S",
                   help="demo provider: typing speed in tokens per second (default 40; 0: no delay)")
    # --web: the dashboard in a browser (app/dashboard/web.py)
    p.add_argument("--web", action="store_true",
                   help="serve the dashboard to a browser on 127.0.0.1 instead of this terminal")
    p.add_argument("--web-port", type=int, metavar="PORT",
                   help="with --web: the port to serve on (default 8765; 0: any free port)")
    p.add_argument("--config-path", action="store_true", help="print the config file's path and exit")
    p.add_argument("--thinking-budget", type=int, metavar="N",
                   help="Anthropic extended thinking: budget in tokens per request (0: off, else >= 1024)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--continue", dest="continue_latest", action="store_true",
                       help="resume the latest session of this directory")
    group.add_argument("--resume", metavar="ID", help="resume the session with this id")
    p.add_argument("--fork-session", action="store_true",
                   help="with --continue/--resume: continue in a new session copied from that one")
    p.add_argument("--version", action="version", version=f"tidegauge {__version__}")
    return p


# CLI flag -> settings field
FLAG_FIELDS = ("provider", "model", "base_url", "api_key_env", "max_output", "max_steps", "budget",
               "window", "yes", "allow_outside", "demo_speed", "thinking_budget",
               "web_port")


def _fork(args: argparse.Namespace, settings: "Settings") -> str:
    """--fork-session: copy the session --continue/--resume would open; returns the copy's id."""
    from pathlib import Path

    from app.errors import SetupError
    from app.session import SessionStore

    if not (args.resume or args.continue_latest):
        raise SetupError("--fork-session needs --continue or --resume ID")
    store = SessionStore(settings.data_dir_path)
    source = store.open(args.resume) if args.resume else store.latest_for(Path.cwd())
    if source is None:
        raise SetupError(f"--continue: no earlier session for {Path.cwd()}")
    return store.fork(source).id


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from app.errors import ConfigError, SetupError

    if args.config_path:
        from app.config import config_file_path

        print(config_file_path())
        return 0
    if args.web and args.prompt is not None:
        parser.error("--web serves the dashboard; it cannot run a headless -p task")

    overrides = {name: getattr(args, name) for name in FLAG_FIELDS}

    def settings() -> "Settings":  # imported on use: the dashboard paints before pydantic is loaded
        from app.config import load_settings

        return load_settings(overrides)

    try:
        if args.fork_session:
            args.resume, args.continue_latest = _fork(args, settings()), False
        if args.prompt is not None:
            _end_everything_with_tidegauge()
            from app.headless import run_headless

            return run_headless(settings(), args.prompt, args.output_format,
                                resume=args.resume, continue_latest=args.continue_latest)
        if args.web:
            return _serve_web(settings(), overrides, args)
        from app.dashboard.launch import run_dashboard

        return run_dashboard(overrides, resume=args.resume, continue_latest=args.continue_latest)
    except (ConfigError, SetupError) as err:
        print(f"tidegauge: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # a clear line instead of a traceback for setup failures
        from app.session import SessionNotFound

        if isinstance(err, (SessionNotFound, ValueError)):
            print(f"tidegauge: {err}", file=sys.stderr)
            return 2
        raise
    finally:
        # What run_bash started and left running (nohup, setsid) ends with tidegauge. Only
        # when a run_bash ran: the module is not imported (or needed) otherwise.
        proctree = sys.modules.get("app.tools.proctree")
        if proctree is not None:
            proctree.kill_all_descendants()


def _end_everything_with_tidegauge() -> None:
    """Headless: every process this run starts (tools, MCP servers, their children) ends with it,
    also on SIGTERM or SIGHUP (closing the terminal). Only in tidegauge's own process: a program
    that calls ``main`` keeps its own children and signals."""
    import signal

    from app.process_exit import end_everything_on, is_the_tidegauge_process

    if not is_the_tidegauge_process():
        return
    from app.tools import proctree

    proctree.claim_every_descendant()
    end_everything_on(signal.SIGTERM, signal.SIGHUP)


def _serve_web(settings: "Settings", overrides: dict[str, Any], args: argparse.Namespace) -> int:
    """--web: check here what every tab would need (one line now, not an error in each tab), then serve."""
    from pathlib import Path

    from app.config import api_key_for, resolve_provider
    from app.errors import SetupError
    from app.session import SessionStore
    from app.dashboard.web import serve_dashboard

    provider = resolve_provider(settings)
    if provider != "demo" and not api_key_for(settings, provider):
        raise SetupError(f"provider {provider}: no API key (set {settings.api_key_env or provider.upper() + '_API_KEY'})")
    resume = None
    if args.resume or args.continue_latest:  # resolved once: every tab opens that same session
        store = SessionStore(settings.data_dir_path)
        session = store.open(args.resume) if args.resume else store.latest_for(Path.cwd())
        if session is None:
            raise SetupError(f"--continue: no earlier session for {Path.cwd()}")
        resume = session.id
    return serve_dashboard(settings.web_port, overrides, resume=resume)
