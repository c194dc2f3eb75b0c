"""The ``--web`` server: textual-serve's Server and its tab service, adapted (see
``app.surfaces.dashboard.web`` for the checks they apply: the per-run token, Host and Origin,
bounded tabs and messages).

Apart from web.py because it imports aiohttp, jinja2 and textual-serve at the top: only
``tidegauge --web`` imports this module, so nothing else pays for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import aiohttp_jinja2
import jinja2
from aiohttp import WSMsgType, web
from textual_serve.app_service import AppService
from textual_serve.server import Server, log, to_int

from app.surfaces.dashboard.web import (
    CLOSE_TRY_LATER,
    CLOSED_MESSAGE,
    INDEX_TEMPLATE,
    MAX_MESSAGE_BYTES,
    PAGE_TITLE,
    QUIT_GRACE_SECONDS,
    STDERR_KEPT_BYTES,
    STDERR_TAIL_BYTES,
    WEB_HOST,
    BadTabMessage,
    OneLineFormatter,
    RefusalLog,
    WebAccess,
    _quoted,
    bind_listener,
    clamp_size,
    close_reason,
    dashboard_command,
    non_loopback_warning,
    offline_index_template,
    parse_tab_message,
)
from app.system import startup
from app.kernel.redact import redact
from app.kernel.sanitize import sanitize_for_display
from app.surfaces.dashboard.favicon import favicon_ico


class StderrTail:
    """A tab's dashboard's stderr, read whole here and handed to textual-serve as nothing.

    textual-serve printed what it had read twice when a dashboard ended before its first
    frame (once as "failed to start", once when the process ended): a tab closed early
    printed its "resume with" line twice at shutdown. The tab prints it once (``run``).
    """

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self.tail = b""  # the last bytes, for the line a tab that ended by itself shows
        self.kept = bytearray()  # what the tab prints when its process has ended

    async def read(self, size: int = -1) -> bytes:
        while data := await self.reader.read(size):
            self.tail = (self.tail + data)[-STDERR_TAIL_BYTES:]
            self.kept += data[:max(0, STDERR_KEPT_BYTES - len(self.kept))]
        return b""

    def take(self) -> str:
        text = self.kept.decode("utf-8", errors="replace")
        self.kept.clear()
        return text

    def last_line(self) -> str:
        lines = [line for line in self.tail.decode("utf-8", errors="replace").splitlines() if line.strip()]
        return lines[-1].strip() if lines else ""

class TabService(AppService):
    """One tab's dashboard process: asked to quit, and killed if it has not within the grace time;
    its size clamped; ``on_ended`` told when the process is gone."""

    on_ended: Any = None
    stderr_tail: StderrTail | None = None

    async def start(self, width: int, height: int) -> None:
        await super().start(*clamp_size(width, height))

    async def _open_app_process(self, width: int = 80, height: int = 24) -> asyncio.subprocess.Process:
        process = await super()._open_app_process(width, height)
        assert process.stderr is not None
        self.stderr_tail = StderrTail(process.stderr)
        process.stderr = self.stderr_tail  # type: ignore[assignment]  # textual-serve only calls read()
        return process

    async def set_terminal_size(self, width: int, height: int) -> None:
        await super().set_terminal_size(*clamp_size(width, height))

    async def run(self) -> None:
        await super().run()
        if self.stderr_tail is not None and (said := self.stderr_tail.take()):
            sys.stdout.write(said)  # where textual-serve wrote it, once
            sys.stdout.flush()
        if self.on_ended is not None:
            await self.on_ended()

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

async def end_tab(websocket: web.WebSocketResponse, code: int, why: str) -> None:
    """Close a tab saying why, on its page (a text message) and in the close frame (cut)."""
    why = redact(sanitize_for_display(why))
    with contextlib.suppress(ConnectionError):
        await websocket.send_json([CLOSED_MESSAGE, why])
    await websocket.close(code=code, message=close_reason(why).encode("utf-8"))

class DashboardServer(Server):
    """textual-serve's server on a socket bound here, with an offline page, behind the token and
    the Host/Origin checks; at most ``max_tabs`` tabs, and one tab on a resumed session; every
    tab's dashboard ends with its tab or with the server."""

    def __init__(self, command: str, listener: socket.socket, access: WebAccess, *,
                 max_tabs: int, resume: str | None = None) -> None:
        host, port = listener.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        super().__init__(command, host=host, port=port, title=PAGE_TITLE,
                         public_url=f"http://{shown}:{port}")
        self.listener = listener
        self.access = access
        self.refusals = RefusalLog()
        self.max_tabs = max_tabs
        self.resume = resume
        self.open_tabs = 0
        self.resumed_session_open = False
        self.tab_tasks: set[asyncio.Task[Any]] = set()

    def initialize_logging(self) -> None:
        # textual-serve's rich handler prints tracebacks with local variables (the request,
        # its path, the token): every record here is one line instead.
        from app.kernel.redact import register_secret

        register_secret(self.access.token)
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(OneLineFormatter())
        logging.basicConfig(level=logging.DEBUG if self.debug else logging.INFO, handlers=[handler],
                            force=True)

    async def _make_app(self) -> web.Application:
        app = web.Application(middlewares=[self.guard])
        template = (Path(self.templates_path) / INDEX_TEMPLATE).read_text(encoding="utf-8")
        loader = jinja2.DictLoader({INDEX_TEMPLATE: offline_index_template(template)})
        aiohttp_jinja2.setup(app, loader=loader)
        app.add_routes([
            web.get("/", self.handle_index, name="index"),
            web.get("/ws", self.handle_websocket, name="websocket"),  # refused below: no token
            web.get("/ws/{token}", self.handle_websocket, name="tab"),
            web.get("/download/{key}", self.handle_download, name="download"),
            web.static("/static", self.statics_path, name="static"),
            web.get("/favicon.ico", self.handle_favicon, name="favicon"),
        ])
        app.on_startup.append(self.on_startup)
        app.on_shutdown.append(self.on_shutdown)
        return app

    @web.middleware
    async def guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Every request: Host and Origin; the page and the websocket: the token."""
        route = request.match_info.route.name
        is_websocket = route in ("websocket", "tab")
        token = request.match_info.get("token") or request.query.get("token")
        reason = self.access.refusal(host=request.headers.get("Host"), origin=request.headers.get("Origin"),
                                     token=token, needs_token=route in ("index", "websocket", "tab"),
                                     is_websocket=is_websocket)
        if reason is not None:
            what = "the websocket" if is_websocket else _quoted(request.path)
            line = self.refusals.line_for(f"refused {request.method} {what} from {request.remote}: {reason}")
            if line is not None:
                log.warning("%s", line)
            hint = " (open the address tidegauge --web printed: it ends in ?token=...)" if "token" in reason else ""
            return web.Response(status=403, text=f"tidegauge: refused: {reason}{hint}\n")
        response: web.StreamResponse = await handler(request)
        return response

    async def handle_index(self, request: web.Request) -> web.Response:
        """The page; its websocket's address carries the token, on the Host it was opened by."""
        context = {
            "font_size": to_int(request.query.get("fontsize", "16"), 16),
            "app_websocket_url": f"ws://{request.host}/ws/{self.access.token}",
            "config": {"static": {"url": "/static/"}},
            "application": {"name": self.title},
        }
        response = aiohttp_jinja2.render_template(INDEX_TEMPLATE, request, context)
        # The page holds the token: not cached, not framed by another page, and its address
        # (with the token) never sent as a Referer to a link the dashboard opens.
        response.headers.update({"Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
                                 "X-Frame-Options": "DENY",
                                 "Content-Security-Policy": "frame-ancestors 'none'"})
        return response

    async def handle_favicon(self, request: web.Request) -> web.Response:
        """The tab's icon: no token needed (it shows nothing of the session), Host still checked."""
        return web.Response(body=favicon_ico(), content_type="image/x-icon",
                            headers={"Cache-Control": "max-age=86400"})

    async def on_startup(self, app: web.Application) -> None:
        # One line a user (and the tests) reads the address from; the only place the token is shown.
        print(f"tidegauge: the dashboard is served on {self.public_url}/?token={self.access.token} "
              "(ctrl+c stops it)", flush=True)

    async def on_shutdown(self, app: web.Application) -> None:
        # A tab's websocket would otherwise hold the shutdown open until aiohttp's timeout.
        for task in list(self.tab_tasks):
            task.cancel()

    def tab_refusal(self) -> str | None:
        """Why one more tab cannot open now (the reason its page shows), or None."""
        if self.resume is not None and self.resumed_session_open:
            return (f"session {self.resume} is open in another tab: close that tab, then press Restart "
                    "(or serve a copy: --fork-session)")
        if self.open_tabs >= self.max_tabs:
            return (f"{self.open_tabs} tabs are open, the most web_max_tabs allows: close one and "
                    "press Restart, or raise web_max_tabs")
        return None

    async def _process_messages(self, websocket: web.WebSocketResponse, app_service: AppService) -> None:
        """The page's messages to its dashboard; one that is malformed is one log line and skipped."""
        async for message in websocket:
            if message.type == WSMsgType.ERROR:  # e.g. over MAX_MESSAGE_BYTES: aiohttp closes the tab
                log.warning("a tab's websocket failed, its tab is closed: %s", websocket.exception())
                return
            if message.type != WSMsgType.TEXT:
                continue
            try:
                parsed = parse_tab_message(message.data)
            except BadTabMessage as error:
                log.warning("a tab sent a malformed message (%s): ignored", error)
                continue
            if parsed.kind == "stdin":
                await app_service.send_bytes(parsed.text.encode("utf-8"))
            elif parsed.kind == "resize":
                await app_service.set_terminal_size(parsed.width, parsed.height)
            elif parsed.kind == "ping":
                await websocket.send_json(["pong", parsed.text])
            elif parsed.kind == "blur":
                await app_service.blur()
            elif parsed.kind == "focus":
                await app_service.focus()

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        """One tab: its own dashboard process, relayed both ways (the guard checked the token)."""
        task = asyncio.current_task()
        assert task is not None
        self.tab_tasks.add(task)
        websocket = web.WebSocketResponse(heartbeat=15, max_msg_size=MAX_MESSAGE_BYTES)
        width = to_int(request.query.get("width", "80"), 80)
        height = to_int(request.query.get("height", "24"), 24)
        service: TabService | None = None
        counted = False
        stopping = False  # the tab or the server ends it: not a dashboard that ended by itself
        try:
            await websocket.prepare(request)
            refusal = self.tab_refusal()
            if refusal is not None:
                log.warning("a tab was refused: %s", refusal)
                await end_tab(websocket, CLOSE_TRY_LATER, refusal)
                return websocket
            self.open_tabs += 1
            self.resumed_session_open = self.resume is not None
            counted = True
            log.info("a tab opened (%d of web_max_tabs %d open)", self.open_tabs, self.max_tabs)

            async def close_tab() -> None:
                # AppService awaits a close that returns nothing; aiohttp's says whether it closed
                await websocket.close()

            async def dashboard_ended() -> None:
                # A dashboard that ends by itself closes its tab (a quit does that already); one
                # that could not start (its session in use by another process) would otherwise
                # leave a blank page: the page shows the dashboard's own last line instead.
                if websocket.closed or stopping:
                    return
                why = service.stderr_tail.last_line() if service and service.stderr_tail else ""
                why = why.removeprefix("tidegauge: ") or "the dashboard ended before it started"
                log.warning("a tab's dashboard ended by itself: %s", why)
                await end_tab(websocket, 1011, why)

            service = TabService(self.command, write_bytes=websocket.send_bytes,
                                 write_str=websocket.send_str, close=close_tab,
                                 download_manager=self.download_manager, debug=self.debug)
            service.on_ended = dashboard_ended
            await service.start(width, height)
            await self._process_messages(websocket, service)
        except asyncio.CancelledError:  # the server stops: end this tab's dashboard below
            pass
        except Exception as error:  # one tab's failure is one line; the server serves on
            log.error("a tab failed: %s: %s", type(error).__name__, error)
        finally:
            self.tab_tasks.discard(task)
            if counted:  # the tab's place is free once its page is gone, while its process quits
                self.open_tabs -= 1
                self.resumed_session_open = False
                log.info("a tab closed (%d of web_max_tabs %d open)", self.open_tabs, self.max_tabs)
            stopping = True
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

DashboardServer.TabService = TabService  # type: ignore[attr-defined]  # one tab's process, as tests start it


def serve_dashboard(port: int, environment: dict[str, str], *, host: str = WEB_HOST, max_tabs: int = 4,
                    resume: str | None = None) -> int:
    """Serve the dashboard on ``host``:``port`` until ctrl+c; returns the exit code. ``environment``:
    the settings every tab's process gets (the CLI's flags as ``TIDEGAUGE_*`` variables)."""
    listener = bind_listener(host, port)
    bound_port = listener.getsockname()[1]
    warning = non_loopback_warning(host, bound_port)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    os.environ.update(environment)
    access = WebAccess.for_address(host, bound_port)
    server = DashboardServer(dashboard_command(resume=resume), listener, access,
                             max_tabs=max_tabs, resume=resume)
    startup.started()  # a long-lived server: the collector as usual from here
    server.serve()
    return 0
