"""The extractive summary: what a successor needs, copied from the transcript."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from app.context.compaction import build_summary_history
from app.context.summarizer import (
    END_MARK,
    H_DONE,
    H_FINDINGS,
    H_PREFS,
    H_PROGRESS,
    H_TASK,
    extractive_summary,
    parse_summary,
)
from app.kernel.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock

ERROR_LINE = "2026-10-18 12:00:01 ERROR database connection refused"


def call(id_: str, name: str, text: str = "", **args) -> Message:
    content = ([TextBlock(text=text)] if text else []) + [ToolUseBlock(id=id_, name=name, input=args)]
    return Message(role="assistant", content=content)


def result(id_: str, content: str, is_error: bool = False, path: str | None = None) -> Message:
    return Message(role="user", content=[ToolResultBlock(tool_use_id=id_, content=content, is_error=is_error,
                                                         full_output_path=path)])


def numbered(source: str) -> str:
    return "\n".join(f"{n:>6}\t{line}" for n, line in enumerate(source.splitlines(), start=1))


MODELS = '"""The domain model."""\n\nclass Sku:\n    pass\n\nclass InventoryError(Exception):\n    pass\n\ndef parse_sku(text):\n    raise InventoryError("bad")\n'


def work_history() -> list[Message]:
    return [
        Message.user("Fix the failing import. Don't change public function signatures."),
        call("r1", "read_file", "Reading the models first.", path="inventory/models.py"),
        result("r1", numbered(MODELS)),
        call("b1", "run_bash", command="pytest -q"),
        result("b1", "F.\nFAILED tests/test_models.py::test_sku - AssertionError\n1 failed, 1 passed\n[exit code: 1]"),
        call("w1", "edit_file", path="inventory/models.py", old="pass", new="return None"),
        result("w1", "Edited inventory/models.py"),
        call("b2", "run_bash", command="sleep 999", timeout=1),
        result("b2", "[timed out after 1 s: the command and its whole process group were killed.]", is_error=True),
        call("b3", "run_bash", command="cat app.log"),
        result("b3", "2026-10-18 12:00:00 INFO request handled id=1\n\n… [output truncated: 15,188,949 characters in "
                     "total, 15,156,949 left out in the middle. Full output saved to /s/tool-results/b3.txt.] …\n\n"
                     f"{ERROR_LINE}\n[exit code: 0]", path="/s/tool-results/b3.txt"),
        Message(role="assistant", content=[TextBlock(text="The tests fail on Sku. Next I will run pytest -q again.")]),
        Message.user("Please always run the tests before you say it is done."),
    ]


def test_sections_in_the_compaction_prompts_order() -> None:
    text = extractive_summary(work_history())
    positions = [text.index(h) for h in (H_TASK, H_DONE, H_FINDINGS, H_PROGRESS, H_PREFS)]
    assert positions == sorted(positions)
    assert text.rstrip().endswith(END_MARK)


def test_first_and_latest_requests_verbatim() -> None:
    text = extractive_summary(work_history())
    assert "> Fix the failing import. Don't change public function signatures." in text
    assert "> Please always run the tests before you say it is done." in text


def test_done_so_far_lists_files_and_commands_with_exit_codes() -> None:
    text = extractive_summary(work_history())
    done = text[text.index(H_DONE):text.index(H_FINDINGS)]
    assert "- inventory/models.py — The domain model; classes Sku, InventoryError; functions parse_sku" in done
    assert "Files written or edited (1):\n- inventory/models.py — edit_file" in done
    assert "`pytest -q` → exit 1" in done
    assert "`sleep 999` → timed out after 1 s" in done
    assert "`cat app.log` → exit 0, output cut head+tail (15,188,949 chars, 15,156,949 left out; " \
           "full output: /s/tool-results/b3.txt)" in done


def test_key_findings_are_the_error_lines_of_commands_not_of_source_code() -> None:
    text = extractive_summary(work_history())
    findings = text[text.index(H_FINDINGS):text.index(H_PROGRESS)]
    assert "FAILED tests/test_models.py::test_sku - AssertionError" in findings
    assert ERROR_LINE in findings
    assert "InventoryError(Exception)" not in findings  # source that mentions "Error" is not an error seen
    assert "timed out" in findings


def test_findings_keep_only_the_last_ten() -> None:
    history = [Message.user("run it")]
    for i in range(30):
        history += [call(f"c{i}", "run_bash", command=f"step {i}"),
                    result(f"c{i}", f"ERROR number {i}\n[exit code: 1]")]
    findings = extractive_summary(history).split(H_FINDINGS)[1].split(H_PROGRESS)[0]
    assert "ERROR number 29" in findings and "ERROR number 20" in findings
    assert "ERROR number 19" not in findings


def test_in_progress_quotes_the_last_assistant_text_and_next_step() -> None:
    text = extractive_summary(work_history())
    progress = text[text.index(H_PROGRESS):text.index(H_PREFS)]
    assert "> The tests fail on Sku. Next I will run pytest -q again." in progress
    assert "- Next step: Next I will run pytest -q again." in progress


def test_user_preferences_are_the_users_own_sentences() -> None:
    prefs = extractive_summary(work_history()).split(H_PREFS)[1]
    assert "- Don't change public function signatures." in prefs
    assert "- Please always run the tests before you say it is done." in prefs
    assert "Fix the failing import" not in prefs


def test_a_second_compaction_carries_the_first_summarys_facts_forward() -> None:
    first = work_history()
    compacted = build_summary_history(extractive_summary(first), first)
    later = compacted + [
        call("r9", "read_file", "Reading storage.", path="inventory/storage.py"),
        result("r9", numbered('"""SQLite persistence."""\nclass Repository:\n    pass\n')),
        Message(role="assistant", content=[TextBlock(text="Storage read.")]),
        Message.user("now summarize the storage layer"),
    ]
    text = extractive_summary(later)
    assert "> Fix the failing import. Don't change public function signatures." in text  # still the first request
    assert "> now summarize the storage layer" in text
    assert "- inventory/models.py — The domain model" in text  # read before the first compaction
    assert "- inventory/storage.py — SQLite persistence; classes Repository" in text
    assert "`pytest -q` → exit 1" in text
    assert ERROR_LINE in text
    assert "- Please always run the tests before you say it is done." in text
    facts = parse_summary(text)
    assert facts is not None and facts.latest_request == "now summarize the storage layer"
    assert list(facts.files_read) == ["inventory/models.py", "inventory/storage.py"]


def test_an_empty_sections_placeholder_is_not_carried_as_a_fact() -> None:
    """No requirements and no error lines: a second summary still has none (the
    first one's "None stated." is a placeholder, not something the user said)."""
    first = [Message.user("list the files"), Message.assistant_text("Done.")]
    facts = parse_summary(extractive_summary(first))
    assert facts is not None and facts.preferences == [] and facts.findings == []
    compacted = build_summary_history(extractive_summary(first), first)
    second = extractive_summary(compacted + [Message.assistant_text("ok")])
    assert second.split(H_PREFS)[1].count("- ") == 1  # one placeholder line, not the old one carried too


def test_an_earlier_summary_in_another_format_is_carried_as_text() -> None:
    llm_summary = "The user wants the import fixed. I found that Sku parsing fails on lower case."
    compacted = build_summary_history(llm_summary, [Message.user("fix the import")])
    text = extractive_summary(compacted + [Message.assistant_text("ok")])
    assert "Earlier summary (carried forward):" in text
    assert "Sku parsing fails on lower case" in text
    assert "> fix the import" in text


def test_focus_is_stated_and_its_findings_come_first() -> None:
    text = extractive_summary(work_history(), focus="the database")
    assert "- Focus requested for this summary: the database" in text
    findings = text.split(H_FINDINGS)[1].split(H_PROGRESS)[0].strip().splitlines()
    assert "database" in findings[-1] or "database" in findings[0]


def test_size_capped_and_still_complete() -> None:
    history = [Message.user("read everything " + "very long request " * 400)]
    for i in range(300):
        history += [call(f"r{i}", "read_file", "Next file. " * 20, path=f"pkg/module_{i:03d}.py"),
                    result(f"r{i}", numbered(f'"""Module {i} does a lot of things."""\n' + "".join(
                        f"def function_{i}_{j}():\n    pass\n" for j in range(30))))]
    text = extractive_summary(history)
    assert len(text) <= 6_000
    for heading in (H_TASK, H_DONE, H_FINDINGS, H_PROGRESS, H_PREFS):
        assert heading in text
    assert text.rstrip().endswith(END_MARK)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["read_file", "run_bash", "write_file", "list_files", "text"]),
                          st.text(max_size=300), st.booleans()), max_size=25),
       st.text(max_size=2_000))
def test_any_history_gives_a_bounded_deterministic_summary(steps, first) -> None:
    history = [Message.user(first or "task")]
    for i, (name, payload, failed) in enumerate(steps):
        if name == "text":
            history += [Message.assistant_text(payload or "."), Message.user(payload or "go on")]
            continue
        args = {"command": payload} if name == "run_bash" else {"path": payload or "x", "content": payload}
        history += [call(f"t{i}", name, **args), result(f"t{i}", payload + "\n[exit code: 1]", is_error=failed)]
    text = extractive_summary(history)
    assert len(text) <= 6_000
    assert text == extractive_summary(history)
    assert text.startswith(H_TASK) and text.rstrip().endswith(END_MARK)
    assert parse_summary(text) is not None
