"""Client-side MCP tasks (spec 2025-11-25): a server's model call or form, sent with ``params.task``,
runs as a task on tidegauge's side, which answers the server's tasks/get, tasks/result and tasks/cancel.

With the reference server from npm (``@modelcontextprotocol/server-everything``: its
``trigger-sampling-request-async`` and ``trigger-elicitation-request-async`` exist only for a client
that declares the capability), and on the wire against a server that does what a hostile one may:
name tasks that are not its own, ask for more tasks than the table keeps, or a ttl of years.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import anyio
import pytest
from fake_llm_server import openai_text, openai_tool_calls
from mcp.shared.message import SessionMessage
from mcp_types import ErrorData, JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse
from test_mcp_content import npm_servers, results_by_id, server_table, tidegauge  # noqa: F401 - npm_servers: the fixture

from app.kernel.events import ElicitationRequestEvent, Event
from app.mcp.client import McpConnection
from app.mcp.client_features import ClientRequests
from app.mcp.client_tasks import MAX_CLIENT_TASKS, MAX_RESULT_WAITERS, MAX_TASK_TTL, MIN_TASK_TTL, ClientTasks
from app.mcp.settings import McpServerConfig

SAMPLING_ASYNC = "trigger-sampling-request-async"
ELICITATION_ASYNC = "trigger-elicitation-request-async"


# ---- with server-everything ----

def test_an_async_sampling_tool_completes_with_the_sampled_text_its_task_status_on_the_tools_line(
        npm_servers, fake_llm, tmp_path):  # noqa: F811
    fake_llm.enqueue(openai_tool_calls([(f"every__{SAMPLING_ASYNC}", {"prompt": "when is high water?"}, "call_async")]),
                     openai_text("High water at 12:04."),  # the server's model call, run as our task
                     openai_text("Done."))
    tables = server_table("every", str(npm_servers / "mcp-server-everything"), ["stdio"])

    code, events, stderr = tidegauge(tmp_path, fake_llm, "openai", tables, "ask the server")

    assert code == 0, stderr
    offered_names = {t["function"]["name"] for t in fake_llm.requests[0].json["tools"]}
    assert {f"every__{SAMPLING_ASYNC}", f"every__{ELICITATION_ASYNC}"} <= offered_names
    sampled = fake_llm.requests[1].json
    assert sampled["messages"][-1] == {"role": "user",
                                       "content": f"Resource {SAMPLING_ASYNC} context: when is high water?"}
    result = results_by_id(events)["call_async"]
    assert not result["is_error"], result["content"]
    assert result["content"].startswith("[COMPLETED] Async sampling completed!")
    assert '"text": "High water at 12:04."' in result["content"]  # what tasks/result gave the server
    statuses = [e["task_status"] for e in events if e["type"] == "tool_progress" and e["id"] == "call_async"]
    assert statuses == ["working", "completed"]
    assert [e["status"] for e in events if e["type"] == "mcp_sampling"] == ["answered"]


def test_an_async_form_completes_with_the_users_answer(npm_servers, tmp_path):  # noqa: F811
    asked: list[ElicitationRequestEvent] = []

    def surface(event: Event) -> None:
        if isinstance(event, ElicitationRequestEvent):
            asked.append(event)
            values: dict[str, object] = {"name": "Ada Lovelace", "favoriteColor": "Blue", "agreeToTerms": True}
            asyncio.get_running_loop().call_soon(lambda: requests.answer(event.request_id, "accept", values))

    requests = ClientRequests(emit=surface, shows_forms=True)  # no model calls: sampling is not offered
    reports: list[tuple[str, str]] = []

    async def run() -> tuple[list[str], Any]:
        config = McpServerConfig(command=str(npm_servers / "mcp-server-everything"), args=["stdio"],
                                 startup_timeout=120)
        connection = McpConnection("every", config, tmp_path, tmp_path / "session", requests=requests)
        await connection.start()
        try:
            names = [tool.name for tool in connection.tools]
            return names, await connection.call_tool(ELICITATION_ASYNC, {},
                                                     on_task_status=lambda *report: reports.append(report))
        finally:
            await connection.aclose()

    names, output = asyncio.run(run())

    assert ELICITATION_ASYNC in names and SAMPLING_ASYNC not in names
    assert len(asked) == 1 and asked[0].server == "every"
    assert not output.is_error, output.text
    assert output.text.startswith("[COMPLETED] User provided the requested information!")
    assert "- Name: Ada Lovelace" in output.text and "- Favorite Color: Blue" in output.text
    assert reports == [("working", "waiting for the user's answer to the form"), ("completed", "")]


# ---- on the wire, against a hostile server ----

class Wire:
    """A transport whose far end is the test (the server), and the SDK's side read and written by hand."""

    def __init__(self, tasks: ClientTasks) -> None:
        self.tasks = tasks
        self.to_client, self._client_reads = anyio.create_memory_object_stream[Any](100)
        self._client_writes, self.from_client = anyio.create_memory_object_stream[Any](100)
        self.session_read: Any = None
        self.session_write: Any = None
        self._next = 0

    @asynccontextmanager
    async def transport(self) -> AsyncIterator[tuple[Any, Any]]:
        yield self._client_reads, self._client_writes

    async def request(self, method: str, params: dict[str, Any]) -> JSONRPCRequest:
        self._next += 1
        request = JSONRPCRequest(jsonrpc="2.0", id=self._next, method=method, params=params)
        await self.to_client.send(SessionMessage(message=request))
        return request

    async def answer(self, method: str, params: dict[str, Any]) -> JSONRPCResponse | JSONRPCError:
        """What the client sends back to the server for one request."""
        request = await self.request(method, params)
        with anyio.fail_after(10):
            item = await self.from_client.receive()
        assert item.message.id == request.id
        return item.message

    async def reaches_session(self) -> Any:
        with anyio.fail_after(10):
            return (await self.session_read.receive()).message


@asynccontextmanager
async def wire(sampling: bool = True) -> AsyncIterator[Wire]:
    line = Wire(ClientTasks(sampling=sampling, elicitation=True))
    async with line.tasks.wrap(line.transport()) as (session_read, session_write):
        line.session_read, line.session_write = session_read, session_write
        yield line


def sampling_params(ttl: int = 60_000) -> dict[str, Any]:
    return {"task": {"ttl": ttl}, "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
            "maxTokens": 10}


async def test_a_task_request_is_answered_with_a_task_and_run_through_the_sdk_under_an_id_of_ours() -> None:
    async with wire() as line:
        created = await line.answer("sampling/createMessage", sampling_params(ttl=10**12))
        assert isinstance(created, JSONRPCResponse)
        task = created.result["task"]
        assert task["status"] == "working" and task["ttl"] == MAX_TASK_TTL  # not the years asked
        inner = await line.reaches_session()
        assert inner.method == "sampling/createMessage" and "task" not in inner.params and inner.id != 1
        # The SDK's answer becomes the task's result; it does not go to the server as an answer of its own.
        reply = {"role": "assistant", "content": {"type": "text", "text": "hello"}, "model": "m"}
        await line.session_write.send(SessionMessage(message=JSONRPCResponse(jsonrpc="2.0", id=inner.id, result=reply)))
        result = await line.answer("tasks/result", {"taskId": task["taskId"]})
        assert isinstance(result, JSONRPCResponse) and result.result["content"]["text"] == "hello"
        assert result.result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task["taskId"]}
        got = await line.answer("tasks/get", {"taskId": task["taskId"]})
        assert isinstance(got, JSONRPCResponse) and got.result["status"] == "completed"
        assert line.from_client.statistics().current_buffer_used == 0  # nothing else went out


async def test_a_task_id_that_is_not_this_connections_is_unknown() -> None:
    async with wire() as other, wire() as line:
        created = await other.answer("sampling/createMessage", sampling_params())
        assert isinstance(created, JSONRPCResponse)
        theirs = created.result["task"]["taskId"]
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            for task_id in (theirs, "0", 7):
                refused = await line.answer(method, {"taskId": task_id})
                assert isinstance(refused, JSONRPCError), (method, task_id)
                assert refused.error.code == -32602 and refused.error.message == "no such task"
        assert (await other.answer("tasks/get", {"taskId": theirs})).result["status"] == "working"


async def test_a_server_cannot_grow_the_task_table_past_its_bound() -> None:
    async with wire() as line:
        for _ in range(MAX_CLIENT_TASKS):
            assert isinstance(await line.answer("elicitation/create", {"task": {}, "message": "?",
                                                                       "requestedSchema": {"type": "object"}}),
                              JSONRPCResponse)
        refused = await line.answer("sampling/createMessage", sampling_params())
        assert isinstance(refused, JSONRPCError)
        assert refused.error.message == f"tidegauge runs at most {MAX_CLIENT_TASKS} tasks for a server at once"
        assert len(line.tasks.tasks) == MAX_CLIENT_TASKS
        # A finished task makes room (the oldest finished one is forgotten).
        first = await line.reaches_session()
        await line.session_write.send(SessionMessage(message=JSONRPCResponse(
            jsonrpc="2.0", id=first.id, result={"action": "decline"})))
        assert isinstance(await line.answer("sampling/createMessage", sampling_params()), JSONRPCResponse)
        assert len(line.tasks.tasks) == MAX_CLIENT_TASKS


async def test_a_cancelled_task_stops_in_the_sdk_and_its_late_answer_stays_here() -> None:
    async with wire() as line:
        created = await line.answer("sampling/createMessage", sampling_params())
        task_id = created.result["task"]["taskId"]
        inner = await line.reaches_session()
        cancelled = await line.answer("tasks/cancel", {"taskId": task_id})
        assert isinstance(cancelled, JSONRPCResponse) and cancelled.result["status"] == "cancelled"
        notice = await line.reaches_session()
        assert isinstance(notice, JSONRPCNotification) and notice.method == "notifications/cancelled"
        assert notice.params == {"requestId": inner.id, "reason": "task cancelled"}
        await line.session_write.send(SessionMessage(message=JSONRPCResponse(jsonrpc="2.0", id=inner.id, result={})))
        again = await line.answer("tasks/cancel", {"taskId": task_id})
        assert isinstance(again, JSONRPCError) and "has ended (cancelled)" in again.error.message
        result = await line.answer("tasks/result", {"taskId": task_id})
        assert isinstance(result, JSONRPCError) and "cancelled" in result.error.message


@pytest.mark.parametrize("sampling", [True, False])
async def test_initialize_declares_only_the_task_requests_the_connection_answers(sampling: bool) -> None:
    async with wire(sampling=sampling) as line:
        initialize = JSONRPCRequest(jsonrpc="2.0", id=0, method="initialize",
                                    params={"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}})
        await line.session_write.send(SessionMessage(message=initialize))
        sent = (await line.from_client.receive()).message
        capabilities = sent.params["capabilities"]
        assert capabilities["elicitation"] == {}
        requests: dict[str, Any] = {"elicitation": {"create": {}}} | ({"sampling": {"createMessage": {}}} if sampling else {})
        assert capabilities["tasks"] == {"cancel": {}, "requests": requests}
        if not sampling:  # a task-augmented model call is not ours to run: the SDK answers it as it would
            request = await line.request("sampling/createMessage", sampling_params())
            passed = await line.reaches_session()
            assert passed.id == request.id and passed.params == request.params
        assert json.dumps(capabilities)  # what goes out is plain JSON


async def test_tasks_result_waits_for_the_end_and_a_flood_of_waiters_is_refused() -> None:
    async with wire() as line:
        created = await line.answer("sampling/createMessage", sampling_params())
        task_id = created.result["task"]["taskId"]
        inner = await line.reaches_session()
        waiting = [await line.request("tasks/result", {"taskId": task_id}) for _ in range(MAX_RESULT_WAITERS)]
        refused = await line.answer("tasks/result", {"taskId": task_id})
        assert isinstance(refused, JSONRPCError) and f"at most {MAX_RESULT_WAITERS}" in refused.error.message
        # Still working: tasks/get is answered while the waiters wait.
        assert (await line.answer("tasks/get", {"taskId": task_id})).result["status"] == "working"
        await line.session_write.send(SessionMessage(message=JSONRPCError(
            jsonrpc="2.0", id=inner.id, error=ErrorData(code=-32600, message="tidegauge refused the model call: you said no"))))
        with anyio.fail_after(10):
            answers = [(await line.from_client.receive()).message for _ in waiting]
        assert {answer.id for answer in answers} == {request.id for request in waiting}
        assert all(isinstance(answer, JSONRPCError) and answer.error.message.endswith("you said no") for answer in answers)
        got = await line.answer("tasks/get", {"taskId": task_id})
        assert got.result["status"] == "failed"


async def test_a_task_past_its_ttl_is_cancelled_and_forgotten() -> None:
    async with wire() as line:
        created = await line.answer("elicitation/create", {"task": {"ttl": 1}, "message": "?",
                                                           "requestedSchema": {"type": "object"}})
        task = created.result["task"]
        assert task["ttl"] == MIN_TASK_TTL  # a server's 1 ms is raised to the least tidegauge keeps
        inner = await line.reaches_session()
        line.tasks.tasks[task["taskId"]].started -= MIN_TASK_TTL / 1000 + 1  # as if the ttl had passed
        gone = await line.answer("tasks/get", {"taskId": task["taskId"]})
        assert isinstance(gone, JSONRPCError) and gone.error.message == "no such task"
        notice = await line.reaches_session()
        assert notice.method == "notifications/cancelled" and notice.params["requestId"] == inner.id
        assert line.tasks.tasks == {}
        # The SDK's late answer to the forgotten task's request is not sent to a server that never knew its id.
        await line.session_write.send(SessionMessage(message=JSONRPCResponse(jsonrpc="2.0", id=inner.id, result={})))
        assert isinstance(await line.answer("tasks/get", {"taskId": task["taskId"]}), JSONRPCError)
