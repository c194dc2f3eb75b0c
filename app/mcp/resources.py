"""MCP resources: ``@SERVER:URI`` in a prompt attaches one; ``read_resource`` reads one for the model.

Both go through ``resources/read`` on the named server and through the tool registry (the
``read_resource`` tool), so a resource is bounded exactly like a tool result: sanitized,
secrets redacted, cut head+tail with the whole text saved under tool-results/. Only what the
server returns is read: tidegauge never opens the URI itself, so ``@fs:file:///etc/shadow``
is the server's answer (its own access rules), never a local read of ours. Text contents
only: a binary (blob) resource is refused in one line.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from app.context.compaction import defuse_frame_lookalikes
from app.kernel.messages import TextBlock, ToolSpec
from app.mcp.client import McpConnection, McpServerError
from app.mcp.content import cut_at_transport
from app.tools.base import ToolContext, ToolOutput

READ_RESOURCE = "read_resource"
# ``@name:uri`` at the start of the prompt or after whitespace (an e-mail address is not one).
_ATTACHMENT = re.compile(r"(?<!\S)@([A-Za-z0-9_-]+):(\S+)")
_TRAILING_PUNCTUATION = ".,;:!?)]}'\""
MAX_ATTACHMENTS = 10
MAX_URI_CHARS = 2_048


class AttachmentError(ValueError):
    """A prompt whose attachments are not read; the message says which and why, in one line."""


def attachments(text: str, servers: set[str]) -> list[tuple[str, str]]:
    """(server, uri) of every ``@SERVER:URI`` in the first line of ``text`` naming one of ``servers``,
    in order, each once. Only the first line: what follows it is piped text (``git diff | tidegauge
    -p "review"``), data someone else may have written, and it never makes a server read anything."""
    found: list[tuple[str, str]] = []
    for match in _ATTACHMENT.finditer(text.lstrip().split("\n", 1)[0]):
        server, uri = match.group(1), match.group(2).rstrip(_TRAILING_PUNCTUATION)
        if server in servers and uri and (server, uri) not in found:
            found.append((server, uri))
    if len(found) > MAX_ATTACHMENTS:
        raise AttachmentError(f"{len(found)} resources attached; at most {MAX_ATTACHMENTS} per message")
    for _server, uri in found:
        if len(uri) > MAX_URI_CHARS:
            raise AttachmentError(f"a resource URI of {len(uri):,} characters; at most {MAX_URI_CHARS:,}")
    return found


def resource_output(server: str, uri: str, result: Any) -> ToolOutput:
    """What a ``ReadResourceResult`` gives: its text contents under a header naming each URI; an
    error output for a binary (blob) content or none at all."""
    # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
    from mcp_types import BlobResourceContents, TextResourceContents

    parts: list[str] = []
    for content in result.contents or []:
        mime = content.mime_type or "no type given"
        if isinstance(content, BlobResourceContents):
            size = len(content.blob) * 3 // 4
            return ToolOutput(f"MCP server {server}: resource {uri} is binary ({mime}, {size:,} bytes): "
                              "only text resources are read", is_error=True)
        if isinstance(content, TextResourceContents):
            parts.append(f"[resource {content.uri} ({mime}) from MCP server {server}]\n{content.text}")
    if not parts:
        return ToolOutput(f"MCP server {server}: resource {uri} has no contents", is_error=True)
    output = ToolOutput("\n\n".join(parts))
    cut = cut_at_transport(result)
    if cut is not None:  # over the transport's cap: its start, and the whole answer on disk
        output.original_chars, output.full_output_path = cut
    return output


def attachment_block(server: str, uri: str, text: str) -> TextBlock:
    """The block of the user's turn holding an attached resource: the server's text, said to be so."""
    header = (f"[MCP resource {uri} from server {server}, attached by the user with @{server}:{uri}: the text "
              "below is the server's, not typed by the user]")
    return TextBlock(text=f"{header}\n{defuse_frame_lookalikes(text)}", from_mcp=f"{server}:resource {uri}")


class ReadResourceTool:
    """``read_resource(server, uri)``: a resource of an MCP server (a ``resource_link`` a tool
    returned, one the user named). Read-only: the server reads, tidegauge opens nothing."""

    mutating = False

    def __init__(self, connection_of: Callable[[str], McpConnection | None], servers: Callable[[], list[str]]) -> None:
        self._connection_of = connection_of
        self._servers = servers
        self.spec = ToolSpec(
            name=READ_RESOURCE,
            description=("Read a resource of an MCP server by its URI (for example one a tool returned as a "
                         "resource link). Text resources only; long ones are cut like any tool result, the whole "
                         "text saved. Servers with resources: " + (", ".join(servers()) or "none") + "."),
            input_schema={"type": "object", "properties": {
                "server": {"type": "string", "description": "the MCP server's name, as in its tools' prefix"},
                "uri": {"type": "string", "description": "the resource's URI, exactly as given"}},
                "required": ["server", "uri"], "additionalProperties": False})

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        server, uri = str(args.get("server", "")), str(args.get("uri", ""))
        connection = self._connection_of(server)
        if connection is None:
            return ToolOutput(f"no MCP server {server!r} serves resources (servers: "
                              f"{', '.join(self._servers()) or 'none'})", is_error=True)
        if not uri or len(uri) > MAX_URI_CHARS:
            return ToolOutput(f"a resource URI of 1 to {MAX_URI_CHARS:,} characters is needed", is_error=True)
        try:
            result = await connection.read_resource(uri)
        except McpServerError as exc:
            return ToolOutput(str(exc), is_error=True)
        return resource_output(server, uri, result)
