"""The request store: each part kept once, redacted, private; its diff names what a
micro-compaction cleared; what a crash or another user leaves in the folder does no harm."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from app.context.pruning import stub_for
from app.context.request_parts import PartsMemo, request_parts
from app.kernel.messages import Message, TextBlock, ToolResultBlock, ToolSpec, ToolUseBlock
from app.kernel.redact import REDACTED, clear_secrets, register_secret
from app.kernel.request_store import INDEX_NAME, PARTS_NAME, RequestEnvelope, RequestStore, StoredRequests, apportion

TOOLS = [ToolSpec(name="read_file", description="Read a file.", input_schema={"type": "object"})]


def _turn(i: int, content: str) -> list[Message]:
    use = ToolUseBlock(id=f"c{i}", name="read_file", input={"path": f"f{i}.txt"})
    return [Message(role="assistant", content=[TextBlock(text=f"reading f{i}"), use]),
            Message(role="user", content=[ToolResultBlock(tool_use_id=f"c{i}", content=content)])]


MEMO = PartsMemo()


def _record(store: RequestStore, history: list[Message], gauge: int | None = None) -> int:
    parts = request_parts("You are a test.", "", TOOLS, history, memo=MEMO)
    return store.record(parts, RequestEnvelope(number=0, gauge_tokens=gauge or sum(p.tokens for p in parts)))


def test_two_hundred_requests_over_a_growing_history_keep_each_part_once(tmp_path: Path) -> None:
    store = RequestStore(tmp_path / "requests")
    history = [Message.typed_by_user("read every file")]
    sent = once = 0
    for i in range(200):
        turn = _turn(i, f"file {i}: " + "lorem ipsum " * 40)
        history += turn
        _record(store, history)
        once += sum(len(m.model_dump_json()) for m in turn)
        sent += once
    kept = sum(f.stat().st_size for f in (tmp_path / "requests").iterdir())
    assert sent > 80 * once  # what keeping copies would cost
    assert kept < 3 * once
    stored = StoredRequests.load(tmp_path / "requests")
    assert stored.count == 200
    assert [p.text for p in stored.parts(200)] == [p.text for p in request_parts("You are a test.", "", TOOLS, history)]
    assert len(stored.parts(1)) == 1 + 1 + 1 + 3  # system, tool, the user's words, one turn's three blocks


def test_the_diff_after_a_micro_compaction_names_the_results_it_cleared(tmp_path: Path) -> None:
    store = RequestStore(tmp_path / "requests")
    history = [Message.typed_by_user("look"), *_turn(1, "one " * 500), *_turn(2, "two " * 500)]
    _record(store, history)
    use = history[1].tool_uses[0]
    cleared = ToolResultBlock(tool_use_id="c1", content=stub_for(history[2].tool_results[0], use),
                              full_output_path="/saved/c1.txt")
    after = [history[0], history[1], history[2].copy_with([cleared]), *history[3:]]
    _record(store, after)

    diff = StoredRequests.load(tmp_path / "requests").diff(2)
    assert diff["added"] == [] and diff["removed"] == []
    [changed] = diff["changed"]
    assert changed.origin == "read_file · call c1 · cleared" and changed.kind == "tool_result"
    assert changed.tokens_before is not None and changed.tokens_before > 400 > changed.tokens
    assert changed.as_json()["tokens_before"] == changed.tokens_before


def test_a_secret_in_a_tool_result_is_never_written(tmp_path: Path) -> None:
    secret = "sk-live-request-store-7f3a9c2e1b"
    register_secret(secret)
    try:
        store = RequestStore(tmp_path / "requests")
        _record(store, [Message.typed_by_user("go"), *_turn(1, f"API_KEY={secret}\n")])
        for path in (tmp_path / "requests").iterdir():
            data = path.read_bytes()
            assert secret.encode() not in data
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE((tmp_path / "requests").stat().st_mode) == 0o700
        [result] = [p for p in StoredRequests.load(tmp_path / "requests").parts(1) if p.kind == "tool_result"]
        assert result.text == f"API_KEY={REDACTED}\n"
    finally:
        clear_secrets()


@pytest.mark.parametrize("name", [PARTS_NAME, INDEX_NAME])
def test_a_link_planted_in_the_store_is_refused_not_followed(tmp_path: Path, name: str) -> None:
    folder = tmp_path / "requests"
    folder.mkdir(mode=0o700)
    elsewhere = tmp_path / "victim.txt"
    elsewhere.write_text("untouched")
    os.symlink(elsewhere, folder / name)
    with pytest.raises(OSError):
        _record(RequestStore(folder), [Message.typed_by_user("go")])
    assert elsewhere.read_text() == "untouched"


def test_a_line_cut_by_a_crash_is_skipped(tmp_path: Path) -> None:
    store = RequestStore(tmp_path / "requests")
    history = [Message.typed_by_user("go"), *_turn(1, "x")]
    _record(store, history)
    with open(tmp_path / "requests" / INDEX_NAME, "a") as index:
        index.write('{"keep": 3, "add": ["abc"')  # the process died mid-line
    stored = StoredRequests.load(tmp_path / "requests")
    assert stored.count == 1
    # the next run appends after it and counts on
    again = RequestStore(tmp_path / "requests")
    with open(tmp_path / "requests" / INDEX_NAME, "a") as index:
        index.write("\n")
    assert _record(again, history + _turn(2, "y")) == 2
    assert len(StoredRequests.load(tmp_path / "requests").parts(2)) == len(stored.parts(1)) + 3


def test_parts_are_apportioned_to_the_gauge_and_the_cache_serves_a_prefix(tmp_path: Path) -> None:
    assert apportion([10, 20, 30], 66) == [11, 22, 33]
    assert sum(apportion([7, 13, 1, 1, 1], 1_000)) == 1_000
    store = RequestStore(tmp_path / "requests")
    history = [Message.typed_by_user("go"), *_turn(1, "word " * 300)]
    parts = request_parts("You are a test.", "", TOOLS, history)
    estimate = sum(p.tokens for p in parts)
    prefix = parts[0].tokens + parts[1].tokens
    store.record(parts, RequestEnvelope(number=0, gauge_tokens=estimate * 2, cache_read_tokens=prefix * 2))
    views = StoredRequests.load(tmp_path / "requests").views(1)
    assert sum(v.tokens for v in views) == estimate * 2
    assert [v.cached for v in views] == [True, True] + [False] * (len(views) - 2)


def test_a_tool_result_holding_escape_sequences_is_printed_inert(tmp_path: Path) -> None:
    """A tool's output is anyone's text: `inspect`'s table never writes its escapes to the terminal."""
    from app.surfaces.inspect_output import inspect_text

    hostile = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x1b[31mowned\x1b[0m\r\n"
    store = RequestStore(tmp_path / "requests")
    _record(store, [Message.typed_by_user("go"), *_turn(1, hostile)])
    stored = StoredRequests.load(tmp_path / "requests")
    [result] = [p for p in stored.parts(1) if p.kind == "tool_result"]
    assert result.text == hostile  # kept as sent: the JSON output escapes it
    text = inspect_text("s", stored, 1, diff=False)
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text
    assert "owned" in text


def test_a_reader_refreshed_sees_only_what_was_appended(tmp_path: Path) -> None:
    """The dashboard keeps one reader and refreshes it as requests are kept."""
    store = RequestStore(tmp_path / "requests")
    history = [Message.typed_by_user("go"), *_turn(1, "first")]
    _record(store, history)
    reader = StoredRequests.load(tmp_path / "requests")
    assert reader.count == 1
    _record(store, history + _turn(2, "second"))
    with open(tmp_path / "requests" / INDEX_NAME, "a") as index:
        index.write('{"keep": 0, "add": [')  # a line still being written: not read yet
    reader.refresh()
    assert reader.count == 2
    assert [p.text for p in reader.parts(2)][-1] == "second"
    assert [v.change for v in reader.diff(2)["added"]] == ["added"] * 3


def test_a_history_counted_for_the_gauge_is_not_counted_again_for_the_inspector(monkeypatch: pytest.MonkeyPatch) -> None:
    """A resumed session's first request counts its history once: the gauge's estimate and the
    inspector's parts share each block's count, and the tools' definitions are counted once per
    memo however many requests carry them (both were counted again, a third of a demo run)."""
    from app.context import tokens

    history = [Message.typed_by_user("go")]
    for i in range(20):
        history += _turn(i, f"line {i} of an output\n" * 50)
    counted: list[str] = []
    real_count = tokens.count_tokens

    def counting(text: str) -> int:
        counted.append(text)
        return real_count(text)

    monkeypatch.setattr(tokens, "count_tokens", counting)
    gauge = tokens.estimate_messages(history)
    counted_by_the_gauge = len(counted)
    memo = PartsMemo()
    parts = request_parts("You are a test.", "", TOOLS, history, memo=memo)
    request_parts("You are a test.", "", TOOLS, [*history, Message.typed_by_user("more")], memo=memo)
    # Counted again: only the tool's name, description and schema (once for both requests) and the
    # new message (the system prompt is counted apart, by request_parts' own count_tokens).
    assert counted[counted_by_the_gauge:] == ["read_file", "Read a file.", '{"type":"object"}', "more"]
    assert sum(p.tokens for p in parts[2:]) == gauge  # the parts of the messages add up to the gauge's figure
