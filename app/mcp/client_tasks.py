"""Client-side MCP tasks (spec 2025-11-25): a server's sampling or form request run as a task.

A server that sees ``capabilities.tasks.requests`` may send ``sampling/createMessage`` or
``elicitation/create`` with ``params.task``: the client answers at once with a CreateTaskResult,
runs the request in the background, and answers the server's ``tasks/get`` (status),
``tasks/result`` (the request's own answer, once the task has ended) and ``tasks/cancel``.

The SDK has no client side of tasks (its request table at 2025-11-25 knows none of these methods
from a server, nor a task-augmented answer), so this sits between the transport and the SDK's
session, over the SDK's public transport interface (a pair of SessionMessage streams):

- the ``initialize`` request going out gets the ``tasks`` capability, only for what this
  connection can do (sampling only where the session makes model calls for servers);
- a task-augmented request coming in is answered with the task, and passed on to the SDK
  without ``task`` under an id of ours, so it runs through the same callbacks, approval and
  bounds as any other (app/mcp/client_features.py); the SDK's answer to that id is kept as the
  task's result instead of going out;
- ``tasks/get``, ``tasks/result`` and ``tasks/cancel`` are answered here; a cancel reaches the
  SDK as ``notifications/cancelled`` for our id.

A server is someone else's code: the table is one connection's (another server's task ids mean
nothing here), ids are random, at most ``MAX_CLIENT_TASKS`` are kept and none past its ttl
(``MAX_TASK_TTL`` at most, whatever the server asks): a task still working at its ttl is cancelled.
"""

from __future__ import annotations

import dataclasses
import datetime
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp_types import INVALID_PARAMS, INVALID_REQUEST, ErrorData, JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

from app.kernel.redact import redact
from app.kernel.sanitize import sanitize_for_display

# Tasks kept per connection (working or ended, until their ttl): a server cannot grow the table.
MAX_CLIENT_TASKS = 16
# The longest a task is kept, whatever ttl the server asks (ms); and the shortest.
MAX_TASK_TTL = 15 * 60 * 1000
MIN_TASK_TTL = 1_000
# tasks/result requests waiting for their task's end at once: more are refused, so a server
# cannot pile up waiters by asking again and again.
MAX_RESULT_WAITERS = 4 * MAX_CLIENT_TASKS
# The poll interval the client suggests (ms).
TASK_POLL_INTERVAL = 1_000
# The spec's key for the task a message belongs to, in ``_meta``.
RELATED_TASK = "io.modelcontextprotocol/related-task"

# The ids a task's request runs under in the SDK: answers to them never go to the server.
INNER_ID_PREFIX = "tidegauge-task-"

TERMINAL = ("completed", "failed", "cancelled")
# How a task is reported upward (the tool's line): (status, message), message cleaned.
StatusReport = Callable[[str, str], None]


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class ClientTask:
    task_id: str
    method: str
    ttl: int  # ms
    started: float  # anyio clock, for the ttl
    request_id: str  # the id the SDK answers under
    status: str = "working"
    status_message: str = ""
    created_at: str = field(default_factory=_now)
    updated_at: str = field(default_factory=_now)
    # The SDK's answer once ended: {"result": ...} or {"error": ...}.
    answer: dict[str, Any] | None = None
    ended: anyio.Event = field(default_factory=anyio.Event)

    def wire(self) -> dict[str, Any]:
        """The spec's Task."""
        task: dict[str, Any] = {"taskId": self.task_id, "status": self.status, "createdAt": self.created_at,
                                "lastUpdatedAt": self.updated_at, "ttl": self.ttl, "pollInterval": TASK_POLL_INTERVAL}
        if self.status_message:
            task["statusMessage"] = self.status_message
        return task


class TaskRefused(Exception):
    """A task request answered with a JSON-RPC error: (code, message)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class ClientTasks:
    """One connection's client-side tasks, and the stream wrapping that answers for them."""

    def __init__(self, *, sampling: bool, elicitation: bool, on_status: StatusReport | None = None) -> None:
        self.methods = {method for method, on in (("sampling/createMessage", sampling),
                                                  ("elicitation/create", elicitation)) if on}
        self.on_status = on_status or (lambda _status, _message: None)
        self.tasks: dict[str, ClientTask] = {}
        self._by_request: dict[str, ClientTask] = {}
        self._upstream: Any = None  # the transport's write stream
        self._to_session: Any = None  # where cancellations for the SDK go
        self._waiting = 0  # tasks/result requests waiting for their task's end

    def capability(self) -> dict[str, Any]:
        """The ``tasks`` client capability: cancel, and the requests this connection can run as tasks."""
        requests: dict[str, Any] = {}
        if "sampling/createMessage" in self.methods:
            requests["sampling"] = {"createMessage": {}}
        if "elicitation/create" in self.methods:
            requests["elicitation"] = {"create": {}}
        return {"cancel": {}, "requests": requests}

    # ---- the table ----

    def create(self, method: str, params: dict[str, Any]) -> ClientTask:
        """A new task for a request of ``method``; TaskRefused when the table is full of working tasks."""
        self.expire()
        if len(self.tasks) >= MAX_CLIENT_TASKS:
            ended = [task for task in self.tasks.values() if task.status in TERMINAL]
            if not ended:
                raise TaskRefused(INVALID_REQUEST, f"tidegauge runs at most {MAX_CLIENT_TASKS} tasks for a server at once")
            self._forget(min(ended, key=lambda task: task.started))
        asked = params.get("task") if isinstance(params.get("task"), dict) else {}
        ttl = asked.get("ttl") if isinstance(asked, dict) else None
        ttl = MAX_TASK_TTL if not isinstance(ttl, int) or isinstance(ttl, bool) else min(max(ttl, MIN_TASK_TTL), MAX_TASK_TTL)
        doing = "waiting for the user's answer to the form" if method == "elicitation/create" else "making the model call"
        task = ClientTask(task_id=secrets.token_urlsafe(16), method=method, ttl=ttl, started=anyio.current_time(),
                          request_id=f"{INNER_ID_PREFIX}{secrets.token_hex(16)}", status_message=doing)
        self.tasks[task.task_id] = task
        self._by_request[task.request_id] = task
        self._report(task)
        return task

    def find(self, params: Any) -> ClientTask:
        """The task a tasks/* request names; TaskRefused (invalid params) when this connection has none such."""
        self.expire()
        task_id = params.get("taskId") if isinstance(params, dict) else None
        task = self.tasks.get(task_id) if isinstance(task_id, str) else None
        if task is None:
            raise TaskRefused(INVALID_PARAMS, "no such task")
        return task

    def expire(self) -> None:
        """Forget tasks past their ttl; one still working is cancelled first."""
        now = anyio.current_time()
        for task in [task for task in self.tasks.values() if now - task.started > task.ttl / 1000]:
            if task.status not in TERMINAL:
                self._end(task, "cancelled", "its ttl ran out")
                self._cancel_in_session(task)
            self._forget(task)

    def _forget(self, task: ClientTask) -> None:
        self.tasks.pop(task.task_id, None)
        self._by_request.pop(task.request_id, None)

    def _end(self, task: ClientTask, status: str, message: str, answer: dict[str, Any] | None = None) -> None:
        task.status, task.status_message, task.updated_at = status, message, _now()
        task.answer = answer
        task.ended.set()
        self._report(task)

    def _report(self, task: ClientTask) -> None:
        self.on_status(task.status, sanitize_for_display(redact(task.status_message))[:200])

    def settled(self, message: JSONRPCResponse | JSONRPCError) -> bool:
        """The SDK's answer to a task's request: kept as the task's result (True), not sent."""
        if not (isinstance(message.id, str) and message.id.startswith(INNER_ID_PREFIX)):
            return False
        task = self._by_request.get(message.id)
        if task is None:  # a task forgotten (its ttl ran out): the server never knew this id
            return True
        if task.status in TERMINAL:  # cancelled already: the late answer is dropped
            return True
        if isinstance(message, JSONRPCResponse):
            self._end(task, "completed", "", {"result": message.result})
        else:
            self._end(task, "failed", message.error.message[:500],
                      {"error": message.error.model_dump(by_alias=True, mode="json", exclude_none=True)})
        return True

    def _cancel_in_session(self, task: ClientTask) -> None:
        if self._to_session is None:
            return
        notice = JSONRPCNotification(jsonrpc="2.0", method="notifications/cancelled",
                                     params={"requestId": task.request_id, "reason": "task cancelled"})
        try:
            self._to_session.send_nowait(SessionMessage(message=notice))
        except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the session is gone or flooded: its late answer is dropped all the same (see settled)

    # ---- the requests ----

    async def answer_task_request(self, request: JSONRPCRequest) -> dict[str, Any]:
        """The result of ``tasks/get``, ``tasks/result`` or ``tasks/cancel``; TaskRefused otherwise."""
        task = self.find(request.params or {})
        if request.method == "tasks/get":
            return task.wire()
        if request.method == "tasks/cancel":
            if task.status in TERMINAL:
                raise TaskRefused(INVALID_PARAMS, f"the task has ended ({task.status}) and cannot be cancelled")
            self._end(task, "cancelled", "cancelled by the server")
            self._cancel_in_session(task)
            return task.wire()
        # tasks/result: waits for the end (bounded by the task's ttl), then the request's own answer.
        left = task.ttl / 1000 - (anyio.current_time() - task.started)
        with anyio.move_on_after(max(left, 0)):
            await task.ended.wait()
        if task.status not in TERMINAL:
            self.expire()
        if task.answer is None:
            raise TaskRefused(INVALID_REQUEST, f"the task was {task.status}: {task.status_message}")
        if "error" in task.answer:
            raise TaskRefused(int(task.answer["error"].get("code", INVALID_REQUEST)), str(task.answer["error"].get("message", "")))
        result = dict(task.answer["result"])
        result["_meta"] = {**(result.get("_meta") or {}), RELATED_TASK: {"taskId": task.task_id}}
        return result

    # ---- the streams ----

    @asynccontextmanager
    async def wrap(self, transport: Any) -> AsyncIterator[tuple[Any, Any]]:
        """``transport`` (an SDK transport: yields its read and write streams), with the tasks answered here."""
        async with transport as (read_stream, write_stream), anyio.create_task_group() as group:
            to_session, from_transport = anyio.create_memory_object_stream[Any](64)
            self._upstream, self._to_session = write_stream, to_session
            outgoing = _Outgoing(self, write_stream)
            group.start_soon(self._pump, read_stream, to_session, group)
            try:
                yield from_transport, outgoing
            finally:
                group.cancel_scope.cancel()

    async def _pump(self, read_stream: Any, to_session: Any, group: Any) -> None:
        """The transport's messages to the SDK, but for the tasks: answered here."""
        async with to_session:
            async for item in read_stream:
                message = item.message if isinstance(item, SessionMessage) else None
                if isinstance(message, JSONRPCRequest) and message.method in ("tasks/get", "tasks/cancel"):
                    await self._answer(message)
                    continue
                if isinstance(message, JSONRPCRequest) and message.method == "tasks/result":
                    if self._waiting >= MAX_RESULT_WAITERS:
                        await self._send_error(message, TaskRefused(
                            INVALID_REQUEST, f"tidegauge keeps at most {MAX_RESULT_WAITERS} tasks/result requests waiting"))
                    else:
                        self._waiting += 1
                        group.start_soon(self._answer, message)
                    continue
                params = message.params if isinstance(message, JSONRPCRequest) else None
                if isinstance(message, JSONRPCRequest) and message.method in self.methods and isinstance(params, dict) \
                        and "task" in params:
                    try:
                        task = self.create(message.method, params)
                    except TaskRefused as refused:
                        await self._send_error(message, refused)
                        continue
                    await self._send(message, {"task": task.wire()})
                    inner = JSONRPCRequest(jsonrpc="2.0", id=task.request_id, method=message.method,
                                           params={key: value for key, value in params.items() if key != "task"})
                    # Without the transport's hook for an unanswered request: the server's request was
                    # answered (with the task), so a cancelled task must not end it a second time.
                    metadata = item.metadata
                    if isinstance(metadata, ServerMessageMetadata):
                        metadata = dataclasses.replace(metadata, on_request_unanswered=None)
                    item = SessionMessage(message=inner, metadata=metadata)
                await to_session.send(item)

    async def _answer(self, request: JSONRPCRequest) -> None:
        try:
            result = await self.answer_task_request(request)
        except TaskRefused as refused:
            await self._send_error(request, refused)
            return
        finally:
            if request.method == "tasks/result":
                self._waiting -= 1
        await self._send(request, result)

    async def _send(self, request: JSONRPCRequest, result: dict[str, Any]) -> None:
        await self._upstream.send(SessionMessage(message=JSONRPCResponse(jsonrpc="2.0", id=request.id, result=result)))

    async def _send_error(self, request: JSONRPCRequest, refused: TaskRefused) -> None:
        error = ErrorData(code=refused.code, message=str(refused))
        await self._upstream.send(SessionMessage(message=JSONRPCError(jsonrpc="2.0", id=request.id, error=error)))


class _Outgoing:
    """The SDK's write stream: ``initialize`` gets the tasks capability; answers to a task's request stay here."""

    def __init__(self, tasks: ClientTasks, upstream: Any) -> None:
        self._tasks, self._upstream = tasks, upstream

    async def send(self, item: Any, /) -> None:
        message = item.message if isinstance(item, SessionMessage) else None
        if isinstance(message, (JSONRPCResponse, JSONRPCError)) and self._tasks.settled(message):
            return
        if isinstance(message, JSONRPCRequest) and message.method == "initialize" and isinstance(message.params, dict):
            capabilities = dict(message.params.get("capabilities") or {})
            capabilities["tasks"] = self._tasks.capability()
            message = message.model_copy(update={"params": {**message.params, "capabilities": capabilities}})
            item = SessionMessage(message=message, metadata=item.metadata)
        await self._upstream.send(item)

    async def aclose(self) -> None:
        await self._upstream.aclose()

    async def __aenter__(self) -> _Outgoing:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()
