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
import contextlib
import json
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
# How long a tab's dashboard gets to quit when its tab closes or the server stops;
# then its process is killed, so nothing is left running.
QUIT_GRACE_SECONDS = 10.0

# The one remote resource in textual-serve's page: a stylesheet from a font CDN.
_REMOTE_FONT_LINK = re.compile(r"<link\b[^>]*\bhref=\"https?://[^\"]*fonts[^\"]*\"[^>]*>", re.DOTALL)
# Any other resource the page would fetch from outside (an svg's xmlns is not fetched).
_REMOTE_RESOURCE = re.compile(r"""\b(?:href|src)\s*=\s*["'](https?://[^"']+)""")
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
    patched = _REMOTE_FONT_LINK.sub(lambda _match: _PACKAGED_FONT_FACES, template_text, count=1)
    remote = _REMOTE_RESOURCE.search(patched)
    if remote:  # a template this launcher does not know: refuse rather than serve a page that reaches out
        raise SetupError(f"--web: textual-serve's page loads {remote.group(1)}; it cannot be served offline")
    return patched


def dashboard_command(*, resume: str | None = None) -> str:
    """The shell command textual-serve runs for each tab: this Python, this package, the dashboard."""
    argv = [sys.executable, "-m", "app"]
    if resume:
        argv += ["--resume", resume]
    # exec: textual-serve starts it through /bin/sh; the dashboard then is the process it
    # holds, so a kill reaches the dashboard itself.
    return "exec " + shlex.join(argv)


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
        elif isinstance(value, (str, int, float, Path)):
            text = str(value)
        else:  # lists and tables: pydantic-settings reads complex values from the environment as JSON
            text = json.dumps(value)
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
    """The textual-serve Server, adapted; built on call so ``import app.dashboard.web`` stays light."""
    import aiohttp_jinja2
    import jinja2
    from aiohttp import web
    from textual_serve.app_service import AppService
    from textual_serve.server import Server, log, to_int

    class TabService(AppService):
        """One tab's dashboard process: asked to quit, and killed if it has not within the grace time."""

        async def stop(self) -> None:
            process = self._process
            try:
                await asyncio.wait_for(super().stop(), QUIT_GRACE_SECONDS)
                if process is not None:
                    await asyncio.wait_for(process.wait(), QUIT_GRACE_SECONDS)
            except asyncio.TimeoutError:
                if process is not None and process.returncode is None:
                    log.warning("a tab's dashboard did not quit within %ss: killed", QUIT_GRACE_SECONDS)
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
                    await process.wait()

    class DashboardServer(Server):
        """textual-serve's server on a socket bound here, with an offline page; every tab's
        dashboard ends with its tab or with the server."""

        def __init__(self, command: str, listener: socket.socket) -> None:
            port = listener.getsockname()[1]
            super().__init__(command, host=WEB_HOST, port=port, title=PAGE_TITLE)
            self.listener = listener
            self.tab_tasks: set[asyncio.Task[Any]] = set()

        async def _make_app(self) -> web.Application:
            app = await super()._make_app()
            template = (Path(self.templates_path) / INDEX_TEMPLATE).read_text(encoding="utf-8")
            loader = jinja2.DictLoader({INDEX_TEMPLATE: offline_index_template(template)})
            aiohttp_jinja2.setup(app, loader=loader)
            return app

        async def on_startup(self, app: web.Application) -> None:
            # One line a user (and the browser test) reads the address from.
            print(f"tidegauge: the dashboard is served on {self.public_url} (ctrl+c stops it)", flush=True)

        async def on_shutdown(self, app: web.Application) -> None:
            # A tab's websocket would otherwise hold the shutdown open until aiohttp's timeout.
            for task in list(self.tab_tasks):
                task.cancel()

        async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
            """textual-serve's handler, with TabService for the process and the task tracked."""
            task = asyncio.current_task()
            assert task is not None
            self.tab_tasks.add(task)
            websocket = web.WebSocketResponse(heartbeat=15)
            width = to_int(request.query.get("width", "80"), 80)
            height = to_int(request.query.get("height", "24"), 24)
            service: TabService | None = None
            try:
                await websocket.prepare(request)

                async def close_tab() -> None:
                    # AppService awaits a close that returns nothing; aiohttp's says whether it closed
                    await websocket.close()

                service = TabService(self.command, write_bytes=websocket.send_bytes,
                                     write_str=websocket.send_str, close=close_tab,
                                     download_manager=self.download_manager, debug=self.debug)
                await service.start(width, height)
                await self._process_messages(websocket, service)
            except asyncio.CancelledError:  # the server stops: end this tab's dashboard below
                pass
            except Exception as error:  # one tab's failure is logged; the server serves on
                log.exception(error)
            finally:
                self.tab_tasks.discard(task)
                if service is not None:
                    await asyncio.shield(service.stop())
                if websocket.prepared:
                    await websocket.close()
            return websocket

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
                            shutdown_timeout=QUIT_GRACE_SECONDS * 2)
            finally:
                self.listener.close()
            print("tidegauge: stopped; every tab's session has ended", flush=True)

    return DashboardServer


def serve_dashboard(port: int, overrides: dict[str, Any], *, resume: str | None = None) -> int:
    """Serve the dashboard on 127.0.0.1:``port`` until ctrl+c; returns the exit code."""
    listener = bind_listener(port)
    os.environ.update(settings_environment(overrides))
    server = _dashboard_server_class()(dashboard_command(resume=resume), listener)
    server.serve()
    return 0
