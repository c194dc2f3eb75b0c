"""A real MCP server (the SDK's MCPServer) over stdio that asks the client things back.

    python tests/mcp_servers/client_features_server.py

Each question goes the way the connection allows: a server-to-client request on a 2025
connection, an ``InputRequiredResult`` (the 2026-07-28 multi-round-trip flow) on a modern one.

- ``roots()``: asks the client for its roots, answers them as JSON (``{"roots": [uri, ...]}``).
- ``ask(message, schema)``: an elicitation form with ``schema`` (a JSON text), answers the
  client's reply as JSON (``{"action": ..., "content": ...}``).
- ``sample(prompt, max_tokens, system)``: a sampling request, answers the client's reply as JSON
  (``{"model": ..., "text": ...}``) or the client's refusal (``{"error": ...}``).
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError

warnings.simplefilter("ignore")  # roots and sampling are deprecated at 2026-07-28; still spoken

server = MCPServer("features")
# Declared read-only, so a headless run calls them without --yes: what is tested is the question.
READS = types.ToolAnnotations(read_only_hint=True)


async def ask_client(ctx: Context, request: Any, legacy: Any) -> Any:
    """The client's answer to ``request``, or the InputRequiredResult that asks for it."""
    if ctx.input_responses and "q" in ctx.input_responses:
        return ctx.input_responses["q"]
    try:
        return await legacy()
    except MCPError as error:
        if "back-channel" not in str(error):
            raise
        return types.InputRequiredResult(input_requests={"q": request})


def field(answer: Any, name: str) -> Any:
    return answer.get(name) if isinstance(answer, dict) else getattr(answer, name)


@server.tool(structured_output=False, annotations=READS)
async def roots(ctx: Context) -> Any:
    session = ctx.request_context.session
    answer = await ask_client(ctx, types.ListRootsRequest(), session.list_roots)
    if isinstance(answer, types.InputRequiredResult):
        return answer
    return json.dumps({"roots": [str(field(root, "uri")) for root in field(answer, "roots")]})


@server.tool(structured_output=False, annotations=READS)
async def ask(message: str, schema: str, ctx: Context) -> Any:
    session = ctx.request_context.session
    params = types.ElicitRequestFormParams(message=message, requested_schema=json.loads(schema))
    answer = await ask_client(ctx, types.ElicitRequest(params=params),
                              lambda: session.elicit_form(message, json.loads(schema), related_request_id=ctx.request_id))
    if isinstance(answer, types.InputRequiredResult):
        return answer
    return json.dumps({"action": field(answer, "action"), "content": field(answer, "content")})


@server.tool(structured_output=False, annotations=READS)
async def sample(prompt: str, max_tokens: int, ctx: Context, system: str = "") -> Any:
    session = ctx.request_context.session
    messages = [types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))]
    params = types.CreateMessageRequestParams(messages=messages, max_tokens=max_tokens, system_prompt=system or None,
                                              include_context="allServers")
    try:
        answer = await ask_client(ctx, types.CreateMessageRequest(params=params), lambda: session.create_message(
            messages, max_tokens=max_tokens, system_prompt=system or None, include_context="allServers",
            related_request_id=ctx.request_id))
    except MCPError as error:
        return json.dumps({"error": str(error)})
    if isinstance(answer, types.InputRequiredResult):
        return answer
    content = field(answer, "content")
    text = field(content, "text") if field(content, "type") == "text" else repr(content)
    return json.dumps({"model": field(answer, "model"), "text": text})


if __name__ == "__main__":
    server.run("stdio")
