"""The words of events a new user reads first (issue 29): plurals and sense."""

from __future__ import annotations

from app.kernel.describe import describe
from app.kernel.events import CompactionEvent, SessionMemoryEvent


def _compaction(**fields: object) -> CompactionEvent:
    base: dict[str, object] = dict(ok=True, trigger="manual", messages_before=12, messages_after=3,
                                   tokens_before=20_000, tokens_after=3_000)
    return CompactionEvent(**{**base, **fields})


def test_the_audit_line_reads_as_a_sentence_for_one_fact_and_for_many() -> None:
    assert "audit: the one fact checked is in the summary" in describe(_compaction(facts_checked=1)).text
    assert "audit: all 7 facts checked are in the summary" in describe(_compaction(facts_checked=7)).text
    assert "all 1 " not in describe(_compaction(facts_checked=1)).text


def test_a_memory_update_after_a_compaction_does_not_claim_to_cover_zero_messages() -> None:
    after_compaction = describe(SessionMemoryEvent(ok=True, memory_tokens=316, covered_messages=0)).text
    assert after_compaction == "session memory updated: ~316 tokens"
    covering = describe(SessionMemoryEvent(ok=True, memory_tokens=1_200, covered_messages=9)).text
    assert covering == "session memory updated: ~1.2K tokens, covering the first 9 messages of the context"
