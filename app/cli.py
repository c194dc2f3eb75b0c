"""Command line: `tidegauge` opens the dashboard, `tidegauge -p PROMPT` runs headless."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from app import __version__

if TYPE_CHECKING:
    from app.config import Settings


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tidegauge",
        description="A coding agent that manages its context window and shows it live.")
    p.add_argument("-p", "--prompt", help="run one task headless and print the answer")
    p.add_argument("--provider", help="openai, deepseek, anthropic or demo (default: by API key, else demo)")
    p.add_argument("--model")
    p.add_argument("--base-url")
    p.add_argument("--api-key-env", help="name of the environment variable holding the API key")
    p.add_argument("--max-output", type=int, help="tool output limit in characters (0: no truncation)")
    p.add_argument("--max-steps", type=int, help="model calls per task before stopping (default 50)")
    p.add_argument("--budget", type=int, help="auto-compact budget in tokens (default 150000; 0: window only)")
    p.add_argument("--window", type=int, help="context window in tokens (default: per model)")
    p.add_argument("--yes", action="store_true", default=None, help="allow tools that change things without asking")
    p.add_argument("--allow-outside", action="store_true", default=None, help="let file tools reach outside the working directory")
    p.add_argument("--output-format", choices=["text", "stream-json"], default="text")
    p.add_argument("--demo-speed", type=float, help="demo provider: tokens per second (0: no delay)")
    p.add_argument("--thinking-budget", type=int, help="Anthropic extended thinking: budget in tokens (0: off, else >= 1024)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--continue", dest="continue_latest", action="store_true",
                       help="resume the latest session of this directory")
    group.add_argument("--resume", metavar="ID", help="resume the session with this id")
    p.add_argument("--version", action="version", version=f"tidegauge {__version__}")
    return p


# CLI flag -> settings field
FLAG_FIELDS = ("provider", "model", "base_url", "api_key_env", "max_output", "max_steps", "budget",
               "window", "yes", "allow_outside", "demo_speed", "thinking_budget")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from app.errors import ConfigError, SetupError

    overrides = {name: getattr(args, name) for name in FLAG_FIELDS}

    def settings() -> "Settings":  # imported on use: the dashboard paints before pydantic is loaded
        from app.config import load_settings

        return load_settings(overrides)

    try:
        if args.prompt is not None:
            from app.headless import run_headless

            return run_headless(settings(), args.prompt, args.output_format,
                                resume=args.resume, continue_latest=args.continue_latest)
        from app.dashboard.launch import run_dashboard

        return run_dashboard(settings, resume=args.resume, continue_latest=args.continue_latest)
    except (ConfigError, SetupError) as err:
        print(f"tidegauge: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # a clear line instead of a traceback for setup failures
        from app.session import SessionNotFound

        if isinstance(err, (SessionNotFound, ValueError)):
            print(f"tidegauge: {err}", file=sys.stderr)
            return 2
        raise
