"""OpenAI-compatible Chat Completions over httpx, streaming.

Three parts: ``to_openai_messages`` converts our Anthropic-style history to
the wire format, ``OpenAIStreamAssembler`` turns decoded SSE events into
stream events and the final message (pure: no I/O, easy to fuzz), and
``OpenAIProvider`` is the thin HTTP layer between them.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable, Unpack

from app.kernel.messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from app.providers.base import (
    Completed,
    ModelRequest,
    ProviderError,
    StreamCutError,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallStart,
    UsageUpdate,
)
from app.providers.http_base import HttpSettings, SseHttpProvider
from app.providers.json_fields import (
    BAD_ARGUMENTS_KEY,
    ArgumentBuffer,
    argument_problem,
    int_field,
    object_field,
)
from app.providers.sse import SSEEvent, assemble_stream, error_from_payload, event_object, stream_cut_error
from app.kernel.usage import Usage

RAW_ARGUMENTS_KEY = "_raw_arguments"

_STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "function_call": "tool_use", "length": "max_tokens"}


# OpenAI reasoning models reject "max_tokens" and want "max_completion_tokens";
# most OpenAI-compatible local servers only know "max_tokens". By model-name prefix
# (a router prefix such as "openai/" is ignored); the setting overrides the table.
MAX_COMPLETION_TOKENS_PREFIXES: tuple[str, ...] = ("o1", "o3", "o4", "gpt-5", "codex-")


def max_tokens_param_for(model: str, setting: bool | None = None) -> str:
    """The request field that caps the output for ``model`` (``setting`` True/False forces it)."""
    if setting is not None:
        return "max_completion_tokens" if setting else "max_tokens"
    name = model.strip().lower().rsplit("/", 1)[-1]
    if name.startswith(MAX_COMPLETION_TOKENS_PREFIXES):
        return "max_completion_tokens"
    return "max_tokens"


# ---- history -> wire ----

def to_openai_messages(system: str, messages: list[Message], *, deepseek_reasoning: bool = False,
                       images: bool = True) -> list[dict[str, Any]]:
    """Chat Completions messages: system first; each tool result becomes a ``tool`` message
    right after the assistant message that called it; user text after the results follows
    as a user message. With ``deepseek_reasoning`` an assistant turn that made tool calls
    carries its ``reasoning_content`` (DeepSeek rejects the request otherwise). A tool result's
    images follow its tool messages as a user message (``images``: False for servers without
    image input)."""
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    for message in messages:
        if message.role == "assistant":
            converted = _assistant_message(message, deepseek_reasoning)
            if converted is not None:
                out.append(converted)
            continue
        texts: list[str] = []
        image_parts: list[dict[str, Any]] = []
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                out.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": tool_result_text(block)})
                if images:
                    image_parts.extend(_tool_image_parts(block))
            elif isinstance(block, TextBlock) and block.text:
                texts.append(block.text)
        if image_parts:
            # A tool message carries text only: the images follow, after the last tool message of
            # the turn, as a user message naming the call each came from.
            out.append({"role": "user", "content": image_parts})
        if texts:
            out.append({"role": "user", "content": "\n\n".join(texts)})
    return out


def _assistant_message(message: Message, deepseek_reasoning: bool) -> dict[str, Any] | None:
    texts = [b.text for b in message.content if isinstance(b, TextBlock) and b.text]
    thinking = "".join(b.thinking for b in message.content if isinstance(b, ThinkingBlock))
    calls = [
        {"id": b.id, "type": "function", "function": {"name": b.name, "arguments": wire_arguments(b)}}
        for b in message.content if isinstance(b, ToolUseBlock)
    ]
    if not texts and not calls:
        return None  # an empty assistant turn is rejected by several servers
    # "" rather than null for a turn of tool calls alone: llama.cpp's server (llama-cpp-python)
    # answers a null content with HTTP 500, and every other server takes "" as no text.
    converted: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts)}
    if calls:
        converted["tool_calls"] = calls
        if deepseek_reasoning:
            converted["reasoning_content"] = thinking
    return converted


def wire_arguments(block: ToolUseBlock) -> str:
    """A call's arguments as a protocol that carries them as a string sends them back: the model's
    own bytes when they still say what ``input`` says (a call whose input was changed, or whose text
    was not a JSON object, is written from ``input``)."""
    raw = block.raw_arguments
    if raw is not None:
        try:
            if json.loads(raw) == block.input:
                return raw
        except ValueError:
            pass
    return json.dumps(block.input, ensure_ascii=False)


def _tool_image_parts(block: ToolResultBlock) -> list[dict[str, Any]]:
    """The images of one tool result as parts of a user message, after a line naming the call."""
    if not block.images:
        return []
    label = f"Images returned by tool call {block.tool_use_id} ({len(block.images)}):"
    return [{"type": "text", "text": label}, *(
        {"type": "image_url", "image_url": {"url": f"data:{image.media_type};base64,{image.data}"}}
        for image in block.images)]


def tool_result_text(block: ToolResultBlock) -> str:
    """A tool result for a wire format without an error flag (Chat Completions, Responses):
    a failed call says so in its text, once."""
    if block.is_error and not block.content.lower().startswith("error"):
        return f"Error: {block.content}"
    return block.content


# ---- wire -> events ----

@dataclass
class _ToolCallState:
    index: int
    id: str = ""
    name: str = ""
    arguments: ArgumentBuffer = field(default_factory=ArgumentBuffer)  # held up to a cap
    started: bool = False


def parse_openai_usage(raw: dict[str, Any]) -> Usage:
    """``prompt_tokens`` includes cached tokens; DeepSeek's hit/miss split wins when present."""
    prompt = raw.get("prompt_tokens")
    completion = raw.get("completion_tokens")
    hit = raw.get("prompt_cache_hit_tokens")
    miss = raw.get("prompt_cache_miss_tokens")
    details = object_field(raw, "prompt_tokens_details")
    # Some servers (OpenRouter, newer OpenAI models) report the tokens written to the
    # cache; like cached_tokens they are part of prompt_tokens.
    written = details.get("cache_write_tokens")
    written = written if isinstance(written, int) and written > 0 else 0
    if isinstance(hit, int):
        cached = hit
        uncached = miss if isinstance(miss, int) else (prompt - hit if isinstance(prompt, int) else None)
    else:
        cached = int_field(details, "cached_tokens")
        uncached = prompt - cached if isinstance(prompt, int) else None
    if uncached is not None and not isinstance(miss, int):
        written = min(written, max(0, uncached))
        uncached -= written
    if uncached is None and not isinstance(completion, int):
        return Usage()
    # The part of completion_tokens spent on reasoning (OpenAI reasoning models, DeepSeek's reasoner).
    reasoning = object_field(raw, "completion_tokens_details").get("reasoning_tokens")
    return Usage(
        input_tokens=max(0, uncached) if uncached is not None else None,
        cache_read_tokens=cached if uncached is not None else None,
        cache_write_tokens=written if uncached is not None else None,
        output_tokens=completion if isinstance(completion, int) else None,
        reasoning_tokens=reasoning if isinstance(reasoning, int) and not isinstance(reasoning, bool)
        and reasoning >= 0 else None,
    )


def parse_tool_arguments(raw: str | list[str]) -> dict[str, Any]:
    """Arguments JSON -> input. Anything but a JSON object keeps the raw text under
    ``_raw_arguments`` so the registry can tell the model its arguments were bad.
    Arguments too big or too deep are never parsed: ``_bad_arguments`` says why."""
    if isinstance(raw, ArgumentBuffer) and raw.over_cap:  # its fragments were not kept
        return {BAD_ARGUMENTS_KEY: argument_problem(raw.total_chars, None, max_chars=raw.max_chars)}
    if isinstance(raw, list):  # the fragments as they streamed
        raw = "".join(raw)
    problem = argument_problem(len(raw), raw)
    if problem is not None:
        return {BAD_ARGUMENTS_KEY: problem}
    if raw.strip() == "":
        return {}
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return {RAW_ARGUMENTS_KEY: raw}
    if not isinstance(value, dict):
        return {RAW_ARGUMENTS_KEY: raw}
    return value


def tool_use_block(call_id: str, name: str, tool_input: dict[str, Any], *, cut: bool,
                   no_arguments_yet: bool = False, raw_arguments: str | None = None) -> ToolUseBlock:
    """The assembled call. ``cut``: the output limit ended the message; a call whose
    arguments then do not parse was cut mid-way and is marked so it is never run
    (a complete call before the cut is still a good call). ``no_arguments_yet``: the
    last call of the message, cut before a single argument character arrived."""
    if cut and (RAW_ARGUMENTS_KEY in tool_input or no_arguments_yet):
        return ToolUseBlock(id=call_id, name=name, input={}, cut_at_output_limit=True)
    keep_raw = (raw_arguments is not None and raw_arguments.strip() != ""
                and RAW_ARGUMENTS_KEY not in tool_input and BAD_ARGUMENTS_KEY not in tool_input)
    return ToolUseBlock(id=call_id, name=name, input=tool_input, raw_arguments=raw_arguments if keep_raw else None)


class OpenAIStreamAssembler:
    """Decoded SSE events in, stream events out; ``finish()`` gives the Completed or raises.

    A message is complete only when a ``finish_reason`` arrived; anything less
    (cut stream, bare ``[DONE]``, empty body) is a StreamCutError, so no
    half-written message can come out of here.
    """

    def __init__(self, *, secret: str | None = None) -> None:
        self._secret = secret
        self._text: list[str] = []
        self._refusal: list[str] = []
        self._thinking: list[str] = []
        self._calls: dict[int, _ToolCallState] = {}
        self._last_call_index: int | None = None
        self._finish_reason: str | None = None
        self._done = False
        self._usage: Usage | None = None
        self._events_seen = 0

    def feed(self, sse: SSEEvent) -> list[StreamEvent]:
        self._events_seen += 1
        data = sse.data.strip()
        if data == "[DONE]":
            self._done = True
            return []
        if not data:
            return []
        chunk = event_object(data, unterminated=sse.unterminated, what="chunk")
        if chunk is None:
            return []
        if chunk.get("error") or sse.event == "error":
            raise error_from_payload(chunk, status=None, fallback="error inside the stream",
                                     secret=self._secret, in_stream=True)
        out: list[StreamEvent] = []
        choices = chunk.get("choices")
        if isinstance(choices, list):
            for choice in choices:
                if isinstance(choice, dict) and choice.get("index", 0) == 0:
                    self._choice(choice, out)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = parse_openai_usage(usage)
            out.append(UsageUpdate(self._usage))
        return out

    def _choice(self, choice: dict[str, Any], out: list[StreamEvent]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            for key in ("reasoning_content", "reasoning"):
                thinking = delta.get(key)
                if isinstance(thinking, str) and thinking:
                    self._thinking.append(thinking)
                    out.append(ThinkingDelta(thinking))
                    break
            content = delta.get("content")
            if isinstance(content, str) and content:
                self._text.append(content)
                out.append(TextDelta(content))
            # A safety refusal streams in its own field (content stays null): it is the reply.
            refusal = delta.get("refusal")
            if isinstance(refusal, str) and refusal:
                self._refusal.append(refusal)
                out.append(TextDelta(refusal))
            tool_calls = delta.get("tool_calls")
            if isinstance(tool_calls, list):
                for call in tool_calls:
                    if isinstance(call, dict):
                        self._tool_call(call, out)
        reason = choice.get("finish_reason")
        if isinstance(reason, str) and reason:
            self._finish_reason = reason

    def _tool_call(self, call: dict[str, Any], out: list[StreamEvent]) -> None:
        index = call.get("index")
        call_id = call.get("id") if isinstance(call.get("id"), str) else ""
        if not isinstance(index, int):
            # servers without `index`: a new id opens a call, otherwise it continues the last one
            known = next((s.index for s in self._calls.values() if call_id and s.id == call_id), None)
            if known is not None:
                index = known
            elif call_id or self._last_call_index is None:
                index = len(self._calls)
            else:
                index = self._last_call_index
        state = self._calls.get(index)
        if state is None:
            state = self._calls[index] = _ToolCallState(index)
        self._last_call_index = index
        # id and name are SET, never appended: some servers repeat them in every delta
        if call_id:
            state.id = call_id
        function = object_field(call, "function")
        name = function.get("name")
        if isinstance(name, str) and name:
            state.name = name
        arguments = function.get("arguments")
        fragment = ""
        if isinstance(arguments, str):
            fragment = arguments
        elif isinstance(arguments, dict):  # a few servers send the object itself
            fragment = json.dumps(arguments, ensure_ascii=False)
            state.arguments.clear()
        if fragment:
            state.arguments.append(fragment)
        if not state.started and state.name:
            state.started = True
            out.append(ToolCallStart(index=index, id=state.id, name=state.name))
            buffered = "".join(state.arguments)
            if buffered:
                out.append(ToolCallDelta(index=index, partial_json=buffered))
        elif state.started and fragment:
            out.append(ToolCallDelta(index=index, partial_json=fragment))

    @property
    def complete(self) -> bool:
        """The message has ended (what may still come is usage or the terminator)."""
        return self._finish_reason is not None

    def finish(self) -> Completed:
        if self._finish_reason is None:
            if self._done:  # [DONE] is an event: the stream was not empty
                raise StreamCutError("stream ended with [DONE] but no finish_reason")
            raise stream_cut_error(self._events_seen, "a finish_reason or [DONE]")
        content: list[Any] = []
        thinking = "".join(self._thinking)
        if thinking:
            content.append(ThinkingBlock(thinking=thinking))
        text = "".join(self._text)
        refusal = "".join(self._refusal)
        if text or refusal:
            content.append(TextBlock(text=text + ("\n\n" if text and refusal else "") + refusal))
        last_call = max(self._calls) if self._calls else None
        for index in sorted(self._calls):
            state = self._calls[index]
            if not state.name:
                raise ProviderError(f"tool call #{index} arrived without a name", error_type="bad_response")
            raw = "".join(state.arguments)
            content.append(tool_use_block(
                state.id or f"call_{uuid.uuid4().hex[:24]}", state.name,
                parse_tool_arguments(state.arguments), cut=self._finish_reason == "length",
                no_arguments_yet=index == last_call and not raw.strip(), raw_arguments=raw))
        stop_reason = _STOP_REASONS.get(self._finish_reason, self._finish_reason)
        if self._calls and stop_reason == "end_turn":
            stop_reason = "tool_use"  # some servers say "stop" after tool calls
        if refusal and not self._calls and stop_reason == "end_turn":
            stop_reason = "refusal"  # finish_reason says "stop": only the field tells
        return Completed(
            message=Message(role="assistant", content=content),
            usage=self._usage or Usage(),
            stop_reason=stop_reason,
        )


def assemble_openai_stream(chunks: Iterable[bytes | str], *, secret: str | None = None) -> list[StreamEvent]:
    """Decode and assemble a whole stream (tests, fuzzing); the last event is the Completed."""
    return assemble_stream(OpenAIStreamAssembler(secret=secret), chunks)


def chat_completion_to_events(payload: dict[str, Any]) -> list[SSEEvent]:
    """One chat.completion (from a server that ignored ``stream: true``) replayed as chunks."""
    if not isinstance(payload.get("choices"), list):
        return []
    chunk: dict[str, Any] = {"choices": []}
    for choice in payload["choices"]:
        if not isinstance(choice, dict):
            continue
        message = dict(choice.get("message") or {})
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            message["tool_calls"] = [dict(c, index=i) for i, c in enumerate(calls) if isinstance(c, dict)]
        chunk["choices"].append({"index": choice.get("index", 0), "delta": message,
                                 "finish_reason": choice.get("finish_reason")})
    if isinstance(payload.get("usage"), dict):
        chunk["usage"] = payload["usage"]
    return [SSEEvent("message", json.dumps(chunk)), SSEEvent("message", "[DONE]")]


# ---- the HTTP layer ----

class OpenAIProvider(SseHttpProvider):
    """One streaming Chat Completions call per ``stream``; one httpx client reused."""

    name = "openai"
    assembler_class = OpenAIStreamAssembler
    replay_reply = staticmethod(chat_completion_to_events)

    def __init__(
        self,
        model: str,
        base_url: str,
        api_key: str | None,
        *,
        deepseek_reasoning: bool = False,
        max_tokens_param: str | None = None,
        max_completion_tokens: bool | None = None,
        **settings: Unpack[HttpSettings],
    ) -> None:
        super().__init__(model, base_url, api_key, **settings)
        self.deepseek_reasoning = deepseek_reasoning
        # newer OpenAI models take "max_completion_tokens"; local servers only know "max_tokens"
        self.max_tokens_param = max_tokens_param or max_tokens_param_for(model, max_completion_tokens)

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai_messages(request.system, request.messages,
                                           deepseek_reasoning=self.deepseek_reasoning,
                                           images=not self.deepseek_reasoning),  # DeepSeek takes no images
            "stream": True,
            "stream_options": {"include_usage": True},
            self.max_tokens_param: self.max_tokens or request.max_tokens,
        }
        if request.tools:
            body["tools"] = [
                {"type": "function",
                 "function": {"name": t.name, "description": t.description, "parameters": t.input_schema}}
                for t in request.tools
            ]
            body["tool_choice"] = request.tool_choice
        body.update(self.extra_body)
        return body
