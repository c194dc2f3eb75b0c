"""``tidegauge --web``: the same dashboard in a browser, served by textual-serve on 127.0.0.1.

Every browser tab that connects gets its own ``tidegauge`` dashboard process:
textual-serve starts it with Textual's web driver and relays the screen and the
keys over a websocket, so a tab behaves exactly like a terminal running
``tidegauge`` in the directory the server was started in.

The page must work on a machine with no internet. textual-serve's page template
asks a font CDN for Roboto Mono, which the package already ships among its
static files; the template is served from here with that link replaced by
``@font-face`` rules on the packaged fonts (site-packages is left untouched).

This module imports textual-serve (aiohttp, jinja2), never textual: the
dashboard itself runs in the child processes.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from app.errors import SetupError

WEB_HOST = "127.0.0.1"
PAGE_TITLE = "tidegauge"
# The template textual-serve renders for the page (its own, patched below).
INDEX_TEMPLATE = "app_index.html"
# How long a stop (ctrl+c) waits for open tabs' requests before closing them.
SHUTDOWN_GRACE_SECONDS = 3.0

# The one remote resource in textual-serve's page: a stylesheet from a font CDN.
_REMOTE_FONT_LINK = re.compile(r"<link\b[^>]*\bhref=\"https?://[^\"]*fonts[^\"]*\"[^>]*>", re.DOTALL)
# The same faces from the fonts textual-serve ships (static/fonts/); preloaded so
# the terminal measures its cells with the real font, not a fallback.
_PACKAGED_FONT_FACES = """\
<link rel="preload" as="font" type="font/ttf" crossorigin
      href="{{ config.static.url }}fonts/RobotoMono-VariableFont_wght.ttf" />
    <style>
      @font-face {
        font-family: "Roboto Mono";
        font-style: normal;
        font-weight: 100 700;
        src: url("{{ config.static.url }}fonts/RobotoMono-VariableFont_wght.ttf") format("truetype");
      }
      @font-face {
        font-family: "Roboto Mono";
        font-style: italic;
        font-weight: 100 700;
        src: url("{{ config.static.url }}fonts/RobotoMono-Italic-VariableFont_wght.ttf") format("truetype");
      }
    </style>"""


def offline_index_template(template_text: str) -> str:
    """textual-serve's page template with its font CDN link replaced by the packaged fonts."""
    patched, count = _REMOTE_FONT_LINK.subn(lambda _match: _PACKAGED_FONT_FACES, template_text, count=1)
    if count == 0 and "Roboto Mono" not in patched:  # a template this launcher does not know
        raise SetupError("--web: textual-serve's page template changed; cannot serve its fonts offline")
    return patched


def dashboard_command(*, resume: str | None = None, continue_latest: bool = False) -> str:
    """The shell command textual-serve runs for each tab: this Python, this package, the dashboard."""
    argv = [sys.executable, "-m", "app"]
    if resume:
        argv += ["--resume", resume]
    elif continue_latest:
        argv.append("--continue")
    return shlex.join(argv)


def settings_environment(overrides: dict[str, Any]) -> dict[str, str]:
    """The CLI's setting flags as ``TIDEGAUGE_*`` variables, so every tab's process gets them.

    The environment ranks just below the flags (above config.toml), so a tab sees
    the same settings the flags gave; they were already validated in this process.
    """
    from app.config import ENV_PREFIX

    env: dict[str, str] = {}
    for name, value in overrides.items():
        if value is None:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        else:
            text = str(value)
        env[ENV_PREFIX + name.upper()] = text
    return env


def bind_listener(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1 (port 0: any free port), or one clear error line."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((WEB_HOST, port))
        listener.listen(128)
    except OSError as err:
        listener.close()
        reason = err.strerror or str(err)
        raise SetupError(f"--web: cannot listen on {WEB_HOST}:{port} ({reason.lower()}); "
                         "choose another port with --web-port") from None
    listener.set_inheritable(False)
    return listener


def _dashboard_server_class() -> type:
    """The textual-serve Server, adapted; built on call so ``import app.web`` stays light."""
    import aiohttp_jinja2
    import jinja2
    from aiohttp import web
    from textual_serve.server import Server

    class DashboardServer(Server):
        """textual-serve's server on a socket bound here, with an offline page and a quiet log."""

        def __init__(self, command: str, listener: socket.socket) -> None:
            port = listener.getsockname()[1]
            super().__init__(command, host=WEB_HOST, port=port, title=PAGE_TITLE)
            self.listener = listener

        async def _make_app(self) -> web.Application:
            app = await super()._make_app()
            template = (Path(self.templates_path) / INDEX_TEMPLATE).read_text(encoding="utf-8")
            loader = jinja2.DictLoader({INDEX_TEMPLATE: offline_index_template(template)})
            aiohttp_jinja2.setup(app, loader=loader)
            return app

        async def on_startup(self, app: web.Application) -> None:
            # One line a user (and the browser test) reads the address from.
            print(f"tidegauge: the dashboard is served on {self.public_url} (ctrl+c stops it)", flush=True)

        def serve(self, debug: bool = False) -> None:
            self.debug = debug
            self.initialize_logging()
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, self.request_exit)
            try:
                web.run_app(self._make_app(), sock=self.listener, handle_signals=False, loop=loop,
                            access_log=None, print=lambda *_args: None,
                            shutdown_timeout=SHUTDOWN_GRACE_SECONDS)
            finally:
                self.listener.close()

    return DashboardServer


def serve_dashboard(port: int, overrides: dict[str, Any], *, resume: str | None = None,
                    continue_latest: bool = False) -> int:
    """Serve the dashboard on 127.0.0.1:``port`` until ctrl+c; returns the exit code."""
    listener = bind_listener(port)
    os.environ.update(settings_environment(overrides))
    server = _dashboard_server_class()(dashboard_command(resume=resume, continue_latest=continue_latest),
                                       listener)
    server.serve()
    return 0
