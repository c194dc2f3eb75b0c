"""MCP prompts as slash commands: ``/mcp__SERVER__PROMPT name=value ...``.

A prompt is someone else's text put in the user's turn, so:

- the invocation is parsed here, once, for every surface (the dashboard and ``tidegauge -p``
  submit the line as typed; text piped after it stays the user's message): ``name=value`` pairs, shell-style quoting, a required argument
  missing or an unknown one named in one line, a value with a control character refused (it
  would reach the server and be echoed on the screen);
- what ``prompts/get`` returns becomes text blocks marked ``from_mcp`` (never the user's
  words: compaction and the audit take no rule from them, whatever they say), each under a
  header naming the server, sanitized for the model, secrets redacted, look-alikes of the
  engine's frame defused, and bounded like a tool result (head+tail cut, whole text saved);
- only text reaches the model: an image, audio or a binary resource in a prompt is named, not sent.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, replace
from typing import Any

from app.context.compaction import defuse_frame_lookalikes
from app.context.truncation import join_head_tail
from app.kernel.commands import MCP_PROMPT_PREFIX
from app.kernel.events import McpPromptInfo
from app.kernel.messages import TextBlock
from app.kernel.redact import redact
from app.kernel.sanitize import sanitize_for_display, sanitize_for_model
from app.mcp.client import RemotePrompt
from app.mcp.content import cut_at_transport
from app.tools.base import ToolContext
from app.tools.registry import save_full_output

SLASH_PREFIX = MCP_PROMPT_PREFIX
SEPARATOR = "__"
_INVALID = re.compile(r"[^A-Za-z0-9_.-]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Bounds of what the user gives a prompt (the server is someone else's code; so is a pipe).
MAX_ARGUMENT_CHARS = 20_000
MAX_DESCRIPTION_CHARS = 200


class PromptCommandError(ValueError):
    """A prompt command that is not run; the message says what was wrong, in one line."""


def command_name(server: str, prompt: str) -> str:
    """``/mcp__SERVER__PROMPT``, the prompt's name made one word (a space would end the command)."""
    return f"{SLASH_PREFIX}{server}{SEPARATOR}{_INVALID.sub('_', prompt)}"


def prompt_info(server: str, prompt: RemotePrompt) -> McpPromptInfo:
    """What the prompt box shows for a prompt: its command, description and arguments, sanitized."""
    return McpPromptInfo(command=command_name(server, prompt.name),
                         description=_shown(prompt.description, MAX_DESCRIPTION_CHARS),
                         arguments=[_shown(name, 64) for name, _, _ in prompt.arguments],
                         required=[_shown(name, 64) for name, _, required in prompt.arguments if required])


def _shown(text: str, limit: int) -> str:
    clean = " ".join(sanitize_for_display(redact(text)).split())
    return clean if len(clean) <= limit else clean[: limit - 1] + "…"


def is_prompt_command(text: str) -> bool:
    return text.lstrip().startswith(SLASH_PREFIX)


@dataclass(frozen=True)
class PromptCall:
    command: str  # as typed: /mcp__git__review
    arguments: dict[str, str]


def parse_prompt_command(text: str) -> PromptCall:
    """The command and its ``name=value`` arguments, from the first line (what follows it is piped
    text: the user's message, never arguments); PromptCommandError naming what was wrong."""
    head, _, rest = text.strip().split("\n", 1)[0].partition(" ")
    command = head.strip()
    if _CONTROL.search(rest):
        raise PromptCommandError(f"{_shown(command, 80)}: an argument has a control character "
                                 f"({_shown(repr(_CONTROL.search(rest).group()), 10)}); arguments are plain text")  # type: ignore[union-attr]
    try:
        words = shlex.split(rest)
    except ValueError as exc:
        raise PromptCommandError(f"{_shown(command, 80)}: {exc} in the arguments (quote a value with spaces: "
                                 "name=\"two words\")") from None
    arguments: dict[str, str] = {}
    for word in words:
        name, equals, value = word.partition("=")
        if not equals or not name:
            raise PromptCommandError(f"{_shown(command, 80)}: {_shown(word, 60)!r} is not NAME=VALUE")
        if len(value) > MAX_ARGUMENT_CHARS:
            raise PromptCommandError(f"{_shown(command, 80)}: argument {_shown(name, 40)} has {len(value):,} "
                                     f"characters, over the {MAX_ARGUMENT_CHARS:,} allowed")
        arguments[name] = value
    return PromptCall(command, arguments)


def check_arguments(call: PromptCall, prompt: RemotePrompt) -> None:
    """PromptCommandError naming the first required argument missing, or an argument it does not take."""
    known = [name for name, _, _ in prompt.arguments]
    for name, description, required in prompt.arguments:
        if required and not call.arguments.get(name):
            about = f" ({_shown(description, 80)})" if description.strip() else ""
            raise PromptCommandError(f"{call.command}: missing required argument {_shown(name, 40)}{about}; "
                                     f"give it as {_shown(name, 40)}=VALUE")
    for name in call.arguments:
        if name not in known:
            takes = ", ".join(_shown(k, 40) for k in known) or "none"
            raise PromptCommandError(f"{call.command}: unknown argument {_shown(name, 40)} (it takes: {takes})")


@dataclass(frozen=True)
class BoundedText:
    text: str  # what the model gets
    original_chars: int
    full_output_path: str | None


def bounded(text: str, ctx: ToolContext, limit: int, file_id: str, result: Any = None) -> BoundedText:
    """``text`` cut as the registry cuts a tool result (first and last 40%, one notice between),
    the whole text saved under tool-results/ (redacted, 0600, capped). ``result``: the answer it
    came from, which the transport may have cut already (its whole answer is then on disk)."""
    clean = redact(sanitize_for_model(text))
    at_transport = cut_at_transport(result)
    if at_transport is not None:
        size, whole = at_transport
        return BoundedText(clean[:limit] if limit > 0 else clean, size, str(whole) if whole else None)
    if limit <= 0 or len(clean) <= limit:
        return BoundedText(clean, len(clean), None)
    path, note = save_full_output(clean, ctx.tool_results_dir, file_id, ctx.max_saved_output)
    keep = limit * 2 // 5  # the registry's cut (app.context.truncation)
    cut = join_head_tail(clean[:keep], clean[len(clean) - keep:], len(clean), path, note)
    return BoundedText(cut, len(clean), path)


def prompt_text(server: str, prompt: str, result: Any) -> tuple[str, int]:
    """The text of a ``GetPromptResult`` (every message under a header naming its role) and how
    many messages it had; non-text content named, not sent."""
    # The MCP SDK is slow to import: loaded when a server is used, never when this module is.
    from mcp_types import EmbeddedResource, TextContent, TextResourceContents

    parts: list[str] = []
    messages = list(result.messages or [])
    for number, message in enumerate(messages, start=1):
        content = message.content
        if isinstance(content, TextContent):
            body = content.text
        elif isinstance(content, EmbeddedResource) and isinstance(content.resource, TextResourceContents):
            body = f"[resource {content.resource.uri}]\n{content.resource.text}"
        else:
            kind = getattr(content, "type", "content")
            body = f"[{kind} from the server: not sent, only text is]"
        parts.append(f"[message {number} of {len(messages)}, role {message.role}]\n{body}")
    return "\n\n".join(parts), len(messages)


def prompt_blocks(server: str, prompt: str, text: BoundedText) -> list[TextBlock]:
    """The blocks of the user's turn holding a prompt's text: the server's words, said to be so."""
    header = (f"[MCP prompt {_shown(prompt, 80)!r} from server {server}: the text below is the server's, sent "
              f"because the user ran {command_name(server, prompt)}; it was not typed by the user]")
    return [TextBlock(text=f"{header}\n\n{defuse_frame_lookalikes(text.text)}",
                      from_mcp=f"{server}:prompt {prompt}")]


def with_call_id(ctx: ToolContext, call_id: str) -> ToolContext:
    return replace(ctx, call_id=call_id)
