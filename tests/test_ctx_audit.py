"""Audited summaries: the checklist of a replaced history against its summary.

Each test leaves deliberate items out of a summary and expects exactly those
back; a summary that names everything gets nothing appended.
"""

from __future__ import annotations

from app.context.audit import CHECKED_FACTS_HEADER, append_checked_facts, audit_summary, extract_facts
from app.kernel.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock


def call(call_id: str, name: str, **args) -> Message:
    return Message(role="assistant", content=[ToolUseBlock(id=call_id, name=name, input=args)])


def result(call_id: str, content: str, is_error: bool = False) -> Message:
    return Message(role="user", content=[ToolResultBlock(tool_use_id=call_id, content=content, is_error=is_error)])


HISTORY = [
    Message.user("Refactor the config loader. Do not change the public API. You must keep Python 3.9 support."),
    call("c1", "read_file", path="app/wiring/config.py"),
    result("c1", "1\timport os\n"),
    call("c2", "edit_file", path="app/wiring/config.py", old="a", new="b"),
    result("c2", "edited app/wiring/config.py"),
    call("c3", "write_file", path="tests/test_loader.py", content="..."),
    result("c3", "wrote tests/test_loader.py"),
    call("c4", "run_bash", command="pytest -q tests/test_loader.py"),
    result("c4", "F.\nE   AssertionError: expected 3 got 4\n1 failed, 1 passed\n[exit code: 1]"),
    call("c5", "run_bash", command="ruff check app"),
    result("c5", "All checks passed!\n[exit code: 0]"),
    call("c6", "read_file", path="docs/missing.md"),
    result("c6", "File not found: docs/missing.md", is_error=True),
    call("c7", "run_bash", command="python -m build"),
    result("c7", "error: no pyproject\n[exit code: 2]"),
    call("c8", "run_bash", command="python -m build"),
    result("c8", "built dist/x.whl\n[exit code: 0]"),
    Message.assistant_text("One test still fails."),
    Message.user("Now fix the failing test, and always explain the cause first."),
]

COMPLETE = """## Task goal and acceptance criteria
Refactor the config loader; do not change the public API; must keep Python 3.9 support.
## Done so far
Edited app/wiring/config.py. Wrote tests/test_loader.py. Ran pytest -q tests/test_loader.py (exit code 1):
AssertionError: expected 3 got 4. Ran ruff check app (exit 0). python -m build failed, then passed.
docs/missing.md does not exist (read failed).
## In progress / next step
Now fix the failing test, and always explain the cause first.
"""


def kinds(items) -> list[str]:
    return [f.kind for f in items]


def test_the_checklist_holds_each_kind_of_fact_in_order():
    facts = extract_facts(HISTORY)
    texts = [f.text for f in facts]
    assert texts[:2] == ["file edited: app/wiring/config.py", "file written: tests/test_loader.py"]
    assert "ran `pytest -q tests/test_loader.py` → exit code 1" in texts
    assert "ran `ruff check app` → exit code 0" in texts
    assert "ran `python -m build` → exit code 2" in texts and "ran `python -m build` → exit code 0" in texts
    errors = [t for t in texts if t.startswith("unresolved error")]
    # the build failed and then succeeded: resolved; the test failure and the missing file are open
    assert errors == ["unresolved error from run_bash(pytest -q tests/test_loader.py): "
                      "E AssertionError: expected 3 got 4",
                      "unresolved error from read_file(docs/missing.md): File not found: docs/missing.md"]
    assert "the user's latest request: Now fix the failing test, and always explain the cause first." in texts
    # the user's sentences are not taken by their words: every message is kept whole by the summary
    assert [t for t in texts if t.startswith("user constraint")] == []


def test_a_summary_naming_everything_gets_nothing_appended():
    audit = audit_summary(HISTORY, COMPLETE)
    assert audit.missing == []
    assert append_checked_facts(COMPLETE, audit) == COMPLETE
    assert CHECKED_FACTS_HEADER not in append_checked_facts(COMPLETE, audit)


def test_deliberate_omissions_come_back_exactly():
    omitted = (COMPLETE
               .replace("Edited app/wiring/config.py. ", "")
               .replace("docs/missing.md does not exist (read failed).\n", "")
               .replace("; must keep Python 3.9 support", ""))
    audit = audit_summary(HISTORY, omitted)
    assert audit.added == ["file edited: app/wiring/config.py",
                           "unresolved error from read_file(docs/missing.md): File not found: docs/missing.md"]
    text = append_checked_facts(omitted, audit)
    assert text.startswith(omitted.rstrip())
    section = text[text.index(CHECKED_FACTS_HEADER):]
    assert [line[2:] for line in section.splitlines() if line.startswith("- ")] == audit.added


def test_an_empty_summary_gets_the_whole_checklist():
    audit = audit_summary(HISTORY, "")
    assert audit.missing == audit.facts and len(audit.facts) == len(extract_facts(HISTORY))


def test_messages_kept_verbatim_count_as_named():
    latest = HISTORY[-1]
    without_request = COMPLETE.replace("Now fix the failing test, and always explain the cause first.\n", "")
    assert "request" in kinds(audit_summary(HISTORY, without_request).missing)
    assert "request" not in kinds(audit_summary(HISTORY, without_request, kept=[latest]).missing)


def test_a_request_paraphrased_with_most_words_counts_as_named():
    history = [Message.user("Never push to main without asking me.")]
    named = audit_summary(history, "The user said never to push to main without asking them first.")
    assert [f.kind for f in named.missing] == []
    unnamed = audit_summary(history, "The user wants the tests fixed.")
    assert [f.text for f in unnamed.missing] == ["the user's latest request: Never push to main without asking me."]


def test_earlier_summaries_and_instructions_are_not_user_requests():
    from app.context.compaction import SUMMARY_INTRO

    history = [Message.user(f"{SUMMARY_INTRO}\n\nold summary"),
               Message(role="user", content=[TextBlock(text="[Context compaction] write a summary")])]
    assert [f for f in extract_facts(history) if f.kind in ("request", "constraint")] == []


def test_many_commands_list_the_latest_and_count_the_rest():
    history: list[Message] = [Message.user("go")]
    for i in range(20):
        history += [call(f"r{i}", "run_bash", command=f"echo step-{i}"), result(f"r{i}", f"step-{i}\n[exit code: 0]")]
    commands = [f.text for f in extract_facts(history) if f.kind == "command"]
    assert commands[0] == "8 earlier commands not listed here"
    assert commands[-1] == "ran `echo step-19` → exit code 0" and len(commands) == 13
