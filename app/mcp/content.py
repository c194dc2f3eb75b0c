"""An MCP tool result as a ToolOutput: what the model reads, what only the user sees.

- ``audience: ["user"]`` content is for the person at the screen: it goes to
  ``ToolOutput.for_user``, never to the model.
- Structured content is used only when nothing else came back: a server that
  sends both sends the same data twice (server-filesystem's reads did), and the
  model needs one copy.
- A ``resource_link`` becomes a line naming the URI and how to read it (the
  ``read_resource`` tool, app/mcp/resources.py), or, when its server serves no
  resources, saying so, so the model asks the user rather than guessing its content.
- Images become ``ToolResultImage``s for the providers; audio and binary resources are
  named with their size.
- A result the transport cut (``bounded_stdio`` marks it in ``_meta`` under a key the
  server cannot know) carries the path of the full response and its size.
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.kernel.messages import ToolResultImage
from app.tools.base import ToolOutput

if TYPE_CHECKING:
    from mcp_types import CallToolResult

# The ``_meta`` key under which the transport says it cut a result: random per process, so a
# server cannot forge it (its path would become the "full output" the viewer opens).
CUT_META_KEY = f"tidegauge/cut-{secrets.token_hex(8)}"
# Image types the three wire protocols accept (Anthropic's list; OpenAI takes the same).
MODEL_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
# Larger images are named, not sent: Anthropic refuses an image over 5 MB.
MAX_IMAGE_BYTES = 5 * 1024 * 1024


def _for_user_only(block: Any) -> bool:
    annotations = getattr(block, "annotations", None)
    audience = getattr(annotations, "audience", None) if annotations is not None else None
    return isinstance(audience, list) and bool(audience) and "assistant" not in audience


def _decoded_size(data: str) -> int:
    return len(data) * 3 // 4


def tool_output_from_result(result: CallToolResult, resources_of: str | None = None) -> ToolOutput:
    """What the model and the user get from one ``tools/call`` result. ``resources_of``: the
    server's name when it serves resources (a link then says how to read it: ``read_resource``)."""
    # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
    from mcp_types import (
        AudioContent,
        BlobResourceContents,
        EmbeddedResource,
        ImageContent,
        ResourceLink,
        TextContent,
        TextResourceContents,
    )

    for_model: list[str] = []
    for_user: list[str] = []
    images: list[ToolResultImage] = []
    for block in result.content or []:
        parts = for_user if _for_user_only(block) else for_model
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ImageContent):
            size = _decoded_size(block.data)
            usable = block.mime_type in MODEL_IMAGE_TYPES and size <= MAX_IMAGE_BYTES and _is_base64(block.data)
            if usable and parts is for_model:
                images.append(ToolResultImage(media_type=block.mime_type, data=block.data))
                parts.append(f"[image {block.mime_type}, {size:,} bytes]")
            else:
                why = "for the user" if parts is for_user else "not a type or size the model takes"
                parts.append(f"[image {block.mime_type}, {size:,} bytes: {why}, not sent]")
        elif isinstance(block, AudioContent):
            parts.append(f"[audio {block.mime_type}, {_decoded_size(block.data):,} bytes: not sent]")
        elif isinstance(block, ResourceLink):
            what = " ".join(x for x in (block.name, f"({block.mime_type})" if block.mime_type else "") if x)
            if resources_of is not None:
                parts.append(f"[resource link {block.uri} {what}: read it with read_resource "
                             f"(server {resources_of!r}, this uri) if you need its content]")
            else:
                parts.append(f"[resource link {block.uri} {what}: its server serves no resources tidegauge can "
                             "read; ask the user for its content or use a tool that reads it]")
        elif isinstance(block, EmbeddedResource):
            resource = block.resource
            if isinstance(resource, TextResourceContents):
                parts.append(resource.text)
            elif isinstance(resource, BlobResourceContents):
                parts.append(f"[resource {resource.uri} ({resource.mime_type or 'binary'}), "
                             f"{_decoded_size(resource.blob):,} bytes: binary, not sent]")
    if not for_model and not images and result.structured_content is not None:
        for_model.append(json.dumps(result.structured_content, ensure_ascii=False, indent=1, default=str))
    if not for_model and for_user:  # an empty result would read as "nothing happened"
        for_model.append(f"[{len(for_user)} part(s) of this result were for the user only: shown to them, "
                         "not sent to you]")
    output = ToolOutput("\n".join(for_model), is_error=bool(result.is_error), images=images,
                        for_user="\n".join(for_user))
    cut = (result.meta or {}).get(CUT_META_KEY) if isinstance(result.meta, dict) else None
    if isinstance(cut, dict):
        output.is_error = False  # the transport marked it an error only to skip the SDK's schema check
        path, full_size = cut.get("path"), cut.get("bytes")
        output.full_output_path = Path(path) if isinstance(path, str) else None
        if isinstance(full_size, int):
            output.original_chars = full_size
    return output


def cut_at_transport(result: Any) -> tuple[int, Path | None] | None:
    """(size in bytes, saved file) of an answer the transport cut (``bounded_stdio``), else None."""
    meta = getattr(result, "meta", None)
    cut = meta.get(CUT_META_KEY) if isinstance(meta, dict) else None
    if not isinstance(cut, dict) or not isinstance(cut.get("bytes"), int):
        return None
    path = cut.get("path")
    return cut["bytes"], Path(path) if isinstance(path, str) else None


def _is_base64(data: str) -> bool:
    try:
        base64.b64decode(data[:4096 - 4096 % 4] or data, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True
