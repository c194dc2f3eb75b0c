"""``tidegauge --web``: the same dashboard in a browser, served by textual-serve on 127.0.0.1.

Every browser tab that connects gets its own ``tidegauge`` dashboard process:
textual-serve starts it with Textual's web driver and relays the screen and the
keys over a websocket, so a tab behaves exactly like a terminal running
``tidegauge`` in the directory the server was started in.

The page must work on a machine with no internet. textual-serve's page template
asks a font CDN for Roboto Mono, which the package already ships among its
static files; the template is served from here with that link replaced by
``@font-face`` rules on the packaged fonts (site-packages is left untouched).

Whoever opens a tab runs commands as this user, so nothing is served to a
client that has not shown this run's secret token (Jupyter's scheme): the URL
printed at start carries it (``/?token=...``), the page passes it on in its
websocket's path (``/ws/<token>``), and it is compared in constant time and
never logged. Every request's ``Host`` must name the served address (a DNS
rebinding name is refused) and a websocket's ``Origin`` must be the served
origin (another page in the same browser is refused). A refusal is an HTTP 403
and one log line. Tabs are bounded (``web_max_tabs``), a tab's terminal size is
clamped, and a malformed websocket message is one log line, never a traceback.

This module imports textual-serve (aiohttp, jinja2), never textual: the
dashboard itself runs in the child processes.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import re
import secrets
import shlex
import socket
import sys
from dataclasses import dataclass

from app.kernel.json_depth import json_too_deep
from app.kernel.errors import SetupError
from app.kernel.redact import redact
from app.kernel.sanitize import sanitize_for_display

WEB_HOST = "127.0.0.1"
# A terminal size from a client is clamped to these (columns, rows): ?width=99999999 grew
# one tab's dashboard past 2.2 GB in 40 s.
MIN_COLUMNS, MAX_COLUMNS = 10, 1000
MIN_ROWS, MAX_ROWS = 5, 500
# One websocket message at most (a paste is one stdin message); aiohttp closes the tab above it.
MAX_MESSAGE_BYTES = 1024 * 1024
# A ping's payload is echoed back; a page sends a millisecond timestamp.
MAX_PING_CHARS = 64
# The page's messages nest two levels (["resize", {...}]); json.loads recurses once per level,
# so a message of 100,000 brackets is refused before it is parsed.
MAX_MESSAGE_DEPTH = 8
# A websocket close reason is at most 123 bytes (RFC 6455); the page shows it.
MAX_CLOSE_REASON_BYTES = 123
# Try again later (RFC 6455 1013): the tab limit, or the resumed session open in another tab.
CLOSE_TRY_LATER = 1013
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


# What Restart says when it cannot open a new session (the page holds only this run's token).
SERVER_STOPPED_WORDS = ("tidegauge --web has stopped, and this session with it. To resume it, run "
                        "tidegauge --web --continue in its directory and open the address it prints.")
SERVER_RESTARTED_WORDS = ("tidegauge --web was started again with a new address: open the address it "
                          "printed (ending in ?token=...).")
_FAVICON_LINK = '<link rel="icon" type="image/x-icon" href="/favicon.ico" />\n    '

# textual-serve's page shows only "Session ended." when its websocket closes. A tab closed by
# the server (the tab limit, the resumed session open in another tab, a dashboard that could
# not start) is first sent ["tidegauge_closed", why] (a close reason holds only 123 bytes);
# the page shows that line on its closed dialog (as text, never as HTML).
CLOSED_MESSAGE = "tidegauge_closed"
_SHOW_CLOSE_REASON = """\
<script>
      window.WebSocket = class extends window.WebSocket {
        constructor(...args) {
          super(...args);
          let why = "";
          this.addEventListener("message", (event) => {
            if (typeof event.data !== "string") return;
            try {
              const [kind, text] = JSON.parse(event.data);
              if (kind === "%s" && typeof text === "string") why = text;
            } catch (error) {}
          });
          this.addEventListener("close", (event) => {
            const message = document.querySelector(".closed-dialog .message");
            if ((why || event.reason) && message) message.textContent = why || event.reason;
          });
        }
      };
      // Keys typed before a click reach the dashboard: the terminal takes the focus as soon as
      // textual.js has made it (bounded: a page that never makes one stops looking after 10 s).
      (function focusTerminal(deadline) {
        const input = document.querySelector("#terminal textarea");
        if (input) { input.focus({preventScroll: true}); return; }
        if (performance.now() < deadline) requestAnimationFrame(() => focusTerminal(deadline));
      })(performance.now() + 10000);
      // Restart opens a new session when tidegauge --web still runs; when it has stopped (or was
      // started again, with a new token) it says so and how to resume, instead of a browser error.
      window.refresh = async function () {
        const message = document.querySelector(".closed-dialog .message");
        let status = 0;
        try {
          status = (await fetch(window.location.href, {cache: "no-store"})).status;
        } catch (error) {}
        if (status === 200) { window.location.reload(); return; }
        if (message) message.textContent = status === 0 ? "%s" : "%s";
      };
    </script>
  </head>""" % (CLOSED_MESSAGE, SERVER_STOPPED_WORDS, SERVER_RESTARTED_WORDS)
# What a tab's dashboard wrote on stderr last is kept (its one-line error if it cannot start).
STDERR_TAIL_BYTES = 4096
STDERR_KEPT_BYTES = 64 * 1024  # of a tab's stderr, printed when its process ends


def offline_index_template(template_text: str) -> str:
    """textual-serve's page template with its font CDN link replaced by the packaged fonts,
    and the reason a tab was closed shown on its closed dialog."""
    patched = _REMOTE_FONT_LINK.sub(lambda _match: _PACKAGED_FONT_FACES, template_text, count=1)
    remote = _REMOTE_RESOURCE.search(patched)
    if remote:  # a template this launcher does not know: refuse rather than serve a page that reaches out
        raise SetupError(f"--web: textual-serve's page loads {remote.group(1)}; it cannot be served offline")
    return patched.replace("</head>", _FAVICON_LINK + _SHOW_CLOSE_REASON, 1)


def clamp_size(width: int, height: int) -> tuple[int, int]:
    """A client's terminal size within what a dashboard can draw without growing without bound."""
    return min(max(width, MIN_COLUMNS), MAX_COLUMNS), min(max(height, MIN_ROWS), MAX_ROWS)


def close_reason(text: str) -> str:
    """``text`` cut to what a websocket close frame carries."""
    data = text.encode("utf-8")
    if len(data) <= MAX_CLOSE_REASON_BYTES:
        return text
    return data[:MAX_CLOSE_REASON_BYTES - 3].decode("utf-8", errors="ignore") + "..."


def _quoted(value: str | None, limit: int = 80) -> str:
    """A client's header value for a log line: cut, control characters escaped (repr)."""
    if value is None:
        return "none"
    return repr(value[:limit] + ("..." if len(value) > limit else ""))


@dataclass(frozen=True)
class TabMessage:
    """One message a tab's page sends: keys, a new size, a ping, focus or blur."""

    kind: str
    text: str = ""
    width: int = 0
    height: int = 0


class BadTabMessage(ValueError):
    """A websocket message that is not one the page sends; the text is one line for the log."""


def parse_tab_message(raw: str) -> TabMessage:
    """The page's JSON envelope (``["stdin", "ls"]``, ``["resize", {"width": 80, "height": 24}]``,
    ``["ping", "123"]``, ``["focus"]``, ``["blur"]``), or BadTabMessage saying what was wrong."""
    if json_too_deep(raw, MAX_MESSAGE_DEPTH):
        raise BadTabMessage(f"nested more than {MAX_MESSAGE_DEPTH} levels deep ({len(raw)} characters)")
    try:
        envelope = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: never past the check above, kept as a net
        raise BadTabMessage(f"not JSON ({len(raw)} characters)") from None
    if not isinstance(envelope, list) or not envelope or not isinstance(envelope[0], str):
        raise BadTabMessage(f"not a [type, data] list: {type(envelope).__name__}")
    kind = envelope[0]
    data = envelope[1] if len(envelope) > 1 else None
    if kind == "stdin":
        if not isinstance(data, str):
            raise BadTabMessage(f"stdin data is {type(data).__name__}, not text")
        return TabMessage("stdin", text=data)
    if kind == "resize":
        if not isinstance(data, dict):
            raise BadTabMessage(f"resize data is {type(data).__name__}, not an object")
        width, height = data.get("width"), data.get("height")
        if type(width) is not int or type(height) is not int:  # bool is an int; JSON true is not a size
            raise BadTabMessage("resize width and height must be whole numbers")
        width, height = clamp_size(width, height)
        return TabMessage("resize", width=width, height=height)
    if kind == "ping":
        if not isinstance(data, str) or len(data) > MAX_PING_CHARS:
            raise BadTabMessage(f"ping data must be text of at most {MAX_PING_CHARS} characters")
        return TabMessage("ping", text=data)
    if kind in ("focus", "blur"):
        return TabMessage(kind)
    raise BadTabMessage(f"unknown message type {_quoted(kind, 40)}")


@dataclass(frozen=True)
class WebAccess:
    """Who may use the server: the token, and the ``Host`` / ``Origin`` values of the served address."""

    token: str
    port: int
    allowed_hosts: frozenset[str]  # exact "host:port" values of the Host header
    any_ip_host: bool = False  # served on every address (0.0.0.0, ::): any IP literal, never a name

    @classmethod
    def for_address(cls, host: str, port: int, token: str | None = None) -> "WebAccess":
        address = ipaddress.ip_address(host)
        shown = f"[{address}]" if address.version == 6 else str(address)
        hosts = {f"{shown}:{port}"}
        if address.is_loopback:  # a browser may name the loopback address either way
            hosts.add(f"localhost:{port}")
        return cls(token=token or secrets.token_urlsafe(32), port=port, allowed_hosts=frozenset(hosts),
                   any_ip_host=address.is_unspecified)

    def host_allowed(self, host: str | None) -> bool:
        if host is None:
            return False
        if host in self.allowed_hosts:
            return True
        if not self.any_ip_host:
            return False
        # A DNS rebinding attack needs a name it controls; an IP literal cannot be rebound.
        name, _, port = host.rpartition(":")
        if port != str(self.port):
            return False
        try:
            ipaddress.ip_address(name[1:-1] if name.startswith("[") and name.endswith("]") else name)
        except ValueError:
            return False
        return True

    def token_matches(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode("utf-8"), self.token.encode("utf-8"))

    def refusal(self, *, host: str | None, origin: str | None, token: str | None,
                needs_token: bool, is_websocket: bool) -> str | None:
        """Why this request is refused (one line without the token), or None to serve it."""
        if not self.host_allowed(host):
            return f"Host {_quoted(host)} is not the served address"
        if origin is not None or is_websocket:
            # A page's requests name its origin; only pages this server served may call it
            # (the page builds its websocket's address from the Host it was served on).
            if origin != f"http://{host}":
                return f"Origin {_quoted(origin)} is not the served origin"
        if needs_token and not self.token_matches(token):
            return "no token" if not token else "wrong token"
        return None


class RefusalLog:
    """Which refusals get a log line. Any page in the user's browser can make requests to the
    served port (an image tag in a loop): one line each would bury what the user must read. The
    first ``each`` are logged one by one, then one line per ``every`` with the count."""

    def __init__(self, each: int = 50, every: int = 1_000) -> None:
        self.each, self.every = each, every
        self.refused = 0

    def line_for(self, refusal: str) -> str | None:
        """The log line for one more refusal, or None when it is only counted."""
        self.refused += 1
        n = self.refused
        if n <= self.each:
            return refusal
        if n == self.each + 1:
            return f"{refusal} (from now on one line per {self.every:,} refusals: {n:,} so far)"
        if n % self.every == 0:
            return f"{refusal} ({n:,} refusals so far)"
        return None


def dashboard_command(*, resume: str | None = None) -> str:
    """The shell command textual-serve runs for each tab: this Python, this package, the dashboard."""
    argv = [sys.executable, "-m", "app"]
    if resume:
        argv += ["--resume", resume]
    # exec: textual-serve starts it through /bin/sh; the dashboard then is the process it
    # holds, so a kill reaches the dashboard itself.
    return "exec " + shlex.join(argv)


def bind_listener(host: str, port: int) -> socket.socket:
    """A listening socket on ``host`` (port 0: any free port), or one clear error line."""
    shown = f"[{host}]" if ":" in host else host
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
        listener.listen(128)
    except OSError as err:
        listener.close()
        reason = err.strerror or str(err)
        raise SetupError(f"--web: cannot listen on {shown}:{port} ({reason.lower()}); "
                         "choose another port with --web-port") from None
    listener.set_inheritable(False)
    return listener


def non_loopback_warning(host: str, port: int) -> str | None:
    """The one line a user must read before serving on an address others can reach."""
    if ipaddress.ip_address(host).is_loopback:
        return None
    shown = f"[{host}]" if ":" in host else host
    return (f"tidegauge: warning: --web-host {host} is not loopback: anyone who can reach "
            f"{shown}:{port} and holds the token can run commands as this user")


class OneLineFormatter(logging.Formatter):
    """Every log record as one line: an exception as its type and message (never a traceback,
    whose local variables would hold the request and the token), controls escaped, the token
    and API keys redacted."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            message += f" ({type(error).__name__}: {error})"
        return "tidegauge --web: " + " ".join(redact(sanitize_for_display(message)).split())
