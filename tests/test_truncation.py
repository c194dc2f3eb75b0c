"""The registry's one truncation: head + notice + tail, full output on disk, errors never crash."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.kernel.messages import ToolSpec
from app.tools.base import ToolContext, ToolInputError, ToolOutput
from app.context.truncation import truncate_head_tail, truncation_notice
from app.tools.registry import ToolRegistry, default_registry


def make_ctx(tmp_path: Path, call_id: str = "call_1") -> ToolContext:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    return ToolContext(workspace=workspace, tool_results_dir=tmp_path / "tool-results", call_id=call_id)


class EchoTool:
    """Returns its ``text`` argument; raises on demand."""

    mutating = False
    spec = ToolSpec(
        name="echo",
        description="echo",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        text = args["text"]
        if text == "bad input":
            raise ToolInputError("offset must be at least 1; call again with offset=1.")
        if text == "bug":
            raise KeyError("boom")
        if text == "cancel":
            raise asyncio.CancelledError
        return ToolOutput(text, is_error=text.startswith("error:"))


def echo_registry(max_output: int = 100) -> ToolRegistry:
    registry = ToolRegistry(max_output)
    registry.register(EchoTool())
    return registry


# --- truncate_head_tail ------------------------------------------------------------


def test_short_text_is_unchanged_and_zero_limit_disables() -> None:
    assert truncate_head_tail("x" * 100, 100) == "x" * 100
    assert truncate_head_tail("x" * 10_000, 0) == "x" * 10_000


def test_keeps_exactly_first_and_last_40_percent_around_one_notice() -> None:
    text = "".join(str(i % 10) for i in range(1_000))
    result = truncate_head_tail(text, 100, full_output_path="/s/tool-results/c1.txt")
    notice = truncation_notice(1_000, 920, "/s/tool-results/c1.txt")
    assert result == text[:40] + notice + text[-40:]
    assert "1,000 characters in total, 920 left out in the middle" in notice
    assert "Full output saved to /s/tool-results/c1.txt" in notice
    assert "grep" in notice and "head/tail" in notice and "offset and limit" in notice
    assert result.count("output truncated") == 1


def test_without_a_path_the_notice_does_not_invent_one() -> None:
    result = truncate_head_tail("a" * 500, 100)
    assert "saved to" not in result
    assert "500 characters in total, 420 left out" in result


def test_chinese_is_cut_by_characters_not_bytes() -> None:
    text = "".join(chr(0x4E00 + i % 2000) for i in range(20_000))  # 3 bytes each in UTF-8
    result = truncate_head_tail(text, 1_000)
    assert result.startswith(text[:400])
    assert result.endswith(text[-400:])
    assert "20,000 characters in total, 19,200 left out" in result
    result.encode("utf-8")  # no split characters


def test_original_chars_names_the_real_size() -> None:
    result = truncate_head_tail("h" * 300 + "t" * 300, 100, original_chars=15_000_000)
    assert "15,000,000 characters in total, 14,999,920 left out" in result


@given(text=st.text(min_size=0, max_size=3_000), max_chars=st.integers(min_value=1, max_value=2_000))
def test_result_is_always_shorter_than_limit_plus_notice(text: str, max_chars: int) -> None:
    result = truncate_head_tail(text, max_chars)
    if len(text) <= max_chars:
        assert result == text
        return
    keep = max_chars * 2 // 5
    notice = truncation_notice(len(text), len(text) - 2 * keep, None)
    assert result == text[:keep] + notice + text[len(text) - keep :]
    assert len(result) < max_chars + len(notice)


# --- the registry ------------------------------------------------------------------


async def test_registry_truncates_once_and_saves_the_full_output(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path, call_id="toolu_01/../x")
    text = "HEAD" + "m" * 10_000 + "TAIL"
    run = await echo_registry(100).run("echo", {"text": text}, ctx)
    assert run.truncated and not run.is_error
    assert run.content.startswith("HEAD") and run.content.endswith("TAIL")
    assert run.original_chars == len(text)
    assert run.kept_chars == 80
    saved = Path(run.full_output_path or "")
    assert saved.parent == ctx.tool_results_dir  # the call id cannot climb out
    assert saved.read_text(encoding="utf-8") == text
    assert f"Full output saved to {saved}" in run.content


async def test_small_results_are_not_saved(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    run = await echo_registry(100).run("echo", {"text": "ok"}, ctx)
    assert (run.content, run.truncated, run.full_output_path) == ("ok", False, None)
    assert run.original_chars == run.kept_chars == 2
    assert not ctx.tool_results_dir.exists()


async def test_max_output_zero_disables_truncation(tmp_path: Path) -> None:
    run = await echo_registry(0).run("echo", {"text": "z" * 100_000}, make_ctx(tmp_path))
    assert run.content == "z" * 100_000 and not run.truncated


class LoudEchoTool(EchoTool):
    """The same echo under another name: a second tool with a limit of its own."""

    spec = ToolSpec(name="loud_echo", description="echo", input_schema=EchoTool.spec.input_schema)


@pytest.mark.parametrize("own_limit", [0, 400])
async def test_a_tool_registered_with_its_own_limit_keeps_it_the_others_keep_the_registrys(
    tmp_path: Path, own_limit: int
) -> None:
    registry = echo_registry(100)
    registry.register(LoudEchoTool(), max_output=own_limit)
    text = "q" * 1_000
    own = await registry.run("loud_echo", {"text": text}, make_ctx(tmp_path, "c1"))
    again = await registry.run("loud_echo", {"text": text}, make_ctx(tmp_path, "c2"))
    other = await registry.run("echo", {"text": text}, make_ctx(tmp_path, "c3"))
    if own_limit == 0:  # never truncated, call after call
        assert own.content == again.content == text and not own.truncated and not again.truncated
    else:  # cut to its own limit: more kept than the registry's 100 would keep
        assert own.truncated and again.truncated and own.kept_chars == again.kept_chars
        assert other.kept_chars < own.kept_chars <= own_limit
    assert other.truncated and len(other.content) < len(text)


async def test_results_are_sanitized_before_the_model_sees_them(tmp_path: Path) -> None:
    run = await echo_registry(100).run("echo", {"text": "\x1b[31mred\x1b[0m\x00"}, make_ctx(tmp_path))
    assert run.content == "red\\x00"


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        ("nope", {}, "Unknown tool 'nope'. Available tools: echo"),
        ("echo", ["text"], "must be a JSON object"),
        ("echo", {"_raw_arguments": '{"text": "unterminated'}, "not valid JSON"),
        ("echo", {}, "missing required argument(s): text"),
        ("echo", {"text": "bad input"}, "call again with offset=1"),
        ("echo", {"text": "bug"}, "failed unexpectedly: KeyError"),
    ],
)
async def test_bad_calls_become_error_results_that_say_what_to_do(
    tmp_path: Path, name: str, args: Any, expected: str
) -> None:
    run = await echo_registry(10_000).run(name, args, make_ctx(tmp_path))
    assert run.is_error
    assert expected in run.content


async def test_cancellation_is_not_swallowed(tmp_path: Path) -> None:
    with pytest.raises(asyncio.CancelledError):
        await echo_registry().run("echo", {"text": "cancel"}, make_ctx(tmp_path))


def test_default_registry_has_the_six_tools() -> None:
    registry = default_registry(40_000)
    names = {spec.name for spec in registry.specs()}
    assert names == {"read_file", "list_files", "run_bash", "write_file", "edit_file", "read_saved_output"}
    assert {n for n in names if registry.is_mutating(n)} == {"run_bash", "write_file", "edit_file"}
    assert registry.get("read_file") is not None and registry.get("nope") is None
    assert not registry.is_mutating("nope")


# --- the seed's opening story ------------------------------------------------------


async def test_cat_of_a_15_mb_log_keeps_head_error_tail_and_the_notice(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path, call_id="call_cat")
    lines = [f"2026-10-18 12:00:00 INFO request handled id={i}\n" for i in range(299_999)]
    lines.append("2026-10-18 12:00:01 ERROR database connection refused\n")
    log = "".join(lines)
    (ctx.workspace / "app.log").write_text(log, encoding="utf-8")

    run = await default_registry(40_000).run("run_bash", {"command": "cat app.log"}, ctx)

    assert run.truncated and not run.is_error
    assert run.content.startswith("2026-10-18 12:00:00 INFO request handled id=0\n")
    tail = run.content[-200:]
    assert "2026-10-18 12:00:01 ERROR database connection refused\n[exit code: 0]" in tail
    assert run.content.count("output truncated") == 1
    assert f"Full output saved to {run.full_output_path}" in run.content
    assert f"{run.original_chars:,} characters in total" in run.content
    assert run.original_chars > len(log)  # the whole log plus the exit line
    assert len(run.content) < 40_000 + 400
    assert Path(run.full_output_path or "").read_text(encoding="utf-8") == log + "[exit code: 0]"


async def test_a_secret_never_reaches_the_model_or_the_saved_file(tmp_path: Path) -> None:
    from app.kernel import redact

    secret = "sk-ant-0123456789abcdefghij"
    redact.register_secret(secret)
    try:
        run = await echo_registry(100).run("echo", {"text": f"key={secret}\n" + "x" * 1_000 + secret}, make_ctx(tmp_path))
        assert secret not in run.content and run.content.startswith("key=[REDACTED]")
        saved = Path(run.full_output_path or "").read_text()
        assert secret not in saved and saved.count("[REDACTED]") == 2
    finally:
        redact.clear_secrets()


async def test_escape_heavy_output_that_cleans_below_the_limit_still_says_it_was_cut(tmp_path):
    """Only the ends of a huge output are cleaned; the model is still told the middle is gone."""
    from app.tools.base import ToolContext, ToolOutput
    from app.tools.registry import ToolRegistry

    class Noisy:
        from app.kernel.messages import ToolSpec
        spec = ToolSpec(name="noisy", description="d", input_schema={"type": "object", "properties": {}})
        mutating = False

        async def run(self, args, ctx):
            return ToolOutput(text="start\n" + "\x1b[31m" * 100_000 + "\nend")

    registry = ToolRegistry(max_output=40_000)
    registry.register(Noisy())
    ctx = ToolContext(workspace=tmp_path, tool_results_dir=tmp_path / "tr", call_id="c1")
    run = await registry.run("noisy", {}, ctx)
    assert run.truncated and run.full_output_path
    assert "output truncated" in run.content and "\x1b" not in run.content
    assert run.content.startswith("start") and run.content.endswith("end")
