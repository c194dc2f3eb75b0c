"""history_problems: what both wire protocols would reject."""

from __future__ import annotations

from app.context.validate import history_problems
from app.kernel.messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock

from test_ctx_support import history_of


def use(uid: str) -> ToolUseBlock:
    return ToolUseBlock(id=uid, name="run_bash", input={"command": "ls"})


def result(uid: str) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=uid, content="ok")


def A(*blocks) -> Message:
    return Message(role="assistant", content=list(blocks))


def U(*blocks) -> Message:
    return Message(role="user", content=list(blocks))


def T(text: str) -> TextBlock:
    return TextBlock(text=text)


def test_valid_history_has_no_problems() -> None:
    history = [U(T("task")), A(T("looking"), use("a"), use("b")), U(result("a"), result("b"), T("more")),
               A(T("done")), U(T("thanks"))]
    assert history_problems(history) == []
    assert history_problems(history_of(4, calls=2)) == []


def test_empty_history() -> None:
    assert history_problems([]) == ["history is empty"]


def test_first_and_last_must_be_user() -> None:
    problems = history_problems([A(T("hi")), U(T("x")), A(T("y"))])
    assert any("first message" in p for p in problems)
    assert any("last message" in p for p in problems)


def test_roles_must_alternate() -> None:
    assert any("two user messages" in p for p in history_problems([U(T("a")), U(T("b"))]))


def test_unanswered_tool_use() -> None:
    problems = history_problems([U(T("t")), A(use("a"), use("b")), U(result("a"))])
    assert any("'b'" in p and "not answered" in p for p in problems)


def test_tool_use_answered_later_not_next_is_a_problem() -> None:
    history = [U(T("t")), A(use("a")), U(T("interjection")), A(T("ok")), U(result("a"))]
    problems = history_problems(history)
    assert any("not answered" in p for p in problems)
    assert any("answers no tool_use" in p for p in problems)


def test_orphan_result() -> None:
    problems = history_problems([U(T("t")), A(T("no calls")), U(result("zzz"))])
    assert any("answers no tool_use" in p for p in problems)
    assert any("answers no tool_use" in p for p in history_problems([U(result("x"))]))


def test_results_must_come_before_text() -> None:
    problems = history_problems([U(T("t")), A(use("a")), U(T("note"), result("a"))])
    assert any("after text" in p for p in problems)


def test_duplicate_ids_and_double_answers() -> None:
    history = [U(T("t")), A(use("a")), U(result("a")), A(use("a")), U(result("a"), result("a"))]
    problems = history_problems(history)
    assert any("duplicate tool_use id" in p for p in problems)
    assert any("answered twice" in p for p in problems)


def test_empty_content_and_empty_text() -> None:
    assert any("empty content" in p for p in history_problems([U()]))
    assert any("empty text" in p for p in history_problems([U(T("  "))]))


def test_misplaced_blocks() -> None:
    problems = history_problems([U(T("t"), use("a"), ThinkingBlock(thinking="x")),
                                 A(result("a")), U(T("x"))])
    assert any("tool_use in a user message" in p for p in problems)
    assert any("thinking in a user message" in p for p in problems)
    assert any("tool_result in an assistant message" in p for p in problems)
