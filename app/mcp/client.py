"""One MCP server connection, owned by one background task.

The SDK's transports are anyio context managers: they must be entered and left
in the same task. So each server gets a runner task that enters the client,
lists the tools, reports ready, and waits for ``aclose``; tool calls come from
the agent's task and travel over the session's streams. Leaving the client
runs the SDK's shutdown (close stdin, then terminate the whole process tree),
shielded from cancellation, so a stopped session leaves no server behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Protocol, TypeVar, runtime_checkable
import signal
import psutil
from pydantic import ValidationError

from app import __version__
from app.mcp.client_features import ClientRequests, SamplingRefused, configured_roots, folder_roots
from app.mcp.settings import McpServerConfig, MissingEnvironment, hide_url_secrets, resolved_headers
from app.mcp.stderr_log import ServerStderrLog
from app.kernel.redact import redact
from app.kernel.sanitize import sanitize_for_display
from app.tools.base import SavedOutputBudget, ToolOutput

if TYPE_CHECKING:  # the SDK is imported only when a server is configured
    from mcp import Client
    from mcp_types import LoggingMessageNotificationParams

    from app.mcp.client_tasks import ClientTasks

# What a call awaited by ``_unless_dead`` returns.
CallResult = TypeVar("CallResult")
# How a call's progress is reported upward: (progress, total, message), message cleaned.
ProgressReport = Callable[[float, "float | None", str], None]
# How the status of the MCP task a call runs as is reported upward: (status, message), message cleaned.
TaskStatusReport = Callable[[str, str], None]
# A call that keeps reporting progress may run this many times its tool_timeout in all.
PROGRESS_MAX_FACTOR = 4
# One log notification keeps at most this much in the server's log.
MAX_LOG_MESSAGE_CHARS = 8192
# How often a task is polled (tasks/get) when its server suggests no pollInterval, and the bounds put
# on the one it suggests: a server asking for 0 ms does not get a busy loop, nor one asking for an
# hour a call that looks hung.
TASK_POLL_DEFAULT = 1.0
TASK_POLL_MIN = 0.1
TASK_POLL_MAX = 10.0
# A task given up (an interrupt, a timeout) is cancelled on its server (tasks/cancel) within this long.
TASK_CANCEL_WAIT = 5.0


def login_command(name: str) -> str:
    """How a user logs in to a url server that wants OAuth (``app.mcp.oauth.login``)."""
    return f"tidegauge mcp login {name}"


class McpServerError(Exception):
    """A server could not start, or stopped answering; the message says which and why."""


# How long the 2026 ``server/discover`` probe may go unanswered before the plain ``initialize``
# handshake follows on the same connection. The SDK waits 10 s, which every server that drops
# unknown methods would cost at each start; a modern server that is merely slow to start still
# connects (the SDK re-probes when the initialize is answered with its versions).
PROBE_TIMEOUT = 2.0


@dataclass(frozen=True)
class RemoteTool:
    """A tool as its server lists it (names unprefixed)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool  # declared read-only (annotations.readOnlyHint); anything else asks first
    # execution.taskSupport == "required": callable only as an MCP task (spec 2025-11-25).
    task_required: bool = False
    # Called as a task: it requires one and its server declares task-augmented tools/call. A
    # task-only tool of a server that does not is not offered (every call would fail).
    as_task: bool = False


@dataclass(frozen=True)
class RemotePrompt:
    """A prompt as its server lists it: (name, description, required) for each argument."""

    name: str
    description: str
    arguments: tuple[tuple[str, str, bool], ...] = ()


# A server that lists more prompts than this is cut there (each is a slash command on the screen).
MAX_PROMPTS = 200


async def _prompts_and_resources(client: Client) -> tuple[list[RemotePrompt], bool]:
    """The prompts a server offers and whether it serves resources (its declared capabilities). A
    server whose prompts/list fails still starts, without prompts: its tools matter more."""
    capabilities = client.server_capabilities
    serves_resources = capabilities is not None and capabilities.resources is not None
    if capabilities is None or capabilities.prompts is None:
        return [], serves_resources
    prompts: list[RemotePrompt] = []
    cursor: str | None = None
    try:
        for _ in range(20):  # a server that pages forever is a broken server
            page = await client.list_prompts(cursor=cursor)
            for prompt in page.prompts:
                arguments = tuple((a.name, a.description or "", bool(a.required)) for a in prompt.arguments or [])
                prompts.append(RemotePrompt(prompt.name, prompt.description or prompt.title or "", arguments))
            cursor = page.next_cursor
            if cursor is None or len(prompts) >= MAX_PROMPTS:
                break
    except Exception:  # noqa: BLE001 - a broken prompts/list costs the prompts, not the server
        return prompts[:MAX_PROMPTS], serves_resources
    return prompts[:MAX_PROMPTS], serves_resources


@runtime_checkable
class ScopeKeeper(Protocol):
    """A session's OAuth (app.mcp.oauth) that keeps the scope a 403 asked for, so the next
    ``tidegauge mcp login`` asks for it beside what was granted."""

    def want_scope(self, scope: str) -> None: ...


@dataclass
class McpConnection:
    name: str
    config: McpServerConfig
    workspace: Path
    log_dir: Path | None = None  # the server's stderr goes to <log_dir>/mcp-<name>.log
    tools: list[RemoteTool] = field(default_factory=list)
    # The session's answers to what the server asks (forms); None: forms are not offered.
    requests: ClientRequests | None = None
    # A url server's OAuth (an httpx Auth from app.mcp.oauth: stored tokens, refreshed), or None.
    authorization: Any = None
    # Its prompts (prompts/list at start, when it declares prompts) and whether it serves resources.
    prompts: list[RemotePrompt] = field(default_factory=list)
    serves_resources: bool = False
    # What the server's initialize answer says a client should tell its model (raw, unbounded).
    instructions: str | None = None
    # The session's cap on saved outputs: answers the transport cuts and saves count toward it.
    saved_output_budget: SavedOutputBudget | None = None

    def __post_init__(self) -> None:
        self._client: Client | None = None
        self._runner: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None
        self._stop = asyncio.Event()
        self._errlog: ServerStderrLog | None = None
        self.failure: str | None = None  # why it stopped, when it stopped on its own
        self.stopped_cleanly = False  # stopped by aclose, after it was ready
        self._pgid: int | None = None  # the stdio server's process group (it leads a new session)
        self._dead = asyncio.Event()  # the server went away: pending calls stop waiting
        # Called once when a server that was ready stops without being asked (the hub says so).
        self.on_exit: Callable[[McpConnection, str], None] = lambda _c, _reason: None
        # "auto" probes server/discover first; "legacy" only initializes: a server that dropped
        # the connection on the probe (MCP Python SDK 1.9.0 and earlier crash on it) is started
        # again in legacy mode, and stays in it for the session.
        self.mode = "auto"
        self._closed_in_handshake = False
        self._ended_by_transport: str | None = None  # why the transport ended the server in the handshake
        self._exit_status: int | None = None  # a stdio server's, once its stdout ended
        self._last_stderr_line = ""  # once its log is closed
        self.bad_lines = 0  # stdout lines that were not MCP messages (filed in its log)
        self._unauthorized: str | None = None  # the WWW-Authenticate of the last 401, for the message
        # The scope a 403 insufficient_scope asked for (the spec's scope step-up), cleaned; "" when
        # it named none; None when no call met one.
        self._more_scope: str | None = None
        self._http: Any = None  # a url server's httpx2 client, closed when its runner ends
        # Requests to a url server that surely never ran: the connection was refused, or the server
        # answered 404 to our session id (it restarted and forgot it). A call lost that way is sent again.
        self._undelivered = 0
        self._reconnecting = asyncio.Lock()
        # Questions of the server's waiting for the user (a form, a model call's approval): a call is
        # not idle meanwhile, and its idle wait starts again when the last is answered.
        self._asking_user = 0
        self._answered_at = 0.0
        self.on_reconnect: Callable[[McpConnection], None] = lambda _c: None
        # The MCP tasks this connection created, and the last status it knows of each.
        self.tasks: dict[str, str] = {}
        # The server's requests run as tasks on our side (None: no form or model call is answered).
        self.client_tasks: ClientTasks | None = None
        # The task-status reports of the tool calls in flight (see _client_task_status).
        self._task_reporters: list[Callable[[str, str | None], None]] = []
        # A call refused 403 insufficient_scope: asked whether the user logs in again for that scope
        # (the dashboard's offer); True once logged in and this connection restarted with the new
        # tokens, and the call is then sent once more. None: the refusal is the call's answer.
        self.on_step_up: Callable[[McpConnection, str], Awaitable[bool]] | None = None

    @property
    def alive(self) -> bool:
        return self._client is not None and self._runner is not None and not self._runner.done()

    @property
    def log_path(self) -> Path | None:
        return self.log_dir / f"mcp-{self.name}.log" if self.log_dir is not None else None

    # ---- start and stop ----

    @property
    def roots(self) -> list[Path] | None:
        """The folders given to the server as roots (None: none advertised). Checked by ``start``."""
        try:
            return configured_roots(self.config.roots, self.workspace)
        except ValueError:
            return []

    async def start(self) -> None:
        """Start the server and list its tools; raises McpServerError with one line on failure."""
        try:
            configured_roots(self.config.roots, self.workspace)
        except ValueError as bad:
            raise McpServerError(str(bad)) from None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.startup_timeout
        try:
            await self._start_once(deadline)
        except McpServerError:
            if not (self._closed_in_handshake and self.mode == "auto"):
                raise
            self.mode = "legacy"
            self._reset()
            await self._start_once(deadline)

    def _reset(self) -> None:
        """Forget a finished runner's state, so the connection can be started again."""
        self._client = None
        self._runner = None
        self._ready = None
        self._stop = asyncio.Event()
        self._dead = asyncio.Event()
        self.failure = None
        self.stopped_cleanly = False
        self._closed_in_handshake = False
        self._ended_by_transport = None
        self._exit_status = None
        self._last_stderr_line = ""
        self._unauthorized = None
        self._more_scope = None

    async def _start_once(self, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._runner = asyncio.create_task(self._run(), name=f"mcp-{self.name}")
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), max(deadline - loop.time(), 0.001))
        except asyncio.TimeoutError:
            # Still in the handshake: cancel it (the SDK's shutdown is shielded and bounded). A server
            # that let its start bound pass unanswered is given up on, so its process group is ended
            # first: the SDK's shutdown would close its stdin and wait a 2 s grace for an exit a hung
            # server never makes, and the session's start waits for every server's outcome.
            self._stop.set()
            if self._pgid is not None:
                await _end_process_group(self._pgid)
            self._runner.cancel()
            await asyncio.gather(self._runner, return_exceptions=True)
            # The connection closed because the group was ended here: not a server that dropped
            # the probe, to be started again in legacy mode.
            self._closed_in_handshake = False
            raise McpServerError(f"no answer within {self.config.startup_timeout:g} s") from None
        except McpServerError:
            await self.aclose()
            raise

    async def _run(self) -> None:
        assert self._ready is not None
        handshake_failure: str | None = None
        try:
            async with self._make_client() as client:
                if self._errlog is not None:
                    self._errlog.spawned()  # the server's exit now ends its log
                tools = await self._list_tools(client)
                self.prompts, self.serves_resources = await _prompts_and_resources(client)
                self.instructions = client.instructions
                self._client = client
                self.tools = tools
                self._ready.set_result(None)
                watcher = asyncio.create_task(self._watch_process(), name=f"mcp-{self.name}-watch")
                try:
                    await self._stop.wait()
                finally:
                    watcher.cancel()
            self.stopped_cleanly = self.failure is None
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # an anyio ExceptionGroup too: one line, never a traceback
            reason = self._ended_by_transport or self._explain(exc)
            if not self._ready.done():
                # A server the transport ended is not one that crashed on the probe: not started again.
                self._closed_in_handshake = _connection_closed(exc) and self._ended_by_transport is None
                handshake_failure = reason  # said once the server's last stderr words are read (below)
            elif not self._stop.is_set():
                reason += self._how_it_ended()
                self.failure = reason
                if self.config.url is None:  # a url server is reconnected at its next call instead
                    self.on_exit(self, reason)
        finally:
            self._client = None
            if self._http is not None:
                http, self._http = self._http, None
                await http.aclose()
            if self._pgid is not None:
                # The SDK kills the process group only when the server outlives its grace
                # period; a server that exits in time leaves its own children behind.
                await _end_process_group(self._pgid)
                self._pgid = None
            errlog, self._errlog = self._errlog, None
            if errlog is not None:
                await asyncio.to_thread(errlog.close)  # waits for the server's last words, off the loop
                self._last_stderr_line = errlog.last_line
            if self._ready is not None and not self._ready.done():
                if self._stop.is_set():
                    self._ready.cancel()  # start() gave up waiting: nobody will read an error
                elif handshake_failure is not None:
                    self._ready.set_exception(McpServerError(handshake_failure + self._how_it_ended()))
                else:
                    self._ready.set_exception(McpServerError(self.failure or "stopped before it was ready"))

    def _explain(self, exc: BaseException) -> str:
        """One line for a failure; a 401 says how to log in rather than the SDK's "error response"."""

        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
        if _is_oauth_failure(exc):  # the flow met a server it cannot work with: say what, not "log in"
            return f"OAuth failed: {describe_failure(exc)}"
        if self._more_scope is not None:
            return self._more_scope_words()
        if self._unauthorized is not None:
            return (f"authorization required (HTTP 401{self._unauthorized}): run `{login_command(self.name)}`, or give "
                    f"the server a token with bearer_token_env_var or headers in [mcp_servers.{self.name}]")
        if isinstance(exc, MissingEnvironment):
            return str(exc)
        return describe_failure(exc)

    def _how_it_ended(self) -> str:
        """What a stdio server's end says of its cause, for the failure's one line: its exit status, its
        last stderr line and the stdout lines that were not MCP messages ("" when none is known)."""
        said: list[str] = []
        status = self._exit_status
        if status is not None:
            said.append(f"exit status {status}" if status >= 0 else f"killed by signal {-status}")
        last = self._last_stderr_line or (self._errlog.last_line if self._errlog is not None else "")
        if last:
            said.append(f"its last stderr line: {last!r}")
        if self.bad_lines:
            where = f" (in {self.log_path})" if self.log_path is not None else ""
            said.append(f"{self.bad_lines} stdout line{'s' if self.bad_lines != 1 else ''} that "
                        f"{'were' if self.bad_lines != 1 else 'was'} not MCP messages{where}")
        return f" ({'; '.join(said)})" if said else ""

    def _bad_stdout_line(self, text: str) -> None:
        """A line on a stdio server's stdout that is not a JSON-RPC message: counted, and filed in the
        server's log as one line (never a traceback on our stderr); the server goes on."""
        self.bad_lines += 1
        if self._errlog is not None:
            shown = text if len(text) <= 300 else text[:299] + "…"
            self._errlog.write_line(f"[tidegauge] a stdout line that is not an MCP message was ignored: {shown!r}")

    def _exited(self, status: int | None) -> None:
        self._exit_status = status

    def _more_scope_words(self) -> str:
        """A 403 insufficient_scope, said as the 401's words say it: what the server wants, how to get it.

        With OAuth tokens, a login alone would keep them (they are still valid, so no consent is
        asked): the tokens are forgotten first, and the new login asks for the scopes the server
        advertises. A session never opens a browser for the SDK's own step-up."""
        asked = f", scope {self._more_scope!r} asked for" if self._more_scope else ""
        if isinstance(self.authorization, ScopeKeeper) and self._more_scope:
            how = (f"run `{login_command(self.name)}`: it asks for that scope beside the one you have")
        elif self.authorization is not None:
            how = (f"log in again for it: `tidegauge mcp logout {self.name}`, then `{login_command(self.name)}`")
        else:
            how = (f"give the server a token with that scope with bearer_token_env_var or headers in "
                   f"[mcp_servers.{self.name}], or log in with `{login_command(self.name)}`")
        return f"more scope required (HTTP 403 insufficient_scope{asked}): {how}"

    def _make_client(self) -> Client:
        # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
        import mcp.client.session
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters
        from mcp_types import Implementation

        from app.mcp.bounded_stdio import bounded_stdio_client

        mcp.client.session.DISCOVER_TIMEOUT_SECONDS = PROBE_TIMEOUT  # see PROBE_TIMEOUT
        client_info = Implementation(name="tidegauge", version=__version__)
        if self.config.url is not None:
            # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
            from mcp.client.streamable_http import streamable_http_client

            self._http = self._http_client()  # ours to close: the SDK leaves a client it was given open
            from app.mcp.http_bounds import SDK_MAX_SSE_EVENT_BYTES

            # Our transport bounds every body (app/mcp/http_bounds.py); the SDK's 1 MiB bound on one
            # event would refuse answers the stdio path takes (up to the cap, then cut and saved).
            transport = streamable_http_client(self.config.url, http_client=self._http,
                                               max_sse_event_size=SDK_MAX_SSE_EVENT_BYTES)
            return Client(self._with_client_tasks(transport), read_timeout_seconds=self._request_timeout(),
                          client_info=client_info, mode=self.mode, **self._log_options())
        cwd = self.workspace
        if self.config.cwd:
            cwd = (self.workspace / os.path.expanduser(self.config.cwd)).resolve()
        # The run's token too (the SDK gives a server a minimal environment): after a kill -9 of
        # headless tidegauge, the watchdog finds the server and its children by it. Ours wins.
        from app.system.watchdog import token_env

        params = StdioServerParameters(command=self.config.command or "", args=list(self.config.args),
                                       env=(dict(self.config.env) | token_env()) or None, cwd=str(cwd))
        # The server's stderr must not reach the dashboard's screen: it goes to a file, redacted
        # (its env values too: a server that prints its environment prints its token) and capped.
        self._errlog = ServerStderrLog(self.log_path, self.config.env.values())
        assert self._errlog.writer is not None
        # Our reader, not the SDK's: linear in the answer's size, and one over the cap goes to a file.
        spill_dir = self.log_dir / "tool-results" if self.log_dir is not None else None
        transport = bounded_stdio_client(params, self._errlog.writer, spill_dir=spill_dir,
                                         saved_output_budget=self.saved_output_budget,
                                         on_stopped=self._stopped_by_transport, on_bad_line=self._bad_stdout_line,
                                         on_exited=self._exited, on_spawned=self._spawned)
        return Client(self._with_client_tasks(transport), read_timeout_seconds=self._request_timeout(),
                      client_info=client_info, mode=self.mode, **self._log_options())

    def _with_client_tasks(self, transport: Any) -> Any:
        """``transport`` with the server's sampling and form requests runnable as tasks
        (app/mcp/client_tasks.py): only what this connection answers at all is offered."""
        if self.requests is None:
            return transport
        # Client tasks need the SDK's types: loaded only for a server that may ask for them.
        from app.mcp.client_tasks import ClientTasks

        self.client_tasks = ClientTasks(sampling=self.requests.call_model is not None, elicitation=True,
                                        on_status=self._client_task_status)
        return self.client_tasks.wrap(transport)

    def _client_task_status(self, status: str, message: str) -> None:
        """A client-side task's status goes on the line of the tool call that caused it: the call in
        flight, when there is one alone (with several, which one asked is not on the wire)."""
        if len(self._task_reporters) == 1:
            self._task_reporters[0](status, message)

    def _request_timeout(self) -> float:
        """The SDK's bound on a request none of ours bounds itself: the handshake and the lists at
        start, whose bound is ``startup_timeout``. Tool calls, prompts and resources pass their own
        (``tool_timeout``); a short one made a server slow to answer ``initialize`` fail to start."""
        return max(self.config.tool_timeout, self.config.startup_timeout)

    def _log_options(self) -> dict[str, Any]:
        """The server's ``notifications/message`` go to its log file (info and up), never to the screen;
        what the server may ask of us (``_client_features``) rides along."""
        async def on_log(params: LoggingMessageNotificationParams) -> None:
            self.server_log_message(params)

        return {"logging_callback": on_log, "log_level": "info", **self._client_features()}

    def _client_features(self) -> dict[str, Any]:
        """The callbacks that answer the server's own requests (app/mcp/client_features.py):
        roots as the server's setting says (the workspace alone by default); forms only when the session
        can answer them."""
        # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
        import mcp_types as types

        folders = self.roots

        async def list_roots(_context: Any) -> types.ListRootsResult:
            return types.ListRootsResult.model_validate(
                {"roots": [{"uri": uri, "name": name} for uri, name in folder_roots(folders or [])]})

        # roots = false: the capability is not declared, so the server keeps to its own arguments
        features: dict[str, Any] = {"list_roots_callback": list_roots} if folders is not None else {}
        requests = self.requests
        if requests is None:
            return features

        async def elicit(_context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
            url = params.url if isinstance(params, types.ElicitRequestURLParams) else None
            schema = params.requested_schema if isinstance(params, types.ElicitRequestFormParams) else None
            async with self._waiting_for_user():
                action, content = await requests.elicit(self.name, params.message, schema, url=url)
            return types.ElicitResult(action=action, content=content if action == "accept" else None)

        features["elicitation_callback"] = elicit
        if requests.call_model is None:
            return features

        async def sample(_context: Any, params: types.CreateMessageRequestParams
                         ) -> types.CreateMessageResult | types.ErrorData:
            try:
                messages = [(message.role, *_text_of(message.content)) for message in params.messages]
                async with self._waiting_for_user():
                    reply = await requests.sample(self.name, params.system_prompt, messages, params.max_tokens,
                                                  params.tools)
            except SamplingRefused as refused:
                return types.ErrorData(code=types.INVALID_REQUEST, message=f"tidegauge refused the model call: {refused}")
            stop = {"end_turn": "endTurn", "max_tokens": "maxTokens"}.get(reply.stop_reason, reply.stop_reason)
            return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text=reply.text),
                                             model=reply.model, stop_reason=stop)

        features["sampling_callback"] = sample
        return features

    @contextlib.asynccontextmanager
    async def _waiting_for_user(self) -> AsyncIterator[None]:
        """While the server waits for the user's answer, its tool call is not idle (see _call_tool_once)."""
        self._asking_user += 1
        try:
            yield
        finally:
            self._asking_user -= 1
            self._answered_at = asyncio.get_running_loop().time()

    def _http_client(self) -> Any:
        """The HTTP client of a url server: its headers (tokens from the environment), the SDK's
        timeouts, and a hook that notes a 401 (the SDK reports it as a bare "error response")."""
        # httpx2 only for a url server: a session of stdio servers never loads it.
        import httpx2

        async def note_response(response: httpx2.Response) -> None:
            if response.status_code == 404 and response.request.method == "POST" and "mcp-session-id" in response.request.headers:
                self._undelivered += 1
            if response.status_code == 401:
                # Only the scheme's name is repeated, and only when it is one: the rest is the server's text.
                found = re.match(r"\s*([A-Za-z][A-Za-z0-9-]{0,19})(?:\s|,|$)", response.headers.get("www-authenticate", ""))
                self._unauthorized = f", {found.group(1)} expected" if found else ""
            if response.status_code == 403:
                self._more_scope = _insufficient_scope(response)
                if self._more_scope and isinstance(self.authorization, ScopeKeeper):
                    self.authorization.want_scope(self._more_scope)  # the next `mcp login` asks for it

        # Only a url server needs httpx2 and the bounds on its answers: a session of stdio servers never loads them.
        from app.mcp.http_bounds import BoundedTransport

        def note_undelivered() -> None:
            self._undelivered += 1  # no connection: the server never saw the request

        # Where an answer over the cap is saved: the stdio reader's folder.
        spill_dir = self.log_dir / "tool-results" if self.log_dir is not None else None
        # Every body bounded in memory, disk and time, whatever the server sends.
        transport = BoundedTransport(self.name, spill_dir, on_undelivered=note_undelivered,
                                     budget=self.saved_output_budget)

        return httpx2.AsyncClient(headers=resolved_headers(self.config), timeout=httpx2.Timeout(30.0, read=300.0),
                                  event_hooks={"response": [note_response]}, transport=transport,
                                  auth=self.authorization)

    def _spawned(self, pid: int) -> None:
        """The stdio transport started the server: the SDK starts it leading a session of its own
        (start_new_session), so its process group is its pid. Known from the spawn itself, before the
        handshake, so even a server that hangs or dies in it has its group ended afterwards, and
        without reading every process on the machine to find it."""
        if os.name == "posix":
            self._pgid = pid

    @staticmethod
    async def _list_tools(client: Client) -> list[RemoteTool]:
        capabilities = client.server_capabilities
        tasks = capabilities.tasks if capabilities is not None else None
        # The spec's task-augmented tools/call, which a client may send only where the server declares it.
        task_calls = (tasks is not None and tasks.requests is not None and tasks.requests.tools is not None
                      and tasks.requests.tools.call is not None)
        tools: list[RemoteTool] = []
        cursor: str | None = None
        for _ in range(100):  # a server that pages forever is a broken server
            page = await client.list_tools(cursor=cursor)
            for tool in page.tools:
                annotations = tool.annotations
                task_required = tool.execution is not None and tool.execution.task_support == "required"
                tools.append(RemoteTool(
                    name=tool.name,
                    description=tool.description or "",
                    input_schema=dict(tool.input_schema or {"type": "object"}),
                    read_only=bool(annotations is not None and annotations.read_only_hint is True),
                    task_required=task_required,
                    as_task=task_required and task_calls,
                ))
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    async def aclose(self) -> None:
        """Stop the server (whole process tree). Safe to call twice."""
        self._stop.set()
        runner = self._runner
        if runner is None or runner.done():
            return
        try:
            # The SDK bounds its own shutdown (stdin close, SIGTERM, SIGKILL): ~6 s at worst.
            await asyncio.wait_for(asyncio.shield(runner), 15)
        except asyncio.TimeoutError:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
        except asyncio.CancelledError:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
            raise

    def _lost(self, reason: str) -> None:
        """The server went away mid-session: say so once, then wind the connection down."""
        if self.failure is None and not self._stop.is_set():
            self.failure = reason
            if self.config.url is None:  # a url server is reconnected at its next call instead
                self.on_exit(self, reason)
        self._client = None
        self._dead.set()
        self._stop.set()

    def _stopped_by_transport(self, reason: str) -> None:
        """The transport ended the server (a message without end): once it is ready, the crash path
        with that reason; in the handshake, the reason its start failed."""
        if self._ready is not None and self._ready.done():
            self._lost(reason)
        else:
            self._ended_by_transport = reason

    async def _watch_process(self) -> None:
        """Notice a stdio server that died: a child it left holding the pipe would hide the EOF,
        and a call would wait for its whole timeout."""
        pid = self._pgid
        if pid is None:
            return

        while not self._stop.is_set():
            await asyncio.sleep(0.25)  # a liveness poll, four times a second, while the server runs
            try:
                gone = psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                gone = True
            except psutil.Error:
                gone = False
            if gone:
                self._lost("the server process exited")
                return

    # ---- calls ----

    async def call_tool(self, tool_name: str, args: dict[str, Any],
                        on_progress: ProgressReport | None = None,
                        on_task_status: TaskStatusReport | None = None) -> ToolOutput:
        """One tool call; a failure comes back as an error output the model can read.

        A url server that restarted is reconnected (a new handshake) once per call, and the call
        is sent again when it surely never reached the server.
        """
        if self.config.url is None:
            return await self._call_tool_once(tool_name, args, on_progress, on_task_status)
        if not self.alive:
            failure = await self._reconnect()
            if failure is not None:
                return ToolOutput(f"MCP server {self.name!r} could not be reached ({failure}); {tool_name} was not "
                                  "sent. It is tried again at the next call.", is_error=True)
        undelivered = self._undelivered
        self._unauthorized = None  # a 401 is news only when this call meets it
        self._more_scope = None
        output = await self._call_tool_once(tool_name, args, on_progress, on_task_status)
        delivered = self._undelivered == undelivered
        if self._more_scope is not None and self.on_step_up is not None:
            async with self._waiting_for_user():  # the user is asked, then consents in a browser
                logged_in = await self.on_step_up(self, self._more_scope)
            if logged_in:  # once: a server that still refuses gets its refusal said
                return await self._call_tool_once(tool_name, args, on_progress)
        if (delivered and not self._dead.is_set()) or self._more_scope is not None:
            return output  # a step-up the OAuth flow could not make (no consent in a session) ends the call
        failure = await self._reconnect()
        if failure is not None and delivered:
            return ToolOutput(f"MCP server {self.name!r} was lost during {tool_name}, which may have run; it could not "
                              f"be reconnected ({failure}) and is tried again at the next call.", is_error=True)
        if failure is not None:
            return ToolOutput(f"MCP server {self.name!r} could not be reached ({failure}); {tool_name} was not sent. "
                              "It is tried again at the next call.", is_error=True)
        if not delivered:
            return await self._call_tool_once(tool_name, args, on_progress, on_task_status)
        return ToolOutput(f"MCP server {self.name!r} was lost during {tool_name}, which may have run: it was not "
                          "sent again. The server is reconnected; its tools work again.", is_error=True)

    async def restart(self) -> None:
        """Stop the server and start it again (the /mcp view's reconnect, a login's new tokens): its
        tools listed anew. McpServerError with one line when it does not start."""
        async with self._reconnecting:
            if self.failure is None:
                self.failure = "it was restarted"
            # A call in flight ends now as "stopped during", saying why: never through the crash path,
            # which would mark as lost the connection started again below.
            self._dead.set()
            await self.aclose()
            self._reset()
            await self.start()

    async def _reconnect(self) -> str | None:
        """Start a url server's connection anew (one at a time); None when it is ready, else why not."""
        dead = self._dead
        async with self._reconnecting:
            if self.alive and self._dead is not dead:
                return None  # another call reconnected while this one waited
            await self.aclose()
            self._reset()
            try:
                await self.start()
            except McpServerError as exc:
                return hide_url_secrets(str(exc))
        self.on_reconnect(self)
        return None

    async def _call_tool_once(self, tool_name: str, args: dict[str, Any],
                              on_progress: ProgressReport | None = None,
                              on_task_status: TaskStatusReport | None = None) -> ToolOutput:
        """One attempt. A progress token goes with every call. The call is abandoned after
        ``tool_timeout`` seconds without a word from the server; each progress notification (and each
        change of a task's status) starts that wait again, up to ``PROGRESS_MAX_FACTOR`` times
        ``tool_timeout`` in all. A tool that runs only as a task is called as one (``_run_task``).
        """
        client = self._client
        if client is None or not self.alive:
            why = f" ({self.failure})" if self.failure else ""
            return ToolOutput(f"MCP server {self.name!r} is not running{why}; its tools cannot be used now.",
                              is_error=True)
        # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
        from mcp.shared.exceptions import MCPError
        from mcp_types import REQUEST_TIMEOUT

        from app.mcp.content import tool_output_from_result

        loop = asyncio.get_running_loop()
        idle = self.config.tool_timeout
        hard_max = idle * PROGRESS_MAX_FACTOR
        heard = loop.time()
        progressed = False

        async def server_progress(progress: float, total: float | None, message: str | None) -> None:
            nonlocal heard, progressed
            heard, progressed = loop.time(), True
            if on_progress is not None:
                on_progress(progress, total, sanitize_for_display(redact(message or ""))[:200])

        def timed_out(at_hard_limit: bool = False) -> ToolOutput:
            if at_hard_limit:
                return ToolOutput(f"MCP server {self.name!r}: {tool_name} timed out: still reporting progress "
                                  f"past the {hard_max:g} s limit ({PROGRESS_MAX_FACTOR} × tool_timeout); "
                                  "the call was cancelled.", is_error=True)
            if progressed:
                return ToolOutput(f"MCP server {self.name!r}: {tool_name} timed out: no progress for {idle:g} s; "
                                  "the call was cancelled.", is_error=True)
            return ToolOutput(f"MCP server {self.name!r}: {tool_name} timed out after {idle:g} s without an "
                              "answer; the call was cancelled.", is_error=True)

        last_status: tuple[str, str] | None = None

        def task_status(status: str, message: str | None) -> None:
            nonlocal heard, progressed, last_status
            said = (status, sanitize_for_display(redact(message or ""))[:200])
            if said != last_status:  # a task still at the same stage is no word from the server
                heard, progressed, last_status = loop.time(), True, said
                if on_task_status is not None:
                    on_task_status(*said)

        as_task = any(remote.name == tool_name and remote.as_task for remote in self.tools)
        request = (self._run_task(client, tool_name, args, hard_max, server_progress, task_status) if as_task else
                   client.call_tool(tool_name, args, read_timeout_seconds=hard_max, progress_callback=server_progress))
        call = asyncio.ensure_future(self._unless_dead(request))
        self._task_reporters.append(task_status)
        try:
            while not call.done():
                heard = loop.time() if self._asking_user else max(heard, self._answered_at)
                wait = heard + idle - loop.time()
                if wait <= 0:
                    call.cancel()  # the SDK sends the server a notifications/cancelled; a task, tasks/cancel
                    await asyncio.gather(call, return_exceptions=True)
                    return timed_out()
                await asyncio.wait({call}, timeout=wait)
            result = call.result()
        except asyncio.CancelledError:
            call.cancel()
            if as_task:  # its tasks/cancel goes out before the call is given up (bounded in _run_task)
                await asyncio.wait({call}, timeout=TASK_CANCEL_WAIT + 1)
            raise
        except _ServerGone:
            if self._more_scope is not None:
                return ToolOutput(f"MCP server {self.name!r}: {self._more_scope_words()}", is_error=True)
            return ToolOutput(f"MCP server {self.name!r} stopped during {tool_name} ({self.failure}); "
                              "its tools cannot be used now.", is_error=True)
        except MCPError as exc:
            # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
            from mcp_types import CONNECTION_CLOSED

            if self._more_scope is not None:
                return ToolOutput(f"MCP server {self.name!r}: {self._more_scope_words()}", is_error=True)
            if exc.code == CONNECTION_CLOSED:  # the server process is gone
                self._lost(str(exc) or "connection closed")
                return ToolOutput(f"MCP server {self.name!r} stopped during {tool_name} ({self.failure}); "
                                  "its tools cannot be used now.", is_error=True)
            if exc.code == REQUEST_TIMEOUT:  # the hard limit, reached while progress kept coming
                return timed_out(at_hard_limit=True)
            if self._unauthorized is not None:
                return ToolOutput(f"MCP server {self.name!r}: {self._explain(exc)}", is_error=True)
            return ToolOutput(f"MCP server {self.name!r} answered {tool_name} with an error: "
                              f"{hide_url_secrets(str(exc))}", is_error=True)
        except TimeoutError:
            return timed_out(at_hard_limit=True)
        except Exception as exc:
            return ToolOutput(f"MCP server {self.name!r} failed on {tool_name}: {describe_failure(exc)}",
                              is_error=True)
        finally:
            self._task_reporters.remove(task_status)
        return tool_output_from_result(result, self.name if self.serves_resources else None)

    # ---- MCP tasks (spec 2025-11-25): a tool that runs only as a task ----
    #
    # The SDK has no client side of tasks; every request goes over its session's generic
    # ``send_request``. Its result check for tools/call at 2025-11-25 knows only CallToolResult, so
    # the task's creation comes back as a ValidationError carrying the server's answer (see
    # ``_task_answer``); tasks/get, tasks/result and tasks/cancel are outside its tables and pass.

    async def _run_task(self, client: Client, tool_name: str, args: dict[str, Any], read_timeout: float,
                        progress: Any, status: Callable[[str, str | None], None]) -> Any:
        """Call ``tool_name`` as a task: create it, poll tasks/get (at the server's pollInterval, bounded)
        while it works, then take its result with tasks/result, which waits for the task's end and
        brings the questions the server queued for an ``input_required`` task (its forms are answered
        as any other); the polling goes on meanwhile, so the task's status stays on the tool's line
        and counts as a word from the server. Given up (cancelled: an interrupt, a timeout, the
        server gone) before it ended, the task is cancelled on the server with tasks/cancel."""
        # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
        import mcp_types as types

        session = client.session
        created = await self._create_task(client, tool_name, args, read_timeout, progress)
        if isinstance(created, types.CallToolResult):
            return created  # the server ran it at once, without a task
        task: Any = created.task
        self.tasks[task.task_id] = task.status
        ended = False

        def poll_wait() -> float:  # the spec's polling, at the interval the server suggests, bounded
            wait = TASK_POLL_DEFAULT if task.poll_interval is None else task.poll_interval / 1000
            return float(min(max(wait, TASK_POLL_MIN), TASK_POLL_MAX))

        try:
            status(task.status, task.status_message)
            while task.status == "working":
                await asyncio.sleep(poll_wait())
                task = await self.get_task(task.task_id, read_timeout)
                status(task.status, task.status_message)
            if task.status == "cancelled":
                ended = True
                said = f": {task.status_message}" if task.status_message else ""
                return types.CallToolResult(content=[types.TextContent(
                    type="text", text=f"The server cancelled the task{said}.")], is_error=True)
            answer = asyncio.ensure_future(session.send_request(
                types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task.task_id)),
                types.CallToolResult, request_read_timeout_seconds=read_timeout))
            try:
                while not answer.done():
                    await asyncio.wait({answer}, timeout=poll_wait())
                    if not answer.done() and task.status not in ("completed", "failed", "cancelled"):
                        task = await self.get_task(task.task_id, read_timeout)
                        status(task.status, task.status_message)
            finally:
                if not answer.done():
                    answer.cancel()
                    await asyncio.gather(answer, return_exceptions=True)
            ended = True  # answered, with the result or an error: the task is over on the server
            result = answer.result()
            self.tasks[task.task_id] = "failed" if task.status == "failed" else "completed"
            return result
        finally:
            if not ended and not self._dead.is_set():  # a server that is gone has no task left to cancel
                await asyncio.shield(self._cancel_task(client, task.task_id))

    async def _create_task(self, client: Client, tool_name: str, args: dict[str, Any], read_timeout: float,
                           progress: Any) -> Any:
        """The task-augmented tools/call: the server's CreateTaskResult (or a CallToolResult, when it ran
        the tool at once). The task is asked to be kept a minute past the longest this call may wait."""
        # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
        import mcp_types as types
        from pydantic import ValidationError

        request = types.CallToolRequest(params=types.CallToolRequestParams(
            name=tool_name, arguments=args, task=types.TaskMetadata(ttl=int((read_timeout + 60) * 1000))))
        try:
            return await client.session.send_request(request, types.CreateTaskResult,
                                                     request_read_timeout_seconds=read_timeout, progress_callback=progress)
        except ValidationError as refused:
            answer = _task_answer(refused)
            if answer is None:
                raise
            if "task" in answer:
                return types.CreateTaskResult.model_validate(answer)
            return types.CallToolResult.model_validate(answer)

    async def get_task(self, task_id: str, read_timeout: float | None = None) -> Any:
        """``tasks/get``: where a task of this connection stands (the server's Task)."""
        # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
        import mcp_types as types

        client = self._client
        if client is None:
            raise McpServerError(f"MCP server {self.name!r} is not running")
        task = await client.session.send_request(
            types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)), types.GetTaskResult,
            request_read_timeout_seconds=read_timeout or self.config.tool_timeout)
        self.tasks[task_id] = task.status
        return task

    async def _cancel_task(self, client: Client, task_id: str) -> None:
        """``tasks/cancel``, bounded; a server that cannot be told (gone, refusing) is left as it is."""
        # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
        import mcp_types as types

        try:
            async with asyncio.timeout(TASK_CANCEL_WAIT):
                task = await client.session.send_request(
                    types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id)),
                    types.CancelTaskResult, request_read_timeout_seconds=TASK_CANCEL_WAIT)
            self.tasks[task_id] = task.status
            if self._errlog is not None:
                said = sanitize_for_display(redact(task.status_message or ""))[:200]
                self._errlog.write_line(f"[tidegauge] task {task_id[:100]!r} given up and cancelled: the server says "
                                        f"{task.status}{': ' + said if said else ''}")
        except Exception as exc:  # noqa: BLE001 - the call is over either way; its log says why
            if self._errlog is not None:
                self._errlog.write_line(f"[tidegauge] tasks/cancel of task {task_id[:100]!r} failed: {describe_failure(exc)}")

    async def get_prompt(self, name: str, arguments: dict[str, str]) -> Any:
        """``prompts/get``: the server's GetPromptResult; McpServerError with one line on failure."""
        return await self._request(f"prompt {name}", lambda client: client.get_prompt(name, arguments))

    async def read_resource(self, uri: str) -> Any:
        """``resources/read``: the server's ReadResourceResult; McpServerError with one line on failure.
        Only the server reads: tidegauge never opens a URI itself, whatever its scheme."""
        return await self._request(f"resource {uri}", lambda client: client.read_resource(uri))

    async def _request(self, what: str, send: Callable[[Client], Awaitable[CallResult]]) -> CallResult:
        """One request of the user's (a prompt, a resource), bounded by ``tool_timeout``."""
        if self.config.url is not None and not self.alive:
            failure = await self._reconnect()
            if failure is not None:
                raise McpServerError(f"MCP server {self.name!r} could not be reached ({failure})")
        client = self._client
        if client is None or not self.alive:
            why = f" ({self.failure})" if self.failure else ""
            raise McpServerError(f"MCP server {self.name!r} is not running{why}")
        # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
        from mcp.shared.exceptions import MCPError

        self._more_scope = None
        try:
            async with asyncio.timeout(self.config.tool_timeout):
                return await self._unless_dead(send(client))
        except asyncio.CancelledError:
            raise
        except _ServerGone:
            raise McpServerError(f"MCP server {self.name!r} stopped while reading its {what} ({self.failure})") from None
        except TimeoutError:
            raise McpServerError(f"MCP server {self.name!r}: no answer for its {what} within "
                                 f"{self.config.tool_timeout:g} s") from None
        except MCPError as exc:
            if self._more_scope is not None:
                raise McpServerError(f"MCP server {self.name!r}: {self._more_scope_words()}") from None
            raise McpServerError(f"MCP server {self.name!r} answered with an error for its {what}: "
                                 f"{hide_url_secrets(str(exc))}") from None
        except Exception as exc:  # noqa: BLE001 - a malformed answer (a cut 30 MB one too) is one line
            raise McpServerError(f"MCP server {self.name!r} failed on its {what}: {describe_failure(exc)}") from None

    def server_log_message(self, params: LoggingMessageNotificationParams) -> None:
        """A ``notifications/message`` from the server: one line in its log file (redacted, capped)."""
        if self._errlog is None:
            return
        data = params.data if isinstance(params.data, str) else json.dumps(params.data, ensure_ascii=False,
                                                                              default=str)
        source = f" {params.logger}" if params.logger else ""
        self._errlog.write_line(f"[mcp log {params.level}{source}] {data[:MAX_LOG_MESSAGE_CHARS]}")

    async def _unless_dead(self, call: Awaitable[CallResult]) -> CallResult:
        """Await ``call`` unless the server dies first (then raise _ServerGone)."""
        task = asyncio.ensure_future(call)
        dead = asyncio.ensure_future(self._dead.wait())
        try:
            await asyncio.wait({task, dead}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            dead.cancel()
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if task.cancelled():
            raise _ServerGone()
        return task.result()


def _task_answer(refused: Exception) -> dict[str, Any] | None:
    """The server's answer to a task-augmented tools/call, out of the SDK's refusal of it: its check
    wants a CallToolResult's ``content`` and reports the whole answer as that field's input. None when
    the refusal is something else (a malformed answer stays an error)."""
    if not isinstance(refused, ValidationError):
        return None
    for error in refused.errors():
        answer = error.get("input")
        if (error.get("type") == "missing" and len(error.get("loc", ())) == 1 and isinstance(answer, dict)
                and ("task" in answer or "content" in answer)):
            return answer
    return None


def _text_of(content: Any) -> tuple[str, object]:
    """(content type, text) of one sampling message's content (a list of blocks is text only if all are)."""
    blocks = content if isinstance(content, list) else [content]
    kinds = {getattr(block, "type", "?") for block in blocks}
    if kinds != {"text"}:
        return ",".join(sorted(kinds)), None
    return "text", "".join(block.text for block in blocks)


class _ServerGone(Exception):
    pass


def describe_failure(exc: BaseException) -> str:
    """One line for whatever a server start or call raised (exception groups unwrapped)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename or exc}"
    if isinstance(exc, PermissionError):
        return f"command not executable: {exc.filename or exc}"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = hide_url_secrets(text)  # an HTTP error names the URL, and a remote server's token may be in it
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# RFC 6749's scope-token characters, space-separated: anything else in a server's scope is not said.
_SCOPE = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+(?: [\x21\x23-\x5b\x5d-\x7e]+)*")


def _insufficient_scope(response: Any) -> str | None:
    """The scope a 403 asks for when it is the step-up (``error="insufficient_scope"``), else None;
    "" when it names none or one that is not a scope (the server's text, bounded)."""
    # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
    from mcp.client.auth.utils import extract_field_from_www_auth, extract_scope_from_www_auth

    if extract_field_from_www_auth(response, "error") != "insufficient_scope":
        return None
    scope = (extract_scope_from_www_auth(response) or "").strip()
    return scope if len(scope) <= 200 and _SCOPE.fullmatch(scope) else ""


def _is_oauth_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is the OAuth flow failing (a refused registration or token request, a metadata
    mismatch); a flow that stops for the user's consent is a 401 like any other."""
    # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
    from mcp.client.auth import OAuthFlowError

    return isinstance(exc, OAuthFlowError)


def _connection_closed(exc: BaseException) -> bool:
    """Whether ``exc`` (an exception group too) says the server closed the connection."""
    # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED

    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def _end_process_group(pgid: int, grace: float = 2.0) -> None:
    """SIGTERM whatever is left of the server's process group, SIGKILL it after ``grace`` seconds."""
    if not _group_alive(pgid):
        return
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while _group_alive(pgid) and loop.time() < deadline:  # noqa: ASYNC110 - no event tells a group's exit
        await asyncio.sleep(0.02)  # polling the group's exit, bounded by the grace period
    if _group_alive(pgid):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
