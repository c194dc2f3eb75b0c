"""The one internal message format: Anthropic-style content blocks.

Providers convert to and from their wire formats at the edge; everything
else (engine, transcript, widgets) sees only these models.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal, Sequence, Union

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr


class TextBlock(BaseModel):
    type: Literal["text"] = "text"
    text: str
    # OpenAI Responses: the output message's ``phase`` ("commentary" | "final_answer"), which the API
    # wants back on every assistant message; left out of the JSON when absent (older transcripts match).
    phase: str | None = Field(default=None, exclude_if=lambda value: value is None)
    # Words the user typed carry the id of the message they typed them in, and keep it when
    # a compaction keeps them: the engine knows the user's words by this field, never by
    # reading text (a summary may quote anything a tool printed or a model wrote).
    user_message_id: str | None = Field(default=None, exclude_if=lambda value: value is None)
    # A block of a compaction summary: the summary a model (or the extractive summarizer)
    # wrote, and the engine's frame around the user's kept words. Never the user's words, except
    # the blocks of its rules section, which also carry the user_message_id of the rule's message.
    in_summary: bool = Field(default=False, exclude_if=lambda value: not value)
    # Text an MCP server wrote that goes in the user's turn (a prompt run as /mcp__S__P, a resource
    # attached with @S:URI): "server:prompt NAME" / "server:resource URI". Never the user's words,
    # whatever it says: compaction and the audit do not take rules from it.
    from_mcp: str | None = Field(default=None, exclude_if=lambda value: value is None)
    # A paste of the user's that a compaction cut (head and tail, or its first line): the file its
    # whole text is saved in ("" when it could not be saved). The text says so where it was cut.
    paste_copy: str | None = Field(default=None, exclude_if=lambda value: value is None)


class ThinkingBlock(BaseModel):
    type: Literal["thinking"] = "thinking"
    thinking: str
    # Anthropic signs thinking blocks; it must be sent back unchanged.
    signature: str | None = None


class RedactedThinkingBlock(BaseModel):
    """Thinking the safety system encrypted (Anthropic). Opaque: never shown, never
    edited, sent back exactly as received with the rest of the thinking sequence."""

    type: Literal["redacted_thinking"] = "redacted_thinking"
    data: str


class ToolUseBlock(BaseModel):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)
    # Set by the provider when the output limit cut this call's arguments mid-way:
    # the agent must not run it (the arguments are not what the model meant).
    cut_at_output_limit: bool = False
    # The arguments exactly as the model wrote them (Chat Completions and Responses carry a string):
    # sent back byte for byte, not re-serialised from ``input``. None: the protocol gave an object.
    raw_arguments: str | None = Field(default=None, exclude_if=lambda value: value is None)


class ToolResultImage(BaseModel):
    """An image a tool returned for the model (an MCP image): base64 data and its media type."""

    media_type: str  # image/png, image/jpeg, image/gif or image/webp
    data: str  # base64


class ToolResultBlock(BaseModel):
    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str
    is_error: bool = False
    # Path of the full output on disk when the content was truncated or cleared.
    full_output_path: str | None = None
    # Images for the model, sent the way each wire protocol allows (see the providers);
    # left out of the JSON when there are none (older transcripts match).
    # default=[] and not default_factory=list: pydantic copies it for each block, and the signature of the
    # builtin list (asked of a factory) costs tokenize's patterns at import.
    images: list[ToolResultImage] = Field(default=[], exclude_if=lambda value: not value)
    # The user's hand on this result (the tool list's d and p), carried through history and transcript
    # so a resume keeps it, left out of the JSON when unset: ``pinned``, kept verbatim through
    # clearing and compaction; ``evicted``, taken out (the content is a stub naming the saved file).
    # Known by these fields, never by the text: a tool's output that reads like a stub is not one.
    pinned: bool = Field(default=False, exclude_if=lambda value: not value)
    evicted: bool = Field(default=False, exclude_if=lambda value: not value)


class OpaqueBlock(BaseModel):
    """A provider's own item, kept verbatim and sent back only to that provider.

    OpenAI Responses reasoning items (with ``encrypted_content``) and
    compaction items, Anthropic compaction blocks: the other wire protocols
    skip them, the transcript persists them like any block.
    """

    type: Literal["opaque"] = "opaque"
    provider: str  # "responses" | "anthropic": the wire protocol that made it and reads it back
    item: dict[str, Any]

    @property
    def kind(self) -> str:
        """The item's own type ("reasoning", "compaction", ...)."""
        kind = self.item.get("type")
        return kind if isinstance(kind, str) else ""


ContentBlock = Annotated[
    Union[TextBlock, ThinkingBlock, RedactedThinkingBlock, ToolUseBlock, ToolResultBlock, OpaqueBlock],
    Field(discriminator="type"),
]


class Message(BaseModel):
    model_config = ConfigDict(validate_assignment=False)

    role: Literal["user", "assistant"]
    content: list[ContentBlock]
    # Token estimate cache: counted once per message, never re-counted.
    _token_estimate: int | None = PrivateAttr(default=None)
    # Each block's tokens, counted once: the request's parts (the inspector) reuse them.
    _block_estimates: tuple[int, ...] | None = PrivateAttr(default=None)

    @classmethod
    def user(cls, text: str) -> "Message":
        return cls(role="user", content=[TextBlock(text=text)])

    @classmethod
    def typed_by_user(cls, text: str) -> "Message":
        """A message the user typed: its block carries a new id, kept through compactions."""
        return cls(role="user", content=[TextBlock(text=text, user_message_id=new_user_message_id())])

    @classmethod
    def assistant_text(cls, text: str) -> "Message":
        return cls(role="assistant", content=[TextBlock(text=text)])

    @property
    def text(self) -> str:
        """All text blocks joined (no thinking, no tool blocks)."""
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def tool_uses(self) -> list[ToolUseBlock]:
        return [b for b in self.content if isinstance(b, ToolUseBlock)]

    @property
    def tool_results(self) -> list[ToolResultBlock]:
        return [b for b in self.content if isinstance(b, ToolResultBlock)]

    def copy_with(self, content: Sequence[ContentBlock]) -> "Message":
        """A new message with other content (the token estimate is not carried over)."""
        return Message(role=self.role, content=list(content))


def new_user_message_id() -> str:
    return f"u-{uuid.uuid4().hex[:20]}"


class ToolSpec(BaseModel):
    """A tool definition as the model sees it (JSON schema for the input)."""

    name: str
    description: str
    input_schema: dict[str, Any]
